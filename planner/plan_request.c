/* plan_request.c - moeperf-plan's request built from its options, and plan.json's question. */
#include "plan_request.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster.h"
#include "dedup.h"
#include "error.h"
#include "expert_cache.h"
#include "freeall.h"
#include "gpumem.h"
#include "plan_answer.h"
#include "plan_keys.h"
#include "results.h"
#include "schema.h"
#include "serving_plan.h"

/* The values of an integer list as ints in a heap array (*out; at least one element): MP_OK, or
 * MP_ERR_RUNTIME when out of memory. */
static int to_ints(const struct mp_list *l, int **out)
{
    *out = malloc((size_t)(l->n > 0 ? l->n : 1) * sizeof **out);
    if (!*out)
        return MP_ERR_RUNTIME;
    for (int i = 0; i < l->n; i++)
        (*out)[i] = (int)l->v[i];
    return MP_OK;
}

/* The words of a dtype list as enum mp_dtype values in a heap array: MP_OK, or MP_ERR_USAGE after
 * mp_dtype_parse's message naming `flag`. */
static int to_dtypes(const char *flag, const struct mp_strlist *l, int **out)
{
    *out = malloc((size_t)(l->n > 0 ? l->n : 1) * sizeof **out);
    if (!*out)
        return MP_ERR_RUNTIME;
    for (int i = 0; i < l->n; i++) {
        enum mp_dtype d;
        int rc = mp_dtype_parse(flag, l->v[i], &d);
        if (rc != MP_OK)
            return rc;
        (*out)[i] = (int)d;
    }
    return MP_OK;
}

/* --expert-cache off|fit[:POLICY] into q->offload and q->offload_policy; MP_ERR_USAGE after one
 * line naming the flag and what it accepts. */
static int parse_offload(const char *word, struct mp_plan_req *q)
{
    q->offload = 0;
    q->offload_policy = MP_CACHE_LRU;
    if (!strcmp(word, "off"))
        return MP_OK;
    if (!strncmp(word, "fit", 3) && (word[3] == '\0' || word[3] == ':')) {
        for (int i = 0; word[3] && mp_cache_policy_choices[i]; i++)
            if (!strcmp(word + 4, mp_cache_policy_choices[i])) {
                q->offload_policy = (enum mp_cache_policy)i;
                q->offload = 1;
                return MP_OK;
            }
        if (!word[3]) {
            q->offload = 1;
            return MP_OK;
        }
    }
    mp_usage("--expert-cache '%s': accepted are off, fit and fit:POLICY with POLICY lru, lfu or "
             "static (the planner picks each candidate's slots)", word);
    return MP_ERR_USAGE;
}

/* The candidate lists of o as heap arrays in *l, each set in q with its length: MP_OK, MP_ERR_USAGE
 * after a message naming --dedup, --weight-dtype or --dispatch-dtype, or MP_ERR_RUNTIME (out of
 * memory). */
static int build_lists(const struct plan_opts *o, struct mp_plan_req *q, struct plan_req_lists *l)
{
    int rc;
    if ((rc = to_ints(&o->tp, &l->tps)) != MP_OK || (rc = to_ints(&o->ep, &l->eps)) != MP_OK ||
        (rc = to_ints(&o->replicate, &l->reps)) != MP_OK ||
        (rc = to_ints(&o->eplb, &l->eplbs)) != MP_OK ||
        (rc = to_ints(&o->b.overlap, &l->overlaps)) != MP_OK ||
        (rc = to_ints(&o->b.micro_batches, &l->micro)) != MP_OK)
        return rc;
    l->batches = malloc((size_t)o->b.batch.n * sizeof *l->batches);
    l->dedups = malloc((size_t)(o->b.dedup.n > 0 ? o->b.dedup.n : 1) * sizeof *l->dedups);
    if (!l->batches || !l->dedups)
        return MP_ERR_RUNTIME;
    for (int i = 0; i < o->b.batch.n; i++)
        l->batches[i] = (long)o->b.batch.v[i];
    for (int i = 0; i < o->b.dedup.n; i++) {
        enum mp_dedup d;
        if ((rc = mp_dedup_parse(o->b.dedup.v[i], &d)) != MP_OK)
            return rc;
        l->dedups[i] = (int)d;
    }
    if ((rc = to_dtypes("--weight-dtype", &o->b.weight_dtype, &l->wdtypes)) != MP_OK ||
        (rc = to_dtypes("--dispatch-dtype", &o->b.dispatch_dtype, &l->ddtypes)) != MP_OK)
        return rc;
    q->micro_batches = l->micro;
    q->nmicro = o->b.micro_batches.n;
    q->dedups = l->dedups;
    q->ndedup = o->b.dedup.n;
    q->wdtypes = l->wdtypes;
    q->nwdtype = o->b.weight_dtype.n;
    q->ddtypes = l->ddtypes;
    q->nddtype = o->b.dispatch_dtype.n;
    q->batches = l->batches;
    q->nbatch = o->b.batch.n;
    q->tps = l->tps;
    q->ntp = o->tp.n;
    q->eps = l->eps;
    q->nep = o->ep.n;
    q->reps = l->reps;
    q->nrep = o->replicate.n;
    q->eplbs = l->eplbs;
    q->neplb = o->eplb.n;
    q->overlaps = l->overlaps;
    q->noverlap = o->b.overlap.n;
    return MP_OK;
}

