/* moeperf-plan - capacity planning on the cluster model: sweeps layouts, batch sizes, hot-expert
 * replicas, eplb slots, pipeline depths and dedup modes for a model, finds the batch cap and the cheapest plan that meets a latency SLO at a
 * target throughput; --calibrate fits a cluster profile to measured runs, --validate checks one. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_opts.h"
#include "calibrate.h"
#include "cluster.h"
#include "dedup.h"
#include "error.h"
#include "format.h"
#include "capacity_plan.h"
#include "plan_answer.h"
#include "plan_console.h"
#include "plan_keys.h"
#include "plan_request.h"
#include "results.h"
#include "schema.h"
#include "routing.h"
#include "datafiles.h"
#include "serving_answer.h"

#define PO(f) offsetof(struct plan_opts, f)

static const struct mp_opt options[] = {
    {"calibrate", MP_OPT_FLAG, PO(calibrate), NULL, MP_NOLIMIT, NULL, NULL,
     "fit --cluster (the starting profile; default cpu-host for cpu runs, else h100-ndr) to the "
     "RUN_DIRs; write it to --out FILE"},
    {"validate", MP_OPT_FLAG, PO(validate), NULL, MP_NOLIMIT, NULL, NULL,
     "predict every point of the RUN_DIRs with --cluster and print the errors"},
    MP_OPT_MODEL("seed-k3"), MP_OPT_EXPERTS, MP_OPT_TOPK, MP_OPT_SHARED, MP_OPT_HIDDEN, MP_OPT_FFN,
    MP_OPT_LAYERS, MP_OPT_BATCH("1:256:x2"), MP_OPT_SEQ, MP_OPT_ROUTING,
    {"group-limit", MP_OPT_STRING_LIST, PO(b.group_limit), "off", MP_NOLIMIT, NULL, "LIST",
     "off, or G:M: G groups of consecutive experts, each token routed within M of them (as "
     "DeepSeek-V3's node-limited routing); a list weighs each with every routing"},
    MP_OPT_SEED,
    MP_OPT_ITERS("8"), MP_OPT_CLUSTER,
    {"tp", MP_OPT_INT_LIST, PO(tp), "1,2,4,8", 1, 64, NULL, "LIST", "TP sizes to consider"},
    {"ep", MP_OPT_INT_LIST, PO(ep), "1:256:x2", 1, 65536, NULL, "LIST", "EP sizes to consider"},
    {"replicate", MP_OPT_INT_LIST, PO(replicate), "0,2,4,8", 0, 65536, NULL, "LIST",
     "hot experts copied to every EP rank (replicate-hot:R; 0 = contiguous placement)"},
    {"eplb", MP_OPT_INT_LIST, PO(eplb), NULL, 1, 1 << 24, NULL, "LIST",
     "redundant expert slots to try with the eplb:SLOTS placement (default: none)"},
    {"overlap", MP_OPT_INT_LIST, PO(b.overlap), "1", 1, 32, NULL, "LIST",
     "pipeline depths to try: chunks moeperf-layer --overlap would pipeline (1: none)"},
    MP_OPT_DEDUP,
    {"weight-dtype", MP_OPT_STRING_LIST, PO(b.weight_dtype), "bf16,fp8", MP_NOLIMIT,
     mp_dtype_choices, "LIST", "the routed and shared experts' weights: bf16, or fp8 (e4m3, an "
     "fp32 scale per 128x128 block: half the bytes to hold and to stream, fp8 GEMMs); a list "
     "weighs them"},
    {"dispatch-dtype", MP_OPT_STRING_LIST, PO(b.dispatch_dtype), "bf16,fp8", MP_NOLIMIT,
     mp_dtype_choices, "LIST", "the dispatched rows: bf16, or fp8 (e4m3, an fp32 scale per 128 "
     "values: about half the dispatch's bytes; the combine stays bf16); a list weighs them"},
    {"micro-batches", MP_OPT_INT_LIST, PO(b.micro_batches), "1", 1, 2, NULL, "LIST",
     "a decode step's batch as one, or split in 2 with one half's dispatch and combine under "
     "the other's attention and GEMMs (two-batch overlap); a list weighs them"},
    {"slo-token-ms", MP_OPT_DOUBLE, PO(slo_token_ms), "0", 0, 1e9, NULL, "MS",
     "p99 latency budget per output token: the whole decode step, every layer (0: none)"},
    {"slo-layer-us", MP_OPT_DOUBLE, PO(slo_layer_us), "0", 0, 1e12, NULL, "US",
     "p99 latency budget per MoE layer (0: none)"},
    {"throughput", MP_OPT_DOUBLE, PO(throughput), "0", 0, 1e15, NULL, "TOK/S",
     "target output tokens/s over all DP replicas (0: one replica)"},
    {"gpu-hour-price", MP_OPT_DOUBLE, PO(gpu_hour_price), "0", 0, 1e6, NULL, "USD",
     "price of one GPU-hour: every plan, alternative and sensitivity gets its USD per million "
     "output tokens (0: none)"},
    {"max-gpus", MP_OPT_INT, PO(max_gpus), "4096", 1, 1 << 24, NULL, NULL,
     "the most GPUs a plan may use"},
    {"context", MP_OPT_INT, PO(context), "4096", 1, 1 << 24, NULL, "TOKENS",
     "tokens of KV cache each sequence holds: memory per GPU and the step's attention"},
    {"mem-reserve", MP_OPT_DOUBLE, PO(mem_reserve), NULL, 0, 0.99, NULL, "FRACTION",
     "share of each GPU's memory kept for the runtime, activations and buffers (default: the "
     "profile's mem_reserve, 0.1 for the presets)"},
    {"nonexpert-split", MP_OPT_STRING, PO(nonexpert), "tp", MP_NOLIMIT, mp_nonexpert_split_names,
     "tp|world", "non-expert weights split by each EP rank's TP group (a copy per EP rank), or "
     "over all tp·ep GPUs"},
    {"expert-cache", MP_OPT_STRING, PO(expert_cache), "off", MP_NOLIMIT, NULL, "off|fit[:POLICY]",
     "fit: a candidate whose weights do not fit keeps the largest expert cache per layer that "
     "does (POLICY lru, lfu or static; default lru), the other experts in host memory, its "
     "fetches timed by the model at the profile's pcie_bw"},
    {"isl", MP_OPT_INT, PO(isl), NULL, 1, 1 << 24, NULL, "TOKENS",
     "a serving workload: prompt tokens per request; plans a prefill and a decode pool, or one "
     "co-located pool (with --osl and --rate)"},
    {"osl", MP_OPT_INT, PO(osl), NULL, 1, 1 << 24, NULL, "TOKENS",
     "a serving workload: output tokens per request"},
    {"lengths", MP_OPT_STRING, PO(lengths), NULL, MP_NOLIMIT, NULL, "FILE",
     "a serving workload's request lengths instead of --isl and --osl: a CSV with a header "
     "isl,osl[,weight] and a line per class (the weights' shares of the requests)"},
    {"rate", MP_OPT_DOUBLE, PO(rate), NULL, 1e-9, 1e12, NULL, "REQ/S",
     "a serving workload: requests per second (Poisson arrivals)"},
    {"slo-ttft-ms", MP_OPT_DOUBLE, PO(slo_ttft_ms), "0", 0, 1e9, NULL, "MS",
     "a serving workload: mean time to first token, queueing and KV transfer included (0: none)"},
    {"prefill-tokens", MP_OPT_INT_LIST, PO(prefill_tokens), "1024:16384:x2", 1, 1 << 22, NULL,
     "LIST", "a serving workload: prompt tokens per EP rank in one prefill pass, to weigh"},
    {"chunk", MP_OPT_INT_LIST, PO(chunk), "0", 0, 1 << 24, NULL, "LIST",
     "a serving workload: prefill prompts in pieces of at most TOKENS (0: whole prompts)"},
    {"validation", MP_OPT_STRING, PO(validation), NULL, MP_NOLIMIT, NULL, "FILE",
     "the model's errors on published measurements (ci/validate --summary), for plan.json's "
     "trust (default: tests/published/validation.csv of the data directory)"},
    {"out", MP_OPT_STRING, PO(b.out), NULL, MP_NOLIMIT, NULL, "PATH",
     "plan: directory for plan.csv; --calibrate: the profile file to write"},
    MP_OPT_QUIET, MP_OPT_END,
};

static const char summary[] =
    "usage: moeperf-plan --cluster PROFILE [workload] [--slo-token-ms MS] [--throughput TOK/S]\n"
    "       moeperf-plan --calibrate [--cluster BASE] --out PROFILE RUN_DIR...\n"
    "       moeperf-plan --validate --cluster PROFILE RUN_DIR...\n"
    "Runs every candidate layout (tp × ep), batch, placement, pipeline depth, dedup mode and\n"
    "weight and dispatch dtype\n"
    "through the cluster model (docs/planning.md), reports the batch cap (largest batch with\n"
    "comm/ffn <= 1), the cheapest plan (fewest GPUs, DP replicas included) that meets the p99 SLO\n"
    "at the target throughput, the remedies and dedup modes ranked, and whether more replicas\n"
    "beat a larger batch.";

static void print_errors(const struct mp_calib_set *set, const struct mp_cluster *cl)
{
    struct mp_calib_errors e;
    mp_calib_errors(set, cl, &e);
    printf("%-24s %6s %14s %14s\n", "column", "points", "median error", "worst error");
    for (int c = 0; c < CAL_NCOLS; c++)
        if (e.n[c] > 0)
            printf("%-24s %6d %13.1f%% %13.1f%%\n", mp_calib_col_names[c], e.n[c],
                   100 * e.median[c], 100 * e.worst[c]);
}

/* The starting profile when --cluster is not given: cpu-host for runs of the cpu backend, else
 * h100-ndr (the grep reads run.json's "libraries" object, written by every tool). */
