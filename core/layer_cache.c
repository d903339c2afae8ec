/* layer_cache.c - the layer's device expert cache (--expert-cache): a host pool of this rank's
 * local experts' weights, SLOTS device slots, and the fetch of a missing expert into its slot
 * before its FFN (docs/METRICS.md, "Expert cache"). */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "fp8.h"
#include "layer_internal.h"
#include "weights.h"

void mp_layer_cache_free(struct mp_layer *L)
{
    for (int i = 0; i < L->cache.nlocal && L->pool_gu; i++) {
        free(L->pool_gu[i]);
        free(L->pool_wd[i]);
    }
    for (int s = 0; s < L->nslots && L->slot_gu; s++) {
        if (L->slot_gu[s])
            L->ops->free(L->dev, L->slot_gu[s]);
        if (L->slot_wd[s])
            L->ops->free(L->dev, L->slot_wd[s]);
    }
    free(L->pool_gu);
    free(L->pool_wd);
    free(L->slot_gu);
    free(L->slot_wd);
    L->pool_gu = L->pool_wd = L->slot_gu = L->slot_wd = NULL;
    L->nslots = 0;
    mp_expert_cache_free(&L->cache);
}

/* Copy local expert e's weights from the pool into slot s. */
static int fetch(struct mp_layer *L, int e, int s)
{
    if (L->weight_dtype == MP_DTYPE_FP8) {
        int rc = L->ops->upload_bytes(L->dev, L->slot_gu[s], L->pool_gu[e], (size_t)L->gu_bytes);
        return rc != MP_OK ? rc
                           : L->ops->upload_bytes(L->dev, L->slot_wd[s], L->pool_wd[e],
                                                  (size_t)L->wd_bytes);
    }
    int rc = L->ops->upload(L->dev, L->slot_gu[s], L->pool_gu[e], L->gu_elems);
    return rc != MP_OK ? rc : L->ops->upload(L->dev, L->slot_wd[s], L->pool_wd[e], L->wd_elems);
}

/* Fill the pool with local expert i's weights as the upload takes them: the fp32 values (bf16)
 * or the fp8 images' bytes, generated as mp_layer_setup_weights generated them. */
static int pool_expert(struct mp_layer *L, int i, float *hgu, float *hd)
{
    int H = L->m.hidden, Dl = L->Dl;
    mp_weights_expert(L->seed, L->local_ids[i], H, L->m.ffn, L->tp, L->comm->tp_rank,
                      L->blocked_weights, hgu, hd);
    size_t gu = L->weight_dtype == MP_DTYPE_FP8 ? (size_t)L->gu_bytes : L->gu_elems * sizeof(float);
    size_t wd = L->weight_dtype == MP_DTYPE_FP8 ? (size_t)L->wd_bytes : L->wd_elems * sizeof(float);
    L->pool_gu[i] = malloc(gu);
    L->pool_wd[i] = malloc(wd);
    if (!L->pool_gu[i] || !L->pool_wd[i])
        return MP_ERR_RUNTIME;
    if (L->weight_dtype == MP_DTYPE_FP8) {
        mp_fp8_image_store(hgu, H, Dl, 2, L->pool_gu[i]);
        mp_fp8_image_store(hd, Dl, H, 1, L->pool_wd[i]);
    } else {
        memcpy(L->pool_gu[i], hgu, gu);
        memcpy(L->pool_wd[i], hd, wd);
    }
    return MP_OK;
}

int mp_layer_cache_setup(struct mp_layer *L, const struct mp_cache_spec *spec, const double *share)
{
    mp_layer_cache_free(L);
    if (spec->slots == 0)
        return mp_expert_cache_init(&L->cache, spec, L->nlocal, NULL);
    size_t H = (size_t)L->m.hidden, Dl = (size_t)L->Dl, es = L->ops->elem_size;
    if (L->weight_dtype == MP_DTYPE_FP8) {
        L->gu_bytes = (double)mp_fp8_image_bytes((int)H, (int)Dl, 2);
        L->wd_bytes = (double)mp_fp8_image_bytes((int)Dl, (int)H, 1);
        L->gu_elems = ((size_t)L->gu_bytes + es - 1) / es;
        L->wd_elems = ((size_t)L->wd_bytes + es - 1) / es;
    } else {
        L->gu_elems = H * 2 * Dl;
        L->wd_elems = Dl * H;
        L->gu_bytes = (double)(L->gu_elems * es);
        L->wd_bytes = (double)(L->wd_elems * es);
    }
    int rc = mp_expert_cache_init(&L->cache, spec, L->nlocal, share);
    if (rc != MP_OK)
        return rc;
    L->nslots = spec->slots + (spec->policy == MP_CACHE_STATIC);
    L->pool_gu = calloc((size_t)L->nlocal, sizeof *L->pool_gu);
    L->pool_wd = calloc((size_t)L->nlocal, sizeof *L->pool_wd);
    L->slot_gu = calloc((size_t)L->nslots, sizeof *L->slot_gu);
    L->slot_wd = calloc((size_t)L->nslots, sizeof *L->slot_wd);
    float *hgu = malloc(H * 2 * Dl * sizeof(float)), *hd = malloc(Dl * H * sizeof(float));
    rc = L->pool_gu && L->pool_wd && L->slot_gu && L->slot_wd && hgu && hd ? MP_OK
                                                                          : MP_ERR_RUNTIME;
    for (int i = 0; i < L->nlocal && rc == MP_OK; i++)
        rc = pool_expert(L, i, hgu, hd);
    for (int s = 0; s < L->nslots && rc == MP_OK; s++) {
        L->slot_gu[s] = L->ops->alloc(L->dev, L->gu_elems);
        L->slot_wd[s] = L->ops->alloc(L->dev, L->wd_elems);
        rc = L->slot_gu[s] && L->slot_wd[s] ? MP_OK : MP_ERR_RUNTIME;
    }
    free(hgu);
    free(hd);
    if (rc != MP_OK)
        mp_error("out of memory for the expert cache (%d slots, a host pool of %d experts)",
                 spec->slots, L->nlocal);
    /* static's resident experts: in place before the first iteration, no fetch counted */
    for (int s = 0; s < spec->slots && rc == MP_OK && spec->policy == MP_CACHE_STATIC; s++)
        if (L->cache.held[s] >= 0)
            rc = fetch(L, L->cache.held[s], s);
    return rc;
}

int mp_layer_cache_weights(struct mp_layer *L, int e, void **wgu, void **wd)
{
    if (L->cache.spec.slots == 0) {
        *wgu = L->wgu[e];
        *wd = L->wd[e];
        return MP_OK;
    }
    int miss, s = mp_expert_cache_access(&L->cache, e, &miss);
    *wgu = L->slot_gu[s];
    *wd = L->slot_wd[s];
    if (!miss) {
        L->it_hits++;
        return MP_OK;
    }
    double t0 = mp_now_us();
    int rc = fetch(L, e, s);
    if (rc == MP_OK)
        rc = L->ops->sync(L->dev); /* the fetch is done before the FFN that reads the slot */
    L->it_fetch_us += mp_now_us() - t0;
    L->it_misses++;
    L->it_fetch_bytes += L->gu_bytes + L->wd_bytes;
    return rc;
}
