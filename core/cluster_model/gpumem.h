/* gpumem.h - memory one GPU of a deployed layout holds: its routed and shared experts, its share
 * of the non-expert weights and the KV cache of its sequences (docs/planning.md, "Memory per GPU"). */
#ifndef MP_GPUMEM_H
#define MP_GPUMEM_H

#include "cluster.h"
#include "dtype.h"
#include "model.h"

/* Bytes per element of bf16 weights and KV cache: the one parameter a smaller weight type changes. */
#define MP_BF16_BYTES 2.0

/* The context (tokens of KV cache per sequence) the planner and model runs assume by default. */
#define MP_CONTEXT_DEFAULT 4096L

/* Where the non-expert weights (attention, embeddings, dense layers) live. */
enum mp_nonexpert_split {
    MP_NONEXPERT_TP,    /* split by the TP group, a full copy per EP rank (attention data-parallel
                           over EP ranks, tensor-parallel inside one) */
    MP_NONEXPERT_WORLD, /* split over all tp·ep GPUs (a lower bound) */
};
extern const char *const mp_nonexpert_split_names[]; /* "tp", "world", NULL */

struct mp_gpumem_layout {
    int tp, ep;
    int max_local;        /* the most routed experts one EP rank holds, replicas and eplb slots
                             included (struct mp_placement's max_local) */
    long sequences;       /* sequences the replica serves at once: its batch */
    long context;         /* tokens of KV cache per sequence */
    double weight_bytes;  /* bytes per weight element (MP_BF16_BYTES) */
    double kv_bytes;      /* bytes per KV-cache element (MP_BF16_BYTES) */
    enum mp_nonexpert_split nonexpert;
    /* the weights' type (--weight-dtype): bf16 at weight_bytes per element, or fp8 (a byte per
     * element and an fp32 scale per 128×128 block: the experts as mp_expert_weight_bytes counts
     * them, the non-expert weights as block-scaled fp8 checkpoints hold them) */
    enum mp_dtype expert_dtype;
};

/* Bytes per GPU, on the fullest GPU of the layout. */
struct mp_gpumem {
    double routed;    /* max_local · layers · 3·H·D · weight_bytes / tp (fp8: · the expert's
                         mp_expert_weight_bytes of D/tp) */
    double shared;    /* shared · layers · 3·H·D · weight_bytes / tp (fp8: likewise) */
    double nonexpert; /* mp_model_nonexpert_params · weight_bytes / tp (or / (tp·ep)); fp8:
                         · (1 + 4/128²) bytes instead of weight_bytes */
    double kv;        /* ⌈sequences / ep⌉ · context · attn_layers · ⌈kv_heads / tp⌉ · kv_head_dim
                         · kv_bytes */
    double weights;   /* routed + shared + nonexpert */
    double total;     /* weights + kv */
};

/* Fill `g` for model `m` deployed as `l`. */
void mp_gpumem_compute(const struct mp_model *m, const struct mp_gpumem_layout *l,
                       struct mp_gpumem *g);

/* Bytes of one GPU that weights and KV cache may use: gpu_mem_gb · 1e9 · (1 − reserve); 0 when
 * the profile does not know its memory. */
double mp_gpumem_usable(const struct mp_cluster *c, double reserve);

/* What overflows `usable` bytes: "weights" when the weights alone do, else "kv" when the KV cache
 * tips it over, else "none" (also when usable is 0: not checked). */
const char *mp_gpumem_over(const struct mp_gpumem *g, double usable);

#endif
