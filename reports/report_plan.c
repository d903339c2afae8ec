/* report_plan.c - moeperf-report's view of a capacity plan (report_plan.h): the answer of
 * plan.json first, then plan.csv's candidates beside the chosen one. */
#include "report_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "error.h"
#include "plan_keys.h"
#include "report_serving.h"
#include "schema.h"

/* One plan.csv row as table cells: its role, setup, batch, GPUs, p99 token time and memory. */
static void plan_row(struct doc *d, const struct mp_table *t, long r, const char *role)
{
    char cells[9][CELL];
    snprintf(cells[0], CELL, "%.60s", role);
    snprintf(cells[1], CELL, "tp%.20sep%.20s", str(t, r, MPC_tp), str(t, r, MPC_ep));
    int fp8w = !strcmp(str(t, r, MPC_weight_dtype), "fp8");
    int fp8d = !strcmp(str(t, r, MPC_dispatch_dtype), "fp8");
    snprintf(cells[2], CELL, "%.60s, overlap %.10s, dedup %.10s%s%s", str(t, r, MPC_placement),
             str(t, r, MPC_overlap), str(t, r, MPC_dedup), fp8w ? ", fp8 weights" : "",
             fp8d ? ", fp8 dispatch" : "");
    batch_text(cells[3], num(t, r, MPC_batch));
    f_g(cells[4], num(t, r, MPC_gpus), "%.0f");
    f_g(cells[5], num(t, r, MPC_token_p99_ms), "%.2f");
    f_g(cells[6], num(t, r, MPC_mem_gb_per_gpu), "%.1f");
    f_g(cells[7], num(t, r, MPC_kv_gb_per_gpu), "%.1f");
    snprintf(cells[8], CELL, "%s%s%.20s", num(t, r, MPC_fits) == 1 ? "yes" : "no",
             num(t, r, MPC_fits) == 1 ? "" : ": ", num(t, r, MPC_fits) == 1 ? "" : str(t, r, MPC_over));
    doc_row(d, 9, cells, 0);
}

/* 1 when plan.csv rows a and b have the same layout, placement, overlap, dedup and dtypes (files
 * written before the dtype columns: those compare equal). */
static int plan_same_setup(const struct mp_table *t, long a, long b)
{
    static const char *const key[] = {MPC_routing,     MPC_tp,          MPC_ep,
                                      MPC_placement,   MPC_overlap,     MPC_dedup,
                                      MPC_weight_dtype, MPC_dispatch_dtype};
    for (size_t i = 0; i < sizeof key / sizeof key[0]; i++)
        if (strcmp(str(t, a, key[i]), str(t, b, key[i])) != 0)
            return 0;
    return 1;
}

/* Row r cheaper than row b: fewer GPUs, then a lower p99 token time (moeperf-plan's order). */
static int plan_cheaper(const struct mp_table *t, long r, long b)
{
    double gr = num(t, r, MPC_gpus), gb = num(t, b, MPC_gpus);
    return gr < gb || (gr == gb && num(t, r, MPC_token_p99_ms) < num(t, b, MPC_token_p99_ms));
}

/* The network a plan assumed: its profile beside plan.csv (moeperf-plan writes DIR/cluster.ini),
 * its congestion said in words (docs/planning.md: 0 is a non-blocking fat tree). */
static void write_plan_profile(struct doc *d, const char *dir)
{
    char path[4096];
    struct mp_cluster cl;
    snprintf(path, sizeof path, "%s/cluster.ini", dir);
    FILE *probe = fopen(path, "r");
    if (!probe) {
        doc_p(d, "The plan's cluster profile is not recorded (no cluster.ini beside plan.csv: a "
                 "plan written before moeperf-plan kept it).");
        return;
    }
    fclose(probe);
    if (mp_cluster_resolve(path, &cl) != MP_OK) {
        doc_p(d, "The plan's cluster profile (%s) could not be read.", path);
        return;
    }
    if (cl.congestion > 0)
        doc_p(d, "The plan assumed the cluster profile %s with congestion γ = %g: inter-node "
                 "exchanges slowed by 1 + γ·log2(incast), a tree that incast slows.", cl.name,
              cl.congestion);
    else
        doc_p(d, "The plan assumed the cluster profile %s with congestion γ = 0: inter-node "
                 "exchanges near line rate at any EP size, a non-blocking fat tree.", cl.name);
}

