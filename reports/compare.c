/* compare.c - loads two run directories of one tool, matches their points by the key columns,
 * and compares the per-iteration samples of each metric (what run.json says about both:
 * compare_facts.c). */
#include "compare.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"
#include "format.h"
#include "files.h"
#include "results.h"
#include "schema.h"
#include "sort.h"
#include "stats.h"

/* The tools whose run directories can be compared, and the samples columns compared. */
struct tool_spec {
    const char *name; /* --tool value */
    const char *tool; /* run.json "tool" */
    const struct mp_csv_schema *summary, *samples;
    int nmetrics;
    struct mp_cmp_metric metrics[3];
};

static const struct tool_spec tools[] = {
    {"layer", "moeperf-layer", &mp_schema_layer, &mp_schema_layer_samples, 3,
     {{MPC_layer_us, 1}, {MPC_ffn_us, 0}, {MPC_comm_us, 0}}},
    {"a2a", "moeperf-a2a", &mp_schema_a2a, &mp_schema_a2a_samples, 1, {{MPC_time_us, 1}}},
    {"ffn", "moeperf-ffn", &mp_schema_ffn, &mp_schema_ffn_samples, 1, {{MPC_ffn_us, 1}}},
};
#define NTOOLS ((int)(sizeof tools / sizeof tools[0]))

const char *mp_cmp_verdict_name(enum mp_cmp_verdict v)
{
    switch (v) {
    case MP_CMP_UNCHANGED: return "unchanged";
    case MP_CMP_REGRESSION: return "regression";
    case MP_CMP_IMPROVEMENT: return "improvement";
    case MP_CMP_INCONCLUSIVE: return "inconclusive";
    }
    return "?";
}

enum mp_cmp_verdict mp_cmp_verdict(long n_base, long n_new, double change, double p,
                                   double threshold, double alpha, const char **reason)
{
    const char *why = NULL;
    if (n_base < MP_CMP_MIN_SAMPLES || n_new < MP_CMP_MIN_SAMPLES) {
        why = n_base == 0 || n_new == 0 ? "no samples on one side" : "too few samples";
    } else {
        /* the smallest two-sided p any arrangement of n_base + n_new values can give */
        double log_c = lgamma((double)(n_base + n_new) + 1.0) - lgamma((double)n_base + 1.0) -
                       lgamma((double)n_new + 1.0);
        if (log(2.0) - log_c >= log(alpha))
            why = "too few samples for this alpha";
        else if (isnan(change))
            why = "base median <= 0";
        else if (isnan(p))
            why = "no test";
    }
    if (reason)
        *reason = why;
    if (why)
        return MP_CMP_INCONCLUSIVE;
    if (p < alpha && change >= threshold)
        return MP_CMP_REGRESSION;
    if (p < alpha && change <= -threshold)
        return MP_CMP_IMPROVEMENT;
    return MP_CMP_UNCHANGED;
}

enum mp_cmp_verdict mp_cmp_noise_rule(enum mp_cmp_verdict v, double change, double noise_base,
                                      double noise_new, const char **reason)
{
    if (v != MP_CMP_REGRESSION && v != MP_CMP_IMPROVEMENT)
        return v;
    double nb = isnan(noise_base) ? 0 : noise_base, nn = isnan(noise_new) ? 0 : noise_new;
    if (mp_apart(1 + change) > (nb > nn ? nb : nn)) /* the same whichever side is the base */
        return v;
    if (reason)
        *reason = "within noise";
    return MP_CMP_UNCHANGED;
}

/* mp_spread of n values, on a sorted copy; NAN when out of memory or n < 2. */
static double noise_of(const double *v, long n)
{
    double *s = n >= 2 ? malloc((size_t)n * sizeof *s) : NULL;
    if (!s)
        return NAN;
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, mp_cmp_double);
    double spread = mp_spread(s, n);
    free(s);
    return spread;
}

/* ---- small helpers ---- */

