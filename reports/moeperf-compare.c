/* moeperf-compare - says, point by point, whether a run got slower than a base run of the same
 * sweep (e.g. after an NCCL or MPI upgrade): table on stdout, CSV, Markdown, JUnit XML, plot. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compare.h"
#include "error.h"
#include "format.h"
#include "options.h"
#include "results.h"
#include "schema.h"

struct cmp_opts {
    double threshold; /* percent */
    double alpha;
    char *out;
    char *tool;
    char *gate;
    char *unit;
    int strict;
    int no_svg;
    int quiet;
};

#define O(field) offsetof(struct cmp_opts, field)
static const char *const tool_choices[] = {"auto", "layer", "a2a", "ffn", NULL};
static const char *const gate_choices[] = {"primary", "all", NULL};
static const char *const unit_choices[] = {"auto", "iteration", "run", NULL};

static const struct mp_opt options[] = {
    {"threshold", MP_OPT_DOUBLE, O(threshold), "5", 0, 1000, NULL, "PCT",
     "smallest change of the median, in percent, that counts as a regression or improvement"},
    {"alpha", MP_OPT_DOUBLE, O(alpha), "0.01", 1e-15, 0.5, NULL, "P",
     "significance level of the two-sided Mann-Whitney U test"},
    {"out", MP_OPT_STRING, O(out), NULL, 1.0, 0.0, NULL, "DIR",
     "write compare.csv, compare.md, compare.junit.xml, compare_plot.gp/.dat and compare.svg "
     "into DIR (created if missing) [default: NEW_DIR-compare, beside the new run]"},
    {"tool", MP_OPT_STRING, O(tool), "auto", 1.0, 0.0, tool_choices, NULL,
     "whose results to compare; auto: the one tool whose files BASE_DIR holds"},
    {"gate", MP_OPT_STRING, O(gate), "primary", 1.0, 0.0, gate_choices, NULL,
     "metrics whose regressions exit 3: primary (layer_us, time_us or ffn_us) or all (also "
     "the secondary ffn_us and comm_us of moeperf-layer)"},
    {"unit", MP_OPT_STRING, O(unit), "auto", 1.0, 0.0, unit_choices, NULL,
     "what the test ranks: iteration (every sample), run (each run's median; needs >= 5 runs "
     "per side), auto (run when both sides pool >= 2 runs, else iteration)"},
    {"strict", MP_OPT_FLAG, O(strict), NULL, 1.0, 0.0, NULL, NULL,
     "an inconclusive gated comparison (too few samples, point missing on one side) also exits 3"},
    {"no-svg", MP_OPT_FLAG, O(no_svg), NULL, 1.0, 0.0, NULL, NULL,
     "write the gnuplot script and data but do not run gnuplot"},
    {"quiet", MP_OPT_FLAG, O(quiet), NULL, 1.0, 0.0, NULL, NULL, "no table on stdout"},
    {NULL, 0, 0, NULL, 0, 0, NULL, NULL, NULL},
};

static const char summary[] =
    "       moeperf-compare [options] BASE_DIR NEW_DIR\n"
    "Compare two run directories of the same sweep (moeperf-layer, moeperf-a2a or moeperf-ffn),\n"
    "e.g. before and after an NCCL or MPI upgrade. A side is one run directory, or a directory\n"
    "whose subdirectories are repeated runs (pooled; ci/nccl-regress writes them alternated).\n"
    "Points are matched by their key columns; for each point and metric the per-iteration\n"
    "samples are compared: change = new median / base median - 1 over all samples of a side,\n"
    "and a two-sided Mann-Whitney U test of the samples (one run per side) or of the per-run\n"
    "medians (repeated runs; see --unit): exact p when both sides have fewer than 50 values and\n"
    "no ties, else the normal approximation with tie and continuity corrections.\n"
    "  regression    change >= +threshold, p < alpha, and the medians apart by more than\n"
    "                either side's spread (larger median / smaller - 1)\n"
    "  improvement   change <= -threshold, p < alpha, and the same\n"
    "  inconclusive  fewer than 5 values (samples or runs) on a side, too few to reach\n"
    "                p < alpha, a point measured on one side only, or a base median <= 0\n"
    "  unchanged     otherwise\n"
    "Metrics: moeperf-layer layer_us (primary), ffn_us and comm_us (secondary); moeperf-a2a\n"
    "time_us; moeperf-ffn ffn_us. Differences between the runs other than the libraries\n"
    "(hosts, ranks, build, command line, NCCL_/UCX_/OMPI_MCA_ environment, CPU binding) are warned\n"
    "about. A side's spread is (p90 - p10) / p50 of its values at the point; with one run on a\n"
    "side the verdicts are of low confidence (repeat runs alternately: ci/nccl-regress).\n"
    "Exit status: 0 nothing regressed, 3 a gated metric regressed, 2 usage error (different\n"
    "workloads, missing samples), 1 runtime error.";