/* The capacity plan of each run with a plan.csv, per routing: the chosen plan (fewest GPUs meeting
 * the SLO and fitting in memory), its neighbours (the same setup at half and twice the batch) and
 * the cheapest candidates that met the SLO but were dropped for memory, each with GPUs, latency
 * and memory per GPU. */
void write_plan_tables(struct doc *d, const struct rp_run *runs, int nruns)
{
    static const char *const head[] = {"", "layout", "setup", "batch", "GPUs",
                                       "p99 token, whole step (ms)", "memory per GPU (GB)",
                                       "of it KV cache (GB)", "fits"};
    int titled = 0;
    for (int i = 0; i < nruns; i++) {
        const struct mp_table *t = &runs[i].plan;
        for (long r0 = 0; r0 < t->nrows; r0++) {
            int first = 1; /* one table per routing, at its first row */
            for (long q = 0; q < r0 && first; q++)
                first = strcmp(str(t, q, MPC_routing), str(t, r0, MPC_routing)) != 0;
            if (!first)
                continue;
            const char *routing = str(t, r0, MPC_routing);
            long best = -1;
            for (long r = r0; r < t->nrows; r++)
                if (!strcmp(str(t, r, MPC_routing), routing) && num(t, r, MPC_meets_slo) == 1 &&
                    num(t, r, MPC_fits) == 1 && (best < 0 || plan_cheaper(t, r, best)))
                    best = r;
            if (!titled++)
                doc_h(d, 2, "Capacity plan (scope: the whole decode step per token): GPUs, "
                            "latency and memory per GPU");
            if (r0 == 0)
                write_plan_profile(d, runs[i].dir);
            char h[700];
            snprintf(h, sizeof h, "%.300s, routing %.300s", runs[i].dir, routing);
            doc_table_head(d, h, head, 9);
            if (best >= 0) {
                for (long r = r0; r < t->nrows; r++)
                    if (r != best && plan_same_setup(t, r, best) &&
                        num(t, r, MPC_batch) == num(t, best, MPC_batch) / 2)
                        plan_row(d, t, r, "half the batch");
                plan_row(d, t, best, "chosen");
                for (long r = r0; r < t->nrows; r++)
                    if (r != best && plan_same_setup(t, r, best) &&
                        num(t, r, MPC_batch) == num(t, best, MPC_batch) * 2)
                        plan_row(d, t, r, "twice the batch");
            }
            /* the three cheapest candidates dropped for memory (cheaper than the plan) */
            long shown[3];
            int ns = 0;
            for (int k = 0; k < 3; k++) {
                long pick = -1;
                for (long r = r0; r < t->nrows; r++) {
                    int taken = 0;
                    for (int j = 0; j < ns; j++)
                        taken |= shown[j] == r;
                    if (taken || strcmp(str(t, r, MPC_routing), routing) != 0 ||
                        num(t, r, MPC_fits) != 0 || num(t, r, MPC_meets_slo) != 1 ||
                        (best >= 0 && !plan_cheaper(t, r, best)))
                        continue;
                    if (pick < 0 || plan_cheaper(t, r, pick))
                        pick = r;
                }
                if (pick < 0)
                    break;
                shown[ns++] = pick;
                plan_row(d, t, pick, "met the SLO, dropped: does not fit");
            }
            doc_table(d, 0);
        }
    }
}

/* The alternatives that came close to a routing's plan (plan.json's, in its order), each with why
 * it lost. */
