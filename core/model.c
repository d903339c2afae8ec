/* model.c - MoE model presets, key=value model files and per-field overrides (model.h). */
#include "model.h"

#include "text.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

/* Facts from each model's public config (fields as in docs/CSV.md, Model files). Sizes are the
 * config.json fields of each model's Hugging Face repository: hidden_size, moe_intermediate_size
 * (intermediate_size for Mixtral and gpt-oss), the routed expert count, num_experts_per_tok, the
 * shared expert count and the MoE layers. For memory (docs/planning.md, "Memory per GPU"):
 * `params` is the total the model card states; `attn_layers` is num_hidden_layers (every layer has
 * attention); the KV cache per token and layer is kv_heads · kv_head_dim elements. */
#define SHAPE(n, h, d, e, k, s, l) .name = n, .hidden = h, .ffn = d, .experts = e, .topk = k,       \
                                   .shared = s, .layers = l
const struct mp_model mp_model_presets[] = {
    /* deepseek-ai/DeepSeek-V3: 671B total (card; the 685B download adds the 14B MTP module);
     * num_hidden_layers 61, first_k_dense_replace 3 (so 58 MoE layers); MLA caches
     * kv_lora_rank 512 + qk_rope_head_dim 64 per token and layer, shared by all 128 heads. */
    {SHAPE("deepseek-v3", 7168, 2048, 256, 8, 1, 58), .params = 671e9, .attn_layers = 61,
     .kv_heads = 1, .kv_head_dim = 512 + 64},
    /* moonshotai/Kimi-K2-Instruct: about 1.04T total (the card's "1T", 1.04 trillion in the
     * technical report; rounded, so its non-expert share is approximate); num_hidden_layers 61,
     * first_k_dense_replace 1; MLA as DeepSeek-V3: kv_lora_rank 512 + qk_rope_head_dim 64. */
    {SHAPE("kimi-k2", 7168, 2048, 384, 8, 1, 60), .params = 1.04e12, .attn_layers = 61,
     .kv_heads = 1, .kv_head_dim = 512 + 64},
    /* Qwen/Qwen3-235B-A22B: 235B total; num_hidden_layers 94; num_key_value_heads 4,
     * head_dim 128. */
    {SHAPE("qwen3-235b-a22b", 4096, 1536, 128, 8, 0, 94), .params = 235e9, .attn_layers = 94,
     .kv_heads = 4, .kv_head_dim = 2 * 128},
    /* Qwen/Qwen3-30B-A3B: 30.5B total; num_hidden_layers 48; num_key_value_heads 4,
     * head_dim 128 (the model card: "30.5B in total", 48 layers, "32 for Q and 4 for KV", 128
     * experts, 8 activated). */
    {SHAPE("qwen3-30b-a3b", 2048, 768, 128, 8, 0, 48), .params = 30.5e9, .attn_layers = 48,
     .kv_heads = 4, .kv_head_dim = 2 * 128},
    /* mistralai/Mixtral-8x7B-v0.1: 46.7B total; num_hidden_layers 32; num_key_value_heads 8,
     * head_dim hidden_size / num_attention_heads = 4096 / 32 = 128 (config.json of
     * mistralai/Mixtral-8x7B-Instruct-v0.1 at eba92302: hidden_size 4096, intermediate_size
     * 14336, num_local_experts 8, num_experts_per_tok 2, the same shape). */
    {SHAPE("mixtral-8x7b", 4096, 14336, 8, 2, 0, 32), .params = 46.7e9, .attn_layers = 32,
     .kv_heads = 8, .kv_head_dim = 2 * 128},
    /* mistralai/Mixtral-8x22B-v0.1: 141B total; num_hidden_layers 56; num_key_value_heads 8,
     * head_dim 6144 / 48 = 128. */
    {SHAPE("mixtral-8x22b", 6144, 16384, 8, 2, 0, 56), .params = 141e9, .attn_layers = 56,
     .kv_heads = 8, .kv_head_dim = 2 * 128},
    /* openai/gpt-oss-120b: 116.8B total (card); num_hidden_layers 36; num_key_value_heads 8,
     * head_dim 64. Every other layer attends to a 128-token sliding window, whose cache stays at
     * 128 tokens: counting all 36 layers at full context overstates its KV cache (by up to half). */
    {SHAPE("gpt-oss-120b", 2880, 2880, 128, 4, 0, 36), .params = 116.8e9, .attn_layers = 36,
     .kv_heads = 8, .kv_head_dim = 2 * 64},
    /* The first seed document: 2.8T total parameters, 30B active, deployed on 64 80 GB GPUs as
     * TP4 (or 8) × EP16 (or 32). It gives no attention configuration: MLA as Kimi-K2 (1 × 576)
     * and 60 attention layers are assumptions. 2.8T does not agree with the shape: its routed
     * experts are 128 · 60 · 3·4096·2048 = 193B parameters, so 2.6T would be non-expert
     * (docs/planning.md, "Memory per GPU"). */
    {SHAPE("seed-k3", 4096, 2048, 128, 8, 1, 60),
     .note = "128 experts, top-8, 1 shared, H 4096 and 2.8T parameters from the first seed "
             "document; D 2048, 60 layers and the KV cache are assumptions; the 2.8T does not "
             "agree with this shape (docs/planning.md)",
     .params = 2.8e12, .attn_layers = 60, .kv_heads = 1, .kv_head_dim = 512 + 64},
};
#undef SHAPE
const int mp_model_npresets = (int)(sizeof mp_model_presets / sizeof mp_model_presets[0]);