struct counts {
    long gated, regress, regress_ungated, improve, unchanged, inconclusive, inconclusive_gated;
};

static int row_gated(const struct mp_cmp *c, const struct mp_cmp_row *r, int gate_all)
{
    return gate_all || c->metrics[r->metric].primary;
}

/* default_out: the default --out, a directory beside the new run named after it (NEW_DIR with
 * "-compare" appended, trailing slashes dropped), so results never land in whatever directory the
 * tool runs from; a NEW_DIR without a name of its own (".", "..") is resolved first. Returns a
 * malloc'ed path, or NULL with a usage error when NEW_DIR is the root (nothing is beside it). */
static char *default_out(const char *new_dir)
{
    char *dir = strdup(new_dir), *out = NULL;
    if (!dir)
        return NULL;
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        dir[--len] = '\0';
    const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0 || strcmp(dir, "/") == 0) {
        char *real = realpath(dir, NULL);
        free(dir);
        dir = real;
        if (!dir)
            return NULL;
    }
    if (strcmp(dir, "/") == 0)
        mp_usage("--out: NEW_DIR is /, which has no directory beside it for the results; "
                 "give --out DIR");
    else
        out = mp_format("%s-compare", dir);
    free(dir);
    return out;
}

/* ---- number formatting ---- */

static void fmt_us(char *buf, size_t n, double v)
{
    if (isnan(v))
        snprintf(buf, n, "-");
    else if (fabs(v) >= 100)
        snprintf(buf, n, "%.1f", v);
    else if (fabs(v) >= 1)
        snprintf(buf, n, "%.2f", v);
    else
        snprintf(buf, n, "%.3f", v);
}

static void fmt_change(char *buf, size_t n, double v)
{
    if (isnan(v))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%+.1f%%", 100.0 * v);
}

static void fmt_p(char *buf, size_t n, double p)
{
    if (isnan(p))
        snprintf(buf, n, "-");
    else if (p >= 0.001)
        snprintf(buf, n, "%.3f", p);
    else
        snprintf(buf, n, "%.1e", p);
}

/* Both sides' spreads as "12%/40%" ("-" for one that is not defined). */
static void fmt_noise(char *buf, size_t n, double b, double w)
{
    char x[2][16];
    double v[2] = {b, w};
    for (int i = 0; i < 2; i++) {
        if (isnan(v[i]))
            snprintf(x[i], sizeof x[i], "-");
        else
            snprintf(x[i], sizeof x[i], "%.0f%%", 100.0 * v[i]);
    }
    snprintf(buf, n, "%s/%s", x[0], x[1]);
}

static const char *verdict_text(const struct mp_cmp_row *r)
{
    switch (r->verdict) {
    case MP_CMP_REGRESSION: return "REGRESSION";
    case MP_CMP_IMPROVEMENT: return "improvement";
    case MP_CMP_UNCHANGED: return "unchanged";
    case MP_CMP_INCONCLUSIVE: return "inconclusive";
    }
    return "?";
}

/* An unchanged verdict whose median moved by the threshold or more: the test did not back it. */
static int not_significant(const struct mp_cmp_row *r, double threshold)
{
    return r->verdict == MP_CMP_UNCHANGED && fabs(r->change) >= threshold;
}

/* ---- stdout ---- */

