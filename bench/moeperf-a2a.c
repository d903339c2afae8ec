/* moeperf-a2a - measures the isolated All-to-All: a uniform pattern over a --bytes sweep
 * (comparable with nccl-tests, OSU and IMB) or the MoE dispatch pattern from routing, per pair or
 * deduplicated per rank (--dedup); with --backend model --comm model the same traffic is timed by
 * the cluster model. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a2a_pattern.h"
#include "a2acounts.h"
#include "bench_opts.h"
#include "compute.h"
#include "clock.h"
#include "console.h"
#include "dedup.h"
#include "dtype.h"
#include "error.h"
#include "harness.h"
#include "dispatch_plan.h"
#include "results.h"
#include "runfiles.h"
#include "routing.h"
#include "session.h"
#include "stats.h"

static const char *const pattern_choices[] = {"uniform", "moe", NULL};

static const struct mp_opt options[] = {
    {"pattern", MP_OPT_STRING, MP_O(pattern), "uniform", MP_NOLIMIT, pattern_choices, NULL,
     "uniform: equal --bytes to every peer; moe: counts from --routing/--placement at --batch"},
    {"bytes", MP_OPT_SIZE_LIST, MP_O(bytes), "1K:16M:x4", 1, 4294967296.0, NULL, "LIST",
     "uniform: bytes per peer, e.g. 64K or 1K:16M:x4 (K/M/G = 1024^n); --comm mpi: < 2G"},
    MP_OPT_MODEL("qwen3-30b-a3b"), MP_OPT_EXPERTS, MP_OPT_TOPK, MP_OPT_SHARED, MP_OPT_HIDDEN,
    MP_OPT_FFN, MP_OPT_LAYERS,
    MP_OPT_BATCH("1:128:x2"), MP_OPT_TOKENS_PER_RANK, MP_OPT_SEQ, MP_OPT_LAYOUT(NULL), MP_OPT_ROUTING, MP_OPT_GROUP_LIMIT,
    MP_OPT_PLACEMENT,
    {"dispatch-dtype", MP_OPT_STRING_LIST, MP_O(dispatch_dtype), "bf16", MP_NOLIMIT,
     mp_dtype_choices, "LIST",
     "what the moe pattern's rows travel in: bf16 (H times the backend's element size) or fp8 "
     "(H + 4*ceil(H/128) bytes: e4m3 codes and one fp32 scale per 128 values); the exchange "
     "moves those bytes, not a conversion; the uniform pattern takes bf16 alone; a list sweeps "
     "them"},
    {"dedup", MP_OPT_STRING_LIST, MP_O(dedup), "pair", MP_NOLIMIT, mp_dedup_choices, "LIST",
     "moe: what a dispatched row stands for: pair (one per token-expert pair) or rank (one per "
     "token and destination rank, carrying its top-k ids and weights); a list sweeps them"},
    {"overlap", MP_OPT_INT_LIST, MP_O(overlap), "1", 1, MP_MAX_CHUNKS, NULL, "LIST",
     "moe with --dedup node: cut each rank's tokens into N chunks, chunk k's inter-node phase in "
     "flight while chunk k-1's rows are forwarded inside the node (as DeepEP's internode "
     "kernels overlap RDMA and NVLink); 1: the two phases one after the other; other --dedup "
     "modes and the uniform pattern take 1 alone; a list sweeps them"},
    MP_OPT_SEED, MP_OPT_WARMUP("5"), MP_OPT_ITERS("50"), MP_OPT_BACKEND, MP_OPT_COMM,
    MP_OPT_CPU_BIND, MP_OPT_CLUSTER, MP_OPT_WORLD, MP_OPT_OUT, MP_OPT_RESUME, MP_OPT_FORCE,
    MP_OPT_QUIET, MP_OPT_INJECT_DELAY, MP_OPT_TIMEOUT,
    {"min-busbw", MP_OPT_DOUBLE, MP_O(min_busbw), "0", 0, 1e6, NULL, "GBPS",
     "a floor for a cluster without a baseline run (as nccl-tests' NCCL_TESTS_MIN_BW, but per "
     "point, docs/CONVENTIONS.md): when any point measured "
     "here has a busbw below GBPS GB/s, say which, after every point is measured and written, "
     "and exit 3; 0: no floor"},
    MP_OPT_END,
};

static const char summary[] =
    "Measure the All-to-All alone: barrier, then one alltoallv, timed on every rank; the slowest\n"
    "rank's time counts. algbw = bytes_per_rank / time, busbw = algbw·(n−1)/n (nccl-tests).\n"
    "bytes_per_peer is what one rank sends to one peer; bytes_per_rank = bytes_per_peer·n.\n"
    "--pattern moe --dedup rank sends one row per token and destination rank (the dispatch hop of\n"
    "docs/METRICS.md \"Deduplicated dispatch\"); --dedup node times its two exchanges one after the\n"
    "other: once per token and node to the relay, then forwarded inside the node; with --overlap N\n"
    "in N chunks of tokens, each chunk's forwards overlapping the next chunk's inter-node phase.\n"
    "--backend model --comm model --cluster PROFILE plays --world virtual ranks in one process:\n"
    "the same traffic, each exchange timed by the profile's exchange model.";

enum { FILE_A2A, FILE_SAMPLES };
static const struct mp_csv_schema *const files[] = {&mp_schema_a2a, &mp_schema_a2a_samples};

/* The timer marks around the timed exchange. */
enum { MARK_START, MARK_END };

