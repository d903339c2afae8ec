/* layer_rows.c - moeperf-layer's rows of a point: layer.csv's summary, its samples and per-rank
 * files, and the console's header and line (layer_rows.h). */
#include "layer_rows.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console.h"
#include "dtype.h"
#include "error.h"
#include "results.h"
#include "schema.h"
#include "stats.h"

/* The numbers of the console table, by metric name. */
static const struct mp_console_metric console_cols[] = {
    {"layer_p50", MPC_layer_us, 0, 11, 1},   {"layer_p99", MPC_layer_us, 1, 11, 1},
    {"route", MPC_route_us, 0, 9, 1},        {"notify", MPC_notify_us, 0, 8, 1},
    {"ffn", MPC_ffn_us, 0, 10, 1},
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
           strcmp(s->o.dispatch.v[0], "dynamic") != 0 || s->o.graph || s->o.dedup.n > 1 ||
           strcmp(s->o.dedup.v[0], "pair") != 0 || s->o.dispatch_dtype.n > 1 ||
           strcmp(s->o.dispatch_dtype.v[0], "bf16") != 0 || s->o.weight_dtype.n > 1 ||
           strcmp(s->o.weight_dtype.v[0], "bf16") != 0 || s->o.expert_cache.n > 1 ||
           strcmp(s->o.expert_cache.v[0], "off") != 0 || s->o.micro_batches.n > 1 ||
           s->o.micro_batches.v[0] != 1 || s->o.context.n > 1 || s->o.phase.n > 1 ||
           strcmp(s->o.phase.v[0], "decode") != 0;
}

/* The index of a field of struct mp_rank_iter in doubles; its phase durations are the fields
 * before `tokens`. */
#define RANK_FIELD(field) (offsetof(struct mp_rank_iter, field) / sizeof(double))
#define RANK_PHASES RANK_FIELD(tokens)

/* Median over iterations of field `f` (an offset in doubles) of a strided array. */
static double median_of(const struct mp_point_result *res, int r, size_t field, double *scratch)
{
    for (int i = 0; i < res->iters; i++)
        scratch[i] = ((const double *)&mp_point_ranks(res, i)[r])[field];
    return mp_percentile_select(scratch, res->iters, 50);
}

/* A point's key cells (with the session's): what every row of its files starts with. */
struct point_key {
    const struct mp_layout *lay;
    const char *routing, *group_limit, *placement, *dispatch, *dedup, *dispatch_dtype;
    const char *weight_dtype, *expert_cache;
    int overlap;
    long batch;
    struct mp_step_key step;
    const struct mp_placement *pl; /* the point's placement: the experts each EP rank holds */
};

/* The experts EP rank `ep` holds under `pl`, as ascending ranges separated by spaces ("0-3 9"). */
static void local_experts_text(const struct mp_placement *pl, int ep, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    const int *id = pl->local_ids + pl->local_off[ep];
    int n = pl->local_off[ep + 1] - pl->local_off[ep];
    for (int i = 0; i < n && at < size; i++) {
        int j = i;
        while (j + 1 < n && id[j + 1] == id[j] + 1)
            j++;
        int w = j > i ? snprintf(buf + at, size - at, "%s%d-%d", at ? " " : "", id[i], id[j])
                      : snprintf(buf + at, size - at, "%s%d", at ? " " : "", id[i]);
        at += w > 0 ? (size_t)w : 0;
        i = j;
    }
}

static void put_key(struct mp_row *row, const struct mp_session *s, const struct point_key *k)
{
    mp_workload_key_row(row, s, k->lay, k->routing, k->group_limit, k->placement, k->overlap,
                        k->dispatch, k->dedup, k->dispatch_dtype, k->weight_dtype,
                        k->expert_cache, k->batch, &k->step);
}

/* layer_rank_samples.csv: every rank's record of every timed iteration. */
static int write_rank_samples(const struct mp_session *s, struct mp_runfiles *f,
                              const struct point_key *k, const struct mp_point_result *res,
                              struct mp_row *row)
{
    int rc = MP_OK, N = res->nranks;
    double *w = malloc((size_t)(N > 0 ? N : 1) * MP_WAIT_PHASES * sizeof *w);
    if (!w) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (int i = 0; i < res->iters && rc == MP_OK; i++) {
        const struct mp_rank_iter *rk = mp_point_ranks(res, i);
        mp_metrics_rank_waits(rk, N, k->lay->tp, w);
        for (int r = 0; r < N && rc == MP_OK; r++) {
            const struct mp_rank_iter *x = &rk[r];
            put_key(row, s, k);
            mp_row_int(row, i);
            mp_row_int(row, r);
            mp_row_int(row, s->comm->node_of[r]);
            mp_row_str(row, mp_session_rank_host(s, r));
            mp_row_int(row, r / k->lay->tp);
            mp_row_int(row, r % k->lay->tp);
            const double *wr = &w[r * MP_WAIT_PHASES];
            double v[] = {x->route,     x->notify,  x->dispatch, x->ffn,
                          x->tp_reduce, x->combine, mp_rank_layer_us(x), x->start_skew,
                          wr[0],        wr[1],      wr[2],       wr[3],
                          wr[0] + wr[1] + wr[2] + wr[3],
                          x->tokens,    x->rows,    x->ffn_rows, x->bytes_sent,
                          x->cache_hits, x->cache_misses, x->fetch_bytes, x->fetch_us};
            for (size_t c = 0; c < sizeof v / sizeof v[0]; c++)
                mp_row_dbl(row, v[c]);
            rc = mp_runfiles_write(f, FILE_RANK_SAMPLES, row);
        }
    }
    free(w);
    return rc;
}

