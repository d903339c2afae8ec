/* report_serving.c - moeperf-report's view of a serving workload's answer (report_serving.h):
 * the prefill and decode pools, or the co-located one, and the P:D split against the
 * input/output ratio. */
#include "report_serving.h"

#include <math.h>
#include <stdio.h>

#include "plan_keys.h"

/* One pool as table cells: its role, GPUs, layout, what each instance runs, TTFT and token time. */
static void pool_cells(char cells[][CELL], const char *role, const cJSON *p, const char *runs,
                       double ttft, double tpot)
{
    snprintf(cells[0], CELL, "%s", role);
    f_g(cells[1], jnum(p, MP_PJ_GPUS), "%.0f");
    snprintf(cells[2], CELL, "%s", jstr(p, MP_PJ_LAYOUT) ? jstr(p, MP_PJ_LAYOUT) : "?");
    snprintf(cells[3], CELL, "%.150s", runs);
    f_g(cells[4], ttft, "%.1f");
    f_g(cells[5], tpot, "%.2f");
    f_g(cells[6], jnum(p, MP_PJ_MEM_GB_PER_GPU), "%.1f");
}

/* The P:D split curve: a bar pair per input/output split (prefill and decode GPUs), an SVG in the
 * page and a table in the Markdown. */
static void split_figure(struct doc *d, const char *routing, const cJSON *split)
{
    int n = cJSON_GetArraySize(split);
    double most = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, split)
        most = fmax(most, fmax(jnum(x, MP_PJ_PREFILL_GPUS), jnum(x, MP_PJ_DECODE_GPUS)));
    if (n == 0 || !(most > 0))
        return;
    char title[256];
    snprintf(title, sizeof title, "How the P:D split moves with the input/output ratio, routing "
             "%.60s (GPUs per pool at the same total length)", routing);
    doc_h(d, 3, title);
    if (d->h) {
        int W = 720, left = 150, bar = 12, gap = 16, top = 10, key = 22;
        int H = top + n * (2 * bar + gap) + key + 10;
        double scale = (W - left - 80) / most;
        fprintf(d->h, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\" "
                      "role=\"img\"><title>Prefill and decode GPUs per input/output split"
                      "</title>\n", W, H, W, H);
        int row = 0;
        cJSON_ArrayForEach(x, split) {
            int y = top + row++ * (2 * bar + gap);
            fprintf(d->h, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">in %.0f / out %.0f</text>\n",
                    left - 6, y + bar + 4, jnum(x, MP_PJ_ISL), jnum(x, MP_PJ_OSL));
            const char *keys[2] = {MP_PJ_PREFILL_GPUS, MP_PJ_DECODE_GPUS};
            const char *colour[2] = {"#f28e2b", "#4e79a7"};
            for (int k = 0; k < 2; k++) {
                double g = jnum(x, keys[k]);
                double w = isnan(g) ? 0 : g * scale;
                fprintf(d->h, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\">"
                              "<title>%s GPUs</title></rect>\n",
                        left, y + k * bar, w, bar, colour[k], k ? "decode" : "prefill");
                if (isnan(g))
                    fprintf(d->h, "<text x=\"%d\" y=\"%d\">no plan</text>\n", left + 4,
                            y + k * bar + 10);
                else
                    fprintf(d->h, "<text x=\"%.1f\" y=\"%d\">%.0f</text>\n", left + w + 4,
                            y + k * bar + 10, g);
            }
        }
        int y = top + n * (2 * bar + gap) + 4;
        fprintf(d->h, "<rect x=\"10\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#f28e2b\"/>"
                      "<text x=\"26\" y=\"%d\">prefill GPUs</text>"
                      "<rect x=\"160\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#4e79a7\"/>"
                      "<text x=\"176\" y=\"%d\">decode GPUs</text>\n</svg>\n",
                y, y + 10, y, y + 10);
    }
    if (d->m) {
        fputs("\n| input tokens | output tokens | prefill GPUs | decode GPUs |\n"
              "|---|---|---|---|\n", d->m);
        cJSON_ArrayForEach(x, split) {
            char p[CELL], q[CELL];
            f_g(p, jnum(x, MP_PJ_PREFILL_GPUS), "%.0f");
            f_g(q, jnum(x, MP_PJ_DECODE_GPUS), "%.0f");
            fprintf(d->m, "| %.0f | %.0f | %s | %s |\n", jnum(x, MP_PJ_ISL), jnum(x, MP_PJ_OSL), p,
                    q);
        }
        fputs("\n", d->m);
    }
}