/* --validation FILE: a table of ci/validate --summary whatever its name, with the columns the
 * trust reads, every cell as the schema wants it (docs/CSV.md, validation.csv). */
static int check_validation(const char *path)
{
    struct mp_table t;
    if (mp_table_read(path, &t) != MP_OK)
        return MP_ERR_USAGE;
    int rc = mp_table_validate(&t, &mp_schema_validation);
    const char *need[] = {MPC_family, MPC_profile, MPC_ratio};
    for (int i = 0; i < 3 && rc == MP_OK; i++)
        if (mp_table_col(&t, need[i]) < 0) {
            mp_usage("--validation '%s': no column %s (a table of ci/validate --summary has "
                     "family, profile, point, reference, model, unit, ratio)", path, need[i]);
            rc = MP_ERR_USAGE;
        }
    mp_table_free(&t);
    return rc;
}

int plan_req_build(const struct plan_opts *o, struct mp_plan_req *q, struct plan_req_lists *l)
{
    struct stat vst;
    errno = 0;
    if (o->validation && (access(o->validation, R_OK) != 0 || stat(o->validation, &vst) != 0 ||
                          !S_ISREG(vst.st_mode))) {
        mp_usage("--validation '%s': %s (a table of ci/validate --summary)", o->validation,
                 errno ? strerror(errno) : "not a file");
        return MP_ERR_USAGE;
    }
    if (o->validation && check_validation(o->validation) != MP_OK)
        return MP_ERR_USAGE;
    if (!o->b.cluster) {
        mp_usage("--cluster: the planner needs a cluster profile (h100-ndr, h200-ndr, h800-ib, "
                 "a100-hdr, b200-xdr or a file from --calibrate)");
        return MP_ERR_USAGE;
    }
    if (mp_bench_model(&o->b, &q->model) != MP_OK ||
        mp_cluster_resolve(o->b.cluster, &q->cluster) != MP_OK)
        return MP_ERR_USAGE;
    int rc = build_lists(o, q, l);
    if (rc != MP_OK)
        return rc;
    q->seq = o->b.seq;
    q->slo_token_ms = o->slo_token_ms;
    q->slo_layer_us = o->slo_layer_us;
    q->throughput = o->throughput;
    q->gpu_hour_price = o->gpu_hour_price;
    q->max_gpus = o->max_gpus;
    q->iters = o->b.iters;
    q->seed = (unsigned long long)o->b.seed;
    q->context = o->context;
    q->weight_bytes = MP_BF16_BYTES;
    q->kv_bytes = MP_BF16_BYTES;
    q->mem_reserve = o->mem_reserve >= 0 ? o->mem_reserve : q->cluster.mem_reserve;
    q->nonexpert = strcmp(o->nonexpert, "world") == 0 ? MP_NONEXPERT_WORLD : MP_NONEXPERT_TP;
    return parse_offload(o->expert_cache, q);
}

