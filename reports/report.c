/* report.c - loads run directories for moeperf-report, groups their rows into curves and computes
 * the findings (batch cap, knee, bubble, effect of a change) as pure functions of the numbers. */
#include "report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"
#include "files.h"
#include "plan_keys.h"
#include "schema.h"

const char *const rp_key_names[RP_NKEY] = {
    MPC_source, MPC_backend, MPC_comm, MPC_model, MPC_hidden, MPC_ffn, MPC_experts, MPC_topk,
    MPC_shared, MPC_layout, MPC_routing, MPC_group_limit, MPC_placement, MPC_seq, MPC_seed,
    MPC_overlap, MPC_dispatch, MPC_dedup, MPC_dispatch_dtype, MPC_weight_dtype, MPC_expert_cache,
    MPC_flush_cache, MPC_context, MPC_micro_batches, MPC_phase, MPC_chunk,
};
const char *const rp_part_names[RP_NPART] = {MPC_attn_us, MPC_dense_us, MPC_head_us, MPC_misc_us,
                                             MPC_host_us, MPC_moe_us, MPC_overlap_us};

/* The columns the report reads from each file; a file without one of them is refused. */
static const char *const layer_need[] = {
    MPC_source, MPC_layout, MPC_routing, MPC_placement, MPC_batch, MPC_layer_us, MPC_layer_p99_us, MPC_ffn_us,
    MPC_comm_us, MPC_comm_comp_ratio, MPC_bubble_ratio, NULL,
};
static const char *const a2a_need[] = {
    MPC_source, MPC_pattern, MPC_layout, MPC_routing, MPC_placement, MPC_bytes_per_peer, MPC_bytes_per_rank,
    MPC_time_us, MPC_time_p99_us, MPC_busbw_GBps, NULL,
};
static const char *const plan_need[] = {
    MPC_routing, MPC_tp, MPC_ep, MPC_placement, MPC_batch, MPC_overlap, MPC_dedup,
    MPC_token_p99_ms, MPC_dp, MPC_gpus, MPC_meets_slo, MPC_mem_gb_per_gpu, MPC_kv_gb_per_gpu,
    MPC_fits, MPC_over, NULL,
};
static const char *const ffn_need[] = {
    MPC_source, MPC_layout, MPC_routing, MPC_placement, MPC_batch, MPC_rows, MPC_ffn_us, MPC_ffn_p99_us,
    MPC_achieved_GFLOPs, NULL,
};

/* ---- run directories ---- */

/* Read dir/name into t when the file exists, checking the columns in need[]. */
static int load_table(const char *dir, const char *name, const char *const *need,
                      struct mp_table *t, int *found)
{
    memset(t, 0, sizeof *t);
    char *path = mp_path_join(dir, name);
    if (!path) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    struct stat st;
    int rc = MP_OK;
    if (stat(path, &st) != 0) {
        free(path);
        return MP_OK;
    }
    *found = 1;
    rc = mp_table_read(path, t);
    if (rc == MP_OK && !t->cols) {
        mp_usage("%s: empty file; expected a header line with the columns of docs/CSV.md", path);
        rc = MP_ERR_USAGE;
    }
    for (int i = 0; rc == MP_OK && need[i]; i++)
        if (mp_table_col(t, need[i]) < 0) {
            mp_usage("%s: no column \"%s\" (moeperf-report reads it; see docs/CSV.md)", path,
                     need[i]);
            rc = MP_ERR_USAGE;
        }
    if (rc != MP_OK)
        mp_table_free(t);
    free(path);
    return rc;
}

/* dir/name parsed into *out when the file exists (NULL when it does not): MP_OK, MP_ERR_USAGE
 * (unreadable, or not a JSON object) or MP_ERR_RUNTIME. */
static int load_json(const char *dir, const char *name, cJSON **out)
{
    struct stat st;
    int rc = MP_OK;
    char *path = mp_path_join(dir, name);
    if (!path) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    if (stat(path, &st) == 0) {
        char *text = mp_read_file(path, NULL);
        if (!text) {
            mp_usage("%s: %s", path, strerror(errno));
            rc = MP_ERR_USAGE;
        } else {
            *out = cJSON_Parse(text);
            if (!*out || !cJSON_IsObject(*out)) {
                mp_usage("%s: not a JSON object", path);
                rc = MP_ERR_USAGE;
            }
            free(text);
        }
    }
    free(path);
    return rc;
}

static const char *const rank_samples_need[] = {MPC_iter, MPC_rank, MPC_layer_us, MPC_rows, NULL};
static const char *const ranks_need[] = {MPC_rank, NULL};

