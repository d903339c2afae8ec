/* model.c - MoE model presets, key=value model files and per-field overrides (model.h). */
#include "model.h"

#include "text.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
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
 * `params` is the total the model card states, now a check on mp_model_total_params (derived from
 * the attention, dense-layer and vocabulary fields below, within 3%: tests/unit/test_model.c);
 * `attn_layers` is num_hidden_layers (every layer has attention); the KV cache per token and layer
 * is kv_heads · kv_head_dim elements (mp_model_kv_head_dim). The attention fields: attn,
 * num_attention_heads (q_heads), head_dim, the MLA ranks and head dimensions, the dense layers
 * (first_k_dense_replace) and their intermediate_size, vocab_size, tie_word_embeddings, and the
 * layers with a sliding window. */
#define SHAPE(n, h, d, e, k, s, l) .name = n, .hidden = h, .ffn = d, .experts = e, .topk = k,       \
                                   .shared = s, .layers = l
/* MLA as DeepSeek-V3 and Kimi-K2 have it: q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim
 * 128, qk_rope_head_dim 64, v_head_dim 128; one latent of 512 + 64 cached per token and layer. */
#define MLA_V3(heads) .attn = MP_ATTN_MLA, .q_heads = heads, .q_lora_rank = 1536,                  \
                      .kv_lora_rank = 512, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64,        \
                      .v_head_dim = 128, .kv_heads = 1, .kv_head_dim = 512 + 64
/* Grouped-query (kvh < qh) or multi-head attention with qh query heads of hd. */
#define GQA(qh, kvh, hd) .attn = (kvh) < (qh) ? MP_ATTN_GQA : MP_ATTN_MHA, .q_heads = qh,            \
                         .head_dim = hd, .kv_heads = kvh, .kv_head_dim = 2 * (hd)
