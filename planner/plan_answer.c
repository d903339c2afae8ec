/* plan_answer.c - plan.json's answer of a capacity plan (plan_answer.h): the cheapest candidate per
 * routing, the alternatives that came close and why they lost, the plan re-planned for other
 * targets and per remedy, replicas against batch, and how far the model may be trusted. */
#include "plan_answer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "dtype.h"
#include "error.h"
#include "plan_keys.h"
#include "results.h"
#include "stats.h"

int mp_plan_by_cost(const void *pa, const void *pb)
{
    const struct mp_plan_cand *a = pa, *b = pb;
    if (a->meets != b->meets)
        return b->meets - a->meets;
    if (a->gpus != b->gpus)
        return a->gpus < b->gpus ? -1 : 1;
    return (a->token_p99_ms > b->token_p99_ms) - (a->token_p99_ms < b->token_p99_ms);
}

/* Why candidate `a` lost to the plan `b`, in words, into out. */
static void why_lost(const struct mp_plan_req *q, const struct mp_plan_cand *a,
                     const struct mp_plan_cand *b, char *out, size_t size)
{
    if (a->meets) {
        if (a->gpus > b->gpus)
            snprintf(out, size, "%ld more GPUs", a->gpus - b->gpus);
        else
            snprintf(out, size, "the same GPUs at a higher p99 token time (+%.2f ms)",
                     a->token_p99_ms - b->token_p99_ms);
    } else if (!a->slo_ok) {
        snprintf(out, size, "misses the SLO: p99 token %.2f ms", a->token_p99_ms);
    } else if (!a->fits) {
        snprintf(out, size, "does not fit: %.1f GB per GPU, %.1f usable (%s overflow)",
                 a->mem.total / 1e9, mp_gpumem_usable(&q->cluster, q->mem_reserve) / 1e9,
                 a->over);
    } else {
        snprintf(out, size, "%ld GPUs, more than --max-gpus %d", a->gpus, q->max_gpus);
    }
}

/* A positive bound, or null for 0 (not bounded). */
void mp_plan_json_bound(cJSON *o, const char *key, double v)
{
    if (v > 0)
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* The step's parts of candidate `a` in ms (plan.json's step_parts_ms, the stacked bar of the
 * report's plan): attention, dense layers, expert compute (route and FFN of every MoE layer),
 * dispatch + combine (the exchanges less what two micro-batches hide), small kernels, LM head,
 * host; they add up to token_p50_ms. */
static cJSON *step_parts_json(const struct mp_plan_cand *a)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "attention", a->part_ms[MP_STEP_ATTN]);
    cJSON_AddNumberToObject(o, "dense", a->part_ms[MP_STEP_DENSE]);
    cJSON_AddNumberToObject(o, "expert_compute", a->moe_ffn_ms);
    cJSON_AddNumberToObject(o, "dispatch_combine", a->moe_comm_ms);
    cJSON_AddNumberToObject(o, "small_kernels", a->part_ms[MP_STEP_MISC]);
    cJSON_AddNumberToObject(o, "head", a->part_ms[MP_STEP_HEAD]);
    cJSON_AddNumberToObject(o, "host", a->part_ms[MP_STEP_HOST]);
    return o;
}

/* One candidate into `o` as plan.json writes it, with why it lost to `b` when b is not NULL. */
static void cand_fill(cJSON *o, const struct mp_plan_req *q, const struct mp_plan_cand *a,
                      const struct mp_plan_cand *b)
{
    char lay[32], rem[64], pl[64], why[160];
    snprintf(lay, sizeof lay, "tp%dep%d", a->tp, a->ep);
    cJSON_AddStringToObject(o, MP_PJ_LAYOUT, lay);
    cJSON_AddStringToObject(o, MP_PJ_REMEDIES, mp_plan_remedy(a, rem, sizeof rem));
    cJSON_AddStringToObject(o, "placement", mp_plan_placement(a, pl, sizeof pl));
    cJSON_AddNumberToObject(o, "overlap", a->overlap);
    cJSON_AddStringToObject(o, "dedup", mp_dedup_choices[a->dedup]);
    cJSON_AddStringToObject(o, "weight_dtype", mp_dtype_choices[a->weight_dtype]);
    cJSON_AddStringToObject(o, "dispatch_dtype", mp_dtype_choices[a->dispatch_dtype]);
    cJSON_AddNumberToObject(o, MP_PJ_BATCH, (double)a->batch);
    cJSON_AddNumberToObject(o, MP_PJ_REPLICAS, a->dp);
    cJSON_AddNumberToObject(o, MP_PJ_GPUS, a->gpus);
    cJSON_AddNumberToObject(o, MP_PJ_MICRO_BATCHES, a->micro_batches);
    cJSON_AddNumberToObject(o, MP_PJ_TOKEN_P99_MS, a->token_p99_ms);
    cJSON_AddNumberToObject(o, MP_PJ_TOK_S_GPU, a->tok_s_gpu);
    mp_plan_json_bound(o, MP_PJ_USD_PER_MTOK, a->usd_per_mtok); /* null without --gpu-hour-price */
    cJSON_AddNumberToObject(o, MP_PJ_MEM_GB_PER_GPU, a->mem.total / 1e9);
    if (b) {
        why_lost(q, a, b, why, sizeof why);
        cJSON_AddStringToObject(o, MP_PJ_LOST, why);
    }
}