/* One point: for uniform, routing/placement/dedup are NULL and batch 0. */
struct a2a_point {
    const struct mp_layout *lay;
    const char *routing, *group_limit, *placement, *dedup, *dispatch_dtype;
    int overlap; /* chunks (--overlap; 1 for uniform) */
    long batch;
    long long bytes_per_peer;
};

static void put_key(struct mp_row *r, const struct mp_session *s, const struct a2a_point *p)
{
    int moe = p->routing != NULL;
    mp_row_reset(r);
    mp_row_str(r, mp_session_source(s));
    mp_row_str(r, s->o.backend);
    mp_row_str(r, s->o.comm);
    mp_row_str(r, s->o.pattern);
    mp_row_str(r, p->lay->name);
    mp_row_int(r, p->lay->tp);
    mp_row_int(r, p->lay->ep);
    mp_row_int(r, s->comm->size);
    mp_row_str(r, moe ? s->model.name : "");
    if (moe) {
        mp_row_int(r, s->model.hidden);
        mp_row_int(r, s->model.experts);
        mp_row_int(r, s->model.topk);
    } else {
        mp_row_str(r, "");
        mp_row_str(r, "");
        mp_row_str(r, "");
    }
    mp_row_str(r, moe ? p->routing : "");
    mp_row_str(r, moe ? p->group_limit : "");
    mp_row_str(r, moe ? p->placement : "");
    mp_row_str(r, moe ? p->dedup : "");
    mp_row_int(r, moe ? p->overlap : 1);
    mp_row_str(r, moe ? p->dispatch_dtype : "");
    mp_row_int(r, moe ? p->batch : 0);
    mp_row_int(r, moe ? s->o.seq : 0);
    mp_row_int(r, s->o.seed);
    mp_row_int(r, p->bytes_per_peer);
}

/* One point's exchange buffers and counts, and this rank's timed samples: the harness's argument. */
struct a2a_pass {
    struct mp_session *s;
    const struct mp_a2a_counts *c, *c2; /* c2: --dedup node's forwards, else NULL */
    void *sendbuf, *recvbuf;
    void *fwd_send, *fwd_recv; /* an --overlap point's forwards, apart from the chunks in flight */
    double *mine; /* [iters] */
};

/* Block `bytes` bytes into `buf`. */
static void *at(void *buf, size_t bytes) { return (char *)buf + bytes; }

/* The rows of set `set` that `count` sends: the next chunk's block follows them. */
static size_t set_bytes(const struct mp_a2a_counts *c, const int *count, int set)
{
    size_t rows = 0;
    for (int p = 0; p < c->ep; p++)
        rows += (size_t)count[(size_t)set * c->ep + p];
    return rows * c->row_bytes;
}

/* --dedup node with --overlap N (c->nchunks): the chunks of draw `d` pipelined: chunk k's
 * inter-node phase (non-blocking, request slot k, its block after chunk k−1's) in flight while
 * chunk k−1's intra-node phase (direct rows and forwards, blocking, in buffers of their own)
 * runs, as DeepEP's internode kernels stream RDMA and NVLink. */
static int chunked_exchange(struct a2a_pass *p, int d)
{
    struct mp_comm *cm = p->s->comm;
    const struct mp_a2a_counts *c = p->c, *c2 = p->c2;
    int N = c->nchunks, rc = MP_OK;
    size_t sent = 0, got = 0;
    for (int k = 0; k <= N; k++) {
        if (k >= 1)
            MP_CHECK(cm->ops->wait(cm, k - 1));
        if (k < N) {
            size_t o = (size_t)(d * N + k) * c->ep;
            MP_CHECK(mp_comm_ialltoallv_on(cm, MP_GROUP_EP_INTER, at(p->sendbuf, sent),
                                           c->scount + o, c->sdispl + o, at(p->recvbuf, got),
                                           c->rcount + o, c->rdispl + o, c->row_bytes, k));
            sent += set_bytes(c, c->scount, d * N + k);
            got += set_bytes(c, c->rcount, d * N + k);
        }
        if (k >= 1) {
            size_t o = (size_t)(d * N + k - 1) * c->ep;
            MP_CHECK(mp_comm_alltoallv_on(cm, MP_GROUP_EP_INTRA, p->fwd_send, c2->scount + o,
                                          c2->sdispl + o, p->fwd_recv, c2->rcount + o,
                                          c2->rdispl + o, c2->row_bytes));
        }
    }
out:
    return rc;
}