static int file_exists(const char *dir, const char *name)
{
    char *p = mp_path_join(dir, name);
    struct stat st;
    int ok = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

/* Append a formatted warning to c->warn (printed to stderr when the load succeeds). Returns MP_OK
 * or MP_ERR_RUNTIME. */
__attribute__((format(printf, 2, 3))) static int cmp_add_warn(struct mp_cmp *c, const char *fmt,
                                                              ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = mp_vformat(fmt, ap);
    va_end(ap);
    if (!s) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    int rc = cmp_warn(&c->warn, &c->nwarn, "%s", s);
    free(s);
    return rc;
}

/* ---- one side: the runs it pools and their samples grouped by point ---- */

struct rowref {
    int tab;  /* which run */
    long row; /* data row of that run's samples table */
};

struct point {
    char *key;
    long nrows, cap;
    struct rowref *rows; /* sample rows of this point, run by run in file order */
};

struct side {
    const char *dir;
    int nruns;
    char **runs;       /* the run directories pooled: dir itself or its subdirectories */
    struct mp_table *t; /* [nruns] samples tables */
    long npts;
    struct point *pts; /* in order of first appearance */
    long *order;       /* indices into pts sorted by key, for lookups */
    long cut;          /* points dropped: samples without a summary row */
};

static char **side_cells(const struct side *s, struct rowref r)
{
    return s->t[r.tab].cells[r.row];
}

static const char *side_key(long i, const void *side)
{
    const struct side *s = side;
    return s->pts[s->order[i]].key;
}

/* Position of `key` in s->order, or -(insertion point) − 1. */
static long side_find(const struct side *s, const char *key)
{
    return mp_find_sorted(key, s->npts, side_key, s);
}

/* The point index of `key` or -1. */
static long side_point(const struct side *s, const char *key)
{
    long at = side_find(s, key);
    return at >= 0 ? s->order[at] : -1;
}

/* Add sample row `ref` to the point of `key` (taking ownership of key). */
static int side_add(struct side *s, char *key, struct rowref ref)
{
    long at = side_find(s, key);
    struct point *p;
    if (at >= 0) {
        p = &s->pts[s->order[at]];
        free(key);
    } else {
        at = -at - 1;
        struct point *np = realloc(s->pts, (size_t)(s->npts + 1) * sizeof *np);
        long *no = np ? realloc(s->order, (size_t)(s->npts + 1) * sizeof *no) : NULL;
        if (np)
            s->pts = np;
        if (!np || !no) {
            free(key);
            mp_error("out of memory");
            return MP_ERR_RUNTIME;
        }
        s->order = no;
        memmove(s->order + at + 1, s->order + at, (size_t)(s->npts - at) * sizeof *s->order);
        s->order[at] = s->npts;
        p = &s->pts[s->npts++];
        *p = (struct point){key, 0, 0, NULL};
    }
    if (p->nrows == p->cap) {
        long cap = p->cap ? 2 * p->cap : 16;
        struct rowref *r = realloc(p->rows, (size_t)cap * sizeof *r);
        if (!r) {
            mp_error("out of memory");
            return MP_ERR_RUNTIME;
        }
        p->rows = r;
        p->cap = cap;
    }
    p->rows[p->nrows++] = ref;
    return MP_OK;
}

static void side_free(struct side *s)
{
    for (long i = 0; i < s->npts; i++) {
        free(s->pts[i].key);
        free(s->pts[i].rows);
    }
    free(s->pts);
    free(s->order);
    for (int r = 0; r < s->nruns; r++) {
        if (s->t)
            mp_table_free(&s->t[r]);
        free(s->runs[r]);
    }
    free(s->t);
    free(s->runs);
    memset(s, 0, sizeof *s);
}

/* The tool whose files are in `dir` (only `which` considered when not NULL): the count of tools
 * found in *nfound and the last one found. Prints nothing. */
static const struct tool_spec *find_tool(const char *dir, const char *which, int *nfound)
{
    const struct tool_spec *found = NULL;
    *nfound = 0;
    for (int i = 0; i < NTOOLS; i++) {
        if (which && strcmp(which, tools[i].name) != 0)
            continue;
        if (file_exists(dir, tools[i].samples->file) || file_exists(dir, tools[i].summary->file)) {
            found = &tools[i];
            (*nfound)++;
        }
    }
    return found;
}

static int add_run(struct side *s, const char *dir)
{
    char *d = cmp_strdup(dir);
    char **r = d ? realloc(s->runs, (size_t)(s->nruns + 1) * sizeof *r) : NULL;
    if (!r) {
        free(d);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    s->runs = r;
    s->runs[s->nruns++] = d;
    return MP_OK;
}

/* Which runs a side pools: `dir` itself when it holds a tool's files, else its subdirectories that
 * do (repeats, in name order). With `which` only that tool counts. *ts receives the tool.
 * Returns MP_OK, or MP_ERR_USAGE with a message naming `dir` (not a directory, several tools, no
 * results; with `quiet_none` nothing is printed for no results, and *ts stays NULL). */
static int side_runs(struct side *s, const char *dir, const char *which, int quiet_none,
                     const struct tool_spec **ts)
{
    struct stat st;
    int nf, rc = MP_OK;
    memset(s, 0, sizeof *s);
    s->dir = dir;
    *ts = NULL;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        mp_usage("%s: %s; expected a run directory (the --out of moeperf-layer, moeperf-a2a or "
                 "moeperf-ffn) or a directory of such runs",
                 dir, stat(dir, &st) != 0 ? strerror(errno) : "not a directory");
        return MP_ERR_USAGE;
    }
    const struct tool_spec *t = find_tool(dir, which, &nf);
    if (nf > 1) {
        mp_usage("%s: holds the results of several tools; choose one with --tool layer|a2a|ffn",
                 dir);
        return MP_ERR_USAGE;
    }
    if (nf == 1) {
        *ts = t;
        return add_run(s, dir);
    }
    /* no results here: the repeats in its subdirectories */
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, alphasort);
    if (n < 0) {
        mp_usage("%s: %s", dir, strerror(errno));
        return MP_ERR_USAGE;
    }
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        char *sub = rc == MP_OK && name[0] != '.' ? mp_path_join(dir, name) : NULL;
        if (sub && stat(sub, &st) == 0 && S_ISDIR(st.st_mode)) {
            const struct tool_spec *u = find_tool(sub, which, &nf);
            if (nf > 1 || (nf == 1 && *ts && u != *ts)) {
                mp_usage("%s: holds the results of several tools; choose one with --tool "
                         "layer|a2a|ffn",
                         nf > 1 ? sub : dir);
                rc = MP_ERR_USAGE;
            } else if (nf == 1) {
                *ts = u;
                rc = add_run(s, sub);
            }
        }
        free(sub);
        free(ents[i]);
    }
    free(ents);
    if (rc == MP_OK && s->nruns == 0) {
        *ts = NULL;
        if (!quiet_none) {
            const struct tool_spec *w = NULL;
            for (int i = 0; which && i < NTOOLS; i++)
                if (strcmp(which, tools[i].name) == 0)
                    w = &tools[i];
            if (w)
                mp_usage("%s: no %s or %s, here or in its subdirectories (--tool %s)", dir,
                         w->samples->file, w->summary->file, which);
            else
                mp_usage("%s: no layer_samples.csv, a2a_samples.csv or ffn_samples.csv, here or "
                         "in its subdirectories; expected a run directory of moeperf-layer, "
                         "moeperf-a2a or moeperf-ffn",
                         dir);
        }
        rc = MP_ERR_USAGE;
    }
    return rc;
}

