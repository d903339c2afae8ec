/* calibrate.c - least-squares fit of a cluster profile to measured runs (see calibrate.h). */
#include "calibrate.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_opts.h"
#include "compute.h"
#include "dedup.h"
#include "dispatch.h"
#include "error.h"
#include "layer.h"
#include "metrics.h"
#include "results.h"
#include "schema.h"
#include "sort.h"
#include "stats.h"

const char *const mp_calib_col_names[CAL_NCOLS] = {
    "layer.csv ffn_us", "layer.csv dispatch_us", "layer.csv combine_us", "layer.csv tp_reduce_us",
    "layer.csv layer_us", "a2a.csv time_us", "ffn.csv ffn_us",
};

/* Draws a layer point is predicted over (the pool a measured run cycles through). */
#define CAL_DRAWS 8

/* ---- loading ---- */

/* The element bytes of a measured run's compute backend: run.json's libraries.compute_elem_bytes
 * (0 when out of range), or, in a run written before that was recorded, the element size of the
 * built backend of the name libraries.compute holds (2, bf16, for one this binary lacks: a GPU's). */
static double compute_elem_bytes(const cJSON *lib)
{
    const cJSON *e = lib ? cJSON_GetObjectItemCaseSensitive(lib, "compute_elem_bytes") : NULL;
    if (cJSON_IsNumber(e))
        return e->valuedouble > 0 && e->valuedouble <= 64 ? e->valuedouble : 0;
    const cJSON *compute = lib ? cJSON_GetObjectItemCaseSensitive(lib, "compute") : NULL;
    if (!cJSON_IsString(compute))
        return 2;
    for (int i = 0; mp_compute_backends[i]; i++)
        if (strcmp(mp_compute_backends[i]->name, compute->valuestring) == 0)
            return (double)mp_compute_backends[i]->elem_size;
    return 2;
}

/* The run's --gemm (enum mp_gemm) from its command line in run.json's argv; loop when absent. */
static int run_gemm(const cJSON *j)
{
    const cJSON *argv = cJSON_GetObjectItemCaseSensitive(j, "argv"), *a;
    const char *prev = "";
    int gemm = MP_GEMM_LOOP;
    cJSON_ArrayForEach(a, argv)
    {
        const char *v = cJSON_IsString(a) ? a->valuestring : "";
        const char *word = !strcmp(prev, "--gemm") ? v : !strncmp(v, "--gemm=", 7) ? v + 7 : NULL;
        for (int g = MP_GEMM_LOOP; word && g < MP_GEMM_COUNT; g++)
            if (!strcmp(word, mp_gemm_choices[g]))
                gemm = g;
        prev = v;
    }
    return gemm;
}

/* Hardware facts of a run from its run.json: ranks per node and element bytes, and its --gemm. */
static int run_facts(const char *dir, int *gpn, double *elem, int *gemm)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        mp_usage("--calibrate: %s is not a run directory (no run.json)", dir);
        return MP_ERR_USAGE;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!buf) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    buf[got] = '\0';
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    if (!j) {
        mp_usage("--calibrate: %s is not valid JSON", path);
        return MP_ERR_USAGE;
    }
    *gemm = run_gemm(j);
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(j, "cluster");
    const cJSON *world = cJSON_GetObjectItemCaseSensitive(j, "world");
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(j, "nodes");
    const cJSON *lib = cJSON_GetObjectItemCaseSensitive(j, "libraries");
    int rc = MP_OK;
    if (cJSON_IsObject(cl)) { /* a model run: its profile's facts */
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(cl, "gpus_per_node");
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(cl, "elem_bytes");
        *gpn = cJSON_IsNumber(g) && g->valuedouble >= 1 && g->valuedouble <= 1 << 20 ? g->valueint : 0;
        *elem = cJSON_IsNumber(e) && e->valuedouble > 0 && e->valuedouble <= 64 ? e->valuedouble : 0;
    } else if (cJSON_IsNumber(world) && cJSON_IsNumber(nodes) && nodes->valuedouble >= 1 &&
               world->valuedouble >= 1 && world->valuedouble <= 1 << 20 &&
               nodes->valuedouble <= world->valuedouble) {
        *gpn = (world->valueint + nodes->valueint - 1) / nodes->valueint;
        *elem = compute_elem_bytes(lib);
    } else {
        *gpn = 0;
    }
    if (*gpn < 1 || !(*elem > 0)) {
        mp_usage("--calibrate: %s lacks the world, nodes and backend of the run", path);
        rc = MP_ERR_USAGE;
    }
    cJSON_Delete(j);
    return rc;
}