/* One synchronized exchange of draw step mod ndraws: drained, barrier, the alltoallv (--dedup
 * node: the inter-node phase, then the intra-node one; with --overlap, chunked_exchange) between
 * the marks, drained; a timed one's time into mine[sample]. */
static int a2a_iterate(void *arg, int step, int sample, int replay)
{
    struct a2a_pass *p = arg;
    struct mp_session *s = p->s;
    struct mp_comm *cm = s->comm;
    const struct mp_a2a_counts *c = p->c;
    size_t o = (size_t)(step % c->ndraws) * c->ep;
    int rc = MP_OK;
    (void)replay;
    MP_CHECK(s->cops->sync(s->dev));
    MP_CHECK(cm->ops->barrier(cm));
    MP_CHECK(s->cops->mark(s->dev, MARK_START));
    if (c->nchunks > 1) {
        MP_CHECK(chunked_exchange(p, step % c->ndraws));
        goto timed;
    }
    /* --dedup node: the inter-node phase to the relays, then the intra-node phase (the direct
     * rows and the relays' forwards of what they received), each on its sub-communicator */
    MP_CHECK(mp_comm_alltoallv_on(cm, p->c2 ? MP_GROUP_EP_INTER : MP_GROUP_EP, p->sendbuf,
                                  c->scount + o, c->sdispl + o, p->recvbuf, c->rcount + o,
                                  c->rdispl + o, c->row_bytes));
    if (p->c2)
        MP_CHECK(mp_comm_alltoallv_on(cm, MP_GROUP_EP_INTRA, p->recvbuf, p->c2->scount + o,
                                      p->c2->sdispl + o, p->sendbuf, p->c2->rcount + o,
                                      p->c2->rdispl + o, p->c2->row_bytes));
timed:
    MP_CHECK(s->cops->mark(s->dev, MARK_END));
    MP_CHECK(s->cops->sync(s->dev));
    if (sample >= 0)
        p->mine[sample] = s->cops->elapsed_us(s->dev, MARK_START, MARK_END);
out:
    return rc;
}

/* Time `iters` exchanges (after `warmup`); on rank 0 times[i] = the slowest rank's time. */
static int run_point(struct mp_session *s, const struct mp_a2a_counts *c,
                     const struct mp_a2a_counts *c2, void *const bufs[4], double *mine,
                     double *all, double *times)
{
    struct a2a_pass p = {.s = s, .c = c, .c2 = c2, .sendbuf = bufs[0], .recvbuf = bufs[1],
                         .fwd_send = bufs[2], .fwd_recv = bufs[3], .mine = mine};
    struct mp_harness h = {.warmup = s->o.warmup, .iters = s->o.iters, .iterate = a2a_iterate,
                           .arg = &p};
    int rc = mp_harness_run(&h, NULL);
    return rc != MP_OK ? rc : mp_harness_max_over_ranks(s->comm, mine, s->o.iters, all, times);
}

/* Write a point's rows (rank 0) and print its console line; *busbw_out receives its busbw. */
static int write_point(struct mp_session *s, struct mp_runfiles *f,
                       const struct a2a_point *p, double bytes_per_rank, double *times,
                       double *busbw_out)
{
    int n = s->o.iters, rc = MP_OK;
    struct mp_row row = {0};
    for (int i = 0; i < n && rc == MP_OK && mp_runfiles_on(f); i++) {
        put_key(&row, s, p);
        mp_row_int(&row, i);
        mp_row_dbl(&row, times[i]);
        rc = mp_runfiles_write(f, FILE_SAMPLES, &row);
    }
    struct mp_summary sm;
    mp_summarize(times, n, &sm);
    int ep = p->lay->ep;
    double algbw = sm.p50 > 0 ? bytes_per_rank / (sm.p50 * 1e3) : 0; /* bytes/µs/1e3 = GB/s */
    double busbw = algbw * (ep - 1) / ep;
    *busbw_out = busbw;
    if (mp_runfiles_on(f) && rc == MP_OK) {
        put_key(&row, s, p);
        mp_row_dbl(&row, bytes_per_rank);
        mp_row_int(&row, n);
        double v[] = {sm.p50, sm.p99, sm.mean, sm.stdev, sm.min, sm.max, sm.ci_lo, sm.ci_hi};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
            mp_row_dbl(&row, v[k]);
        mp_row_dbl(&row, sm.spread);
        mp_row_int(&row, sm.spread > MP_NOISY_SPREAD);
        mp_row_dbl(&row, algbw);
        mp_row_dbl(&row, busbw);
        rc = mp_runfiles_write(f, FILE_A2A, &row);
    }
    if (!s->o.quiet) {
        char place[80]; /* the placement, the dedup mode when not pair, the row type when fp8 */
        int dd = p->dedup && strcmp(p->dedup, "pair") != 0;
        int dt = p->dispatch_dtype && strcmp(p->dispatch_dtype, "bf16") != 0;
        char ovl[16] = "";
        if (p->overlap > 1)
            snprintf(ovl, sizeof ovl, "x%d", p->overlap);
        snprintf(place, sizeof place, "%s%s%s%s%s%s", p->placement ? p->placement : "-",
                 dd ? "/" : "", dd ? p->dedup : "", ovl, dt ? "/" : "",
                 dt ? p->dispatch_dtype : "");
        mp_progress_clear();
        printf("%9s %-14s %-14s %6ld %12lld %12.0f %10.2f %10.2f %10.2f %9.3f %9.3f\n",
               p->lay->name, p->routing ? p->routing : "-", place,
               p->batch, p->bytes_per_peer, bytes_per_rank, sm.p50, sm.p99, sm.min, algbw, busbw);
        fflush(stdout);
    }
    mp_row_free(&row);
    return rc;
}

