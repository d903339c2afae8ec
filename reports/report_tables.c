/* report_tables.c - moeperf-report's tables: the curves' legend, the layer's and the step's
 * medians and p99, the bubble, the planner's projection beside a measurement, the All-to-All's and
 * the FFN's, and the environment of every run (report_tables.h). */
#include "report_tables.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "files.h"
#include "model.h"
#include "report.h"
#include "schema.h"
#include "sort.h"

/* ---- tables ---- */

/* The curves' legend (docs/plots.md, "Curve labels"): each label of the figures and findings, its
 * run directory and its whole workload, the layer curves, then the All-to-All's and the FFN's. */
void write_legend(struct doc *d, const struct rp_series *s, int ns, const struct group *a2a,
                         int na2a, const struct group *ffn, int nffn)
{
    static const char *const head[] = {"curve", "file", "run", "workload"};
    if (ns + na2a + nffn == 0)
        return;
    doc_p(d, "Each curve is labelled by what sets it apart from the others of its file; the "
             "table gives its whole workload.");
    doc_h(d, 3, "Curves");
    doc_table(d, 2);
    doc_row_texts(d, 4, head, 1);
    char all[2048];
    for (int i = 0; i < ns; i++) {
        size_t used = 0;
        all[0] = '\0';
        for (int k = 0; k < RP_NKEY && used < sizeof all; k++)
            if (k != RP_K_SOURCE && *s[i].key[k])
                used += (size_t)snprintf(all + used, sizeof all - used, "%s%s=%s", used ? " " : "",
                                         rp_key_names[k], s[i].key[k]);
        const char *row[] = {s[i].label, "layer.csv", s[i].run->dir, all};
        doc_row_texts(d, 4, row, 0);
    }
    for (int part = 0; part < 2; part++) {
        const struct group *g = part ? ffn : a2a;
        for (int i = 0; i < (part ? nffn : na2a); i++) {
            const char *row[] = {g[i].label, part ? "ffn.csv" : "a2a.csv", g[i].run->dir,
                                 g[i].workload};
            doc_row_texts(d, 4, row, 0);
        }
    }
    doc_table(d, 0);
}

void write_layer_tables(struct doc *d, const struct rp_series *s, int ns)
{
    static const char *const head[] = {
        "batch", "layer p50 (µs)", "layer p99 (µs)", "ffn p50 (µs)", "ffn p99 (µs)",
        "comm p50 (µs)", "comm p99 (µs)", "comm/comp", "bubble", "load imbalance",
        "local hits",
    };
    enum { NC = sizeof head / sizeof head[0] };
    char cells[NC][CELL];
    if (!ns)
        return;
    doc_h(d, 2, "Layer latency (scope: one MoE layer): medians and p99 over iterations");
    for (int i = 0; i < ns; i++) {
        doc_table_head(d, s[i].label, head, NC);
        for (int p = 0; p < s[i].n; p++) {
            const struct rp_point *q = &s[i].pt[p];
            batch_text(cells[0], q->batch);
            f_us(cells[1], q->layer_us);
            f_us(cells[2], q->layer_p99_us);
            f_us(cells[3], q->ffn_us);
            f_us(cells[4], q->ffn_p99_us);
            f_us(cells[5], q->comm_us);
            f_us(cells[6], q->comm_p99_us);
            f_g(cells[7], q->ratio, "%.3g");
            f_pct(cells[8], q->bubble);
            f_g(cells[9], q->imbalance, "%.3g");
            f_pct(cells[10], q->hit);
            doc_row(d, NC, cells, 0);
        }
        doc_table(d, 0);
    }
}

/* The bubble at each batch: one row per batch, one column per curve (and the reference). */
/* The whole decode step of each model curve: the step and its parts per batch (scope: every layer
 * of the model, docs/planning.md "What a step includes"). */
