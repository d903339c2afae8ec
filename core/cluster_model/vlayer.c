/* vlayer.c - the counted path of the layer's model: traffic counted, durations from closed forms
 * of the pipeline's rules (see vlayer.h and docs/planning.md). */
#include "vlayer.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dedup.h"
#include "dispatch.h"
#include "dtype.h"
#include "error.h"
#include "expert_cache.h"
#include "fp8.h"
#include "padded.h"
#include "dispatch_plan.h"
#include "dispatch_plan_dedup.h"
#include "routing.h"
#include "topo.h"
#include "vdraws.h"
#include "vexec.h"
#include "vtraffic.h"

/* mp_memory_budget(0, 1) for a point that needs `need` bytes: a reading of the host's available
 * memory less than a second old is reused while the point needs at most half of it (a sweep's
 * points then read /proc/meminfo about once a second, not once each); a point nearer the budget
 * reads it afresh. */
static double model_memory_budget(double need)
{
    static double budget, read_at_us = -1;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the planner's threads share it */
    pthread_mutex_lock(&lock);
    double now = mp_now_us();
    if (read_at_us < 0 || now - read_at_us > 1e6 || budget <= 0 || need > 0.5 * budget) {
        budget = mp_memory_budget(0, 1);
        read_at_us = now;
    }
    double b = budget;
    pthread_mutex_unlock(&lock);
    return b;
}

/* Test hook: MOEPERF_MODEL_TRACED=1 takes every point's traffic from traced ranks (core/cluster_model/vexec.h)
 * instead of the dispatch mode's builder, which must give the same bytes. */
static int traced_wanted(void)
{
    const char *v = getenv("MOEPERF_MODEL_TRACED");
    return v && strcmp(v, "1") == 0;
}

/* Refuse, as the measured layer would or the model cannot time, a point of `ep` EP ranks with
 * `P` draws whose dispatch counts traffic with `traffic` (NULL: traced ranks): a dedup form its
 * mode lacks, an expert cache beside a mode the model does not time it for or without pcie_bw, a
 * point larger than this host's memory. MP_OK or MP_ERR_USAGE after a message. */