static void write_alternatives(struct doc *d, const char *routing, const cJSON *alts)
{
    static const char *const head[] = {"layout", "setup", "batch", "replicas", "GPUs",
                                       "p99 token, whole step (ms)", "memory per GPU (GB)", "why it lost"};
    if (!cJSON_IsArray(alts) || cJSON_GetArraySize(alts) == 0)
        return;
    char title[160];
    snprintf(title, sizeof title, "Routing %.60s: the alternatives that came close", routing);
    doc_table_head(d, title, head, 8);
    const cJSON *a;
    cJSON_ArrayForEach(a, alts) {
        char cells[8][CELL];
        snprintf(cells[0], CELL, "%.40s", jstr(a, MP_PJ_LAYOUT) ? jstr(a, MP_PJ_LAYOUT) : "?");
        snprintf(cells[1], CELL, "%.80s", jstr(a, MP_PJ_REMEDIES) ? jstr(a, MP_PJ_REMEDIES) : "?");
        f_g(cells[2], jnum(a, MP_PJ_BATCH), "%.0f");
        f_g(cells[3], jnum(a, MP_PJ_REPLICAS), "%.0f");
        f_g(cells[4], jnum(a, MP_PJ_GPUS), "%.0f");
        f_g(cells[5], jnum(a, MP_PJ_TOKEN_P99_MS), "%.2f");
        f_g(cells[6], jnum(a, MP_PJ_MEM_GB_PER_GPU), "%.1f");
        snprintf(cells[7], CELL, "%.200s", jstr(a, MP_PJ_LOST) ? jstr(a, MP_PJ_LOST) : "");
        doc_row(d, 8, cells, 0);
    }
    doc_table(d, 0);
}

/* A plan of plan.json into cells 1..6 of a row: GPUs, layout, setup (remedies), batch, replicas,
 * p99 token time. */
static void plan_cells(char cells[][CELL], const cJSON *x)
{
    f_g(cells[1], jnum(x, MP_PJ_GPUS), "%.0f");
    snprintf(cells[2], CELL, "%.40s", jstr(x, MP_PJ_LAYOUT) ? jstr(x, MP_PJ_LAYOUT) : "?");
    snprintf(cells[3], CELL, "%.80s", jstr(x, MP_PJ_REMEDIES) ? jstr(x, MP_PJ_REMEDIES) : "?");
    f_g(cells[4], jnum(x, MP_PJ_BATCH), "%.0f");
    f_g(cells[5], jnum(x, MP_PJ_REPLICAS), "%.0f");
    f_g(cells[6], jnum(x, MP_PJ_TOKEN_P99_MS), "%.2f");
}

/* What a routing's plan becomes under other targets and with each remedy setting alone
 * (plan.json's sensitivity and by_remedies). */
static void write_sensitivity(struct doc *d, const char *routing, const cJSON *sens,
                              const cJSON *by)
{
    static const char *const head[] = {"case", "GPUs", "layout", "setup", "batch", "replicas",
                                       "p99 token, whole step (ms)"};
    if (cJSON_GetArraySize(sens) + cJSON_GetArraySize(by) == 0)
        return;
    char title[160];
    snprintf(title, sizeof title, "Routing %.60s: what the plan becomes", routing);
    doc_table_head(d, title, head, 7);
    for (int part = 0; part < 2; part++) {
        const cJSON *x, *list = part ? by : sens;
        cJSON_ArrayForEach(x, list) {
            char cells[7][CELL];
            snprintf(cells[0], CELL, "%s%.100s", part ? "only " : "",
                     jstr(x, MP_PJ_CASE) ? jstr(x, MP_PJ_CASE) : "?");
            if (!cJSON_IsTrue(cJSON_GetObjectItem(x, MP_PJ_FOUND))) {
                for (int k = 1; k < 7; k++)
                    snprintf(cells[k], CELL, "%s", k == 1 ? "none meets the SLO" : "");
                doc_row(d, 7, cells, 0);
                continue;
            }
            plan_cells(cells, x);
            doc_row(d, 7, cells, 0);
        }
    }
    doc_table(d, 0);
}

/* The GPUs of a re-planned case of plan.json (if_slower, if_faster) as text: "N" or "none". */
static void gpus_text(char *out, size_t size, const cJSON *x)
{
    if (cJSON_IsTrue(cJSON_GetObjectItem(x, MP_PJ_FOUND)))
        snprintf(out, size, "%.0f", jnum(x, MP_PJ_GPUS));
    else
        snprintf(out, size, "none meets the SLO");
}

/* How far to trust a routing's plan (plan.json's trust): per basis — the published measurements
 * of the profile's hardware, the runs a fitted profile was fitted to — its errors, and the plan
 * were the cluster as much slower or faster than modelled as the model's worst errors there. */