static const char *default_base(const char *dir)
{
    char path[4096], line[512];
    snprintf(path, sizeof path, "%s/run.json", dir);
    FILE *f = fopen(path, "r");
    const char *base = "h100-ndr";
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "\"compute\"") && strstr(line, "\"cpu\""))
            base = "cpu-host";
    if (f)
        fclose(f);
    return base;
}

static int run_calibrate(struct plan_opts *o, char **dirs, int ndirs)
{
    struct mp_cluster base, fit;
    struct mp_calib_set set;
    int frozen[64];
    double obj;
    if (!o->b.out) {
        mp_usage("--calibrate: --out FILE is needed for the fitted profile");
        return MP_ERR_USAGE;
    }
    if (mp_output_check("--out", o->b.out, (const char *const *)dirs, ndirs, NULL) != MP_OK)
        return MP_ERR_USAGE;
    if (mp_cluster_resolve(o->b.cluster ? o->b.cluster : default_base(dirs[0]), &base) != MP_OK)
        return MP_ERR_USAGE;
    int rc = mp_calib_load((const char *const *)dirs, ndirs, &base, &set);
    if (rc != MP_OK)
        return rc;
    printf("# calibrating %s on %d points from %d run(s); %d ranks per node, %g-byte elements\n",
           base.name, set.n, ndirs, set.base.gpus_per_node, set.base.elem_bytes);
    printf("# before (the starting profile):\n");
    print_errors(&set, &set.base);
    rc = mp_calib_fit(&set, &fit, frozen, &obj);
    if (rc == MP_OK) {
        snprintf(fit.name, sizeof fit.name, "fitted-from-%.40s", base.name);
        printf("# after (Σ ln² residuals %.3g):\n", obj);
        print_errors(&set, &fit);
        printf("# parameters:\n");
        for (int i = 0; i < mp_cluster_nparams; i++) {
            if (!mp_cluster_params[i].fit)
                continue;
            double *v = mp_cluster_param_ptr(&fit, i);
            printf("  %-14s %12.6g %-8s %s\n", mp_cluster_params[i].key, *v,
                   mp_cluster_params[i].unit,
                   frozen[i] ? "(not fitted: the runs do not exercise it)" : "(fitted)");
        }
        /* written beside it, and renamed over it once whole */
        char *tmp = mp_format("%s.tmp", o->b.out);
        FILE *f = tmp ? fopen(tmp, "w") : NULL;
        if (!f) {
            mp_usage("--out: cannot write '%s'", tmp ? tmp : o->b.out);
            rc = MP_ERR_USAGE;
        } else {
            fprintf(f, "# fitted by moeperf-plan --calibrate to %d points of:", set.n);
            for (int d = 0; d < ndirs; d++)
                fprintf(f, " %s", dirs[d]);
            fprintf(f, "\n");
            struct mp_calib_errors e;
            mp_calib_errors(&set, &fit, &e);
            if (e.n[CAL_LAYER_LAYER] > 0) /* what a plan on this profile may be off by */
                fprintf(f, "# fit errors: layer_us median %.4g%% worst %.4g%% over %d points\n",
                        100 * e.median[CAL_LAYER_LAYER], 100 * e.worst[CAL_LAYER_LAYER],
                        e.n[CAL_LAYER_LAYER]);
            rc = mp_cluster_write(&fit, f);
            if (fclose(f) != 0 && rc == MP_OK) {
                mp_error("--out: cannot write '%s': %s", tmp, strerror(errno));
                rc = MP_ERR_RUNTIME;
            }
            if (rc == MP_OK && rename(tmp, o->b.out) != 0) {
                mp_error("--out: cannot rename '%s' to '%s': %s", tmp, o->b.out, strerror(errno));
                rc = MP_ERR_RUNTIME;
            }
            if (rc != MP_OK)
                unlink(tmp);
            else
                printf("# profile written to %s\n", o->b.out);
        }
        free(tmp);
    }
    mp_calib_free(&set);
    return rc;
}

