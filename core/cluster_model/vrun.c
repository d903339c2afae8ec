/* vrun.c - a modelled point run by the layer's own pipeline (vrun.h): every virtual rank of the
 * layout runs mp_layer_run on a fiber, on the traced ranks' compute and comm, whose clocks the
 * cluster model's costs move (docs/ARCHITECTURE.md, "The model"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "comm.h"
#include "compute.h"
#include "dedup.h"
#include "dtype.h"
#include "error.h"
#include "fp8.h"
#include "layer.h"
#include "topo.h"
#include "vexec.h"
#include "vlayer.h"
#include "vrun.h"
#include "vtraffic.h"

/* What the costs of one point read: the profile, the model's real sizes and those the traced
 * ranks run with, so a traced row's bytes tell which real row it stands for. */
struct vrun {
    const struct mp_cluster *cl;
    const struct mp_model *m;
    struct mp_model small;
    struct mp_point run;      /* the point the ranks run: gate routing replayed as drawn */
    struct mp_routing replay; /* (the model's draws of a gate routing) */
    int tp, ep, gate;
    uint64_t seed;
    size_t meta_row, small_row, small_drow; /* the traced ranks' row bytes */
    double row_bytes, drow_bytes, meta_bytes; /* the real rows they stand for */
    double expert_bytes, fetch_us; /* an expert's weights, and a cache fetch of them [µs] */
    struct mp_ffn_cost fc;
    struct mp_allreduce_cost ar;
    double *rows; /* [ep·ep] an exchange's rows, for mp_vexchange_of (meetings price one at a time) */
    struct mp_point_result *res; /* rank 0's */
    struct mp_vworld *w;
    int world;
    /* the exchange benchmark's world (mp_vrun_world): rows of the bytes they are given, moved
     * nowhere, each exchange the round alone */
    int real_rows;
    /* what each virtual rank runs, with its comm and its compute (of table `ops`) on the
     * world's clock */
    const struct mp_compute_ops *ops;
    int (*fn)(struct mp_comm *c, struct mp_compute *dev, void *arg);
    void *arg;
};

/* The compute a rank queued since its last mark: a dispatch plan is the routing kernel's launch
 * (and with gate routing the gate GEMM, 2·H·E FLOPs a token); the expert FFNs of a phase the
 * roofline of their rows and experts with rows, priced as one (mp_cost_expert_ffn_us); host
 * delays as they are. */
static double work_us(void *arg, const struct mp_vwork *w)
{
    const struct vrun *v = arg;
    const struct mp_cluster *cl = v->cl;
    double us = w->delay_us;
    if (w->plan_builds > 0) {
        us += w->plan_builds * cl->launch_us;
        if (v->gate)
            us += 2.0 * v->m->hidden * v->m->experts * (double)w->plan_tokens /
                  (cl->flops * cl->flops_eff) * 1e6;
    }
    if (w->ffn_calls > 0 && v->real_rows) /* the shape the calls name */
        us += mp_cost_expert_ffn_us(cl, w->ffn_H, w->ffn_Dl, w->ffn_rows, (int)w->ffn_active,
                                    w->ffn_weight_dtype, w->ffn_gemm);
    else if (w->ffn_calls > 0) /* the point's real shape, for the traced ranks' small rows */
        us += mp_cost_ffn_prepared_us(&v->fc, w->ffn_rows, (int)w->ffn_active);
    return us;
}

/* The real bytes of a traced row of `bytes`: a metadata row's, an fp8-packed dispatch row's or an
 * activation row's. */
static double real_row_bytes(const struct vrun *v, size_t bytes)
{
    if (v->real_rows)
        return (double)bytes;
    if (bytes == v->meta_row)
        return v->meta_bytes;
    if (bytes == v->small_drow && bytes != v->small_row)
        return v->drow_bytes;
    return v->row_bytes;
}

/* An exchange's duration where its members meet: a TP allreduce of its rows; a count exchange
 * one latency-bound round on the links its rows will use; rows a launch and the exchange round
 * their real bytes make (mp_vexchange_of, mp_vexchange_us). */