/* Read the samples file of every run of the side and group the rows by their first nkey cells;
 * rows of points missing from a run's summary file (when it has one) are dropped and counted in
 * s->cut. */
static int side_load(struct side *s, const struct tool_spec *ts)
{
    int rc = MP_OK, nkey = -1;
    s->t = calloc((size_t)s->nruns, sizeof *s->t);
    if (!s->t) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (int r = 0; r < s->nruns && rc == MP_OK; r++) {
        const char *dir = s->runs[r];
        if (!file_exists(dir, ts->samples->file)) {
            mp_usage("%s/%s: missing; moeperf-compare needs the per-iteration samples that %s "
                     "writes next to %s",
                     dir, ts->samples->file, ts->tool, ts->summary->file);
            return MP_ERR_USAGE;
        }
        char *path = mp_path_join(dir, ts->samples->file);
        if (!path)
            return MP_ERR_RUNTIME;
        rc = mp_table_read(path, &s->t[r]);
        free(path);
        if (rc != MP_OK)
            return rc;
        const struct mp_table *t = &s->t[r];
        if (r == 0) {
            nkey = mp_table_col(t, MPC_iter);
            if (nkey <= 0) {
                mp_usage("%s: no \"iter\" column after the key columns; expected the samples "
                         "file of %s",
                         t->path, ts->tool);
                return MP_ERR_USAGE;
            }
        } else {
            int same = t->ncols == s->t[0].ncols;
            for (int k = 0; same && k < t->ncols; k++)
                same = strcmp(t->cols[k], s->t[0].cols[k]) == 0;
            if (!same) {
                mp_usage("%s and %s have different columns; the runs pooled must come from the "
                         "same moeperf version",
                         s->t[0].path, t->path);
                return MP_ERR_USAGE;
            }
        }
        struct mp_keyset have = {0, NULL};
        int use_summary = file_exists(dir, ts->summary->file);
        if (use_summary && (rc = mp_keyset_load(dir, ts->summary->file, nkey, &have)) != MP_OK)
            return rc;
        struct mp_keyset cut = {0, NULL};
        for (long i = 0; i < t->nrows && rc == MP_OK; i++) {
            char *key = mp_table_key(t, i, nkey);
            if (!key) {
                mp_error("out of memory");
                rc = MP_ERR_RUNTIME;
                break;
            }
            if (use_summary && !mp_keyset_has(&have, key)) {
                if (!mp_keyset_has(&cut, key)) {
                    mp_keyset_add(&cut, key);
                    s->cut++;
                }
                free(key);
                continue;
            }
            rc = side_add(s, key, (struct rowref){r, i});
        }
        mp_keyset_free(&have);
        mp_keyset_free(&cut);
    }
    return rc;
}