/* The keys of a model file, in the order "missing" errors report them: the shape (the first
 * K_REQUIRED are needed without a base), the KV-cache keys, then name, base and params. */
enum { K_HIDDEN, K_FFN, K_EXPERTS, K_TOPK, K_SHARED, K_LAYERS, K_REQUIRED, K_ATTN_LAYERS = K_REQUIRED,
       K_KV_HEADS, K_KV_HEAD_DIM, K_NUMERIC, K_NAME = K_NUMERIC, K_BASE, K_PARAMS, K_COUNT };
static const char *const key_names[K_COUNT] = {
    "hidden",   "ffn",         "experts", "topk", "shared", "layers", "attn_layers",
    "kv_heads", "kv_head_dim", "name",    "base", "params"};
static const char accepted_keys[] = "name, base, hidden, ffn, experts, topk, shared, layers, "
                                    "params, attn_layers, kv_heads, kv_head_dim";

double mp_model_routed_params(const struct mp_model *m)
{
    return (double)m->experts * m->layers * 3.0 * m->hidden * m->ffn;
}

double mp_model_shared_params(const struct mp_model *m)
{
    return (double)m->shared * m->layers * 3.0 * m->hidden * m->ffn;
}

double mp_model_nonexpert_params(const struct mp_model *m)
{
    double rest = m->params - mp_model_routed_params(m) - mp_model_shared_params(m);
    return rest > 0 ? rest : 0;
}

/* After `to` took new sizes from `from`: keep from's non-expert parameters under the new experts. */
static void keep_nonexpert(const struct mp_model *from, struct mp_model *to)
{
    int same = from->hidden == to->hidden && from->ffn == to->ffn &&
               from->experts == to->experts && from->shared == to->shared &&
               from->layers == to->layers;
    if (from->params > 0 && !same)
        to->params = mp_model_nonexpert_params(from) + mp_model_routed_params(to) +
                     mp_model_shared_params(to);
}

static const struct mp_model *find_preset(const char *name)
{
    for (int i = 0; i < mp_model_npresets; i++)
        if (strcmp(mp_model_presets[i].name, name) == 0)
            return &mp_model_presets[i];
    return NULL;
}

/* "a|b|c" of every preset name. */
static void preset_names(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < mp_model_npresets && used < len; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i ? "|" : "", mp_model_presets[i].name);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

