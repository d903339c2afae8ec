/* moeperf-report - turns run directories into a capacity-planning report: one self-contained HTML
 * page (figures as inline SVG, no network) and a Markdown version, with the environment, the
 * degradation curves, tables of medians and p99, and findings computed from the data. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "error.h"
#include "files.h"
#include "options.h"
#include "report.h"
#include "report_doc.h"
#include "report_findings.h"
#include "report_tables.h"
#include "report_plan.h"
#include "srcroot.h"
#include "results.h"
#include "schema.h"
#include "sort.h"

struct report_opts {
    char *out, *md, *reference, *title;
    int no_reference;
};

#define O(f) offsetof(struct report_opts, f)
static const struct mp_opt options[] = {
    {"out", MP_OPT_STRING, O(out), NULL, 1.0, 0.0, NULL, "FILE.html",
     "write the self-contained HTML report (figures inline, no network) to FILE.html"},
    {"md", MP_OPT_STRING, O(md), NULL, 1.0, 0.0, NULL, "FILE.md",
     "write the Markdown report to FILE.md, its figures as SVG files in FILE_plots/"},
    {"reference", MP_OPT_STRING, O(reference), NULL, 1.0, 0.0, NULL, "CSV",
     "published table drawn beside the measurements (batch and metric columns) "
     "[default: plots/seed-h100-64gpu.csv of the source tree]"},
    {"no-reference", MP_OPT_FLAG, O(no_reference), NULL, 1.0, 0.0, NULL, NULL,
     "draw no reference table"},
    {"title", MP_OPT_STRING, O(title), "MoE layer capacity-planning report", 1.0, 0.0, NULL,
     "TEXT", "the report's title"},
    {NULL, 0, 0, NULL, 0, 0, NULL, NULL, NULL},
};

static const char summary[] =
    "       moeperf-report RUN_DIR... --out FILE.html [--md FILE.md]\n\n"
    "Reads moeperf run directories (run.json, layer.csv, a2a.csv, ffn.csv; any subset; measured\n"
    "and model runs alike) and writes a report: environment, the figures of plots/render, tables\n"
    "of medians and p99, and findings (batch cap, knee, bubble, the effect of replication and of\n"
    "overlap, those remedies ranked together, the dedup modes against pair, the planner's\n"
    "projection beside the measurement).";

/* The figures of plots/render, in report order, with what each shows: the rows of
 * plots/figures.csv, the table render draws from (loaded by figures_load). */
struct figure {
    const char *name, *title, *caption;
};
#define MAX_GROUP_COLS 32 /* a figure's group and extra columns together */
static struct figure *figures;
static int NFIG;
static struct mp_table figure_table;

/* Read ROOT/plots/figures.csv into figures[0..NFIG). Returns MP_OK, or an error naming the file
 * (missing, malformed, or without a name, title or caption column). */
static int figures_load(const char *root)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/plots/figures.csv", root);
    int rc = mp_table_read(path, &figure_table);
    if (rc != MP_OK)
        return rc;
    int cn = mp_table_col(&figure_table, "name"), ct = mp_table_col(&figure_table, "title"),
        cc = mp_table_col(&figure_table, "caption");
    if (cn < 0 || ct < 0 || cc < 0) {
        mp_error("%s: needs the columns name, title and caption", path);
        return MP_ERR_RUNTIME;
    }
    figures = calloc((size_t)(figure_table.nrows > 0 ? figure_table.nrows : 1), sizeof *figures);
    if (!figures) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (long i = 0; i < figure_table.nrows; i++)
        figures[i] = (struct figure){figure_table.cells[i][cn], figure_table.cells[i][ct],
                                     figure_table.cells[i][cc]};
    NFIG = (int)figure_table.nrows;
    return MP_OK;
}

/* The columns of the first figure drawn from `csv`, for make_groups: "source" first, then its other
 * group columns (*nbare of them, labelled bare), then its extra columns, the strings pointing into
 * *spec (heap, the caller frees). Returns how many, or -1 (no such figure, no source column, out
 * of memory) after a message. */
