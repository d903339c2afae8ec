/* ffn_work.h - moeperf-ffn's rows, weights and buffers of one point. */
#ifndef MP_FFN_WORK_H
#define MP_FFN_WORK_H

#include "bench_opts.h"
#include "expert_cache.h"
#include "placement.h"
#include "routing.h"
#include "session.h"
#include "weight_cache.h"

/* One point's rows: the critical rank's counts (every rank computes them alike) and this rank's
 * row layout. */
struct ffn_work {
    long total, tokens_per_rank;
    long crit_rows;   /* rows of the EP rank with the most rows, shared rows included (of such
                       * ranks, the one with the most active experts) */
    int crit_active;  /* its experts with at least one row, shared included */
    long tok0, ntok;  /* this rank's own tokens */
    int nact;         /* this rank's local experts with at least one row */
    int *act_ids;     /* [nact] their global ids */
    int *act_local;   /* [nact] their index among the rank's local experts (the cache's) */
    long *row_off;    /* [nact+1] expert-major row offsets */
    int32_t *row_tok; /* [row_off[nact]] the global token of every routed row */
};

/* This layout's expert weights on the device, generated on first use and kept across points. */
struct ffn_wcache {
    int n;            /* experts + shared */
    enum mp_dtype dt; /* --weight-dtype they are stored in */
    int blocked;      /* generated blocked: the sweep has fp8 weights (mp_weights_expert) */
    void **wgu, **wd; /* [n], NULL until loaded */
    float *hgu, *hd;  /* host scratch of one shard */
};

/* Device buffers of one point, allocated before timing. */
struct ffn_bufs {
    void *in, *xs, *out, *work;
    void **wgu, **wd; /* [nact + shared] the pointers handed to expert_ffn */
    int gemm;         /* enum mp_gemm, from --gemm */
    int weight_dtype; /* enum mp_dtype of the weights */
    /* --expert-cache: the rank's local experts' cache (routed experts read from its slots), and
     * each iteration's counts: hits, accesses, bytes fetched, exposed fetch time */
    struct mp_weight_cache *wc;
};

/* Free a point's rows and zero them. */
void ffn_work_free(struct ffn_work *w);

/* Route the whole batch (draw 0), serve every pair where the placement says and count the rows
 * of every rank's local experts: the critical rank's rows and active experts, and this rank's row
 * layout. Collective. MP_OK or MP_ERR_RUNTIME. */
int ffn_work_plan(struct ffn_work *w, const struct mp_session *s, const struct mp_layout *lay,
                  const struct mp_routing *r, const struct mp_placement *pl, long batch);

/* Free the layout's expert weights on the device and the host scratch. */
void ffn_wcache_free(struct ffn_wcache *wc, const struct mp_session *s);

/* An empty weight cache for a layout of TP size `tp`, weights stored in `dt`. */
int ffn_wcache_init(struct ffn_wcache *wc, const struct mp_session *s, int tp, enum mp_dtype dt);

/* This rank's TP shard of `expert` generated and stored unless already on the device. */
int ffn_wcache_load(struct ffn_wcache *wc, const struct mp_session *s, int expert);

/* Free a point's device buffers. */
void ffn_bufs_free(struct ffn_bufs *b, const struct mp_session *s);

/* Refuse (on every rank alike, MP_ERR_USAGE) a point whose new weights and buffers would not fit
 * in some rank's budget. Collective. */
int ffn_memory_guard(const struct mp_session *s, const struct ffn_wcache *wc, const struct ffn_work *w,
                     long batch);

/* Weights, inputs and buffers of this rank for point `w`, all before timing (`cache`: the
 * --expert-cache of the point, or NULL). */
int ffn_bufs_make(struct ffn_bufs *b, const struct mp_session *s, struct ffn_wcache *wc,
                  const struct ffn_work *w, struct mp_weight_cache *cache);

#endif