/* The sample values of point `pt` in column `col` (empty cells skipped) into a new array *out
 * (count *n), and the median of each run's values (nearest rank, METRICS.md) into *runmed (count
 * *nruns). pt < 0: nothing. */
static int side_values(const struct side *s, long pt, int col, double **out, long *n,
                       double **runmed, long *nruns)
{
    *out = *runmed = NULL;
    *n = *nruns = 0;
    if (pt < 0)
        return MP_OK;
    const struct point *p = &s->pts[pt];
    size_t cap = (size_t)(p->nrows > 0 ? p->nrows : 1);
    double *v = malloc(cap * sizeof *v), *rm = malloc(cap * sizeof *rm);
    double *tmp = malloc(cap * sizeof *tmp);
    if (!v || !rm || !tmp) {
        free(v);
        free(rm);
        free(tmp);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    long k = 0, nr = 0, run_start = 0;
    for (long i = 0; i <= p->nrows; i++) {
        /* rows are stored run by run: close the previous run's group at a change of run */
        if (i == p->nrows || (i > 0 && p->rows[i].tab != p->rows[i - 1].tab)) {
            long m = k - run_start;
            if (m > 0) {
                memcpy(tmp, v + run_start, (size_t)m * sizeof *tmp);
                qsort(tmp, (size_t)m, sizeof *tmp, mp_cmp_double);
                rm[nr++] = mp_percentile(tmp, m, 50.0);
            }
            run_start = k;
            if (i == p->nrows)
                break;
        }
        const char *cell = side_cells(s, p->rows[i])[col];
        if (!cell[0])
            continue;
        v[k++] = strtod(cell, NULL); /* a finite number in range: mp_table_read checked it */
    }
    free(tmp);
    *out = v;
    *n = k;
    *runmed = rm;
    *nruns = nr;
    return MP_OK;
}

/* Median and 95 % CI of v[0..n) (sorted in place); NAN when n == 0. */
static void median_ci(double *v, long n, double *med, double *lo, double *hi)
{
    struct mp_summary s;
    mp_summarize(v, n, &s);
    *med = s.p50;
    *lo = s.ci_lo;
    *hi = s.ci_hi;
}

/* ---- loading ---- */

char *mp_cmp_point_label(const struct mp_cmp *c, long point)
{
    struct sbuf sb = {0};
    int any = 0;
    for (int k = 0; k < c->nkey; k++)
        if (c->key_varies[k]) {
            if (any)
                cmp_sb_put(&sb, " ");
            cmp_sb_put(&sb, c->key_cols[k]);
            cmp_sb_put(&sb, "=");
            cmp_sb_put(&sb, c->key_cells[point][k]);
            any = 1;
        }
    if (!any)
        for (int k = 0; k < c->nkey; k++) {
            if (k)
                cmp_sb_put(&sb, ",");
            cmp_sb_put(&sb, c->key_cells[point][k]);
        }
    return cmp_sb_done(&sb);
}

/* The first key column in which the first points of two sides differ, or -1. */
static int first_diff(const struct side *a, const struct side *b, int nkey)
{
    char **ra = side_cells(a, a->pts[0].rows[0]), **rb = side_cells(b, b->pts[0].rows[0]);
    for (int k = 0; k < nkey; k++)
        if (strcmp(ra[k], rb[k]) != 0)
            return k;
    return -1;
}

/* Load the run.json of every run of a side: the first one is kept in c->run[side] for the facts;
 * a deliberately slowed or unfinished run anywhere is warned about. */
static int side_runjson(struct mp_cmp *c, const struct side *sd, int side)
{
    int rc = MP_OK, slowed = 0, unfinished = 0, missing = 0;
    char *dbg = NULL;
    for (int r = 0; r < sd->nruns && rc == MP_OK; r++) {
        cJSON *j = cmp_load_runjson(sd->runs[r]);
        if (!j) {
            missing++;
            continue;
        }
        const cJSON *d = cmp_jget(j, "debug");
        if (d && !cJSON_IsNull(d) && slowed++ == 0)
            dbg = cmp_json_text(d);
        unfinished += !cJSON_IsTrue(cmp_jget(j, "finished"));
        if (r == 0)
            c->run[side] = j;
        else
            cJSON_Delete(j);
    }
    if (missing)
        rc = cmp_add_warn(c, "%s: %d of %d run(s) without a valid run.json; their libraries and "
                          "configuration are unknown",
                          sd->dir, missing, sd->nruns);
    if (rc == MP_OK && slowed)
        rc = cmp_add_warn(c, "%s: %d of %d run(s) deliberately slowed down (run.json debug: %s)",
                          sd->dir, slowed, sd->nruns, dbg ? dbg : "?");
    if (rc == MP_OK && unfinished)
        rc = cmp_add_warn(c, "%s: %d of %d run(s) did not finish their sweep (run.json)", sd->dir,
                          unfinished, sd->nruns);
    free(dbg);
    return rc;
}

/* Both sides' runs of one tool (NEW must hold the base's tool), loaded; c's tool, metrics, run
 * counts, directories and unit filled. */
static int load_sides(struct mp_cmp *c, struct side sd[2], const char *const dirs[2],
                      const struct mp_cmp_opts *opts, const struct tool_spec **ts_out)
{
    int rc = MP_OK;
    const struct tool_spec *ts = NULL, *tn = NULL;
    MP_CHECK(side_runs(&sd[0], dirs[0], opts->tool, 0, &ts));
    /* NEW must hold the base's tool; if it holds only another tool's files, the workloads differ */
    rc = side_runs(&sd[1], dirs[1], ts->name, 1, &tn);
    if (rc == MP_ERR_USAGE && !tn) {
        struct side other;
        struct stat st;
        if (stat(dirs[1], &st) == 0 && S_ISDIR(st.st_mode) &&
            side_runs(&other, dirs[1], NULL, 1, &tn) == MP_OK) {
            mp_usage("%s and %s are runs of different workloads: %s holds %s results, %s holds %s "
                     "results",
                     dirs[0], dirs[1], dirs[0], ts->tool, dirs[1], tn->tool);
            side_free(&other);
        } else if (stat(dirs[1], &st) == 0 && S_ISDIR(st.st_mode)) {
            side_runs(&other, dirs[1], ts->name, 0, &tn); /* prints why */
            side_free(&other);
        }
    }
    if (rc != MP_OK)
        goto out;
    *ts_out = ts;
    c->tool = ts->tool;
    c->samples_file = ts->samples->file;
    c->nmetrics = ts->nmetrics;
    memcpy(c->metrics, ts->metrics, sizeof ts->metrics);
    for (int s = 0; s < 2; s++) {
        c->nruns[s] = sd[s].nruns;
        if (!(c->dir[s] = cmp_strdup(dirs[s]))) {
            rc = MP_ERR_RUNTIME;
            goto out;
        }
    }
    for (int s = 0; s < 2; s++)
        MP_CHECK(side_load(&sd[s], ts));
    c->unit_run = opts->unit == MP_CMP_UNIT_RUN ||
                  (opts->unit == MP_CMP_UNIT_AUTO && sd[0].nruns >= 2 && sd[1].nruns >= 2);
    c->low_confidence = !c->unit_run && (sd[0].nruns == 1 || sd[1].nruns == 1);
out:
    return rc;
}

/* The two sides' summary files have the same columns, every metric among them; c's key columns
 * (those before the iteration column) filled; a side without a complete point is refused. */
static int check_columns(struct mp_cmp *c, struct side sd[2], const char *const dirs[2],
                         const struct tool_spec *ts, int metric_col[4])
{
    int rc = MP_OK;
    /* same columns on both sides */
    const struct mp_table *tb = &sd[0].t[0], *tw = &sd[1].t[0];
    int same = tb->ncols == tw->ncols;
    for (int k = 0; same && k < tb->ncols; k++)
        same = strcmp(tb->cols[k], tw->cols[k]) == 0;
    if (!same) {
        mp_usage("%s and %s have different columns; both must come from the same moeperf version",
                 tb->path, tw->path);
        rc = MP_ERR_USAGE;
        goto out;
    }
    for (int m = 0; m < c->nmetrics; m++)
        if ((metric_col[m] = mp_table_col(tb, c->metrics[m].name)) < 0) {
            mp_usage("%s: no column %s", tb->path, c->metrics[m].name);
            rc = MP_ERR_USAGE;
            goto out;
        }
    c->nkey = mp_table_col(tb, MPC_iter);
    c->key_cols = calloc((size_t)c->nkey, sizeof *c->key_cols);
    c->key_varies = calloc((size_t)c->nkey, sizeof *c->key_varies);
    if (!c->key_cols || !c->key_varies) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    for (int k = 0; k < c->nkey; k++)
        if (!(c->key_cols[k] = cmp_strdup(tb->cols[k]))) {
            rc = MP_ERR_RUNTIME;
            goto out;
        }
    for (int s = 0; s < 2; s++)
        if (sd[s].cut)
            MP_CHECK(cmp_add_warn(c, "%s: %ld point(s) with samples but no row in the summary file "
                                  "(cut short) are ignored",
                                  dirs[s], sd[s].cut));
    for (int s = 0; s < 2; s++)
        if (sd[s].npts == 0) {
            mp_usage("%s: %s holds no complete point to compare", dirs[s], ts->samples->file);
            rc = MP_ERR_USAGE;
            goto out;
        }

out:
    return rc;
}

/* The points compared: the base's in its order, then those only the new run has; pt_side[s][p] is
 * point p's index on side s (−1: absent there); c's key cells and rows allocated. */
static int match_points(struct mp_cmp *c, struct side sd[2], const char *const dirs[2],
                        long *pt_side[2])
{
    int rc = MP_OK;
    long common = 0;
    for (long i = 0; i < sd[0].npts; i++)
        common += side_point(&sd[1], sd[0].pts[i].key) >= 0;
    if (common == 0) {
        int k = first_diff(&sd[0], &sd[1], c->nkey);
        char **ra = side_cells(&sd[0], sd[0].pts[0].rows[0]);
        char **rn = side_cells(&sd[1], sd[1].pts[0].rows[0]);
        if (k >= 0)
            mp_usage("%s and %s are runs of different workloads: no point in common (first "
                     "point: %s = '%s' vs '%s')",
                     dirs[0], dirs[1], c->key_cols[k], ra[k], rn[k]);
        else
            mp_usage("%s and %s are runs of different workloads: no point in common", dirs[0],
                     dirs[1]);
        rc = MP_ERR_USAGE;
        goto out;
    }
    c->only_base = sd[0].npts - common;
    c->only_new = sd[1].npts - common;
    c->npoints = sd[0].npts + c->only_new;
    pt_side[0] = malloc((size_t)c->npoints * sizeof(long));
    pt_side[1] = malloc((size_t)c->npoints * sizeof(long));
    c->key_cells = calloc((size_t)c->npoints, sizeof *c->key_cells);
    c->nrows = c->npoints * c->nmetrics;
    c->rows = calloc((size_t)c->nrows, sizeof *c->rows);
    if (!pt_side[0] || !pt_side[1] || !c->key_cells || !c->rows) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    long np = 0;
    for (long i = 0; i < sd[0].npts; i++, np++) {
        pt_side[0][np] = i;
        pt_side[1][np] = side_point(&sd[1], sd[0].pts[i].key);
    }
    for (long i = 0; i < sd[1].npts; i++)
        if (side_point(&sd[0], sd[1].pts[i].key) < 0) {
            pt_side[0][np] = -1;
            pt_side[1][np++] = i;
        }
    for (long p = 0; p < c->npoints && rc == MP_OK; p++) {
        int s = pt_side[0][p] >= 0 ? 0 : 1;
        char **cells = side_cells(&sd[s], sd[s].pts[pt_side[s][p]].rows[0]);
        if (!(c->key_cells[p] = calloc((size_t)c->nkey, sizeof(char *)))) {
            mp_error("out of memory");
            rc = MP_ERR_RUNTIME;
            break;
        }
        for (int k = 0; k < c->nkey && rc == MP_OK; k++)
            if (!(c->key_cells[p][k] = cmp_strdup(cells[k])))
                rc = MP_ERR_RUNTIME;
    }
out:
    return rc;
}

/* Row (p, m): both sides' samples of metric m at point p, their medians with confidence intervals,
 * the Mann-Whitney test on the unit chosen, the change and the verdict. */
static int compare_row(struct mp_cmp *c, struct side sd[2], long *const pt_side[2],
                       const int metric_col[4], const struct mp_cmp_opts *opts, long p, int m)
{
    int rc;
    struct mp_cmp_row *r = &c->rows[p * c->nmetrics + m];
    double *v[2] = {NULL, NULL}, *rm[2] = {NULL, NULL};
    long n[2] = {0, 0}, nr[2] = {0, 0};
    r->point = p;
    r->metric = m;
    rc = side_values(&sd[0], pt_side[0][p], metric_col[m], &v[0], &n[0], &rm[0], &nr[0]);
    if (rc == MP_OK)
        rc = side_values(&sd[1], pt_side[1][p], metric_col[m], &v[1], &n[1], &rm[1], &nr[1]);
    const double *ux = c->unit_run ? rm[0] : v[0], *uy = c->unit_run ? rm[1] : v[1];
    long nx = c->unit_run ? nr[0] : n[0], ny = c->unit_run ? nr[1] : n[1];
    if (rc == MP_OK && mp_mannwhitney(ux, nx, uy, ny, &r->mw) != 0) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
    }
    if (rc == MP_OK) {
        r->n_base = n[0];
        r->n_new = n[1];
        r->runs_base = nr[0];
        r->runs_new = nr[1];
        r->units_base = nx;
        r->units_new = ny;
        median_ci(v[0], n[0], &r->base_med, &r->base_lo, &r->base_hi);
        median_ci(v[1], n[1], &r->new_med, &r->new_lo, &r->new_hi);
        r->change = n[0] && n[1] && r->base_med > 0 ? (r->new_med - r->base_med) / r->base_med
                                                    : NAN;
        r->verdict = mp_cmp_verdict(nx, ny, r->change, r->mw.p, opts->threshold, opts->alpha,
                                    &r->reason);
        r->noise_base = noise_of(ux, nx);
        r->noise_new = noise_of(uy, ny);
        r->verdict = mp_cmp_noise_rule(r->verdict, r->change, r->noise_base, r->noise_new,
                                       &r->reason);
    }
    free(rm[0]);
    free(rm[1]);
    free(v[0]);
    free(v[1]);
    return rc;
}