static struct mp_calib_point *new_point(struct mp_calib_set *set)
{
    if (set->n == set->cap) {
        int cap = set->cap ? set->cap * 2 : 32;
        struct mp_calib_point *p = realloc(set->pts, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        set->pts = p;
        set->cap = cap;
    }
    struct mp_calib_point *p = &set->pts[set->n++];
    memset(p, 0, sizeof *p);
    for (int c = 0; c < CAL_NCOLS; c++)
        p->meas[c] = NAN;
    return p;
}

static const char *cell(const struct mp_table *t, long row, const char *col)
{
    int c = mp_table_col(t, col);
    return c < 0 ? NULL : t->cells[row][c];
}

static double num(const struct mp_table *t, long row, const char *col)
{
    const char *s = cell(t, row, col);
    if (!s || !*s)
        return NAN;
    char *end;
    double v = strtod(s, &end);
    return *end ? NAN : v;
}

/* An integer cell, or -1 when it is empty, not a number or outside int (the checks that follow
 * refuse -1 wherever a size is read). */
static int int_cell(const struct mp_table *t, long row, const char *col)
{
    double v = num(t, row, col);
    return v >= -1 && v <= 2147483647.0 ? (int)v : -1;
}

/* Columns a file must have; the message names the first missing one. */
static int need(const struct mp_table *t, const char *const *cols)
{
    for (int i = 0; cols[i]; i++)
        if (mp_table_col(t, cols[i]) < 0) {
            mp_usage("--calibrate: %s has no column '%s'", t->path, cols[i]);
            return MP_ERR_USAGE;
        }
    return MP_OK;
}

/* Which optional columns a layer.csv has (older files lack them). */
struct layer_cols {
    int dispatch, dedup, limit, wdtype, cache;
};

/* A layer.csv row as the model replays it. */
struct layer_row {
    const char *dispatch, *dedup, *limit; /* its cells, or their defaults in older files */
    const struct mp_dispatch_mode *mode;
    double dispatch_arg;
    enum mp_dedup dedup_mode;
    long batch;
    int seq, overlap;
    uint64_t seed;
};

/* The dispatch, dedup and group-limit settings of row r of layer.csv t into *w: 1 when the model
 * is to fit the row, 0 when it is left out (replayed as a graph, fp8 weights, an expert cache, a
 * group limit without its group count), -1 after a message when its dispatch or dedup is not one
 * moeperf writes. */
static int layer_row_modes(const struct mp_table *t, long r, const struct layer_cols *has,
                           struct layer_row *w)
{
    /* the dispatch mode and the dedup mode are replayed (older files have neither: dynamic,
     * pair); a layer replayed as a graph (+graph) left out the host's launches, which the
     * model counts: not its to fit */
    w->dispatch = has->dispatch ? cell(t, r, MPC_dispatch) : "dynamic";
    w->dedup = has->dedup ? cell(t, r, MPC_dedup) : "pair";
    if (strstr(w->dispatch, "+graph"))
        return 0;
    /* fp8 weights on a measured backend run a dequantizing reference path (the cpu's), not
     * the fp8 GEMMs the model's flops_fp8 stands for: not its to fit either */
    if (has->wdtype && strcmp(cell(t, r, MPC_weight_dtype), "bf16") != 0)
        return 0;
    /* nor an expert cache's fetches, which the model does not time */
    if (has->cache && strcmp(cell(t, r, MPC_expert_cache), "off") != 0)
        return 0;
    if (mp_dispatch_parse(w->dispatch, &w->mode, &w->dispatch_arg) != MP_OK ||
        mp_dedup_parse(w->dedup, &w->dedup_mode) != MP_OK) {
        mp_usage("--calibrate: %s row %ld: dispatch '%s' or dedup '%s' is not one moeperf "
                 "writes", t->path, r + 2, w->dispatch, w->dedup);
        return -1;
    }
    /* the group limit is replayed (older files have none); "M" alone took its groups from
     * the run's node count, which the row does not hold: not replayed */
    w->limit = has->limit ? cell(t, r, MPC_group_limit) : "off";
    if (strcmp(w->limit, "off") != 0 && !strchr(w->limit, ':'))
        return 0;
    return 1;
}

/* Point p's model, layout and label from row r of layer.csv t of run `dir`, and the row's batch,
 * seq, seed and overlap into *w: MP_OK, or MP_ERR_USAGE after a message when the workload is
 * outside what moeperf's flags accept. */
static int read_workload(const char *dir, const struct mp_table *t, long r, struct layer_row *w,
                         struct mp_calib_point *p)
{
    p->tool = 0;
    struct mp_model *m = &p->model;
    snprintf(m->name, sizeof m->name, "%s", cell(t, r, MPC_model));
    m->hidden = int_cell(t, r, MPC_hidden);
    m->ffn = int_cell(t, r, MPC_ffn);
    m->experts = int_cell(t, r, MPC_experts);
    m->topk = int_cell(t, r, MPC_topk);
    m->shared = int_cell(t, r, MPC_shared);
    m->layers = 1;
    p->tp = int_cell(t, r, MPC_tp);
    p->ep = int_cell(t, r, MPC_ep);
    p->iters = CAL_DRAWS;
    w->batch = int_cell(t, r, MPC_batch);
    w->seq = int_cell(t, r, MPC_seq);
    double seedv = num(t, r, MPC_seed);
    w->seed = seedv >= 0 && seedv < 1.8e19 ? (uint64_t)seedv : 0;
    /* a pipelined point is replayed pipelined (older files have no overlap column) */
    w->overlap = mp_table_col(t, MPC_overlap) >= 0 ? int_cell(t, r, MPC_overlap) : 1;
    /* the ranges moeperf's own flags accept, and at most 2^26 token-expert pairs per point
     * (what one process can replay); anything else is not a run this tool wrote */
    long batch = w->batch;
    int seq = w->seq, overlap = w->overlap;
    if (m->hidden < 1 || m->hidden > (1 << 20) || m->ffn < 1 || m->ffn > (1 << 22) ||
        m->topk < 1 || m->experts < m->topk || m->experts > 65536 || m->shared < 0 ||
        m->shared > 64 || p->tp < 1 || p->tp > 1024 || p->ep < 1 || p->ep > 4096 ||
        batch < 1 || batch > (1 << 24) || seq < 1 || seq > (1 << 20) || m->ffn % p->tp ||
        overlap < 1 || overlap > 32 ||
        (double)batch * seq * m->topk > (double)(1 << 26)) {
        mp_usage("--calibrate: %s row %ld has an invalid workload", t->path, r + 2);
        return MP_ERR_USAGE;
    }
    int plain = w->mode == &mp_dispatch_dynamic;
    int pair = w->dedup_mode == MP_DEDUP_PAIR;
    snprintf(p->label, sizeof p->label, "%s: tp%dep%d %s %s%s%s%s%s batch %ld", dir, p->tp,
             p->ep, cell(t, r, MPC_routing), cell(t, r, MPC_placement), plain ? "" : " ",
             plain ? "" : w->dispatch, pair ? "" : " dedup:", pair ? "" : w->dedup, batch);
    return MP_OK;
}

/* Point p's routing (with the row's group limit), placement packed onto the run's nodes and the
 * traffic of its draws, as the run of row r of layer.csv t saw them: MP_OK, or the error of the
 * first that cannot be built, after its message. */
static int replay_point(const struct mp_calib_set *set, const struct mp_table *t, long r,
                        const struct layer_row *w, struct mp_calib_point *p)
{
    const struct mp_model *m = &p->model;
    int inactive;
    int rc = mp_routing_parse(cell(t, r, MPC_routing), m->experts, m->topk, w->seed,
                              &p->routing);
    if (rc == MP_OK)
        rc = mp_group_limit_parse(w->limit, m->experts, m->topk, 1, &p->routing.groups,
                                  &p->routing.group_pick, &inactive);
    if (rc == MP_OK)
        rc = mp_placement_build(cell(t, r, MPC_placement), m->experts, p->ep, p->routing.prob,
                                &p->placement);
    if (rc == MP_OK) /* the run's nodes, as its replica choice saw them */
        rc = mp_placement_pack_nodes(&p->placement, p->tp, set->base.gpus_per_node);
    if (rc == MP_OK) {
        struct mp_point pt = {.batch = w->batch, .seq = w->seq, .routing = &p->routing,
                              .placement = &p->placement, .iters = CAL_DRAWS,
                              .overlap = w->overlap, .dispatch = w->mode,
                              .dispatch_arg = w->dispatch_arg, .dedup = (int)w->dedup_mode,
                              .gemm = set->gemm};
        rc = mp_vtraffic_build(&set->base, m, p->tp, p->ep, w->seed, &pt, &p->traffic,
                               &p->ndraws);
    }
    return rc;
}

/* Point p's measured columns from row r of layer.csv t, NaN where a column is not a fit target. */
static void read_measured(const struct mp_table *t, long r, struct mp_calib_point *p)
{
    static const char *const meas_cols[] = {MPC_ffn_us, MPC_dispatch_us, MPC_combine_us,
                                            MPC_tp_reduce_us, MPC_layer_us};
    for (int c = 0; c < 5; c++)
        p->meas[CAL_LAYER_FFN + c] = num(t, r, meas_cols[c]);
    /* the dispatch is fitted with its count exchange, which a run since notify_us holds
     * apart (an older run's dispatch_us includes it), so runs of either age fit alike */
    if (mp_table_col(t, MPC_notify_us) >= 0)
        p->meas[CAL_LAYER_DISPATCH] += num(t, r, MPC_notify_us);
    /* combine_us holds the wait for the slowest rank, which layer_us already weighs: fitting
     * it too would count that one quantity twice */
    p->meas[CAL_LAYER_COMBINE] = NAN;
    if (p->tp == 1)
        p->meas[CAL_LAYER_TP] = NAN; /* nothing to reduce: not a fit target */
    if (p->ep == 1)
        p->meas[CAL_LAYER_DISPATCH] = p->meas[CAL_LAYER_COMBINE] = NAN;
}

/* The points of a layer.csv: each row the model is to fit, replayed as its run ran it. MP_OK, or
 * MP_ERR_USAGE or MP_ERR_RUNTIME after a message. */
static int load_layer(struct mp_calib_set *set, const char *dir, const struct mp_table *t)
{
    static const char *const cols[] = {MPC_model, MPC_hidden, MPC_ffn, MPC_experts, MPC_topk,
                                       MPC_shared, MPC_tp, MPC_ep, MPC_routing, MPC_placement,
                                       MPC_batch, MPC_seq, MPC_seed, MPC_ffn_us, MPC_dispatch_us,
                                       MPC_combine_us, MPC_tp_reduce_us, MPC_layer_us, NULL};
    int rc = need(t, cols);
    const struct layer_cols has = {.dispatch = mp_table_col(t, MPC_dispatch) >= 0,
                                   .dedup = mp_table_col(t, MPC_dedup) >= 0,
                                   .limit = mp_table_col(t, MPC_group_limit) >= 0,
                                   .wdtype = mp_table_col(t, MPC_weight_dtype) >= 0,
                                   .cache = mp_table_col(t, MPC_expert_cache) >= 0};
    for (long r = 0; r < t->nrows && rc == MP_OK; r++) {
        struct layer_row w;
        int use = layer_row_modes(t, r, &has, &w);
        if (use < 0)
            return MP_ERR_USAGE;
        if (!use)
            continue;
        struct mp_calib_point *p = new_point(set);
        if (!p) {
            mp_error("out of memory");
            return MP_ERR_RUNTIME;
        }
        if (read_workload(dir, t, r, &w, p) != MP_OK) {
            set->n--;
            return MP_ERR_USAGE;
        }
        rc = replay_point(set, t, r, &w, p);
        read_measured(t, r, p);
    }
    return rc;
}

static int load_a2a(struct mp_calib_set *set, const char *dir, const struct mp_table *t)
{
    static const char *const cols[] = {MPC_pattern, MPC_tp, MPC_ep, MPC_bytes_per_peer, MPC_time_us, NULL};
    int rc = need(t, cols);
    for (long r = 0; r < t->nrows && rc == MP_OK; r++) {
        if (strcmp(cell(t, r, MPC_pattern), "uniform") != 0)
            continue; /* the MoE pattern is covered by layer.csv's dispatch */
        struct mp_calib_point *p = new_point(set);
        if (!p)
            return MP_ERR_RUNTIME;
        p->tool = 1;
        p->tp = int_cell(t, r, MPC_tp);
        p->ep = int_cell(t, r, MPC_ep);
        p->bytes_per_peer = num(t, r, MPC_bytes_per_peer);
        p->meas[CAL_A2A_TIME] = num(t, r, MPC_time_us);
        snprintf(p->label, sizeof p->label, "%s: a2a tp%dep%d %.0f B/peer", dir, p->tp, p->ep,
                 p->bytes_per_peer);
        if (p->ep < 2)
            set->n--; /* no peers: nothing to fit */
    }
    return rc;
}

static int load_ffn(struct mp_calib_set *set, const char *dir, const struct mp_table *t)
{
    static const char *const cols[] = {MPC_flops, MPC_weight_bytes, MPC_active_experts, MPC_ffn_us,
                                       MPC_batch, NULL};
    int rc = need(t, cols);
    int has_dispatch = mp_table_col(t, MPC_dispatch) >= 0;
    int has_wdtype = mp_table_col(t, MPC_weight_dtype) >= 0;
    for (long r = 0; r < t->nrows && rc == MP_OK; r++) {
        /* the model launches the FFN's kernels from the host: rows replayed as a graph
         * (dynamic+graph) leave that cost out and are not its to fit */
        if (has_dispatch && strcmp(cell(t, r, MPC_dispatch), "dynamic") != 0)
            continue;
        /* nor fp8 weights, a dequantizing reference path on a measured backend */
        if (has_wdtype && strcmp(cell(t, r, MPC_weight_dtype), "bf16") != 0)
            continue;
        struct mp_calib_point *p = new_point(set);
        if (!p)
            return MP_ERR_RUNTIME;
        p->tool = 2;
        p->flops = num(t, r, MPC_flops);
        p->weight_bytes = num(t, r, MPC_weight_bytes);
        p->active = int_cell(t, r, MPC_active_experts);
        p->meas[CAL_FFN_FFN] = num(t, r, MPC_ffn_us);
        p->gemm = set->gemm;
        snprintf(p->label, sizeof p->label, "%s: ffn batch %.0f", dir, num(t, r, MPC_batch));
    }
    return rc;
}

int mp_calib_load(const char *const *dirs, int ndirs, const struct mp_cluster *base,
                  struct mp_calib_set *set)
{
    memset(set, 0, sizeof *set);
    set->base = *base;
    int rc = MP_OK, facts = 0;
    for (int d = 0; d < ndirs && rc == MP_OK; d++) {
        int gpn;
        double elem;
        rc = run_facts(dirs[d], &gpn, &elem, &set->gemm);
        if (rc != MP_OK)
            break;
        if (!facts) {
            set->base.gpus_per_node = gpn;
            set->base.elem_bytes = elem;
            facts = 1;
        } else if (gpn != set->base.gpus_per_node || elem != set->base.elem_bytes) {
            mp_warn("--calibrate: %s ran %d ranks per node with %g-byte elements, the first run "
                    "%d with %g: one profile cannot describe both", dirs[d], gpn, elem,
                    set->base.gpus_per_node, set->base.elem_bytes);
        }
        static const struct mp_csv_schema *const files[] = {&mp_schema_layer, &mp_schema_a2a,
                                                            &mp_schema_ffn};
        int found = 0;
        for (int f = 0; f < 3 && rc == MP_OK; f++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dirs[d], files[f]->file);
            FILE *probe = fopen(path, "r");
            if (!probe)
                continue;
            fclose(probe);
            found = 1;
            struct mp_table t;
            rc = mp_table_read(path, &t);
            if (rc != MP_OK)
                break;
            rc = f == 0 ? load_layer(set, dirs[d], &t) : f == 1 ? load_a2a(set, dirs[d], &t)
                                                                : load_ffn(set, dirs[d], &t);
            mp_table_free(&t);
        }
        if (rc == MP_OK && !found) {
            mp_usage("--calibrate: %s has none of layer.csv, a2a.csv, ffn.csv", dirs[d]);
            rc = MP_ERR_USAGE;
        }
    }
    if (rc == MP_OK && set->n == 0) {
        mp_usage("--calibrate: the run directories hold no points to fit");
        rc = MP_ERR_USAGE;
    }
    if (rc != MP_OK)
        mp_calib_free(set);
    return rc;
}

