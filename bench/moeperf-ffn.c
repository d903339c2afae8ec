/* moeperf-ffn - measures the expert FFN alone (each rank's routed rows through its local experts,
 * plus the shared experts on its own tokens) over a sweep, against the roofline measured on the
 * device at start-up, and writes ffn.csv; with --backend model --comm model the same rows are timed
 * by the cluster model against the profile's roofline. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_opts.h"
#include "cluster.h"
#include "console.h"
#include "dtype.h"
#include "error.h"
#include "expert_cache.h"
#include "expert_store.h"
#include "ffn_work.h"
#include "harness.h"
#include "memguard.h"
#include "placement.h"
#include "dispatch_plan.h"
#include "results.h"
#include "runfiles.h"
#include "roofline.h"
#include "routing.h"
#include "session.h"
#include "stats.h"
#include "topo.h"
#include "weight_cache.h"
#include "weights.h"

static const struct mp_opt options[] = {
    MP_OPT_MODEL("qwen3-30b-a3b"), MP_OPT_EXPERTS, MP_OPT_TOPK, MP_OPT_SHARED, MP_OPT_HIDDEN,
    MP_OPT_FFN, MP_OPT_LAYERS, MP_OPT_BATCH("1:512:x2"), MP_OPT_TOKENS_PER_RANK, MP_OPT_SEQ, MP_OPT_LAYOUT(NULL),
    MP_OPT_ROUTING, MP_OPT_PLACEMENT, MP_OPT_SEED, MP_OPT_WARMUP("3"), MP_OPT_ITERS("20"),
    MP_OPT_BACKEND, MP_OPT_COMM, MP_OPT_CPU_BIND, MP_OPT_CLUSTER, MP_OPT_WORLD, MP_OPT_OUT,
    MP_OPT_RESUME, MP_OPT_FORCE, MP_OPT_QUIET,
    MP_OPT_MAX_MEMORY, MP_OPT_GEMM, MP_OPT_WEIGHT_DTYPE, MP_OPT_EXPERT_CACHE, MP_OPT_FFN_GRAPH,
    MP_OPT_FLUSH_CACHE, MP_OPT_END,
};

static const char summary[] =
    "Measure the expert FFN alone per point: each rank runs the token-expert rows the routing\n"
    "sends it through its local experts, plus the shared experts on its own tokens. Reports\n"
    "FLOP/s, weight bytes/s and the fraction of the roofline measured at start-up. Run under\n"
    "mpirun with tp·ep ranks (a single process is tp1ep1). ffn.csv, ffn_samples.csv and\n"
    "run.json in --out. --backend model --comm model --cluster PROFILE plays --world virtual\n"
    "ranks in one process: the same rows, timed by the profile's FFN roofline.";


enum { FILE_FFN, FILE_SAMPLES };
static const struct mp_csv_schema *const files[] = {&mp_schema_ffn, &mp_schema_ffn_samples};

enum { MARK_START, MARK_FFN };

/* --flush-cache: the flushes this rank made, one per timed iteration (run.json: cache_flushes) */
static long cache_flushes;

/* Queue this rank's FFN between the marks START and FFN: every active local expert, then every
 * shared expert on the rank's own tokens. */