void write_step_tables(struct doc *d, const struct rp_series *s, int ns)
{
    static const char *const head[] = {
        "batch", "step p50 (ms)", "step p99 (ms)", "tokens/s per GPU", "attention (ms)",
        "dense (ms)", "LM head (ms)", "small kernels (ms)", "host (ms)", "MoE layers (ms)",
        "hidden by overlap (ms)"};
    enum { NC = sizeof head / sizeof head[0] };
    char cells[NC][CELL];
    int titled = 0;
    for (int i = 0; i < ns; i++) {
        int any = 0;
        for (int p = 0; p < s[i].n; p++)
            any |= s[i].pt[p].step_us > 0;
        if (!any)
            continue;
        if (!titled++)
            doc_h(d, 2, "Decode step (scope: the whole step, every layer; model runs)");
        doc_table_head(d, s[i].label, head, NC);
        for (int p = 0; p < s[i].n; p++) {
            const struct rp_point *q = &s[i].pt[p];
            if (!(q->step_us > 0))
                continue;
            batch_text(cells[0], q->batch);
            f_g(cells[1], q->step_us / 1e3, "%.2f");
            f_g(cells[2], q->step_p99_us / 1e3, "%.2f");
            f_g(cells[3], q->tok_s_gpu, "%.0f");
            for (int k = 0; k < RP_NPART; k++)
                f_g(cells[4 + k], q->part_us[k] / 1e3, "%.2f");
            doc_row(d, NC, cells, 0);
        }
        doc_table(d, 0);
    }
}

int write_bubble_table(struct doc *d, const struct rp_series *s, int ns,
                              const struct reference *ref)
{
    int nb = 0, cap = 0, refcol = ref && mp_table_col(&ref->t, MPC_bubble_ratio) >= 0;
    for (int i = 0; i < ns; i++)
        cap += s[i].n;
    if (!ns)
        return MP_OK;
    double *batches = calloc((size_t)cap + 1, sizeof *batches);
    char(*cells)[CELL] = calloc((size_t)ns + 2, sizeof *cells);
    if (!batches || !cells) {
        free(batches);
        free(cells);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (int i = 0; i < ns; i++)
        for (int p = 0; p < s[i].n; p++) {
            int seen = 0;
            for (int b = 0; b < nb && !seen; b++)
                seen = batches[b] == s[i].pt[p].batch;
            if (!seen)
                batches[nb++] = s[i].pt[p].batch;
        }
    qsort(batches, (size_t)nb, sizeof *batches, mp_cmp_double);
    doc_h(d, 2, "Bubble at each batch (share of all ranks' layer time idle)");
    doc_table(d, 1);
    snprintf(cells[0], CELL, "batch");
    for (int i = 0; i < ns; i++)
        snprintf(cells[i + 1], CELL, "%.190s", s[i].label);
    if (refcol)
        snprintf(cells[ns + 1], CELL, "%.190s", ref->label);
    doc_row(d, ns + 1 + refcol, cells, 1);
    for (int b = 0; b < nb; b++) {
        batch_text(cells[0], batches[b]);
        for (int i = 0; i < ns; i++) {
            snprintf(cells[i + 1], CELL, "–");
            for (int p = 0; p < s[i].n; p++)
                if (s[i].pt[p].batch == batches[b])
                    f_pct(cells[i + 1], s[i].pt[p].bubble);
        }
        if (refcol) {
            snprintf(cells[ns + 1], CELL, "–");
            for (int p = 0; p < ref->n; p++)
                if (ref->batch[p] == batches[b])
                    f_pct(cells[ns + 1], ref->bubble[p]);
        }
        doc_row(d, ns + 1 + refcol, cells, 0);
    }
    doc_table(d, 0);
    free(batches);
    free(cells);
    return MP_OK;
}

/* The model's projection beside the measurement, batch by batch. */
void write_projection_tables(struct doc *d, const struct rp_series *s, int ns)
{
    static const char *const head[] = {"batch", "measured layer p50 (µs)", "model layer (µs)",
                                       "model / measured", "measured comm/comp",
                                       "model comm/comp"};
    enum { NC = sizeof head / sizeof head[0] };
    char cells[NC][CELL];
    int titled = 0;
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < ns; j++) {
            if (!rp_projects(&s[i], &s[j]))
                continue;
            if (!titled++)
                doc_h(d, 2, "The planner's projection beside the measurement");
            char h[700];
            snprintf(h, sizeof h, "%s vs %s", s[i].label, s[j].label);
            doc_table_head(d, h, head, NC);
            for (int p = 0; p < s[i].n; p++)
                for (int q = 0; q < s[j].n; q++) {
                    if (s[j].pt[q].batch != s[i].pt[p].batch)
                        continue;
                    batch_text(cells[0], s[i].pt[p].batch);
                    f_us(cells[1], s[i].pt[p].layer_us);
                    f_us(cells[2], s[j].pt[q].layer_us);
                    f_g(cells[3], s[j].pt[q].layer_us / s[i].pt[p].layer_us, "×%.2f");
                    f_g(cells[4], s[i].pt[p].ratio, "%.3g");
                    f_g(cells[5], s[j].pt[q].ratio, "%.3g");
                    doc_row(d, NC, cells, 0);
                    break;
                }
            doc_table(d, 0);
        }
}