void mp_calib_free(struct mp_calib_set *set)
{
    for (int i = 0; i < set->n; i++) {
        struct mp_calib_point *p = &set->pts[i];
        if (p->tool != 0)
            continue;
        mp_vtraffic_free(p->traffic, p->ndraws);
        mp_placement_free(&p->placement);
        mp_routing_free(&p->routing);
    }
    free(set->pts);
    memset(set, 0, sizeof *set);
}

/* ---- prediction ---- */

/* Uniform all-to-all of `bpp` bytes per peer over an EP group of `ep` ranks. */
static double a2a_us(const struct mp_cluster *cl, int tp, int ep, double bpp)
{
    int gpn = cl->gpus_per_node, n_intra = 0, n_inter = 0;
    for (int q = 1; q < ep; q++) { /* rank 0's peers; every rank sees the same pattern */
        if (q * tp / gpn == 0)
            n_intra++;
        else
            n_inter++;
    }
    return mp_cost_exchange_us(cl, bpp * n_intra, bpp * n_inter, n_intra > 0, n_inter > 0,
                                n_inter);
}

void mp_calib_predict_all(const struct mp_calib_set *set, int i, const struct mp_cluster *cl,
                          double *pred)
{
    const struct mp_calib_point *p = &set->pts[i];
    for (int c = 0; c < CAL_NCOLS; c++)
        pred[c] = NAN;
    if (p->tool == 1) {
        pred[CAL_A2A_TIME] = a2a_us(cl, p->tp, p->ep, p->bytes_per_peer);
        return;
    }
    if (p->tool == 2) {
        pred[CAL_FFN_FFN] = mp_cost_ffn_us(cl, p->flops, p->weight_bytes, p->active, p->gemm);
        return;
    }
    int N = p->tp * p->ep;
    struct mp_rank_iter ranks_buf[256], *ranks = ranks_buf;
    if (N > 256 && !(ranks = malloc((size_t)N * sizeof *ranks)))
        return;
    double v[CAL_LAYER_LAYER + 1][CAL_DRAWS]; /* each layer column's value per draw */
    for (int d = 0; d < p->ndraws; d++) {
        struct mp_iter_metrics m;
        mp_vtraffic_time(cl, &p->model, &p->traffic[d], ranks);
        mp_metrics_iter(ranks, N, p->tp, &m);
        v[CAL_LAYER_FFN][d] = m.ffn_us;
        v[CAL_LAYER_DISPATCH][d] = m.notify_us + m.dispatch_us;
        v[CAL_LAYER_COMBINE][d] = m.combine_us;
        v[CAL_LAYER_TP][d] = m.tp_reduce_us;
        v[CAL_LAYER_LAYER][d] = m.layer_us;
    }
    if (ranks != ranks_buf)
        free(ranks);
    for (int c = CAL_LAYER_FFN; c <= CAL_LAYER_LAYER; c++) /* nearest rank, as the summaries */
        pred[c] = mp_percentile_select(v[c], p->ndraws, 50);
}

