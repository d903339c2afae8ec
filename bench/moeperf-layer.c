/* moeperf-layer - measures a whole MoE layer (route, dispatch, expert FFN, TP reduce, combine) over
 * a sweep of batch sizes, layouts, routings and placements, and writes layer.csv. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_opts.h"
#include "clock.h"
#include "console.h"
#include "error.h"
#include "layer.h"
#include "results.h"
#include "runfiles.h"
#include "session.h"
#include "stats.h"
#include "vlayer.h"
#include "watchdog.h"

static const struct mp_opt options[] = {
    MP_OPT_MODEL("qwen3-30b-a3b"), MP_OPT_EXPERTS, MP_OPT_TOPK, MP_OPT_SHARED, MP_OPT_HIDDEN,
    MP_OPT_FFN, MP_OPT_LAYERS, MP_OPT_BATCH("1:128:x2"), MP_OPT_SEQ, MP_OPT_LAYOUT(NULL),
    MP_OPT_ROUTING, MP_OPT_PLACEMENT, MP_OPT_OVERLAP, MP_OPT_DISPATCH, MP_OPT_GEMM, MP_OPT_GRAPH, MP_OPT_SEED, MP_OPT_WARMUP("3"),
    MP_OPT_ITERS("20"),
    MP_OPT_BACKEND, MP_OPT_COMM, MP_OPT_CPU_BIND, MP_OPT_CLUSTER, MP_OPT_WORLD, MP_OPT_OUT,
    MP_OPT_RESUME, MP_OPT_CHECK, MP_OPT_QUIET,
    MP_OPT_TIMEOUT, MP_OPT_MAX_MEMORY, MP_OPT_INJECT_DELAY, MP_OPT_STRAGGLE, MP_OPT_FLUSH_CACHE,
    MP_OPT_END,
};

static const char summary[] =
    "Measure one MoE layer per point: route | dispatch | expert FFN | tp-reduce | combine.\n"
    "Run under mpirun with tp·ep ranks (a single process is tp1ep1). Medians on stdout;\n"
    "layer.csv, layer_samples.csv, layer_ranks.csv and run.json in --out.";



enum { FILE_LAYER, FILE_SAMPLES, FILE_RANKS };
static const struct mp_csv_schema *const files[] = {
    &mp_schema_layer, &mp_schema_layer_samples, &mp_schema_layer_ranks};

/* The numbers of the console table, by metric name. */
static const struct mp_console_metric console_cols[] = {
    {"layer_p50", MPC_layer_us, 0, 11, 1},   {"layer_p99", MPC_layer_us, 1, 11, 1},
    {"route", MPC_route_us, 0, 9, 1},        {"ffn", MPC_ffn_us, 0, 10, 1},
    {"comm", MPC_comm_us, 0, 10, 1},         {"ratio", MPC_comm_comp_ratio, 0, 7, 2},
    {"bubble", MPC_bubble_ratio, 0, 7, 3},   {"imbal", MPC_load_imbalance, 0, 7, 2},
    {"hit", MPC_local_hit_rate, 0, 6, 3},
};
#define NCONSOLE ((int)(sizeof console_cols / sizeof console_cols[0]))


/* Whether the console table needs a column telling the dispatch mode and pipelining apart: when
 * either is swept or not the plain default. */
static int variant_shown(const struct mp_session *s)
{
    return s->o.overlap.n > 1 || s->o.overlap.v[0] != 1 || s->o.dispatch.n > 1 ||
           strcmp(s->o.dispatch.v[0], "dynamic") != 0 || s->o.graph;
}

/* The flags the chosen backends cannot honour, each refused naming the flag (exit 2). With the
 * model backends these are the only flags a measured run takes and a modelled one refuses
 * (docs/planning.md lists them; tests/integration/model_parity.sh holds the list to that):
 * --check (nothing computed to compare), --graph (nothing captured; checked where the dispatch
 * modes are), --inject-delay-us (the model has no wire to slow: a slower link is a profile with
 * less bandwidth) and --max-memory (virtual ranks hold no buffers). */