/* One table per group under heading `title`, its columns `head` [nc] (at most 8), each row's cells
 * filled by fill(t, row, cells). */
static void write_group_tables(struct doc *d, const char *title, const char *const *head, int nc,
                               const struct group *g, int n,
                               void (*fill)(const struct mp_table *t, long row, char (*cells)[CELL]))
{
    char cells[8][CELL];
    if (!n)
        return;
    doc_h(d, 2, title);
    for (int i = 0; i < n; i++) {
        doc_table_head(d, g[i].label, head, nc);
        for (int r = 0; r < g[i].n; r++) {
            fill(g[i].t, g[i].rows[r], cells);
            doc_row(d, nc, cells, 0);
        }
        doc_table(d, 0);
    }
}

/* An isolated All-to-All row: bytes per peer and rank, batch, times, bandwidths. */
static void a2a_cells(const struct mp_table *t, long row, char (*cells)[CELL])
{
    f_bytes(cells[0], num(t, row, MPC_bytes_per_peer));
    f_bytes(cells[1], num(t, row, MPC_bytes_per_rank));
    double b = num(t, row, MPC_batch);
    if (b > 0)
        batch_text(cells[2], b);
    else
        snprintf(cells[2], CELL, "–");
    f_us(cells[3], num(t, row, MPC_time_us));
    f_us(cells[4], num(t, row, MPC_time_p99_us));
    f_g(cells[5], num(t, row, MPC_algbw_GBps), "%.3g");
    f_g(cells[6], num(t, row, MPC_busbw_GBps), "%.3g");
}

void write_a2a_tables(struct doc *d, const struct group *g, int n)
{
    static const char *const head[] = {"bytes per peer", "bytes per rank", "batch",
                                       "time p50 (µs)", "time p99 (µs)", "algbw (GB/s)",
                                       "busbw (GB/s)"};
    write_group_tables(d, "Isolated All-to-All: medians and p99", head, 7, g, n, a2a_cells);
}

/* An expert FFN row: batch, rows, times, rates, the bound and the roofline's share. */
static void ffn_cells(const struct mp_table *t, long row, char (*cells)[CELL])
{
    batch_text(cells[0], num(t, row, MPC_batch));
    f_g(cells[1], num(t, row, MPC_rows), "%.0f");
    f_us(cells[2], num(t, row, MPC_ffn_us));
    f_us(cells[3], num(t, row, MPC_ffn_p99_us));
    f_g(cells[4], num(t, row, MPC_achieved_GFLOPs), "%.3g");
    f_g(cells[5], num(t, row, MPC_achieved_GBps), "%.3g");
    snprintf(cells[6], CELL, "%s", *str(t, row, MPC_bound) ? str(t, row, MPC_bound) : "–");
    f_pct(cells[7], num(t, row, MPC_roofline_fraction));
}

void write_ffn_tables(struct doc *d, const struct group *g, int n)
{
    static const char *const head[] = {"batch", "rows", "ffn p50 (µs)", "ffn p99 (µs)",
                                       "GFLOP/s", "weight GB/s", "bound", "of roofline"};
    write_group_tables(d, "Expert FFN: medians and p99", head, 8, g, n, ffn_cells);
}

