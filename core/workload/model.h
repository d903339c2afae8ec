/* model.h - MoE model presets (facts from the models' public configs), per-field overrides and
 * key=value model files. */
#ifndef MP_MODEL_H
#define MP_MODEL_H

#include <stddef.h>

/* The largest value of each shape field, one table for the flags (--experts ..., core/run/
 * bench_opts.h) and model files (key experts ...): beyond them a layer does not fit in memory or
 * the work grows past a minute on a workstation. The smallest is 1 (shared: 0). */
#define MP_MODEL_HIDDEN_MAX (1 << 20)
#define MP_MODEL_FFN_MAX (1 << 22)
#define MP_MODEL_EXPERTS_MAX 65536
#define MP_MODEL_TOPK_MAX 1024
#define MP_MODEL_SHARED_MAX 64
#define MP_MODEL_LAYERS_MAX 1024

struct mp_model {
    char name[64];
    int hidden;  /* H */
    int ffn;     /* D, the expert FFN (intermediate) dimension */
    int experts; /* E, routed experts */
    int topk;    /* K */
    int shared;  /* always-active shared experts, each of FFN dimension D */
    int layers;  /* MoE layer count */
    const char *note; /* caveats shown in --help (assumed fields), or NULL */
    /* What memory needs (docs/planning.md, "Memory per GPU"); after `note` so that positional
     * initializers of the shape stay valid. */
    double params;   /* total parameters as the model card states them, a check: with attention
                        fields memory counts mp_model_total_params (derived from the shape), which
                        must lie within 3% of it; 0: not stated (then, without attention fields,
                        only the experts' own parameters are counted) */
    int attn_layers; /* layers holding a KV cache (every attention layer; 0: none counted) */
    int kv_heads;    /* KV heads a TP group splits (MLA's compressed latent is one head shared by
                        every query head, so 1) */
    int kv_head_dim; /* KV-cache elements per head, token and layer: 2·head_dim for K and V of
                        grouped-query attention, kv_lora_rank + qk_rope_head_dim for MLA */
    /* What a whole decode or prefill step reads and computes besides the MoE layers
     * (docs/planning.md, "What a step includes"), from the model's config.json. */
    int attn;             /* enum mp_attn_kind; MP_ATTN_NONE: no attention described */
    int q_heads;          /* num_attention_heads */
    int head_dim;         /* mha/gqa: the query, key and value head dimension */
    int q_lora_rank;      /* mla: the query's compression rank (0: queries not compressed) */
    int kv_lora_rank;     /* mla: the compressed KV latent, cached per token and layer */
    int qk_nope_head_dim; /* mla: a query/key head's dimension without rotary embedding */
    int qk_rope_head_dim; /* mla: its rotary part, one key head shared and cached */
    int v_head_dim;       /* mla: a value head's dimension */
    int dense_layers;     /* layers with a dense FFN instead of experts (first_k_dense_replace) */
    int dense_ffn;        /* their intermediate size */
    int vocab;            /* vocab_size: the embedding and LM head rows */
    int tied;             /* 1: the LM head is the embedding (tie_word_embeddings) */
    int sliding_layers;   /* layers attending to a sliding window only (gpt-oss: every other) */
    int sliding_window;   /* their window in tokens */
};

/* The attention forms a model's layers use. */
enum mp_attn_kind { MP_ATTN_NONE, MP_ATTN_MHA, MP_ATTN_GQA, MP_ATTN_MLA };

extern const struct mp_model mp_model_presets[];
extern const int mp_model_npresets;