static int refuse_point(const struct mp_cluster *cl, const struct mp_model *m, int ep,
                        const struct mp_point *pt, int P, mp_vtraffic_fn traffic)
{
    long T = pt->batch * pt->seq;
    int K = m->topk, L = pt->placement->max_local > 0 ? pt->placement->max_local : 1;
    int N = pt->overlap > 1 ? pt->overlap : 1;
    if (mp_dispatch_check_dedup(pt) != MP_OK) /* as the measured layer refuses it */
        return MP_ERR_USAGE;
    if (pt->cache.slots > 0 && (N > 1 || pt->dedup != MP_DEDUP_PAIR ||
                                (traffic != mp_vtraffic_dynamic && traffic != mp_vtraffic_padded))) {
        mp_usage("--expert-cache with %s: the model times the cache of the unpipelined dynamic "
                 "and padded dispatches with --dedup pair only so far; measure it on a host "
                 "backend", N > 1 ? "--overlap" : pt->dedup != MP_DEDUP_PAIR ? "--dedup" : "this dispatch");
        return MP_ERR_USAGE;
    }
    if (pt->cache.slots > 0 && !(cl->pcie_bw > 0)) {
        mp_usage("--expert-cache: the cluster profile %s has no pcie_bw (the host-to-device "
                 "bandwidth a fetch runs at); give one in its file", cl->name);
        return MP_ERR_USAGE;
    }
    size_t pairs = (size_t)T * K;
    /* refuse before allocating: the draws, the ep×ep traffic matrices (one per chunk too, two
     * for the dedup counts) and the per-rank arrays */
    int matrices = N > 1 ? N + 1 : 1 + 2 * (pt->dedup != MP_DEDUP_PAIR);
    double need = (double)pairs * 8 + (double)ep * ep * 8 * matrices +
                  (double)ep * L * 8 + (double)P * ep * 8 * (11 + (N > 1 ? 2 * N : 0)) +
                  (double)(T / ep + 1) * K * 16;
    double budget = model_memory_budget(need);
    if ((budget > 0 && need > budget) || (double)(T / ep + 1) * K > 2147483647.0) {
        mp_usage("modelling batch %ld × seq %d × top-%d on %d EP ranks needs about %.3g GB, more "
                 "than this host can give (%.3g GB); lower --batch, --seq or the EP size",
                 pt->batch, pt->seq, K, ep, need / 1e9, budget / 1e9);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* --expert-cache: the experts each EP rank's FFN reads in draw t (its `used` and `used_rows`,
 * [ep·L]) from the draw's rows per (rank, local expert) exp_rows; padded: every local expert runs
 * its slots, ep · cap rows, padding included (as its ffn_rows count them). MP_OK or
 * MP_ERR_RUNTIME. */
static int draw_used(struct mp_vtraffic *t, const struct mp_model *m, const struct mp_point *pt,
                     const double *exp_rows, mp_vtraffic_fn traffic)
{
    const struct mp_placement *pl = pt->placement;
    long T = pt->batch * pt->seq;
    int ep = t->ep, K = m->topk, L = pl->max_local > 0 ? pl->max_local : 1;
    t->max_local = L;
    t->used = malloc((size_t)ep * L);
    t->used_rows = malloc((size_t)ep * L * sizeof *t->used_rows);
    if (!t->used || !t->used_rows)
        return MP_ERR_RUNTIME;
    int padded = traffic == mp_vtraffic_padded;
    double slot_rows = padded ? (double)ep * mp_padded_capacity((T + ep - 1) / ep, K, m->experts,
                                                                pt->dispatch_arg, 1)
                              : 0;
    for (int p = 0; p < ep; p++)
        for (int l = 0; l < L; l++) {
            size_t i = (size_t)p * L + l;
            int held = l < mp_placement_nlocal(pl, p);
            t->used[i] = held && (padded ? slot_rows > 0 : exp_rows[i] > 0);
            t->used_rows[i] = !t->used[i] ? 0 : padded ? slot_rows : exp_rows[i];
        }
    return MP_OK;
}

/* Test hook: MOEPERF_MODEL_MATRIX=1 counts every point's traffic on the ep × ep matrices instead
 * of the fast path's sums (mp_vtraffic_fast_ok), which must give the same bytes. */
static int matrix_wanted(void)
{
    const char *v = getenv("MOEPERF_MODEL_MATRIX");
    return v && strcmp(v, "1") == 0;
}

/* One point's scratch while its draws' traffic is built: the draw, and what the traffic builders
 * count into (struct mp_vdraw); the matrices, the plan and the dedup counts only where the
 * point's builder uses them (not on the fast path). */
struct vbuild {
    struct mp_plan plan;
    struct mp_dedup_counts dedup;
    struct mp_vfast fast;
    int32_t *ids;
    float *w;
    double *rows_to, *exp_rows, *chunk_to;
    int *holder_li;
    struct mp_vsole *sole;
    long *counts;
    int use_fast;
};

static void vbuild_free(struct vbuild *b)
{
    mp_plan_free(&b->plan);
    mp_dedup_free(&b->dedup);
    mp_vfast_free(&b->fast);
    free(b->ids);
    free(b->w);
    free(b->rows_to);
    free(b->exp_rows);
    free(b->chunk_to);
    free(b->holder_li);
    free(b->sole);
    free(b->counts);
}

/* Allocate b for point pt on a tp × ep layout built by `traffic`, with each holder's local index
 * and the sole holders of the placement's experts. MP_OK or MP_ERR_RUNTIME (free with
 * vbuild_free either way). */
static int vbuild_alloc(struct vbuild *b, const struct mp_cluster *cl, const struct mp_model *m,
                        int tp, int ep, const struct mp_point *pt, mp_vtraffic_fn traffic)
{
    const struct mp_placement *pl = pt->placement;
    long T = pt->batch * pt->seq;
    int K = m->topk, L = pl->max_local > 0 ? pl->max_local : 1;
    int N = pt->overlap > 1 ? pt->overlap : 1, nholders = pl->holder_off[pl->experts];
    size_t pairs = (size_t)T * K;
    memset(b, 0, sizeof *b);
    b->use_fast = (traffic == mp_vtraffic_dynamic || traffic == mp_vtraffic_dedup_pipelined) &&
                  !matrix_wanted() && mp_vtraffic_fast_ok(cl, m, pt);
    int matrices = !b->use_fast;
    b->ids = malloc(pairs * sizeof *b->ids);
    b->w = malloc(pairs * sizeof *b->w);
    b->rows_to = matrices ? malloc(sizeof(double) * (size_t)ep * ep) : NULL;
    b->exp_rows = malloc(sizeof(double) * (size_t)ep * L);
    b->chunk_to = N > 1 && matrices ? malloc(sizeof(double) * (size_t)ep * ep * N) : NULL;
    b->holder_li = malloc(((size_t)nholders + 1) * sizeof *b->holder_li);
    b->sole = malloc(((size_t)pl->experts + 1) * sizeof *b->sole);
    b->counts = calloc((size_t)ep * (1 + L), sizeof *b->counts);
    if (!b->ids || !b->w || (matrices && !b->rows_to) || !b->exp_rows ||
        (N > 1 && matrices && !b->chunk_to) || !b->holder_li || !b->sole || !b->counts ||
        (matrices && mp_plan_alloc(&b->plan, ep, L, (T + ep - 1) / ep, K) != MP_OK) ||
        (pt->dedup != MP_DEDUP_PAIR && matrices && mp_dedup_alloc(&b->dedup, ep) != MP_OK) ||
        (b->use_fast && mp_vfast_alloc(&b->fast, pt, tp, ep, cl->gpus_per_node, K) != MP_OK))
        return MP_ERR_RUNTIME;
    /* each holder's local index of its expert, for route_pair: the holders of an expert ascend
     * by rank as the ranks' lists hold it (mp_placement_local_index), so a cursor per expert
     * walked over the ranks in turn fills them (the sole holders' entries in b->sole first) */
    for (int x = 0; x < pl->experts; x++)
        b->sole[x].dest = pl->holder_off[x];
    for (int r = 0; r < ep; r++)
        for (int l = 0; l < mp_placement_nlocal(pl, r); l++)
            b->holder_li[b->sole[pl->local_ids[pl->local_off[r] + l]].dest++] = l;
    for (int x = 0; x < pl->experts; x++) {
        int h0 = pl->holder_off[x], h1 = pl->holder_off[x + 1];
        b->sole[x] = h1 - h0 == 1 ? (struct mp_vsole){pl->holders[h0], b->holder_li[h0]}
                                  : (struct mp_vsole){-1, -1};
    }
    return MP_OK;
}

int mp_vlayer_refuse(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                     const struct mp_point *pt)
{
    (void)tp;
    int P = mp_routing_pool_size(pt->warmup, pt->iters, pt->cache.slots > 0);
    if (mp_dispatch_check_overlap(pt) != MP_OK) /* as the measured layer refuses it */
        return MP_ERR_USAGE;
    return refuse_point(cl, m, ep, pt, P, mp_dispatch_for(pt)->model_traffic);
}

int mp_vtraffic_build(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                      uint64_t seed, const struct mp_point *pt, struct mp_vtraffic **out,
                      int *ndraws)
{
    long T = pt->batch * pt->seq;
    int rc = MP_ERR_RUNTIME;
    /* the measured layer's pool: one draw per warm-up and timed iteration, at most
     * MP_ROUTING_POOL_DRAWS without a cache (core/layer/routing_pool.c) */
    int P = mp_routing_pool_size(pt->warmup, pt->iters, pt->cache.slots > 0);
    mp_vtraffic_fn traffic = mp_dispatch_for(pt)->model_traffic;
    if (mp_vlayer_refuse(cl, m, tp, ep, pt) != MP_OK)
        return MP_ERR_USAGE;
    /* a mode without a traffic builder, or any when a test asks (MOEPERF_MODEL_TRACED=1): the
     * traffic of the layer's own stages */
    if (!traffic || traced_wanted())
        return mp_vexec_build(cl, m, tp, ep, seed, pt, out, ndraws);
    struct vbuild b = {0};
    struct mp_vtraffic *t = calloc((size_t)P, sizeof *t);
    if (!t || vbuild_alloc(&b, cl, m, tp, ep, pt, traffic) != MP_OK)
        goto out;
    for (int d = 0; d < P; d++) {
        if (mp_vtraffic_start(&t[d], cl, m, tp, ep, pt) != MP_OK)
            goto out;
        mp_vdraws_get(pt->routing, seed, d, T, b.ids, b.w); /* mp_routing_draw's, kept */
        struct mp_vdraw draw = {.cl = cl, .m = m, .pt = pt, .tokens = T, .ids = b.ids, .w = b.w,
                                .plan = b.use_fast ? NULL : &b.plan, .rows_to = b.rows_to,
                                .exp_rows = b.exp_rows, .chunk_to = b.chunk_to,
                                .dedup = pt->dedup != MP_DEDUP_PAIR && !b.use_fast ? &b.dedup
                                                                                   : NULL,
                                .holder_li = b.holder_li, .sole = b.sole, .counts = b.counts,
                                .fast = b.use_fast ? &b.fast : NULL};
        traffic(&t[d], &draw);
        if (pt->cache.slots > 0 && draw_used(&t[d], m, pt, b.exp_rows, traffic) != MP_OK)
            goto out;
    }
    rc = MP_OK;
out:
    if (rc != MP_OK) {
        mp_error("out of memory modelling %d ranks at batch %ld", tp * ep, pt->batch);
        mp_vtraffic_free(t, P);
    } else {
        *out = t;
        *ndraws = P;
    }
    vbuild_free(&b);
    return rc;
}

/* The counts of EP rank p that every one of its TP ranks records. */
static void rank_counts(const struct mp_vtraffic *t, int p, struct mp_rank_iter *x)
{
    x->tokens = t->tokens[p];
    x->rows = t->rows[p];
    x->ffn_rows = t->ffn_rows[p];
    x->pairs = t->pairs[p];
    x->local_pairs = t->local[p];
    x->bytes_sent = t->bytes_sent[p];
    x->dispatch_intra = t->dispatch_intra[p];
    x->dispatch_inter = t->dispatch_inter[p];
    x->combine_intra = t->combine_intra[p];
    x->combine_inter = t->combine_inter[p];
    x->dropped = t->dropped[p];
    x->start_skew = 0; /* the model's ranks start together */
    x->dispatch_inter_us = x->dispatch_intra_us = NAN; /* set by a --dedup node timing */
    x->combine_inter_us = x->combine_intra_us = NAN;
    x->cache_hits = x->cache_misses = x->fetch_bytes = x->fetch_us = 0; /* no cache modelled */
}

/* Route: launch, plus the gate GEMM 2·H·E·n_p for gate routing; the deduplicated dispatches
 * (t->dedup_hops) route on the host, as the layer does, and launch nothing. */
static double route_us(const struct mp_cluster *cl, const struct mp_model *m,
                       const struct mp_vtraffic *t, int p)
{
    if (t->dedup_hops > 0)
        return 0;
    double gate = t->gate ? 2.0 * m->hidden * m->experts * t->tokens[p] /
                                (cl->flops * cl->flops_eff) * 1e6
                          : 0;
    return cl->launch_us + gate;
}

/* The expert FFN's costs of draw t's ranks (rows, shared ones included, over active experts on
 * one rank): the roofline with FLOPs 6·H·Dl·rows and weight bytes 3·H·Dl·active·elem
 * (docs/METRICS.md, Expert FFN alone), or with --weight-dtype fp8 the fp8 rate and the bytes of
 * codes and block scales, as mp_cost_expert_ffn_us prices them. */
static void ffn_cost(const struct mp_cluster *cl, const struct mp_model *m, int tp,
                     const struct mp_vtraffic *t, struct mp_ffn_cost *f)
{
    mp_cost_ffn_prepare(cl, m->hidden, m->ffn / tp, t->weight_dtype, t->gemm, f);
}

/* The debug straggler's extra FFN time at world rank ep_rank·tp + tp_rank, and what a TP peer of
 * it waits for in the TP reduce (the allreduce ends when the straggler joins). */
static double straggle_ffn(const struct mp_vtraffic *t, int p, int k)
{
    return t->straggle_us > 0 && p * t->tp + k == t->straggle_rank ? t->straggle_us : 0;
}

static double straggle_wait(const struct mp_vtraffic *t, int p, int k)
{
    int s = t->straggle_rank;
    return t->straggle_us > 0 && t->tp > 1 && s / t->tp == p && s % t->tp != k ? t->straggle_us
                                                                               : 0;
}

/* How many of an EP rank's TP ranks a timing works out one by one: all of them with a
 * straggler, which sets its own and its peers' apart, else the first alone, whose record every
 * other one's equals (the same FFN, reduce and counts), so they copy it. */
static int alike_ranks(const struct mp_vtraffic *t)
{
    return t->straggle_us > 0 ? t->tp : 1;
}

/* The count exchange that precedes a dispatch's data (the notify phase): one latency-bound round
 * on the links the data uses, or nothing for a mode that sends fixed sizes (padded). */
static double count_round_us(const struct mp_cluster *cl, const struct mp_vtraffic *t)
{
    return t->count_exchange ? mp_cost_exchange_us(cl, 0, 0, t->a2a.uses_intra,
                                                    t->a2a.uses_inter, 1)
                             : 0;
}

/* The pipelined layer (docs/planning.md): each chunk's dispatch and combine are one exchange round
 * plus launch, its FFN the roofline on its rows and experts, its TP reduce an allreduce of its
 * rows; mp_cost_pipeline_us schedules them after the one count exchange of all chunks. Node
 * deduplicated, as core/layer/dispatch_dedup_pipelined.c runs it: the inter-node phase out and back is
 * the chunk's dispatch and combine, its intra-node phase out and back runs in the chunk's compute
 * step, before the FFN and after the TP reduce. */
static void time_pipelined(const struct mp_cluster *cl, const struct mp_model *m,
                           const struct mp_vtraffic *t, struct mp_rank_iter *ranks)
{
    int tp = t->tp, ep = t->ep, N = t->nchunks;
    double row_bytes = m->hidden * cl->elem_bytes;
    double *blk = malloc(sizeof(double) * ((size_t)N * ep + 3 * (size_t)N + 3 * (size_t)ep));
    if (!blk) { /* no schedule without memory: a point of NANs rather than a wrong number */
        for (int r = 0; r < tp * ep; r++)
            ranks[r].route = ranks[r].notify = ranks[r].dispatch = ranks[r].ffn =
                ranks[r].tp_reduce = ranks[r].combine = NAN;
        return;
    }
    double *compute = blk, *dispatch = compute + (size_t)N * ep, *combine = dispatch + N;
    double *rank_end = combine + N, *ffn = rank_end + ep, *reduce = ffn + ep;
    double *intra = reduce + ep; /* [N] node: the intra-node phase out and back, in compute */
    double counts = count_round_us(cl, t);
    struct mp_ffn_cost fc;
    struct mp_allreduce_cost ar;
    ffn_cost(cl, m, tp, t, &fc);
    mp_cost_allreduce_prepare(cl, tp, &ar);
    for (int k = 0; k < N; k++)
        intra[k] = 0;
    for (int k = 0; k < N && !t->chunk_hop; k++) {
        const struct mp_vexchange *x = &t->chunk_a2a[k];
        double data = mp_cost_exchange_us(cl, x->intra_max, x->inter_max, x->uses_intra,
                                           x->uses_inter, x->incast);
        double f = t->dispatch_scale; /* the dispatch's rows in --dispatch-dtype */
        dispatch[k] = cl->launch_us + (f == 1 ? data
                                              : mp_cost_exchange_us(cl, f * x->intra_max,
                                                                     f * x->inter_max,
                                                                     x->uses_intra, x->uses_inter,
                                                                     x->incast));
        combine[k] = cl->launch_us + data;
    }
    if (t->chunk_hop) { /* deduplicated: each hop's counts, then each chunk's metadata (an
                         * exchange each, as the layer sends them), first; then rows only */
        counts = 0;
        double meta = mp_dedup_meta_bytes(MP_DEDUP_RANK, m->topk);
        double f = meta / (m->hidden * cl->elem_bytes * t->dispatch_scale); /* of a row's */
        for (int h = 0; h < t->dedup_hops; h++) {
            const struct mp_vexchange *x = &t->meta[h];
            counts += mp_cost_exchange_us(cl, 0, 0, x->uses_intra, x->uses_inter, 1);
            for (int k = 0; k < N; k++) {
                const struct mp_vexchange *c = &t->chunk_hop[2 * k + h];
                counts += cl->launch_us +
                          mp_cost_exchange_us(cl, f * c->intra_max, f * c->inter_max,
                                              c->uses_intra, c->uses_inter, c->incast);
            }
        }
        for (int k = 0; k < N; k++) {
            double out[2] = {0, 0}, back[2] = {0, 0};
            for (int h = 0; h < t->dedup_hops; h++) {
                const struct mp_vexchange *x = &t->chunk_hop[2 * k + h];
                const struct mp_vexchange *y = &t->chunk_back[2 * k + h];
                out[h] = cl->launch_us + mp_cost_exchange_us(cl, x->intra_max, x->inter_max,
                                                              x->uses_intra, x->uses_inter,
                                                              x->incast);
                back[h] = cl->launch_us + mp_cost_exchange_us(cl, y->intra_max, y->inter_max,
                                                               y->uses_intra, y->uses_inter,
                                                               y->incast);
            }
            dispatch[k] = out[0];
            combine[k] = back[0];
            intra[k] = out[1] + back[1];
        }
    }
    for (int p = 0; p < ep; p++) {
        ffn[p] = reduce[p] = 0;
        for (int k = 0; k < N; k++) {
            double rows = t->chunk_rows[k * ep + p] + (k == 0 ? m->shared * t->tokens[p] : 0);
            double f = mp_cost_ffn_prepared_us(&fc, rows, t->chunk_active[k * ep + p]);
            double r = mp_cost_allreduce_prepared_us(&ar, rows * row_bytes);
            compute[(size_t)k * ep + p] = intra[k] + f + r;
            ffn[p] += f;
            reduce[p] += r;
        }
        if (t->straggle_us > 0 && t->straggle_rank / tp == p) /* its whole TP group waits */
            compute[p] += t->straggle_us;
    }
    double end = counts + mp_cost_pipeline_us(N, dispatch, combine, compute, ep, rank_end);
    int alike = alike_ranks(t); /* TP ranks worked out one by one; the rest copy the first */
    for (int p = 0; p < ep; p++) {
        for (int k = 0; k < alike; k++) {
            struct mp_rank_iter *x = &ranks[p * tp + k];
            x->route = route_us(cl, m, t, p);
            x->ffn = ffn[p] + straggle_ffn(t, p, k);
            x->tp_reduce = reduce[p] + straggle_wait(t, p, k);
            x->notify = counts;
            x->dispatch = end - counts - x->ffn - x->tp_reduce; /* the data's exposed part */
            x->combine = 0;
            rank_counts(t, p, x);
        }
        for (int k = alike; k < tp; k++)
            ranks[p * tp + k] = ranks[p * tp];
    }
    free(blk);
}

/* A deduplicated hop's dispatch as the layer makes it: its rows (of the hop's bytes, the share
 * 1 − meta_share), then their metadata apart (the rest), each an exchange with its launch. */
static double dedup_hop_us(const struct mp_cluster *cl, const struct mp_vexchange *x,
                           double meta_share)
{
    double rows = 1 - meta_share;
    return 2 * cl->launch_us +
           mp_cost_exchange_us(cl, rows * x->intra_max, rows * x->inter_max, x->uses_intra,
                               x->uses_inter, x->incast) +
           mp_cost_exchange_us(cl, meta_share * x->intra_max, meta_share * x->inter_max,
                               x->uses_intra, x->uses_inter, x->incast);
}

/* The phases an unpipelined draw's ranks share: the notify phase, dispatch and combine, and
 * --dedup node's hops of each. */
struct layer_phases {
    double counts, dispatch, combine, hop_d[2], hop_c[2];
};

/* EP ranks whose FFN and reduce times layer_records keeps on the stack; more take the heap. */
#define LAYER_KEPT_RANKS 1024

/* Each FFN and TP reduce of EP rank p's TP rank k, as the records hold them. */
static double rank_ffn(const struct mp_vtraffic *t, double f, int p, int k)
{
    return f + straggle_ffn(t, p, k) + (t->fetch_us ? t->fetch_us[p] : 0);
}

/* The records of an unpipelined draw `t` with phases `ph`, `per` of them per EP rank (as
 * time_layer): every rank's FFN and reduce, the slowest of their sums, then each record in
 * field order, every combine waiting for the slowest. The FFN and reduce of each EP rank are
 * kept between the two passes (worked out again if there is no room to keep them). */
static void layer_records(const struct mp_cluster *cl, const struct mp_model *m,
                          const struct mp_vtraffic *t, struct mp_rank_iter *ranks, int per,
                          const struct layer_phases *ph)
{
    int tp = t->tp, ep = t->ep, alike = alike_ranks(t); /* the rest of a TP group copy */
    double row_bytes = m->hidden * cl->elem_bytes, slowest = 0, kept[2 * LAYER_KEPT_RANKS];
    double *fr = ep <= LAYER_KEPT_RANKS ? kept : malloc(2 * (size_t)ep * sizeof *fr);
    struct mp_ffn_cost fc;
    struct mp_allreduce_cost ar;
    ffn_cost(cl, m, tp, t, &fc);
    mp_cost_allreduce_prepare(cl, tp, &ar);
    for (int p = 0; p < ep; p++) {
        double f = mp_cost_ffn_prepared_us(&fc, t->ffn_rows[p], t->active[p]);
        double r = mp_cost_allreduce_prepared_us(&ar, t->ffn_rows[p] * row_bytes);
        if (fr) {
            fr[2 * p] = f;
            fr[2 * p + 1] = r;
        }
        for (int k = 0; k < alike; k++) {
            double busy = rank_ffn(t, f, p, k) + (r + straggle_wait(t, p, k));
            slowest = busy > slowest ? busy : slowest; /* fmax for any busy but −0 */
        }
    }
    for (int p = 0; p < ep; p++) {
        double f = fr ? fr[2 * p] : mp_cost_ffn_prepared_us(&fc, t->ffn_rows[p], t->active[p]);
        double r = fr ? fr[2 * p + 1]
                      : mp_cost_allreduce_prepared_us(&ar, t->ffn_rows[p] * row_bytes);
        double route = route_us(cl, m, t, p);
        for (int k = 0; k < alike; k++) {
            struct mp_rank_iter *x = &ranks[p * per + k];
            x->route = route;
            x->notify = ph->counts;
            x->dispatch = ph->dispatch;
            x->ffn = rank_ffn(t, f, p, k);
            x->tp_reduce = r + straggle_wait(t, p, k);
            x->combine = (slowest - x->ffn - x->tp_reduce) + ph->combine; /* waits for it */
            rank_counts(t, p, x);
            if (t->dedup_hops == 2) { /* node: dispatch = inter + intra, combine = wait + both */
                x->dispatch_inter_us = ph->hop_d[0];
                x->dispatch_intra_us = ph->hop_d[1];
                x->combine_inter_us = ph->hop_c[0];
                x->combine_intra_us = ph->hop_c[1];
            }
        }
        for (int k = alike; k < per; k++)
            ranks[p * per + k] = ranks[p * per];
    }
    if (fr != kept)
        free(fr);
}

/* mp_vtraffic_time of an unpipelined draw with `per` records per EP rank: its TP ranks' (per
 * t->tp), or, when they are alike (alike_ranks 1), the first alone (per 1: ranks[p], the others'
 * copies left out). */
static void time_layer(const struct mp_cluster *cl, const struct mp_model *m,
                       const struct mp_vtraffic *t, struct mp_rank_iter *ranks, int per)
{
    const struct mp_vexchange *a = &t->a2a;
    double counts = count_round_us(cl, t);
    double data = mp_cost_exchange_us(cl, a->intra_max, a->inter_max, a->uses_intra,
                                       a->uses_inter, a->incast);
    double ds = t->dispatch_scale; /* the dispatch's rows in --dispatch-dtype */
    double dispatch = cl->launch_us + (ds == 1 ? data
                                               : mp_cost_exchange_us(cl, ds * a->intra_max,
                                                                      ds * a->inter_max,
                                                                      a->uses_intra, a->uses_inter,
                                                                      a->incast));
    double combine = cl->launch_us + data;
    double hop_d[2] = {0, 0}, hop_c[2] = {0, 0}; /* each hop's share of dispatch and combine */
    if (t->dedup_hops) { /* node: the inter-node phase, then the intra-node phase (the direct rows
                          * and the forwards, on the EP group's node groups); combine back */
        counts = dispatch = combine = 0;
        /* a dispatched row's metadata share of the hops' bytes (the same K·8 for rank and
         * node, core/layer/dedup.h) */
        double meta = mp_dedup_meta_bytes(MP_DEDUP_RANK, m->topk);
        double meta_share = meta / (m->hidden * cl->elem_bytes * t->dispatch_scale + meta);
        for (int h = 0; h < t->dedup_hops; h++) { /* each hop exchanges its counts first */
            const struct mp_vexchange *x = &t->hop[h], *y = &t->back[h];
            /* the first hop's count round is the notify phase, as measured; node's second one
             * (the intra-node phase's counts, its forwards' known only once the first phase's
             * rows arrived) is dispatch, the intra-node phase's share as measured; a padded hop
             * sends fixed slots: no counts */
            double round = t->count_exchange
                               ? mp_cost_exchange_us(cl, 0, 0, x->uses_intra, x->uses_inter, 1)
                               : 0;
            if (h == 0)
                counts += round;
            else
                hop_d[h] += round;
            hop_d[h] += dedup_hop_us(cl, x, meta_share);
            hop_c[h] = cl->launch_us + mp_cost_exchange_us(cl, y->intra_max, y->inter_max,
                                                            y->uses_intra, y->uses_inter,
                                                            y->incast);
            dispatch += hop_d[h];
            combine += hop_c[h];
        }
    }
    struct layer_phases ph = {.counts = counts, .dispatch = dispatch, .combine = combine,
                              .hop_d = {hop_d[0], hop_d[1]}, .hop_c = {hop_c[0], hop_c[1]}};
    layer_records(cl, m, t, ranks, per, &ph);
}

void mp_vtraffic_time(const struct mp_cluster *cl, const struct mp_model *m,
                      const struct mp_vtraffic *t, struct mp_rank_iter *ranks)
{
    if (t->nchunks > 1)
        time_pipelined(cl, m, t, ranks);
    else
        time_layer(cl, m, t, ranks, t->tp);
}

/* The expert cache of every EP rank (docs/METRICS.md, "Expert cache"), as the measured layer
 * keeps it: each draw accesses the rank's local experts with rows (padded: all) in order, warm-up
 * iterations first; a miss costs the expert's stored bytes at the profile's pcie_bw. With a copy
 * engine (copy_engine 1, as the cuda backend's copy stream) a fetch starts once the engine is free
 * and the slot's last FFN done, and the FFN waits only for what is left of it; without (the cpu
 * backend) the whole copy precedes the FFN. The TP ranks of an EP rank hold its experts' shards:
 * each fetches its own, alike. */
struct vcache {
    int ep;
    struct mp_expert_cache *c; /* [ep] */
    double *hits, *misses, *fetch_us; /* [ep] the iteration's */
    double expert_bytes, pcie_bw;
    const struct mp_placement *pl;
    const struct mp_cluster *cl;
    int H, Dl, weight_dtype, gemm, copy_engine;
    double *slot_free; /* [slots + 1] when each slot's last FFN ends (a copy engine's timeline) */
};

static void vcache_free(struct vcache *v)
{
    for (int p = 0; v->c && p < v->ep; p++)
        mp_expert_cache_free(&v->c[p]);
    free(v->c);
    free(v->hits);
    free(v->slot_free);
    memset(v, 0, sizeof *v);
}

/* One iteration's accesses of draw t on every rank: its hits, misses and the fetch time its FFN
 * phase waits for. The copy engine's timeline runs from the FFN phase's start: the engine copies
 * one fetch after another, each once its slot's previous expert's FFN ended (each expert's FFN
 * its own call, as the cache runs them); an FFN starts when the one before it ended and its fetch
 * is done, and the wait is what it adds. */
static void vcache_step(struct vcache *v, const struct mp_vtraffic *t)
{
    double copy_us = v->expert_bytes / v->pcie_bw * 1e6;
    for (int p = 0; p < v->ep; p++) {
        v->hits[p] = v->misses[p] = v->fetch_us[p] = 0;
        double engine = 0, stream = 0; /* when the copy engine and the FFNs are free */
        for (int s = 0; s <= v->c[p].spec.slots; s++)
            v->slot_free[s] = 0;
        for (int l = 0; l < mp_placement_nlocal(v->pl, p) && l < t->max_local; l++) {
            size_t i = (size_t)p * t->max_local + l;
            if (!t->used[i])
                continue;
            int miss, s = mp_expert_cache_access(&v->c[p], l, &miss);
            v->hits[p] += !miss;
            v->misses[p] += miss;
            if (miss && !v->copy_engine) {
                v->fetch_us[p] += copy_us;
            } else if (miss) {
                engine = fmax(engine, v->slot_free[s]) + copy_us;
                v->fetch_us[p] += fmax(0, engine - stream);
                stream = fmax(stream, engine);
            }
            stream += mp_cost_expert_ffn_us(v->cl, v->H, v->Dl, t->used_rows[i], 1,
                                             v->weight_dtype, v->gemm);
            v->slot_free[s] = stream;
        }
    }
}

static int vcache_start(struct vcache *v, const struct mp_cluster *cl, const struct mp_model *m,
                        int tp, int ep, const struct mp_point *pt, const struct mp_vtraffic *t,
                        int P, int warmup)
{
    const struct mp_placement *pl = pt->placement;
    int H = m->hidden, Dl = m->ffn / tp;
    v->ep = ep;
    v->pl = pl;
    v->pcie_bw = cl->pcie_bw;
    v->cl = cl;
    v->H = H;
    v->Dl = Dl;
    v->weight_dtype = pt->weight_dtype;
    v->gemm = pt->gemm;
    v->copy_engine = cl->copy_engine != 0;
    v->slot_free = malloc((size_t)(pt->cache.slots + 1) * sizeof *v->slot_free);
    v->expert_bytes = pt->weight_dtype == MP_DTYPE_FP8
                          ? (double)(mp_fp8_image_bytes(H, Dl, 2) + mp_fp8_image_bytes(Dl, H, 1))
                          : 3.0 * H * Dl * cl->elem_bytes;
    v->c = calloc((size_t)ep, sizeof *v->c);
    v->hits = calloc((size_t)ep * 3, sizeof *v->hits);
    double *share = malloc((size_t)(pl->max_local > 0 ? pl->max_local : 1) * sizeof *share);
    int rc = v->c && v->hits && share && v->slot_free ? MP_OK : MP_ERR_RUNTIME;
    if (rc == MP_OK) {
        v->misses = v->hits + ep;
        v->fetch_us = v->hits + 2 * ep;
    }
    for (int p = 0; p < ep && rc == MP_OK; p++) {
        int n = mp_placement_nlocal(pl, p);
        for (int l = 0; l < n; l++) /* static's hottest: the routing's expected shares */
            share[l] = pt->routing->prob ? pt->routing->prob[pl->local_ids[pl->local_off[p] + l]]
                                         : 0;
        rc = mp_expert_cache_init(&v->c[p], &pt->cache, n, share);
    }
    free(share);
    for (int s = 0; s < warmup && rc == MP_OK; s++) /* the warm-up fills the caches */
        vcache_step(v, &t[s % P]);
    if (rc != MP_OK) {
        vcache_free(v);
        mp_error("out of memory modelling the expert cache of %d ranks", ep);
    }
    return rc;
}

/* res as mp_vlayer_run starts it for point pt on tp × ep ranks: no records, every figure the
 * model does not give NAN. */
static void result_init(struct mp_point_result *res, const struct mp_point *pt, int tp, int ep)
{
    memset(res, 0, sizeof *res);
    res->check_error = NAN;
    res->check_error_unquantized = NAN;
    res->overlap_efficiency = NAN;
    res->mem_gb_per_gpu = NAN;
    res->iters = pt->iters;
    res->nranks = tp * ep;
    res->tokens_per_rank = (pt->batch * pt->seq + ep - 1) / ep;
}

/* Of the metrics of n rank records, those mp_overlap_efficiency reads of a pipelined point's
 * unpipelined reference (comm_us and ffn_us, with layer_us and route_us they come from), worked
 * out as mp_metrics_iter works them out (each the running max2 over the ranks in order from 0,
 * comm_us their difference); the others 0. */
static void plain_metrics(const struct mp_rank_iter *r, int n, struct mp_iter_metrics *m)
{
    struct mp_iter_metrics z = {0};
    for (int i = 0; i < n; i++) {
        double layer = mp_rank_layer_us(&r[i]);
        z.layer_us = z.layer_us > layer ? z.layer_us : layer;
        z.ffn_us = z.ffn_us > r[i].ffn ? z.ffn_us : r[i].ffn;
        z.route_us = z.route_us > r[i].route ? z.route_us : r[i].route;
    }
    z.comm_us = z.layer_us - z.ffn_us - z.route_us;
    *m = z;
}

/* Iteration it's rank records of `t` [P] into rec (tp·ep of them) and its metrics into res, as
 * mp_vlayer_run times them: with an expert cache `vc` its step first and its counts in the
 * records; with `plain` (a pipelined point) also the same draw unpipelined, timed in `scratch`
 * (tp·ep records), into plain[it]. */
static void time_iteration(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                           const struct mp_point *pt, struct mp_vtraffic *t, int P, int it,
                           struct vcache *vc, struct mp_rank_iter *rec,
                           struct mp_iter_metrics *plain, struct mp_rank_iter *scratch,
                           struct mp_point_result *res)
{
    int N = tp * ep, warmup = pt->warmup > 0 ? pt->warmup : 0;
    struct mp_vtraffic *draw = &t[(warmup + it) % P];
    if (vc) {
        vcache_step(vc, draw);
        draw->fetch_us = vc->fetch_us;
        mp_vtraffic_time(cl, m, draw, rec);
        draw->fetch_us = NULL;
        for (int i = 0; i < N; i++) {
            rec[i].cache_hits = vc->hits[i / tp];
            rec[i].cache_misses = vc->misses[i / tp];
            rec[i].fetch_bytes = vc->misses[i / tp] * vc->expert_bytes;
            rec[i].fetch_us = vc->fetch_us[i / tp];
        }
        mp_metrics_iter(rec, N, tp, &res->metrics[it]);
        return;
    }
    mp_vtraffic_time(cl, m, draw, rec);
    mp_metrics_iter(rec, N, tp, &res->metrics[it]);
    if (pt->overlap > 1)
        mp_metrics_pipelined(&res->metrics[it]);
    if (plain) { /* the same draw with its phases one after the other: TP ranks alike add
                  * copies of their first, which change no maximum, so their records are left
                  * out then */
        struct mp_vtraffic whole = *draw;
        whole.nchunks = 1;
        int per = alike_ranks(&whole) == 1 ? 1 : tp;
        time_layer(cl, m, &whole, scratch, per);
        plain_metrics(scratch, per * ep, &plain[it]);
    }
}

int mp_vlayer_time(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                   const struct mp_point *pt, struct mp_vtraffic *t, int P,
                   struct mp_rank_iter *recs, struct mp_point_result *res)
{
    int N = tp * ep;
    struct mp_iter_metrics *plain = NULL; /* the unpipelined reference of a pipelined point */
    struct mp_rank_iter *scratch = NULL;
    result_init(res, pt, tp, ep);
    /* every record is written, by mp_vtraffic_time (every field, tests/unit/test_vlayer.c); the
     * iterations from the draws' count on repeat earlier ones (rank_period) */
    int period = pt->iters > 0 ? pt->iters : 1;
    res->rank_period = recs ? 0 : period;
    res->ranks = recs ? NULL : malloc((size_t)period * N * sizeof *res->ranks);
    res->metrics = calloc((size_t)pt->iters, sizeof *res->metrics);
    int reference = pt->overlap > 1 && !recs; /* the planner reports no overlap efficiency */
    if (reference) {
        plain = calloc((size_t)(pt->iters > 0 ? pt->iters : 1), sizeof *plain);
        scratch = calloc((size_t)N, sizeof *scratch);
    }
    if ((!recs && !res->ranks) || !res->metrics || (reference && (!plain || !scratch))) {
        mp_point_result_free(res);
        free(plain);
        free(scratch);
        mp_error("out of memory modelling %d ranks", N);
        return MP_ERR_RUNTIME;
    }
    for (int d = 0; d < P; d++) { /* the point's own timing choices, whatever t was built for */
        t[d].weight_dtype = pt->weight_dtype;
        t[d].gemm = pt->gemm;
    }
    int warmup = pt->warmup > 0 ? pt->warmup : 0, rc = MP_OK;
    struct vcache vc = {0};
    int caching = pt->cache.slots > 0;
    if (caching && vcache_start(&vc, cl, m, tp, ep, pt, t, P, warmup) != MP_OK) {
        mp_point_result_free(res);
        rc = MP_ERR_RUNTIME;
    }
    if (P < period && !caching && !recs) /* a cache's state carries over: no iteration repeats */
        res->rank_period = P;
    for (int it = 0; it < pt->iters && rc == MP_OK; it++) {
        /* timed iteration it is the layer's step warmup + it, which routes draw step mod P; the
         * timing of a draw depends on nothing else, so an iteration P after another repeats it:
         * its rank records are the same ones (rank_period), its metrics copied */
        if (it >= P && !caching) {
            res->metrics[it] = res->metrics[it - P];
            if (plain)
                plain[it] = plain[it - P];
            continue;
        }
        time_iteration(cl, m, tp, ep, pt, t, P, it, caching ? &vc : NULL,
                       recs ? recs : res->ranks + (size_t)it * N, plain, scratch, res);
    }
    if (plain && rc == MP_OK)
        res->overlap_efficiency = mp_overlap_efficiency(plain, res->metrics, pt->iters);
    vcache_free(&vc);
    free(plain);
    free(scratch);
    return rc;
}

int mp_vlayer_run(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                  uint64_t seed, const struct mp_point *pt, struct mp_point_result *res)
{
    double t_begin = mp_now_us();
    struct mp_vtraffic *t = NULL;
    int P = 0, rc = mp_vtraffic_build(cl, m, tp, ep, seed, pt, &t, &P);
    if (rc != MP_OK) {
        result_init(res, pt, tp, ep);
        return rc;
    }
    rc = mp_vlayer_time(cl, m, tp, ep, pt, t, P, NULL, res);
    mp_vtraffic_free(t, P);
    res->wall_us = mp_now_us() - t_begin;
    res->timed_us = res->wall_us; /* the model's work is the whole point */
    return rc;
}