/* Whether one exchange of a comm backend takes the largest --bytes per peer (4G). */
static int sends_4g(const struct mp_comm_ops *o)
{
    return o->memory != MP_MEMORY_VIRTUAL && o->max_row_bytes >= (size_t)4 << 30;
}

/* The bytes of the largest point's buffer over every layout. Refuses (MP_ERR_USAGE, before
 * anything is allocated) a --bytes per peer larger than one row of --comm can hold, and a MoE
 * batch whose rows (tokens·topk) overflow the int counts; all products are taken in size_t. */
static int buffer_bytes(const struct mp_session *s, int moe, const struct mp_layout *layouts,
                        int nlayouts, size_t *out)
{
    size_t max_bytes = 0, row_max = mp_a2a_max_row_bytes(s->comm->ops);
    if (moe) {
        /* a rank-deduplicated row carries its top-K ids and weights: at most as many rows; the
         * longer of a bf16 and an fp8 row */
        double bf = a2a_row_bytes(s, MP_DTYPE_BF16), f8 = a2a_row_bytes(s, MP_DTYPE_FP8);
        size_t row = (size_t)(bf > f8 ? bf : f8) +
                     (size_t)mp_dedup_meta_bytes(MP_DEDUP_RANK, s->model.topk);
        for (int b = 0; b < mp_sweep_nbatch(&s->o); b++)
            for (int l = 0; l < nlayouts; l++) {
                long batch = mp_sweep_batch(&s->o, b, layouts[l].ep);
                long long tokens = batch * (long long)s->o.seq;
                size_t need;
                if (!mp_a2a_moe_fits(tokens, s->model.topk, row, &need)) {
                    mp_usage("%s: batch %ld × --seq %d = %lld tokens × topk %d exceed %d rows, the "
                             "largest count MPI and NCCL exchanges take; accepted: "
                             "batch·seq·topk ≤ %d",
                             s->o.tokens_per_rank.n ? "--tokens-per-rank" : "--batch", batch,
                             s->o.seq, tokens, s->model.topk, INT_MAX, INT_MAX);
                    return MP_ERR_USAGE;
                }
                max_bytes = need > max_bytes ? need : max_bytes;
            }
        *out = max_bytes;
        return MP_OK;
    }
    for (int b = 0; b < s->o.bytes.n; b++) {
        size_t per_peer = (size_t)s->o.bytes.v[b];
        if (per_peer > row_max) {
            char wide[256];
            mp_usage("--bytes: %zu bytes per peer is more than --comm %s sends to one peer in one "
                     "exchange; accepted: 1 to %zu with --comm %s, up to 4G with a --comm that counts "
                     "in size_t (built: %s)",
                     per_peer, s->o.comm, row_max, s->o.comm,
                     mp_comm_names_where(sends_4g, wide, sizeof wide));
            return MP_ERR_USAGE;
        }
        for (int li = 0; li < nlayouts; li++) {
            size_t need = per_peer * (size_t)layouts[li].ep;
            max_bytes = need > max_bytes ? need : max_bytes;
        }
    }
    *out = max_bytes;
    return MP_OK;
}

/* Write every page of both buffers before timing, a bounded piece at a time (the upload stages
 * what it converts, so one piece keeps that staging small). */
static void touch_buffers(struct mp_session *s, void *sendbuf, void *recvbuf, size_t elems)
{
    size_t piece = elems < ((size_t)16 << 20) ? elems : ((size_t)16 << 20);
    float *fill = malloc(piece * sizeof(float));
    if (!fill)
        return;
    for (size_t i = 0; i < piece; i++)
        fill[i] = (float)(i % 251);
    for (size_t at = 0; at < elems; at += piece) {
        size_t n = elems - at < piece ? elems - at : piece, off = at * s->cops->elem_size;
        if (s->cops->upload(s->dev, (char *)sendbuf + off, fill, n) != MP_OK ||
            s->cops->upload(s->dev, (char *)recvbuf + off, fill, n) != MP_OK)
            break;
    }
    free(fill);
}