static cJSON *cand_json(const struct mp_plan_req *q, const struct mp_plan_cand *a,
                        const struct mp_plan_cand *b)
{
    cJSON *o = cJSON_CreateObject();
    cand_fill(o, q, a, b);
    return o;
}

/* The alternatives that came close to plan `b`: the next five candidates in the planner's order
 * (meeting the SLO first, then fewest GPUs, then lowest p99), then up to three with fewer GPUs
 * that were dropped (SLO missed, memory, GPU limit), the closest to the plan first; each with why
 * it lost. */
static cJSON *alternatives_json(const struct mp_plan_req *q, const struct mp_plan_cand *c, int n,
                                const struct mp_plan_cand *b)
{
    cJSON *arr = cJSON_CreateArray();
    struct mp_plan_cand *sorted = malloc((size_t)(n > 0 ? n : 1) * sizeof *sorted);
    if (!sorted || !arr)
        return arr;
    memcpy(sorted, c, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, mp_plan_by_cost);
    int next = 0, fewer = 0;
    for (int i = 0; i < n && next < 5; i++) {
        const struct mp_plan_cand *a = &sorted[i];
        if (!a->meets)
            break;
        if (a->tp == b->tp && a->ep == b->ep && a->batch == b->batch && a->dp == b->dp &&
            mp_plan_same_setup(a, b))
            continue; /* the plan itself */
        cJSON_AddItemToArray(arr, cand_json(q, a, b));
        next++;
    }
    /* fewer GPUs, but dropped: the closest to the plan first (most GPUs, then lowest p99) */
    int picked[3];
    for (; fewer < 3; fewer++) {
        int pick = -1;
        for (int i = 0; i < n; i++) {
            const struct mp_plan_cand *a = &sorted[i];
            int taken = 0;
            for (int k = 0; k < fewer; k++)
                taken |= picked[k] == i;
            if (taken || a->meets || a->gpus >= b->gpus)
                continue;
            if (pick < 0 || a->gpus > sorted[pick].gpus ||
                (a->gpus == sorted[pick].gpus && a->token_p99_ms < sorted[pick].token_p99_ms))
                pick = i;
        }
        if (pick < 0)
            break;
        picked[fewer] = pick;
        cJSON_AddItemToArray(arr, cand_json(q, &sorted[pick], b));
    }
    free(sorted);
    return arr;
}

/* The remedies labels (mp_plan_remedy) of candidates, as the findings compare them. */
enum { REMEDY_LABEL = 64 };
typedef char remedy_label[REMEDY_LABEL];

/* The cheapest plan of candidates `c` re-planned for request `q2` with every time × `scale`
 * (mp_plan_scale_times on a copy; 1: as modelled), as plan.json writes a plan, under `label`;
 * restricted to the candidates whose remedies label (labels[i]) is `remedies` when that is not
 * NULL. */
static cJSON *replan_scaled_json(const struct mp_plan_req *q2, const struct mp_plan_cand *c,
                                 int n, const char *label, const char *remedies,
                                 const remedy_label *labels, double scale)
{
    cJSON *o = cJSON_CreateObject();
    struct mp_plan_cand *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    int m = 0;
    for (int i = 0; v && i < n; i++) {
        if (remedies && strcmp(labels[i], remedies) != 0)
            continue;
        v[m] = c[i];
        mp_plan_scale_times(q2, &v[m], scale);
        m++;
    }
    int best = v ? mp_plan_best(v, m) : -1;
    cJSON_AddStringToObject(o, MP_PJ_CASE, label);
    cJSON_AddBoolToObject(o, MP_PJ_FOUND, best >= 0);
    if (best >= 0)
        cand_fill(o, q2, &v[best], NULL);
    free(v);
    return o;
}