const struct mp_model mp_model_presets[] = {
    /* deepseek-ai/DeepSeek-V3: 671B total (card; the 685B download adds the 14B MTP module);
     * num_hidden_layers 61, first_k_dense_replace 3 (so 58 MoE layers); MLA caches
     * kv_lora_rank 512 + qk_rope_head_dim 64 per token and layer, shared by all 128 heads.
     * deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json at 9b4e9788: vocab_size 129280,
     * n_heads 128, q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64,
     * v_head_dim 128, n_dense_layers 3 of inter_dim 18432; inference/model.py there keeps a
     * separate output head (untied). Derived: 671.0B. */
    {SHAPE("deepseek-v3", 7168, 2048, 256, 8, 1, 58), .params = 671e9, .attn_layers = 61,
     MLA_V3(128), .dense_layers = 3, .dense_ffn = 18432, .vocab = 129280},
    /* moonshotai/Kimi-K2-Instruct: about 1.04T total (the card's "1T", 1.04 trillion in the
     * technical report; rounded, so its non-expert share is approximate); num_hidden_layers 61,
     * first_k_dense_replace 1; MLA as DeepSeek-V3: kv_lora_rank 512 + qk_rope_head_dim 64.
     * MoonshotAI/Kimi-K2 README.md at 11062d11 ("Model Summary": 61 layers, 1 dense layer, 64
     * attention heads, MLA, 160K vocabulary); its config.json as reported for
     * moonshotai/Kimi-K2-Instruct-0905 in ParagEkbote/hf-model-inspector model_inspection_report.md
     * at 45476474: vocab_size 163840, intermediate_size 18432, tie_word_embeddings false; the MLA
     * ranks as DeepSeek-V3's, whose architecture Kimi-K2 uses (Megatron arguments for
     * moonshotai/Kimi-K2-Instruct give --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128
     * --qk-pos-emb-head-dim 64 --v-head-dim 128). Derived: 1.026T. */
    {SHAPE("kimi-k2", 7168, 2048, 384, 8, 1, 60), .params = 1.04e12, .attn_layers = 61,
     MLA_V3(64), .dense_layers = 1, .dense_ffn = 18432, .vocab = 163840},
    /* Qwen/Qwen3-235B-A22B: 235B total; num_hidden_layers 94; num_key_value_heads 4,
     * head_dim 128. num_attention_heads 64, vocab_size 151936, untied embeddings
     * (zyzshishui/slime scripts/models/qwen3-235B-A22B.sh, the config as Megatron arguments:
     * --num-attention-heads 64 --num-query-groups 4 --kv-channels 128 --vocab-size 151936
     * --untie-embeddings-and-output-weights). Derived: 235.1B. */
    {SHAPE("qwen3-235b-a22b", 4096, 1536, 128, 8, 0, 94), .params = 235e9, .attn_layers = 94,
     GQA(64, 4, 128), .vocab = 151936},
    /* Qwen/Qwen3-30B-A3B: 30.5B total; num_hidden_layers 48; num_key_value_heads 4,
     * head_dim 128 (the model card: "30.5B in total", 48 layers, "32 for Q and 4 for KV", 128
     * experts, 8 activated). Its config.json as copied in citsjtu2020/LLM-Prof
     * sglang/Model_Config.md: num_attention_heads 32, vocab_size 151936, tie_word_embeddings
     * false. Derived: 30.5B. */
    {SHAPE("qwen3-30b-a3b", 2048, 768, 128, 8, 0, 48), .params = 30.5e9, .attn_layers = 48,
     GQA(32, 4, 128), .vocab = 151936},
    /* mistralai/Mixtral-8x7B-v0.1: 46.7B total; num_hidden_layers 32; num_key_value_heads 8,
     * head_dim hidden_size / num_attention_heads = 4096 / 32 = 128 (config.json of
     * mistralai/Mixtral-8x7B-Instruct-v0.1 at eba92302: hidden_size 4096, intermediate_size
     * 14336, num_local_experts 8, num_experts_per_tok 2, the same shape; vocab_size 32000,
     * tie_word_embeddings false). Derived: 46.7B. */
    {SHAPE("mixtral-8x7b", 4096, 14336, 8, 2, 0, 32), .params = 46.7e9, .attn_layers = 32,
     GQA(32, 8, 128), .vocab = 32000},
    /* mistralai/Mixtral-8x22B-v0.1: 141B total; num_hidden_layers 56; num_key_value_heads 8,
     * head_dim 6144 / 48 = 128. Its config.json (v0.1; v0.3 has 32768 tokens) as held in
     * scaleapi/llm-engine model-engine/tests/unit/domain/test_llm_use_cases.py:
     * num_attention_heads 48, vocab_size 32000, untied. Derived: 140.6B. */
    {SHAPE("mixtral-8x22b", 6144, 16384, 8, 2, 0, 56), .params = 141e9, .attn_layers = 56,
     GQA(48, 8, 128), .vocab = 32000},
    /* openai/gpt-oss-120b: 116.8B total (card); num_hidden_layers 36; num_key_value_heads 8,
     * head_dim 64. Every other layer attends to a 128-token sliding window, whose cache stays at
     * 128 tokens: counting all 36 layers at full context overstates its KV cache (by up to half).
     * openai/gpt-oss gpt_oss/torch/model.py at a194b990 (ModelConfig: vocab_size 201088,
     * num_attention_heads 64, num_key_value_heads 8, head_dim 64, sliding_window 128 on layers
     * with an even index, 18 of 36; a separate unembedding, untied). Its biases and attention
     * sinks are not counted. Derived: 116.8B. */
    {SHAPE("gpt-oss-120b", 2880, 2880, 128, 4, 0, 36), .params = 116.8e9, .attn_layers = 36,
     GQA(64, 8, 64), .vocab = 201088, .sliding_layers = 18, .sliding_window = 128},
    /* The first seed document: 128 experts, top-8, 1 shared, H 4096, deployed on 64 80 GB GPUs
     * as TP4 (or 8) × EP16 (or 32), and "2.8T total parameters, 30B active". No shape with 128
     * experts of top-8 satisfies both: its routed experts are 128 · 60 · 3·4096·2048 = 193B
     * parameters here, so 2.6T would lie outside them. The claim stays a claim
     * (docs/planning.md, "seed-k3's parameters"): params is 0 and the memory follows from the
     * shape. Assumed: D 2048, 60 MoE layers of attention (no dense layers), MLA as Kimi-K2 (64
     * heads, the DeepSeek-V3 ranks), vocab 163840 as Kimi-K2, untied. Derived: 200B total. */
    {SHAPE("seed-k3", 4096, 2048, 128, 8, 1, 60),
     .note = "128 experts, top-8, 1 shared and H 4096 from the first seed document; D 2048, 60 "
             "layers, MLA as Kimi-K2 and vocab 163840 are assumptions; its stated 2.8T total "
             "(30B active) does not agree with this shape and is not used (docs/planning.md)",
     .params = 0, .attn_layers = 60, MLA_V3(64), .vocab = 163840},
};
#undef MLA_V3
#undef GQA
#undef SHAPE
const int mp_model_npresets = (int)(sizeof mp_model_presets / sizeof mp_model_presets[0]);

