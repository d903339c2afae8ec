/* model.h - MoE model presets (facts from the models' public configs), per-field overrides and
 * key=value model files. */
#ifndef MP_MODEL_H
#define MP_MODEL_H

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
    double params;   /* total parameters as the model card states them; 0: not given (only the
                        experts' own parameters are then counted) */
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
 * topk, shared, layers, params, attn_layers, kv_heads, kv_head_dim; '#' starts a comment; a file
 * may start from a preset with "base=NAME").
 * Unknown presets, unreadable files, unknown keys, non-numbers and missing fields print one line
 * naming --model or the file (and line) and return MP_ERR_USAGE.
 * File details: keys may come in any order and at most once each; "base" is applied first and
 * every other key overrides the base's field (the base's note is kept only when no size is set).
 * Without base, hidden, ffn, experts, topk and layers are required and shared, params and the KV
 * keys default to 0. A file that changes a base's sizes without giving params keeps the base's
 * non-expert parameters (mp_model_override); params below the experts' own parameters is refused.
 * `name` defaults to the file's basename without its extension. On error `out` is untouched. */
int mp_model_resolve(const char *spec, struct mp_model *out);

/* Apply overrides (-1 keeps the field) and validate the result: every size >= 1 (shared >= 0),
 * topk <= experts. Errors name the flag. A model with `params` keeps its non-expert parameters
 * (attention, embeddings, dense layers) and its total follows the new expert sizes. Returns MP_OK
 * or MP_ERR_USAGE. */
int mp_model_override(struct mp_model *m, int experts, int topk, int shared, int hidden, int ffn,
                      int layers);

/* Parameters of the routed experts: experts · layers · 3·H·D (gate, up and down projections). */
double mp_model_routed_params(const struct mp_model *m);

/* Parameters of the shared experts: shared · layers · 3·H·D. */
double mp_model_shared_params(const struct mp_model *m);

/* Everything else (attention, embeddings, dense layers, norms, routers): params − routed − shared,
 * 0 when params is not given or smaller. */
double mp_model_nonexpert_params(const struct mp_model *m);

/* One line per preset for --help. */
void mp_model_list(char *buf, unsigned long len);

#endif