int mp_cmp_load(const char *base_dir, const char *new_dir, const struct mp_cmp_opts *opts,
                struct mp_cmp *c)
{
    int rc = MP_OK, metric_col[4];
    struct side sd[2];
    long *pt_side[2] = {NULL, NULL};
    const struct tool_spec *ts = NULL;
    const char *const dirs[2] = {base_dir, new_dir};
    memset(c, 0, sizeof *c);
    memset(sd, 0, sizeof sd);

    MP_CHECK(load_sides(c, sd, dirs, opts, &ts));
    MP_CHECK(check_columns(c, sd, dirs, ts, metric_col));
    MP_CHECK(match_points(c, sd, dirs, pt_side));
    for (long p = 0; p < c->npoints && rc == MP_OK; p++)
        for (int m = 0; m < c->nmetrics && rc == MP_OK; m++)
            rc = compare_row(c, sd, pt_side, metric_col, opts, p, m);
    if (rc != MP_OK)
        goto out;
    for (int k = 0; k < c->nkey; k++)
        for (long p = 1; p < c->npoints && !c->key_varies[k]; p++)
            c->key_varies[k] = strcmp(c->key_cells[p][k], c->key_cells[0][k]) != 0;
    if (c->only_base)
        MP_CHECK(cmp_add_warn(c, "%ld point(s) of %s are missing from %s (reported as "
                              "inconclusive)", c->only_base, dirs[0], dirs[1]));
    if (c->only_new)
        MP_CHECK(cmp_add_warn(c, "%ld point(s) of %s are missing from %s (reported as "
                              "inconclusive)", c->only_new, dirs[1], dirs[0]));