static int *model_field(struct mp_model *m, int key)
{
    switch (key) {
    case K_HIDDEN: return &m->hidden;
    case K_FFN: return &m->ffn;
    case K_EXPERTS: return &m->experts;
    case K_TOPK: return &m->topk;
    case K_SHARED: return &m->shared;
    case K_LAYERS: return &m->layers;
    case K_ATTN_LAYERS: return &m->attn_layers;
    case K_KV_HEADS: return &m->kv_heads;
    case K_KV_HEAD_DIM: return &m->kv_head_dim;
    default: return NULL;
    }
}

/* Strict decimal int >= `min`; -1 when `s` is not one. */
static int parse_count(const char *s, int min, int *out)
{
    if (!isdigit((unsigned char)*s))
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < min || v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}



/* Parse a key=value model file. Keys may come in any order: "base" is applied first, then every
 * other key overrides the base's field. Each key may appear once. */
static int read_model_file(const char *path, struct mp_model *out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        mp_usage("model file %s: cannot open it", path);
        return MP_ERR_USAGE;
    }
    int have[K_COUNT] = {0};
    int val[K_NUMERIC] = {0};
    double params = 0;
    char name[sizeof out->name] = "";
    const struct mp_model *base = NULL;
    char line[1024];
    int lineno = 0, rc = MP_OK;

    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n' && !feof(f)) {
            mp_usage("model file %s line %d: line longer than %zu characters", path, lineno,
                     sizeof line - 2);
            rc = MP_ERR_USAGE;
            goto out;
        }
        char *key, *value;
        int kv = mp_kv_split(line, &key, &value);
        if (kv == 0)
            continue;
        if (kv < 0) {
            mp_usage("model file %s line %d: expected key=value, got '%s'", path, lineno, key);
            rc = MP_ERR_USAGE;
            goto out;
        }
        int k = 0;
        while (k < K_COUNT && strcmp(key_names[k], key) != 0)
            k++;
        if (k == K_COUNT) {
            mp_usage("model file %s line %d: unknown key '%s' (accepted: %s)", path, lineno, key,
                     accepted_keys);
            rc = MP_ERR_USAGE;
            goto out;
        }
        if (have[k]) {
            mp_usage("model file %s line %d: key '%s' appears twice", path, lineno, key);
            rc = MP_ERR_USAGE;
            goto out;
        }
        have[k] = 1;
        if (k == K_BASE) {
            base = find_preset(value);
            if (!base) {
                char names[512];
                preset_names(names, sizeof names);
                mp_usage("model file %s line %d: base '%s' is not a preset (%s)", path, lineno,
                         value, names);
                rc = MP_ERR_USAGE;
                goto out;
            }
        } else if (k == K_NAME) {
            if (!*value || strlen(value) >= sizeof name) {
                mp_usage("model file %s line %d: name '%s' must have 1 to %zu characters", path,
                         lineno, value, sizeof name - 1);
                rc = MP_ERR_USAGE;
                goto out;
            }
            snprintf(name, sizeof name, "%s", value);
        } else if (k == K_PARAMS) {
            char *end;
            errno = 0;
            params = strtod(value, &end);
            if (!*value || *end || errno || !(params > 0) || params > 1e18) {
                mp_usage("model file %s line %d: '%s' is not a positive number of parameters for "
                         "'params' (e.g. 671e9)", path, lineno, value);
                rc = MP_ERR_USAGE;
                goto out;
            }
        } else {
            int min = k < K_REQUIRED && k != K_SHARED ? 1 : 0;
            if (parse_count(value, min, &val[k])) {
                mp_usage("model file %s line %d: '%s' is not a %s integer for '%s'", path, lineno,
                         value, min ? "positive" : "non-negative", key);
                rc = MP_ERR_USAGE;
                goto out;
            }
        }
    }
    if (ferror(f)) {
        mp_usage("model file %s: cannot read it", path);
        rc = MP_ERR_USAGE;
        goto out;
    }

    struct mp_model m = {0};
    if (base) {
        m = *base;
    } else {
        for (int k = 0; k < K_REQUIRED; k++) {
            if (!have[k] && k != K_SHARED) {
                mp_usage("model file %s: missing '%s' (give it, or start from a preset with "
                         "base=NAME)",
                         path, key_names[k]);
                rc = MP_ERR_USAGE;
                goto out;
            }
        }
    }
    struct mp_model from = m;
    for (int k = 0; k < K_NUMERIC; k++) {
        if (have[k]) {
            *model_field(&m, k) = val[k];
            m.note = NULL; /* the base's caveats may no longer hold */
        }
    }
    if (have[K_PARAMS]) {
        m.params = params;
        m.note = NULL;
        double experts = mp_model_routed_params(&m) + mp_model_shared_params(&m);
        if (params < experts) {
            mp_usage("model file %s: params %.4g is smaller than the experts' own %.4g parameters "
                     "(experts · layers · 3·hidden·ffn, shared included)", path, params, experts);
            rc = MP_ERR_USAGE;
            goto out;
        }
    } else {
        keep_nonexpert(&from, &m);
    }
    if (m.topk > m.experts) {
        mp_usage("model file %s: topk %d is larger than the expert count %d", path, m.topk,
                 m.experts);
        rc = MP_ERR_USAGE;
        goto out;
    }
    if (name[0])
        snprintf(m.name, sizeof m.name, "%s", name);
    else
        mp_file_stem(path, m.name, sizeof m.name);
    *out = m;