/* The run's shared state: session, files, buffers sized for the largest point, sample arrays
 * and the progress count. */
struct a2a_run {
    struct mp_session *s;
    struct mp_runfiles *f;
    struct mp_routing *routings;
    int moe, np, npoints;
    void *bufs[4]; /* send, receive; an --overlap point's forwards out and in (else NULL) */
    double *mine, *all, *times; /* [iters]; all [iters·size] on rank 0 */
    /* --min-busbw (rank 0): points below the floor, and the lowest one */
    int below;
    double lowest;
    char lowest_point[256];
};

/* The sweep's indices of one point: routing, group limit, placement, dedup mode, overlap,
 * dispatch dtype (moe only) and batch or --bytes entry. */
struct a2a_index {
    int ri, gi, pi, xi, oi, ti, bi;
};

/* The counts of point `ix` of a layout (`rt` is the routing under the group limit, with
 * --pattern moe); --dedup node's forwards in cn2. */
static int point_counts(struct a2a_run *r, struct a2a_point *p, struct mp_a2a_counts *cn,
                        struct mp_a2a_counts *cn2, const struct mp_routing *rt,
                        const struct a2a_index *ix, const struct mp_placement *pl)
{
    struct mp_session *s = r->s;
    int ri = ix->ri, gi = ix->gi, pi = ix->pi, xi = ix->xi, ti = ix->ti, bi = ix->bi;
    p->overlap = 1;
    if (!r->moe) {
        p->bytes_per_peer = s->o.bytes.v[bi];
            return mp_a2a_counts_uniform(cn, p->lay->ep, p->bytes_per_peer);
    }
    p->routing = s->o.routing.v[ri];
    p->group_limit = s->o.group_limit.v[gi];
    p->placement = s->o.placement.v[pi];
    p->dedup = s->o.dedup.v[xi];
    p->dispatch_dtype = s->o.dispatch_dtype.v[ti];
    p->overlap = (int)s->o.overlap.v[ix->oi];
    enum mp_dtype dt = MP_DTYPE_BF16;
    mp_dtype_parse("--dispatch-dtype", p->dispatch_dtype, &dt); /* checked at start-up */
    p->batch = mp_sweep_batch(&s->o, bi, p->lay->ep);
    int ndraws = s->o.iters + s->o.warmup < MP_ROUTING_POOL_DRAWS ? s->o.iters + s->o.warmup
                                                                   : MP_ROUTING_POOL_DRAWS;
    enum mp_dedup mode = MP_DEDUP_PAIR;
    mp_dedup_parse(p->dedup, &mode); /* checked at start-up */
    long total = p->batch * s->o.seq;
    int rc;
    rc = mode != MP_DEDUP_PAIR
             ? a2a_counts_dedup(cn, cn2, mode, dt, s, rt, pl, total, ndraws, p->overlap, r->np)
             : a2a_counts_moe(cn, dt, s, rt, pl, total, ndraws);
    p->bytes_per_peer = (long long)llround(cn->bytes_per_rank / p->lay->ep);
    return rc;
}

/* One point: its counts, then (unless --resume found it) measured (under the watchdog, but on
 * the model's virtual ranks) and written. */
static int a2a_point(struct a2a_run *r, const struct mp_layout *lay, const struct mp_routing *rt,
                     const struct a2a_index *ix, const struct mp_placement *pl)
{
    struct mp_session *s = r->s;
    struct a2a_point p = {.lay = lay};
    struct mp_a2a_counts cn = {0}, cn2 = {0};
    int rc = point_counts(r, &p, &cn, &cn2, rt, ix, pl);
    r->np++;
    int skip = 0;
    if (rc == MP_OK) {
        struct mp_row key = {0};
        put_key(&key, s, &p);
        skip = mp_runfiles_done(r->f, s, &key);
        mp_row_free(&key);
    }
    if (rc == MP_OK && !skip) {
        if (s->comm->rank == 0) {
            char label[128];
            snprintf(label, sizeof label, "%s %lld B/peer", lay->name, p.bytes_per_peer);
            mp_progress(r->np, r->npoints, label);
        }
        char point[256];
        snprintf(point, sizeof point, "layout %s routing %s group-limit %s placement %s dedup %s "
                 "overlap %d dispatch-dtype %s batch %ld bytes_per_peer %lld", lay->name,
                 p.routing ? p.routing : "-", p.group_limit ? p.group_limit : "-",
                 p.placement ? p.placement : "-", p.dedup ? p.dedup : "-", p.overlap,
                 p.dispatch_dtype ? p.dispatch_dtype : "-", p.batch, p.bytes_per_peer);
        mp_session_watch(s, point);
        rc = run_point(s, &cn, cn2.scount ? &cn2 : NULL, r->bufs, r->mine, r->all, r->times);
        if (rc == MP_OK)
            mp_session_unwatch(s);
        double busbw = 0;
        if (rc == MP_OK && s->comm->rank == 0)
            rc = write_point(s, r->f, &p, cn.bytes_per_rank, r->times, &busbw);
        if (rc == MP_OK && s->comm->rank == 0 && s->o.min_busbw > 0 && busbw < s->o.min_busbw) {
            if (r->below++ == 0 || busbw < r->lowest) {
                r->lowest = busbw;
                snprintf(r->lowest_point, sizeof r->lowest_point, "%s", point);
            }
        }
    }
    mp_a2a_counts_free(&cn);
    mp_a2a_counts_free(&cn2);
    return rc;
}

