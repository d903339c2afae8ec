/* weight_cache.h - one rank's expert cache over device memory (--expert-cache): a host pool of
 * its local experts' weights as the device stores them, SLOTS device slots, and the fetch of a
 * missing expert into its slot before its FFN through the compute backend's cache hooks; shared by
 * the layer and moeperf-ffn (docs/METRICS.md, "Expert cache"). */
#ifndef MP_WEIGHT_CACHE_H
#define MP_WEIGHT_CACHE_H

#include <stddef.h>

#include "compute.h"
#include "expert_cache.h"

struct mp_weight_cache {
    const struct mp_compute_ops *ops;
    struct mp_compute *dev;
    struct mp_expert_cache cache; /* which expert is in which slot (the policy's bookkeeping) */
    void **pool_gu, **pool_wd;    /* [nlocal] host memory (host_alloc's where the backend has it) */
    void **slot_gu, **slot_wd;    /* [nslots] device memory; the last is static's staging slot */
    int nslots, fp8;              /* fp8: the weights are fp8 images */
    size_t gu_elems, wd_elems;    /* backend elements of one expert's two buffers */
    double gu_bytes, wd_bytes;    /* their bytes as the backend stores them: what a fetch moves */
    double gu_count, wd_count;    /* their bytes as counted (fetch_bytes): gu_bytes and wd_bytes
                                   * unless mp_weight_cache_count_as says otherwise */
    double hits, misses, fetch_bytes; /* accesses counted since the caller last cleared them */
};

/* Local expert i's weights in fp32: its [Wg | Wu] (H × 2·Dl) into gu, Wd (Dl × H) into wd. */
typedef void (*mp_expert_gen_fn)(void *arg, int i, float *gu, float *wd);

/* Start the cache of `spec` for `nlocal` experts of shape H × Dl stored in `weight_dtype`
 * (enum mp_dtype): the pool filled by `gen` (bf16 converted as the backend's upload converts,
 * fp8 as images), the slots allocated, static's resident set (by `share`, [nlocal] or NULL:
 * alike) loaded without counting misses. Slots 0 (off): nothing allocated. MP_OK, or
 * MP_ERR_RUNTIME after a message (out of memory, a backend error). */
int mp_weight_cache_setup(struct mp_weight_cache *wc, const struct mp_compute_ops *ops,
                          struct mp_compute *dev, const struct mp_cache_spec *spec, int nlocal,
                          const double *share, int weight_dtype, int H, int Dl,
                          mp_expert_gen_fn gen, void *gen_arg);
/* Count an expert's bf16 weights at `elem_bytes` per element from now on (fp8 images stay their
 * bytes): a virtual backend's weights stand for the profile's elements, which its own element
 * size does not give (the model's --backend: mp_session_elem_bytes). On virtual memory a fetch
 * names these bytes too, as nothing is copied. */
void mp_weight_cache_count_as(struct mp_weight_cache *wc, double elem_bytes);
/* Free it (the device drained first); safe on a zeroed or freed cache. */
void mp_weight_cache_free(struct mp_weight_cache *wc);

/* Whether the cache holds slots (its spec is not off). */
static inline int mp_weight_cache_on(const struct mp_weight_cache *wc) { return wc->nslots > 0; }

/* The slot local expert `e`'s FFN reads (*gu, *wd, *slot), the fetch from the pool queued first on
 * a miss (hits, misses and fetch_bytes counted); mp_weight_cache_release(slot) follows that FFN. */
int mp_weight_cache_get(struct mp_weight_cache *wc, int e, void **gu, void **wd, int *slot);
int mp_weight_cache_release(struct mp_weight_cache *wc, int slot);
/* After the device's sync: *us, the time the FFNs waited for fetches since the last call. */
int mp_weight_cache_exposed(struct mp_weight_cache *wc, double *us);

/* The rate a fetch copies at on this backend: `bytes` from host memory (host_alloc's, page-locked
 * on the cuda backend) to the device through cache_fetch, each copy waited for, the best of
 * `reps`; *bytes_per_s. Outside timed regions (it resets the backend's cache state: call it
 * before a cache is set up). MP_OK, or MP_ERR_RUNTIME (out of memory, a backend error). */
int mp_cache_fetch_rate(const struct mp_compute_ops *ops, struct mp_compute *dev, size_t bytes,
                        int reps, double *bytes_per_s);

#endif
