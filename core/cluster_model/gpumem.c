/* gpumem.c - memory per GPU of a deployed layout (see gpumem.h, docs/planning.md). */
#include "gpumem.h"

#include "fp8.h"

const char *const mp_nonexpert_split_names[] = {"tp", "world", NULL};

void mp_gpumem_compute(const struct mp_model *m, const struct mp_gpumem_layout *l,
                       struct mp_gpumem *g)
{
    double per_expert = 3.0 * m->hidden * m->ffn; /* gate, up and down projections */
    int tp = l->tp > 0 ? l->tp : 1, ep = l->ep > 0 ? l->ep : 1;
    /* the experts' FFN dimension is split by TP (Dl = D / tp), every EP rank holds its own */
    if (l->expert_dtype == MP_DTYPE_FP8) { /* codes and block scales of each TP shard */
        double shard = mp_expert_weight_bytes(MP_DTYPE_FP8, m->hidden, m->ffn / tp, 1);
        g->routed = (double)l->max_local * m->layers * shard;
        g->shared = (double)m->shared * m->layers * shard;
    } else {
        g->routed = (double)l->max_local * m->layers * per_expert * l->weight_bytes / tp;
        g->shared = (double)m->shared * m->layers * per_expert * l->weight_bytes / tp;
    }
    double split = l->nonexpert == MP_NONEXPERT_WORLD ? (double)tp * ep : tp;
    /* fp8: the non-expert linear weights as block-scaled fp8 checkpoints hold them (a byte and a
     * 4-byte scale per 128×128 block, base/fp8.h) */
    double ne_bytes = l->expert_dtype == MP_DTYPE_FP8 ? MP_FP8_WEIGHT_BYTES : l->weight_bytes;
    g->nonexpert = mp_model_nonexpert_params(m) * ne_bytes / split;
    /* an EP rank attends for its own sequences; its TP group splits the KV heads, each GPU keeping
     * a whole head when there are fewer heads than GPUs (MLA's one latent head on every GPU) */
    long seqs = (l->sequences + ep - 1) / ep;
    long heads = ((long)m->kv_heads + tp - 1) / tp;
    g->kv = (double)seqs * l->context * m->attn_layers * heads * m->kv_head_dim * l->kv_bytes;
    g->weights = g->routed + g->shared + g->nonexpert;
    g->total = g->weights + g->kv;
}

double mp_gpumem_usable(const struct mp_cluster *c, double reserve)
{
    return c->gpu_mem_gb > 0 ? c->gpu_mem_gb * 1e9 * (1 - reserve) : 0;
}

const char *mp_gpumem_over(const struct mp_gpumem *g, double usable)
{
    if (usable <= 0 || g->total <= usable)
        return "none";
    return g->weights > usable ? "weights" : "kv";
}