static int run_validate(struct plan_opts *o, char **dirs, int ndirs)
{
    struct mp_cluster cl;
    struct mp_calib_set set;
    if (mp_cluster_resolve(o->b.cluster, &cl) != MP_OK)
        return MP_ERR_USAGE;
    int rc = mp_calib_load((const char *const *)dirs, ndirs, &cl, &set);
    if (rc != MP_OK)
        return rc;
    /* the profile's own node size and element bytes, not the run's, are what is being tested */
    set.base = cl;
    printf("# %s predicting %d points\n", cl.name, set.n);
    printf("%-64s %12s %12s %8s\n", "point", "measured", "predicted", "error");
    for (int i = 0; i < set.n; i++) {
        int col = set.pts[i].tool == 0 ? CAL_LAYER_LAYER
                  : set.pts[i].tool == 1 ? CAL_A2A_TIME
                                         : CAL_FFN_FFN;
        double m = set.pts[i].meas[col], p = mp_calib_predict(&set, i, &cl, col);
        printf("%-64s %12.1f %12.1f %+7.1f%%\n", set.pts[i].label, m, p, 100 * (p - m) / m);
    }
    print_errors(&set, &cl);
    mp_calib_free(&set);
    return MP_OK;
}

/* Every candidate c[0..n) of `routing` under `group_limit` as a row of plan.csv (docs/CSV.md). */
static void write_plan_csv(const struct plan_opts *o, const char *routing,
                           const char *group_limit, const struct mp_plan_cand *c, int n,
                           struct mp_csv *csv)
{
    struct mp_row row = {0};
    for (int i = 0; i < n; i++) {
        mp_row_reset(&row);
        mp_row_str(&row, "model");
        mp_row_str(&row, routing);
        mp_row_str(&row, group_limit);
        mp_row_int(&row, c[i].tp);
        mp_row_int(&row, c[i].ep);
        char pl[32];
        mp_row_int(&row, c[i].replicate);
        mp_row_str(&row, mp_plan_placement(&c[i], pl, sizeof pl));
        mp_row_int(&row, c[i].batch);
        double v[] = {c[i].layer_us, c[i].layer_p99_us, c[i].ffn_us, c[i].comm_us, c[i].ratio,
                      c[i].bubble, c[i].imbalance, c[i].hit, c[i].token_ms, c[i].token_p99_ms,
                      c[i].replica_tps};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
            mp_row_dbl(&row, v[k]);
        mp_row_int(&row, c[i].dp);
        mp_row_int(&row, c[i].gpus);
        mp_row_int(&row, c[i].slo_ok && c[i].gpus <= o->max_gpus); /* memory aside: fits */
        mp_row_int(&row, c[i].overlap);
        mp_row_str(&row, mp_dedup_choices[c[i].dedup]);
        mp_row_str(&row, mp_dtype_choices[c[i].weight_dtype]);
        mp_row_str(&row, mp_dtype_choices[c[i].dispatch_dtype]);
        mp_row_dbl(&row, c[i].mem.total / 1e9);
        mp_row_dbl(&row, c[i].mem.kv / 1e9);
        mp_row_int(&row, c[i].fits);
        mp_row_str(&row, c[i].over);
        if (c[i].cache_slots > 0)
            mp_row_int(&row, c[i].cache_slots);
        else
            mp_row_str(&row, "");
        mp_row_dbl(&row, c[i].cache_hit_rate);
        mp_row_int(&row, o->context);
        mp_row_int(&row, c[i].micro_batches);
        static const int parts[] = {MP_STEP_ATTN, MP_STEP_DENSE, MP_STEP_HEAD, MP_STEP_MISC,
                                    MP_STEP_HOST, MP_STEP_MOE, MP_STEP_OVERLAP};
        for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++)
            mp_row_dbl(&row, c[i].part_ms[parts[k]] * 1e3);
        mp_row_dbl(&row, c[i].tok_s_gpu);
        mp_row_dbl(&row, c[i].usd_per_mtok);
        mp_csv_write(csv, &row);
    }
    mp_row_free(&row);
}