static int ffn_queue(const struct mp_session *s, const struct ffn_bufs *b, const struct ffn_work *w)
{
    const struct mp_compute_ops *o = s->cops;
    struct mp_compute *dev = s->dev;
    int H = s->model.hidden, Dl = s->model.ffn / s->comm->tp, S = s->model.shared, rc = MP_OK;
    size_t row_bytes = (size_t)H * o->elem_size;

    MP_CHECK(o->mark(dev, MARK_START));
    struct mp_ffn_args a = {.in = b->in, .out = b->out, .row_off = w->row_off, .nexp = w->nact,
                            .wgu = b->wgu, .wd = b->wd, .H = H, .Dl = Dl, .work = b->work,
                            .gemm = b->gemm, .weight_dtype = b->weight_dtype,
                            .nshared = w->ntok > 0 ? S : 0, .shared_rows = w->ntok,
                            .shared_in = b->xs,
                            .shared_out = (char *)b->out + (size_t)w->row_off[w->nact] * row_bytes};
    if (!b->wc)
        MP_CHECK(mp_compute_expert_ffn(o, dev, &a));
    for (int i = 0; i < w->nact && b->wc; i++) { /* each from its slot, fetched first on a miss */
        void *gu, *wd;
        int slot;
        MP_CHECK(mp_weight_cache_get(b->wc, w->act_local[i], &gu, &wd, &slot));
        struct mp_ffn_args one = a;
        one.row_off = w->row_off + i;
        one.nexp = 1;
        one.wgu = &gu;
        one.wd = &wd;
        one.nshared = 0;
        MP_CHECK(o->expert_ffn(dev, &one));
        MP_CHECK(mp_weight_cache_release(b->wc, slot));
    }
    if (b->wc) { /* then the shared experts, resident */
        struct mp_ffn_args sa = a;
        sa.nexp = 0;
        sa.wgu = b->wgu + w->nact;
        sa.wd = b->wd + w->nact;
        MP_CHECK(mp_compute_expert_ffn(o, dev, &sa));
    }
    MP_CHECK(o->mark(dev, MARK_FFN));
out:
    return rc;
}

/* One synchronized FFN iteration of this rank (docs/METRICS.md, Expert FFN alone): the device
 * drained, barrier, then the FFN queued (or, with `replay`, the captured FFN launched); duration
 * from its marks in *us. */
static int ffn_iteration(const struct mp_session *s, const struct ffn_bufs *b, const struct ffn_work *w,
                         int replay, double *us)
{
    const struct mp_compute_ops *o = s->cops;
    struct mp_compute *dev = s->dev;
    struct mp_comm *c = s->comm;
    int rc = MP_OK;
    MP_CHECK(o->sync(dev));
    MP_CHECK(c->ops->barrier(c));
    MP_CHECK(replay ? o->replay(dev) : ffn_queue(s, b, w));
    MP_CHECK(o->sync(dev));
    *us = o->elapsed_us(dev, MARK_START, MARK_FFN);
out:
    return rc;
}

/* --graph: capture the point's FFN, marks included, after the warm-up grew every buffer. */
static int ffn_capture(const struct mp_session *s, const struct ffn_bufs *b, const struct ffn_work *w)
{
    const struct mp_compute_ops *o = s->cops;
    int rc = o->sync(s->dev);
    if (rc != MP_OK || (rc = o->capture_begin(s->dev)) != MP_OK)
        return rc;
    rc = ffn_queue(s, b, w);
    int end = o->capture_end(s->dev); /* always leave the capture, even after a failure */
    return rc != MP_OK ? rc : end;
}

/* One point's buffers and rows, and this rank's timed samples: the harness's argument. */
struct ffn_pass {
    const struct mp_session *s;
    const struct ffn_bufs *b;
    const struct ffn_work *w;
    double *mine, scratch; /* [iters] timed samples; an untimed one */
    double *fetch_us;      /* [iters] with a cache: each timed iteration's exposed fetch time */
    double counts[3];      /* with a cache: the timed iterations' hits, accesses, bytes fetched */
};

static int pass_iterate(void *arg, int step, int sample, int replay)
{
    struct ffn_pass *p = arg;
    struct mp_weight_cache *wc = p->b->wc;
    (void)step;
    if (wc)
        wc->hits = wc->misses = wc->fetch_bytes = 0;
    int rc = ffn_iteration(p->s, p->b, p->w, replay, sample >= 0 ? &p->mine[sample] : &p->scratch);
    double us = 0;
    if (rc == MP_OK && wc && (rc = mp_weight_cache_exposed(wc, &us)) == MP_OK && sample >= 0) {
        p->fetch_us[sample] = us;
        p->counts[0] += wc->hits;
        p->counts[1] += wc->hits + wc->misses;
        p->counts[2] += wc->fetch_bytes;
    }
    return rc;
}

static int pass_capture(void *arg)
{
    struct ffn_pass *p = arg;
    return ffn_capture(p->s, p->b, p->w);
}

/* --flush-cache: outside the marks and any capture, before the iteration's drain. */
static int pass_flush(void *arg)
{
    struct ffn_pass *p = arg;
    int rc = p->s->cops->flush_cache(p->s->dev);
    cache_flushes += rc == MP_OK;
    return rc;
}