static void write_trust(struct doc *d, const char *routing, const cJSON *trust, double gpus)
{
    static const char *const head[] = {"basis", "points", "median |error|", "worst |error|",
                                       "model / reference", "GPUs if slower (layout, batch)",
                                       "GPUs if faster (layout, batch)"};
    if (!cJSON_IsArray(trust) || cJSON_GetArraySize(trust) == 0)
        return;
    char title[160];
    snprintf(title, sizeof title, "Routing %.60s: how far to trust it", routing);
    doc_h(d, 3, title);
    const cJSON *t;
    int rows = 0;
    cJSON_ArrayForEach(t, trust) {
        const char *basis = jstr(t, MP_PJ_BASIS) ? jstr(t, MP_PJ_BASIS) : "?";
        if (jstr(t, MP_PJ_MISSING)) {
            doc_p(d, "No %s basis: %s.", basis, jstr(t, MP_PJ_MISSING));
            continue;
        }
        const cJSON *slow = cJSON_GetObjectItem(t, MP_PJ_IF_SLOWER),
                    *fast = cJSON_GetObjectItem(t, MP_PJ_IF_FASTER);
        char gs[64], gf[64];
        gpus_text(gs, sizeof gs, slow);
        gpus_text(gf, sizeof gf, fast);
        doc_p(d, "%s: %s. Over %.0f points the model is off by %.1f %% at the median and %.1f %% "
                 "at worst (model / reference %.2f to %.2f). Were the cluster as much slower than "
                 "modelled as the model's largest underestimate there, the plan's %.0f GPUs would "
                 "be %s; as much faster as its largest overestimate, %s.",
              strcmp(basis, "published") == 0 ? "Published measurements" : "Calibration runs",
              jstr(t, MP_PJ_DETAIL) ? jstr(t, MP_PJ_DETAIL) : "", jnum(t, MP_PJ_POINTS),
              100 * jnum(t, MP_PJ_MEDIAN_ERROR), 100 * jnum(t, MP_PJ_WORST_ERROR),
              jnum(t, MP_PJ_MODEL_OVER_REFERENCE_MIN), jnum(t, MP_PJ_MODEL_OVER_REFERENCE_MAX), gpus, gs,
              gf);
        if (!rows++) {
            doc_table(d, 2);
            doc_row_texts(d, 7, head, 1);
        }
        char cells[7][CELL];
        snprintf(cells[0], CELL, "%.60s", basis);
        f_g(cells[1], jnum(t, MP_PJ_POINTS), "%.0f");
        f_pct(cells[2], jnum(t, MP_PJ_MEDIAN_ERROR));
        f_pct(cells[3], jnum(t, MP_PJ_WORST_ERROR));
        snprintf(cells[4], CELL, "%.2f to %.2f", jnum(t, MP_PJ_MODEL_OVER_REFERENCE_MIN),
                 jnum(t, MP_PJ_MODEL_OVER_REFERENCE_MAX));
        for (int k = 0; k < 2; k++) {
            const cJSON *x = k ? fast : slow;
            if (cJSON_IsTrue(cJSON_GetObjectItem(x, MP_PJ_FOUND)))
                snprintf(cells[5 + k], CELL, "%.0f (%.40s %.80s, batch %.0f)", jnum(x, MP_PJ_GPUS),
                         jstr(x, MP_PJ_LAYOUT) ? jstr(x, MP_PJ_LAYOUT) : "?",
                         jstr(x, MP_PJ_REMEDIES) ? jstr(x, MP_PJ_REMEDIES) : "?", jnum(x, MP_PJ_BATCH));
            else
                snprintf(cells[5 + k], CELL, "none meets the SLO");
        }
        doc_row(d, 7, cells, 0);
    }
    if (rows)
        doc_table(d, 0);
}

/* The published basis's GPU range of an answer as ", A–B GPUs within the model's published
 * error" (A = B: "the same GPUs …"), or "" without one. */
static void trust_range(char *out, size_t size, const cJSON *a)
{
    const cJSON *t;
    out[0] = '\0';
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(a, MP_PJ_TRUST)) {
        const cJSON *slow = cJSON_GetObjectItem(t, MP_PJ_IF_SLOWER),
                    *fast = cJSON_GetObjectItem(t, MP_PJ_IF_FASTER);
        if (!jstr(t, MP_PJ_BASIS) || strcmp(jstr(t, MP_PJ_BASIS), "published") != 0 || !slow || !fast)
            continue;
        char gs[32], gf[32];
        gpus_text(gs, sizeof gs, slow);
        gpus_text(gf, sizeof gf, fast);
        if (!strcmp(gs, gf))
            snprintf(out, size, "; %s GPUs still within the model's published error", gs);
        else
            snprintf(out, size, "; %s to %s GPUs within the model's published error", gf, gs);
        return;
    }
}

