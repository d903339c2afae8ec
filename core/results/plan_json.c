/* plan_json.c - what a reader of plan.json checks before using it: the members moeperf-plan
 * writes, each of its type and range (results.h, mp_plan_json_check; docs/planning.md, on
 * moeperf-report's answer). */
#include "results.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>

#include "error.h"
#include "plan_keys.h"

enum jtype { J_STR, J_BOOL, J_NUM, J_OBJ, J_ARR };

/* One member of an object: its type, whether it must be there (null counts as absent: the planner
 * writes null for a figure it has not), and the least value of a number. */
struct jfield {
    const char *key;
    enum jtype type;
    int required;
    double lo;
};

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const struct jfield top_fields[] = {
    {MP_PJ_QUESTION, J_OBJ, 1, 0}, {MP_PJ_ANSWERS, J_ARR, 1, 0}};
static const struct jfield question_fields[] = {
    {MP_PJ_MODEL, J_OBJ, 1, 0},       {MP_PJ_CLUSTER, J_OBJ, 1, 0},
    {MP_PJ_CONSTRAINTS, J_OBJ, 1, 0}, {MP_PJ_SLO, J_OBJ, 0, 0},
    {MP_PJ_THROUGHPUT_TOKENS_PER_S, J_NUM, 0, 0}};
static const struct jfield named_fields[] = {{MP_PJ_NAME, J_STR, 1, 0}};
static const struct jfield cluster_fields[] = {
    {MP_PJ_NAME, J_STR, 1, 0}, {MP_PJ_SOURCE, J_STR, 0, 0}, {MP_PJ_PATH, J_STR, 0, 0}};
static const struct jfield constraint_fields[] = {{MP_PJ_MAX_GPUS, J_NUM, 1, 1}};
static const struct jfield slo_fields[] = {{MP_PJ_TOKEN_P99_MS, J_NUM, 0, 0}};
static const struct jfield answer_fields[] = {
    {MP_PJ_ROUTING, J_STR, 1, 0},   {MP_PJ_FOUND, J_BOOL, 1, 0},
    {MP_PJ_ALTERNATIVES, J_ARR, 0, 0}, {MP_PJ_SENSITIVITY, J_ARR, 0, 0},
    {MP_PJ_BY_REMEDIES, J_ARR, 0, 0}, {MP_PJ_TRUST, J_ARR, 0, 0},
    {MP_PJ_REPLICAS_VS_BATCH, J_ARR, 0, 0}};
/* an answer that found a plan */
static const struct jfield plan_fields[] = {
    {MP_PJ_LAYOUT, J_STR, 1, 0},         {MP_PJ_REMEDIES, J_STR, 1, 0},
    {MP_PJ_BATCH, J_NUM, 1, 1},          {MP_PJ_REPLICAS, J_NUM, 1, 1},
    {MP_PJ_GPUS, J_NUM, 1, 1},           {MP_PJ_TOKEN_P99_MS, J_NUM, 1, 0},
    {MP_PJ_TOKEN_P50_MS, J_NUM, 0, 0},   {MP_PJ_TOKENS_PER_S, J_NUM, 1, 0},
    {MP_PJ_TOK_S_GPU, J_NUM, 0, 0},      {MP_PJ_USD_PER_MTOK, J_NUM, 0, 0},
    {MP_PJ_MICRO_BATCHES, J_NUM, 0, 1},  {MP_PJ_SLO_HEADROOM, J_NUM, 0, -INFINITY},
    {MP_PJ_MEM_GB_PER_GPU, J_OBJ, 1, 0}, {MP_PJ_STEP_PARTS_MS, J_OBJ, 0, 0}};
static const struct jfield memory_fields[] = {{MP_PJ_TOTAL, J_NUM, 1, 0}};
/* a serving workload (docs/planning.md, "Serving a workload"): the question's, each answer's */
static const struct jfield workload_fields[] = {
    {MP_PJ_ISL, J_NUM, 1, 1}, {MP_PJ_OSL, J_NUM, 1, 1}, {"rate_rps", J_NUM, 1, 0},
    {"slo_ttft_ms", J_NUM, 0, 0}};
static const struct jfield serving_fields[] = {
    {MP_PJ_CHOICE, J_STR, 1, 0},       {MP_PJ_WHY, J_STR, 0, 0},
    {"ttft_formula", J_STR, 0, 0},
    {MP_PJ_GPUS, J_NUM, 1, 0},         {MP_PJ_TTFT_MS, J_NUM, 0, 0},
    {MP_PJ_TPOT_MS, J_NUM, 0, 0},      {MP_PJ_OUTPUT_TOK_S_GPU, J_NUM, 0, 0},
    {MP_PJ_USD_PER_MTOK, J_NUM, 0, 0}, {MP_PJ_PREFILL, J_OBJ, 1, 0},
    {MP_PJ_DECODE, J_OBJ, 1, 0},       {MP_PJ_COLOCATED, J_OBJ, 1, 0},
    {MP_PJ_KV_TRANSFER, J_OBJ, 1, 0},  {MP_PJ_SPLIT, J_ARR, 1, 0}};