/* layer_ranks.csv: every rank's medians over the iterations of its counts and phase times, its
 * layer time and its start skew. */
static int write_ranks(const struct mp_session *s, struct mp_runfiles *f, const struct point_key *k,
                       const struct mp_point_result *res, double *scratch, struct mp_row *row)
{
    int n = res->iters, N = res->nranks, rc = MP_OK;
    for (int r = 0; r < N && rc == MP_OK; r++) {
        put_key(row, s, k);
        mp_row_int(row, r);
        mp_row_int(row, s->comm->node_of[r]);
        mp_row_int(row, r / k->lay->tp);
        mp_row_int(row, r % k->lay->tp);
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(tokens), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(rows), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(ffn_rows), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(bytes_sent), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(dispatch_intra), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(dispatch_inter), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(combine_intra), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(combine_inter), scratch));
        for (size_t ph = 0; ph < RANK_PHASES; ph++)
            mp_row_dbl(row, median_of(res, r, ph, scratch));
        for (int i = 0; i < n; i++)
            scratch[i] = mp_rank_layer_us(&mp_point_ranks(res, i)[r]);
        mp_row_dbl(row, mp_percentile_select(scratch, n, 50));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(start_skew), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(dispatch_inter_us), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(dispatch_intra_us), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(combine_inter_us), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(combine_intra_us), scratch));
        char held[4096];
        local_experts_text(k->pl, r / k->lay->tp, held, sizeof held);
        mp_row_str(row, held);
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(cache_hits), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(cache_misses), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(fetch_bytes), scratch));
        mp_row_dbl(row, median_of(res, r, RANK_FIELD(fetch_us), scratch));
        rc = mp_runfiles_write(f, FILE_RANKS, row);
    }
    return rc;
}

/* The step columns of layer.csv (core/cluster_model/step.h), in the order of enum MP_STEP_TOTAL...: each part's
 * median and p99; empty for a measured point. */
static const char *const step_cols[MP_STEP_NPARTS][2] = {
    [MP_STEP_TOTAL] = {MPC_step_us, MPC_step_p99_us},    [MP_STEP_ATTN] = {MPC_attn_us, MPC_attn_p99_us},
    [MP_STEP_DENSE] = {MPC_dense_us, MPC_dense_p99_us},  [MP_STEP_HEAD] = {MPC_head_us, MPC_head_p99_us},
    [MP_STEP_MISC] = {MPC_misc_us, MPC_misc_p99_us},     [MP_STEP_HOST] = {MPC_host_us, MPC_host_p99_us},
    [MP_STEP_MOE] = {MPC_moe_us, MPC_moe_p99_us},
    [MP_STEP_OVERLAP] = {MPC_overlap_us, MPC_overlap_p99_us}};

/* Write column `name`'s cell into `row` when it is a step column; 0 when it is not one. */
static int step_column(const char *name, const struct mp_step_result *st, struct mp_row *row)
{
    if (name == MPC_tok_s_gpu || name == MPC_input_tok_s_gpu) {
        mp_row_dbl(row, !st->valid ? NAN : name == MPC_tok_s_gpu ? st->tok_s_gpu
                                                                  : st->input_tok_s_gpu);
        return 1;
    }
    for (int k = 0; k < MP_STEP_NPARTS; k++)
        for (int q = 0; q < 2; q++)
            if (name == step_cols[k][q]) {
                mp_row_dbl(row, !st->valid ? NAN : q ? st->p99[k] : st->p50[k]);
                return 1;
            }
    return 0;
}