/* Resolve `spec`: a preset name, or a path to a key=value file (keys: name, hidden, ffn, experts,
 * topk, shared, layers, params, attn_layers, kv_heads, kv_head_dim, attn, q_heads, head_dim,
 * q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, dense_layers,
 * dense_ffn, vocab, tied, sliding_layers, sliding_window; '#' starts a comment; a file may start
 * from a preset with "base=NAME").
 * Unknown presets, unreadable files, unknown keys, non-numbers and missing fields print one line
 * naming --model or the file (and line) and return MP_ERR_USAGE.
 * File details: keys may come in any order and at most once each; "base" is applied first and
 * every other key overrides the base's field (the base's note is kept only when no size is set).
 * Without base, hidden, ffn, experts, topk and layers are required and shared, params and the
 * other keys default to 0. A model with attention fields (attn = mha|gqa|mla) is checked whole:
 * gqa/mha need q_heads, head_dim and kv_heads dividing q_heads (mha: equal); mla needs q_heads,
 * kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim (kv_heads 1); both need
 * attn_layers; kv_head_dim follows from them (a given one must agree); dense_layers and dense_ffn
 * come together; sliding_layers needs sliding_window and at most attn_layers; and a given params
 * is a check, refused more than 3% from mp_model_total_params. A file that changes an attention
 * model's fields without giving params drops the base's stated total (0), which no longer
 * describes the shape. Without attention fields, a file that changes a base's sizes without
 * giving params keeps the base's non-expert parameters (mp_model_override); params below the
 * experts' own parameters is refused.
 * `name` defaults to the file's basename without its extension. On error `out` is untouched. */
int mp_model_resolve(const char *spec, struct mp_model *out);

/* Apply overrides (-1 keeps the field) and validate the result: every size >= 1 (shared >= 0),
 * topk <= experts. Errors name the flag. A model without attention fields but with `params` keeps
 * its non-expert parameters (attention, embeddings, dense layers) and its total follows the new
 * expert sizes; a model with attention fields derives them (mp_model_nonexpert_params) and its
 * stated `params` becomes 0 once a size changes. Returns MP_OK or MP_ERR_USAGE. */
/* The shape fields in which `m` differs from the preset of its name, as the flags that set them
 * ("--hidden 1024 --ffn 512") into buf[len]; "" when it is the preset's, or its name is none
 * (a model file, say). Returns how many differ. */
int mp_model_overrides(const struct mp_model *m, char *buf, size_t len);

int mp_model_override(struct mp_model *m, int experts, int topk, int shared, int hidden, int ffn,
                      int layers);

/* Parameters of the routed experts: experts · layers · 3·H·D (gate, up and down projections). */
double mp_model_routed_params(const struct mp_model *m);

/* Parameters of the shared experts: shared · layers · 3·H·D. */
double mp_model_shared_params(const struct mp_model *m);

/* One attention layer's weights, from the attention fields (0 when attn is MP_ATTN_NONE):
 *   mha/gqa: q H·qh·hd, k and v H·kvh·hd each, o qh·hd·H;
 *   mla (DeepSeek-V3's inference/model.py, MLA): q_a H·q_lora + its norm q_lora + q_b
 *   q_lora·qh·(nope+rope) (without q_lora: H·qh·(nope+rope)), kv_a H·(kv_lora+rope) + its norm
 *   kv_lora, kv_b kv_lora·qh·(nope+v), o qh·v·H.
 * Biases (gpt-oss's) and per-head q/k norms (Qwen3's) are not counted. */
double mp_model_attn_params(const struct mp_model *m);

/* The dense FFN layers' weights: dense_layers · 3·H·dense_ffn. */
double mp_model_dense_params(const struct mp_model *m);

/* The embedding and the LM head: vocab·H, twice unless tied. */
double mp_model_embed_params(const struct mp_model *m);

/* KV-cache elements per token and layer: kv_heads · kv_head_dim. */
double mp_model_kv_elems(const struct mp_model *m);

/* The kv_head_dim the attention fields imply: 2·head_dim (K and V) for mha/gqa, kv_lora_rank +
 * qk_rope_head_dim for mla (the latent and the shared rotary key); 0 for MP_ATTN_NONE. */
int mp_model_kv_head_dim(const struct mp_model *m);

/* The total parameter count. With attention fields, derived from the shape: embedding and head,
 * attn_layers · mp_model_attn_params, the dense layers, the routed and shared experts, a router
 * of experts·H per MoE layer, and the RMSNorms (2·H per layer of attn_layers, and H at the end).
 * Without them: `params` as stated, or the experts' own when params is 0 or smaller. */
double mp_model_total_params(const struct mp_model *m);

/* Everything else (attention, embeddings, dense layers, norms, routers): total − routed − shared.
 * With attention fields it is derived (mp_model_total_params); without them it is params − routed
 * − shared, 0 when params is not given or smaller. */
double mp_model_nonexpert_params(const struct mp_model *m);

/* One line per preset for --help. */
void mp_model_list(char *buf, unsigned long len);

#endif