/* Run one point on every rank; on rank 0, ffn[i] = max over ranks of iteration i's FFN time. */
/* What a point with --expert-cache measured (rank 0): each timed iteration's exposed fetch time,
 * the slowest rank's, and over all ranks and timed iterations the hits, accesses and bytes. */
struct cache_result {
    double *fetch_us; /* [iters] */
    double counts[3];
};

static int run_point(const struct mp_session *s, struct ffn_wcache *wc, const struct ffn_work *w, int gemm,
                     struct mp_weight_cache *cache, double *ffn, struct cache_result *cr)
{
    struct mp_comm *c = s->comm;
    int n = s->o.iters, rc = MP_OK;
    struct ffn_bufs b = {0};
    double *mine = calloc((size_t)n, sizeof *mine), *all = NULL;
    double *fetch = calloc((size_t)n, sizeof *fetch), *every = NULL;
    memset(cr->counts, 0, sizeof cr->counts);
    if (c->rank == 0)
        all = malloc((size_t)n * c->size * sizeof *all);
    if (!mine || !fetch || (c->rank == 0 && !all)) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    MP_CHECK(ffn_bufs_make(&b, s, wc, w, cache));
    b.gemm = gemm;
    b.weight_dtype = (int)wc->dt;
    struct ffn_pass p = {.s = s, .b = &b, .w = w, .mine = mine, .fetch_us = fetch};
    struct mp_harness h = {.warmup = s->o.warmup, .iters = n, .iterate = pass_iterate, .arg = &p,
                           .capture = s->o.graph ? pass_capture : NULL,
                           .before_timed = mp_flush_cache_active(s) ? pass_flush : NULL};
    MP_CHECK(mp_harness_run(&h, NULL));
    MP_CHECK(mp_harness_max_over_ranks(c, mine, n, all, ffn));
    MP_CHECK(mp_harness_max_over_ranks(c, fetch, n, all, cr->fetch_us));
    if (c->rank == 0 && !(every = malloc((size_t)c->size * sizeof p.counts))) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    MP_CHECK(c->ops->gather(c, p.counts, sizeof p.counts, every));
    for (int r = 0; c->rank == 0 && r < c->size; r++) /* every rank's, summed */
        for (int k = 0; k < 3; k++)
            cr->counts[k] += every[3 * r + k];
out:
    free(every);
    if (s->o.graph && s->cops->graph_reset)
        s->cops->graph_reset(s->dev);
    ffn_bufs_free(&b, s);
    free(mine);
    free(fetch);
    free(all);
    return rc;
}

/* Write the point's samples, then its summary row (so a summary row is only ever present with its
 * samples), and print its table line. Rank 0 only. */
/* Whether the console table shows the weights' dtype: a sweep of more than bf16 alone. */
static int weights_shown(const struct mp_session *s)
{
    return s->o.weight_dtype.n > 1 || strcmp(s->o.weight_dtype.v[0], "bf16") != 0;
}

/* Whether it shows the expert cache, its hit rate and exposed fetch time: a sweep not all off. */
static int cache_shown(const struct mp_session *s)
{
    return s->o.expert_cache.n > 1 || strcmp(s->o.expert_cache.v[0], "off") != 0;
}