/* The profile a plan assumed, beside its plan.csv (DIR/cluster.ini, which --cluster reads back and
 * moeperf-report quotes). */
static int write_profile(const char *dir, const struct mp_cluster *cl)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/cluster.ini", dir);
    FILE *f = fopen(path, "w");
    int rc = f ? mp_cluster_write(cl, f) : MP_ERR_RUNTIME;
    if (f && fclose(f) != 0)
        rc = MP_ERR_RUNTIME;
    if (rc != MP_OK)
        mp_error("cannot write %s: %s", path, strerror(errno));
    return rc;
}

/* plan.json while it is built: the document, its question and answers array, and the validation
 * table each answer's trust reads (NULL: none; it may point into vpath). */
struct plan_json {
    cJSON *plan, *answers, *question;
    const char *validation;
    char vpath[4200];
};

/* DIR/plan.csv opened with plan.csv's header, DIR created as needed: MP_OK, or the error of
 * creating or opening it after its message. */
static int open_plan_csv(const char *dir, struct mp_csv *csv)
{
    const struct mp_csv_schema *f = &mp_schema_plan;
    const char *cols[MP_SCHEMA_MAX_COLS];
    int rc = mp_mkdir_p(dir, "--out");
    if (rc == MP_OK)
        rc = mp_csv_open(csv, dir, f->file, cols, mp_schema_header(f, cols), 0);
    return rc;
}