static void print_table(const struct mp_cmp *c, const struct cmp_opts *o, int gate_all)
{
    printf("# moeperf-compare: %s, %ld point(s) x %d metric(s); base %s, new %s\n", c->tool,
           c->npoints, c->nmetrics, c->dir[0], c->dir[1]);
    for (int i = 0; i < c->nfacts; i++)
        if (c->facts[i].kind == MP_FACT_LIBRARY)
            printf("# %-24s base %s | new %s%s\n", c->facts[i].label, c->facts[i].base,
                   c->facts[i].new_, c->facts[i].differs ? "" : "  (same)");
    printf("# regression: median change >= +%g%% and two-sided Mann-Whitney p < %g; improvement: "
           "<= -%g%% and p < %g; inconclusive: < %d %s\n",
           o->threshold, o->alpha, o->threshold, o->alpha, MP_CMP_MIN_SAMPLES,
           c->unit_run ? "runs" : "samples");
    if (c->unit_run)
        printf("# test unit: each run's median (%d runs base, %d runs new); medians and change "
               "over all samples\n",
               c->nruns[0], c->nruns[1]);
    else
        printf("# test unit: per-iteration samples%s\n",
               c->low_confidence
                   ? "; LOW CONFIDENCE: one run on a side, so p does not see how far runs of the "
                     "same build differ; a verdict to act on needs repeated, alternated runs "
                     "(ci/nccl-regress, docs/regression.md)"
                   : "");
    printf("# noise: medians apart (larger / smaller - 1) by no more than either side's spread, "
           "(p90 - p10) / p50 of the values ranked, are unchanged (within noise)\n");

    /* column widths: the varying key columns, then fixed columns */
    int kw[64] = {0}, nk = c->nkey < 64 ? c->nkey : 64;
    for (int k = 0; k < nk; k++) {
        if (!c->key_varies[k])
            continue;
        kw[k] = (int)strlen(c->key_cols[k]);
        for (long p = 0; p < c->npoints; p++) {
            int l = (int)strlen(c->key_cells[p][k]);
            kw[k] = l > kw[k] ? l : kw[k];
        }
    }
    int mw = 6;
    for (int m = 0; m < c->nmetrics; m++) {
        int l = (int)strlen(c->metrics[m].name) + 1;
        mw = l > mw ? l : mw;
    }
    for (int k = 0; k < nk; k++)
        if (c->key_varies[k])
            printf("%*s ", kw[k], c->key_cols[k]);
    printf("%-*s %9s %12s %12s %8s %11s %8s  %s\n", mw, "metric",
           c->unit_run ? "runs" : "samples", "base_p50_us", "new_p50_us", "change", "spread b/n",
           "p", "verdict");
    int any_ungated = 0;
    for (long i = 0; i < c->nrows; i++) {
        const struct mp_cmp_row *r = &c->rows[i];
        char name[96], n[32], b[32], w[32], ch[32], p[32], nz[40];
        int gated = row_gated(c, r, gate_all);
        any_ungated |= !gated;
        snprintf(name, sizeof name, "%s%s", c->metrics[r->metric].name, gated ? "" : "*");
        snprintf(n, sizeof n, "%ld/%ld", r->units_base, r->units_new);
        fmt_us(b, sizeof b, r->base_med);
        fmt_us(w, sizeof w, r->new_med);
        fmt_change(ch, sizeof ch, r->change);
        fmt_p(p, sizeof p, r->mw.p);
        fmt_noise(nz, sizeof nz, r->noise_base, r->noise_new);
        for (int k = 0; k < nk; k++)
            if (c->key_varies[k])
                printf("%*s ", kw[k], r->metric == 0 ? c->key_cells[r->point][k] : "");
        printf("%-*s %9s %12s %12s %8s %11s %8s  %s", mw, name, n, b, w, ch, nz, p,
               verdict_text(r));
        if (r->reason)
            printf(" (%s)", r->reason);
        else if (not_significant(r, o->threshold / 100.0))
            printf(" (not significant)");
        else if (c->low_confidence &&
                 (r->verdict == MP_CMP_REGRESSION || r->verdict == MP_CMP_IMPROVEMENT))
            printf(" (low confidence: one run per side)");
        putchar('\n');
    }
    if (any_ungated)
        printf("# * secondary metric: reported, does not set the exit status (--gate all)\n");
}

/* ---- CSV ---- */

static int write_csv(const struct mp_cmp *c, const char *dir, int gate_all)
{
    const struct mp_csv_schema *f = &mp_schema_compare; /* its key: the compared files' key */
    int nt = mp_schema_ncols(f), ncols = c->nkey + nt, rc = MP_OK;
    const char **cols = malloc((size_t)ncols * sizeof *cols);
    if (!cols) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (int k = 0; k < c->nkey; k++)
        cols[k] = c->key_cols[k];
    mp_schema_header(f, cols + c->nkey);
    struct mp_csv csv;
    rc = mp_csv_open(&csv, dir, f->file, cols, ncols, 0);
    free(cols);
    if (rc != MP_OK)
        return rc;
    struct mp_row row = {NULL, 0, 0, 0};
    for (long i = 0; i < c->nrows && rc == MP_OK; i++) {
        const struct mp_cmp_row *r = &c->rows[i];
        mp_row_reset(&row);
        for (int k = 0; k < c->nkey; k++)
            mp_row_str(&row, c->key_cells[r->point][k]);
        mp_row_str(&row, c->metrics[r->metric].name);
        mp_row_int(&row, row_gated(c, r, gate_all));
        mp_row_int(&row, r->n_base);
        mp_row_int(&row, r->n_new);
        mp_row_int(&row, r->runs_base);
        mp_row_int(&row, r->runs_new);
        mp_row_str(&row, c->unit_run ? "run" : "iteration");
        mp_row_int(&row, r->units_base);
        mp_row_int(&row, r->units_new);
        mp_row_dbl(&row, r->base_med);
        mp_row_dbl(&row, r->base_lo);
        mp_row_dbl(&row, r->base_hi);
        mp_row_dbl(&row, r->new_med);
        mp_row_dbl(&row, r->new_lo);
        mp_row_dbl(&row, r->new_hi);
        mp_row_dbl(&row, 100.0 * r->change);
        mp_row_dbl(&row, r->mw.u1);
        if (isnan(r->mw.p)) {
            mp_row_str(&row, "");
            mp_row_str(&row, "");
        } else {
            char p[32];
            snprintf(p, sizeof p, "%.6g", r->mw.p);
            mp_row_str(&row, p);
            mp_row_str(&row, r->mw.exact ? "exact" : "normal");
        }
        mp_row_dbl(&row, r->noise_base);
        mp_row_dbl(&row, r->noise_new);
        mp_row_str(&row, mp_cmp_verdict_name(r->verdict));
        mp_row_str(&row, r->reason ? r->reason : "");
        rc = mp_csv_write(&csv, &row);
    }
    mp_row_free(&row);
    mp_csv_close(&csv);
    return rc;
}