double mp_calib_predict(const struct mp_calib_set *set, int i, const struct mp_cluster *cl, int col)
{
    double pred[CAL_NCOLS];
    mp_calib_predict_all(set, i, cl, pred);
    return pred[col];
}

void mp_calib_errors(const struct mp_calib_set *set, const struct mp_cluster *cl,
                     struct mp_calib_errors *err)
{
    double *e = malloc((size_t)(set->n > 0 ? set->n : 1) * sizeof *e);
    double *pred = malloc((size_t)(set->n > 0 ? set->n : 1) * CAL_NCOLS * sizeof *pred);
    for (int i = 0; pred && i < set->n; i++)
        mp_calib_predict_all(set, i, cl, pred + (size_t)i * CAL_NCOLS);
    for (int c = 0; c < CAL_NCOLS; c++) {
        int n = 0;
        for (int i = 0; e && pred && i < set->n; i++) {
            double m = set->pts[i].meas[c];
            if (!(m > 0))
                continue;
            e[n++] = fabs(pred[(size_t)i * CAL_NCOLS + c] - m) / m;
        }
        err->n[c] = n;
        err->median[c] = n ? mp_percentile_select(e, n, 50) : NAN;
        err->worst[c] = n ? e[n - 1] : NAN;
    }
    free(pred);
    free(e);
}