/* The points of run->rank_samples: runs of rows with the same key cells (those before `iter`). */
static int index_rank_points(struct rp_run *run)
{
    const struct mp_table *t = &run->rank_samples;
    run->rank_key = mp_table_col(t, MPC_iter);
    if (!t->cols || run->rank_key < 1 || t->nrows == 0)
        return MP_OK;
    run->rank_pt_first = malloc((size_t)t->nrows * sizeof *run->rank_pt_first);
    run->rank_pt_count = malloc((size_t)t->nrows * sizeof *run->rank_pt_count);
    if (!run->rank_pt_first || !run->rank_pt_count) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (long i = 0; i < t->nrows; i++) {
        int same = i > 0;
        for (int c = 0; same && c < run->rank_key; c++)
            same = !strcmp(t->cells[i][c], t->cells[i - 1][c]);
        if (!same) {
            run->rank_pt_first[run->n_rank_pts] = i;
            run->rank_pt_count[run->n_rank_pts++] = 0;
        }
        run->rank_pt_count[run->n_rank_pts - 1]++;
    }
    return MP_OK;
}

int rp_run_load(const char *dir, struct rp_run *run)
{
    memset(run, 0, sizeof *run);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        mp_usage("%s: no such run directory", dir);
        return MP_ERR_USAGE;
    }
    run->dir = strdup(dir);
    if (!run->dir) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    int rc = load_json(dir, "run.json", &run->json), found = 0;
    if (rc == MP_OK)
        rc = load_json(dir, MP_PLAN_JSON_FILE, &run->plan_json);
    if (rc == MP_OK && run->plan_json) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, MP_PLAN_JSON_FILE);
        rc = mp_plan_json_check(run->plan_json, path);
    }
    if (rc == MP_OK)
        rc = load_table(dir, mp_schema_layer.file, layer_need, &run->layer, &found);
    if (rc == MP_OK)
        rc = load_table(dir, mp_schema_a2a.file, a2a_need, &run->a2a, &found);
    if (rc == MP_OK)
        rc = load_table(dir, mp_schema_ffn.file, ffn_need, &run->ffn, &found);
    if (rc == MP_OK)
        rc = load_table(dir, mp_schema_plan.file, plan_need, &run->plan, &found);
    if (rc == MP_OK && !found) {
        mp_usage("%s: no layer.csv, a2a.csv, ffn.csv or plan.csv (not a moeperf run directory)",
                 dir);
        rc = MP_ERR_USAGE;
    }
    int extra = 0; /* the per-rank files: optional, read beside layer.csv */
    if (rc == MP_OK && run->layer.cols)
        rc = load_table(dir, mp_schema_layer_rank_samples.file, rank_samples_need,
                        &run->rank_samples, &extra);
    if (rc == MP_OK && run->layer.cols)
        rc = load_table(dir, mp_schema_layer_ranks.file, ranks_need, &run->ranks, &extra);
    if (rc == MP_OK)
        rc = index_rank_points(run);
    if (rc != MP_OK)
        rp_run_free(run);
    return rc;
}

void rp_run_free(struct rp_run *run)
{
    free(run->dir);
    cJSON_Delete(run->json);
    cJSON_Delete(run->plan_json);
    mp_table_free(&run->layer);
    mp_table_free(&run->a2a);
    mp_table_free(&run->ffn);
    mp_table_free(&run->plan);
    mp_table_free(&run->rank_samples);
    mp_table_free(&run->ranks);
    free(run->rank_pt_first);
    free(run->rank_pt_count);
    memset(run, 0, sizeof *run);
}

/* ---- curves ---- */

/* A cell as a number: NAN when empty or not a number. */
static double cell_num(const struct mp_table *t, long row, int col)
{
    if (col < 0)
        return NAN;
    const char *s = t->cells[row][col];
    char *end;
    if (!s || !*s)
        return NAN;
    double v = strtod(s, &end);
    return *end == '\0' ? v : NAN;
}

static int cmp_point(const void *a, const void *b)
{
    double x = ((const struct rp_point *)a)->batch, y = ((const struct rp_point *)b)->batch;
    return (x > y) - (x < y);
}

void rp_series_free(struct rp_series *s, int n)
{
    for (int i = 0; s && i < n; i++) {
        for (int k = 0; k < RP_NKEY; k++)
            free(s[i].key[k]);
        free(s[i].label);
        free(s[i].pt);
    }
    free(s);
}

static int same_key(const struct rp_series *a, const struct rp_series *b)
{
    for (int k = 0; k < RP_NKEY; k++)
        if (strcmp(a->key[k], b->key[k]) != 0)
            return 0;
    return 1;
}