/* plan.json begun in *j: the run's facts, the question of o and q, an empty answers array, and
 * the validation table (--validation, else the data directory's tests/published/validation.csv when
 * it is readable). MP_OK, or MP_ERR_RUNTIME when out of memory. */
static int plan_json_start(const struct plan_opts *o, const struct mp_plan_req *q, int argc,
                           char **argv, struct plan_json *j)
{
    char root[4096];
    j->plan = mp_runjson_new("moeperf-plan", argc, argv);
    if (!j->plan)
        return MP_ERR_RUNTIME;
    j->question = plan_question_json(o, q);
    cJSON_AddItemToObject(j->plan, MP_PJ_QUESTION, j->question);
    if (o->validation) {
        j->validation = o->validation;
    } else if (mp_data_root(root, sizeof root) == 0) {
        snprintf(j->vpath, sizeof j->vpath, "%s/tests/published/validation.csv", root);
        j->validation = access(j->vpath, R_OK) == 0 ? j->vpath : NULL;
    }
    j->answers = cJSON_AddArrayToObject(j->plan, MP_PJ_ANSWERS);
    return MP_OK;
}

/* The group limit `spec` on routing rt: "off", or G:M (the planner's layouts span different
 * nodes, so the M-alone form, which counts them, is refused). MP_OK or MP_ERR_USAGE. */