/* ---- fitting ---- */

#define MAXP 16

struct fit_ctx {
    const struct mp_calib_set *set;
    struct mp_cluster cl;
    int idx[MAXP]; /* mp_cluster_params index of each free parameter */
    int k;
    double theta0[MAXP]; /* the starting point, which a weak prior pulls toward */
};

/* Weight of the prior Σ (θ − θ₀)² on the log parameters: small next to the data's residuals, it
 * only decides parameters the runs barely constrain (a FLOP/s peak in weight-bound runs), which
 * would otherwise wander and ruin extrapolation. */
#define PRIOR 1e-5

/* Latencies, launch and congestion may be 0: their logarithm is taken of x + FLOOR. */
#define FLOOR 1e-6

static int is_rate(int i) { return strstr(mp_cluster_params[i].key, "_eff") != NULL; }

static void apply(struct fit_ctx *f, const double *theta)
{
    for (int j = 0; j < f->k; j++) {
        double x = exp(theta[j]);
        double v = is_rate(f->idx[j]) ? x : fmax(0, x - FLOOR);
        if (!strcmp(mp_cluster_params[f->idx[j]].key, "ffn_blend")) /* a share: at most 1 */
            v = fmin(1, v);
        *mp_cluster_param_ptr(&f->cl, f->idx[j]) = v;
    }
}

