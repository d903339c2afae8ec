/* layer.h - the MoE layer pipeline of one rank: route | dispatch | expert FFN | tp-reduce | combine,
 * run through a compute and a comm backend under the measurement protocol of docs/METRICS.md. */
#ifndef MP_LAYER_H
#define MP_LAYER_H

#include <stdint.h>

#include "comm.h"
#include "compute.h"
#include "metrics.h"
#include "model.h"
#include "expert_cache.h"
#include "placement.h"
#include "routing.h"
#include "point.h"
#include "step.h"

/* What a point produced. `ranks` and `metrics` are filled on world rank 0 only. */
struct mp_point_result {
    int iters, nranks;
    /* iteration-major: iteration i's nranks records start at ranks + (i mod rank_period)·nranks
     * (mp_point_ranks); rank_period is iters where every iteration has its own (measured runs),
     * fewer where the model's iterations repeat its draws */
    struct mp_rank_iter *ranks;
    int rank_period;
    struct mp_iter_metrics *metrics; /* [iters] */
    long tokens_per_rank;            /* the most tokens any EP rank holds */
    double check_error;              /* ‖out − ref‖/‖ref‖ (every rank), NAN when not checked; with
                                      * --dispatch-dtype fp8 ref is the reference of the inputs as
                                      * dispatched (quantized), with --weight-dtype fp8 of the
                                      * weights as stored (dequantized), held to the backend's
                                      * tolerance */
    /* --dispatch-dtype or --weight-dtype fp8 with --check: ‖out − ref‖/‖ref‖ against the
     * reference of the unquantized inputs and weights, held to mp_fp8_check_bound; NAN otherwise */
    double check_error_unquantized;
    /* with overlap > 1 (rank 0): IMB-NBC's overlap efficiency (t_comm + t_comp − t_ovrl) /
     * min(t_comm, t_comp), with t_comm and t_comp the medians of comm_us and ffn_us of the same
     * point run without overlap, and t_ovrl the median of layer_us − route_us overlapped; NAN
     * otherwise */
    double overlap_efficiency;
    /* model runs: weights and KV cache per GPU to serve the model at this point, GB
     * (mp_gpumem_compute); NAN for measured runs, set by the caller */
    double mem_gb_per_gpu;
    /* model runs: the whole decode step the point's layer is part of (core/cluster_model/step.h), set by the
     * caller; valid 0 for measured runs */
    struct mp_step_result step;
    double timed_us, wall_us;        /* time inside timed iterations, and the whole point */
};

/* Iteration `it`'s records of every rank (res->nranks of them). */
static inline const struct mp_rank_iter *mp_point_ranks(const struct mp_point_result *res, int it)
{
    return res->ranks + (size_t)(it % res->rank_period) * res->nranks;
}

/* --check's bound on the relative error of a point with fp8 dispatch and/or fp8 weights against
 * the reference of the unquantized inputs and weights (docs/METRICS.md, "FP8 dispatch" and "FP8
 * weights"): each quantized value reaches the GEMM within 2^−4 of itself (e4m3's 3 mantissa bits,
 * rounded to nearest: base/fp8.h). The output silu(x·Wg) ⊙ (x·Wu) · Wd holds x twice and a weight
 * three times; fp8 weights also quantize the GEMMs' inputs (w8a8): x twice more and the
 * activation once. With n quantized factors (2 for an fp8 dispatch, 6 for fp8 weights, 8 for
 * both) the bound is (1 + 2^−4)^n − 1: 0.129, 0.439 and 0.624. */
static inline double mp_fp8_check_bound(int dispatch_fp8, int weight_fp8)
{
    int n = 2 * !!dispatch_fp8 + 6 * !!weight_fp8;
    double b = 1;
    for (int i = 0; i < n; i++)
        b *= 1 + 0x1p-4;
    return b - 1;
}

/* --check's tight bound on a point (docs/METRICS.md, "FP8 weights"): the backend's
 * check_tolerance, but at least MP_FP8_WEIGHT_TIGHT with fp8 weights. Those quantize the FFN's
 * activation (w8a8), which the backend computes in another order than the double-precision
 * reference: a value within that rounding of an e4m3 decision boundary lands one code away, 2^−4
 * to 2^−3 of itself (measured on the cpu backend: 5.3e-5 for one such code among 30,000 values at
 * H 1024, Dl 528). 1e-3 allows a few; the faults the bound must catch (a scale from the wrong
 * block, a missing dequantization) give errors of order 1. */