void plan_req_free(struct plan_req_lists *l)
{
    MP_FREE_ALL(l->tps, l->eps, l->reps, l->eplbs, l->overlaps, l->dedups, l->wdtypes, l->micro,
                l->ddtypes, l->batches, l->prefill_tokens, l->chunks, l->isls, l->osls, l->p);
}

/* The most length classes a --lengths file may hold. */
#define MAX_LENGTH_CLASSES 100000

/* One whole number of [1, 2^24] or, for `weight`, a finite number above 0 from cell `text` of
 * --lengths FILE line `line`, column `name`: MP_OK or MP_ERR_USAGE after a message naming them. */
static int length_cell(const char *path, long line, const char *name, const char *text,
                       int weight, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(text, &end);
    while (*end == ' ')
        end++;
    int ok = end != text && !*end && !errno && isfinite(*v) && *v > 0 &&
             (weight || (*v == floor(*v) && *v <= 1 << 24));
    if (!ok)
        mp_usage("--lengths %s line %ld, column %s: '%s' is not %s", path, line, name, text,
                 weight ? "a number above 0" : "a whole number of tokens in [1, 16777216]");
    return ok ? MP_OK : MP_ERR_USAGE;
}

/* --lengths FILE: a header naming isl and osl (and weight, optional, default 1) in any order,
 * then one class a line (`#` lines are comments), into l's isls, osls and p (normalized); *n the
 * classes. MP_OK, MP_ERR_USAGE after a message naming the file and line, or MP_ERR_RUNTIME. */
static int read_lengths(const char *path, struct plan_req_lists *l, int *n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        mp_usage("--lengths %s: %s (a CSV of isl,osl[,weight] per request class)", path,
                 strerror(errno));
        return MP_ERR_USAGE;
    }
    char buf[4096];
    int col[3] = {-1, -1, -1}, ncols = 0, rc = MP_OK, header = 0;
    long line = 0;
    double sum = 0;
    *n = 0;
    while (rc == MP_OK && fgets(buf, sizeof buf, f)) {
        line++;
        buf[strcspn(buf, "\r\n")] = '\0';
        if (buf[0] == '#' || buf[strspn(buf, " ")] == '\0')
            continue;
        char *cells[8], *save = NULL;
        int nc = 0;
        for (char *t = strtok_r(buf, ",", &save); t && nc < 8; t = strtok_r(NULL, ",", &save))
            cells[nc++] = t + strspn(t, " ");
        if (!header) {
            static const char *const names[3] = {"isl", "osl", "weight"};
            for (int c = 0; c < nc; c++)
                for (int k = 0; k < 3; k++)
                    if (!strncmp(cells[c], names[k], strlen(names[k])) &&
                        cells[c][strlen(names[k]) + strspn(cells[c] + strlen(names[k]), " ")] ==
                            '\0')
                        col[k] = c;
            if (col[0] < 0 || col[1] < 0) {
                mp_usage("--lengths %s line %ld: the header names no %s column (accepted: isl, "
                         "osl and weight, comma-separated)", path, line,
                         col[0] < 0 ? "isl" : "osl");
                rc = MP_ERR_USAGE;
            }
            ncols = nc;
            header = 1;
            continue;
        }
        if (nc != ncols) {
            mp_usage("--lengths %s line %ld: %d cells, the header has %d", path, line, nc, ncols);
            rc = MP_ERR_USAGE;
            break;
        }
        if (*n >= MAX_LENGTH_CLASSES) {
            mp_usage("--lengths %s: more than %d classes", path, MAX_LENGTH_CLASSES);
            rc = MP_ERR_USAGE;
            break;
        }
        double isl, osl, w = 1;
        if ((rc = length_cell(path, line, "isl", cells[col[0]], 0, &isl)) != MP_OK ||
            (rc = length_cell(path, line, "osl", cells[col[1]], 0, &osl)) != MP_OK ||
            (col[2] >= 0 &&
             (rc = length_cell(path, line, "weight", cells[col[2]], 1, &w)) != MP_OK))
            break;
        long *ni = realloc(l->isls, (size_t)(*n + 1) * sizeof *ni);
        if (ni)
            l->isls = ni;
        long *no = realloc(l->osls, (size_t)(*n + 1) * sizeof *no);
        if (no)
            l->osls = no;
        double *np = realloc(l->p, (size_t)(*n + 1) * sizeof *np);
        if (np)
            l->p = np;
        if (!ni || !no || !np) {
            rc = MP_ERR_RUNTIME;
            break;
        }
        l->isls[*n] = (long)isl;
        l->osls[*n] = (long)osl;
        l->p[*n] = w;
        sum += w;
        (*n)++;
    }
    fclose(f);
    if (rc == MP_OK && *n == 0) {
        mp_usage("--lengths %s: no request class (a header isl,osl[,weight] and a line per class)",
                 path);
        rc = MP_ERR_USAGE;
    }
    for (int i = 0; rc == MP_OK && i < *n; i++)
        l->p[i] /= sum;
    return rc;
}