/* ---- files written whole: a temporary file renamed into place ---- */

struct outfile {
    FILE *f;
    char *path, *tmp;
};

static int of_open(struct outfile *of, const char *dir, const char *name)
{
    of->f = NULL;
    of->path = of->tmp = NULL;
    if (!(of->path = mp_format("%s/%s", dir, name)) ||
        !(of->tmp = mp_format("%s/.%s.tmp", dir, name))) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    if (!(of->f = fopen(of->tmp, "w"))) {
        mp_error("%s: %s", of->tmp, strerror(errno));
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* Close and rename into place, or remove the temporary file when `rc` is an error. */
static int of_close(struct outfile *of, int rc)
{
    if (of->f) {
        int bad = ferror(of->f);
        if (fclose(of->f) != 0 || bad) {
            if (rc == MP_OK)
                mp_error("%s: write failed", of->tmp);
            rc = rc == MP_OK ? MP_ERR_RUNTIME : rc;
        }
        if (rc == MP_OK && rename(of->tmp, of->path) != 0) {
            mp_error("%s: %s", of->path, strerror(errno));
            rc = MP_ERR_RUNTIME;
        }
        if (rc != MP_OK)
            unlink(of->tmp);
    }
    free(of->path);
    free(of->tmp);
    return rc;
}

/* ---- Markdown ---- */

/* A table cell: '|' escaped, newlines as spaces. */
static void md_cell(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', f);
        else
            fputc(*s, f);
    }
}

/* compare.md's title, result and the table of what was compared: the run directories, the rule,
 * the test unit and the gated metrics. */
static void md_head(FILE *f, const struct mp_cmp *c, const struct cmp_opts *o, int gate_all,
                    const struct counts *n, int status)
{
    fprintf(f, "# Regression check: %s\n\n", c->tool);
    if (n->regress)
        fprintf(f, "**Result: REGRESSION.** %ld of %ld gated comparisons regressed (exit status "
                   "%d).\n\n",
                n->regress, n->gated, status);
    else
        fprintf(f, "**Result: no regression** in %ld gated comparisons (exit status %d).\n\n",
                n->gated, status);
    fprintf(f, "%ld regression(s) in gated metrics, %ld in secondary metrics, %ld improvement(s), "
               "%ld unchanged, %ld inconclusive.\n\n",
            n->regress, n->regress_ungated, n->improve, n->unchanged, n->inconclusive);
    fprintf(f, "| | |\n|---|---|\n| base | `");
    md_cell(f, c->dir[0]);
    fprintf(f, "` |\n| new | `");
    md_cell(f, c->dir[1]);
    fprintf(f, "` |\n| rule | regression: median change ≥ +%g %% and two-sided Mann–Whitney U "
               "p < %g; improvement: change ≤ −%g %% and p < %g; inconclusive: fewer than %d "
               "%s on a side, too few to reach p < %g, a point on one side only, or a base "
               "median ≤ 0; otherwise unchanged |\n",
            o->threshold, o->alpha, o->threshold, o->alpha, MP_CMP_MIN_SAMPLES,
            c->unit_run ? "runs" : "samples", o->alpha);
    if (c->unit_run)
        fprintf(f, "| test unit | each run's median at the point (%d runs base, %d runs new); "
                   "medians and change over all per-iteration samples |\n",
                c->nruns[0], c->nruns[1]);
    else
        fprintf(f, "| test unit | per-iteration samples%s |\n",
                c->nruns[0] == 1 || c->nruns[1] == 1
                    ? " (one run on a side: the p-value does not see run-to-run variation)"
                    : "");
    fprintf(f, "| gated metrics |");
    for (int m = 0; m < c->nmetrics; m++)
        if (gate_all || c->metrics[m].primary)
            fprintf(f, " %s", c->metrics[m].name);
    fprintf(f, " |\n\n");
}

/* compare.md's warnings (none: no section) and the runs' facts from run.json side by side. */
static void md_warnings_and_runs(FILE *f, const struct mp_cmp *c)
{
    if (c->nwarn) {
        fprintf(f, "## Warnings\n\n");
        for (int i = 0; i < c->nwarn; i++) {
            fprintf(f, "- ");
            md_cell(f, c->warn[i]);
            fputc('\n', f);
        }
        fputc('\n', f);
    }

    fprintf(f, "## Runs (from run.json)\n\n| | base | new | |\n|---|---|---|---|\n");
    for (int i = 0; i < c->nfacts; i++) {
        const struct mp_cmp_fact *x = &c->facts[i];
        fprintf(f, "| %s | ", x->label);
        md_cell(f, x->base);
        fprintf(f, " | ");
        md_cell(f, x->new_);
        fprintf(f, " | %s |\n",
                !x->differs                    ? ""
                : x->kind == MP_FACT_LIBRARY   ? "library under test"
                : x->kind == MP_FACT_SAME      ? "**differs**"
                                               : "");
    }
}

/* One row of compare.md's results table: the key cells that vary, the metric (secondary when not
 * gated), the units on each side, both medians with their intervals, the change, p, the test and
 * the verdict with its reason. */
static void md_result_row(FILE *f, const struct mp_cmp *c, const struct cmp_opts *o, int gate_all,
                          const struct mp_cmp_row *r)
{
    char b[32], bl[32], bh[32], w[32], wl[32], wh[32], ch[32], p[32];
    fmt_us(b, sizeof b, r->base_med);
    fmt_us(bl, sizeof bl, r->base_lo);
    fmt_us(bh, sizeof bh, r->base_hi);
    fmt_us(w, sizeof w, r->new_med);
    fmt_us(wl, sizeof wl, r->new_lo);
    fmt_us(wh, sizeof wh, r->new_hi);
    fmt_change(ch, sizeof ch, r->change);
    fmt_p(p, sizeof p, r->mw.p);
    fputc('|', f);
    for (int k = 0; k < c->nkey; k++)
        if (c->key_varies[k]) {
            fputc(' ', f);
            md_cell(f, c->key_cells[r->point][k]);
            fprintf(f, " |");
        }
    int gated = row_gated(c, r, gate_all);
    fprintf(f, " %s%s | %ld/%ld | %s [%s, %s] | %s [%s, %s] | %s | %s | %s | ",
            c->metrics[r->metric].name, gated ? "" : " (secondary)", r->units_base, r->units_new,
            b, bl, bh, w, wl, wh, ch, p, isnan(r->mw.p) ? "-" : r->mw.exact ? "exact" : "normal");
    if (r->verdict == MP_CMP_REGRESSION)
        fprintf(f, "**regression**");
    else
        fprintf(f, "%s", mp_cmp_verdict_name(r->verdict));
    if (r->reason)
        fprintf(f, " (%s)", r->reason);
    else if (not_significant(r, o->threshold / 100.0))
        fprintf(f, " (not significant)");
    fprintf(f, " |\n");
}

/* compare.md's results: what the columns hold, the table's header and a row per comparison. */
static void md_results(FILE *f, const struct mp_cmp *c, const struct cmp_opts *o, int gate_all)
{
    fprintf(f, "\n## Results\n\nMedians of the per-iteration samples in µs, with their 95 %% "
               "confidence interval (order statistics); p of the two-sided Mann–Whitney U test "
               "(exact or normal approximation).\n\n|");
    for (int k = 0; k < c->nkey; k++)
        if (c->key_varies[k])
            fprintf(f, " %s |", c->key_cols[k]);
    fprintf(f, " metric | %s base/new | base median [CI] | new median [CI] | change | p | test | "
               "verdict |\n|",
            c->unit_run ? "runs" : "samples");
    for (int k = 0; k < c->nkey; k++)
        if (c->key_varies[k])
            fprintf(f, "---:|");
    fprintf(f, "---|---:|---:|---:|---:|---:|---|---|\n");
    for (long i = 0; i < c->nrows; i++)
        md_result_row(f, c, o, gate_all, &c->rows[i]);
}

/* compare.md into dir, written whole (a temporary file renamed): the head, warnings, runs and
 * results. MP_OK, or MP_ERR_RUNTIME after a message when it cannot be written. */
static int write_markdown(const struct mp_cmp *c, const char *dir, const struct cmp_opts *o,
                          int gate_all, const struct counts *n, int status)
{
    struct outfile of;
    int rc = of_open(&of, dir, "compare.md");
    if (rc != MP_OK)
        return of_close(&of, rc);
    md_head(of.f, c, o, gate_all, n, status);
    md_warnings_and_runs(of.f, c);
    md_results(of.f, c, o, gate_all);
    fprintf(of.f, "\nFiles: `compare.csv` (every row above with all key columns), "
                  "`compare.junit.xml`, "
                  "`compare_plot.gp` + `compare_plot.dat` (gnuplot), `compare.svg`.\n");
    return of_close(&of, MP_OK);
}

/* ---- JUnit XML ---- */

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if ((unsigned char)*s < 0x20 && *s != '\t' && *s != '\n')
                fputc(' ', f); /* not allowed in XML 1.0 */
            else
                fputc(*s, f);
        }
    }
}

