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
#include "report_groups.h"
#include "report_tables.h"
#include "report_plan.h"
#include "datafiles.h"
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
     "published table drawn beside the measurements (batch and metric columns) [default: "
     "plots/seed-h100-64gpu.csv of the data directory, when a run has its workload: its "
     "'# match:' line, 128 experts, top-8, tp4ep16]"},
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

/* ---- the reference table ---- */

static void reference_free(struct reference *r)
{
    free(r->path);
    free(r->label);
    free(r->match);
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
    r->match = rp_csv_comment(path, "match");
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

/* The outputs asked for opened into d (html_tmp, md_tmp; NULL: not asked for): MP_OK, or
 * MP_ERR_USAGE after a message naming --out or --md, with nothing left open. */
static int open_outputs(const struct report_opts *o, const char *html_tmp, const char *md_tmp,
                        struct doc *d)
{
    if (html_tmp && !(d->h = fopen(html_tmp, "w"))) {
        mp_usage("--out '%s': cannot write: %s", o->out, strerror(errno));
        return MP_ERR_USAGE;
    }
    if (md_tmp && !(d->m = fopen(md_tmp, "w"))) {
        mp_usage("--md '%s': cannot write: %s", o->md, strerror(errno));
        if (d->h)
            fclose(d->h);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* The page's head (a document that fetches nothing, its styles inline) and its title as the first
 * heading, in both outputs. */
static void write_page_head(struct doc *d, const char *title)
{
    if (d->h) {
        fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n", d->h);
        /* the page needs nothing from anywhere: no scripts, no fetches, styles inline */
        fputs("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
              "style-src 'unsafe-inline'\">\n",
              d->h);
        fputs("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>",
              d->h);
        html_esc(d->h, title);
        fprintf(d->h, "</title>\n<style>%s</style>\n</head>\n<body>\n<main>\n", css);
    }
    if (d->m) {
        fputs("# ", d->m);
        md_esc(d->m, title);
        fputs("\n\n", d->m);
    }
    if (d->h) {
        fputs("<h1>", d->h);
        html_esc(d->h, title);
        fputs("</h1>\n", d->h);
    }
}

/* The line under the title: when and from which run directories the report was made, and the
 * reference's label (ref NULL: none). */
static void write_meta(struct doc *d, const char *now, char **dirs, int ndirs,
                       const struct reference *ref)
{
    char runs_list[4096] = "";
    for (int i = 0; i < ndirs; i++)
        if (strlen(runs_list) < sizeof runs_list)
            snprintf(runs_list + strlen(runs_list), sizeof runs_list - strlen(runs_list), "%s%s",
                     i ? ", " : "", dirs[i]);
    if (d->h)
        fputs("<div class=\"meta\">", d->h);
    doc_p(d, "Generated %s by moeperf-report from %d run director%s: %s.%s%s", now, ndirs,
          ndirs == 1 ? "y" : "ies", runs_list, ref ? " Reference: " : "", ref ? ref->label : "");
    if (d->h)
        fputs("</div>\n", d->h);
}

/* Figure f under its title: its SVG (figdir/NAME.svg) inline with its caption on the page, and
 * in the Markdown a link into md_plots_rel with the caption. MP_OK, or MP_ERR_RUNTIME after a
 * message when the SVG cannot be read or holds no <svg> element. */
static int write_figure(struct doc *d, int f, const char *figdir, const char *md_plots_rel)
{
    int rc = MP_OK;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s.svg", figdir, figures[f].name);
    doc_h(d, 3, figures[f].title);
    if (d->h) {
        char *svg = mp_read_file(path, NULL), prefix[32];
        if (!svg) {
            mp_error("%s: %s", path, strerror(errno));
            return MP_ERR_RUNTIME;
        }
        snprintf(prefix, sizeof prefix, "f%d-", f);
        fputs("<figure>\n", d->h);
        if (rp_svg_inline(svg, prefix, d->h) != MP_OK) {
            mp_error("%s: no <svg> element", path);
            rc = MP_ERR_RUNTIME;
        }
        free(svg);
        fputs("\n<figcaption>", d->h);
        html_esc(d->h, figures[f].caption);
        fputs("</figcaption>\n</figure>\n", d->h);
    }
    if (d->m) {
        fputs("![", d->m);
        md_esc(d->m, figures[f].title);
        fprintf(d->m, "](%s/%s.svg)\n\n", md_plots_rel, figures[f].name);
        md_esc(d->m, figures[f].caption);
        fputs("\n\n", d->m);
    }
    return rc;
}

/* The page's end, and both outputs closed: rc, or MP_ERR_RUNTIME after a message when rc is MP_OK
 * and an output could not be written. */
static int close_outputs(struct doc *d, const char *html_tmp, const char *md_tmp, int rc)
{
    if (d->h)
        fputs("</main>\n</body>\n</html>\n", d->h);
    if (d->h && (ferror(d->h) | fclose(d->h)) && rc == MP_OK) {
        mp_error("%s: write failed", html_tmp);
        rc = MP_ERR_RUNTIME;
    }
    if (d->m && (ferror(d->m) | fclose(d->m)) && rc == MP_OK) {
        mp_error("%s: write failed", md_tmp);
        rc = MP_ERR_RUNTIME;
    }
    return rc;
}

/* The report into html_tmp and md_tmp (either NULL: not asked for): its head, the answer, the
 * findings and how to read them, the legend and figures (have_fig[f]: figure f was drawn into
 * figdir) with the timelines, then the tables and the environment. MP_OK, MP_ERR_USAGE when an
 * output cannot be opened, or MP_ERR_RUNTIME after a message. */
static int write_report(const struct report_opts *o, const char *html_tmp, const char *md_tmp,
                        const char *md_plots_rel, const char *figdir, const int *have_fig,
                        char **dirs, int ndirs, const struct rp_run *runs, struct rp_series *s,
                        int ns, const struct reference *ref, struct group *a2a, int na2a,
                        struct group *ffn, int nffn)
{
    struct doc d = {NULL, NULL, 0};
    int rc = open_outputs(o, html_tmp, md_tmp, &d);
    if (rc != MP_OK)
        return rc;
    char now[32];
    time_t t = time(NULL);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    write_page_head(&d, o->title);
    write_meta(&d, now, dirs, ndirs, ref);
    write_answer(&d, runs, ndirs);
    /* findings and figures of what the runs measured or modelled: none for a plan alone */
    int measured = ns + na2a + nffn > 0, drawn = 0;
    for (int f = 0; f < NFIG; f++)
        drawn += have_fig[f] != 0;
    if (measured) {
        if (d.h)
            fputs("<div class=\"findings\">", d.h);
        rc = write_findings(&d, s, ns, ref, a2a, na2a, ffn, nffn);
        if (d.h)
            fputs("</div>\n", d.h);
        doc_p(&d, "How to read them: the batch cap is the last batch before comm_comp_ratio "
                  "(comm_us / ffn_us, medians) exceeds 1 — past it the All-to-All costs more "
                  "than the experts' compute. The knee is the first batch from which the layer "
                  "latency grows faster than the batch (log-log slope above %.1f over at least a "
                  "doubling of the batch). Replication compares a replicating placement with the "
                  "same workload without it; ×0.90 means 10 %% less latency, and a batch counts "
                  "as faster or slower only where the 95 %% confidence intervals of the two "
                  "medians do not overlap.",
              KNEE_SLOPE);
    }
    if (drawn) {
        doc_h(&d, 2, "Figures");
        write_legend(&d, s, ns, a2a, na2a, ffn, nffn);
    }
    for (int f = 0; f < NFIG && rc == MP_OK; f++)
        if (have_fig[f])
            rc = write_figure(&d, f, figdir, md_plots_rel);
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
    return close_outputs(&d, html_tmp, md_tmp, rc);
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

/* The outputs asked for are usable: at least one RUN_DIR, --out and/or --md, --md ending in .md,
 * neither of them an input, a file of a run or the other (mp_output_check). */
static int check_outputs(const struct report_opts *o, char **dirs, int ndirs)
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
    const char *const *in = (const char *const *)dirs;
    if (o->out && mp_output_check("--out", o->out, in, ndirs, o->md) != MP_OK)
        return MP_ERR_USAGE;
    if (o->md && mp_output_check("--md", o->md, in, ndirs, o->out) != MP_OK)
        return MP_ERR_USAGE;
    return MP_OK;
}

/* Whether a layer.csv row of the runs has every KEY=VALUE word of `match` (NULL: every run
 * matches), KEY a column of the file. */
static int runs_match(const char *match, const struct rp_run *runs, int nruns)
{
    if (!match)
        return 1;
    for (int i = 0; i < nruns; i++) {
        const struct mp_table *t = &runs[i].layer;
        for (long r = 0; t->cols && r < t->nrows; r++) {
            int all = 1;
            const char *w = match;
            while (all && *w) {
                size_t len = strcspn(w, " \t"), kl = strcspn(w, "=");
                if (kl < len) {
                    char key[64];
                    snprintf(key, sizeof key, "%.*s", (int)(kl < 63 ? kl : 63), w);
                    int c = mp_table_col(t, key);
                    size_t vl = len - kl - 1;
                    all = c >= 0 && strlen(t->cells[r][c]) == vl &&
                          strncmp(t->cells[r][c], w + kl + 1, vl) == 0;
                }
                w += len;
                w += strspn(w, " \t");
            }
            if (all)
                return 1;
        }
    }
    return 0;
}

/* The reference curve: --reference, else the data directory's seed figures (root NULL: none), unless
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

/* What main holds between its steps, all of it freed by report_state_free. */
struct report_state {
    struct rp_run *runs;
    int nruns; /* the runs loaded, each freed with rp_run_free */
    struct rp_series *s;
    int ns;
    struct group *a2a, *ffn;
    int na2a, nffn;
    struct reference ref;
    int have_ref;
    int *have_fig;                    /* have_fig[f]: figure f was drawn into tmp */
    char tmp[PATH_MAX];               /* the figures' temporary directory, "" until made */
    char *html_tmp, *md_tmp, *md_dir; /* the outputs as written (renamed when done), the figures
                                         beside the Markdown */
    const char *md_rel;               /* md_dir as the Markdown links it */
};

/* Every RUN_DIR loaded into st->runs (st->nruns: how many were): MP_OK, or the error of the first
 * that cannot be read, after its message. */
static int load_runs(struct report_state *st, char **dirs, int ndirs)
{
    st->runs = calloc((size_t)ndirs, sizeof *st->runs);
    if (!st->runs) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (st->nruns = 0; st->nruns < ndirs; st->nruns++) {
        int rc = rp_run_load(dirs[st->nruns], &st->runs[st->nruns]);
        if (rc != MP_OK)
            return rc;
    }
    return MP_OK;
}

/* The data directory (mp_data_root) into root (size bytes), the reference curve into
 * st->ref, plots/figures.csv read and st->have_fig allocated: MP_OK, or an error after its
 * message (no data directory: MP_ERR_RUNTIME). */
static int load_sources(const struct report_opts *o, struct report_state *st, char *root,
                        size_t size)
{
    int have_root = mp_data_root(root, size) == 0;
    int rc = load_reference(o, have_root ? root : NULL, &st->ref, &st->have_ref);
    if (rc != MP_OK)
        return rc;
    /* the default reference only beside runs of its workload; one named is drawn as asked */
    if (st->have_ref && !o->reference && !runs_match(st->ref.match, st->runs, st->nruns)) {
        reference_free(&st->ref);
        st->have_ref = 0;
    }
    if (!have_root) {
        mp_error("cannot find plots/render: not in $%s, the source tree this moeperf-report was "
                 "built from, nor the installed data directory %s (meson install puts it there)",
                 MP_DATA_ENV, root);
        return MP_ERR_RUNTIME;
    }
    if ((rc = figures_load(root)) != MP_OK)
        return rc;
    st->have_fig = calloc((size_t)(NFIG > 0 ? NFIG : 1), sizeof *st->have_fig);
    if (!st->have_fig) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* plots/render of the data directory `root` run on the RUN_DIRs that hold measurements, into a new
 * temporary directory st->tmp, and st->have_fig set for each figure it drew: MP_OK, or an error
 * after its message (render refused its input: MP_ERR_USAGE). */
static int render_figures(struct report_state *st, const char *root, char **dirs, int ndirs)
{
    char render[PATH_MAX + 32];
    snprintf(render, sizeof render, "%s/plots/render", root);
    snprintf(st->tmp, sizeof st->tmp, "%s/moeperf-report.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(st->tmp)) {
        mp_error("mkdtemp %s: %s", st->tmp, strerror(errno));
        st->tmp[0] = '\0';
        return MP_ERR_RUNTIME;
    }
    /* render draws the measurement files: a directory with only plan.csv is not for it */
    char **rdirs = calloc((size_t)ndirs + 1, sizeof *rdirs);
    int nrender = 0;
    if (!rdirs) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (int i = 0; i < ndirs; i++)
        if (st->runs[i].layer.cols || st->runs[i].a2a.cols || st->runs[i].ffn.cols)
            rdirs[nrender++] = dirs[i];
    int rc = nrender > 0 ? run_render(render, st->tmp, st->have_ref ? st->ref.path : NULL,
                                      st->have_ref ? st->ref.label : NULL, rdirs, nrender)
                         : MP_OK;
    free(rdirs);
    if (rc != MP_OK)
        return rc;
    for (int f = 0; f < NFIG; f++) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/%s.svg", st->tmp, figures[f].name);
        st->have_fig[f] = mp_is_regular_file(p);
    }
    return MP_OK;
}

/* The layer curves into st->s, and the a2a and ffn curves as their figures group and label them
 * (figures.csv: group, extra) into st->a2a and st->ffn: MP_OK, or MP_ERR_RUNTIME after a
 * message. */
static int group_curves(struct report_state *st)
{
    int rc = rp_layer_series(st->runs, st->nruns, &st->s, &st->ns);
    if (rc != MP_OK)
        return rc;
    const char *a2a_cols[MAX_GROUP_COLS], *ffn_cols[MAX_GROUP_COLS];
    char *a2a_spec = NULL, *ffn_spec = NULL;
    int a2a_bare = 0, ffn_bare = 0;
    int na2a_cols = figure_cols("a2a.csv", a2a_cols, &a2a_bare, &a2a_spec);
    int nffn_cols = figure_cols("ffn.csv", ffn_cols, &ffn_bare, &ffn_spec);
    if (na2a_cols < 1 || nffn_cols < 1) {
        free(a2a_spec);
        free(ffn_spec);
        return MP_ERR_RUNTIME;
    }
    rc = make_groups(st->runs, st->nruns, 1, a2a_cols, na2a_cols, a2a_bare, MPC_bytes_per_rank,
                     &st->a2a, &st->na2a);
    if (rc == MP_OK)
        rc = make_groups(st->runs, st->nruns, 2, ffn_cols, nffn_cols, ffn_bare, MPC_batch,
                         &st->ffn, &st->nffn);
    free(a2a_spec);
    free(ffn_spec);
    return rc;
}

/* The outputs' temporary names (FILE.tmp, renamed when done, so no half-written report is left)
 * and parent directories; with --md, its figures directory FILE_plots/ holding copies of the
 * figures drawn: MP_OK, or an error after its message. */
static int prepare_outputs(const struct report_opts *o, struct report_state *st)
{
    int rc;
    if (o->out) {
        if ((rc = make_parent(o->out, "--out")) != MP_OK)
            return rc;
        if (!(st->html_tmp = malloc(strlen(o->out) + 8))) {
            mp_error("out of memory");
            return MP_ERR_RUNTIME;
        }
        sprintf(st->html_tmp, "%s.tmp", o->out);
    }
    if (!o->md)
        return MP_OK;
    if ((rc = make_parent(o->md, "--md")) != MP_OK)
        return rc;
    if (!(st->md_tmp = malloc(strlen(o->md) + 8)) || !(st->md_dir = malloc(strlen(o->md) + 16))) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    sprintf(st->md_tmp, "%s.tmp", o->md);
    sprintf(st->md_dir, "%.*s_plots", (int)(strlen(o->md) - 3), o->md);
    st->md_rel = strrchr(st->md_dir, '/') ? strrchr(st->md_dir, '/') + 1 : st->md_dir;
    if ((rc = mp_mkdir_p(st->md_dir, "--md")) != MP_OK)
        return rc;
    return copy_figures(st->tmp, st->md_dir, st->have_fig);
}

/* Everything st holds freed; the temporary outputs left behind and the figures' temporary
 * directory removed. */
static void report_state_free(struct report_state *st)
{
    if (st->html_tmp)
        unlink(st->html_tmp);
    if (st->md_tmp)
        unlink(st->md_tmp);
    free(st->html_tmp);
    free(st->md_tmp);
    free(st->md_dir);
    if (st->tmp[0])
        remove_tree(st->tmp);
    groups_free(st->a2a, st->na2a);
    groups_free(st->ffn, st->nffn);
    rp_series_free(st->s, st->ns);
    if (st->have_ref)
        reference_free(&st->ref);
    for (int i = 0; st->runs && i < st->nruns; i++)
        rp_run_free(&st->runs[i]);
    free(st->runs);
    free(st->have_fig);
}

int main(int argc, char **argv)
{
    struct report_opts o;
    struct report_state st = {0};
    char **dirs = NULL, root[PATH_MAX] = "";
    int ndirs = 0;
    mp_log_init("moeperf-report", -1);
    int rc = mp_opts_parse(options, &o, argc, argv, summary, &dirs, &ndirs);
    if (rc == MP_HELP) {
        mp_opts_free(options, &o);
        return 0;
    }
    if (rc != MP_OK)
        return MP_ERR_USAGE;
    rc = check_outputs(&o, dirs, ndirs);
    if (rc == MP_OK)
        rc = load_runs(&st, dirs, ndirs);
    if (rc == MP_OK)
        rc = load_sources(&o, &st, root, sizeof root);
    if (rc == MP_OK)
        rc = render_figures(&st, root, dirs, ndirs);
    if (rc == MP_OK)
        rc = group_curves(&st);
    if (rc == MP_OK)
        rc = prepare_outputs(&o, &st);
    if (rc == MP_OK)
        rc = write_report(&o, st.html_tmp, st.md_tmp, st.md_rel, st.tmp, st.have_fig, dirs, ndirs,
                          st.runs, st.s, st.ns, st.have_ref ? &st.ref : NULL, st.a2a, st.na2a,
                          st.ffn, st.nffn);
    if (rc == MP_OK)
        rc = publish(&o, st.html_tmp, st.md_tmp, st.md_dir);
    report_state_free(&st);
    free(dirs);
    figures_free();
    mp_opts_free(options, &o);
    return rc;
}