static double exchange_us(void *arg, const struct mp_vworld_exchange *x)
{
    struct vrun *v = arg;
    const struct mp_cluster *cl = v->cl;
    if (x->reduce)
        return v->real_rows ? mp_cost_allreduce_us(cl, (double)x->elems * cl->elem_bytes,
                                                   x->nmembers)
                            : mp_cost_allreduce_prepared_us(&v->ar, (double)x->elems /
                                                                        v->small.hidden *
                                                                        v->row_bytes);
    int ep = x->ep, tp = v->world / ep; /* the layout the ranks split into */
    size_t cells = (size_t)ep * ep;
    for (size_t i = 0; i < cells; i++)
        v->rows[i] = x->rows_to[i];
    struct mp_vexchange e;
    mp_vexchange_of(v->rows, ep, tp, cl->gpus_per_node,
                    x->counts ? 1 : real_row_bytes(v, x->row_bytes), &e);
    if (x->counts)
        return mp_cost_exchange_us(cl, 0, 0, e.uses_intra, e.uses_inter, 1);
    return (v->real_rows ? 0 : cl->launch_us) + mp_vexchange_us(cl, &e);
}

/* One cached expert's FFN on `rows` (the cache's timeline runs each on its own). */
static double expert_us(void *arg, const struct mp_vwork *w, double rows)
{
    const struct vrun *v = arg;
    if (v->real_rows) /* the shape the call names */
        return mp_cost_expert_ffn_us(v->cl, w->ffn_H, w->ffn_Dl, rows, 1, w->ffn_weight_dtype,
                                     w->ffn_gemm);
    return mp_cost_ffn_prepared_us(&v->fc, rows, 1);
}

/* One cache fetch of `bytes` of weights: over the host link (pcie_bw) as they are, or for the
 * traced ranks' small weights the real expert's (v->fetch_us). */
static double fetch_us(void *arg, double bytes)
{
    const struct vrun *v = arg;
    if (!v->real_rows)
        return v->fetch_us;
    return v->cl->pcie_bw > 0 ? bytes / v->cl->pcie_bw * 1e6 : 0;
}

struct rank_run {
    struct vrun *v;
    int rank;
};

/* One virtual rank: its compute on the world's clock, then v->fn. */
static int run_rank(struct mp_comm *c, void *arg)
{
    struct rank_run *r = arg;
    struct vrun *v = r->v;
    const struct mp_compute_ops *ops = v->ops;
    struct mp_compute *dev = NULL;
    int rc = ops->init(&dev, 0);
    if (rc != MP_OK)
        return rc;
    struct mp_vwork_cost k = {.arg = v, .work_us = work_us, .expert_us = expert_us,
                              .fetch_us = fetch_us, .copy_engine = v->cl->copy_engine != 0};
    mp_compute_model_rank_clock(dev, mp_vworld_time_of(v->w, r->rank), &k);
    rc = v->fn(c, dev, v->arg);
    ops->fini(dev);
    return rc;
}

/* Run v->fn on a world of v->world virtual ranks, each on a fiber, timed by v's costs. */
static int run_world(struct vrun *v)
{
    int N = v->world, rc = MP_ERR_RUNTIME;
    /* every virtual rank holds state per peer (the world's row matrices, each rank's node map and
     * call slots, its layer's counts and plans): about 160 bytes a (rank, peer) pair, as measured
     * with 2,048 and 4,096 ranks (0.71 and 2.64 GB); refuse before allocating any of it */
    double need = 160.0 * N * N, budget = mp_memory_budget(0, 1);
    if (budget > 0 && need > budget) {
        mp_usage("--world %d: running every virtual rank needs about %.3g GB, more than this host "
                 "can give (%.3g GB); lower --world", N, need / 1e9, budget / 1e9);
        return MP_ERR_USAGE;
    }
    struct rank_run *runs = calloc((size_t)N, sizeof *runs);
    void **args = calloc((size_t)N, sizeof *args);
    v->rows = malloc((size_t)N * N * sizeof *v->rows); /* the widest EP group's exchange */
    if (!runs || !args || !v->rows) {
        mp_error("out of memory running %d virtual ranks", N);
        goto out;
    }
    if ((rc = mp_vworld_create(&v->w, N, v->cl->gpus_per_node)) != MP_OK)
        goto out;
    mp_vworld_time(v->w, exchange_us, v);
    if (v->real_rows)
        mp_vworld_nodata(v->w);
    for (int r = 0; r < N; r++) {
        runs[r] = (struct rank_run){.v = v, .rank = r};
        args[r] = &runs[r];
    }
    rc = mp_vworld_run(v->w, run_rank, args);
out:
    mp_vworld_free(v->w);
    v->w = NULL;
    free(runs);
    free(args);
    free(v->rows);
    v->rows = NULL;
    return rc;
}