void write_serving(struct doc *d, const cJSON *question, const cJSON *answers)
{
    const cJSON *wl = cJSON_GetObjectItem(question, MP_PJ_WORKLOAD), *a;
    if (!cJSON_IsObject(wl))
        return;
    static const char *const head[] = {"pool", "GPUs", "layout", "each instance runs",
                                       "TTFT (ms)", "p99 token (ms)", "memory per GPU (GB)"};
    cJSON_ArrayForEach(a, answers) {
        const cJSON *s = cJSON_GetObjectItem(a, MP_PJ_SERVING);
        if (!cJSON_IsObject(s))
            continue;
        const char *routing = jstr(a, MP_PJ_ROUTING) ? jstr(a, MP_PJ_ROUTING) : "?";
        const char *choice = jstr(s, MP_PJ_CHOICE) ? jstr(s, MP_PJ_CHOICE) : "none";
        char title[160], budget[192] = "";
        snprintf(title, sizeof title, "Serving the workload, routing %.60s", routing);
        doc_h(d, 3, title);
        double token = jnum(cJSON_GetObjectItem(question, MP_PJ_SLO), MP_PJ_TOKEN_P99_MS);
        int at = 0;
        if (jnum(wl, "slo_ttft_ms") > 0)
            at = snprintf(budget, sizeof budget, ", a mean TTFT of at most %g ms",
                          jnum(wl, "slo_ttft_ms"));
        if (token > 0 && at >= 0 && at < (int)sizeof budget)
            snprintf(budget + at, sizeof budget - (size_t)at, ", a p99 of at most %g ms per "
                     "output token", token);
        if (jnum(wl, "classes") > 1)
            doc_p(d, "%g requests/s in %.0f length classes (%s), of %.0f prompt and %.0f output "
                     "tokens on average, the longest prompt %.0f%s.", jnum(wl, "rate_rps"),
                  jnum(wl, "classes"), jstr(wl, "lengths_file") ? jstr(wl, "lengths_file") : "?",
                  jnum(wl, MP_PJ_ISL), jnum(wl, MP_PJ_OSL), jnum(wl, "isl_max"), budget);
        else
            doc_p(d, "%g requests/s of %.0f prompt and %.0f output tokens%s.", jnum(wl, "rate_rps"),
                  jnum(wl, MP_PJ_ISL), jnum(wl, MP_PJ_OSL), budget);
        if (!jnum(s, MP_PJ_GPUS)) {
            doc_p(d, "No pool serves it: %s.", jstr(s, MP_PJ_WHY) ? jstr(s, MP_PJ_WHY) : "?");
            continue;
        }
        const cJSON *pre = cJSON_GetObjectItem(s, MP_PJ_PREFILL);
        const cJSON *dec = cJSON_GetObjectItem(s, MP_PJ_DECODE);
        const cJSON *co = cJSON_GetObjectItem(s, MP_PJ_COLOCATED);
        const cJSON *kv = cJSON_GetObjectItem(s, MP_PJ_KV_TRANSFER);
        char cost[96] = "";
        if (!isnan(jnum(s, MP_PJ_USD_PER_MTOK)))
            snprintf(cost, sizeof cost, ", USD %.3f per million output tokens",
                     jnum(s, MP_PJ_USD_PER_MTOK));
        doc_p(d, "The answer is %s: %.0f GPUs, a mean TTFT of %.1f ms, a p99 of %.2f ms per "
                 "output token, %.0f output tokens/s per GPU over every pool%s.",
              choice, jnum(s, MP_PJ_GPUS), jnum(s, MP_PJ_TTFT_MS), jnum(s, MP_PJ_TPOT_MS),
              jnum(s, MP_PJ_OUTPUT_TOK_S_GPU), cost);
        doc_table(d, 3);
        doc_row_texts(d, 7, head, 1);
        char cells[7][CELL], runs[CELL];
        if (cJSON_IsTrue(cJSON_GetObjectItem(pre, MP_PJ_FOUND))) {
            snprintf(runs, CELL, "%.0f x a pass of %.0f tokens per GPU (%.0f ms, chunk %.0f), "
                     "%.0f input tokens/s per GPU, utilization %.2f",
                     jnum(pre, MP_PJ_INSTANCES), jnum(pre, "tokens_per_gpu"),
                     jnum(pre, "pass_ms"), jnum(pre, "chunk"), jnum(pre, "input_tok_s_gpu"),
                     jnum(pre, "utilization"));
            pool_cells(cells, "prefill", pre, runs, jnum(pre, MP_PJ_TTFT_MS), NAN);
            doc_row(d, 7, cells, 0);
        }
        if (cJSON_IsTrue(cJSON_GetObjectItem(dec, MP_PJ_FOUND))) {
            snprintf(runs, CELL, "%.0f x batch %.0f at a context of %.0f, %.0f output tokens/s "
                     "per GPU", jnum(dec, MP_PJ_REPLICAS), jnum(dec, MP_PJ_BATCH),
                     jnum(dec, MP_PJ_CONTEXT), jnum(dec, MP_PJ_TOK_S_GPU));
            pool_cells(cells, "decode", dec, runs, NAN, jnum(dec, MP_PJ_TPOT_MS));
            doc_row(d, 7, cells, 0);
        }
        if (cJSON_IsTrue(cJSON_GetObjectItem(co, MP_PJ_FOUND))) {
            snprintf(runs, CELL, "%.0f x decode batch %.0f and passes of %.0f tokens per GPU, "
                     "%.0f %% of the time in prefill", jnum(co, MP_PJ_INSTANCES),
                     jnum(co, MP_PJ_BATCH), jnum(co, "tokens_per_gpu"),
                     100 * jnum(co, "prefill_share"));
            pool_cells(cells, "co-located", co, runs, jnum(co, MP_PJ_TTFT_MS),
                       jnum(co, MP_PJ_TPOT_MS));
            doc_row(d, 7, cells, 0);
        }
        doc_table(d, 0);
        if (jstr(s, "ttft_formula"))
            doc_p(d, "The TTFT is the mean: %s.", jstr(s, "ttft_formula"));
        if (!isnan(jnum(kv, "ms")))
            doc_p(d, "Disaggregated, each request's KV cache (%.1f MB) moves from the prefill to "
                     "the decode pool in %.2f ms over the prefill GPUs' NICs, %.2f GB/s at this "
                     "rate; the TTFT includes it.",
                  jnum(kv, "mb_per_request"), jnum(kv, "ms"), jnum(kv, "gb_per_s"));
        split_figure(d, routing, cJSON_GetObjectItem(s, MP_PJ_SPLIT));
    }
}