int plan_serving_check(const struct plan_opts *o, int argc, char **argv)
{
    static const char *const own[] = {"osl", "rate", "slo-ttft-ms", "prefill-tokens", "chunk"};
    if (o->lengths && (o->isl > 0 || o->osl > 0)) {
        mp_usage("--lengths and --%s: the file gives every request's lengths; drop --isl and "
                 "--osl", o->isl > 0 ? "isl" : "osl");
        return MP_ERR_USAGE;
    }
    if (o->isl <= 0 && !o->lengths) {
        for (size_t i = 0; i < sizeof own / sizeof *own; i++)
            if (mp_flag_given(argc, argv, own[i])) {
                mp_usage("--%s describes a serving workload: give it with --isl N --osl N (or "
                         "--lengths FILE) --rate REQ/S", own[i]);
                return MP_ERR_USAGE;
            }
        return MP_OK;
    }
    if ((!o->lengths && o->osl <= 0) || o->rate <= 0) {
        mp_usage("--%s: a serving workload needs %s too (requests of --isl prompt and --osl "
                 "output tokens, or the classes of --lengths, at --rate per second)",
                 o->lengths ? "lengths" : "isl",
                 !o->lengths && o->osl <= 0 ? "--osl N" : "--rate REQ/S");
        return MP_ERR_USAGE;
    }
    static const char *const set[] = {"context", "throughput"};
    for (size_t i = 0; i < 2; i++)
        if (mp_flag_given(argc, argv, set[i])) {
            mp_usage("--%s: a serving workload sets it (context isl + osl, throughput rate · osl "
                     "output tokens/s); drop --%s or --isl", set[i], set[i]);
            return MP_ERR_USAGE;
        }
    return MP_OK;
}

int plan_serving_build(const struct plan_opts *o, struct mp_plan_req *q, struct plan_req_lists *l,
                       struct mp_serving_req *w)
{
    memset(w, 0, sizeof *w);
    if (o->isl <= 0 && !o->lengths)
        return 0;
    int nlen = 1;
    if (o->lengths) {
        int rc = read_lengths(o->lengths, l, &nlen);
        if (rc != MP_OK)
            return -rc;
    } else {
        l->isls = malloc(sizeof *l->isls);
        l->osls = malloc(sizeof *l->osls);
        l->p = malloc(sizeof *l->p);
        if (!l->isls || !l->osls || !l->p)
            return -MP_ERR_RUNTIME;
        l->isls[0] = o->isl;
        l->osls[0] = o->osl;
        l->p[0] = 1;
    }
    l->prefill_tokens = malloc((size_t)o->prefill_tokens.n * sizeof *l->prefill_tokens);
    l->chunks = malloc((size_t)o->chunk.n * sizeof *l->chunks);
    if (!l->prefill_tokens || !l->chunks)
        return -MP_ERR_RUNTIME;
    for (int i = 0; i < o->prefill_tokens.n; i++)
        l->prefill_tokens[i] = (long)o->prefill_tokens.v[i];
    for (int i = 0; i < o->chunk.n; i++)
        l->chunks[i] = (long)o->chunk.v[i];
    *w = (struct mp_serving_req){.isls = l->isls, .osls = l->osls, .p = l->p, .nlen = nlen,
                                 .rate = o->rate, .slo_ttft_ms = o->slo_ttft_ms,
                                 .tokens = l->prefill_tokens, .ntokens = o->prefill_tokens.n,
                                 .chunks = l->chunks, .nchunk = o->chunk.n};
    mp_serving_moments(w);
    q->context = lround(mp_serving_decode_context(w));
    q->throughput = o->rate * w->osl_mean;
    return 1;
}

