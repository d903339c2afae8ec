/* weight_cache.c - one rank's expert cache over device memory (see weight_cache.h). */
#include "weight_cache.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dtype.h"
#include "error.h"
#include "fp8.h"

static void *pool_alloc(const struct mp_weight_cache *wc, size_t bytes)
{
    return wc->ops->host_alloc ? wc->ops->host_alloc(wc->dev, bytes) : malloc(bytes);
}

static void pool_free(const struct mp_weight_cache *wc, void *p)
{
    if (p && wc->ops->host_free)
        wc->ops->host_free(wc->dev, p);
    else
        free(p);
}

void mp_weight_cache_free(struct mp_weight_cache *wc)
{
    if (!wc->ops) {
        mp_expert_cache_free(&wc->cache);
        return;
    }
    if (wc->nslots > 0)
        wc->ops->sync(wc->dev); /* no fetch still reads the pool or writes a slot */
    for (int i = 0; i < wc->cache.nlocal && wc->pool_gu; i++) {
        pool_free(wc, wc->pool_gu[i]);
        pool_free(wc, wc->pool_wd[i]);
    }
    for (int s = 0; s < wc->nslots && wc->slot_gu; s++) {
        if (wc->slot_gu[s])
            wc->ops->free(wc->dev, wc->slot_gu[s]);
        if (wc->slot_wd[s])
            wc->ops->free(wc->dev, wc->slot_wd[s]);
    }
    free(wc->pool_gu);
    free(wc->pool_wd);
    free(wc->slot_gu);
    free(wc->slot_wd);
    mp_expert_cache_free(&wc->cache);
    const struct mp_compute_ops *ops = wc->ops;
    struct mp_compute *dev = wc->dev;
    memset(wc, 0, sizeof *wc);
    wc->ops = ops;
    wc->dev = dev;
}

/* Fetch local expert e's weights from the pool into slot s (queued: compute.h's cache_fetch). */
static int fetch(struct mp_weight_cache *wc, int e, int s)
{
    void *dst[2] = {wc->slot_gu[s], wc->slot_wd[s]};
    const void *src[2] = {wc->pool_gu[e], wc->pool_wd[e]};
    int counted = wc->ops->memory == MP_MEMORY_VIRTUAL; /* nothing copied: what it stands for */
    size_t bytes[2] = {(size_t)(counted ? wc->gu_count : wc->gu_bytes),
                       (size_t)(counted ? wc->wd_count : wc->wd_bytes)};
    return wc->ops->cache_fetch(wc->dev, s, dst, src, bytes, 2);
}

/* Fill the pool with local expert i's weights as the device stores them: the fp8 images' bytes,
 * or the values the upload converts (fp32 on the cpu backend, bf16 on a GPU), read back through
 * two device buffers of a slot's size (`stage_gu`, `stage_wd`). */
static int pool_expert(struct mp_weight_cache *wc, int i, int weight_dtype, int H, int Dl,
                       float *hgu, float *hd, void *stage_gu, void *stage_wd)
{
    wc->pool_gu[i] = pool_alloc(wc, (size_t)wc->gu_bytes);
    wc->pool_wd[i] = pool_alloc(wc, (size_t)wc->wd_bytes);
    if (!wc->pool_gu[i] || !wc->pool_wd[i])
        return MP_ERR_RUNTIME;
    if (weight_dtype == MP_DTYPE_FP8) {
        mp_fp8_image_store(hgu, H, Dl, 2, wc->pool_gu[i]);
        mp_fp8_image_store(hd, Dl, H, 1, wc->pool_wd[i]);
        return MP_OK;
    }
    const struct mp_compute_ops *o = wc->ops;
    int rc = o->upload(wc->dev, stage_gu, hgu, wc->gu_elems);
    if (rc == MP_OK)
        rc = o->upload(wc->dev, stage_wd, hd, wc->wd_elems);
    if (rc == MP_OK)
        rc = o->download_bytes(wc->dev, wc->pool_gu[i], stage_gu, (size_t)wc->gu_bytes);
    return rc != MP_OK ? rc
                       : o->download_bytes(wc->dev, wc->pool_wd[i], stage_wd, (size_t)wc->wd_bytes);
}