static cJSON *replan_json(const struct mp_plan_req *q2, const struct mp_plan_cand *c, int n,
                          const char *label)
{
    return replan_scaled_json(q2, c, n, label, NULL, NULL, 1);
}

/* Replicas against batch for plan `best`: its setup at twice (`twice`) or half the batch, in words
 * as the console and plan.json state it (into out). Returns that candidate's index, or -1 when
 * the sweep has no such batch. */
int mp_plan_replicas_vs_batch(const struct mp_plan_cand *c, int n, int best, int twice, char *out,
                             size_t size)
{
    const struct mp_plan_cand *b = &c[best];
    int i = mp_plan_scaled_batch(c, n, best, twice ? 2 : 1, twice ? 1 : 2);
    if (i < 0)
        return -1;
    const struct mp_plan_cand *a = &c[i];
    if (twice)
        snprintf(out, size, "doubling the batch to %ld needs %ld replica(s) (%ld GPUs), p99 token "
                 "%.2f ms, SLO %s: %s", a->batch, a->dp, a->gpus, a->token_p99_ms,
                 a->meets ? "met" : "missed",
                 !a->meets ? "more replicas beat a larger batch"
                 : a->gpus < b->gpus ? "the larger batch is cheaper"
                                     : "the larger batch saves nothing");
    else
        snprintf(out, size, "halving the batch to %ld needs %ld replica(s) (%ld GPUs), p99 token "
                 "%.2f ms: %s", a->batch, a->dp, a->gpus, a->token_p99_ms,
                 a->gpus > b->gpus ? "more replicas at a smaller batch cost more GPUs"
                                   : "more replicas at a smaller batch cost no more");
    return i;
}

/* One basis for the model's error: what it rests on, over how many points, the median and worst
 * |model/reference − 1| and the extremes of model/reference. */
/* ---- trust: how far the model may be off (docs/planning.md, "How far to trust a plan") ---- */

struct trust_basis {
    const char *basis; /* "published" or "calibration" */
    char detail[1024];
    int points;
    double median, worst, ratio_lo, ratio_hi;
};

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The published basis for the hardware `name` (a preset's name: the question's cluster.hardware)
 * from `path` (ci/validate --summary): the points of the families run with that profile, or every
 * point, said so, when none was. 0, or -1 (no file, no usable row) with *why set. */
static int published_basis(const char *path, const char *name, struct trust_basis *t,
                           const char **why)
{
    struct mp_table tab;
    *t = (struct trust_basis){.basis = "published"};
    if (!path) {
        *why = "no validation table (ci/validate --summary) was found beside this build's sources";
        return -1;
    }
    if (mp_table_read(path, &tab) != MP_OK) {
        *why = "the validation table could not be read";
        return -1;
    }
    int cf = mp_table_col(&tab, "family"), cp = mp_table_col(&tab, "profile"),
        cr = mp_table_col(&tab, "ratio");
    const char *want = name;
    double *err = malloc((size_t)(tab.nrows > 0 ? tab.nrows : 1) * sizeof *err);
    int own = 0;
    for (long r = 0; cp >= 0 && r < tab.nrows; r++)
        own += strcmp(tab.cells[r][cp], want) == 0;
    size_t used = 0;
    int named = 0;
    if (!own)
        used = (size_t)snprintf(t->detail, sizeof t->detail,
                                "no published measurements of %s; every family: ", want);
    for (long r = 0; err && cf >= 0 && cp >= 0 && cr >= 0 && r < tab.nrows; r++) {
        if (own && strcmp(tab.cells[r][cp], want) != 0)
            continue;
        double ratio = strtod(tab.cells[r][cr], NULL);
        if (!(ratio > 0))
            continue;
        if (t->points == 0 || ratio < t->ratio_lo)
            t->ratio_lo = ratio;
        if (t->points == 0 || ratio > t->ratio_hi)
            t->ratio_hi = ratio;
        err[t->points++] = fabs(ratio - 1);
        int seen = 0; /* each family named once */
        for (long k = 0; k < r && !seen; k++)
            seen = (!own || !strcmp(tab.cells[k][cp], want)) &&
                   !strcmp(tab.cells[k][cf], tab.cells[r][cf]);
        if (!seen && used < sizeof t->detail)
            used += (size_t)snprintf(t->detail + used, sizeof t->detail - used, "%s%s",
                                     named++ ? "; " : "", tab.cells[r][cf]);
    }
    if (err && t->points > 0) {
        qsort(err, (size_t)t->points, sizeof *err, cmp_dbl);
        t->median = mp_percentile(err, t->points, 50);
        t->worst = err[t->points - 1];
    }
    free(err);
    mp_table_free(&tab);
    if (t->points == 0) {
        *why = "the validation table holds no point";
        return -1;
    }
    return 0;
}

