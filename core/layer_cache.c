/* layer_cache.c - the layer's device expert cache (--expert-cache): a host pool of this rank's
 * local experts' weights as the device stores them (page-locked where the backend allocates host
 * memory), SLOTS device slots, and the fetch of a missing expert into its slot before its FFN,
 * through the backend's cache hooks (docs/METRICS.md, "Expert cache"). */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "fp8.h"
#include "layer_internal.h"
#include "weights.h"

static void *pool_alloc(struct mp_layer *L, size_t bytes)
{
    return L->ops->host_alloc ? L->ops->host_alloc(L->dev, bytes) : malloc(bytes);
}

static void pool_free(struct mp_layer *L, void *p)
{
    if (p && L->ops->host_free)
        L->ops->host_free(L->dev, p);
    else
        free(p);
}

void mp_layer_cache_free(struct mp_layer *L)
{
    if (L->nslots > 0)
        L->ops->sync(L->dev); /* no fetch still reads the pool or writes a slot */
    for (int i = 0; i < L->cache.nlocal && L->pool_gu; i++) {
        pool_free(L, L->pool_gu[i]);
        pool_free(L, L->pool_wd[i]);
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

/* Fetch local expert e's weights from the pool into slot s (queued: compute.h's cache_fetch). */
static int fetch(struct mp_layer *L, int e, int s)
{
    void *dst[2] = {L->slot_gu[s], L->slot_wd[s]};
    const void *src[2] = {L->pool_gu[e], L->pool_wd[e]};
    size_t bytes[2] = {(size_t)L->gu_bytes, (size_t)L->wd_bytes};
    return L->ops->cache_fetch(L->dev, s, dst, src, bytes, 2);
}

/* Fill the pool with local expert i's weights as the device stores them: the fp8 images' bytes,
 * or the values the upload converts (fp32 on the cpu backend, bf16 on a GPU), read back through
 * `stage` (two device buffers of a slot's size); generated as mp_layer_setup_weights generates
 * them. */
static int pool_expert(struct mp_layer *L, int i, float *hgu, float *hd, void *stage_gu,
                       void *stage_wd)
{
    int H = L->m.hidden, Dl = L->Dl;
    mp_weights_expert(L->seed, L->local_ids[i], H, L->m.ffn, L->tp, L->comm->tp_rank,
                      L->blocked_weights, hgu, hd);
    L->pool_gu[i] = pool_alloc(L, (size_t)L->gu_bytes);
    L->pool_wd[i] = pool_alloc(L, (size_t)L->wd_bytes);
    if (!L->pool_gu[i] || !L->pool_wd[i])
        return MP_ERR_RUNTIME;
    if (L->weight_dtype == MP_DTYPE_FP8) {
        mp_fp8_image_store(hgu, H, Dl, 2, L->pool_gu[i]);
        mp_fp8_image_store(hd, Dl, H, 1, L->pool_wd[i]);
        return MP_OK;
    }
    int rc = L->ops->upload(L->dev, stage_gu, hgu, L->gu_elems);
    if (rc == MP_OK)
        rc = L->ops->upload(L->dev, stage_wd, hd, L->wd_elems);
    if (rc == MP_OK)
        rc = L->ops->download_bytes(L->dev, L->pool_gu[i], stage_gu, (size_t)L->gu_bytes);
    return rc != MP_OK ? rc
                       : L->ops->download_bytes(L->dev, L->pool_wd[i], stage_wd,
                                                (size_t)L->wd_bytes);
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
    for (int s = 0; s < L->nslots && rc == MP_OK; s++) {
        L->slot_gu[s] = L->ops->alloc(L->dev, L->gu_elems);
        L->slot_wd[s] = L->ops->alloc(L->dev, L->wd_elems);
        rc = L->slot_gu[s] && L->slot_wd[s] ? MP_OK : MP_ERR_RUNTIME;
    }
    if (rc != MP_OK)
        mp_error("out of memory for the expert cache (%d slots, a host pool of %d experts)",
                 spec->slots, L->nlocal);
    for (int i = 0; i < L->nlocal && rc == MP_OK; i++) /* staged through slot 0 */
        if ((rc = pool_expert(L, i, hgu, hd, L->slot_gu[0], L->slot_wd[0])) != MP_OK)
            mp_error("the expert cache's host pool: expert %d of %d could not be stored", i,
                     L->nlocal);
    free(hgu);
    free(hd);
    /* every fetch of an iteration (one per local expert at most) between two readings */
    if (rc == MP_OK)
        rc = L->ops->cache_setup(L->dev, L->nslots, L->nlocal > L->nslots ? L->nlocal : L->nslots);
    /* static's resident experts: in place before the first iteration, no fetch counted */
    for (int s = 0; s < spec->slots && rc == MP_OK && spec->policy == MP_CACHE_STATIC; s++)
        if (L->cache.held[s] >= 0)
            rc = fetch(L, L->cache.held[s], s);
    double unused;
    if (rc == MP_OK && (rc = L->ops->sync(L->dev)) == MP_OK)
        rc = L->ops->cache_exposed_us(L->dev, &unused);
    return rc;
}

int mp_layer_cache_weights(struct mp_layer *L, int e, void **wgu, void **wd, int *slot)
{
    if (L->cache.spec.slots == 0) {
        *wgu = L->wgu[e];
        *wd = L->wd[e];
        *slot = -1;
        return MP_OK;
    }
    int miss, s = mp_expert_cache_access(&L->cache, e, &miss);
    *wgu = L->slot_gu[s];
    *wd = L->slot_wd[s];
    *slot = s;
    if (!miss) {
        L->it_hits++;
        return MP_OK;
    }
    L->it_misses++;
    L->it_fetch_bytes += L->gu_bytes + L->wd_bytes;
    return fetch(L, e, s);
}

int mp_layer_cache_release(struct mp_layer *L, int slot)
{
    return slot < 0 ? MP_OK : L->ops->cache_release(L->dev, slot);
}

int mp_layer_cache_exposed(struct mp_layer *L, double *us)
{
    *us = 0;
    return L->nslots > 0 ? L->ops->cache_exposed_us(L->dev, us) : MP_OK;
}

int mp_cache_fetch_rate(const struct mp_compute_ops *ops, struct mp_compute *dev, size_t bytes,
                        int reps, double *bytes_per_s)
{
    *bytes_per_s = 0;
    void *host = ops->host_alloc ? ops->host_alloc(dev, bytes) : malloc(bytes);
    void *slot = ops->alloc(dev, (bytes + ops->elem_size - 1) / ops->elem_size);
    int rc = host && slot ? MP_OK : MP_ERR_RUNTIME;
    if (rc != MP_OK)
        mp_error("out of memory measuring the expert cache's fetch rate (%zu bytes)", bytes);
    else
        memset(host, 0x3c, bytes); /* every page touched before a copy reads it */
    if (rc == MP_OK)
        rc = ops->cache_setup(dev, 1, 1);
    double best = 0, waited;
    for (int i = 0; i < reps && rc == MP_OK; i++) {
        void *dst[1] = {slot};
        const void *src[1] = {host};
        double t0 = mp_now_us();
        rc = ops->cache_fetch(dev, 0, dst, src, &bytes, 1);
        if (rc == MP_OK)
            rc = ops->sync(dev);
        double us = mp_now_us() - t0;
        if (rc == MP_OK)
            rc = ops->cache_exposed_us(dev, &waited); /* its one fetch's record, cleared */
        if (rc == MP_OK && us > 0 && (best == 0 || us < best))
            best = us;
    }
    if (rc == MP_OK && best > 0)
        *bytes_per_s = (double)bytes / (best * 1e-6);
    if (slot)
        ops->free(dev, slot);
    if (host && ops->host_free)
        ops->host_free(dev, host);
    else
        free(host);
    return rc;
}
