/* layer_cache.c - the layer's expert cache (--expert-cache): its local experts' weights generated
 * into a core/layer/weight_cache.c cache, and each expert's FFN weights taken from it (docs/METRICS.md,
 * "Expert cache"). */
#include "error.h"
#include "layer_internal.h"
#include "weights.h"

void mp_layer_cache_free(struct mp_layer *L) { mp_weight_cache_free(&L->wcache); }

/* Local expert i's fp32 weights, generated as mp_layer_setup_weights generates them. */
static void generate(void *arg, int i, float *gu, float *wd)
{
    const struct mp_layer *L = arg;
    mp_weights_expert(L->seed, L->local_ids[i], L->m.hidden, L->m.ffn, L->tp, L->comm->tp_rank,
                      L->blocked_weights, gu, wd);
}

int mp_layer_cache_setup(struct mp_layer *L, const struct mp_cache_spec *spec, const double *share)
{
    return mp_weight_cache_setup(&L->wcache, L->ops, L->dev, spec, L->nlocal, share,
                                 L->weight_dtype, L->m.hidden, L->Dl, generate, L);
}

int mp_layer_cache_weights(struct mp_layer *L, int e, void **wgu, void **wd, int *slot)
{
    if (!mp_weight_cache_on(&L->wcache)) {
        *wgu = L->wgu[e];
        *wd = L->wd[e];
        *slot = -1;
        return MP_OK;
    }
    return mp_weight_cache_get(&L->wcache, e, wgu, wd, slot);
}

int mp_layer_cache_release(struct mp_layer *L, int slot)
{
    return mp_weight_cache_release(&L->wcache, slot);
}