/* The answer first: for each plan directory (moeperf-plan's plan.json, docs/planning.md) the
 * question in a sentence, then per routing the cheapest plan in a sentence and a row: GPUs,
 * layout and remedies, batch, replicas, p99 token latency against the SLO, throughput and memory
 * per GPU, the numbers as plan.json holds them. */
/* The step's parts of plan.json's answers (step_parts_ms), in the stacked bar's order, with the
 * words the report shows and the bar's colours. */
static const struct {
    const char *key, *words, *colour;
} step_parts[] = {
    {"attention", "attention", "#4e79a7"},       {"dense", "dense layers", "#a0cbe8"},
    {"expert_compute", "expert compute", "#f28e2b"}, {"dispatch_combine", "dispatch + combine", "#e15759"},
    {"small_kernels", "small kernels", "#76b7b2"}, {"head", "LM head", "#59a14f"},
    {"host", "host", "#bab0ac"},
};
enum { NSTEP_PARTS = sizeof step_parts / sizeof step_parts[0] };

/* One plan's step in words: its context, tokens/s per GPU, cost per million tokens and parts. */
static void step_parts_text(struct doc *d, const char *routing, const cJSON *a)
{
    const cJSON *parts = cJSON_GetObjectItem(a, MP_PJ_STEP_PARTS_MS);
    if (!cJSON_IsObject(parts))
        return; /* a plan.json written before the whole step */
    char text[1024] = "", cost[96] = "";
    size_t used = 0;
    for (int k = 0; k < NSTEP_PARTS && used < sizeof text; k++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%s %.2f", k ? ", " : "",
                                 step_parts[k].words, jnum(parts, step_parts[k].key));
    double usd = jnum(a, MP_PJ_USD_PER_MTOK);
    if (!isnan(usd))
        snprintf(cost, sizeof cost, "; USD %.3f per million output tokens", usd);
    doc_p(d, "Routing %s, its decode step (%s, %.0f tokens of context): %.2f ms per token at the "
             "median, %.0f tokens/s per GPU%s; of it %s ms.",
          routing, jnum(a, MP_PJ_MICRO_BATCHES) > 1 ? "two micro-batches overlapped" : "one batch",
          jnum(a, MP_PJ_CONTEXT), jnum(a, MP_PJ_TOKEN_P50_MS), jnum(a, MP_PJ_TOK_S_GPU), cost, text);
}

/* A stacked bar per plan of the step's parts (scope: the whole step): an SVG in the page, a table
 * in the Markdown. */