/* Every point of one layout: routing × group limit × placement × dedup × overlap × dispatch dtype
 * × batch (moe), or the --bytes sweep. */
static int a2a_layout(struct a2a_run *r, const struct mp_layout *lay)
{
    struct mp_session *s = r->s;
    int rc = s->comm->ops->split(s->comm, lay->tp, lay->ep);
    int nr = r->moe ? s->o.routing.n : 1, npl = r->moe ? s->o.placement.n : 1;
    int ng = r->moe ? s->o.group_limit.n : 1, nb = r->moe ? mp_sweep_nbatch(&s->o) : s->o.bytes.n;
    int nx = r->moe ? s->o.dedup.n : 1, nt = r->moe ? s->o.dispatch_dtype.n : 1;
    int no = r->moe ? s->o.overlap.n : 1;
    int nodes = mp_ep_nodes(s->comm, lay->tp, lay->ep), inactive;
    for (int ri = 0; ri < nr && rc == MP_OK; ri++)
        for (int gi = 0; gi < ng && rc == MP_OK; gi++) {
            struct mp_routing rt = {0}; /* validated by mp_group_limits_validate */
            if (r->moe)
                rc = mp_group_limit_apply(&r->routings[ri], s->o.group_limit.v[gi], nodes, &rt,
                                          &inactive);
            for (int pi = 0; pi < npl && rc == MP_OK; pi++) {
                struct mp_placement pl = {0};
                if (r->moe &&
                    ((rc = mp_placement_build(s->o.placement.v[pi], s->model.experts, lay->ep,
                                              r->routings[ri].prob, &pl)) != MP_OK ||
                     (rc = mp_placement_comm_nodes(&pl, s->comm, lay->tp)) != MP_OK)) {
                    mp_placement_free(&pl);
                    break;
                }
                struct a2a_index ix = {.ri = ri, .gi = gi, .pi = pi};
                for (ix.xi = 0; ix.xi < nx && rc == MP_OK; ix.xi++)
                    for (ix.oi = 0; ix.oi < no && rc == MP_OK; ix.oi++)
                        for (ix.ti = 0; ix.ti < nt && rc == MP_OK; ix.ti++)
                            for (ix.bi = 0; ix.bi < nb && rc == MP_OK; ix.bi++)
                                rc = a2a_point(r, lay, &rt, &ix, &pl);
                if (r->moe)
                    mp_placement_free(&pl);
            }
        }
    return rc;
}

static void print_header(const struct mp_session *s)
{
    char backends[256];
    printf("# moeperf-a2a: pattern %s, %d ranks on %d node(s), %s; times in µs over %d "
           "iterations, slowest rank\n", s->o.pattern, s->comm->size, s->comm->nnodes,
           mp_session_backends(s, backends, sizeof backends), s->o.iters);
    printf("%9s %-14s %-14s %6s %12s %12s %10s %10s %10s %9s %9s\n", "layout", "routing",
           "placement", "batch", "bytes/peer", "bytes/rank", "time_p50", "time_p99", "time_min",
           "algbw", "busbw");
    printf("%9s %-14s %-14s %6s %12s %12s %10s %10s %10s %9s %9s\n", "", "", "", "", "(B)", "(B)",
           "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)");
}

/* --dedup: any mode with --pattern moe, pair alone with the uniform pattern. Refuses with
 * MP_ERR_USAGE. */
static int check_dedup(const struct mp_session *s, int moe)
{
    for (int i = 0; i < s->o.dedup.n; i++) {
        enum mp_dedup d;
        const char *word = s->o.dedup.v[i];
        if (mp_dedup_parse(word, &d) != MP_OK)
            return MP_ERR_USAGE;
        if (!moe && d != MP_DEDUP_PAIR) {
            mp_usage("--dedup %s: the uniform pattern has no routing to deduplicate; use "
                     "--pattern moe with it, or --dedup pair", word);
            return MP_ERR_USAGE;
        }
    }
    return MP_OK;
}

/* --routing and --placement with the uniform pattern: their defaults alone (uniform, contiguous),
 * as it sends --bytes to every peer and routes nothing; any other entry would be ignored without
 * a word. Refuses with MP_ERR_USAGE. */
