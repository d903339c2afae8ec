/* serving_answer.c - a serving workload's answer on the console and in plan.json (see
 * serving_answer.h, docs/planning.md "Serving a workload"). */
#include "serving_answer.h"

#include <math.h>
#include <stdio.h>

#include "dedup.h"
#include "dtype.h"
#include "plan_answer.h"
#include "plan_keys.h"

/* A number, or null when it is not finite. */
static void add_num(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* The setup every pool shares: its layout and what it runs. */
static void add_setup(cJSON *o, const struct mp_plan_cand *c)
{
    char layout[32];
    snprintf(layout, sizeof layout, "tp%dep%d", c->tp, c->ep);
    cJSON_AddStringToObject(o, MP_PJ_LAYOUT, layout);
    cJSON_AddNumberToObject(o, "tp", c->tp);
    cJSON_AddNumberToObject(o, "ep", c->ep);
    cJSON_AddStringToObject(o, "dedup", mp_dedup_choices[c->dedup]);
    cJSON_AddStringToObject(o, "weight_dtype", mp_dtype_choices[c->weight_dtype]);
    cJSON_AddStringToObject(o, "dispatch_dtype", mp_dtype_choices[c->dispatch_dtype]);
    cJSON_AddNumberToObject(o, MP_PJ_MICRO_BATCHES, c->micro_batches);
    cJSON_AddNumberToObject(o, MP_PJ_MEM_GB_PER_GPU, c->mem.total / 1e9);
}

/* How a prefill pass serves the workload. */
static void add_serve(cJSON *o, const struct mp_prefill_serve *s)
{
    cJSON_AddNumberToObject(o, MP_PJ_INSTANCES, (double)s->instances);
    cJSON_AddNumberToObject(o, MP_PJ_GPUS, (double)s->gpus);
    cJSON_AddNumberToObject(o, "utilization", s->util);
    cJSON_AddNumberToObject(o, "queue_ms", s->queue_ms);
    cJSON_AddNumberToObject(o, "passes", s->passes);
    cJSON_AddNumberToObject(o, MP_PJ_TTFT_MS, s->ttft_ms);
}

cJSON *mp_serving_json(const struct mp_plan_req *q, const struct mp_serving_req *w,
                       const struct mp_serving_answer *a)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, MP_PJ_CHOICE, a->choice);
    if (a->why[0])
        cJSON_AddStringToObject(j, MP_PJ_WHY, a->why);
    else
        cJSON_AddNullToObject(j, MP_PJ_WHY);
    cJSON_AddStringToObject(j, "ttft_formula", MP_SERVING_TTFT_FORMULA);
    cJSON_AddNumberToObject(j, MP_PJ_GPUS, (double)a->gpus);
    add_num(j, MP_PJ_TTFT_MS, a->gpus > 0 ? a->ttft_ms : NAN);
    add_num(j, MP_PJ_TPOT_MS, a->gpus > 0 ? a->tpot_ms : NAN);
    add_num(j, MP_PJ_OUTPUT_TOK_S_GPU, a->gpus > 0 ? a->out_tok_s_gpu : NAN);
    add_num(j, MP_PJ_USD_PER_MTOK, a->usd_per_mtok);
    cJSON *p = cJSON_AddObjectToObject(j, MP_PJ_PREFILL);
    cJSON_AddBoolToObject(p, MP_PJ_FOUND, a->prefill.found);
    if (a->prefill.found) {
        const struct mp_plan_cand *c = &a->prefill.c;
        add_setup(p, c);
        cJSON_AddNumberToObject(p, "tokens_per_gpu", (double)(c->batch / c->ep));
        cJSON_AddNumberToObject(p, "chunk", (double)a->prefill.chunk);
        cJSON_AddNumberToObject(p, "pass_ms", c->token_ms);
        cJSON_AddNumberToObject(p, "input_tok_s_gpu", a->prefill.input_tok_s_gpu);
        add_serve(p, &a->prefill.s);
    }
    cJSON *d = cJSON_AddObjectToObject(j, MP_PJ_DECODE);
    cJSON_AddBoolToObject(d, MP_PJ_FOUND, a->decode_found);
    if (a->decode_found) {
        const struct mp_plan_cand *c = &a->decode;
        add_setup(d, c);
        cJSON_AddNumberToObject(d, MP_PJ_BATCH, (double)c->batch);
        cJSON_AddNumberToObject(d, MP_PJ_CONTEXT, (double)q->context);
        cJSON_AddNumberToObject(d, MP_PJ_REPLICAS, (double)c->dp);
        cJSON_AddNumberToObject(d, MP_PJ_GPUS, (double)c->gpus);
        cJSON_AddNumberToObject(d, MP_PJ_TOKEN_P50_MS, c->token_ms);
        cJSON_AddNumberToObject(d, MP_PJ_TPOT_MS, c->token_p99_ms);
        cJSON_AddNumberToObject(d, MP_PJ_TOK_S_GPU, c->tok_s_gpu);
    }
    cJSON *kv = cJSON_AddObjectToObject(j, MP_PJ_KV_TRANSFER);
    add_num(kv, "mb_per_request", a->prefill.found ? a->kv_bytes / 1e6 : NAN);
    add_num(kv, "ms", a->prefill.found ? a->kv_ms : NAN);
    add_num(kv, "gb_per_s", a->prefill.found ? a->kv_bytes * w->rate / 1e9 : NAN);
    cJSON *co = cJSON_AddObjectToObject(j, MP_PJ_COLOCATED);
    cJSON_AddBoolToObject(co, MP_PJ_FOUND, a->coloc.found);
    if (a->coloc.found) {
        add_setup(co, &a->coloc.d);
        cJSON_ReplaceItemInObject(co, MP_PJ_MEM_GB_PER_GPU,
                                  cJSON_CreateNumber(a->coloc.mem_gb_per_gpu));
        cJSON_AddNumberToObject(co, MP_PJ_BATCH, (double)a->coloc.d.batch);
        cJSON_AddNumberToObject(co, "tokens_per_gpu",
                                (double)(a->coloc.p.batch / a->coloc.p.ep));
        cJSON_AddNumberToObject(co, "chunk", (double)a->coloc.chunk);
        cJSON_AddNumberToObject(co, "prefill_share", a->coloc.prefill_share);
        cJSON_AddNumberToObject(co, MP_PJ_TPOT_MS, a->coloc.tpot_ms);
        add_serve(co, &a->coloc.s);
    }
    cJSON *sp = cJSON_AddArrayToObject(j, MP_PJ_SPLIT);
    for (int i = 0; i < a->nsplit; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, MP_PJ_ISL, (double)a->split[i].isl);
        cJSON_AddNumberToObject(x, MP_PJ_OSL, (double)a->split[i].osl);
        add_num(x, MP_PJ_PREFILL_GPUS,
                a->split[i].prefill_gpus >= 0 ? (double)a->split[i].prefill_gpus : NAN);
        add_num(x, MP_PJ_DECODE_GPUS,
                a->split[i].decode_gpus >= 0 ? (double)a->split[i].decode_gpus : NAN);
        cJSON_AddItemToArray(sp, x);
    }
    return j;
}