    for (int s = 0; s < 2; s++)
        MP_CHECK(side_runjson(c, &sd[s], s));
    MP_CHECK(cmp_collect_facts((const struct cJSON *const *)c->run, c->nruns, &c->facts,
                               &c->nfacts, &c->warn, &c->nwarn));
    for (int i = 0; i < c->nwarn; i++)
        mp_warn("%s", c->warn[i]);
out:
    free(pt_side[0]);
    free(pt_side[1]);
    side_free(&sd[0]);
    side_free(&sd[1]);
    if (rc != MP_OK)
        mp_cmp_free(c);
    return rc;
}

void mp_cmp_free(struct mp_cmp *c)
{
    for (int s = 0; s < 2; s++) {
        free(c->dir[s]);
        cJSON_Delete(c->run[s]);
    }
    for (int k = 0; c->key_cols && k < c->nkey; k++)
        free(c->key_cols[k]);
    free(c->key_cols);
    free(c->key_varies);
    for (long p = 0; c->key_cells && p < c->npoints; p++) {
        for (int k = 0; c->key_cells[p] && k < c->nkey; k++)
            free(c->key_cells[p][k]);
        free(c->key_cells[p]);
    }
    free(c->key_cells);
    free(c->rows);
    for (int i = 0; i < c->nfacts; i++) {
        free(c->facts[i].label);
        free(c->facts[i].base);
        free(c->facts[i].new_);
    }
    free(c->facts);
    for (int i = 0; i < c->nwarn; i++)
        free(c->warn[i]);
    free(c->warn);
    memset(c, 0, sizeof *c);
}