static int write_point(const struct mp_session *s, struct mp_runfiles *f, const struct mp_layout *lay,
                       const char *routing, const char *placement, enum mp_dtype wdt,
                       const char *cword, long batch, const struct ffn_work *w, const double *ffn,
                       const double *peak, const struct cache_result *cr)
{
    const char *wword = mp_dtype_choices[wdt];
    const struct mp_model *m = &s->model;
    int n = s->o.iters, rc = MP_OK;
    double *x = malloc((size_t)n * sizeof *x);
    struct mp_row row = {0};
    if (!x) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    struct mp_summary sm;
    mp_harness_summarize(ffn, 1, n, x, &sm);
    double flops = mp_ffn_flops(m->hidden, m->ffn, lay->tp, (double)w->crit_rows);
    /* the bytes actually read: fp8 codes and block scales with --weight-dtype fp8 */
    double bytes = mp_ffn_weight_bytes(m->hidden, m->ffn, lay->tp, w->crit_active,
                                       mp_session_elem_bytes(s), (int)wdt);
    double t = sm.p50 * 1e-6; /* s */
    const char *dispatch = s->o.graph ? "dynamic+graph" : "dynamic"; /* the key cell */
    double gflops = t > 0 ? flops / t / 1e9 : NAN, gbps = t > 0 ? bytes / t / 1e9 : NAN;
    struct mp_roofline rf;
    mp_roofline(peak[0], peak[1], flops, bytes, gflops * 1e9, &rf);

    if (mp_runfiles_on(f)) {
        for (int i = 0; i < n && rc == MP_OK; i++) {
            mp_workload_key_row(&row, s, lay, routing, "off", placement, 1, dispatch, "pair",
                                "bf16", wword, cword, batch, NULL);
            mp_row_int(&row, i);
            mp_row_dbl(&row, ffn[i]);
            rc = mp_runfiles_write(f, FILE_SAMPLES, &row);
        }
        if (rc == MP_OK) {
            mp_workload_key_row(&row, s, lay, routing, "off", placement, 1, dispatch, "pair",
                                "bf16", wword, cword, batch, NULL);
            mp_row_int(&row, w->tokens_per_rank);
            mp_row_int(&row, w->crit_rows);
            mp_row_int(&row, w->crit_active);
            /* integers: 6·H·Dl·rows; 3·H·Dl·active·elem (bf16) or with fp8's codes and scales */
            mp_row_int(&row, (long long)flops);
            mp_row_int(&row, (long long)bytes);
            mp_row_int(&row, n);
            double v[] = {sm.p50, sm.p99, sm.mean, sm.stdev, sm.min, sm.max, sm.ci_lo, sm.ci_hi};
            for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
                mp_row_dbl(&row, v[k]);
            mp_row_dbl(&row, sm.spread);
            mp_row_int(&row, sm.spread > MP_NOISY_SPREAD);
            double r[] = {gflops, gbps, peak[0] / 1e9, peak[1] / 1e9};
            for (size_t k = 0; k < sizeof r / sizeof r[0]; k++)
                mp_row_dbl(&row, r[k]);
            mp_row_str(&row, rf.bound);
            mp_row_dbl(&row, rf.fraction);
            /* --expert-cache: the hit rate over every rank's timed accesses, the bytes all ranks
             * fetched per iteration, the slowest rank's exposed fetch time (median) */
            struct mp_summary fs = {0};
            if (cr)
                mp_harness_summarize(cr->fetch_us, 1, n, x, &fs);
            mp_row_dbl(&row, cr && cr->counts[1] > 0 ? cr->counts[0] / cr->counts[1] : NAN);
            mp_row_dbl(&row, cr ? cr->counts[2] / n : 0);
            mp_row_dbl(&row, cr ? fs.p50 : 0);
            rc = mp_runfiles_write(f, FILE_FFN, &row);
        }
    }
    if (!s->o.quiet) {
        mp_progress_clear();
        printf("%9s %-16s %-16s", lay->name, routing, placement);
        if (weights_shown(s))
            printf(" %-7s", wword);
        if (cache_shown(s))
            printf(" %-9s", cword);
        printf(" %7ld %8ld %11.1f %11.1f %9.2f %8.2f %-8s %6.3f", batch, w->crit_rows, sm.p50, sm.p99, gflops, gbps,
               rf.bound[0] ? rf.bound : "-", rf.fraction);
        if (cache_shown(s)) {
            struct mp_summary fs = {0};
            if (cr)
                mp_harness_summarize(cr->fetch_us, 1, n, x, &fs);
            printf(" %6.3f %10.1f", cr && cr->counts[1] > 0 ? cr->counts[0] / cr->counts[1] : 1.0,
                   cr ? fs.p50 : 0.0);
        }
        printf("\n");
        fflush(stdout);
    }
    mp_row_free(&row);
    free(x);
    return rc;
}

/* The model's roofline for weights in `wdt` under --gemm `gemm`: the rates its FFN runs at
 * (mp_cost_expert_ffn_us), flops·flops_eff (fp8 weights: flops_fp8·flops_fp8_eff with --gemm loop,
 * flops_fp8·fused_fp8_eff with a fused kernel) in peak[0] (FLOP/s) and hbm_bw·hbm_eff in peak[1]
 * (bytes/s); a measured roofline is likewise what the device achieves, not its datasheet. */