int mp_vrun_world(const struct mp_cluster *cl, const struct mp_model *m, int world,
                  int (*fn)(struct mp_comm *c, struct mp_compute *dev, void *arg), void *arg)
{
    struct vrun v = {.cl = cl, .m = m, .world = world, .real_rows = 1, .ops = &mp_compute_model,
                     .fn = fn, .arg = arg};
    return run_world(&v);
}

/* A virtual rank of a layer point: mp_layer_run on the small model, rank 0's result kept. */
static int layer_rank(struct mp_comm *c, struct mp_compute *dev, void *arg)
{
    struct vrun *v = arg;
    const struct mp_compute_ops *ops = &mp_compute_model_rank;
    struct mp_layer *L = NULL;
    struct mp_point_result mine;
    memset(&mine, 0, sizeof mine);
    long total = v->run.batch * v->run.seq;
    int rc = c->ops->split(c, v->tp, v->ep);
    if (rc == MP_OK)
        rc = mp_layer_create(&L, ops, dev, c, &v->small, v->seed, total, 0,
                             v->run.overlap > 1 ? v->run.overlap : 1);
    if (rc == MP_OK) {
        mp_layer_count_rows_as(L, v->m->hidden, v->cl->elem_bytes, v->expert_bytes);
        rc = mp_layer_run(L, &v->run, &mine);
    }
    if (c->rank == 0)
        *v->res = mine;
    else
        mp_point_result_free(&mine);
    if (L)
        mp_layer_destroy(L);
    return rc;
}

/* Test hook: MOEPERF_MODEL_COUNTED=1 times every point on the planner's counted path
 * (mp_vlayer_run) instead, for the tests that compare the two. */
static int counted_wanted(void)
{
    const char *e = getenv("MOEPERF_MODEL_COUNTED");
    return e && strcmp(e, "1") == 0;
}

int mp_vrun_point(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                  uint64_t seed, const struct mp_point *pt, struct mp_point_result *res)
{
    if (counted_wanted())
        return mp_vlayer_run(cl, m, tp, ep, seed, pt, res);
    double t_begin = mp_now_us();
    int N = tp * ep, rc = mp_vlayer_refuse(cl, m, tp, ep, pt);
    memset(res, 0, sizeof *res);
    if (rc != MP_OK)
        return rc;
    struct vrun v = {.cl = cl, .m = m, .run = *pt, .replay = *pt->routing, .tp = tp, .ep = ep,
                     .seed = seed, .gate = mp_routing_is_gate(pt->routing), .res = res};
    if (v.gate) { /* no activations to route on the model: its draws of the gate (vexec.h) */
        v.replay.kind = MP_ROUTE_UNIFORM;
        v.run.routing = &v.replay;
    }
    v.meta_row = mp_vexec_small_model(m, tp, &v.small);
    v.small_row = (size_t)v.small.hidden * 4;
    v.small_drow = (size_t)mp_dispatch_row_bytes((enum mp_dtype)pt->dispatch_dtype,
                                                 v.small.hidden, (double)v.small_row);
    v.row_bytes = m->hidden * cl->elem_bytes;
    v.drow_bytes = mp_dispatch_row_bytes((enum mp_dtype)pt->dispatch_dtype, m->hidden,
                                         v.row_bytes);
    v.meta_bytes = (double)v.meta_row;
    int Dl = m->ffn / tp; /* an expert's shard on each TP rank, which fetches its own */
    v.expert_bytes = pt->weight_dtype == MP_DTYPE_FP8
                         ? (double)(mp_fp8_image_bytes(m->hidden, Dl, 2) +
                                    mp_fp8_image_bytes(Dl, m->hidden, 1))
                         : 3.0 * m->hidden * Dl * cl->elem_bytes;
    v.fetch_us = cl->pcie_bw > 0 ? v.expert_bytes / cl->pcie_bw * 1e6 : 0;
    mp_cost_ffn_prepare(cl, m->hidden, m->ffn / tp, pt->weight_dtype, pt->gemm, &v.fc);
    mp_cost_allreduce_prepare(cl, tp, &v.ar);
    v.world = N;
    v.ops = &mp_compute_model_rank;
    v.fn = layer_rank;
    v.arg = &v;
    rc = run_world(&v);
    if (rc != MP_OK)
        mp_point_result_free(res);
    res->wall_us = mp_now_us() - t_begin;
    res->timed_us = res->wall_us; /* the model's work is the whole point */
    return rc;
}