static double objective(struct fit_ctx *f, const double *theta)
{
    apply(f, theta);
    double s = 0;
    for (int i = 0; i < f->set->n; i++) {
        double pred[CAL_NCOLS];
        mp_calib_predict_all(f->set, i, &f->cl, pred);
        for (int c = 0; c < CAL_NCOLS; c++) {
            double m = f->set->pts[i].meas[c];
            if (!(m > 0))
                continue;
            double r = pred[c] > 0 ? log(pred[c] / m) : 50;
            s += r * r;
        }
    }
    for (int j = 0; j < f->k; j++)
        s += PRIOR * (theta[j] - f->theta0[j]) * (theta[j] - f->theta0[j]);
    return s;
}

/* Nelder & Mead (1965) downhill simplex with the standard coefficients (reflection 1, expansion 2,
 * contraction 1/2, shrink 1/2), `evals` objective evaluations at most, starting from x with steps
 * `step`. x returns the best vertex; the return value is its objective. */
static double nelder_mead(struct fit_ctx *f, double *x, double step, int evals)
{
    int k = f->k;
    double s[MAXP + 1][MAXP], fs[MAXP + 1], c[MAXP], xr[MAXP], xe[MAXP];
    for (int v = 0; v <= k; v++) {
        memcpy(s[v], x, sizeof(double) * k);
        if (v)
            s[v][v - 1] += step;
        fs[v] = objective(f, s[v]);
    }
    int used = k + 1;
    while (used < evals) {
        /* order: best first */
        for (int a = 0; a <= k; a++)
            for (int b = a + 1; b <= k; b++)
                if (fs[b] < fs[a]) {
                    double t = fs[a];
                    fs[a] = fs[b];
                    fs[b] = t;
                    for (int j = 0; j < k; j++) {
                        t = s[a][j];
                        s[a][j] = s[b][j];
                        s[b][j] = t;
                    }
                }
        if (fs[k] - fs[0] <= 1e-14 * (fabs(fs[0]) + 1e-300))
            break;
        for (int j = 0; j < k; j++) {
            c[j] = 0;
            for (int v = 0; v < k; v++)
                c[j] += s[v][j] / k;
        }
        for (int j = 0; j < k; j++)
            xr[j] = c[j] + (c[j] - s[k][j]);
        double fr = objective(f, xr);
        used++;
        if (fr < fs[0]) {
            for (int j = 0; j < k; j++)
                xe[j] = c[j] + 2 * (c[j] - s[k][j]);
            double fe = objective(f, xe);
            used++;
            if (fe < fr) {
                memcpy(s[k], xe, sizeof(double) * k);
                fs[k] = fe;
            } else {
                memcpy(s[k], xr, sizeof(double) * k);
                fs[k] = fr;
            }
        } else if (fr < fs[k - 1]) {
            memcpy(s[k], xr, sizeof(double) * k);
            fs[k] = fr;
        } else {
            int outside = fr < fs[k];
            for (int j = 0; j < k; j++)
                xe[j] = outside ? c[j] + 0.5 * (xr[j] - c[j]) : c[j] + 0.5 * (s[k][j] - c[j]);
            double fc = objective(f, xe);
            used++;
            if (fc < (outside ? fr : fs[k])) {
                memcpy(s[k], xe, sizeof(double) * k);
                fs[k] = fc;
            } else { /* shrink towards the best */
                for (int v = 1; v <= k; v++) {
                    for (int j = 0; j < k; j++)
                        s[v][j] = s[0][j] + 0.5 * (s[v][j] - s[0][j]);
                    fs[v] = objective(f, s[v]);
                    used++;
                }
            }
        }
    }
    int best = 0;
    for (int v = 1; v <= k; v++)
        if (fs[v] < fs[best])
            best = v;
    memcpy(x, s[best], sizeof(double) * k);
    return fs[best];
}