/* ---- plan.json's question (docs/planning.md, "plan.json") ---- */

/* The values of an integer list as a JSON array of numbers under `key` in o. */
static void add_ints(cJSON *o, const char *key, const struct mp_list *l)
{
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (int i = 0; a && i < l->n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)l->v[i]));
}

/* The words of a list as a JSON array of strings under `key` in o. */
static void add_strs(cJSON *o, const char *key, const struct mp_strlist *l)
{
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (int i = 0; a && i < l->n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(l->v[i]));
}

/* The profile and where it came from: a preset (--cluster NAME), a file, or a file --calibrate
 * wrote (its first line names the points and the runs it was fitted to). */
static cJSON *profile_json(const char *spec, const struct mp_cluster *cl)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, MP_PJ_NAME, cl->name);
    for (int i = 0; i < mp_cluster_npresets; i++)
        if (strcmp(spec, mp_cluster_presets[i].name) == 0) {
            cJSON_AddStringToObject(o, MP_PJ_SOURCE, "preset");
            cJSON_AddStringToObject(o, "hardware", cl->name);
            return o;
        }
    cJSON_AddStringToObject(o, MP_PJ_PATH, spec);
    /* the hardware it describes: the preset it starts from (base = NAME), the one a fitted
     * profile was fitted from (fitted-from-NAME), else its own name */
    char hw[256] = "", text[1024];
    FILE *bf = fopen(spec, "r");
    while (bf && fgets(text, sizeof text, bf))
        if (sscanf(text, " base = %255s", hw) == 1)
            break;
    if (bf)
        fclose(bf);
    if (!hw[0])
        snprintf(hw, sizeof hw, "%s",
                 strncmp(cl->name, "fitted-from-", 12) == 0 ? cl->name + 12 : cl->name);
    cJSON_AddStringToObject(o, "hardware", hw);
    char line[4096] = "";
    FILE *f = fopen(spec, "r");
    if (f) {
        if (!fgets(line, sizeof line, f))
            line[0] = '\0';
        fclose(f);
    }
    int points = 0, at = 0;
    if (sscanf(line, "# fitted by moeperf-plan --calibrate to %d points of:%n", &points,
               &at) == 1 && at > 0) {
        cJSON_AddStringToObject(o, MP_PJ_SOURCE, "fitted");
        cJSON_AddNumberToObject(o, "fitted_points", points);
        cJSON *runs = cJSON_AddArrayToObject(o, "fitted_from");
        char *save = NULL;
        for (char *tok = strtok_r(line + at, " \n", &save); tok && runs;
             tok = strtok_r(NULL, " \n", &save))
            cJSON_AddItemToArray(runs, cJSON_CreateString(tok));
        /* the layer time's errors on the points it was fitted to (the next line, when the runs
         * held layer points) */
        double med = 0, worst = 0;
        int n = 0;
        f = fopen(spec, "r");
        if (f && fgets(line, sizeof line, f) && fgets(line, sizeof line, f) &&
            sscanf(line, "# fit errors: layer_us median %lf%% worst %lf%% over %d points", &med,
                   &worst, &n) == 3) {
            cJSON *e = cJSON_AddObjectToObject(o, "fit_error_layer");
            cJSON_AddNumberToObject(e, "median", med / 100);
            cJSON_AddNumberToObject(e, "worst", worst / 100);
            cJSON_AddNumberToObject(e, MP_PJ_POINTS, n);
        }
        if (f)
            fclose(f);
    } else {
        cJSON_AddStringToObject(o, MP_PJ_SOURCE, "file");
    }
    return o;
}

/* The question: the model (and the flags that overrode its preset), the profile, the SLO, the
 * target, the context and every constraint the candidates were drawn from. */