void mp_serving_print(const struct mp_plan_req *q, const struct mp_serving_req *w,
                      const struct mp_serving_answer *a)
{
    if (w->nlen > 1)
        printf("\n### serving %g requests/s of %d length classes, %.0f prompt and %.0f output "
               "tokens on average (the longest prompt %ld)", w->rate, w->nlen, w->isl_mean,
               w->osl_mean, w->isl_max);
    else
        printf("\n### serving %g requests/s of %ld prompt and %ld output tokens", w->rate, w->isl,
               w->osl);
    if (w->slo_ttft_ms > 0)
        printf(", mean TTFT <= %g ms", w->slo_ttft_ms);
    if (q->slo_token_ms > 0)
        printf(", p99 token <= %g ms", q->slo_token_ms);
    printf("\n");
    if (a->prefill.found) {
        const struct mp_plan_cand *c = &a->prefill.c;
        char chunk[48] = "";
        if (a->prefill.chunk > 0)
            snprintf(chunk, sizeof chunk, ", chunk %ld", a->prefill.chunk);
        printf("prefill pool: %ld GPUs, %ld x tp%dep%d at %ld tokens per GPU%s, pass %.1f ms, "
               "%.0f input tokens/s per GPU, utilization %.2f, TTFT %.1f ms (queue %.1f, %g "
               "pass(es), KV transfer %.2f ms of %.1f MB)\n",
               a->prefill.s.gpus, a->prefill.s.instances, c->tp, c->ep, c->batch / c->ep,
               chunk, c->token_ms, a->prefill.input_tok_s_gpu, a->prefill.s.util,
               a->prefill.s.ttft_ms, a->prefill.s.queue_ms, a->prefill.s.passes, a->kv_ms,
               a->kv_bytes / 1e6);
    } else {
        printf("prefill pool: none\n");
    }
    if (a->decode_found)
        printf("decode pool: %ld GPUs, %ld x tp%dep%d at batch %ld, context %ld, p99 token %.2f "
               "ms, %.0f output tokens/s per GPU\n",
               a->decode.gpus, a->decode.dp, a->decode.tp, a->decode.ep, a->decode.batch,
               q->context, a->decode.token_p99_ms, a->decode.tok_s_gpu);
    else
        printf("decode pool: none\n");
    if (a->coloc.found)
        printf("co-located: %ld GPUs, %ld x tp%dep%d, decode batch %ld, prefill %ld tokens per "
               "GPU, %.0f%% of the time in prefill, TTFT %.1f ms, p99 token %.2f ms\n",
               a->coloc.s.gpus, a->coloc.s.instances, a->coloc.d.tp, a->coloc.d.ep,
               a->coloc.d.batch, a->coloc.p.batch / a->coloc.p.ep,
               100 * a->coloc.prefill_share, a->coloc.s.ttft_ms, a->coloc.tpot_ms);
    else
        printf("co-located: none serves it\n");
    if (a->gpus > 0) {
        printf("answer: %s, %ld GPUs, TTFT %.1f ms, p99 token %.2f ms, %.0f output tokens/s per "
               "GPU", a->choice, a->gpus, a->ttft_ms, a->tpot_ms, a->out_tok_s_gpu);
        if (isfinite(a->usd_per_mtok))
            printf(", USD %.3f per million output tokens", a->usd_per_mtok);
        printf("\n");
    } else {
        printf("answer: none: %s\n", a->why);
    }
    for (int i = 0; i < a->nsplit; i++)
        printf("%s isl %ld / osl %ld: prefill %ld GPUs, decode %ld GPUs\n",
               i ? "             " : "P:D split at", a->split[i].isl, a->split[i].osl,
               a->split[i].prefill_gpus, a->split[i].decode_gpus);
}