/* ---- environment ---- */



static void env_row(struct doc *d, const char *k, const char *v)
{
    char cells[2][CELL];
    snprintf(cells[0], CELL, "%s", k);
    /* long values (argv, environment) get their own, wider buffer in the HTML */
    if (strlen(v) < CELL) {
        snprintf(cells[1], CELL, "%s", v);
        doc_row(d, 2, cells, 0);
        return;
    }
    if (d->h) {
        fputs("<tr><td>", d->h);
        html_esc(d->h, k);
        fputs("</td><td>", d->h);
        html_esc(d->h, v);
        fputs("</td></tr>\n", d->h);
    }
    if (d->m) {
        fputs("| ", d->m);
        md_esc(d->m, k);
        fputs(" | ", d->m);
        md_esc(d->m, v);
        fputs(" |\n", d->m);
    }
}

/* Append the strings of a JSON array, separated by `sep`. */
static void join_array(char *out, size_t size, const cJSON *arr, const char *sep)
{
    size_t used = strlen(out);
    const cJSON *e;
    int first = 1;
    cJSON_ArrayForEach(e, arr)
    {
        if (!cJSON_IsString(e) || used >= size)
            continue;
        used += (size_t)snprintf(out + used, size - used, "%s%s", first ? "" : sep, e->valuestring);
        first = 0;
    }
}

/* The distinct devices of run.json's ranks in order of first appearance, each with its rank count
 * ("8 × NAME; 8 × OTHER"), into v (empty when no rank names one). */
static void devices_text(char *v, size_t size, const cJSON *ranks)
{
    const cJSON *a, *b;
    int idx = 0;
    v[0] = '\0';
    cJSON_ArrayForEach(a, ranks)
    {
        const char *dev = jstr(a, "device");
        int count = 0, earlier = 0, k = 0;
        cJSON_ArrayForEach(b, ranks)
        {
            const char *db = jstr(b, "device");
            if (dev && db && !strcmp(dev, db)) {
                count++;
                earlier |= k < idx;
            }
            k++;
        }
        if (dev && !earlier && strlen(v) < size)
            snprintf(v + strlen(v), size - strlen(v), "%s%d × %s", v[0] ? "; " : "", count, dev);
        idx++;
    }
}

/* The communication library's settings among run.json's env (its NCCL_, UCX_ and CUDA_ variables
 * as NAME=VALUE), then how many other variables it records, into v (empty when neither). */
static void env_text(char *v, size_t size, const cJSON *env)
{
    int other = 0;
    const cJSON *e;
    v[0] = '\0';
    cJSON_ArrayForEach(e, env)
    {
        if (!cJSON_IsString(e) || !e->string)
            continue;
        if (strncmp(e->string, "NCCL_", 5) && strncmp(e->string, "UCX_", 4) &&
            strncmp(e->string, "CUDA_", 5)) {
            other++;
            continue;
        }
        if (strlen(v) < size)
            snprintf(v + strlen(v), size - strlen(v), "%s%s=%s", v[0] ? " " : "", e->string,
                     e->valuestring);
    }
    if (other && strlen(v) < size)
        snprintf(v + strlen(v), size - strlen(v),
                 "%s(%d OMPI_/OPENBLAS_/SLURM_ variables in run.json)", v[0] ? " " : "", other);
}

/* The rows of rank 0's host from run.json's topology: its CPU, GPUs and NICs (none when the
 * topology names no CPU model). */
static void write_topology_rows(struct doc *d, const cJSON *topo)
{
    char v[4096];
    if (!jstr(topo, "cpu_model"))
        return;
    snprintf(v, sizeof v, "%s: %.0f package(s), %.0f cores, %.0f PUs, %.0f NUMA node(s), %.1f GiB",
             jstr(topo, "cpu_model"), jnum(topo, "packages"), jnum(topo, "cores"),
             jnum(topo, "pus"), jnum(topo, "numa_nodes"),
             jnum(topo, "memory_bytes") / (1024.0 * 1024 * 1024));
    env_row(d, "CPU (rank 0's host)", v);
    v[0] = '\0';
    join_array(v, sizeof v, cJSON_GetObjectItem(topo, "gpus"), ", ");
    env_row(d, "GPUs", v[0] ? v : "none");
    v[0] = '\0';
    join_array(v, sizeof v, cJSON_GetObjectItem(topo, "nics"), ", ");
    env_row(d, "NICs", v[0] ? v : "none");
}