static int refuse_unsupported(const struct mp_session *s)
{
    if (s->o.check && !s->cops->expert_ffn) { /* a backend that computes nothing */
        mp_usage("--check compares data, and the %s backends move none; drop --check",
                 s->cops->name);
        return MP_ERR_USAGE;
    }
    if (s->o.inject_delay_us > 0 && s->modelled) { /* virtual: no wire to slow */
        mp_usage("--inject-delay-us: the model backends have no link to slow; model a slower link "
                 "with a cluster profile of lower intra_bw/inter_bw (--cluster FILE), or drop "
                 "--inject-delay-us");
        return MP_ERR_USAGE;
    }
    if (s->o.max_memory > 0 && s->modelled) { /* virtual: no buffers to bound */
        mp_usage("--max-memory: the model's virtual ranks hold no buffers, so there is nothing "
                 "to bound; drop --max-memory");
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* Median over iterations of field `f` (an offset in doubles) of a strided array. */
static double median_of(const double *base, size_t stride, int n, double *scratch)
{
    for (int i = 0; i < n; i++)
        scratch[i] = base[(size_t)i * stride];
    struct mp_summary s;
    mp_summarize(scratch, n, &s);
    return s.p50;
}

/* Write the point's samples, per-rank medians and summary row (in that order, so a summary row
 * is only ever present with its samples) and print its table line. */
static int write_point(struct mp_session *s, struct mp_runfiles *f, const struct mp_layout *lay,
                       const char *routing, const char *placement, int overlap,
                       const char *dispatch, long batch, const struct mp_point_result *res)
{
    int n = res->iters, N = res->nranks, rc = MP_OK;
    const size_t MN = MP_ITER_METRICS, RF = MP_RANK_ITER_FIELDS;
    double *scratch = malloc((size_t)(n > 0 ? n : 1) * sizeof *scratch);
    struct mp_summary sm[MP_ITER_METRICS];
    struct mp_row row = {0};
    if (!scratch) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (size_t k = 0; k < MN; k++) {
        for (int i = 0; i < n; i++)
            scratch[i] = ((const double *)&res->metrics[i])[k];
        mp_summarize(scratch, n, &sm[k]);
    }
    if (f->open) {
        for (int i = 0; i < n && rc == MP_OK; i++) {
            mp_workload_key_row(&row, s, lay, routing, placement, overlap, dispatch, batch);
            mp_row_int(&row, i);
            for (size_t k = 0; k < MN; k++)
                mp_row_dbl(&row, ((const double *)&res->metrics[i])[k]);
            rc = mp_runfiles_write(f, FILE_SAMPLES, &row);
        }
        for (int r = 0; r < N && rc == MP_OK; r++) {
            const double *base = (const double *)&res->ranks[r];
            size_t stride = (size_t)N * RF;
            mp_workload_key_row(&row, s, lay, routing, placement, overlap, dispatch, batch);
            mp_row_int(&row, r);
            mp_row_int(&row, s->comm->node_of[r]);
            mp_row_int(&row, r / lay->tp);
            mp_row_int(&row, r % lay->tp);
            mp_row_dbl(&row, median_of(base + offsetof(struct mp_rank_iter, tokens) / 8, stride, n, scratch));
            mp_row_dbl(&row, median_of(base + offsetof(struct mp_rank_iter, rows) / 8, stride, n, scratch));
            mp_row_dbl(&row, median_of(base + offsetof(struct mp_rank_iter, ffn_rows) / 8, stride, n, scratch));
            mp_row_dbl(&row, median_of(base + offsetof(struct mp_rank_iter, bytes_sent) / 8, stride, n, scratch));
            for (int ph = 0; ph < 5; ph++) /* route, dispatch, ffn, tp_reduce, combine */
                mp_row_dbl(&row, median_of(base + ph, stride, n, scratch));
            for (int i = 0; i < n; i++) {
                const struct mp_rank_iter *q = &res->ranks[(size_t)i * N + r];
                scratch[i] = q->route + q->dispatch + q->ffn + q->tp_reduce + q->combine;
            }
            struct mp_summary ls;
            mp_summarize(scratch, n, &ls);
            mp_row_dbl(&row, ls.p50);
            mp_row_dbl(&row, median_of(base + offsetof(struct mp_rank_iter, start_skew) / 8, stride, n, scratch));
            rc = mp_runfiles_write(f, FILE_RANKS, &row);
        }
        if (rc == MP_OK) {
            const struct mp_summary *L = mp_metric_summary(sm, MPC_layer_us),
                                    *F = mp_metric_summary(sm, MPC_ffn_us),
                                    *C = mp_metric_summary(sm, MPC_comm_us);
            mp_workload_key_row(&row, s, lay, routing, placement, overlap, dispatch, batch);
            mp_row_int(&row, res->tokens_per_rank);
            mp_row_int(&row, n);
            double lv[] = {L->p50, L->p99, L->mean, L->stdev, L->min, L->max, L->ci_lo, L->ci_hi,
                           F->p50, F->p99, mp_metric_summary(sm, MPC_ffn_mean_us)->p50, C->p50,
                           C->p99};
            for (size_t k = 0; k < sizeof lv / sizeof lv[0]; k++)
                mp_row_dbl(&row, lv[k]);
            /* then, from route_us on, each column by name: the median of a per-iteration metric,
             * or one of the point's own values */
            for (int k = mp_schema_index(&mp_schema_layer, MPC_route_us);
                 k < mp_schema_ncols(&mp_schema_layer) && rc == MP_OK; k++) {
                const char *name = mp_schema_column(&mp_schema_layer, k)->name;
                const struct mp_summary *m = mp_metric_summary(sm, name);
                if (m)
                    mp_row_dbl(&row, m->p50);
                else if (name == MPC_check_error)
                    mp_row_dbl(&row, res->check_error);
                else if (name == MPC_overlap_efficiency)
                    mp_row_dbl(&row, res->overlap_efficiency);
                else {
                    mp_error("layer.csv: no value for column %s", name);
                    rc = MP_ERR_RUNTIME;
                }
            }
            if (rc == MP_OK)
                rc = mp_runfiles_write(f, FILE_LAYER, &row);
        }
    }
    if (!s->o.quiet) {
        mp_progress_clear();
        char chk[24] = "-";
        if (!isnan(res->check_error))
            snprintf(chk, sizeof chk, "%.1e", res->check_error);
        char mode[128], variant[136] = "";
        if (overlap > 1)
            snprintf(mode, sizeof mode, "%s/ovl%d", dispatch, overlap);
        else
            snprintf(mode, sizeof mode, "%s", dispatch);
        if (variant_shown(s))
            snprintf(variant, sizeof variant, " %-16.16s", mode);
        printf("%9s %-16s %-16s%s %7ld", lay->name, routing, placement, variant, batch);
        mp_console_values(console_cols, NCONSOLE, sm);
        printf(" %9s\n", chk);
        fflush(stdout);
    }
    mp_row_free(&row);
    free(scratch);
    return rc;
}

/* Capabilities of compute backends, for messages that name the ones a request needs. */
static int runs_padded(const struct mp_compute_ops *o)
{
    return !!(o->dispatch_modes & MP_DISPATCH_PADDED);
}
static int runs_pipelined(const struct mp_compute_ops *o)
{
    return !!(o->dispatch_modes & MP_DISPATCH_PIPELINED);
}
static int captures_graphs(const struct mp_compute_ops *o) { return o->graph; }

int main(int argc, char **argv)
{
    double t_main = mp_now_us(), timed_us = 0;
    int measured = 0;
    struct mp_session s;
    struct mp_runfiles f = {0};
    struct mp_layout *layouts = NULL;
    struct mp_routing *routings = NULL;
    int nlayouts = 0, nrout = 0, rc = mp_session_start(&s, "moeperf-layer", options, summary, argc, argv);
    if (rc != MP_OK)
        goto out;
    struct mp_comm *c = s.comm;
    const struct mp_model *m = &s.model;
    MP_CHECK(mp_layouts_resolve(&s.o.layout, c->size, s.modelled, &layouts, &nlayouts));
    MP_CHECK(mp_routings_parse(&s.o.routing, m, s.o.seed, NULL, &routings, &nrout));
    MP_CHECK(mp_sweep_validate(m, layouts, nlayouts, &s.o.placement));
    int straggle_rank;
    double straggle_us;
    MP_CHECK(mp_straggle_parse(s.o.straggle, c->size, &straggle_rank, &straggle_us));
    int gemm;
    MP_CHECK(mp_gemm_mode(&s.o, s.cops, &gemm));
    if (!s.modelled)
        MP_CHECK(mp_watchdog_start());
    MP_CHECK(refuse_unsupported(&s));
    long max_batch = 0;
    for (int b = 0; b < s.o.batch.n; b++)
        max_batch = s.o.batch.v[b] > max_batch ? s.o.batch.v[b] : max_batch;
    MP_CHECK(mp_runfiles_open(&f, &s, files, 3));

    if (!s.o.quiet && c->rank == 0) {
        printf("# moeperf-layer: model %s (H %d, D %d, E %d, top-%d, %d shared), %d ranks on %d "
               "node(s), backend %s, comm %s\n",
               m->name, m->hidden, m->ffn, m->experts, m->topk, m->shared, c->size, c->nnodes,
               s.o.backend, s.o.comm);
        printf("# times in µs, medians over %d iterations (p99 for layer); ratio = comm/ffn\n",
               s.o.iters);
        printf("%9s %-16s %-16s%s %7s", "layout", "routing", "placement",
               variant_shown(&s) ? " dispatch/overlap" : "", "batch");
        mp_console_titles(console_cols, NCONSOLE);
        printf(" %9s\n", "check");
    }
    int max_overlap = 1;
    for (int i = 0; i < s.o.overlap.n; i++)
        max_overlap = s.o.overlap.v[i] > max_overlap ? (int)s.o.overlap.v[i] : max_overlap;
    for (int di = 0; di < s.o.dispatch.n; di++) { /* refuse a bad --dispatch before measuring */
        int padded;
        double factor;
        MP_CHECK(mp_dispatch_parse(s.o.dispatch.v[di], &padded, &factor));
        if (padded && !(s.cops->dispatch_modes & MP_DISPATCH_PADDED)) {
            char names[256];
            mp_usage("--dispatch %s: the %s backend does not run the padded dispatch; measure it "
                     "with a --backend that does (built: %s)", s.o.dispatch.v[di], s.cops->name,
                     mp_compute_names_where(runs_padded, names, sizeof names));
            rc = MP_ERR_USAGE;
            goto out;
        }
        if (s.o.graph && !padded) {
            mp_usage("--graph with --dispatch %s: only the padded dispatch can be captured (the "
                     "dynamic one waits on the host for its counts); use --dispatch padded[:F]",
                     s.o.dispatch.v[di]);
            rc = MP_ERR_USAGE;
            goto out;
        }
        if (padded && max_overlap > 1) {
            mp_usage("--dispatch %s with --overlap %d: the pipelined layer exchanges exact counts; "
                     "sweep them in separate runs", s.o.dispatch.v[di], max_overlap);
            rc = MP_ERR_USAGE;
            goto out;
        }
    }
    if (max_overlap > 1 && !(s.cops->dispatch_modes & MP_DISPATCH_PIPELINED)) {
        char names[256];
        mp_usage("--overlap %d: the %s backend does not run the pipelined layer; use a "
                 "--backend that does (built: %s)",
                 max_overlap, s.cops->name,
                 mp_compute_names_where(runs_pipelined, names, sizeof names));
        rc = MP_ERR_USAGE;
        goto out;
    }
    if (s.o.graph && (!s.cops->graph || straggle_rank >= 0)) {
        char names[256];
        if (!s.cops->graph)
            mp_usage("--graph: replaying a captured layer needs a --backend with graph capture "
                     "(built: %s)", mp_compute_names_where(captures_graphs, names, sizeof names));
        else
            mp_usage("--graph: --straggle waits on the host inside the layer; drop one of them");
        rc = MP_ERR_USAGE;
        goto out;
    }
    int total = nlayouts * s.o.routing.n * s.o.placement.n * s.o.overlap.n * s.o.dispatch.n *
                s.o.batch.n;
    int npoint = 0;
    for (int li = 0; li < nlayouts; li++) {
        const struct mp_layout *lay = &layouts[li];
        struct mp_layer *L = NULL;
        MP_CHECK(c->ops->split(c, lay->tp, lay->ep));
        if (!s.modelled)
            MP_CHECK(mp_layer_create(&L, s.cops, s.dev, c, m, (uint64_t)s.o.seed,
                                     max_batch * s.o.seq, s.o.max_memory, max_overlap));
        for (int ri = 0; ri < s.o.routing.n && rc == MP_OK; ri++) {
            for (int pi = 0; pi < s.o.placement.n && rc == MP_OK; pi++) {
                struct mp_placement pl;
                rc = mp_placement_build(s.o.placement.v[pi], m->experts, lay->ep, routings[ri].prob, &pl);
                for (int oi = 0; oi < s.o.overlap.n && rc == MP_OK; oi++)
                for (int di = 0; di < s.o.dispatch.n && rc == MP_OK; di++)
                for (int bi = 0; bi < s.o.batch.n && rc == MP_OK; bi++) {
                    long batch = s.o.batch.v[bi];
                    int overlap = (int)s.o.overlap.v[oi];
                    int padded;
                    double capacity;
                    mp_dispatch_parse(s.o.dispatch.v[di], &padded, &capacity); /* validated above */
                    char dispatch[96]; /* the key cell: the entry, "+graph" when replayed */
                    snprintf(dispatch, sizeof dispatch, "%s%s", s.o.dispatch.v[di],
                             s.o.graph ? "+graph" : "");
                    const char *rname = s.o.routing.v[ri], *pname = s.o.placement.v[pi];
                    struct mp_row key = {0};
                    npoint++;
                    mp_workload_key_row(&key, &s, lay, rname, pname, overlap, dispatch, batch);
                    int skip = mp_runfiles_done(&f, &s, &key);
                    mp_row_free(&key);
                    if (skip)
                        continue;
                    char label[512];
                    snprintf(label, sizeof label, "layout %s routing %s placement %s overlap %d "
                             "dispatch %s batch %ld", lay->name, rname, pname, overlap, dispatch,
                             batch);
                    if (c->rank == 0)
                        mp_progress(npoint, total, label);
                    if (!s.modelled)
                        mp_watchdog_arm(s.o.timeout, label);
                    struct mp_point pt = {.batch = batch, .seq = s.o.seq, .routing = &routings[ri],
                                          .placement = &pl, .warmup = s.o.warmup,
                                          .iters = s.o.iters, .check = s.o.check,
                                          .overlap = overlap, .padded = padded,
                                          .capacity = capacity, .gemm = gemm,
                                          .graph = s.o.graph,
                                          .flush_cache = mp_flush_cache_active(&s),
                                          .straggle_rank = straggle_rank,
                                          .straggle_us = straggle_us};
                    struct mp_point_result res;
                    rc = s.modelled ? mp_vlayer_run(&s.cluster, m, lay->tp, lay->ep,
                                                    (uint64_t)s.o.seed, &pt, &res)
                                    : mp_layer_run(L, &pt, &res);
                    if (rc == MP_OK)
                        mp_watchdog_disarm();
                    else /* freeing the layer waits for the device: no longer than --timeout */
                        rc = mp_session_fail(&s, rc);
                    timed_us += res.timed_us;
                    measured++;
                    if (rc == MP_OK && c->rank == 0)
                        rc = write_point(&s, &f, lay, rname, pname, overlap, dispatch, batch, &res);
                    if (rc == MP_OK && s.o.check && !(res.check_error <= s.cops->check_tolerance)) {
                        mp_usage("--check failed at %s: relative error %.3g exceeds %.0e", label,
                                 res.check_error, s.cops->check_tolerance);
                        rc = MP_ERR_RUNTIME;
                        s.agreed = 1;
                    }
                    mp_point_result_free(&res);
                }
                mp_placement_free(&pl);
            }
        }
        mp_layer_destroy(L);
        if (rc != MP_OK)
            goto out;
    }
out:
    if (s.run) { /* how much of the wall time the timed iterations took */
        cJSON *sw = cJSON_CreateObject();
        cJSON_AddNumberToObject(sw, "points", measured);
        cJSON_AddNumberToObject(sw, "wall_s", (mp_now_us() - t_main) * 1e-6);
        cJSON_AddNumberToObject(sw, "timed_s", timed_us * 1e-6);
        mp_session_note(&s, "sweep", sw);
        mp_session_note(&s, "flush_cache", cJSON_CreateBool(mp_flush_cache_active(&s)));
    }
    mp_runfiles_close(&f);
    mp_routings_free(routings, nrout);
    free(layouts);
    if (rc == MP_ERR_USAGE)
        s.agreed = 1;
    return mp_session_end(&s, rc);
}