/* The keys of a model file, in the order "missing" errors report them: the shape (the first
 * K_REQUIRED are needed without a base), the KV-cache keys, the attention and step keys (integers),
 * then name, base, params and attn. */
enum { K_HIDDEN, K_FFN, K_EXPERTS, K_TOPK, K_SHARED, K_LAYERS, K_REQUIRED, K_ATTN_LAYERS = K_REQUIRED,
       K_KV_HEADS, K_KV_HEAD_DIM, K_Q_HEADS, K_HEAD_DIM, K_Q_LORA, K_KV_LORA, K_QK_NOPE, K_QK_ROPE,
       K_V_HEAD, K_DENSE_LAYERS, K_DENSE_FFN, K_VOCAB, K_TIED, K_SLIDING_LAYERS, K_SLIDING_WINDOW,
       K_NUMERIC, K_NAME = K_NUMERIC, K_BASE, K_PARAMS, K_ATTN, K_COUNT };
static const char *const key_names[K_COUNT] = {
    "hidden",           "ffn",          "experts",          "topk",
    "shared",           "layers",       "attn_layers",      "kv_heads",
    "kv_head_dim",      "q_heads",      "head_dim",         "q_lora_rank",
    "kv_lora_rank",     "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "dense_layers",     "dense_ffn",    "vocab",            "tied",
    "sliding_layers",   "sliding_window", "name",           "base",
    "params",           "attn"};
static const char accepted_keys[] =
    "name, base, hidden, ffn, experts, topk, shared, layers, params, attn_layers, kv_heads, "
    "kv_head_dim, attn, q_heads, head_dim, q_lora_rank, kv_lora_rank, qk_nope_head_dim, "
    "qk_rope_head_dim, v_head_dim, dense_layers, dense_ffn, vocab, tied, sliding_layers, "
    "sliding_window";
static const char *const attn_names[] = {[MP_ATTN_NONE] = "none", [MP_ATTN_MHA] = "mha",
                                         [MP_ATTN_GQA] = "gqa", [MP_ATTN_MLA] = "mla"};

/* A derived total may differ from the one a model card states by this fraction at most. */
#define PARAMS_TOLERANCE 0.03

double mp_model_routed_params(const struct mp_model *m)
{
    return (double)m->experts * m->layers * 3.0 * m->hidden * m->ffn;
}

double mp_model_shared_params(const struct mp_model *m)
{
    return (double)m->shared * m->layers * 3.0 * m->hidden * m->ffn;
}

double mp_model_attn_params(const struct mp_model *m)
{
    double h = m->hidden, qh = m->q_heads;
    switch (m->attn) {
    case MP_ATTN_MHA:
    case MP_ATTN_GQA: /* q, k, v and o projections */
        return h * qh * m->head_dim + 2.0 * h * m->kv_heads * m->head_dim + qh * m->head_dim * h;
    case MP_ATTN_MLA: { /* DeepSeek-V3 inference/model.py, class MLA */
        double qk = m->qk_nope_head_dim + m->qk_rope_head_dim;
        double q = m->q_lora_rank > 0
                       ? h * m->q_lora_rank + m->q_lora_rank + m->q_lora_rank * qh * qk /* wq_a,
                                                                         q_norm, wq_b */
                       : h * qh * qk;                                              /* wq */
        double kv = h * ((double)m->kv_lora_rank + m->qk_rope_head_dim) + m->kv_lora_rank + /* wkv_a,
                                                                                   kv_norm */
                    (double)m->kv_lora_rank * qh * ((double)m->qk_nope_head_dim + m->v_head_dim);
        return q + kv + qh * m->v_head_dim * h; /* wkv_b above, wo */
    }
    default:
        return 0;
    }
}