static int check_routing(const struct mp_session *s, int moe)
{
    const struct {
        const char *flag, *only;
        const struct mp_strlist *l;
    } f[] = {{"--routing", "uniform", &s->o.routing}, {"--placement", "contiguous", &s->o.placement}};
    for (int k = 0; k < 2 && !moe; k++)
        for (int i = 0; i < f[k].l->n; i++)
            if (strcmp(f[k].l->v[i], f[k].only) != 0) {
                mp_usage("%s %s: the uniform pattern sends --bytes to every peer and routes "
                         "nothing; use --pattern moe with it", f[k].flag, f[k].l->v[i]);
                return MP_ERR_USAGE;
            }
    return MP_OK;
}

/* --dispatch-dtype: bf16 or fp8 with --pattern moe; the uniform pattern sends --bytes per peer as
 * given and has no rows to put in a type, so it takes bf16 (the default) alone. Refuses with
 * MP_ERR_USAGE. */
static int check_dispatch_dtype(const struct mp_session *s, int moe)
{
    for (int i = 0; i < s->o.dispatch_dtype.n; i++) {
        enum mp_dtype d;
        const char *word = s->o.dispatch_dtype.v[i];
        if (mp_dtype_parse("--dispatch-dtype", word, &d) != MP_OK)
            return MP_ERR_USAGE;
        if (!moe && d != MP_DTYPE_BF16) {
            mp_usage("--dispatch-dtype %s: the uniform pattern sends --bytes per peer as given, "
                     "with no rows to quantize; use --pattern moe with it, or size --bytes to "
                     "the fp8 volume", word);
            return MP_ERR_USAGE;
        }
    }
    return MP_OK;
}

/* The largest --overlap entry. */
static int max_overlap(const struct mp_session *s)
{
    int most = 1;
    for (int i = 0; i < s->o.overlap.n; i++)
        most = s->o.overlap.v[i] > most ? (int)s->o.overlap.v[i] : most;
    return most;
}

/* --overlap above 1: --pattern moe with --dedup node alone (the only exchange of two phases),
 * and a comm backend with a non-blocking all-to-all for a measured run. Refuses with
 * MP_ERR_USAGE. */