static int plan_group_limit(const char *spec, const struct mp_model *m, struct mp_routing *rt)
{
    int inactive;
    if (strcmp(spec, "off") != 0 && !strchr(spec, ':')) {
        mp_usage("--group-limit: '%s': the planner takes off or G:M (M alone counts the nodes a "
                 "layout spans, which differ between its candidates)", spec);
        return MP_ERR_USAGE;
    }
    int rc = mp_group_limit_parse(spec, m->experts, m->topk, 1, &rt->groups, &rt->group_pick,
                                  &inactive);
    return rc == MP_OK ? mp_group_limit_check(rt, spec, rt->groups, rt->group_pick) : rc;
}

/* The plan for routing o->b.routing.v[ri] under group limit o->b.group_limit.v[gi]: every
 * candidate evaluated for q, written to plan.csv when csv is open, its answer added to plan.json
 * when j is begun, and its findings printed. MP_OK, or the error of parsing the routing or the
 * limit, or of the evaluation, after its message. */
static int plan_routing(const struct plan_opts *o, struct mp_plan_req *q, int ri, int gi,
                        struct mp_csv *csv, struct plan_json *j, const struct mp_serving_req *w)
{
    const char *name = o->b.routing.v[ri], *limit = o->b.group_limit.v[gi];
    struct mp_routing rt;
    int rc = mp_routing_parse(name, q->model.experts, q->model.topk, (uint64_t)o->b.seed, &rt);
    if (rc != MP_OK)
        return rc;
    rc = plan_group_limit(limit, &q->model, &rt);
    if (rc != MP_OK) {
        mp_routing_free(&rt);
        return rc;
    }
    q->routing = &rt;
    struct mp_plan_cand *c = NULL;
    int n = 0;
    rc = mp_plan_evaluate(q, &c, &n);
    if (rc == MP_OK) {
        if (csv->f)
            write_plan_csv(o, name, limit, c, n, csv);
        if (strcmp(limit, "off") != 0)
            printf("\n## routing %s, group limit %s: %d candidates\n", name, limit, n);
        else
            printf("\n## routing %s: %d candidates\n", name, n);
        int best = mp_plan_best(c, n);
        cJSON *a = NULL;
        if (j->answers) {
            a = mp_plan_answer_json(name, q, c, n, best, j->validation,
                                    cJSON_GetObjectItem(j->question, "cluster"));
            cJSON_AddStringToObject(a, MP_PJ_GROUP_LIMIT, limit);
            cJSON_AddItemToArray(j->answers, a);
        }
        plan_print_findings(q, c, n, best, o->b.quiet);
        if (w) { /* the workload's pools: this decode plan, and prefill weighed for it */
            struct mp_serving_answer sa;
            rc = mp_serving_plan(q, c, n, best, w, &sa);
            if (rc == MP_OK) {
                mp_serving_print(q, w, &sa);
                if (a)
                    cJSON_AddItemToObject(a, MP_PJ_SERVING, mp_serving_json(q, w, &sa));
            }
        }
        free(c);
    }
    q->routing = NULL;
    mp_routing_free(&rt);
    return rc;
}