double mp_model_dense_params(const struct mp_model *m)
{
    return (double)m->dense_layers * 3.0 * m->hidden * m->dense_ffn;
}

double mp_model_embed_params(const struct mp_model *m)
{
    return (double)m->vocab * m->hidden * (m->tied ? 1 : 2);
}

int mp_model_kv_head_dim(const struct mp_model *m)
{
    switch (m->attn) {
    case MP_ATTN_MHA:
    case MP_ATTN_GQA: return 2 * m->head_dim;
    case MP_ATTN_MLA: return m->kv_lora_rank + m->qk_rope_head_dim;
    default: return 0;
    }
}

double mp_model_kv_elems(const struct mp_model *m)
{
    return (double)m->kv_heads * m->kv_head_dim;
}

double mp_model_total_params(const struct mp_model *m)
{
    double experts = mp_model_routed_params(m) + mp_model_shared_params(m);
    if (m->attn == MP_ATTN_NONE)
        return m->params > experts ? m->params : experts;
    double routers = (double)m->experts * m->hidden * m->layers;
    double norms = 2.0 * m->hidden * m->attn_layers + m->hidden; /* two per layer, one final */
    return mp_model_embed_params(m) + m->attn_layers * mp_model_attn_params(m) +
           mp_model_dense_params(m) + experts + routers + norms;
}

double mp_model_nonexpert_params(const struct mp_model *m)
{
    double total = m->attn != MP_ATTN_NONE ? mp_model_total_params(m) : m->params;
    double rest = total - mp_model_routed_params(m) - mp_model_shared_params(m);
    return rest > 0 ? rest : 0;
}