/* One testcase per point × metric; a failure for a gated regression (and, with --strict, a gated
 * inconclusive comparison); skipped for other inconclusive ones, which are never passes. */
static int write_junit(const struct mp_cmp *c, const char *dir, const struct cmp_opts *o,
                       int gate_all)
{
    struct outfile of;
    int rc = of_open(&of, dir, "compare.junit.xml");
    if (rc != MP_OK)
        return of_close(&of, rc);
    FILE *f = of.f;
    long failures = 0, skipped = 0;
    for (long i = 0; i < c->nrows; i++) {
        const struct mp_cmp_row *r = &c->rows[i];
        int gated = row_gated(c, r, gate_all);
        if (gated && (r->verdict == MP_CMP_REGRESSION ||
                      (o->strict && r->verdict == MP_CMP_INCONCLUSIVE)))
            failures++;
        else if (r->verdict == MP_CMP_INCONCLUSIVE)
            skipped++;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites name=\"moeperf-compare\" tests=\"%ld\" failures=\"%ld\" errors=\"0\" "
               "skipped=\"%ld\">\n",
            c->nrows, failures, skipped);
    fprintf(f, "  <testsuite name=\"%s\" tests=\"%ld\" failures=\"%ld\" errors=\"0\" "
               "skipped=\"%ld\" time=\"0\">\n",
            c->tool, c->nrows, failures, skipped);
    fprintf(f, "    <properties>\n");
    fprintf(f, "      <property name=\"base\" value=\"");
    xml_text(f, c->dir[0]);
    fprintf(f, "\"/>\n      <property name=\"new\" value=\"");
    xml_text(f, c->dir[1]);
    fprintf(f, "\"/>\n      <property name=\"threshold_pct\" value=\"%g\"/>\n", o->threshold);
    fprintf(f, "      <property name=\"alpha\" value=\"%g\"/>\n", o->alpha);
    for (int i = 0; i < c->nfacts; i++)
        if (c->facts[i].kind == MP_FACT_LIBRARY) {
            fprintf(f, "      <property name=\"base %s\" value=\"", c->facts[i].label);
            xml_text(f, c->facts[i].base);
            fprintf(f, "\"/>\n      <property name=\"new %s\" value=\"", c->facts[i].label);
            xml_text(f, c->facts[i].new_);
            fprintf(f, "\"/>\n");
        }
    fprintf(f, "    </properties>\n");
    for (long i = 0; i < c->nrows; i++) {
        const struct mp_cmp_row *r = &c->rows[i];
        int gated = row_gated(c, r, gate_all);
        char *label = mp_cmp_point_label(c, r->point);
        char b[32], w[32], ch[32], p[32], detail[256];
        if (!label)
            return of_close(&of, MP_ERR_RUNTIME);
        fmt_us(b, sizeof b, r->base_med);
        fmt_us(w, sizeof w, r->new_med);
        fmt_change(ch, sizeof ch, r->change);
        fmt_p(p, sizeof p, r->mw.p);
        snprintf(detail, sizeof detail,
                 "%s: median %s us -> %s us (%s), Mann-Whitney p = %s, %s %ld/%ld: %s%s%s",
                 c->metrics[r->metric].name, b, w, ch, p, c->unit_run ? "runs" : "samples",
                 r->units_base, r->units_new,
                 mp_cmp_verdict_name(r->verdict), r->reason ? ", " : "",
                 r->reason ? r->reason : "");
        fprintf(f, "    <testcase classname=\"%s.%s\" name=\"", c->tool,
                c->metrics[r->metric].name);
        xml_text(f, label);
        fprintf(f, "\" time=\"0\">");
        free(label);
        if (gated && r->verdict == MP_CMP_REGRESSION) {
            fprintf(f, "\n      <failure type=\"regression\" message=\"");
            xml_text(f, detail);
            fprintf(f, "\"/>\n    ");
        } else if (gated && o->strict && r->verdict == MP_CMP_INCONCLUSIVE) {
            fprintf(f, "\n      <failure type=\"inconclusive\" message=\"");
            xml_text(f, detail);
            fprintf(f, "\"/>\n    ");
        } else if (r->verdict == MP_CMP_INCONCLUSIVE) {
            fprintf(f, "\n      <skipped message=\"");
            xml_text(f, detail);
            fprintf(f, "\"/>\n    ");
        } else {
            fprintf(f, "\n      <system-out>");
            xml_text(f, detail);
            if (!gated && r->verdict == MP_CMP_REGRESSION)
                xml_text(f, " (secondary metric, not gated)");
            fprintf(f, "</system-out>\n    ");
        }
        fprintf(f, "</testcase>\n");
    }
    fprintf(f, "  </testsuite>\n</testsuites>\n");
    return of_close(&of, MP_OK);
}