out:
    fclose(f);
    return rc;
}

int mp_model_resolve(const char *spec, struct mp_model *out)
{
    if (!spec)
        spec = "";
    const struct mp_model *p = find_preset(spec);
    if (p) {
        *out = *p;
        return MP_OK;
    }
    struct stat st;
    if (!*spec || stat(spec, &st) != 0 || !S_ISREG(st.st_mode) || access(spec, R_OK) != 0) {
        char names[512];
        preset_names(names, sizeof names);
        mp_usage("--model: '%s' is neither a preset (%s) nor a readable file", spec, names);
        return MP_ERR_USAGE;
    }
    return read_model_file(spec, out);
}

int mp_model_override(struct mp_model *m, int experts, int topk, int shared, int hidden, int ffn,
                      int layers)
{
    static const struct {
        const char *flag;
        int min;
    } spec[K_REQUIRED] = {
        [K_HIDDEN] = {"--hidden", 1}, [K_FFN] = {"--ffn", 1},       [K_EXPERTS] = {"--experts", 1},
        [K_TOPK] = {"--topk", 1},     [K_SHARED] = {"--shared", 0}, [K_LAYERS] = {"--layers", 1},
    };
    int given[K_REQUIRED];
    given[K_HIDDEN] = hidden;
    given[K_FFN] = ffn;
    given[K_EXPERTS] = experts;
    given[K_TOPK] = topk;
    given[K_SHARED] = shared;
    given[K_LAYERS] = layers;

    struct mp_model r = *m;
    for (int k = 0; k < K_REQUIRED; k++) {
        if (given[k] == -1)
            continue;
        if (given[k] < spec[k].min) {
            mp_usage("%s: %d is out of range (>= %d)", spec[k].flag, given[k], spec[k].min);
            return MP_ERR_USAGE;
        }
        *model_field(&r, k) = given[k];
    }
    if (r.topk > r.experts) {
        if (topk != -1)
            mp_usage("--topk: %d is larger than the expert count %d", r.topk, r.experts);
        else
            mp_usage("--experts: %d is smaller than the top-k %d of %s", r.experts, r.topk,
                     r.name);
        return MP_ERR_USAGE;
    }
    keep_nonexpert(m, &r);
    *m = r;
    return MP_OK;
}

void mp_model_list(char *buf, unsigned long len)
{
    if (!buf || !len)
        return;
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < mp_model_npresets && used < len; i++) {
        const struct mp_model *p = &mp_model_presets[i];
        int n = snprintf(buf + used, len - used,
                         "%-16s H=%d D=%d E=%d K=%d shared=%d layers=%d%s%s%s\n", p->name,
                         p->hidden, p->ffn, p->experts, p->topk, p->shared, p->layers,
                         p->note ? "  (" : "", p->note ? p->note : "", p->note ? ")" : "");
        if (n < 0)
            break;
        used += (size_t)n;
    }
}