int mp_calib_fit(const struct mp_calib_set *set, struct mp_cluster *out, int *frozen,
                 double *objective_out)
{
    if (set->n == 0) {
        mp_usage("--calibrate: nothing to fit");
        return MP_ERR_USAGE;
    }
    struct fit_ctx f = {.set = set, .cl = set->base};
    double theta[MAXP] = {0};
    /* which behaviour parameters the data can see: vary each by a factor of 10 (with no free
     * parameter yet, so the objective is the base profile's) */
    int idx[MAXP] = {0}, k = 0;
    double f0 = objective(&f, theta);
    for (int i = 0; i < mp_cluster_nparams; i++) {
        frozen[i] = 1;
        if (!mp_cluster_params[i].fit)
            continue;
        double *v = mp_cluster_param_ptr(&f.cl, i), keep = *v;
        *v = is_rate(i) ? keep / 10 : keep * 10 + 1;
        double f1 = objective(&f, theta);
        *v = keep;
        if (fabs(f1 - f0) > 1e-12 * (1 + f0) && k < MAXP) {
            frozen[i] = 0;
            idx[k++] = i;
        }
    }
    memcpy(f.idx, idx, sizeof idx);
    f.k = k;
    for (int j = 0; j < f.k; j++) {
        double *pv = mp_cluster_param_ptr(&f.cl, f.idx[j]);
        /* congestion or a latency at 0 starts from its scale instead: a simplex on
         * log(x + FLOOR) that starts at log(FLOOR) takes many steps to leave it (the GPU presets
         * have congestion 0); ffn_blend at 0 stays there, the plain roofline of a profile that
         * never set it (cpu-host) */
        const char *key = mp_cluster_params[f.idx[j]].key;
        if (!is_rate(f.idx[j]) && *pv <= 0 && strcmp(key, "ffn_blend") != 0)
            *pv = strcmp(mp_cluster_params[f.idx[j]].unit, "µs") ? 0.1 : 1.0;
        double v = *pv;
        theta[j] = f.theta0[j] = is_rate(f.idx[j]) ? log(v) : log(v + FLOOR);
    }
    double best = objective(&f, theta);
    /* restart from the best point with a fresh simplex until a round gains nothing */
    for (int round = 0; round < 12 && f.k > 0; round++) {
        double step = round == 0 ? 1.0 : round < 4 ? 0.3 : 0.05;
        double got = nelder_mead(&f, theta, step, 400 * (f.k + 1));
        int stalled = !(got < best * (1 - 1e-9)) && round >= 4;
        best = fmin(best, got);
        if (stalled)
            break;
    }
    apply(&f, theta);
    /* fold efficiencies above 1 into the peaks (the profile keeps efficiencies in (0, 1]) */
    static const struct {
        const char *eff;
        size_t peak;
    } fold[] = {{"flops_eff", offsetof(struct mp_cluster, flops)},
                {"flops_fp8_eff", offsetof(struct mp_cluster, flops_fp8)},
                {"hbm_eff", offsetof(struct mp_cluster, hbm_bw)},
                {"intra_eff", offsetof(struct mp_cluster, intra_bw)},
                {"inter_eff", offsetof(struct mp_cluster, inter_bw)}};
    for (size_t q = 0; q < sizeof fold / sizeof fold[0]; q++)
        for (int i = 0; i < mp_cluster_nparams; i++)
            if (!strcmp(mp_cluster_params[i].key, fold[q].eff)) {
                double *eff = mp_cluster_param_ptr(&f.cl, i);
                double *peak = (double *)((char *)&f.cl + fold[q].peak);
                if (*eff > 1) {
                    *peak *= *eff;
                    *eff = 1;
                }
            }
    *out = f.cl;
    if (objective_out)
        *objective_out = best;
    return MP_OK;
}