static void model_peaks(const struct mp_cluster *cl, enum mp_dtype wdt, const char *gemm,
                        double *peak)
{
    double fp8_eff = !gemm || !strcmp(gemm, "loop") ? cl->flops_fp8_eff : cl->fused_fp8_eff;
    peak[0] = wdt == MP_DTYPE_FP8 ? cl->flops_fp8 * fp8_eff : cl->flops * cl->flops_eff;
    peak[1] = cl->hbm_bw * cl->hbm_eff;
}

/* Measure the roofline on every rank at once (ranks share the host's memory bandwidth as they do
 * while measuring); rank 0's numbers go into peak[0] (FLOP/s), peak[1] (bytes/s) and peak[2] (the
 * FLOP/s of the GEMM fp8 weights run on), NAN where the backend cannot measure. The model's are
 * its profile's (model_peaks). */
static int measure_peaks(struct mp_session *s, double *peak)
{
    struct mp_comm *c = s->comm;
    int profiled = mp_session_profiled(s), rc = MP_OK;
    peak[0] = peak[1] = peak[2] = NAN;
    if (profiled) {
        double fp8[2];
        model_peaks(&s->cluster, MP_DTYPE_BF16, s->o.gemm, peak);
        model_peaks(&s->cluster, MP_DTYPE_FP8, s->o.gemm, fp8);
        peak[2] = fp8[0];
    } else {
        rc = c->ops->barrier(c);
        if (rc != MP_OK)
            return rc;
        rc = s->cops->measure_peak(s->dev, &peak[0], &peak[2], &peak[1]);
    }
    double failed = rc != MP_OK;
    int rc2 = c->ops->max_double(c, &failed);
    if (rc2 != MP_OK)
        return rc2;
    if (failed > 0) {
        s->agreed = 1;
        return MP_ERR_RUNTIME;
    }
    if (s->run) {
        cJSON *j = cJSON_CreateObject();
        if (isfinite(peak[0]) && isfinite(peak[1])) {
            cJSON_AddNumberToObject(j, "peak_gflops", peak[0] / 1e9);
            cJSON_AddNumberToObject(j, "peak_GBps", peak[1] / 1e9);
            cJSON_AddNumberToObject(j, "peak_gflops_fp8", peak[2] / 1e9); /* fp8 weights' GEMM */
            if (profiled) /* from the profile (run.json's cluster) */
                cJSON_AddStringToObject(j, "from", "cluster profile");
        } else { /* a backend without a roofline measurement */
            cJSON_AddNullToObject(j, "peak_gflops");
            cJSON_AddNullToObject(j, "peak_GBps");
        }
        mp_session_note(s, "roofline", j);
        mp_session_note(s, "flush_cache", cJSON_CreateBool(mp_flush_cache_active(s)));
        rc = mp_session_save_run(s);
    }
    return rc;
}

static int captures_graphs(const struct mp_compute_ops *o) { return o->graph; }

/* --expert-cache where it cannot run: with --graph (a fetch is decided on the host before each
 * expert's FFN), and on a profile that has no host link bandwidth to fetch at. */
