/* layer_weights.c - the layer's weights on the device: this rank's expert shards, cached while the
 * placement leaves its set of experts unchanged, and the router weights. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "expert_store.h"
#include "layer_internal.h"
#include "weights.h"

void mp_layer_free_weights(struct mp_layer *L)
{
    mp_layer_cache_free(L); /* its pool holds these experts */
    for (int i = 0; i < L->nlocal + L->S && L->wgu; i++) {
        if (L->wgu[i])
            L->ops->free(L->dev, L->wgu[i]);
        if (L->wd[i])
            L->ops->free(L->dev, L->wd[i]);
    }
    free(L->wgu);
    free(L->wd);
    free(L->local_ids);
    L->wgu = L->wd = NULL;
    L->local_ids = NULL;
    L->nlocal = 0;
}

/* Generate one expert's weight shard and store it in the layer's weight dtype. */
static int load_expert(struct mp_layer *L, int expert, void **wgu, void **wd, float *hgu, float *hd)
{
    mp_weights_expert(L->seed, expert, L->m.hidden, L->m.ffn, L->tp, L->comm->tp_rank,
                      L->blocked_weights, hgu, hd);
    return mp_expert_store(L->ops, L->dev, (enum mp_dtype)L->weight_dtype, expert, L->m.hidden,
                           L->Dl, hgu, hd, wgu, wd);
}

int mp_layer_setup_weights(struct mp_layer *L, const struct mp_placement *pl, int weight_dtype,
                           int blocked)
{
    int e = L->comm->ep_rank;
    int n = mp_placement_nlocal(pl, e);
    const int *ids = pl->local_ids + pl->local_off[e];
    if (L->wgu && n == L->nlocal && weight_dtype == L->weight_dtype &&
        blocked == L->blocked_weights && memcmp(ids, L->local_ids, (size_t)n * sizeof *ids) == 0)
        return MP_OK;
    mp_layer_free_weights(L);
    int rc = MP_ERR_RUNTIME;
    size_t H = (size_t)L->m.hidden, Dl = (size_t)L->Dl;
    float *hgu = malloc(H * 2 * Dl * sizeof(float)), *hd = malloc(Dl * H * sizeof(float));
    L->wgu = calloc((size_t)n + L->S, sizeof(void *));
    L->wd = calloc((size_t)n + L->S, sizeof(void *));
    L->local_ids = malloc(((size_t)n + 1) * sizeof(int));
    if (!hgu || !hd || !L->wgu || !L->wd || !L->local_ids) {
        mp_error("out of memory for expert weights");
        goto out;
    }
    L->nlocal = n;
    L->weight_dtype = weight_dtype;
    L->blocked_weights = blocked;
    memcpy(L->local_ids, ids, (size_t)n * sizeof *ids);
    for (int i = 0; i < n + L->S; i++) {
        int expert = i < n ? ids[i] : L->m.experts + (i - n);
        rc = load_expert(L, expert, &L->wgu[i], &L->wd[i], hgu, hd);
        if (rc != MP_OK)
            goto out;
    }
    rc = MP_OK;
out:
    free(hgu);
    free(hd);
    return rc;
}

int mp_layer_setup_gate(struct mp_layer *L)
{
    if (L->wg)
        return MP_OK;
    size_t n = (size_t)L->m.hidden * L->m.experts;
    L->wg_host = malloc(n * sizeof(float));
    L->wg = L->ops->alloc(L->dev, n);
    if (!L->wg_host || !L->wg) {
        mp_error("out of memory for the router weights");
        return MP_ERR_RUNTIME;
    }
    mp_weights_gate(L->seed, L->m.hidden, L->m.experts, L->wg_host);
    return L->ops->upload(L->dev, L->wg, L->wg_host, n);
}