/* ---- plot: gnuplot script + data, rendered to SVG when gnuplot is installed ---- */

/* The values of the varying key columns of a point, for x tic labels (quotes replaced). */
static void tic_label(const struct mp_cmp *c, long p, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < c->nkey && len + 1 < n; k++)
        if (c->key_varies[k]) {
            int w = snprintf(buf + len, n - len, "%s%s", len ? " " : "", c->key_cells[p][k]);
            len = w < 0 ? n : len + (size_t)w;
        }
    if (len >= n)
        len = n - 1;
    if (!buf[0])
        snprintf(buf, n, "%ld", p + 1);
    for (char *s = buf; *s; s++)
        if (*s == '"' || *s == '\\')
            *s = '\'';
}

static int write_plot(const struct mp_cmp *c, const char *dir)
{
    struct outfile dat, gp;
    int rc = of_open(&dat, dir, "compare_plot.dat");
    if (rc != MP_OK)
        return of_close(&dat, rc);
    fprintf(dat.f, "# compare_plot.dat - base and new medians with 95%% CI per point, one block "
                   "per metric (gnuplot index = metric)\n");
    for (int m = 0; m < c->nmetrics; m++) {
        fprintf(dat.f, "%s# metric %s\n# point label base_med base_lo base_hi new_med new_lo "
                       "new_hi verdict(0 unchanged, 1 regression, 2 improvement, 3 inconclusive)\n",
                m ? "\n\n" : "", c->metrics[m].name);
        for (long p = 0; p < c->npoints; p++) {
            const struct mp_cmp_row *r = &c->rows[p * c->nmetrics + m];
            char label[256];
            tic_label(c, p, label, sizeof label);
            fprintf(dat.f, "%ld \"%s\" %.6g %.6g %.6g %.6g %.6g %.6g %d\n", p, label, r->base_med,
                    r->base_lo, r->base_hi, r->new_med, r->new_lo, r->new_hi, (int)r->verdict);
        }
    }
    if ((rc = of_close(&dat, MP_OK)) != MP_OK)
        return rc;

    if ((rc = of_open(&gp, dir, "compare_plot.gp")) != MP_OK)
        return of_close(&gp, rc);
    FILE *f = gp.f;
    char xlabel[512] = "";
    for (int k = 0; k < c->nkey; k++)
        if (c->key_varies[k]) {
            size_t l = strlen(xlabel);
            snprintf(xlabel + l, sizeof xlabel - l, "%s%s", l ? " " : "", c->key_cols[k]);
        }
    fprintf(f, "# compare_plot.gp - base vs new medians with their 95%% confidence intervals, one "
               "panel per metric.\n# Redraw compare.svg with: gnuplot compare_plot.gp (in this "
               "directory).\n");
    fprintf(f, "set terminal svg size 1000,%d dynamic font 'sans,11' background rgb 'white'\n",
            120 + 300 * c->nmetrics);
    fprintf(f, "set output 'compare.svg'\nset termoption noenhanced\nset datafile missing 'nan'\n");
    fprintf(f, "set multiplot layout %d,1 title '%s: base vs new, median and 95%% CI per point'\n",
            c->nmetrics, c->tool);
    fprintf(f, "set xrange [-0.6:%ld.4]\nset xtics rotate by -30 font ',9'\nset grid ytics\n",
            c->npoints - 1);
    fprintf(f, "set key outside right top\nset xlabel 'point (%s)'\n", xlabel[0] ? xlabel : "key");
    for (int m = 0; m < c->nmetrics; m++) {
        int positive = 1, has_reg = 0, has_imp = 0;
        for (long p = 0; p < c->npoints; p++) {
            const struct mp_cmp_row *r = &c->rows[p * c->nmetrics + m];
            const double v[] = {r->base_med, r->base_lo, r->new_med, r->new_lo};
            for (int i = 0; i < 4; i++)
                if (!isnan(v[i]) && v[i] <= 0)
                    positive = 0;
            has_reg |= r->verdict == MP_CMP_REGRESSION;
            has_imp |= r->verdict == MP_CMP_IMPROVEMENT;
        }
        fprintf(f, "set ylabel '%s (us)'\n%s\n", c->metrics[m].name,
                positive ? "set logscale y" : "unset logscale y");
        fprintf(f, "plot 'compare_plot.dat' index %d using 1:(1/0):xtic(2) notitle, \\\n"
                   "     '' index %d using ($1-0.12):3:4:5 with yerrorbars pt 7 ps 0.6 lc rgb "
                   "'#1f77b4' title 'base', \\\n"
                   "     '' index %d using ($1+0.12):6:7:8 with yerrorbars pt 5 ps 0.6 lc rgb "
                   "'#d62728' title 'new'",
                m, m, m);
        if (has_reg)
            fprintf(f, ", \\\n     '' index %d using ($1+0.12):($9 == 1 ? $6 : 1/0) with points "
                       "pt 6 ps 2 lc rgb '#d62728' title 'regression'",
                    m);
        if (has_imp)
            fprintf(f, ", \\\n     '' index %d using ($1+0.12):($9 == 2 ? $6 : 1/0) with points "
                       "pt 6 ps 2 lc rgb '#2ca02c' title 'improvement'",
                    m);
        fputc('\n', f);
    }
    fprintf(f, "unset multiplot\n");
    return of_close(&gp, MP_OK);
}