/* Append `text` to the heap string *s. Returns 0, or -1 out of memory. */
static int append(char **s, const char *text)
{
    size_t a = *s ? strlen(*s) : 0, b = strlen(text);
    char *n = realloc(*s, a + b + 1);
    if (!n)
        return -1;
    memcpy(n + a, text, b + 1);
    *s = n;
    return 0;
}

/* Labels (docs/plots.md, "Curve labels"), as plots/render titles the layer figures' curves: the
 * values of the keys that differ between the series, in figures.csv's order for layer.csv (layout,
 * routing and placement bare, then backend … flush_cache as name=value; backend and comm only where
 * they differ within one source; the layout alone when none differs), the run directory's name
 * where the same workload comes from two runs, and the source in parentheses. */
static int label_series(struct rp_series *s, int n)
{
    static const int order[] = {RP_K_LAYOUT,  RP_K_ROUTING, RP_K_PLACEMENT,  RP_K_BACKEND,
                                RP_K_COMM,    RP_K_MODEL,   RP_K_HIDDEN,     RP_K_FFN,
                                RP_K_EXPERTS, RP_K_TOPK,    RP_K_SHARED,     RP_K_SEQ,
                                RP_K_SEED,    RP_K_GROUP_LIMIT, RP_K_OVERLAP, RP_K_DISPATCH,
                                RP_K_DEDUP,   RP_K_DTYPE,   RP_K_WDTYPE,     RP_K_CACHE,
                                RP_K_FLUSH,   RP_K_CONTEXT, RP_K_MICRO,      RP_K_PHASE,
                                RP_K_CHUNK};
    enum { NBARE = 3, NORDER = sizeof order / sizeof order[0] };
    int show[NORDER], nshow = 0;
    for (int e = 0; e < NORDER; e++) {
        /* backend and comm tell measured and modelled runs apart, as the source does: they count
         * where they differ between curves of one source */
        int by_source = order[e] == RP_K_BACKEND || order[e] == RP_K_COMM, differs = 0;
        for (int i = 0; i < n && !differs; i++)
            for (int j = i + 1; j < n && !differs; j++)
                differs = strcmp(s[i].key[order[e]], s[j].key[order[e]]) != 0 &&
                          (!by_source || !strcmp(s[i].key[RP_K_SOURCE], s[j].key[RP_K_SOURCE]));
        if (differs)
            show[nshow++] = e;
    }
    if (nshow == 0)
        show[nshow++] = 0;
    char buf[600];
    for (int i = 0; i < n; i++) {
        int bad = 0;
        for (int k = 0; k < nshow; k++) {
            int e = show[k];
            const char *v = *s[i].key[order[e]] ? s[i].key[order[e]] : "-";
            if (e < NBARE)
                snprintf(buf, sizeof buf, "%s%.500s", k ? " " : "", v);
            else
                snprintf(buf, sizeof buf, "%s%s=%.500s", k ? " " : "", rp_key_names[order[e]], v);
            bad |= append(&s[i].label, buf);
        }
        for (int j = 0; j < n; j++)
            if (j != i && same_key(&s[i], &s[j])) {
                const char *base = strrchr(s[i].run->dir, '/');
                base = base && base[1] ? base + 1 : s[i].run->dir;
                snprintf(buf, sizeof buf, " [%.500s]", base);
                bad |= append(&s[i].label, buf);
                break;
            }
        snprintf(buf, sizeof buf, " (%.500s)", s[i].key[RP_K_SOURCE]);
        bad |= append(&s[i].label, buf);
        if (bad)
            return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* Key cell k of a row (kc: the key columns' indices, -1 where absent): empty where the file lacks
 * the column, except group_limit and expert_cache, which files written before those flags lack:
 * `off`, and dispatch_dtype and weight_dtype, likewise: `bf16`. */
static const char *key_cell(const struct mp_table *t, long row, const int *kc, int k)
{
    if (kc[k] >= 0)
        return t->cells[row][kc[k]];
    return k == RP_K_GROUP_LIMIT || k == RP_K_CACHE ? "off"
           : k == RP_K_DTYPE || k == RP_K_WDTYPE    ? "bf16"
           : k == RP_K_CONTEXT                      ? "4096"
           : k == RP_K_MICRO                        ? "1"
           : k == RP_K_PHASE                        ? "decode"
           : k == RP_K_CHUNK                        ? "0"
                                                    : "";
}

int rp_layer_series(const struct rp_run *runs, int nruns, struct rp_series **out, int *nout)
{
    struct rp_series *s = NULL;
    int n = 0, cap = 0;
    *out = NULL;
    *nout = 0;
    for (int r = 0; r < nruns; r++) {
        const struct mp_table *t = &runs[r].layer;
        if (!t->cols)
            continue;
        int kc[RP_NKEY];
        for (int k = 0; k < RP_NKEY; k++)
            kc[k] = mp_table_col(t, rp_key_names[k]);
        int c_batch = mp_table_col(t, MPC_batch), c_layer = mp_table_col(t, MPC_layer_us),
            c_lp99 = mp_table_col(t, MPC_layer_p99_us), c_ffn = mp_table_col(t, MPC_ffn_us),
            c_fp99 = mp_table_col(t, MPC_ffn_p99_us), c_comm = mp_table_col(t, MPC_comm_us),
            c_cp99 = mp_table_col(t, MPC_comm_p99_us), c_ratio = mp_table_col(t, MPC_comm_comp_ratio),
            c_bub = mp_table_col(t, MPC_bubble_ratio), c_imb = mp_table_col(t, MPC_load_imbalance),
            c_hit = mp_table_col(t, MPC_local_hit_rate), c_lo = mp_table_col(t, MPC_layer_ci_lo_us),
            c_hi = mp_table_col(t, MPC_layer_ci_hi_us), c_drop = mp_table_col(t, MPC_drop_rate),
            c_inter = mp_table_col(t, MPC_bytes_internode), c_step = mp_table_col(t, MPC_step_us),
            c_sp99 = mp_table_col(t, MPC_step_p99_us), c_tok = mp_table_col(t, MPC_tok_s_gpu),
            c_spread = mp_table_col(t, MPC_spread);
        int c_part[RP_NPART];
        for (int k = 0; k < RP_NPART; k++)
            c_part[k] = mp_table_col(t, rp_part_names[k]);
        for (long row = 0; row < t->nrows; row++) {
            struct rp_point p = {
                .batch = cell_num(t, row, c_batch), .layer_us = cell_num(t, row, c_layer),
                .layer_p99_us = cell_num(t, row, c_lp99), .ffn_us = cell_num(t, row, c_ffn),
                .ffn_p99_us = cell_num(t, row, c_fp99), .comm_us = cell_num(t, row, c_comm),
                .comm_p99_us = cell_num(t, row, c_cp99), .ratio = cell_num(t, row, c_ratio),
                .bubble = cell_num(t, row, c_bub), .imbalance = cell_num(t, row, c_imb),
                .hit = cell_num(t, row, c_hit), .layer_ci_lo_us = cell_num(t, row, c_lo),
                .layer_ci_hi_us = cell_num(t, row, c_hi), .drop_rate = cell_num(t, row, c_drop),
                .bytes_internode = cell_num(t, row, c_inter), .step_us = cell_num(t, row, c_step),
                .step_p99_us = cell_num(t, row, c_sp99), .tok_s_gpu = cell_num(t, row, c_tok),
                .spread = cell_num(t, row, c_spread),
            };
            for (int k = 0; k < RP_NPART; k++)
                p.part_us[k] = cell_num(t, row, c_part[k]);
            if (isnan(p.batch))
                continue;
            int found = -1;
            for (int i = 0; i < n && found < 0; i++) {
                if (s[i].run != &runs[r])
                    continue;
                int eq = 1;
                for (int k = 0; k < RP_NKEY && eq; k++)
                    eq = strcmp(s[i].key[k], key_cell(t, row, kc, k)) == 0;
                if (eq)
                    found = i;
            }
            if (found < 0) {
                if (n == cap) {
                    int nc = cap ? cap * 2 : 8;
                    struct rp_series *ns = realloc(s, (size_t)nc * sizeof *ns);
                    if (!ns)
                        goto oom;
                    s = ns;
                    cap = nc;
                }
                memset(&s[n], 0, sizeof s[n]);
                s[n].run = &runs[r];
                n++;
                for (int k = 0; k < RP_NKEY; k++)
                    if (!(s[n - 1].key[k] = strdup(key_cell(t, row, kc, k))))
                        goto oom;
                found = n - 1;
            }
            struct rp_series *c = &s[found];
            struct rp_point *np = realloc(c->pt, (size_t)(c->n + 1) * sizeof *np);
            if (!np)
                goto oom;
            c->pt = np;
            c->pt[c->n++] = p;
        }
    }
    for (int i = 0; i < n; i++)
        qsort(s[i].pt, (size_t)s[i].n, sizeof *s[i].pt, cmp_point);
    if (label_series(s, n) != MP_OK)
        goto oom;
    *out = s;
    *nout = n;
    return MP_OK;
oom:
    rp_series_free(s, n);
    mp_error("out of memory");
    return MP_ERR_RUNTIME;
}

/* ---- findings ---- */

struct rp_cap rp_batch_cap(const double *batch, const double *ratio, int n)
{
    struct rp_cap c = {.kind = RP_CAP_NO_DATA, .cap = NAN, .cap_ratio = NAN, .next = NAN,
                       .next_ratio = NAN, .cross = NAN, .start = NAN, .max_compute = NAN,
                       .max_ratio = NAN, .max_ratio_at = NAN};
    int started = 0, last_ok = -1, have = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(ratio[i]) || isnan(batch[i]))
            continue;
        if (!have || ratio[i] > c.max_ratio) {
            c.max_ratio = ratio[i];
            c.max_ratio_at = batch[i];
        }
        have = 1;
    }
    if (!have)
        return c;
    for (int i = 0; i < n; i++) {
        if (isnan(ratio[i]) || isnan(batch[i]))
            continue;
        if (!started) {
            if (ratio[i] > 1) {
                c.leading++;
                continue;
            }
            started = 1;
            c.start = batch[i];
        }
        if (ratio[i] <= 1) {
            last_ok = i;
            if (isnan(c.max_compute) || ratio[i] > c.max_compute)
                c.max_compute = ratio[i];
            continue;
        }
        /* the first point above 1 after a compute-bound stretch */
        c.kind = RP_CAP_FOUND;
        c.cap = batch[last_ok];
        c.cap_ratio = ratio[last_ok];
        c.next = batch[i];
        c.next_ratio = ratio[i];
        double x0 = log2(c.cap), x1 = log2(c.next);
        double t = (1.0 - c.cap_ratio) / (c.next_ratio - c.cap_ratio);
        c.cross = exp2(x0 + t * (x1 - x0));
        return c;
    }
    if (!started) {
        c.kind = RP_CAP_NETWORK;
        return c;
    }
    c.kind = RP_CAP_NOT_REACHED;
    c.cap = batch[last_ok];
    c.cap_ratio = ratio[last_ok];
    return c;
}

static int knee_valid(const double *batch, const double *lat, int i)
{
    return batch[i] > 0 && lat[i] > 0 && isfinite(batch[i]) && isfinite(lat[i]);
}

struct rp_knee rp_knee(const double *batch, const double *lat, int n, double threshold)
{
    struct rp_knee k = {.found = 0, .batch = NAN, .to = NAN, .slope = NAN, .max_slope = NAN,
                        .max_from = NAN, .max_to = NAN};
    for (int i = 0; i < n; i++) {
        if (!knee_valid(batch, lat, i))
            continue;
        int j = -1;
        for (int m = i + 1; m < n; m++) {
            if (!knee_valid(batch, lat, m) || batch[m] <= batch[i])
                continue;
            j = m;
            if (batch[m] >= 2 * batch[i])
                break;
        }
        if (j < 0)
            continue;
        double slope = log(lat[j] / lat[i]) / log(batch[j] / batch[i]);
        if (isnan(k.max_slope) || slope > k.max_slope) {
            k.max_slope = slope;
            k.max_from = batch[i];
            k.max_to = batch[j];
        }
        if (!k.found && slope > threshold) {
            k.found = 1;
            k.batch = batch[i];
            k.to = batch[j];
            k.slope = slope;
        }
    }
    return k;
}

struct rp_bubble rp_bubble_summary(const double *batch, const double *bubble, int n)
{
    struct rp_bubble b = {NAN, NAN, NAN, NAN};
    for (int i = 0; i < n; i++) {
        if (isnan(bubble[i]) || isnan(batch[i]))
            continue;
        if (isnan(b.max) || bubble[i] > b.max) {
            b.max = bubble[i];
            b.max_at = batch[i];
        }
        if (isnan(b.last_at) || batch[i] >= b.last_at) {
            b.last = bubble[i];
            b.last_at = batch[i];
        }
    }
    return b;
}

struct rp_effect rp_effect(const struct rp_series *base, const struct rp_series *alt)
{
    struct rp_effect e = {0, 0, 0, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    double sumlog = 0;
    for (int i = 0; i < base->n; i++) {
        const struct rp_point *b = &base->pt[i];
        for (int j = 0; j < alt->n; j++) {
            const struct rp_point *a = &alt->pt[j];
            if (a->batch != b->batch || !(a->layer_us > 0) || !(b->layer_us > 0))
                continue;
            double r = a->layer_us / b->layer_us;
            sumlog += log(r);
            if (a->layer_ci_hi_us < b->layer_ci_lo_us)
                e.faster++;
            else if (a->layer_ci_lo_us > b->layer_ci_hi_us)
                e.slower++;
            for (int k = 0; k < 2; k++) { /* the larger spread of either point */
                double sp = k ? a->spread : b->spread;
                if (!isnan(sp) && (isnan(e.spread) || sp > e.spread))
                    e.spread = sp;
            }
            e.min_ratio = e.n == 0 || r < e.min_ratio ? r : e.min_ratio;
            e.max_ratio = e.n == 0 || r > e.max_ratio ? r : e.max_ratio;
            if (e.n == 0 || b->batch > e.at) {
                e.at = b->batch;
                e.ratio_at = r;
                e.bubble_base = b->bubble;
                e.bubble_alt = a->bubble;
                e.imbalance_base = b->imbalance;
                e.imbalance_alt = a->imbalance;
            }
            e.n++;
            break;
        }
    }
    if (e.n)
        e.geomean = exp(sumlog / e.n);
    return e;
}

int rp_differ_only_in(const struct rp_series *a, const struct rp_series *b, int k, int ignore_env)
{
    if (strcmp(a->key[k], b->key[k]) == 0)
        return 0;
    for (int m = 0; m < RP_NKEY; m++) {
        if (m == k)
            continue;
        if (ignore_env && (m == RP_K_SOURCE || m == RP_K_BACKEND || m == RP_K_COMM ||
                           m == RP_K_SEED || m == RP_K_FLUSH))
            continue;
        if (strcmp(a->key[m], b->key[m]) != 0)
            return 0;
    }
    return 1;
}

int rp_projects(const struct rp_series *measured, const struct rp_series *model)
{
    return strcmp(measured->key[RP_K_SOURCE], "measured") == 0 &&
           strcmp(model->key[RP_K_SOURCE], "model") == 0 &&
           rp_differ_only_in(measured, model, RP_K_SOURCE, 1);
}

int rp_placement_replicates(const char *placement)
{
    return strncmp(placement, "replicate-hot", 13) == 0 || strncmp(placement, "eplb", 4) == 0;
}

int rp_overlap_depth(const char *cell)
{
    int n = cell ? atoi(cell) : 0;
    return n > 1 ? n : 1;
}

int rp_overlap_ranking(const struct rp_series *s, int ns, int b, int *order, struct rp_effect *eff,
                       int max)
{
    int k = 0;
    if (rp_overlap_depth(s[b].key[RP_K_OVERLAP]) != 1)
        return 0;
    for (int j = 0; j < ns && k < max; j++) {
        if (rp_overlap_depth(s[j].key[RP_K_OVERLAP]) == 1 ||
            !rp_differ_only_in(&s[b], &s[j], RP_K_OVERLAP, 0))
            continue;
        struct rp_effect e = rp_effect(&s[b], &s[j]);
        if (!e.n)
            continue;
        /* insertion by geometric mean, ties after the earlier curve */
        int at = k++;
        while (at > 0 && eff[at - 1].geomean > e.geomean) {
            order[at] = order[at - 1];
            eff[at] = eff[at - 1];
            at--;
        }
        order[at] = j;
        eff[at] = e;
    }
    return k;
}

/* 1 when a and b differ in nothing but keys k1 and k2 (either or both). */
static int same_but(const struct rp_series *a, const struct rp_series *b, int k1, int k2)
{
    for (int m = 0; m < RP_NKEY; m++)
        if (m != k1 && m != k2 && strcmp(a->key[m], b->key[m]) != 0)
            return 0;
    return 1;
}

/* The point of curve `s` at batch `batch`, or NULL. */
static const struct rp_point *point_at(const struct rp_series *s, double batch)
{
    for (int i = 0; i < s->n; i++)
        if (s->pt[i].batch == batch && s->pt[i].layer_us > 0)
            return &s->pt[i];
    return NULL;
}

int rp_dedup_compare(const struct rp_series *s, int ns, int b, int i, struct rp_dedup_cmp *out)
{
    memset(out, 0, sizeof *out);
    if (strcmp(s[b].key[RP_K_DEDUP], "pair") != 0 || i < 0 || i >= s[b].n)
        return 0;
    out->batch = s[b].pt[i].batch;
    const struct rp_point *p0 = point_at(&s[b], out->batch);
    if (!p0)
        return 0;
    out->mode[out->n++] = (struct rp_dedup_mode){b, p0->layer_us, p0->bytes_internode,
                                                 p0->layer_ci_lo_us, p0->layer_ci_hi_us};
    for (int j = 0; j < ns && out->n < 8; j++) {
        if (j == b || !rp_differ_only_in(&s[b], &s[j], RP_K_DEDUP, 0))
            continue;
        const struct rp_point *p = point_at(&s[j], out->batch);
        if (p)
            out->mode[out->n++] = (struct rp_dedup_mode){j, p->layer_us, p->bytes_internode,
                                                         p->layer_ci_lo_us, p->layer_ci_hi_us};
    }
    if (out->n < 2) {
        out->n = 0;
        return 0;
    }
    for (int m = 1; m < out->n; m++)
        if (out->mode[m].layer_us < out->mode[out->best].layer_us)
            out->best = m;
    const struct rp_dedup_mode *p = &out->mode[0], *w = &out->mode[out->best];
    out->ratio = w->layer_us / p->layer_us;
    if (isnan(p->ci_lo) || isnan(p->ci_hi) || isnan(w->ci_lo) || isnan(w->ci_hi))
        out->verdict = 2;
    else
        out->verdict = w->ci_hi < p->ci_lo ? -1 : 0;
    return out->n;
}

int rp_remedies(const struct rp_series *s, int ns, int b, struct rp_remedy *out, int max,
                double *at)
{
    const struct rp_series *base = &s[b];
    *at = NAN;
    if (rp_placement_replicates(base->key[RP_K_PLACEMENT]) ||
        rp_overlap_depth(base->key[RP_K_OVERLAP]) != 1)
        return 0;
    /* the candidates: another placement that replicates and/or an overlap above 1 */
    int k = 0;
    for (int j = 0; j < ns && k < max; j++) {
        if (j == b || !same_but(base, &s[j], RP_K_PLACEMENT, RP_K_OVERLAP))
            continue;
        int placed = strcmp(base->key[RP_K_PLACEMENT], s[j].key[RP_K_PLACEMENT]) != 0;
        int piped = rp_overlap_depth(s[j].key[RP_K_OVERLAP]) > 1;
        if ((placed && !rp_placement_replicates(s[j].key[RP_K_PLACEMENT])) || (!placed && !piped))
            continue;
        out[k++] = (struct rp_remedy){.series = j, .placement = placed, .overlap = piped};
    }
    /* the batch: the largest of the base's that the most candidates have */
    int best = 0;
    for (int i = base->n - 1; i >= 0; i--) {
        int have = 0;
        for (int r = 0; r < k; r++)
            have += point_at(&s[out[r].series], base->pt[i].batch) != NULL;
        if (have > best && base->pt[i].layer_us > 0) {
            best = have;
            *at = base->pt[i].batch;
        }
    }
    if (!best)
        return 0;
    const struct rp_point *p0 = point_at(base, *at);
    int n = 0;
    for (int r = 0; r < k; r++) {
        const struct rp_point *p = point_at(&s[out[r].series], *at);
        if (!p)
            continue;
        struct rp_remedy x = out[r];
        x.ratio = p->layer_us / p0->layer_us;
        x.verdict = p->layer_ci_hi_us < p0->layer_ci_lo_us   ? -1
                    : p->layer_ci_lo_us > p0->layer_ci_hi_us ? 1
                                                             : 0;
        int pos = n++; /* insertion by ratio; out[pos..] is already read */
        while (pos > 0 && out[pos - 1].ratio > x.ratio) {
            out[pos] = out[pos - 1];
            pos--;
        }
        out[pos] = x;
    }
    return n;
}

/* ---- who the others wait for ---- */

struct rp_critical rp_point_critical(const struct mp_table *t, long first, long count)
{
    struct rp_critical c = {.rank = -1, .row = -1};
    int ci = mp_table_col(t, MPC_iter), cr = mp_table_col(t, MPC_rank),
        cl = mp_table_col(t, MPC_layer_us), cw = mp_table_col(t, MPC_wait_us),
        cn = mp_table_col(t, MPC_rows);
    if (ci < 0 || cr < 0 || cl < 0 || cw < 0 || cn < 0 || count <= 0)
        return c;
    int it0 = -1, iters = 0, nranks = 0; /* iterations it0 .. it0 + iters − 1 */
    for (long i = first; i < first + count; i++) {
        double it = cell_num(t, i, ci), r = cell_num(t, i, cr);
        if (!(it >= 0) || !(r >= 0))
            return c;
        it0 = it0 < 0 || it < it0 ? (int)it : it0;
    }
    for (long i = first; i < first + count; i++) {
        int it = (int)cell_num(t, i, ci) - it0, r = (int)cell_num(t, i, cr);
        iters = it + 1 > iters ? it + 1 : iters;
        nranks = r + 1 > nranks ? r + 1 : nranks;
    }
    /* per iteration: the critical rank, its busy time, the waits, the layer time */
    int *crit = malloc((size_t)iters * sizeof *crit), *times = calloc((size_t)nranks, sizeof *times);
    double *busy = malloc((size_t)iters * sizeof *busy), *wait = calloc((size_t)iters, sizeof *wait),
           *layer = calloc((size_t)iters, sizeof *layer), *rows = calloc((size_t)iters, sizeof *rows),
           *crit_rows = calloc((size_t)iters, sizeof *crit_rows);
    if (!crit || !times || !busy || !wait || !layer || !rows || !crit_rows)
        goto out;
    for (int it = 0; it < iters; it++) {
        crit[it] = -1;
        busy[it] = -INFINITY;
    }
    for (long i = first; i < first + count; i++) {
        int it = (int)cell_num(t, i, ci) - it0, r = (int)cell_num(t, i, cr);
        double L = cell_num(t, i, cl), w = cell_num(t, i, cw), n = cell_num(t, i, cn);
        if (isnan(L) || isnan(w))
            goto out;
        double b = L - w;
        if (b > busy[it] || (b == busy[it] && r < crit[it])) {
            busy[it] = b;
            crit[it] = r;
            crit_rows[it] = isnan(n) ? 0 : n;
        }
        wait[it] += w;
        layer[it] = L > layer[it] ? L : layer[it];
        rows[it] += isnan(n) ? 0 : n;
    }
    for (int it = 0; it < iters; it++)
        if (crit[it] >= 0)
            times[crit[it]]++;
    c.rank = 0;
    for (int r = 1; r < nranks; r++)
        c.rank = times[r] > times[c.rank] ? r : c.rank;
    double own = 0, mean = 0, waited = 0, total = 0;
    for (int it = 0; it < iters; it++) {
        total += nranks * layer[it];
        if (crit[it] != c.rank)
            continue;
        own += crit_rows[it];
        mean += rows[it] / nranks;
        waited += wait[it];
    }
    c.iters = iters;
    c.nranks = nranks;
    c.share = iters ? (double)times[c.rank] / iters : 0;
    c.rows_ratio = mean > 0 ? own / mean : NAN;
    c.explains = total > 0 ? waited / total : NAN;
    c.routing = c.rows_ratio >= RP_ROUTING_ROWS;
    for (long i = first; i < first + count && c.row < 0; i++)
        if ((int)cell_num(t, i, cr) == c.rank)
            c.row = (int)i;
out:
    free(crit);
    free(times);
    free(busy);
    free(wait);
    free(layer);
    free(rows);
    free(crit_rows);
    return c;
}

int rp_rank_point_find(const struct rp_run *run, const struct rp_series *s, double batch)
{
    const struct mp_table *t = &run->rank_samples;
    int cb = mp_table_col(t, MPC_batch), col[RP_NKEY];
    if (cb < 0)
        return -1;
    for (int k = 0; k < RP_NKEY; k++)
        col[k] = mp_table_col(t, rp_key_names[k]);
    for (int p = 0; p < run->n_rank_pts; p++) {
        long i = run->rank_pt_first[p];
        int same = cell_num(t, i, cb) == batch;
        for (int k = 0; k < RP_NKEY && same; k++)
            same = col[k] < 0 || !strcmp(t->cells[i][col[k]], s->key[k]);
        if (same)
            return p;
    }
    return -1;
}

const char *rp_rank_experts(const struct rp_run *run, int pt, int rank)
{
    const struct mp_table *r = &run->ranks, *t = &run->rank_samples;
    int ce = mp_table_col(r, MPC_local_experts), cr = mp_table_col(r, MPC_rank);
    if (ce < 0 || cr < 0 || pt < 0 || pt >= run->n_rank_pts || r->ncols < run->rank_key)
        return "";
    const char *const *key = (const char *const *)t->cells[run->rank_pt_first[pt]];
    for (long i = 0; i < r->nrows; i++) {
        int same = cell_num(r, i, cr) == rank;
        for (int c = 0; c < run->rank_key && same; c++)
            same = !strcmp(r->cells[i][c], key[c]);
        if (same)
            return r->cells[i][ce];
    }
    return "";
}

/* ---- the reference table ---- */

char *rp_csv_label(const char *path) { return rp_csv_comment(path, "label"); }

char *rp_csv_comment(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char line[1024], *label = NULL;
    size_t kl = strlen(key);
    while (!label && fgets(line, sizeof line, f)) {
        if (line[0] != '#')
            continue;
        char *p = line + 1;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncmp(p, key, kl) != 0 || p[kl] != ':')
            continue;
        p += kl + 1;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t len = strcspn(p, "\r\n");
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len > 0)
            label = strndup(p, len);
    }
    fclose(f);
    return label;
}