/* The rows of run.json j's run: the tool, its command line, when it ran, the host, devices and
 * backends (write_topology_rows beside them). */
static void write_run_rows(struct doc *d, const cJSON *j)
{
    char v[4096];
    snprintf(v, sizeof v, "%s %s, revision %s", jstr(j, "tool") ? jstr(j, "tool") : "?",
             jstr(j, "version") ? jstr(j, "version") : "?",
             jstr(j, "git_revision") ? jstr(j, "git_revision") : "?");
    env_row(d, "tool", v);
    v[0] = '\0';
    join_array(v, sizeof v, cJSON_GetObjectItem(j, "argv"), " ");
    env_row(d, "command", v);
    const cJSON *fin = cJSON_GetObjectItem(j, "finished");
    snprintf(v, sizeof v, "%s to %s%s", jstr(j, "start") ? jstr(j, "start") : "?",
             jstr(j, "end") ? jstr(j, "end") : "?",
             cJSON_IsTrue(fin) ? "" : " (not finished: the sweep stopped early or runs)");
    env_row(d, "time", v);
    snprintf(v, sizeof v, "%s; %.0f rank(s) on %.0f node(s)",
             jstr(j, "host") ? jstr(j, "host") : "?", jnum(j, "world"), jnum(j, "nodes"));
    env_row(d, "host", v);
    /* devices, each distinct one with its rank count */
    devices_text(v, sizeof v, cJSON_GetObjectItem(j, "ranks"));
    env_row(d, "devices", v[0] ? v : "?");
    const cJSON *lib = cJSON_GetObjectItem(j, "libraries");
    snprintf(v, sizeof v, "compute %s, comm %s (%s)",
             jstr(lib, "compute") ? jstr(lib, "compute") : "?",
             jstr(lib, "comm") ? jstr(lib, "comm") : "?",
             jstr(lib, "comm_version") ? jstr(lib, "comm_version") : "version unknown");
    env_row(d, "backends", v);
    write_topology_rows(d, cJSON_GetObjectItem(j, "topology"));
}

/* The rows of what run.json j's run measured with: the model, the build, the roofline peaks, the
 * sweep and the communication library's environment. */
static void write_setup_rows(struct doc *d, const cJSON *j)
{
    char v[4096];
    const cJSON *m = cJSON_GetObjectItem(j, "model");
    if (m) {
        /* a preset whose shape the run changed says so: what ran is not the preset */
        struct mp_model ran = {.hidden = (int)jnum(m, "hidden"), .ffn = (int)jnum(m, "ffn"),
                               .experts = (int)jnum(m, "experts"), .topk = (int)jnum(m, "topk"),
                               .shared = (int)jnum(m, "shared"), .layers = (int)jnum(m, "layers")};
        snprintf(ran.name, sizeof ran.name, "%s", jstr(m, "name") ? jstr(m, "name") : "?");
        char over[160], with[200] = "";
        if (mp_model_overrides(&ran, over, sizeof over) > 0)
            snprintf(with, sizeof with, " with %s", over);
        snprintf(v, sizeof v,
                 "%s%s: hidden %.0f, expert FFN %.0f, %.0f experts, top-%.0f, %.0f shared, %.0f "
                 "MoE layers",
                 ran.name, with, jnum(m, "hidden"), jnum(m, "ffn"), jnum(m, "experts"),
                 jnum(m, "topk"), jnum(m, "shared"), jnum(m, "layers"));
        env_row(d, "model", v);
    }
    const cJSON *bld = cJSON_GetObjectItem(j, "build");
    snprintf(v, sizeof v, "%s, %s, features: %s", jstr(bld, "type") ? jstr(bld, "type") : "?",
             jstr(bld, "compiler") ? jstr(bld, "compiler") : "?",
             jstr(bld, "features") ? jstr(bld, "features") : "?");
    env_row(d, "build", v);
    const cJSON *roof = cJSON_GetObjectItem(j, "roofline");
    if (roof) {
        snprintf(v, sizeof v, "%.4g GFLOP/s, %.4g GB/s (measured at start-up)",
                 jnum(roof, "peak_gflops"), jnum(roof, "peak_GBps"));
        env_row(d, "roofline peaks", v);
    }
    const cJSON *sw = cJSON_GetObjectItem(j, "sweep");
    if (sw) {
        snprintf(v, sizeof v, "%.0f points in %.1f s (%.1f s timed)", jnum(sw, "points"),
                 jnum(sw, "wall_s"), jnum(sw, "timed_s"));
        env_row(d, "sweep", v);
    }
    /* the communication library's settings; the launcher's own variables are counted */
    env_text(v, sizeof v, cJSON_GetObjectItem(j, "env"));
    env_row(d, "environment", v[0] ? v : "none recorded");
}