cJSON *plan_question_json(const struct plan_opts *o, const struct mp_plan_req *q)
{
    cJSON *j = cJSON_CreateObject(), *m = cJSON_AddObjectToObject(j, MP_PJ_MODEL);
    const struct mp_model *md = &q->model;
    cJSON_AddStringToObject(m, MP_PJ_NAME, md->name);
    cJSON_AddNumberToObject(m, "hidden", md->hidden);
    cJSON_AddNumberToObject(m, "ffn", md->ffn);
    cJSON_AddNumberToObject(m, "experts", md->experts);
    cJSON_AddNumberToObject(m, "topk", md->topk);
    cJSON_AddNumberToObject(m, "shared", md->shared);
    cJSON_AddNumberToObject(m, "layers", md->layers);
    cJSON_AddNumberToObject(m, "params", md->params); /* the card's, 0: none stated */
    cJSON_AddNumberToObject(m, "params_derived", mp_model_total_params(md));
    cJSON *ov = cJSON_AddObjectToObject(m, "overrides"); /* the flags given, -1: not given */
    const struct { const char *key; int v; } given[] = {
        {"experts", o->b.experts}, {"topk", o->b.topk}, {"shared", o->b.shared},
        {"hidden", o->b.hidden}, {"ffn", o->b.ffn}, {"layers", o->b.layers}};
    for (size_t i = 0; i < sizeof given / sizeof *given; i++)
        if (given[i].v >= 0)
            cJSON_AddNumberToObject(ov, given[i].key, given[i].v);
    cJSON_AddItemToObject(j, MP_PJ_CLUSTER, profile_json(o->b.cluster, &q->cluster));
    cJSON *slo = cJSON_AddObjectToObject(j, MP_PJ_SLO);
    mp_plan_json_bound(slo, MP_PJ_TOKEN_P99_MS, q->slo_token_ms);
    mp_plan_json_bound(slo, "layer_p99_us", q->slo_layer_us);
    mp_plan_json_bound(j, MP_PJ_THROUGHPUT_TOKENS_PER_S, q->throughput);
    cJSON_AddStringToObject(j, "token_scope", "step"); /* SLO and throughput: the whole step */
    mp_plan_json_bound(j, "gpu_hour_price_usd", q->gpu_hour_price);
    cJSON_AddNumberToObject(j, "context_tokens", (double)q->context);
    cJSON_AddNumberToObject(j, "seq", q->seq);
    add_strs(j, "routings", &o->b.routing);
    cJSON *c = cJSON_AddObjectToObject(j, MP_PJ_CONSTRAINTS);
    add_ints(c, "tp", &o->tp);
    add_ints(c, "ep", &o->ep);
    add_ints(c, "replicate", &o->replicate);
    add_ints(c, "eplb", &o->eplb);
    add_ints(c, "overlap", &o->b.overlap);
    add_ints(c, "micro_batches", &o->b.micro_batches);
    add_strs(c, "dedup", &o->b.dedup);
    add_strs(c, "weight_dtype", &o->b.weight_dtype);
    add_strs(c, "dispatch_dtype", &o->b.dispatch_dtype);
    add_ints(c, "batch", &o->b.batch);
    cJSON_AddNumberToObject(c, MP_PJ_MAX_GPUS, q->max_gpus);
    cJSON_AddNumberToObject(c, "mem_reserve", q->mem_reserve);
    cJSON_AddStringToObject(c, "nonexpert_split", o->nonexpert);
    cJSON_AddNumberToObject(c, "weight_bytes", q->weight_bytes);
    return j;
}

void plan_workload_json(cJSON *question, const struct plan_opts *o, const struct mp_serving_req *w)
{
    cJSON *wl = cJSON_AddObjectToObject(question, MP_PJ_WORKLOAD);
    cJSON_AddNumberToObject(wl, MP_PJ_ISL, w->isl_mean);
    cJSON_AddNumberToObject(wl, MP_PJ_OSL, w->osl_mean);
    cJSON_AddNumberToObject(wl, "isl_max", (double)w->isl_max);
    cJSON_AddNumberToObject(wl, "classes", w->nlen);
    if (o->lengths)
        cJSON_AddStringToObject(wl, "lengths_file", o->lengths);
    else
        cJSON_AddNullToObject(wl, "lengths_file");
    cJSON_AddNumberToObject(wl, "rate_rps", w->rate);
    mp_plan_json_bound(wl, "slo_ttft_ms", w->slo_ttft_ms);
    add_ints(wl, "prefill_tokens", &o->prefill_tokens);
    add_ints(wl, "chunk", &o->chunk);
}