/* a pool that was found */
static const struct jfield pool_fields[] = {
    {MP_PJ_FOUND, J_BOOL, 1, 0},        {MP_PJ_LAYOUT, J_STR, 1, 0},
    {MP_PJ_GPUS, J_NUM, 1, 1},          {MP_PJ_MEM_GB_PER_GPU, J_NUM, 1, 0},
    {MP_PJ_TTFT_MS, J_NUM, 0, 0},       {MP_PJ_TPOT_MS, J_NUM, 0, 0},
    {MP_PJ_INSTANCES, J_NUM, 0, 1},     {MP_PJ_REPLICAS, J_NUM, 0, 1},
    {MP_PJ_BATCH, J_NUM, 0, 1},         {"tokens_per_gpu", J_NUM, 0, 1},
    {"pass_ms", J_NUM, 0, 0},           {"input_tok_s_gpu", J_NUM, 0, 0},
    {"utilization", J_NUM, 0, 0},       {"prefill_share", J_NUM, 0, 0}};
static const struct jfield found_fields[] = {{MP_PJ_FOUND, J_BOOL, 1, 0}};
static const struct jfield kv_fields[] = {
    {"mb_per_request", J_NUM, 0, 0}, {"ms", J_NUM, 0, 0}, {"gb_per_s", J_NUM, 0, 0}};
static const struct jfield split_fields[] = {
    {MP_PJ_ISL, J_NUM, 1, 1}, {MP_PJ_OSL, J_NUM, 1, 1}, {MP_PJ_PREFILL_GPUS, J_NUM, 0, 1},
    {MP_PJ_DECODE_GPUS, J_NUM, 0, 1}};

static const char *const type_names[] = {"a string", "true or false", "a number", "an object",
                                         "an array"};

static int has_type(const cJSON *v, enum jtype t)
{
    switch (t) {
    case J_STR: return cJSON_IsString(v);
    case J_BOOL: return cJSON_IsBool(v);
    case J_NUM: return cJSON_IsNumber(v);
    case J_OBJ: return cJSON_IsObject(v);
    case J_ARR: return cJSON_IsArray(v);
    }
    return 0;
}

/* Check object o (at `where`, e.g. "answers[2]") against fields[0..n). MP_OK or MP_ERR_USAGE
 * after a message naming the file and the member. */
static int check_fields(const char *path, const char *where, const cJSON *o,
                        const struct jfield *fields, int n)
{
    for (int i = 0; i < n; i++) {
        const struct jfield *f = &fields[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, f->key);
        if (!v || cJSON_IsNull(v)) {
            if (!f->required)
                continue;
            mp_usage("%s: %s%s%s is missing (moeperf-plan writes it)", path, where,
                     *where ? "." : "", f->key);
            return MP_ERR_USAGE;
        }
        if (!has_type(v, f->type)) {
            mp_usage("%s: %s%s%s is not %s", path, where, *where ? "." : "", f->key,
                     type_names[f->type]);
            return MP_ERR_USAGE;
        }
        if (f->type == J_NUM && (!isfinite(v->valuedouble) || v->valuedouble < f->lo)) {
            mp_usage("%s: %s%s%s is %g, not a number of at least %g", path, where,
                     *where ? "." : "", f->key, v->valuedouble, f->lo);
            return MP_ERR_USAGE;
        }
    }
    return MP_OK;
}

/* Every member of object o a finite number of at least 0 (step_parts_ms: milliseconds). */
static int check_parts(const char *path, const char *where, const cJSON *o)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, o) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0) {
            mp_usage("%s: %s.%s is not a time of at least 0 ms", path, where,
                     v->string ? v->string : "?");
            return MP_ERR_USAGE;
        }
    }
    return MP_OK;
}

/* Every element of array `key` of o (when there) an object, with fields[0..n) (n 0: any). */
static int check_objects(const char *path, const char *where, const cJSON *o, const char *key,
                         const struct jfield *fields, int n)
{
    const cJSON *v;
    int i = 0, rc = MP_OK;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(o, key)) {
        char at[160];
        snprintf(at, sizeof at, "%s.%s[%d]", where, key, i++);
        if (!cJSON_IsObject(v)) {
            mp_usage("%s: %s is not an object", path, at);
            return MP_ERR_USAGE;
        }
        if ((rc = check_fields(path, at, v, fields, n)) != MP_OK)
            return rc;
    }
    return MP_OK;
}