static void step_bars(struct doc *d, const cJSON *answers)
{
    const cJSON *a;
    int n = 0;
    double most = 0;
    cJSON_ArrayForEach(a, answers) {
        if (cJSON_IsObject(cJSON_GetObjectItem(a, MP_PJ_STEP_PARTS_MS))) {
            n++;
            most = fmax(most, jnum(a, MP_PJ_TOKEN_P50_MS));
        }
    }
    if (!n || !(most > 0))
        return;
    doc_h(d, 3, "What a step of each plan spends its time on (scope: the whole step, ms)");
    if (d->h) {
        int W = 720, left = 110, bar = 22, gap = 14, top = 10, key = 24;
        int H = top + n * (bar + gap) + 2 * key + 10;
        double scale = (W - left - 70) / most;
        fprintf(d->h, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\" "
                      "role=\"img\"><title>The decode step's parts per plan</title>\n",
                W, H, W, H);
        int row = 0;
        cJSON_ArrayForEach(a, answers) {
            const cJSON *parts = cJSON_GetObjectItem(a, MP_PJ_STEP_PARTS_MS);
            if (!cJSON_IsObject(parts))
                continue;
            int y = top + row++ * (bar + gap);
            fprintf(d->h, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 6,
                    y + bar / 2 + 4);
            html_esc(d->h, jstr(a, MP_PJ_ROUTING) ? jstr(a, MP_PJ_ROUTING) : "?");
            fputs("</text>\n", d->h);
            double x = left;
            for (int k = 0; k < NSTEP_PARTS; k++) {
                double w = fmax(0, jnum(parts, step_parts[k].key)) * scale;
                fprintf(d->h, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
                              "fill=\"%s\"><title>%s %.2f ms</title></rect>\n",
                        x, y, w, bar, step_parts[k].colour, step_parts[k].words,
                        jnum(parts, step_parts[k].key));
                x += w;
            }
            fprintf(d->h, "<text x=\"%.1f\" y=\"%d\">%.2f ms</text>\n", x + 4, y + bar / 2 + 4,
                    jnum(a, MP_PJ_TOKEN_P50_MS));
        }
        int y = top + n * (bar + gap) + 4;
        for (int k = 0; k < NSTEP_PARTS; k++) { /* the key, in two rows that fit the width */
            int kx = 10 + (k % 4) * 175, ky = y + (k / 4) * key;
            fprintf(d->h, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                          "<text x=\"%d\" y=\"%d\">%s</text>\n",
                    kx, ky, step_parts[k].colour, kx + 16, ky + 10, step_parts[k].words);
        }
        fputs("</svg>\n", d->h);
    }
    if (d->m) {
        fputs("\n| routing |", d->m);
        for (int k = 0; k < NSTEP_PARTS; k++)
            fprintf(d->m, " %s |", step_parts[k].words);
        fputs(" step p50 |\n|---|", d->m);
        for (int k = 0; k <= NSTEP_PARTS; k++)
            fputs("---|", d->m);
        fputs("\n", d->m);
        cJSON_ArrayForEach(a, answers) {
            const cJSON *parts = cJSON_GetObjectItem(a, MP_PJ_STEP_PARTS_MS);
            if (!cJSON_IsObject(parts))
                continue;
            fputs("| ", d->m);
            md_esc(d->m, jstr(a, MP_PJ_ROUTING) ? jstr(a, MP_PJ_ROUTING) : "?");
            fputs(" |", d->m);
            for (int k = 0; k < NSTEP_PARTS; k++)
                fprintf(d->m, " %.2f |", jnum(parts, step_parts[k].key));
            fprintf(d->m, " %.2f |\n", jnum(a, MP_PJ_TOKEN_P50_MS));
        }
        fputs("\n", d->m);
    }
}