#define MP_FP8_WEIGHT_TIGHT 1e-3
static inline double mp_check_tight_bound(double check_tolerance, int weight_fp8)
{
    return weight_fp8 && check_tolerance < MP_FP8_WEIGHT_TIGHT ? MP_FP8_WEIGHT_TIGHT
                                                                : check_tolerance;
}

struct mp_layer; /* one layout's buffers, plan and weights */

/* Prepare a layout (the comm must already be split for it) for points of at most `max_tokens`
 * tokens (batch·seq) in total. Buffers are sized here for what a rank holding its contiguous share
 * of experts can receive; a point whose placement gives a rank more experts grows them before its
 * iterations. Refuses with MP_ERR_USAGE on every rank alike (collective), before allocating and
 * naming the bytes and the rank with the least room, when the estimate exceeds some rank's budget
 * (mp_memory_agree with `max_memory`: its GPU's free memory, or its host's share), or when a
 * rank's token-expert rows would exceed the 2^31 an MPI count holds. */
int mp_layer_create(struct mp_layer **out, const struct mp_compute_ops *ops, struct mp_compute *dev,
                    struct mp_comm *comm, const struct mp_model *model, uint64_t seed,
                    long max_tokens, long long max_memory, int max_overlap);
void mp_layer_destroy(struct mp_layer *L);

/* Run each of the point's first `ndraws` routing draws once, untimed and in order, draw d's rank
 * record into recs[d]: the point checked and made ready as mp_layer_run makes it (buffers,
 * weights, routing pool, plans), then its dispatch mode's iterate, after before(arg, d) when set.
 * Collective. The model's traced ranks run their layers through it (core/cluster_model/vexec.c). */
int mp_layer_run_draws(struct mp_layer *L, const struct mp_point *pt, int ndraws,
                       struct mp_rank_iter *recs, void (*before)(void *arg, int d), void *arg);

/* The local expert (0 .. its local experts − 1) whose gate-up weights are `weights`, or −1: how
 * the traced ranks tell which expert a recorded FFN ran. */
int mp_layer_local_expert_of(const struct mp_layer *L, const void *weights);

/* Run one point on every rank: set up weights (cached across points with the same local experts),
 * inputs and the routing pool, then warmup + iters synchronized iterations, then the check.
 * With pt->overlap = N > 1 each rank's tokens are cut into N chunks and pipelined (chunk i+1's
 * dispatch and chunk i−1's combine in flight while chunk i's experts compute; host backends with a
 * non-blocking all-to-all only); the per-phase split of a rank's time is then route, FFN and TP
 * reduce as measured, the rest counted as dispatch (exposed communication), and the point is also
 * run unpipelined for the overlap efficiency.
 * With the padded dispatch (pt->dispatch) every rank sends every peer fixed slots of
 * mp_padded_capacity() rows per local expert (no count exchange before the data; pairs over
 * capacity dropped, padding computed like data), the all-to-all moves the padded volume and the
 * FFN computes every slot row. The valid counts are exchanged after the timed phases, for the
 * metrics only.
 * Collective: every rank of the world calls it with the same point. */
int mp_layer_run(struct mp_layer *L, const struct mp_point *pt, struct mp_point_result *res);

/* Count the bytes of the records (bytes_sent and the dispatch and combine bytes per link class)
 * in rows of `hidden` elements of elem_bytes (activations; a dispatched row in the point's
 * --dispatch-dtype of that hidden size), and an expert cache's fetches in experts of
 * expert_bytes, instead of the layer's own: the model's traced ranks, whose small rows and
 * weights stand for the real model's. From the next point on. */
void mp_layer_count_rows_as(struct mp_layer *L, int hidden, double elem_bytes,
                            double expert_bytes);
void mp_point_result_free(struct mp_point_result *res);

/* Bytes the layer will allocate per rank for a layout (weights + buffers), for the memory guard. */
double mp_layer_bytes_estimate(const struct mp_model *model, int tp, int ep, int max_local,
                               long max_tokens, size_t elem);

/* mp_in_timed_loop (harness.h): 1 while this rank is inside a timed iteration */
#include "harness.h"

#endif