/* One basis into plan.json: its errors and the plan were the cluster as far off as the model's
 * extremes (the true time is the model's ÷ model/reference): slower (÷ ratio_lo) and faster
 * (÷ ratio_hi) than modelled. */
static cJSON *trust_json(const struct trust_basis *t, const struct mp_plan_req *q,
                         const struct mp_plan_cand *c, int n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, MP_PJ_BASIS, t->basis);
    cJSON_AddStringToObject(o, MP_PJ_DETAIL, t->detail);
    cJSON_AddNumberToObject(o, MP_PJ_POINTS, t->points);
    cJSON_AddNumberToObject(o, MP_PJ_MEDIAN_ERROR, t->median);
    cJSON_AddNumberToObject(o, MP_PJ_WORST_ERROR, t->worst);
    cJSON_AddNumberToObject(o, MP_PJ_MODEL_OVER_REFERENCE_MIN, t->ratio_lo);
    cJSON_AddNumberToObject(o, MP_PJ_MODEL_OVER_REFERENCE_MAX, t->ratio_hi);
    cJSON_AddItemToObject(o, MP_PJ_IF_SLOWER,
                          replan_scaled_json(q, c, n, "the cluster slower than modelled", NULL,
                                             NULL, 1 / t->ratio_lo));
    cJSON_AddItemToObject(o, MP_PJ_IF_FASTER,
                          replan_scaled_json(q, c, n, "the cluster faster than modelled", NULL,
                                             NULL, 1 / t->ratio_hi));
    return o;
}

/* How far to trust a routing's plan: the published basis (or why there is none) and, for a
 * profile fitted by --calibrate, the fit's own layer-time errors (`cluster`: the question's). */
static cJSON *trust_list_json(const char *validation, const struct mp_plan_req *q,
                              const cJSON *cluster, const struct mp_plan_cand *c, int n)
{
    cJSON *arr = cJSON_CreateArray();
    struct trust_basis t;
    const char *why = NULL;
    const char *hw = cJSON_GetStringValue(cJSON_GetObjectItem(cluster, "hardware"));
    if (published_basis(validation, hw ? hw : q->cluster.name, &t, &why) == 0) {
        cJSON_AddItemToArray(arr, trust_json(&t, q, c, n));
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, MP_PJ_BASIS, "published");
        cJSON_AddStringToObject(o, MP_PJ_MISSING, why);
        cJSON_AddItemToArray(arr, o);
    }
    const cJSON *fe = cJSON_GetObjectItem(cluster, "fit_error_layer");
    if (cJSON_IsObject(fe)) {
        double med = cJSON_GetNumberValue(cJSON_GetObjectItem(fe, "median"));
        double worst = cJSON_GetNumberValue(cJSON_GetObjectItem(fe, "worst"));
        t = (struct trust_basis){.basis = "calibration",
                                 .points = (int)cJSON_GetNumberValue(
                                     cJSON_GetObjectItem(fe, "points")),
                                 .median = med, .worst = worst, .ratio_lo = 1 - worst,
                                 .ratio_hi = 1 + worst};
        snprintf(t.detail, sizeof t.detail, "layer_us of the runs %s was fitted to (|error| only: "
                 "either way)", q->cluster.name);
        if (t.ratio_lo > 0)
            cJSON_AddItemToArray(arr, trust_json(&t, q, c, n));
    }
    return arr;
}

/* The candidates re-planned for other targets (mp_plan_apply_targets): twice and half the
 * throughput when q sets one, a 20% tighter SLO when it sets one. A new array. */