static int figure_cols(const char *csv, const char **cols, int *nbare, char **spec)
{
    int ccsv = mp_table_col(&figure_table, "csv"), cg = mp_table_col(&figure_table, "group"),
        ce = mp_table_col(&figure_table, "extra");
    for (long i = 0; ccsv >= 0 && cg >= 0 && ce >= 0 && i < figure_table.nrows; i++) {
        if (strcmp(figure_table.cells[i][ccsv], csv) != 0)
            continue;
        size_t lg = strlen(figure_table.cells[i][cg]), le = strlen(figure_table.cells[i][ce]);
        if (!(*spec = malloc(lg + le + 2))) {
            mp_error("out of memory");
            return -1;
        }
        memcpy(*spec, figure_table.cells[i][cg], lg);
        (*spec)[lg] = '\0';
        memcpy(*spec + lg + 1, figure_table.cells[i][ce], le + 1);
        int n = 1, have_source = 0;
        cols[0] = MPC_source;
        char *save = NULL;
        for (char *w = strtok_r(*spec, " ", &save); w && n < MAX_GROUP_COLS;
             w = strtok_r(NULL, " ", &save))
            if (strcmp(w, MPC_source) == 0)
                have_source = 1;
            else
                cols[n++] = w;
        *nbare = n - 1;
        for (char *w = strtok_r(*spec + lg + 1, " ", &save); w && n < MAX_GROUP_COLS;
             w = strtok_r(NULL, " ", &save))
            cols[n++] = w;
        if (have_source)
            return n;
        mp_error("plots/figures.csv: the %s figure's group has no source column", csv);
        free(*spec);
        *spec = NULL;
        return -1;
    }
    mp_error("plots/figures.csv: no figure of %s (the columns csv, group and extra)", csv);
    return -1;
}

static void figures_free(void)
{
    free(figures);
    figures = NULL;
    NFIG = 0;
    mp_table_free(&figure_table);
}

/* ---- locating the source tree (plots/render and the default reference) ---- */


/* ---- running plots/render ---- */

/* Run `bash render --format svg --out tmp [--reference ref --reference-label label] dirs...`.
 * Returns MP_OK, MP_ERR_USAGE when render refused its input (exit 2), else MP_ERR_RUNTIME. */