/* layer.csv: the point's summary row from the metrics' summaries `sm`. */
static int write_summary(const struct mp_session *s, struct mp_runfiles *f,
                         const struct point_key *k, const struct mp_point_result *res,
                         const struct mp_summary *sm, struct mp_row *row)
{
    int rc = MP_OK;
    const struct mp_summary *L = mp_metric_summary(sm, MPC_layer_us),
                            *F = mp_metric_summary(sm, MPC_ffn_us),
                            *C = mp_metric_summary(sm, MPC_comm_us);
    put_key(row, s, k);
    mp_row_int(row, res->tokens_per_rank);
    mp_row_int(row, res->iters);
    double lv[] = {L->p50, L->p99, L->mean, L->stdev, L->min, L->max, L->ci_lo, L->ci_hi};
    for (size_t i = 0; i < sizeof lv / sizeof lv[0]; i++)
        mp_row_dbl(row, lv[i]);
    mp_row_dbl(row, L->spread);
    mp_row_int(row, L->spread > MP_NOISY_SPREAD);
    double fv[] = {F->p50, F->p99, mp_metric_summary(sm, MPC_ffn_mean_us)->p50, C->p50, C->p99};
    for (size_t i = 0; i < sizeof fv / sizeof fv[0]; i++)
        mp_row_dbl(row, fv[i]);
    /* then, from route_us on, each column by name: the median of a per-iteration metric, or one
     * of the point's own values */
    for (int i = mp_schema_index(&mp_schema_layer, MPC_route_us);
         i < mp_schema_ncols(&mp_schema_layer) && rc == MP_OK; i++) {
        const char *name = mp_schema_column(&mp_schema_layer, i)->name;
        const struct mp_summary *m = mp_metric_summary(sm, name);
        if (m)
            mp_row_dbl(row, m->p50);
        else if (name == MPC_check_error)
            mp_row_dbl(row, res->check_error);
        else if (name == MPC_overlap_efficiency)
            mp_row_dbl(row, res->overlap_efficiency);
        else if (name == MPC_mem_gb_per_gpu)
            mp_row_dbl(row, res->mem_gb_per_gpu);
        else if (step_column(name, &res->step, row))
            ;
        else if (name == MPC_cache_slots || name == MPC_cache_policy) { /* "SLOTS:POLICY" */
            const char *colon = strchr(k->expert_cache, ':');
            int off = !strcmp(k->expert_cache, "off");
            if (name == MPC_cache_policy)
                mp_row_str(row, off || !colon ? "" : colon + 1);
            else if (off)
                mp_row_str(row, "");
            else
                mp_row_int(row, atol(k->expert_cache));
        } else {
            mp_error("layer.csv: no value for column %s", name);
            rc = MP_ERR_RUNTIME;
        }
    }
    return rc == MP_OK ? mp_runfiles_write(f, FILE_LAYER, row) : rc;
}

/* The point's line of the console table. */
static void print_line(const struct mp_session *s, const struct point_key *k,
                       const struct mp_point_result *res, const struct mp_summary *sm)
{
    mp_progress_clear();
    char chk[24] = "-";
    if (!isnan(res->check_error))
        snprintf(chk, sizeof chk, "%.1e", res->check_error);
    char mode[160], variant[168] = "", dedup[96] = "";
    if (strcmp(k->dedup, "pair") != 0)
        snprintf(dedup, sizeof dedup, "/%s", k->dedup);
    if (strcmp(k->dispatch_dtype, "bf16") != 0) /* the default unnamed, as before the flag */
        snprintf(dedup + strlen(dedup), sizeof dedup - strlen(dedup), "/%s", k->dispatch_dtype);
    if (strcmp(k->weight_dtype, "bf16") != 0) /* weights: "/w" and the type */
        snprintf(dedup + strlen(dedup), sizeof dedup - strlen(dedup), "/w%s", k->weight_dtype);
    if (strcmp(k->expert_cache, "off") != 0) /* the cache: "/c" and SLOTS:POLICY */
        snprintf(dedup + strlen(dedup), sizeof dedup - strlen(dedup), "/c%s", k->expert_cache);
    if (k->step.micro_batches > 1) /* two micro-batches: "/mb2" */
        snprintf(dedup + strlen(dedup), sizeof dedup - strlen(dedup), "/mb%d",
                 k->step.micro_batches);
    if (strcmp(k->step.phase, "decode") != 0) /* a prefill step: "/prefill", its pieces "/chN" */
        snprintf(dedup + strlen(dedup), sizeof dedup - strlen(dedup), "/%s", k->step.phase);
    if (k->step.chunk > 0)
        snprintf(dedup + strlen(dedup), sizeof dedup - strlen(dedup), "/ch%ld", k->step.chunk);
    if (s->o.context.n > 1) /* a context sweep: "/kv" and the tokens */
        snprintf(dedup + strlen(dedup), sizeof dedup - strlen(dedup), "/kv%ld", k->step.context);
    if (k->overlap > 1)
        snprintf(mode, sizeof mode, "%s%s/ovl%d", k->dispatch, dedup, k->overlap);
    else
        snprintf(mode, sizeof mode, "%s%s", k->dispatch, dedup);
    if (variant_shown(s))
        snprintf(variant, sizeof variant, " %-30.30s", mode);
    char routing[600]; /* the routing, with the group limit when there is one */
    snprintf(routing, sizeof routing, "%s%s%s", k->routing, strcmp(k->group_limit, "off") ? "/" : "",
             strcmp(k->group_limit, "off") ? k->group_limit : "");
    printf("%9s %-16s %-16s%s %7ld %8ld", k->lay->name, routing, k->placement, variant, k->batch,
           res->tokens_per_rank);
    mp_console_values(console_cols, NCONSOLE, sm);
    if (mp_session_profiled(s)) { /* the whole step of the layer (core/cluster_model/step.h) */
        int prefill = strcmp(k->step.phase, "prefill") == 0;
        printf(" %9.2f %9.0f", res->step.valid ? res->step.p50[MP_STEP_TOTAL] / 1e3 : NAN,
               !res->step.valid ? NAN : prefill ? res->step.input_tok_s_gpu : res->step.tok_s_gpu);
    }
    printf(" %9s\n", chk);
    fflush(stdout);
}