/* Run gnuplot in `dir`. Returns 1 when compare.svg was drawn, 0 otherwise (a note printed). */
static int render_svg(const char *dir)
{
    char *svg = mp_format("%s/compare.svg", dir);
    if (!svg)
        return 0;
    unlink(svg); /* never leave an older plot next to new results */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (chdir(dir) != 0)
            _exit(126);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, STDOUT_FILENO);
        execlp("gnuplot", "gnuplot", "compare_plot.gp", (char *)NULL);
        _exit(127);
    }
    int st = 0, ok = 0;
    if (pid < 0)
        mp_warn("cannot start gnuplot: %s; compare.svg not drawn", strerror(errno));
    if (pid > 0 && waitpid(pid, &st, 0) == pid) {
        struct stat sb;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
            fprintf(stderr, "%s: note: gnuplot not found; compare.svg not drawn (the script "
                            "compare_plot.gp is there)\n",
                    mp_prog());
        else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || stat(svg, &sb) != 0)
            mp_warn("gnuplot failed on %s/compare_plot.gp; compare.svg not drawn", dir);
        else
            ok = 1;
    }
    free(svg);
    return ok;
}

int main(int argc, char **argv)
{
    struct cmp_opts o;
    struct mp_cmp c;
    char **pos = NULL;
    int npos = 0, rc;
    mp_log_init("moeperf-compare", -1);
    rc = mp_opts_parse(options, &o, argc, argv, summary, &pos, &npos);
    if (rc == MP_HELP)
        return 0;
    if (rc != MP_OK)
        return MP_ERR_USAGE;
    memset(&c, 0, sizeof c);
    if (npos != 2) {
        mp_usage("expected two run directories, BASE_DIR NEW_DIR; got %d argument(s) (see --help)",
                 npos);
        rc = MP_ERR_USAGE;
        goto out;
    }
    struct stat sb, sn;
    if (stat(pos[0], &sb) == 0 && stat(pos[1], &sn) == 0 && sb.st_dev == sn.st_dev &&
        sb.st_ino == sn.st_ino) {
        mp_usage("BASE_DIR and NEW_DIR are the same directory ('%s'): a run compared with itself "
                 "shows no change whatever it measured; give the runs before and after the change",
                 pos[1]);
        rc = MP_ERR_USAGE;
        goto out;
    }
    int gate_all = strcmp(o.gate, "all") == 0;
    struct mp_cmp_opts co = {o.threshold / 100.0, o.alpha,
                             strcmp(o.tool, "auto") == 0 ? NULL : o.tool,
                             strcmp(o.unit, "run") == 0         ? MP_CMP_UNIT_RUN
                             : strcmp(o.unit, "iteration") == 0 ? MP_CMP_UNIT_ITERATION
                                                                : MP_CMP_UNIT_AUTO};
    if ((rc = mp_cmp_load(pos[0], pos[1], &co, &c)) != MP_OK)
        goto out;
    if (!o.out && !(o.out = default_out(pos[1]))) {
        rc = MP_ERR_USAGE;
        goto out;
    }

    struct counts n = {0};
    for (long i = 0; i < c.nrows; i++) {
        const struct mp_cmp_row *r = &c.rows[i];
        int gated = row_gated(&c, r, gate_all);
        n.gated += gated;
        switch (r->verdict) {
        case MP_CMP_REGRESSION:
            if (gated)
                n.regress++;
            else
                n.regress_ungated++;
            break;
        case MP_CMP_IMPROVEMENT: n.improve++; break;
        case MP_CMP_UNCHANGED: n.unchanged++; break;
        case MP_CMP_INCONCLUSIVE:
            n.inconclusive++;
            n.inconclusive_gated += gated;
            break;
        }
    }
    int status = n.regress || (o.strict && n.inconclusive_gated) ? MP_ERR_REGRESSION : MP_OK;

    if (!o.quiet)
        print_table(&c, &o, gate_all);
    fflush(stdout);
    MP_CHECK(mp_mkdir_p(o.out, "--out"));
    MP_CHECK(write_csv(&c, o.out, gate_all));
    MP_CHECK(write_markdown(&c, o.out, &o, gate_all, &n, status));
    MP_CHECK(write_junit(&c, o.out, &o, gate_all));
    MP_CHECK(write_plot(&c, o.out));
    int svg = o.no_svg ? 0 : render_svg(o.out);
    if (!o.quiet) {
        printf("# %ld regression(s) in gated metrics, %ld in secondary metrics, %ld "
               "improvement(s), %ld unchanged, %ld inconclusive\n",
               n.regress, n.regress_ungated, n.improve, n.unchanged, n.inconclusive);
        printf("# wrote %s/{compare.csv,compare.md,compare.junit.xml,compare_plot.gp,"
               "compare_plot.dat%s}\n",
               o.out, svg ? ",compare.svg" : "");
        printf("# verdict: %s (exit %d)\n", status == MP_OK ? "no regression" : "REGRESSION",
               status);
    }
    rc = status;
out:
    mp_cmp_free(&c);
    mp_opts_free(options, &o);
    free(pos);
    return rc;
}