static int run_render(const char *render, const char *tmp, const char *ref, const char *label,
                      char **dirs, int ndirs)
{
    const char **argv = calloc((size_t)ndirs + 16, sizeof *argv);
    if (!argv) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    int a = 0;
    argv[a++] = "bash";
    argv[a++] = render;
    argv[a++] = "--format";
    argv[a++] = "svg";
    argv[a++] = "--out";
    argv[a++] = tmp;
    argv[a++] = "--timeline"; /* the largest bubble of each curve: timeline-K.svg */
    argv[a++] = "curves";
    if (ref) {
        argv[a++] = "--reference";
        argv[a++] = ref;
        argv[a++] = "--reference-label";
        argv[a++] = label;
    }
    argv[a++] = "--";
    for (int i = 0; i < ndirs; i++)
        argv[a++] = dirs[i];
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        mp_error("fork: %s", strerror(errno));
        free(argv);
        return MP_ERR_RUNTIME;
    }
    if (pid == 0) {
        FILE *null = freopen("/dev/null", "w", stdout); /* render lists what it drew */
        (void)null;
        execvp("bash", (char *const *)argv);
        fprintf(stderr, "moeperf-report: cannot run bash %s: %s\n", render, strerror(errno));
        _exit(127);
    }
    free(argv);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            mp_error("waitpid: %s", strerror(errno));
            return MP_ERR_RUNTIME;
        }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return MP_OK;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2)
        return MP_ERR_USAGE; /* render named the file and column */
    mp_error("%s failed (status %d); the figures could not be drawn", render,
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return MP_ERR_RUNTIME;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[PATH_MAX];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- groups of a2a.csv and ffn.csv rows ---- */

/* A group's cell of `col` (its first row's), "" where its file lacks the column. */
static const char *group_cell(const struct group *g, const char *col)
{
    int c = mp_table_col(g->t, col);
    return c < 0 ? "" : g->t->cells[g->rows[0]][c];
}

static const struct mp_table *sort_table;
static int sort_col;
static int cmp_rows(const void *a, const void *b)
{
    double x = strtod(sort_table->cells[*(const long *)a][sort_col], NULL);
    double y = strtod(sort_table->cells[*(const long *)b][sort_col], NULL);
    return (x > y) - (x < y);
}

static void groups_free(struct group *g, int n)
{
    for (int i = 0; g && i < n; i++) {
        free(g[i].label);
        free(g[i].workload);
        free(g[i].rows);
    }
    free(g);
}

/* The curve labels of groups g[0..n) (docs/plots.md, "Curve labels"), as plots/render titles the
 * curves of their figure: the cells of cols[1..ncols) that differ between the groups, the first
 * nbare of them bare and the rest as name=value (cols[1] alone when none differs), the run
 * directory's name where two groups share every cell, and "(source)", cols[0], at the end. */
static int label_groups(struct group *g, int n, const char *const *cols, int ncols, int nbare)
{
    int show[MAX_GROUP_COLS], nshow = 0;
    for (int k = 1; k < ncols; k++) {
        /* backend and comm: only where they differ within one source (label_series) */
        int by_source = !strcmp(cols[k], MPC_backend) || !strcmp(cols[k], MPC_comm), differs = 0;
        for (int i = 0; i < n && !differs; i++)
            for (int j = i + 1; j < n && !differs; j++)
                differs = strcmp(group_cell(&g[i], cols[k]), group_cell(&g[j], cols[k])) != 0 &&
                          (!by_source ||
                           !strcmp(group_cell(&g[i], cols[0]), group_cell(&g[j], cols[0])));
        if (differs)
            show[nshow++] = k;
    }
    if (nshow == 0 && ncols > 1)
        show[nshow++] = 1;
    for (int i = 0; i < n; i++) {
        char label[1024] = "";
        size_t used = 0;
        for (int j = 0; j < nshow && used < sizeof label; j++) {
            int k = show[j];
            const char *v = *group_cell(&g[i], cols[k]) ? group_cell(&g[i], cols[k]) : "-";
            used += (size_t)snprintf(label + used, sizeof label - used, "%s%s%s%s", j ? " " : "",
                                     k <= nbare ? "" : cols[k], k <= nbare ? "" : "=", v);
        }
        for (int o = 0; o < n && used < sizeof label; o++) {
            int same = o != i;
            for (int k = 0; k < ncols && same; k++)
                same = strcmp(group_cell(&g[i], cols[k]), group_cell(&g[o], cols[k])) == 0;
            if (same) {
                const char *base = strrchr(g[i].run->dir, '/');
                base = base && base[1] ? base + 1 : g[i].run->dir;
                used += (size_t)snprintf(label + used, sizeof label - used, " [%s]", base);
                break;
            }
        }
        if (used < sizeof label)
            snprintf(label + used, sizeof label - used, " (%s)", group_cell(&g[i], cols[0]));
        char all[2048] = "";
        used = 0;
        for (int k = 1; k < ncols && used < sizeof all; k++)
            if (*group_cell(&g[i], cols[k]))
                used += (size_t)snprintf(all + used, sizeof all - used, "%s%s=%s", used ? " " : "",
                                         cols[k], group_cell(&g[i], cols[k]));
        free(g[i].label);
        free(g[i].workload);
        g[i].workload = strdup(all);
        if (!(g[i].label = strdup(label)) || !g[i].workload) {
            mp_error("out of memory");
            return MP_ERR_RUNTIME;
        }
    }
    return MP_OK;
}

/* Rows of the a2a (which = 1) or ffn (which = 2) table of every run, grouped by the `cols` cells
 * (a column a file lacks counts as empty), each group sorted by `xcol` and labelled by
 * label_groups (cols[1..nbare] bare). */
static int make_groups(const struct rp_run *runs, int nruns, int which, const char *const *cols,
                       int ncols, int nbare, const char *xcol, struct group **out, int *nout)
{
    struct group *g = NULL;
    int n = 0;
    for (int r = 0; r < nruns; r++) {
        const struct mp_table *t = which == 1 ? &runs[r].a2a : &runs[r].ffn;
        if (!t->cols)
            continue;
        int c[MAX_GROUP_COLS];
        for (int k = 0; k < ncols && k < MAX_GROUP_COLS; k++)
            c[k] = mp_table_col(t, cols[k]);
        for (long row = 0; row < t->nrows; row++) {
            int found = -1;
            for (int i = 0; i < n && found < 0; i++) {
                if (g[i].t != t)
                    continue;
                int eq = 1;
                for (int k = 0; k < ncols && eq; k++)
                    eq = c[k] < 0 || strcmp(t->cells[g[i].rows[0]][c[k]], t->cells[row][c[k]]) == 0;
                if (eq)
                    found = i;
            }
            if (found < 0) {
                struct group *ng = realloc(g, (size_t)(n + 1) * sizeof *ng);
                if (!ng)
                    goto oom;
                g = ng;
                memset(&g[n], 0, sizeof g[n]);
                g[n].run = &runs[r];
                g[n].t = t;
                found = n++;
            }
            long *nr = realloc(g[found].rows, (size_t)(g[found].n + 1) * sizeof *nr);
            if (!nr)
                goto oom;
            g[found].rows = nr;
            g[found].rows[g[found].n++] = row;
        }
    }
    for (int i = 0; i < n; i++) {
        sort_table = g[i].t;
        sort_col = mp_table_col(g[i].t, xcol);
        qsort(g[i].rows, (size_t)g[i].n, sizeof *g[i].rows, cmp_rows);
    }
    if (label_groups(g, n, cols, ncols, nbare) != MP_OK) {
        groups_free(g, n);
        return MP_ERR_RUNTIME;
    }
    *out = g;
    *nout = n;
    return MP_OK;
oom:
    groups_free(g, n);
    mp_error("out of memory");
    return MP_ERR_RUNTIME;
}

/* ---- the reference table ---- */

static void reference_free(struct reference *r)
{
    free(r->path);
    free(r->label);
    mp_table_free(&r->t);
    free(r->batch);
    free(r->ratio);
    free(r->lat);
    free(r->bubble);
    memset(r, 0, sizeof *r);
}

static int reference_load(const char *path, struct reference *r)
{
    memset(r, 0, sizeof *r);
    if (!mp_is_regular_file(path)) {
        mp_usage("--reference '%s': no such file; expected a CSV with a batch column", path);
        return MP_ERR_USAGE;
    }
    int rc = mp_table_read(path, &r->t);
    if (rc != MP_OK)
        return rc;
    if (mp_table_col(&r->t, MPC_batch) < 0) {
        mp_usage("--reference '%s': no column \"batch\"; a reference table has batch and metric "
                 "columns (comm_comp_ratio, bubble_ratio, ffn_us, comm_us, layer_us)", path);
        mp_table_free(&r->t);
        return MP_ERR_USAGE;
    }
    r->path = strdup(path);
    r->label = rp_csv_label(path);
    if (!r->label) {
        const char *base = strrchr(path, '/');
        char buf[512];
        snprintf(buf, sizeof buf, "reference: %.480s", base ? base + 1 : path);
        r->label = strdup(buf);
    }
    size_t n = (size_t)r->t.nrows + 1;
    r->batch = calloc(n, sizeof *r->batch);
    r->ratio = calloc(n, sizeof *r->ratio);
    r->lat = calloc(n, sizeof *r->lat);
    r->bubble = calloc(n, sizeof *r->bubble);
    if (!r->path || !r->label || !r->batch || !r->ratio || !r->lat || !r->bubble) {
        reference_free(r);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    r->n = (int)r->t.nrows;
    for (int i = 0; i < r->n; i++) {
        r->batch[i] = num(&r->t, i, MPC_batch);
        r->ratio[i] = num(&r->t, i, MPC_comm_comp_ratio);
        r->bubble[i] = num(&r->t, i, MPC_bubble_ratio);
        r->lat[i] = mp_table_col(&r->t, MPC_layer_us) >= 0
                        ? num(&r->t, i, MPC_layer_us)
                        : num(&r->t, i, MPC_ffn_us) + num(&r->t, i, MPC_comm_us);
    }
    return MP_OK;
}

/* ---- the page ---- */

static const char css[] =
    "body{font-family:system-ui,-apple-system,\"Segoe UI\",\"DejaVu Sans\",sans-serif;"
    "margin:0;background:#fafafa;color:#1d1d1d;line-height:1.45}"
    "main{max-width:1260px;margin:0 auto;padding:24px 32px;background:#fff}"
    "h1{font-size:1.8em;margin:0.2em 0}h2{border-bottom:2px solid #0072b2;padding-bottom:4px;"
    "margin-top:1.6em}h3{font-size:1.05em;margin:1.2em 0 0.4em}"
    ".meta{color:#555}ul.findings li{margin:0.25em 0}"
    "figure{margin:1em 0 2em 0}figure svg{width:100%;height:auto;max-width:1200px;"
    "border:1px solid #e3e3e3}figcaption{color:#444;font-size:0.95em;max-width:1100px}"
    ".tw{overflow-x:auto}table{border-collapse:collapse;font-size:0.9em;margin:0.3em 0 1em 0}"
    "th,td{border:1px solid #d6d6d6;padding:3px 8px;text-align:right}"
    "th{background:#eef3f8}td:first-child,th:first-child{text-align:left}"
    "table.text td,table.text th{text-align:left}"
    "tr:nth-child(even) td{background:#fbfbfb}";

static int write_report(const struct report_opts *o, const char *html_tmp, const char *md_tmp,
                        const char *md_plots_rel, const char *figdir, const int *have_fig,
                        char **dirs, int ndirs, const struct rp_run *runs, struct rp_series *s,
                        int ns, const struct reference *ref, struct group *a2a, int na2a,
                        struct group *ffn, int nffn)
{
    struct doc d = {NULL, NULL, 0};
    int rc = MP_OK;
    if (html_tmp && !(d.h = fopen(html_tmp, "w"))) {
        mp_usage("--out '%s': cannot write: %s", o->out, strerror(errno));
        return MP_ERR_USAGE;
    }
    if (md_tmp && !(d.m = fopen(md_tmp, "w"))) {
        mp_usage("--md '%s': cannot write: %s", o->md, strerror(errno));
        if (d.h)
            fclose(d.h);
        return MP_ERR_USAGE;
    }
    char now[32];
    time_t t = time(NULL);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    if (d.h) {
        fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n", d.h);
        /* the page needs nothing from anywhere: no scripts, no fetches, styles inline */
        fputs("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
              "style-src 'unsafe-inline'\">\n",
              d.h);
        fputs("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>",
              d.h);
        html_esc(d.h, o->title);
        fprintf(d.h, "</title>\n<style>%s</style>\n</head>\n<body>\n<main>\n", css);
    }
    if (d.m) {
        fputs("# ", d.m);
        md_esc(d.m, o->title);
        fputs("\n\n", d.m);
    }
    if (d.h) {
        fputs("<h1>", d.h);
        html_esc(d.h, o->title);
        fputs("</h1>\n", d.h);
    }
    char runs_list[4096] = "";
    for (int i = 0; i < ndirs; i++)
        if (strlen(runs_list) < sizeof runs_list)
            snprintf(runs_list + strlen(runs_list), sizeof runs_list - strlen(runs_list), "%s%s",
                     i ? ", " : "", dirs[i]);
    if (d.h)
        fputs("<div class=\"meta\">", d.h);
    doc_p(&d, "Generated %s by moeperf-report from %d run director%s: %s.%s%s", now, ndirs,
          ndirs == 1 ? "y" : "ies", runs_list, ref ? " Reference: " : "", ref ? ref->label : "");
    if (d.h)
        fputs("</div>\n", d.h);
    write_answer(&d, runs, ndirs);
    if (d.h)
        fputs("<div class=\"findings\">", d.h);
    rc = write_findings(&d, s, ns, ref, a2a, na2a, ffn, nffn);
    if (d.h)
        fputs("</div>\n", d.h);
    doc_p(&d, "How to read them: the batch cap is the last batch before comm_comp_ratio "
              "(comm_us / ffn_us, medians) exceeds 1 — past it the All-to-All costs more than the "
              "experts' compute. The knee is the first batch from which the layer latency grows "
              "faster than the batch (log-log slope above %.1f over at least a doubling of the "
              "batch). Replication compares a replicating placement with the same workload "
              "without it; ×0.90 means 10 %% less latency, and a batch counts as faster or "
              "slower only where the 95 %% confidence intervals of the two medians do not "
              "overlap.",
          KNEE_SLOPE);

    doc_h(&d, 2, "Figures");
    write_legend(&d, s, ns, a2a, na2a, ffn, nffn);
    for (int f = 0; f < NFIG && rc == MP_OK; f++) {
        if (!have_fig[f])
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s.svg", figdir, figures[f].name);
        doc_h(&d, 3, figures[f].title);
        if (d.h) {
            char *svg = mp_read_file(path, NULL), prefix[32];
            if (!svg) {
                mp_error("%s: %s", path, strerror(errno));
                rc = MP_ERR_RUNTIME;
                break;
            }
            snprintf(prefix, sizeof prefix, "f%d-", f);
            fputs("<figure>\n", d.h);
            if (rp_svg_inline(svg, prefix, d.h) != MP_OK) {
                mp_error("%s: no <svg> element", path);
                rc = MP_ERR_RUNTIME;
            }
            free(svg);
            fputs("\n<figcaption>", d.h);
            html_esc(d.h, figures[f].caption);
            fputs("</figcaption>\n</figure>\n", d.h);
        }
        if (d.m) {
            fputs("![", d.m);
            md_esc(d.m, figures[f].title);
            fprintf(d.m, "](%s/%s.svg)\n\n", md_plots_rel, figures[f].name);
            md_esc(d.m, figures[f].caption);
            fputs("\n\n", d.m);
        }
    }
    if (rc == MP_OK)
        rc = write_timelines(&d, figdir, md_plots_rel);
    if (rc == MP_OK) {
        write_layer_tables(&d, s, ns);
        write_step_tables(&d, s, ns);
        rc = write_bubble_table(&d, s, ns, ref);
    }
    if (rc == MP_OK) {
        write_projection_tables(&d, s, ns);
        write_plan_tables(&d, runs, ndirs);
        write_a2a_tables(&d, a2a, na2a);
        write_ffn_tables(&d, ffn, nffn);
        write_environment(&d, runs, ndirs);
    }
    if (d.h)
        fputs("</main>\n</body>\n</html>\n", d.h);
    if (d.h && (ferror(d.h) | fclose(d.h)) && rc == MP_OK) {
        mp_error("%s: write failed", html_tmp);
        rc = MP_ERR_RUNTIME;
    }
    if (d.m && (ferror(d.m) | fclose(d.m)) && rc == MP_OK) {
        mp_error("%s: write failed", md_tmp);
        rc = MP_ERR_RUNTIME;
    }
    return rc;
}

/* Copy a file (the SVG figures next to the Markdown). */
static int copy_file(const char *from, const char *to)
{
    char *data = mp_read_file(from, NULL);
    if (!data)
        return -1;
    FILE *f = fopen(to, "w");
    int ok = f && fputs(data, f) >= 0;
    if (f && fclose(f) != 0)
        ok = 0;
    free(data);
    return ok ? 0 : -1;
}

/* The parent directory of `path` exists (created if needed); errors name `flag`. */
static int make_parent(const char *path, const char *flag)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return MP_OK;
    *slash = '\0';
    return dir[0] ? mp_mkdir_p(dir, flag) : MP_OK;
}

/* The outputs asked for are usable: at least one RUN_DIR, --out and/or --md, --md ending in .md. */
static int check_outputs(const struct report_opts *o, int ndirs)
{
    if (ndirs == 0) {
        mp_usage("no RUN_DIR given; usage: moeperf-report RUN_DIR... --out FILE.html [--md FILE.md]");
        return MP_ERR_USAGE;
    }
    if (!o->out && !o->md) {
        mp_usage("nothing to write: give --out FILE.html and/or --md FILE.md");
        return MP_ERR_USAGE;
    }
    if (o->md) {
        size_t n = strlen(o->md);
        if (n < 4 || strcmp(o->md + n - 3, ".md") != 0) {
            mp_usage("--md '%s': expected a file name ending in .md", o->md);
            return MP_ERR_USAGE;
        }
    }
    return MP_OK;
}

/* The reference curve: --reference, else the source tree's seed figures (root NULL: none), unless
 * --no-reference; *have set when one was loaded into *ref. */
static int load_reference(const struct report_opts *o, const char *root, struct reference *ref,
                          int *have)
{
    char def[PATH_MAX + 64];
    const char *path = o->reference;
    *have = 0;
    if (o->no_reference)
        return MP_OK;
    if (!path && root) {
        snprintf(def, sizeof def, "%s/plots/seed-h100-64gpu.csv", root);
        path = def;
    }
    if (!path)
        return MP_OK;
    int rc = reference_load(path, ref);
    *have = rc == MP_OK;
    return rc;
}

/* The rendered figures (tmp/NAME.svg) that exist, and the timelines, copied beside the Markdown
 * report into md_dir. */
static int copy_figures(const char *tmp, const char *md_dir, const int *have_fig)
{
    for (int k = 1, n = timeline_count(tmp); k <= n; k++) {
        char from[PATH_MAX + 64], to[PATH_MAX + 64];
        snprintf(from, sizeof from, "%s/timeline-%d.svg", tmp, k);
        snprintf(to, sizeof to, "%s/timeline-%d.svg", md_dir, k);
        if (copy_file(from, to) != 0) {
            mp_error("%s: cannot write: %s", to, strerror(errno));
            return MP_ERR_RUNTIME;
        }
    }
    for (int f = 0; f < NFIG; f++) {
        if (!have_fig[f])
            continue;
        char from[PATH_MAX + 64], to[PATH_MAX + 64];
        snprintf(from, sizeof from, "%s/%s.svg", tmp, figures[f].name);
        snprintf(to, sizeof to, "%s/%s.svg", md_dir, figures[f].name);
        if (copy_file(from, to) != 0) {
            mp_error("%s: cannot write: %s", to, strerror(errno));
            return MP_ERR_RUNTIME;
        }
    }
    return MP_OK;
}

/* The finished FILE.tmp outputs renamed to their names, and each named on stdout. */
static int publish(const struct report_opts *o, const char *html_tmp, const char *md_tmp,
                   const char *md_dir)
{
    if (html_tmp && rename(html_tmp, o->out) != 0) {
        mp_error("rename %s to %s: %s", html_tmp, o->out, strerror(errno));
        return MP_ERR_RUNTIME;
    }
    if (md_tmp && rename(md_tmp, o->md) != 0) {
        mp_error("rename %s to %s: %s", md_tmp, o->md, strerror(errno));
        return MP_ERR_RUNTIME;
    }
    if (o->out)
        printf("moeperf-report: wrote %s\n", o->out);
    if (o->md)
        printf("moeperf-report: wrote %s (figures in %s/)\n", o->md, md_dir);
    return MP_OK;
}

int main(int argc, char **argv)
{
    struct report_opts o;
    char **dirs = NULL;
    int ndirs = 0, nruns = 0, ns = 0, na2a = 0, nffn = 0;
    struct rp_run *runs = NULL;
    struct rp_series *s = NULL;
    struct group *a2a = NULL, *ffn = NULL;
    struct reference ref = {0};
    int have_ref = 0, *have_fig = NULL;
    char tmp[PATH_MAX] = "", root[PATH_MAX] = "", render[PATH_MAX + 32];
    char *html_tmp = NULL, *md_tmp = NULL, *md_dir = NULL;
    mp_log_init("moeperf-report", -1);
    int rc = mp_opts_parse(options, &o, argc, argv, summary, &dirs, &ndirs);
    if (rc == MP_HELP) {
        mp_opts_free(options, &o);
        return 0;
    }
    if (rc != MP_OK)
        return MP_ERR_USAGE;
    MP_CHECK(check_outputs(&o, ndirs));
    runs = calloc((size_t)ndirs, sizeof *runs);
    if (!runs) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    for (nruns = 0; nruns < ndirs; nruns++)
        MP_CHECK(rp_run_load(dirs[nruns], &runs[nruns]));

    int have_root = rp_source_root(root, sizeof root) == 0;
    MP_CHECK(load_reference(&o, have_root ? root : NULL, &ref, &have_ref));
    if (!have_root) {
        mp_error("cannot find plots/render of the source tree this moeperf-report was built "
                 "from (looked beside the build directory and in its meson-info)");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    snprintf(render, sizeof render, "%s/plots/render", root);
    MP_CHECK(figures_load(root));
    have_fig = calloc((size_t)(NFIG > 0 ? NFIG : 1), sizeof *have_fig);
    if (!have_fig) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
        goto out;
    }

    snprintf(tmp, sizeof tmp, "%s/moeperf-report.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp)) {
        mp_error("mkdtemp %s: %s", tmp, strerror(errno));
        tmp[0] = '\0';
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    /* render draws the measurement files: a directory with only plan.csv is not for it */
    char **rdirs = calloc((size_t)ndirs + 1, sizeof *rdirs);
    int nrender = 0;
    if (!rdirs) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    for (int i = 0; i < ndirs; i++)
        if (runs[i].layer.cols || runs[i].a2a.cols || runs[i].ffn.cols)
            rdirs[nrender++] = dirs[i];
    rc = nrender > 0 ? run_render(render, tmp, have_ref ? ref.path : NULL,
                                  have_ref ? ref.label : NULL, rdirs, nrender)
                     : MP_OK;
    free(rdirs);
    if (rc != MP_OK)
        goto out;
    for (int f = 0; f < NFIG; f++) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/%s.svg", tmp, figures[f].name);
        have_fig[f] = mp_is_regular_file(p);
    }

    MP_CHECK(rp_layer_series(runs, nruns, &s, &ns));
    /* the a2a and ffn curves as their figures group and label them (figures.csv: group, extra) */
    const char *a2a_cols[MAX_GROUP_COLS], *ffn_cols[MAX_GROUP_COLS];
    char *a2a_spec = NULL, *ffn_spec = NULL;
    int a2a_bare = 0, ffn_bare = 0;
    int na2a_cols = figure_cols("a2a.csv", a2a_cols, &a2a_bare, &a2a_spec);
    int nffn_cols = figure_cols("ffn.csv", ffn_cols, &ffn_bare, &ffn_spec);
    if (na2a_cols < 1 || nffn_cols < 1) {
        free(a2a_spec);
        free(ffn_spec);
        MP_CHECK(MP_ERR_RUNTIME);
    }
    rc = make_groups(runs, nruns, 1, a2a_cols, na2a_cols, a2a_bare, MPC_bytes_per_rank, &a2a,
                     &na2a);
    if (rc == MP_OK)
        rc = make_groups(runs, nruns, 2, ffn_cols, nffn_cols, ffn_bare, MPC_batch, &ffn, &nffn);
    free(a2a_spec);
    free(ffn_spec);
    MP_CHECK(rc);

    /* outputs: written to FILE.tmp and renamed, so no half-written report is left */
    const char *md_rel = NULL;
    if (o.out) {
        MP_CHECK(make_parent(o.out, "--out"));
        if (!(html_tmp = malloc(strlen(o.out) + 8)))
            goto oom;
        sprintf(html_tmp, "%s.tmp", o.out);
    }
    if (o.md) {
        MP_CHECK(make_parent(o.md, "--md"));
        if (!(md_tmp = malloc(strlen(o.md) + 8)) || !(md_dir = malloc(strlen(o.md) + 16)))
            goto oom;
        sprintf(md_tmp, "%s.tmp", o.md);
        sprintf(md_dir, "%.*s_plots", (int)(strlen(o.md) - 3), o.md);
        md_rel = strrchr(md_dir, '/') ? strrchr(md_dir, '/') + 1 : md_dir;
        MP_CHECK(mp_mkdir_p(md_dir, "--md"));
        MP_CHECK(copy_figures(tmp, md_dir, have_fig));
    }
    rc = write_report(&o, html_tmp, md_tmp, md_rel, tmp, have_fig, dirs, ndirs, runs, s, ns,
                      have_ref ? &ref : NULL, a2a, na2a, ffn, nffn);
    if (rc == MP_OK)
        rc = publish(&o, html_tmp, md_tmp, md_dir);
    goto out;
oom:
    mp_error("out of memory");
    rc = MP_ERR_RUNTIME;
out:
    if (html_tmp)
        unlink(html_tmp);
    if (md_tmp)
        unlink(md_tmp);
    free(html_tmp);
    free(md_tmp);
    free(md_dir);
    if (tmp[0])
        remove_tree(tmp);
    groups_free(a2a, na2a);
    groups_free(ffn, nffn);
    rp_series_free(s, ns);
    if (have_ref)
        reference_free(&ref);
    for (int i = 0; runs && i < nruns; i++)
        rp_run_free(&runs[i]);
    free(runs);
    free(dirs);
    free(have_fig);
    figures_free();
    mp_opts_free(options, &o);
    return rc;
}