/* Write the point's samples, per-rank medians and summary row (in that order, so a summary row
 * is only ever present with its samples) and print its table line. */
int layer_write_point(struct mp_session *s, struct mp_runfiles *f, const struct mp_layout *lay,
                      const char *routing, const char *group_limit, const char *placement,
                      int overlap, const char *dispatch, const char *dedup,
                      const char *dispatch_dtype, const char *weight_dtype,
                      const char *expert_cache, long batch, const struct mp_step_key *step,
                      const struct mp_placement *pl, const struct mp_point_result *res)
{
    struct point_key k = {.lay = lay, .pl = pl, .routing = routing, .group_limit = group_limit,
                          .placement = placement, .dispatch = dispatch, .dedup = dedup,
                          .dispatch_dtype = dispatch_dtype, .weight_dtype = weight_dtype,
                          .expert_cache = expert_cache, .overlap = overlap, .batch = batch,
                          .step = *step};
    int n = res->iters, rc = MP_OK;
    const size_t MN = MP_ITER_METRICS;
    double *scratch = malloc((size_t)(n > 0 ? n : 1) * sizeof *scratch);
    struct mp_summary sm[MP_ITER_METRICS];
    struct mp_row row = {0};
    if (!scratch) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (size_t m = 0; m < MN; m++)
        mp_harness_summarize((const double *)res->metrics + m, MN, n, scratch, &sm[m]);
    if (mp_runfiles_on(f)) {
        for (int i = 0; i < n && rc == MP_OK; i++) { /* layer_samples.csv */
            put_key(&row, s, &k);
            mp_row_int(&row, i);
            for (size_t m = 0; m < MN; m++)
                mp_row_dbl(&row, ((const double *)&res->metrics[i])[m]);
            rc = mp_runfiles_write(f, FILE_SAMPLES, &row);
        }
        if (rc == MP_OK)
            rc = write_ranks(s, f, &k, res, scratch, &row);
        if (rc == MP_OK && f->nfiles > FILE_RANK_SAMPLES)
            rc = write_rank_samples(s, f, &k, res, &row);
        if (rc == MP_OK)
            rc = write_summary(s, f, &k, res, sm, &row);
    }
    if (!s->o.quiet)
        print_line(s, &k, res, sm);
    mp_row_free(&row);
    free(scratch);
    return rc;
}

void layer_print_header(const struct mp_session *s)
{
    char workload[768];
    printf("# moeperf-layer: %s\n", mp_session_workload(s, workload, sizeof workload));
    printf("# times in µs, medians over %d iterations (p99 for layer); ratio = comm/ffn%s\n",
           s->o.iters,
           mp_session_profiled(s) ? "; step_ms: the whole step (every layer), tok/s/gpu its output "
                                    "tokens per second per GPU (prefill: its prompt tokens)"
                                  : "");
    if (variant_shown(s))
        printf("# variant: dispatch[/dedup][/dispatch dtype][/w weight dtype][/c expert cache]"
               "[/mb micro-batches][/prefill][/ch chunk][/kv context][/ovl chunks], each left out at "
               "its default\n");
    printf("%9s %-16s %-16s%s %7s %8s", "layout", "routing", "placement",
           variant_shown(s) ? " variant                       " : "", "batch", "tok/rank");
    mp_console_titles(console_cols, NCONSOLE);
    if (mp_session_profiled(s))
        printf(" %9s %9s", "step_ms", "tok/s/gpu");
    printf(" %9s\n", "check");
}