/* After `to` took new sizes from `from`: keep from's non-expert parameters under the new experts. */
static void keep_nonexpert(const struct mp_model *from, struct mp_model *to)
{
    int same = from->hidden == to->hidden && from->ffn == to->ffn &&
               from->experts == to->experts && from->shared == to->shared &&
               from->layers == to->layers;
    if (to->attn != MP_ATTN_NONE) { /* derived from the fields; the card's total is another shape's */
        if (!same)
            to->params = 0;
        return;
    }
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
    case K_Q_HEADS: return &m->q_heads;
    case K_HEAD_DIM: return &m->head_dim;
    case K_Q_LORA: return &m->q_lora_rank;
    case K_KV_LORA: return &m->kv_lora_rank;
    case K_QK_NOPE: return &m->qk_nope_head_dim;
    case K_QK_ROPE: return &m->qk_rope_head_dim;
    case K_V_HEAD: return &m->v_head_dim;
    case K_DENSE_LAYERS: return &m->dense_layers;
    case K_DENSE_FFN: return &m->dense_ffn;
    case K_VOCAB: return &m->vocab;
    case K_TIED: return &m->tied;
    case K_SLIDING_LAYERS: return &m->sliding_layers;
    case K_SLIDING_WINDOW: return &m->sliding_window;
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



/* The attention, dense-layer and sliding-window fields of `m` agree with each other; else one line
 * naming the file and the key, and MP_ERR_USAGE. `kv_dim_given`: kv_head_dim came from the file. */
static int check_shape(const char *path, const struct mp_model *m, int kv_dim_given)
{
    const char *kind = attn_names[m->attn];
    if (m->attn == MP_ATTN_MHA || m->attn == MP_ATTN_GQA) {
        const char *missing = m->q_heads < 1 ? "q_heads" : m->head_dim < 1 ? "head_dim" : NULL;
        if (missing) {
            mp_usage("model file %s: attn=%s needs '%s' (q_heads and head_dim)", path, kind,
                     missing);
            return MP_ERR_USAGE;
        }
        if (m->kv_heads < 1 || m->q_heads % m->kv_heads != 0) {
            mp_usage("model file %s: kv_heads %d does not divide q_heads %d", path, m->kv_heads,
                     m->q_heads);
            return MP_ERR_USAGE;
        }
        if (m->attn == MP_ATTN_MHA && m->kv_heads != m->q_heads) {
            mp_usage("model file %s: attn=mha has kv_heads = q_heads, not %d and %d (gqa has "
                     "fewer)", path, m->kv_heads, m->q_heads);
            return MP_ERR_USAGE;
        }
    } else if (m->attn == MP_ATTN_MLA) {
        const char *missing = m->q_heads < 1            ? "q_heads"
                              : m->kv_lora_rank < 1     ? "kv_lora_rank"
                              : m->qk_rope_head_dim < 1 ? "qk_rope_head_dim"
                              : m->qk_nope_head_dim < 1 ? "qk_nope_head_dim"
                              : m->v_head_dim < 1       ? "v_head_dim"
                                                        : NULL;
        if (missing) {
            mp_usage("model file %s: attn=mla needs '%s' (q_heads, kv_lora_rank, "
                     "qk_rope_head_dim, qk_nope_head_dim and v_head_dim)", path, missing);
            return MP_ERR_USAGE;
        }
        if (m->kv_heads != 1) {
            mp_usage("model file %s: kv_heads %d with attn=mla, which caches one latent head "
                     "(kv_heads 1)", path, m->kv_heads);
            return MP_ERR_USAGE;
        }
    }
    if (m->attn != MP_ATTN_NONE) {
        if (m->attn_layers < 1) {
            mp_usage("model file %s: attn=%s needs 'attn_layers' (every layer with attention)",
                     path, kind);
            return MP_ERR_USAGE;
        }
        if (kv_dim_given && m->kv_head_dim != mp_model_kv_head_dim(m)) {
            mp_usage("model file %s: kv_head_dim %d is not the %d that attn=%s implies (%s)", path,
                     m->kv_head_dim, mp_model_kv_head_dim(m), kind,
                     m->attn == MP_ATTN_MLA ? "kv_lora_rank + qk_rope_head_dim" : "2·head_dim");
            return MP_ERR_USAGE;
        }
    }
    if ((m->dense_layers > 0) != (m->dense_ffn > 0)) {
        mp_usage("model file %s: '%s' without '%s' (dense layers need both)", path,
                 m->dense_layers > 0 ? "dense_layers" : "dense_ffn",
                 m->dense_layers > 0 ? "dense_ffn" : "dense_layers");
        return MP_ERR_USAGE;
    }
    if (m->sliding_layers > 0 && m->sliding_window < 1) {
        mp_usage("model file %s: 'sliding_layers' without 'sliding_window'", path);
        return MP_ERR_USAGE;
    }
    if (m->sliding_layers > m->attn_layers) {
        mp_usage("model file %s: sliding_layers %d is more than attn_layers %d", path,
                 m->sliding_layers, m->attn_layers);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* What a model file gave, key by key, before it is applied to its base. */
struct model_file {
    const char *path;
    int have[K_COUNT];
    int val[K_NUMERIC];
    int attn;
    double params;
    char name[sizeof ((struct mp_model *)0)->name];
    const struct mp_model *base;
};

/* Read `value` of key k (line `lineno`) into mf. MP_OK, or MP_ERR_USAGE after a message naming
 * the file, the line, the key and what it accepts. */
static int model_file_value(struct model_file *mf, int lineno, int k, const char *key,
                            const char *value)
{
    const char *path = mf->path;
    if (k == K_BASE) {
        if (!(mf->base = find_preset(value))) {
            char names[512];
            preset_names(names, sizeof names);
            mp_usage("model file %s line %d: base '%s' is not a preset (%s)", path, lineno, value,
                     names);
            return MP_ERR_USAGE;
        }
    } else if (k == K_NAME) {
        if (!*value || strlen(value) >= sizeof mf->name) {
            mp_usage("model file %s line %d: name '%s' must have 1 to %zu characters", path,
                     lineno, value, sizeof mf->name - 1);
            return MP_ERR_USAGE;
        }
        snprintf(mf->name, sizeof mf->name, "%s", value);
    } else if (k == K_PARAMS) {
        char *end;
        errno = 0;
        mf->params = strtod(value, &end);
        if (!*value || *end || errno || !(mf->params > 0) || mf->params > 1e18) {
            mp_usage("model file %s line %d: '%s' is not a positive number of parameters for "
                     "'params' (e.g. 671e9)", path, lineno, value);
            return MP_ERR_USAGE;
        }
    } else if (k == K_ATTN) {
        mf->attn = MP_ATTN_MHA;
        while (mf->attn <= MP_ATTN_MLA && strcmp(attn_names[mf->attn], value) != 0)
            mf->attn++;
        if (mf->attn > MP_ATTN_MLA) {
            mp_usage("model file %s line %d: '%s' is not an attention kind for 'attn' (mha, "
                     "gqa or mla)", path, lineno, value);
            return MP_ERR_USAGE;
        }
    } else if (k == K_TIED) {
        if (parse_count(value, 0, &mf->val[k]) || mf->val[k] > 1) {
            mp_usage("model file %s line %d: '%s' is not 0 or 1 for 'tied'", path, lineno, value);
            return MP_ERR_USAGE;
        }
    } else {
        int min = k < K_REQUIRED && k != K_SHARED ? 1 : 0;
        if (parse_count(value, min, &mf->val[k])) {
            mp_usage("model file %s line %d: '%s' is not a %s integer for '%s'", path, lineno,
                     value, min ? "positive" : "non-negative", key);
            return MP_ERR_USAGE;
        }
        static const long max[K_REQUIRED] = {MP_MODEL_HIDDEN_MAX, MP_MODEL_FFN_MAX,
                                             MP_MODEL_EXPERTS_MAX, MP_MODEL_TOPK_MAX,
                                             MP_MODEL_SHARED_MAX, MP_MODEL_LAYERS_MAX};
        if (k < K_REQUIRED && mf->val[k] > max[k]) { /* the flag's range (--experts ...) */
            mp_usage("model file %s line %d: '%s' for '%s' is above %ld, the most --%s takes",
                     path, lineno, value, key, max[k], key);
            return MP_ERR_USAGE;
        }
    }
    return MP_OK;
}

/* Read every key=value line of f into mf: each key known and given once. MP_OK or MP_ERR_USAGE
 * after a message naming the file and the line. */
static int model_file_lines(FILE *f, struct model_file *mf)
{
    const char *path = mf->path;
    char line[1024];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n' && !feof(f)) {
            mp_usage("model file %s line %d: line longer than %zu characters", path, lineno,
                     sizeof line - 2);
            return MP_ERR_USAGE;
        }
        char *key, *value;
        int kv = mp_kv_split(line, &key, &value);
        if (kv == 0)
            continue;
        if (kv < 0) {
            mp_usage("model file %s line %d: expected key=value, got '%s'", path, lineno, key);
            return MP_ERR_USAGE;
        }
        int k = 0;
        while (k < K_COUNT && strcmp(key_names[k], key) != 0)
            k++;
        if (k == K_COUNT) {
            mp_usage("model file %s line %d: unknown key '%s' (accepted: %s)", path, lineno, key,
                     accepted_keys);
            return MP_ERR_USAGE;
        }
        if (mf->have[k]) {
            mp_usage("model file %s line %d: key '%s' appears twice", path, lineno, key);
            return MP_ERR_USAGE;
        }
        mf->have[k] = 1;
        if (model_file_value(mf, lineno, k, key, value) != MP_OK)
            return MP_ERR_USAGE;
    }
    if (ferror(f)) {
        mp_usage("model file %s: cannot read it", path);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* m's stated total `params` (key params) checked against its experts' own parameters and, with
 * attention keys, against the total derived from its shape. MP_OK or MP_ERR_USAGE. */
static int model_file_params(const char *path, const struct mp_model *m, double params)
{
    double experts = mp_model_routed_params(m) + mp_model_shared_params(m);
    if (params < experts) {
        mp_usage("model file %s: params %.4g is smaller than the experts' own %.4g parameters "
                 "(experts · layers · 3·hidden·ffn, shared included)", path, params, experts);
        return MP_ERR_USAGE;
    }
    double derived = mp_model_total_params(m);
    if (m->attn != MP_ATTN_NONE && fabs(params / derived - 1) > PARAMS_TOLERANCE) {
        mp_usage("model file %s: params %.4g differs from the %.4g derived from the attention "
                 "and shape keys by more than %.0f%% (params is a check when attn is given)",
                 path, params, derived, 100 * PARAMS_TOLERANCE);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* The model a file's keys make: its base (or the required keys) with every given key applied,
 * checked. MP_OK or MP_ERR_USAGE after a message naming the file and the key. */
static int model_file_apply(const struct model_file *mf, struct mp_model *out)
{
    const char *path = mf->path;
    struct mp_model m = {0};
    if (mf->base) {
        m = *mf->base;
    } else {
        for (int k = 0; k < K_REQUIRED; k++) {
            if (!mf->have[k] && k != K_SHARED) {
                mp_usage("model file %s: missing '%s' (give it, or start from a preset with "
                         "base=NAME)",
                         path, key_names[k]);
                return MP_ERR_USAGE;
            }
        }
    }
    struct mp_model from = m;
    int changed = mf->have[K_ATTN];
    for (int k = 0; k < K_NUMERIC; k++) {
        if (mf->have[k]) {
            *model_field(&m, k) = mf->val[k];
            m.note = NULL; /* the base's caveats may no longer hold */
            changed = 1;
        }
    }
    if (mf->have[K_ATTN]) {
        m.attn = mf->attn;
        m.note = NULL;
    }
    if (m.attn == MP_ATTN_MLA && !mf->have[K_KV_HEADS])
        m.kv_heads = 1; /* one latent, shared by every query head */
    if (m.attn != MP_ATTN_NONE && !mf->have[K_KV_HEAD_DIM])
        m.kv_head_dim = mp_model_kv_head_dim(&m);
    if (check_shape(path, &m, mf->have[K_KV_HEAD_DIM]) != MP_OK)
        return MP_ERR_USAGE;
    if (mf->have[K_PARAMS]) {
        m.params = mf->params;
        m.note = NULL;
        if (model_file_params(path, &m, mf->params) != MP_OK)
            return MP_ERR_USAGE;
    } else if (m.attn != MP_ATTN_NONE) {
        if (changed) /* the stated total was the base's own shape's */
            m.params = 0;
    } else {
        keep_nonexpert(&from, &m);
    }
    if (m.topk > m.experts) {
        mp_usage("model file %s: topk %d is larger than the expert count %d", path, m.topk,
                 m.experts);
        return MP_ERR_USAGE;
    }
    if (mf->name[0])
        snprintf(m.name, sizeof m.name, "%s", mf->name);
    else
        mp_file_stem(path, m.name, sizeof m.name);
    *out = m;
    return MP_OK;
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
    struct model_file mf = {.path = path, .attn = MP_ATTN_NONE};
    int rc = model_file_lines(f, &mf);
    fclose(f);
    return rc == MP_OK ? model_file_apply(&mf, out) : rc;
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

int mp_model_overrides(const struct mp_model *m, char *buf, size_t len)
{
    const struct mp_model *p = find_preset(m->name);
    size_t at = 0;
    int n = 0;
    buf[0] = '\0';
    if (!p)
        return 0;
    const struct {
        const char *flag;
        int mine, preset;
    } f[] = {{"--hidden", m->hidden, p->hidden}, {"--ffn", m->ffn, p->ffn},
             {"--experts", m->experts, p->experts}, {"--topk", m->topk, p->topk},
             {"--shared", m->shared, p->shared}, {"--layers", m->layers, p->layers}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].mine != f[i].preset && at < len) {
            int w = snprintf(buf + at, len - at, "%s%s %d", n ? " " : "", f[i].flag, f[i].mine);
            at = w > 0 ? at + (size_t)w : at;
            n++;
        }
    return n;
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