void write_answer(struct doc *d, const struct rp_run *runs, int nruns)
{
    static const char *const head[] = {"routing", "GPUs", "layout", "setup", "batch", "replicas",
                                       "p99 token, whole step (ms)", "SLO (ms)", "tokens/s",
                                       "memory per GPU (GB)"};
    int titled = 0;
    for (int i = 0; i < nruns; i++) {
        const cJSON *j = runs[i].plan_json;
        const cJSON *q = cJSON_GetObjectItem(j, MP_PJ_QUESTION);
        const cJSON *answers = cJSON_GetObjectItem(j, MP_PJ_ANSWERS);
        if (!cJSON_IsObject(q) || !cJSON_IsArray(answers))
            continue;
        const cJSON *m = cJSON_GetObjectItem(q, MP_PJ_MODEL), *cl = cJSON_GetObjectItem(q, MP_PJ_CLUSTER);
        const cJSON *slo = cJSON_GetObjectItem(q, MP_PJ_SLO), *cons = cJSON_GetObjectItem(q, MP_PJ_CONSTRAINTS);
        double slo_ms = jnum(slo, MP_PJ_TOKEN_P99_MS), tput = jnum(q, MP_PJ_THROUGHPUT_TOKENS_PER_S);
        const char *src = jstr(cl, MP_PJ_SOURCE);
        if (!titled++)
            doc_h(d, 2, "The answer");
        char target[96] = "one replica", budget[96] = "no p99 token budget";
        if (tput > 0)
            snprintf(target, sizeof target, "%.0f tokens/s", tput);
        if (slo_ms > 0)
            snprintf(budget, sizeof budget, "a p99 budget of %g ms per output token for the "
                     "whole decode step", slo_ms);
        doc_p(d, "%s on the %s cluster profile (%s%s%s), %s, %s, at most %.0f GPUs (%s):",
              jstr(m, MP_PJ_NAME) ? jstr(m, MP_PJ_NAME) : "?", jstr(cl, MP_PJ_NAME) ? jstr(cl, MP_PJ_NAME) : "?",
              src ? src : "?", jstr(cl, MP_PJ_PATH) ? " " : "", jstr(cl, MP_PJ_PATH) ? jstr(cl, MP_PJ_PATH) : "",
              target, budget, jnum(cons, MP_PJ_MAX_GPUS), runs[i].dir);
        doc_h(d, 3, "The cheapest plan per routing");
        doc_table(d, 3);
        doc_row_texts(d, 10, head, 1);
        const cJSON *a;
        cJSON_ArrayForEach(a, answers) {
            char cells[10][CELL];
            const char *routing = jstr(a, MP_PJ_ROUTING) ? jstr(a, MP_PJ_ROUTING) : "?";
            snprintf(cells[0], CELL, "%.60s", routing);
            if (!cJSON_IsTrue(cJSON_GetObjectItem(a, MP_PJ_FOUND))) {
                for (int k = 1; k < 10; k++)
                    snprintf(cells[k], CELL, "%s", k == 1 ? "none meets the SLO" : "");
                doc_row(d, 10, cells, 0);
                continue;
            }
            const cJSON *mem = cJSON_GetObjectItem(a, MP_PJ_MEM_GB_PER_GPU);
            plan_cells(cells, a);
            if (slo_ms > 0)
                f_g(cells[7], slo_ms, "%g");
            else
                snprintf(cells[7], CELL, "none");
            f_g(cells[8], jnum(a, MP_PJ_TOKENS_PER_S), "%.0f");
            f_g(cells[9], jnum(mem, MP_PJ_TOTAL), "%.1f");
            doc_row(d, 10, cells, 0);
        }
        doc_table(d, 0);
        cJSON_ArrayForEach(a, answers) {
            const char *routing = jstr(a, MP_PJ_ROUTING) ? jstr(a, MP_PJ_ROUTING) : "?";
            if (!cJSON_IsTrue(cJSON_GetObjectItem(a, MP_PJ_FOUND))) {
                doc_p(d, "Routing %s: no plan meets the SLO and fits in memory within %.0f GPUs.",
                      routing, jnum(cons, MP_PJ_MAX_GPUS));
                continue;
            }
            char head_room[64] = "", range[256];
            double h = jnum(a, MP_PJ_SLO_HEADROOM);
            if (!isnan(h))
                snprintf(head_room, sizeof head_room, ", %.0f %% of the budget left", 100 * h);
            trust_range(range, sizeof range, a);
            doc_p(d, "Routing %s: %.0f GPUs as %.0f replica(s) of %s (%s) at batch %.0f; p99 token "
                     "%.2f ms%s; %.0f tokens/s; %.1f GB per GPU%s.",
                  routing, jnum(a, MP_PJ_GPUS), jnum(a, MP_PJ_REPLICAS), jstr(a, MP_PJ_LAYOUT),
                  jstr(a, MP_PJ_REMEDIES), jnum(a, MP_PJ_BATCH), jnum(a, MP_PJ_TOKEN_P99_MS), head_room,
                  jnum(a, MP_PJ_TOKENS_PER_S), jnum(cJSON_GetObjectItem(a, "mem_gb_per_gpu"), MP_PJ_TOTAL),
                  range);
            step_parts_text(d, routing, a);
            const cJSON *r;
            cJSON_ArrayForEach(r, cJSON_GetObjectItem(a, MP_PJ_REPLICAS_VS_BATCH))
                if (jstr(r, MP_PJ_TEXT))
                    doc_p(d, "Replicas against batch, routing %s: %s.", routing, jstr(r, MP_PJ_TEXT));
        }
        step_bars(d, answers);
        write_serving(d, q, answers);
        cJSON_ArrayForEach(a, answers) {
            const char *routing = jstr(a, MP_PJ_ROUTING) ? jstr(a, MP_PJ_ROUTING) : "?";
            if (!cJSON_IsTrue(cJSON_GetObjectItem(a, MP_PJ_FOUND)))
                continue;
            write_alternatives(d, routing, cJSON_GetObjectItem(a, MP_PJ_ALTERNATIVES));
            write_sensitivity(d, routing, cJSON_GetObjectItem(a, MP_PJ_SENSITIVITY),
                              cJSON_GetObjectItem(a, MP_PJ_BY_REMEDIES));
            write_trust(d, routing, cJSON_GetObjectItem(a, MP_PJ_TRUST), jnum(a, MP_PJ_GPUS));
        }
    }
}