static cJSON *sensitivity_json(const struct mp_plan_req *q, const struct mp_plan_cand *c, int n)
{
    cJSON *sens = cJSON_CreateArray();
    struct mp_plan_req q2 = *q;
    if (q->throughput > 0) {
        q2.throughput = 2 * q->throughput;
        cJSON_AddItemToArray(sens, replan_json(&q2, c, n, "twice the throughput"));
        q2.throughput = q->throughput / 2;
        cJSON_AddItemToArray(sens, replan_json(&q2, c, n, "half the throughput"));
        q2.throughput = q->throughput;
    }
    if (q->slo_token_ms > 0 || q->slo_layer_us > 0) {
        q2.slo_token_ms = 0.8 * q->slo_token_ms;
        q2.slo_layer_us = 0.8 * q->slo_layer_us;
        cJSON_AddItemToArray(sens, replan_json(&q2, c, n, "a 20% tighter SLO"));
    }
    return sens;
}

/* The cheapest plan with each remedies label of c[0..n) (mp_plan_remedy), each label once in
 * enumeration order. A new array. */
static cJSON *by_remedies_json(const struct mp_plan_req *q, const struct mp_plan_cand *c, int n)
{
    cJSON *by = cJSON_CreateArray();
    remedy_label *labels = malloc((size_t)(n > 0 ? n : 1) * sizeof *labels);
    int *first = malloc((size_t)(n > 0 ? n : 1) * sizeof *first); /* each label's first candidate */
    if (!labels || !first) {
        free(labels);
        free(first);
        mp_error("out of memory for the remedies of %d candidates", n);
        return by;
    }
    int nd = 0;
    for (int i = 0; i < n; i++) {
        mp_plan_remedy(&c[i], labels[i], sizeof labels[i]);
        int seen = 0;
        for (int k = 0; k < nd && !seen; k++)
            seen = strcmp(labels[first[k]], labels[i]) == 0;
        if (!seen)
            first[nd++] = i;
    }
    for (int k = 0; k < nd; k++) { /* in enumeration order */
        const char *lab = labels[first[k]];
        cJSON_AddItemToArray(by, replan_scaled_json(q, c, n, lab, lab, labels, 1));
    }
    free(labels);
    free(first);
    return by;
}

/* Replicas against batch for plan `best`: its setup at twice and at half the batch where the
 * sweep holds them (mp_plan_replicas_vs_batch), each with its replicas, GPUs, p99 and words. A
 * new array. */
static cJSON *replicas_vs_batch_json(const struct mp_plan_cand *c, int n, int best)
{
    cJSON *rvb = cJSON_CreateArray();
    for (int twice = 1; twice >= 0; twice--) {
        char text[256];
        int i = mp_plan_replicas_vs_batch(c, n, best, twice, text, sizeof text);
        if (i < 0)
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, MP_PJ_CASE, twice ? "twice the batch" : "half the batch");
        cJSON_AddNumberToObject(o, MP_PJ_BATCH, (double)c[i].batch);
        cJSON_AddNumberToObject(o, MP_PJ_REPLICAS, c[i].dp);
        cJSON_AddNumberToObject(o, MP_PJ_GPUS, c[i].gpus);
        cJSON_AddNumberToObject(o, MP_PJ_TOKEN_P99_MS, c[i].token_p99_ms);
        cJSON_AddBoolToObject(o, "meets", c[i].meets);
        cJSON_AddStringToObject(o, MP_PJ_TEXT, text);
        cJSON_AddItemToArray(rvb, o);
    }
    return rvb;
}

/* The answer for one routing: the cheapest plan (`best`, −1: none meets the SLO within the
 * constraints) as the console states it, with its batch cap and headroom to the SLO. */