void write_environment(struct doc *d, const struct rp_run *runs, int nruns)
{
    doc_h(d, 2, "Environment");
    for (int r = 0; r < nruns; r++) {
        const cJSON *j = runs[r].json;
        char h[PATH_MAX + 32];
        snprintf(h, sizeof h, "Run directory %s", runs[r].dir);
        doc_h(d, 3, h);
        if (!j) {
            doc_p(d, "No run.json in this directory.");
            continue;
        }
        doc_table(d, 2);
        char cells[2][CELL] = {"field", "value"};
        doc_row(d, 2, cells, 1);
        write_run_rows(d, j);
        write_setup_rows(d, j);
        doc_table(d, 0);
    }
}

/* How many per-rank timelines plots/render drew into `dir` (timeline-1.svg, timeline-2.svg, ...:
 * one per curve with rank samples, `--timeline curves`). */
int timeline_count(const char *dir)
{
    int n = 0;
    for (;; n++) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/timeline-%d.svg", dir, n + 1);
        if (!mp_is_regular_file(p))
            return n;
    }
}

/* The per-rank timelines (docs/plots.md, "Per-rank timeline"): the point with the largest bubble
 * of each curve, inlined in the HTML and linked from the Markdown. */
int write_timelines(struct doc *d, const char *figdir, const char *md_plots_rel)
{
    static const char caption[] =
        "One bar per rank, grouped by host: its phases in the median iteration (top) and the p99 "
        "iteration (bottom) of the point named in the title, the point with the largest "
        "bubble_ratio of its curve. Grey: waiting in a collective for the last rank of its group "
        "(wait_us). Red outline: the critical rank, whose busy time (layer_us − wait_us) is the "
        "longest — the rank the others wait for; each bar is annotated with the rank's routed "
        "rows and the experts it holds (layer_rank_samples.csv, layer_ranks.csv).";
    int n = timeline_count(figdir);
    if (n == 0)
        return MP_OK;
    doc_h(d, 3, "Per-rank timelines");
    for (int k = 1; k <= n; k++) {
        char path[PATH_MAX + 64], prefix[32];
        snprintf(path, sizeof path, "%s/timeline-%d.svg", figdir, k);
        if (d->h) {
            char *svg = mp_read_file(path, NULL);
            if (!svg) {
                mp_error("%s: %s", path, strerror(errno));
                return MP_ERR_RUNTIME;
            }
            snprintf(prefix, sizeof prefix, "t%d-", k);
            fputs("<figure>\n", d->h);
            int rc = rp_svg_inline(svg, prefix, d->h);
            free(svg);
            if (rc != MP_OK) {
                mp_error("%s: no <svg> element", path);
                return MP_ERR_RUNTIME;
            }
            fputs("\n<figcaption>", d->h);
            html_esc(d->h, caption);
            fputs("</figcaption>\n</figure>\n", d->h);
        }
        if (d->m)
            fprintf(d->m, "![Per-rank timeline %d](%s/timeline-%d.svg)\n\n%s\n\n", k,
                    md_plots_rel, k, k == n ? caption : "");
    }
    return MP_OK;
}