/* Member `key` of o (at `where`) against fields[0..n), as check_fields checks it. */
static int check_member(const char *path, const char *where, const cJSON *o, const char *key,
                        const struct jfield *fields, int n)
{
    char at[160];
    snprintf(at, sizeof at, "%s.%s", where, key);
    return check_fields(path, at, cJSON_GetObjectItemCaseSensitive(o, key), fields, n);
}

/* An answer's `serving` member, when there: its fields, each pool's (all of them when found),
 * the KV transfer's and every split point's. */
static int check_serving(const char *path, const char *where, const cJSON *a)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(a, MP_PJ_SERVING);
    if (!s || cJSON_IsNull(s))
        return MP_OK;
    char at[96];
    snprintf(at, sizeof at, "%s.%s", where, MP_PJ_SERVING);
    if (!cJSON_IsObject(s)) {
        mp_usage("%s: %s is not an object", path, at);
        return MP_ERR_USAGE;
    }
    int rc = check_fields(path, at, s, serving_fields, N(serving_fields));
    const char *pools[] = {MP_PJ_PREFILL, MP_PJ_DECODE, MP_PJ_COLOCATED};
    for (int k = 0; k < N(pools) && rc == MP_OK; k++) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, pools[k]);
        rc = check_member(path, at, s, pools[k], found_fields, N(found_fields));
        if (rc == MP_OK && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, MP_PJ_FOUND)))
            rc = check_member(path, at, s, pools[k], pool_fields, N(pool_fields));
    }
    if (rc == MP_OK)
        rc = check_member(path, at, s, MP_PJ_KV_TRANSFER, kv_fields, N(kv_fields));
    if (rc == MP_OK)
        rc = check_objects(path, at, s, MP_PJ_SPLIT, split_fields, N(split_fields));
    return rc;
}

static int check_answer(const char *path, const cJSON *a, int i)
{
    char where[32];
    snprintf(where, sizeof where, "answers[%d]", i);
    if (!cJSON_IsObject(a)) {
        mp_usage("%s: %s is not an object", path, where);
        return MP_ERR_USAGE;
    }
    int rc = check_fields(path, where, a, answer_fields, N(answer_fields));
    const char *arrays[] = {MP_PJ_ALTERNATIVES, MP_PJ_SENSITIVITY, MP_PJ_BY_REMEDIES, MP_PJ_TRUST,
                            MP_PJ_REPLICAS_VS_BATCH};
    for (int k = 0; k < N(arrays) && rc == MP_OK; k++)
        rc = check_objects(path, where, a, arrays[k], NULL, 0);
    if (rc == MP_OK)
        rc = check_serving(path, where, a);
    if (rc != MP_OK || !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, MP_PJ_FOUND)))
        return rc;
    rc = check_fields(path, where, a, plan_fields, N(plan_fields));
    if (rc == MP_OK)
        rc = check_member(path, where, a, MP_PJ_MEM_GB_PER_GPU, memory_fields, N(memory_fields));
    char sub[64];
    snprintf(sub, sizeof sub, "%s.%s", where, MP_PJ_STEP_PARTS_MS);
    if (rc == MP_OK)
        rc = check_parts(path, sub, cJSON_GetObjectItemCaseSensitive(a, MP_PJ_STEP_PARTS_MS));
    return rc;
}

int mp_plan_json_check(const struct cJSON *j, const char *path)
{
    if (!cJSON_IsObject(j)) {
        mp_usage("%s: not a JSON object", path);
        return MP_ERR_USAGE;
    }
    int rc = check_fields(path, "", j, top_fields, N(top_fields));
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, MP_PJ_QUESTION);
    if (rc == MP_OK)
        rc = check_fields(path, MP_PJ_QUESTION, q, question_fields, N(question_fields));
    struct {
        const char *key, *where;
        const struct jfield *fields;
        int n;
    } subs[] = {
        {MP_PJ_MODEL, "question.model", named_fields, N(named_fields)},
        {MP_PJ_CLUSTER, "question.cluster", cluster_fields, N(cluster_fields)},
        {MP_PJ_CONSTRAINTS, "question.constraints", constraint_fields, N(constraint_fields)},
        {MP_PJ_SLO, "question.slo", slo_fields, N(slo_fields)},
        {MP_PJ_WORKLOAD, "question.workload", workload_fields, N(workload_fields)},
    };
    for (int k = 0; k < N(subs) && rc == MP_OK; k++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(q, subs[k].key);
        if (o && !cJSON_IsNull(o))
            rc = check_fields(path, subs[k].where, o, subs[k].fields, subs[k].n);
    }
    const cJSON *a;
    int i = 0;
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(j, MP_PJ_ANSWERS)) {
        if (rc != MP_OK)
            break;
        rc = check_answer(path, a, i++);
    }
    return rc;
}