cJSON *mp_plan_answer_json(const char *routing, const struct mp_plan_req *q,
                          const struct mp_plan_cand *c, int n, int best, const char *validation,
                          const cJSON *cluster)
{
    cJSON *a = cJSON_CreateObject();
    cJSON_AddStringToObject(a, MP_PJ_ROUTING, routing);
    cJSON_AddNumberToObject(a, "candidates", n);
    cJSON_AddBoolToObject(a, MP_PJ_FOUND, best >= 0);
    if (best < 0)
        return a;
    const struct mp_plan_cand *b = &c[best];
    char lay[32], pl[64], rem[64];
    snprintf(lay, sizeof lay, "tp%dep%d", b->tp, b->ep);
    cJSON_AddStringToObject(a, MP_PJ_LAYOUT, lay);
    cJSON_AddNumberToObject(a, "tp", b->tp);
    cJSON_AddNumberToObject(a, "ep", b->ep);
    cJSON_AddStringToObject(a, "placement", mp_plan_placement(b, pl, sizeof pl));
    cJSON_AddStringToObject(a, MP_PJ_REMEDIES, mp_plan_remedy(b, rem, sizeof rem));
    cJSON_AddNumberToObject(a, "overlap", b->overlap);
    cJSON_AddStringToObject(a, "dedup", mp_dedup_choices[b->dedup]);
    cJSON_AddStringToObject(a, "weight_dtype", mp_dtype_choices[b->weight_dtype]);
    cJSON_AddStringToObject(a, "dispatch_dtype", mp_dtype_choices[b->dispatch_dtype]);
    cJSON_AddStringToObject(a, "dispatch", "dynamic"); /* the one mode the planner times */
    cJSON_AddNumberToObject(a, MP_PJ_BATCH, (double)b->batch);
    cJSON_AddNumberToObject(a, MP_PJ_REPLICAS, b->dp);
    cJSON_AddNumberToObject(a, MP_PJ_GPUS, b->gpus);
    cJSON_AddNumberToObject(a, MP_PJ_MICRO_BATCHES, b->micro_batches);
    cJSON_AddNumberToObject(a, MP_PJ_CONTEXT, (double)q->context);
    cJSON_AddStringToObject(a, "token_scope", "step"); /* the whole decode step, every layer */
    cJSON_AddNumberToObject(a, MP_PJ_TOKEN_P50_MS, b->token_ms);
    cJSON_AddNumberToObject(a, MP_PJ_TOKEN_P99_MS, b->token_p99_ms);
    cJSON_AddItemToObject(a, MP_PJ_STEP_PARTS_MS, step_parts_json(b));
    cJSON_AddNumberToObject(a, MP_PJ_TOK_S_GPU, b->tok_s_gpu);
    mp_plan_json_bound(a, MP_PJ_USD_PER_MTOK, b->usd_per_mtok);
    cJSON_AddNumberToObject(a, "layer_p50_us", b->layer_us);
    cJSON_AddNumberToObject(a, "layer_p99_us", b->layer_p99_us);
    cJSON_AddNumberToObject(a, "replica_tokens_per_s", b->replica_tps);
    cJSON_AddNumberToObject(a, MP_PJ_TOKENS_PER_S, b->replica_tps * b->dp);
    cJSON *mem = cJSON_AddObjectToObject(a, MP_PJ_MEM_GB_PER_GPU);
    cJSON_AddNumberToObject(mem, MP_PJ_TOTAL, b->mem.total / 1e9);
    cJSON_AddNumberToObject(mem, "weights", b->mem.weights / 1e9);
    cJSON_AddNumberToObject(mem, "kv_cache", b->mem.kv / 1e9);
    double usable = mp_gpumem_usable(&q->cluster, q->mem_reserve);
    /* null: the profile gives no memory, not checked */
    mp_plan_json_bound(mem, "usable", usable / 1e9);
    long cap = mp_plan_batch_cap(c, n, b);
    if (cap > 0)
        cJSON_AddNumberToObject(a, "batch_cap", (double)cap);
    else
        cJSON_AddNullToObject(a, "batch_cap"); /* network-bound at every batch */
    /* headroom: the share of the tightest SLO the plan leaves unused */
    double head = -1;
    if (q->slo_token_ms > 0)
        head = 1 - b->token_p99_ms / q->slo_token_ms;
    if (q->slo_layer_us > 0) {
        double h = 1 - b->layer_p99_us / q->slo_layer_us;
        head = head < 0 || h < head ? h : head;
    }
    if (q->slo_token_ms > 0 || q->slo_layer_us > 0)
        cJSON_AddNumberToObject(a, MP_PJ_SLO_HEADROOM, head);
    else
        cJSON_AddNullToObject(a, MP_PJ_SLO_HEADROOM);
    cJSON_AddItemToObject(a, MP_PJ_ALTERNATIVES, alternatives_json(q, c, n, b));
    /* sensitivity: the same candidates re-planned for other targets, and the cheapest plan with
     * each remedy setting the sweep holds */
    cJSON_AddItemToObject(a, MP_PJ_SENSITIVITY, sensitivity_json(q, c, n));
    cJSON_AddItemToObject(a, MP_PJ_BY_REMEDIES, by_remedies_json(q, c, n));
    cJSON_AddItemToObject(a, MP_PJ_TRUST, trust_list_json(validation, q, cluster, c, n));
    cJSON_AddItemToObject(a, MP_PJ_REPLICAS_VS_BATCH, replicas_vs_batch_json(c, n, best));
    return a;
}