/* The capacity plan: the request built from o, its assumptions printed, then the plan of every
 * routing; with --out, plan.csv, cluster.ini and plan.json in that directory. MP_OK, or the
 * first error after its message. */
static int run_plan(struct plan_opts *o, int argc, char **argv)
{
    struct mp_plan_req q = {0};
    struct plan_req_lists lists = {0};
    struct plan_json pj = {0};
    struct mp_csv csv = {0};
    struct mp_serving_req w;
    int rc = plan_serving_check(o, argc, argv), serving = 0;
    if (rc == MP_OK)
        rc = plan_req_build(o, &q, &lists);
    if (rc == MP_OK && (serving = plan_serving_build(o, &q, &lists, &w)) < 0)
        rc = -serving;
    if (rc == MP_OK) /* before anything is written */
        rc = mp_plan_check_layouts(&q);
    if (rc == MP_OK && o->b.out)
        rc = open_plan_csv(o->b.out, &csv);
    if (rc == MP_OK) {
        plan_print_header(&q, o->b.micro_batches.n > 1 || o->b.micro_batches.v[0] > 1);
        if (o->b.out)
            rc = write_profile(o->b.out, &q.cluster);
    }
    if (rc == MP_OK && o->b.out)
        rc = plan_json_start(o, &q, argc, argv, &pj);
    if (rc == MP_OK && pj.plan && serving > 0)
        plan_workload_json(pj.question, o, &w);
    for (int ri = 0; rc == MP_OK && ri < o->b.routing.n; ri++)
        for (int gi = 0; rc == MP_OK && gi < o->b.group_limit.n; gi++)
            rc = plan_routing(o, &q, ri, gi, &csv, &pj, serving > 0 ? &w : NULL);
    if (rc == MP_OK && pj.plan)
        rc = mp_json_write(pj.plan, o->b.out, MP_PLAN_JSON_FILE);
    if (rc == MP_OK && o->b.out)
        printf("\n# every candidate: %s/plan.csv; the question and the answer: %s/plan.json; the "
               "profile assumed: %s/cluster.ini\n", o->b.out, o->b.out, o->b.out);
    cJSON_Delete(pj.plan);
    mp_csv_close(&csv);
    plan_req_free(&lists);
    return rc;
}

int main(int argc, char **argv)
{
    struct plan_opts o;
    char **dirs = NULL;
    int ndirs = 0;
    mp_log_init("moeperf-plan", -1);
    memset(&o, 0, sizeof o);
    o.b.experts = o.b.topk = o.b.shared = o.b.hidden = o.b.ffn = o.b.layers = -1;
    int rc = mp_opts_parse(options, &o, argc, argv, mp_bench_help(summary), &dirs, &ndirs);
    if (rc == MP_OK) {
        if (o.calibrate && o.validate) {
            mp_usage("--calibrate and --validate: pick one");
            rc = MP_ERR_USAGE;
        } else if ((o.calibrate || o.validate) && ndirs == 0) {
            mp_usage("--%s needs at least one RUN_DIR", o.calibrate ? "calibrate" : "validate");
            rc = MP_ERR_USAGE;
        } else if (!o.calibrate && !o.validate && ndirs > 0) {
            mp_usage("'%s': run directories are read by --calibrate or --validate", dirs[0]);
            rc = MP_ERR_USAGE;
        } else if (o.validate && !o.b.cluster) {
            mp_usage("--validate: --cluster PROFILE is needed");
            rc = MP_ERR_USAGE;
        } else {
            rc = o.calibrate  ? run_calibrate(&o, dirs, ndirs)
                 : o.validate ? run_validate(&o, dirs, ndirs)
                              : run_plan(&o, argc, argv);
        }
    }
    free(dirs);
    mp_opts_free(options, &o);
    return rc == MP_HELP ? 0 : rc;
}