static int refuse_cache(const struct mp_session *s)
{
    int cached = 0;
    for (int i = 0; i < s->o.expert_cache.n; i++)
        cached |= strcmp(s->o.expert_cache.v[i], "off") != 0;
    if (cached && s->o.graph) {
        mp_usage("--expert-cache: a fetch is decided on the host before each expert's FFN, which "
                 "a captured FFN cannot replay; drop --graph or --expert-cache");
        return MP_ERR_USAGE;
    }
    if (cached && mp_session_profiled(s) && !(s->cluster.pcie_bw > 0)) {
        mp_usage("--expert-cache: the cluster profile %s has no pcie_bw (the host-to-device "
                 "bandwidth a fetch runs at); give one in its file", s->cluster.name);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* The sweep of one run: what every point shares and the progress count. */
struct sweep {
    struct mp_session *s;
    struct mp_runfiles *f;
    struct mp_routing *routings;
    int gemm, npoint, total;
    /* FLOP/s, bytes/s and fp8 weights' GEMM FLOP/s measured at start-up (the model: its
     * profile's) */
    double peak[3];
    double *ffn;    /* [iters] the slowest rank's times of the point (rank 0) */
    struct cache_result cache; /* --expert-cache: what the point's cache did (rank 0) */
};

/* The generator of a rank's local experts for its expert cache: local expert i of `rank` under
 * the placement, its TP shard generated as wcache_load generates it. */
struct local_gen {
    const struct mp_session *s;
    const struct mp_placement *pl;
    int rank, blocked;
};

static void generate_local(void *arg, int i, float *gu, float *wd)
{
    const struct local_gen *g = arg;
    const struct mp_comm *c = g->s->comm;
    int expert = g->pl->local_ids[g->pl->local_off[g->rank] + i];
    mp_weights_expert((uint64_t)g->s->o.seed, expert, g->s->model.hidden, g->s->model.ffn, c->tp,
                      c->tp_rank, g->blocked, gu, wd);
}

/* The point's expert cache for this rank, cold (static's resident set by the routing's expected
 * shares of its local experts): nothing to set up with `off`. */
static int cache_for_point(const struct mp_session *s, const struct ffn_wcache *wc,
                           const struct mp_routing *r, const struct mp_placement *pl,
                           const struct mp_cache_spec *spec, struct mp_weight_cache *cache)
{
    if (spec->slots == 0)
        return MP_OK;
    int me = s->comm->ep_rank, nl = mp_placement_nlocal(pl, me);
    double *share = malloc((size_t)(nl > 0 ? nl : 1) * sizeof *share);
    if (!share) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (int i = 0; i < nl; i++)
        share[i] = r->prob ? r->prob[pl->local_ids[pl->local_off[me] + i]] : 0;
    struct local_gen g = {.s = s, .pl = pl, .rank = me, .blocked = wc->blocked};
    int rc = mp_weight_cache_setup(cache, s->cops, s->dev, spec, nl, share, (int)wc->dt,
                                   s->model.hidden, s->model.ffn / s->comm->tp, generate_local, &g);
    mp_weight_cache_count_as(cache, mp_session_elem_bytes(s));
    free(share);
    return rc;
}

/* One point: skipped when --resume found it, else planned, checked against the memory budget,
 * measured (on the model: by the virtual ranks' clocks, against the profile's roofline for the
 * point's weights) and written. */
static int ffn_point(struct sweep *sw, const struct mp_layout *lay, struct ffn_wcache *wc, int ri,
                     int pi, const struct mp_placement *pl, int bi, int ci)
{
    const char *wword = mp_dtype_choices[wc->dt];
    struct mp_session *s = sw->s;
    long batch = mp_sweep_batch(&s->o, bi, lay->ep);
    const char *rname = s->o.routing.v[ri], *pname = s->o.placement.v[pi];
    struct mp_cache_spec spec;
    mp_cache_spec_parse(s->o.expert_cache.v[ci], &spec); /* validated at start-up */
    char cword[32] = "off"; /* the key cell: "off" or SLOTS:POLICY */
    if (spec.slots > 0)
        snprintf(cword, sizeof cword, "%d:%s", spec.slots, mp_cache_policy_choices[spec.policy]);
    struct mp_row key = {0};
    sw->npoint++;
    mp_workload_key_row(&key, s, lay, rname, "off", pname, 1,
                        s->o.graph ? "dynamic+graph" : "dynamic", "pair", "bf16", wword, cword, batch,
                        NULL);
    int skip = mp_runfiles_done(sw->f, s, &key);
    mp_row_free(&key);
    if (skip)
        return MP_OK;
    if (s->comm->rank == 0) {
        char label[256];
        snprintf(label, sizeof label, "%s %s %s weight-dtype %s expert-cache %s batch %ld",
                 lay->name, rname, pname, wword, cword, batch);
        mp_progress(sw->npoint, sw->total, label);
    }
    struct ffn_work w;
    double peak[2] = {wc->dt == MP_DTYPE_FP8 ? sw->peak[2] : sw->peak[0], sw->peak[1]};
    int rc = ffn_work_plan(&w, s, lay, &sw->routings[ri], pl, batch);
    struct mp_weight_cache cache = {0};
    if (rc == MP_OK)
        rc = ffn_memory_guard(s, wc, &w, batch);
    if (rc == MP_OK)
        rc = cache_for_point(s, wc, &sw->routings[ri], pl, &spec, &cache);
    if (rc == MP_OK)
        rc = run_point(s, wc, &w, sw->gemm, &cache, sw->ffn, &sw->cache);
    mp_weight_cache_free(&cache);
    if (rc == MP_OK && s->comm->rank == 0)
        rc = write_point(s, sw->f, lay, rname, pname, wc->dt, cword, batch, &w, sw->ffn, peak,
                         spec.slots > 0 ? &sw->cache : NULL);
    ffn_work_free(&w);
    return rc;
}

/* Every point of one layout, for each --weight-dtype its expert weights stored in it and cached
 * across the points. */
static int ffn_layout(struct sweep *sw, const struct mp_layout *lay)
{
    struct mp_session *s = sw->s;
    int rc = s->comm->ops->split(s->comm, lay->tp, lay->ep);
    for (int wi = 0; wi < s->o.weight_dtype.n && rc == MP_OK; wi++) {
        enum mp_dtype dt;
        struct ffn_wcache wc = {0};
        mp_dtype_parse("--weight-dtype", s->o.weight_dtype.v[wi], &dt); /* checked in main */
        if ((rc = ffn_wcache_init(&wc, s, lay->tp, dt)) != MP_OK)
            break;
        for (int ri = 0; ri < s->o.routing.n && rc == MP_OK; ri++)
            for (int pi = 0; pi < s->o.placement.n && rc == MP_OK; pi++) {
                struct mp_placement pl;
                rc = mp_placement_build(s->o.placement.v[pi], s->model.experts, lay->ep,
                                        sw->routings[ri].prob, &pl);
                if (rc == MP_OK && (rc = mp_placement_comm_nodes(&pl, s->comm, lay->tp)) != MP_OK)
                    mp_placement_free(&pl);
                if (rc != MP_OK)
                    break;
                for (int bi = 0; bi < mp_sweep_nbatch(&s->o) && rc == MP_OK; bi++)
                    for (int ci = 0; ci < s->o.expert_cache.n && rc == MP_OK; ci++)
                        rc = ffn_point(sw, lay, &wc, ri, pi, &pl, bi, ci);
                mp_placement_free(&pl);
            }
        ffn_wcache_free(&wc, s);
    }
    return rc;
}

/* The sweep as each rank runs it (mp_session_each_rank): every layout's points, with timing arrays
 * of its own; on the model every virtual rank runs it on a session whose comm and compute are
 * that rank's (core/cluster_model/vrun.h: an FFN phase costs the profile's roofline of its rows
 * and experts). Rank 0 writes the files. */
struct ffn_sweep {
    struct sweep *sw;
    const struct mp_layout *layouts;
    int nlayouts;
};

static int ffn_rank(struct mp_session *rank, void *arg)
{
    const struct ffn_sweep *m = arg;
    struct sweep rsw = *m->sw;
    rsw.s = rank;
    rsw.ffn = malloc((size_t)rank->o.iters * sizeof *rsw.ffn);
    rsw.cache.fetch_us = malloc((size_t)rank->o.iters * sizeof *rsw.cache.fetch_us);
    int rc = rsw.ffn && rsw.cache.fetch_us ? MP_OK : MP_ERR_RUNTIME;
    if (rc != MP_OK)
        mp_error("out of memory");
    for (int li = 0; li < m->nlayouts && rc == MP_OK; li++)
        rc = ffn_layout(&rsw, &m->layouts[li]);
    free(rsw.ffn);
    free(rsw.cache.fetch_us);
    return rc;
}

/* Refuse a --weight-dtype word that is not a type, or one the backend cannot store (exit 2). */
static int refuse_weight_dtypes(const struct mp_session *s)
{
    return mp_dtype_refuse_unsupported("--weight-dtype", s->o.weight_dtype.v, s->o.weight_dtype.n,
                                       s->cops, MP_DTYPE_USE_WEIGHTS);
}

static void print_header(const struct mp_session *s, const double *peak)
{
    char workload[768];
    printf("# moeperf-ffn: %s, GEMMs %s%s\n", mp_session_workload(s, workload, sizeof workload),
           s->o.gemm, s->o.graph ? ", replayed as a CUDA Graph" : "");
    if (mp_session_profiled(s)) {
        printf("# peak (cluster %s, flops·flops_eff and hbm_bw·hbm_eff): %.2f GFLOP/s (fp8 "
               "weights %.2f), %.2f GB/s\n", s->cluster.name, peak[0] / 1e9, peak[2] / 1e9,
               peak[1] / 1e9);
    } else {
        printf("# peak (rank 0, measured at start-up): %.2f GFLOP/s (fp8 weights' GEMM %.2f), "
               "%.2f GB/s\n", peak[0] / 1e9, peak[2] / 1e9, peak[1] / 1e9);
    }
    printf("# rows, GFLOP/s, GB/s: the rank with the most rows; times in µs over %d "
           "iterations, max over ranks\n",
           s->o.iters);
    printf("%9s %-16s %-16s", "layout", "routing", "placement");
    if (weights_shown(s))
        printf(" %-7s", "weights");
    if (cache_shown(s))
        printf(" %-9s", "cache");
    printf(" %7s %8s %11s %11s %9s %8s %-8s %6s", "batch", "rows", "ffn_p50", "ffn_p99", "GFLOP/s", "GB/s", "bound", "roof");
    if (cache_shown(s))
        printf(" %6s %10s", "hit", "fetch_us");
    printf("\n");
}

int main(int argc, char **argv)
{
    struct mp_session s;
    struct mp_runfiles f = {0};
    struct mp_layout *layouts = NULL;
    struct sweep sw = {.s = &s, .f = &f, .peak = {NAN, NAN, NAN}};
    int nlayouts = 0, nrout = 0, rc = mp_session_start(&s, "moeperf-ffn", options, summary, argc, argv);
    if (rc != MP_OK)
        goto out;
    struct mp_comm *c = s.comm;
    MP_CHECK(mp_session_layouts(&s, &layouts, &nlayouts));
    MP_CHECK(mp_gemm_mode(&s.o, s.cops, &sw.gemm));
    MP_CHECK(refuse_weight_dtypes(&s));
    MP_CHECK(mp_session_refuse_unsupported(&s));
    if (s.o.graph && !s.cops->graph) {
        char names[256];
        mp_usage("--graph: replaying a captured expert FFN needs a --backend with graph capture "
                 "(built: %s; the %s backend has none)",
                 mp_compute_names_where(captures_graphs, names, sizeof names), s.cops->name);
        rc = MP_ERR_USAGE;
        goto out;
    }
    MP_CHECK(mp_routings_parse(&s.o.routing, &s.model, s.o.seed,
                               "gate routing is measured by moeperf-layer; moeperf-ffn needs a "
                               "generated routing or a trace", &sw.routings, &nrout));
    MP_CHECK(mp_sweep_validate(&s.model, layouts, nlayouts, &s.o.placement));
    MP_CHECK(mp_expert_caches_validate(&s.o.expert_cache, &s.model, layouts, nlayouts,
                                       &s.o.placement));
    MP_CHECK(refuse_cache(&s));
    MP_CHECK(mp_runfiles_open(&f, &s, files, 2));
    MP_CHECK(measure_peaks(&s, sw.peak));
    if (!s.o.quiet && c->rank == 0)
        print_header(&s, sw.peak);
    sw.total = nlayouts * s.o.weight_dtype.n * s.o.routing.n * s.o.placement.n *
               mp_sweep_nbatch(&s.o) * s.o.expert_cache.n;
    struct ffn_sweep sweep = {.sw = &sw, .layouts = layouts, .nlayouts = nlayouts};
    MP_CHECK(mp_session_each_rank(&s, ffn_rank, &sweep));
out:
    if (s.run)
        mp_session_note(&s, "cache_flushes", cJSON_CreateNumber((double)cache_flushes));
    mp_runfiles_close(&f);
    mp_routings_free(sw.routings, nrout);
    free(layouts);
    if (rc == MP_ERR_USAGE)
        s.agreed = 1;
    return mp_session_end(&s, rc);
}