static int check_overlap(const struct mp_session *s, int moe)
{
    int n = max_overlap(s);
    if (n == 1)
        return MP_OK;
    if (!moe) {
        mp_usage("--overlap %d: the uniform pattern is one exchange, with nothing to overlap; use "
                 "--pattern moe --dedup node with it, or --overlap 1", n);
        return MP_ERR_USAGE;
    }
    for (int i = 0; i < s->o.dedup.n; i++) {
        enum mp_dedup d;
        if (mp_dedup_parse(s->o.dedup.v[i], &d) == MP_OK && d != MP_DEDUP_NODE) {
            mp_usage("--overlap %d with --dedup %s: only --dedup node has two phases to overlap "
                     "(the inter-node one and the forwards inside the node); sweep --dedup node "
                     "alone with --overlap above 1", n, s->o.dedup.v[i]);
            return MP_ERR_USAGE;
        }
    }
    if (!s->comm->ops->ialltoallv) {
        mp_usage("--overlap %d: the comm backend %s has no non-blocking all-to-all", n,
                 s->comm->ops->name);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

static int a2a_alloc(struct a2a_run *r, size_t max_bytes)
{
    struct mp_session *s = r->s;
    size_t elems = (max_bytes + s->cops->elem_size - 1) / s->cops->elem_size + 1;
    int nbufs = r->moe && max_overlap(s) > 1 ? 4 : 2;
    int virtual = s->cops->memory == MP_MEMORY_VIRTUAL;
    for (int i = 0; i < nbufs; i++)
        if (!(r->bufs[i] = s->cops->alloc(s->dev, elems))) {
            mp_error("out of memory for %zu-byte buffers", max_bytes);
            return MP_ERR_RUNTIME;
        }
    for (int i = 0; i < nbufs && !virtual; i += 2)
        touch_buffers(s, r->bufs[i], r->bufs[i + 1], elems);
    return MP_OK;
}

/* The sweep as each rank runs it (mp_session_each_rank): every layout's points, on the run's
 * buffers (a virtual rank's hold nothing) with its own timing arrays; rank 0 writes the files and
 * prints, and its --min-busbw count goes back into the run for check_floor. */
struct a2a_sweep {
    struct a2a_run *r;
    const struct mp_layout *layouts;
    int nlayouts;
};

static int a2a_rank(struct mp_session *rank, void *arg)
{
    const struct a2a_sweep *w = arg;
    struct a2a_run rr = *w->r;
    rr.s = rank;
    struct mp_comm *c = rank->comm;
    int rc = MP_OK;
    rr.times = calloc((size_t)rank->o.iters, sizeof *rr.times);
    rr.mine = calloc((size_t)rank->o.iters, sizeof *rr.mine);
    rr.all = c->rank == 0 ? calloc((size_t)rank->o.iters * c->size, sizeof *rr.all) : NULL;
    if (!rr.mine || !rr.times || (c->rank == 0 && !rr.all)) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
    }
    for (int li = 0; li < w->nlayouts && rc == MP_OK; li++)
        rc = a2a_layout(&rr, &w->layouts[li]);
    if (c->rank == 0) {
        w->r->below = rr.below;
        w->r->lowest = rr.lowest;
        memcpy(w->r->lowest_point, rr.lowest_point, sizeof rr.lowest_point);
    }
    free(rr.mine);
    free(rr.all);
    free(rr.times);
    return rc;
}

/* --min-busbw, once every point is measured and written: how many fell below the floor, shared
 * with every rank (r->below), said on stderr and in run.json with the lowest one. Collective. */
static int check_floor(struct mp_session *s, struct a2a_run *r)
{
    if (s->o.min_busbw <= 0)
        return MP_OK;
    int rc = s->comm->ops->bcast(s->comm, &r->below, sizeof r->below);
    if (rc != MP_OK || s->comm->rank != 0)
        return rc;
    if (s->run) {
        cJSON *o = cJSON_AddObjectToObject(s->run, "min_busbw");
        cJSON_AddNumberToObject(o, "floor_GBps", s->o.min_busbw);
        cJSON_AddNumberToObject(o, "below", r->below);
        if (r->below) {
            cJSON_AddNumberToObject(o, "lowest_GBps", r->lowest);
            cJSON_AddStringToObject(o, "lowest_point", r->lowest_point);
        }
    }
    if (r->below) {
        mp_progress_clear();
        mp_error("--min-busbw %g: %d point(s) below the floor, the lowest busbw %.3f GB/s at %s "
                 "(every point is in the results)",
                 s->o.min_busbw, r->below, r->lowest, r->lowest_point);
    }
    return MP_OK;
}

int main(int argc, char **argv)
{
    struct mp_session s;
    struct mp_layout *layouts = NULL;
    struct mp_runfiles f = {0};
    struct a2a_run r = {.s = &s, .f = &f};
    int nlayouts = 0, nrout = 0;
    int rc = mp_session_start(&s, "moeperf-a2a", options, summary, argc, argv);
    if (rc != MP_OK)
        goto out;
    struct mp_comm *c = s.comm;
    r.moe = strcmp(s.o.pattern, "moe") == 0;
    MP_CHECK(mp_session_layouts(&s, &layouts, &nlayouts));
    MP_CHECK(check_dedup(&s, r.moe));
    MP_CHECK(check_routing(&s, r.moe));
    MP_CHECK(check_dispatch_dtype(&s, r.moe));
    MP_CHECK(check_overlap(&s, r.moe));
    MP_CHECK(mp_session_refuse_unsupported(&s));
    MP_CHECK(mp_session_watch_start(&s));
    if (r.moe)
        MP_CHECK(mp_routings_parse(&s.o.routing, &s.model, s.o.seed,
                                   "gate routing needs the layer's activations; use moeperf-layer, "
                                   "or a generated routing or a trace with --pattern moe",
                                   &r.routings, &nrout));
    if (r.moe)
        MP_CHECK(mp_group_limits_validate(&s.o.group_limit, r.routings, nrout, layouts, nlayouts,
                                          c));
    /* buffers sized once for the largest point, after refusing points no count can express */
    size_t max_bytes = 0;
    MP_CHECK(buffer_bytes(&s, r.moe, layouts, nlayouts, &max_bytes));
    MP_CHECK(a2a_alloc(&r, max_bytes));
    MP_CHECK(mp_runfiles_open(&f, &s, files, 2));
    if (!s.o.quiet && c->rank == 0)
        print_header(&s);
    r.npoints = nlayouts * (r.moe ? s.o.routing.n * s.o.group_limit.n * s.o.placement.n *
                                        s.o.dedup.n * s.o.overlap.n * s.o.dispatch_dtype.n *
                                        mp_sweep_nbatch(&s.o)
                                  : s.o.bytes.n);
    struct a2a_sweep sweep = {.r = &r, .layouts = layouts, .nlayouts = nlayouts};
    MP_CHECK(mp_session_each_rank(&s, a2a_rank, &sweep));
    MP_CHECK(check_floor(&s, &r));
out:
    /* freeing device buffers waits for the device: on a failure, no longer than --timeout, and
     * not behind exchanges the other ranks will never join */
    rc = mp_session_fail(&s, rc);
    mp_runfiles_close(&f);
    if (s.dev)
        for (int i = 0; i < 4; i++)
            if (r.bufs[i])
                s.cops->free(s.dev, r.bufs[i]);
    mp_routings_free(r.routings, nrout);
    free(layouts);
    if (rc == MP_ERR_USAGE)
        s.agreed = 1;
    int end = mp_session_end(&s, rc);
    return end == MP_OK && r.below > 0 ? MP_ERR_REGRESSION : end;
}
