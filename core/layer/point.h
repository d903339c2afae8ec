/* point.h - one point of a sweep as every rank sees it: its batch, routing, placement, dispatch
 * mode and dtypes (the layer runs it, core/layer/layer.h; the dispatch table reads it). */
#ifndef MP_POINT_H
#define MP_POINT_H

#include "expert_cache.h"

struct mp_routing;
struct mp_placement;
struct mp_dispatch_mode;

/* One point of a sweep, as every rank sees it. */
struct mp_point {
    /* the point's NVTX range name (docs/cluster.md, "Nsight Systems"): "moeperf/point" and its
     * CSV key, as the progress line names it; NULL: "moeperf/point" alone */
    const char *label;
    long batch;  /* tokens per decode step for the whole EP instance */
    int seq;     /* multiplies batch (prefill) */
    const struct mp_routing *routing;
    const struct mp_placement *placement;
    int warmup, iters;
    int check;   /* compare the output with the single-process reference */
    int overlap;         /* chunks pipelined so dispatch, FFN and combine overlap (≤ 1: off) */
    /* the dispatch mode --dispatch chose (core/layer/dispatch.h; NULL: dynamic); with overlap > 1 its
     * pipelined form runs (mp_dispatch_for) */
    const struct mp_dispatch_mode *dispatch;
    double dispatch_arg; /* the mode's NAME:ARG (padded: capacity factor, mp_padded_capacity);
                          * 0 without one (padded: lossless) */
    int dedup;           /* what a dispatched row stands for: enum mp_dedup (core/layer/dedup.h; 0:
                          * pair, one row per token-expert pair) */
    int dispatch_dtype;  /* what the dispatched rows travel in: enum mp_dtype (0: bf16, the
                          * activation type as it is; fp8: e4m3 codes and scales, base/fp8.h) */
    int blocked_activations; /* the tokens' 128-value blocks scaled apart (mp_activations_blocked):
                              * set for every point of a sweep with an fp8 --dispatch-dtype, so
                              * its bf16 and fp8 points run on the same tokens (and the gate routes
                              * them alike), and a wrong block scale cannot hide in --check */
    int blocked_weights; /* the experts' 128×128 weight blocks scaled apart (mp_weights_expert's
                          * `blocked`): set for every point of a sweep with an fp8 --weight-dtype,
                          * so its bf16 and fp8 points compute with the same weights and a wrong
                          * block scale cannot hide in --check */
    int weight_dtype;    /* what the experts' weights are stored in: enum mp_dtype (0: bf16, the
                          * backend's weight type as it is; fp8: codes and 128×128 block scales,
                          * base/fp8.h, dequantized by the backend for its GEMMs) */
    int gemm;            /* the expert FFN's GEMMs: enum mp_gemm (mp_ffn_args.gemm) */
    /* --expert-cache: slots 0 holds every local expert's weights; else each rank keeps that many
     * resident and fetches the others from a host pool before their FFN (docs/METRICS.md,
     * "Expert cache") */
    struct mp_cache_spec cache;
    int graph;           /* padded only, backends with graph replay: capture the layer once per
                          * point and replay it every iteration */
    int flush_cache;     /* evict the device's caches (ops->flush_cache) before every timed
                          * iteration, outside its marks */
    int straggle_rank;   /* debug: this world rank adds straggle_us to its FFN phase */
    double straggle_us;  /* 0: off */
};

#endif