int mp_weight_cache_setup(struct mp_weight_cache *wc, const struct mp_compute_ops *ops,
                          struct mp_compute *dev, const struct mp_cache_spec *spec, int nlocal,
                          const double *share, int weight_dtype, int H, int Dl,
                          mp_expert_gen_fn gen, void *gen_arg)
{
    wc->ops = ops;
    wc->dev = dev;
    mp_weight_cache_free(wc);
    if (spec->slots == 0)
        return mp_expert_cache_init(&wc->cache, spec, nlocal, NULL);
    size_t es = ops->elem_size;
    if (weight_dtype == MP_DTYPE_FP8) {
        wc->gu_bytes = (double)mp_fp8_image_bytes(H, Dl, 2);
        wc->wd_bytes = (double)mp_fp8_image_bytes(Dl, H, 1);
        wc->gu_elems = ((size_t)wc->gu_bytes + es - 1) / es;
        wc->wd_elems = ((size_t)wc->wd_bytes + es - 1) / es;
    } else {
        wc->gu_elems = (size_t)H * 2 * Dl;
        wc->wd_elems = (size_t)Dl * H;
        wc->gu_bytes = (double)(wc->gu_elems * es);
        wc->wd_bytes = (double)(wc->wd_elems * es);
    }
    wc->gu_count = wc->gu_bytes;
    wc->wd_count = wc->wd_bytes;
    wc->fp8 = weight_dtype == MP_DTYPE_FP8;
    int rc = mp_expert_cache_init(&wc->cache, spec, nlocal, share);
    if (rc != MP_OK)
        return rc;
    wc->nslots = spec->slots + (spec->policy == MP_CACHE_STATIC);
    wc->pool_gu = calloc((size_t)nlocal, sizeof *wc->pool_gu);
    wc->pool_wd = calloc((size_t)nlocal, sizeof *wc->pool_wd);
    wc->slot_gu = calloc((size_t)wc->nslots, sizeof *wc->slot_gu);
    wc->slot_wd = calloc((size_t)wc->nslots, sizeof *wc->slot_wd);
    float *hgu = malloc((size_t)H * 2 * Dl * sizeof(float)),
          *hd = malloc((size_t)Dl * H * sizeof(float));
    rc = wc->pool_gu && wc->pool_wd && wc->slot_gu && wc->slot_wd && hgu && hd ? MP_OK
                                                                              : MP_ERR_RUNTIME;
    for (int s = 0; s < wc->nslots && rc == MP_OK; s++) {
        wc->slot_gu[s] = ops->alloc(dev, wc->gu_elems);
        wc->slot_wd[s] = ops->alloc(dev, wc->wd_elems);
        rc = wc->slot_gu[s] && wc->slot_wd[s] ? MP_OK : MP_ERR_RUNTIME;
    }
    if (rc != MP_OK)
        mp_error("out of memory for the expert cache (%d slots, a host pool of %d experts)",
                 spec->slots, nlocal);
    for (int i = 0; i < nlocal && rc == MP_OK; i++) { /* staged through slot 0 */
        gen(gen_arg, i, hgu, hd);
        rc = pool_expert(wc, i, weight_dtype, H, Dl, hgu, hd, wc->slot_gu[0], wc->slot_wd[0]);
        if (rc != MP_OK)
            mp_error("the expert cache's host pool: expert %d of %d could not be stored", i,
                     nlocal);
    }
    free(hgu);
    free(hd);
    /* every fetch of an iteration (one per local expert at most) between two readings */
    if (rc == MP_OK)
        rc = ops->cache_setup(dev, wc->nslots, nlocal > wc->nslots ? nlocal : wc->nslots);
    /* static's resident experts: in place before the first iteration, no fetch counted */
    for (int s = 0; s < spec->slots && rc == MP_OK && spec->policy == MP_CACHE_STATIC; s++)
        if (wc->cache.held[s] >= 0)
            rc = fetch(wc, wc->cache.held[s], s);
    double unused;
    if (rc == MP_OK && (rc = ops->sync(dev)) == MP_OK)
        rc = ops->cache_exposed_us(dev, &unused);
    wc->hits = wc->misses = wc->fetch_bytes = 0;
    return rc;
}

int mp_weight_cache_get(struct mp_weight_cache *wc, int e, void **gu, void **wd, int *slot)
{
    int miss, s = mp_expert_cache_access(&wc->cache, e, &miss);
    *gu = wc->slot_gu[s];
    *wd = wc->slot_wd[s];
    *slot = s;
    if (!miss) {
        wc->hits++;
        return MP_OK;
    }
    wc->misses++;
    wc->fetch_bytes += wc->gu_count + wc->wd_count;
    return fetch(wc, e, s);
}

void mp_weight_cache_count_as(struct mp_weight_cache *wc, double elem_bytes)
{
    if (wc->fp8)
        return;
    wc->gu_count = (double)wc->gu_elems * elem_bytes;
    wc->wd_count = (double)wc->wd_elems * elem_bytes;
}

int mp_weight_cache_release(struct mp_weight_cache *wc, int slot)
{
    return slot < 0 ? MP_OK : wc->ops->cache_release(wc->dev, slot);
}

int mp_weight_cache_exposed(struct mp_weight_cache *wc, double *us)
{
    *us = 0;
    return wc->nslots > 0 ? wc->ops->cache_exposed_us(wc->dev, us) : MP_OK;
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
