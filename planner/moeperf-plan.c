/* moeperf-plan - capacity planning on the cluster model: sweeps layouts, batch sizes, hot-expert
 * replicas, eplb slots, pipeline depths and dedup modes for a model, finds the batch cap and the cheapest plan that meets a latency SLO at a
 * target throughput; --calibrate fits a cluster profile to measured runs, --validate checks one. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
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
#include "gpumem.h"
#include "capacity_plan.h"
#include "plan_answer.h"
#include "results.h"
#include "schema.h"
#include "routing.h"
#include "srcroot.h"
#include "stats.h"

struct plan_opts {
    struct mp_bench_opts b; /* first, so the shared MP_OPT_* entries' offsets apply */
    int calibrate, validate;
    double slo_token_ms, slo_layer_us, throughput, gpu_hour_price;
    struct mp_list tp, ep, replicate, eplb;
    int max_gpus, context;
    double mem_reserve;
    char *nonexpert;
    char *validation;
    char *expert_cache;
};
#define PO(f) offsetof(struct plan_opts, f)

static const struct mp_opt options[] = {
    {"calibrate", MP_OPT_FLAG, PO(calibrate), NULL, MP_NOLIMIT, NULL, NULL,
     "fit --cluster (the starting profile; default cpu-host for cpu runs, else h100-ndr) to the "
     "RUN_DIRs; write it to --out FILE"},
    {"validate", MP_OPT_FLAG, PO(validate), NULL, MP_NOLIMIT, NULL, NULL,
     "predict every point of the RUN_DIRs with --cluster and print the errors"},
    MP_OPT_MODEL("seed-k3"), MP_OPT_EXPERTS, MP_OPT_TOPK, MP_OPT_SHARED, MP_OPT_HIDDEN, MP_OPT_FFN,
    MP_OPT_LAYERS, MP_OPT_BATCH("1:256:x2"), MP_OPT_SEQ, MP_OPT_ROUTING, MP_OPT_SEED,
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
    {"weight-dtype", MP_OPT_STRING_LIST, PO(b.weight_dtype), "bf16", MP_NOLIMIT, mp_dtype_choices,
     "LIST", "the routed and shared experts' weights: bf16, or fp8 (e4m3, an fp32 scale per "
     "128x128 block: half the bytes to hold and to stream, fp8 GEMMs); a list weighs them"},
    {"dispatch-dtype", MP_OPT_STRING_LIST, PO(b.dispatch_dtype), "bf16", MP_NOLIMIT,
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
    {"validation", MP_OPT_STRING, PO(validation), NULL, MP_NOLIMIT, NULL, "FILE",
     "the model's errors on published measurements (ci/validate --summary), for plan.json's "
     "trust (default: the source tree's tests/published/validation.csv)"},
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
        FILE *f = fopen(o->b.out, "w");
        if (!f) {
            mp_usage("--out: cannot write '%s'", o->b.out);
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
            if (fclose(f) != 0)
                rc = MP_ERR_RUNTIME;
            printf("# profile written to %s\n", o->b.out);
        }
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

static void write_plan_csv(struct plan_opts *o, const char *routing,
                           const struct mp_plan_cand *c, int n, struct mp_csv *csv)
{
    struct mp_row row = {0};
    for (int i = 0; i < n; i++) {
        mp_row_reset(&row);
        mp_row_str(&row, "model");
        mp_row_str(&row, routing);
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

static void print_cand_header(void)
{
    printf("  %-9s %-16s %3s %-5s %-4s %-4s %6s %10s %10s %9s %9s %6s %6s %6s %9s %9s %4s %6s %7s "
           "%5s %-7s %s\n",
           "layout", "placement", "ovl", "dedup", "wt", "disp", "batch", "layer_us", "p99_us", "ffn_us", "comm_us",
           "ratio", "bubble", "imbal", "token_ms", "tok/s/rep", "dp", "gpus", "mem_gb", "cache",
           "over", "slo");
}

static void print_cand(const struct mp_plan_cand *c)
{
    char lay[32], pl[32], cache[16] = "all";
    snprintf(lay, sizeof lay, "tp%dep%d", c->tp, c->ep);
    if (c->cache_slots > 0) /* the experts per layer kept resident with offload */
        snprintf(cache, sizeof cache, "%d", c->cache_slots);
    printf("  %-9s %-16s %3d %-5s %-4s %-4s %6ld %10.1f %10.1f %9.1f %9.1f %6.2f %6.3f %6.2f %9.2f "
           "%9.0f %4d %6d %7.1f %5s %-7s %s\n",
           lay, mp_plan_placement(c, pl, sizeof pl), c->overlap, mp_dedup_choices[c->dedup],
           mp_dtype_choices[c->weight_dtype], mp_dtype_choices[c->dispatch_dtype], c->batch, c->layer_us, c->layer_p99_us, c->ffn_us, c->comm_us, c->ratio, c->bubble,
           c->imbalance, c->token_p99_ms, c->replica_tps, c->dp, c->gpus, c->mem.total / 1e9,
           cache, c->over, c->meets ? "yes" : "no");
}

/* The remedies at the cheapest plan's layout and batch, ranked by the layer time they save against
 * contiguous placement without overlap with dedup pair (hot-expert replication, eplb, pipelining,
 * dedup rank and node, and their combinations in the sweep). */
static void print_remedies(const struct mp_plan_cand *c, int n, const struct mp_plan_cand *b)
{
    int base, order[64];
    int na = mp_plan_remedies(c, n, b, &base, order, 64);
    if (base < 0 || na == 0)
        return;
    printf("remedies at tp%dep%d batch %ld against contiguous without overlap, dedup pair, bf16 (layer %.1f µs, "
           "imbalance %.2f):",
           b->tp, b->ep, b->batch, c[base].layer_us, c[base].imbalance);
    for (int i = 0; i < na; i++) {
        const struct mp_plan_cand *a = &c[order[i]];
        char what[64];
        printf("%s %s %+.0f%% (imbalance %.2f)", i ? "," : "", mp_plan_remedy(a, what, sizeof what),
               100 * (a->layer_us / c[base].layer_us - 1), a->imbalance);
    }
    printf("\n");
}

/* The dedup modes at the cheapest plan's layout, batch and placement, without overlap, fastest
 * first, each against pair: the remedy of --dedup on its own. */
static void print_dedup(const struct mp_plan_cand *c, int n, const struct mp_plan_cand *b)
{
    int order[8], pair = -1;
    struct mp_plan_cand like = *b;
    like.overlap = 1;
    int k = mp_plan_dedup_modes(c, n, &like, order, 8);
    for (int i = 0; i < k; i++)
        if (c[order[i]].dedup == MP_DEDUP_PAIR)
            pair = order[i];
    if (k < 2 || pair < 0)
        return;
    char pl[64];
    printf("dedup modes at tp%dep%d batch %ld %s without overlap, fastest first:", b->tp, b->ep,
           b->batch, mp_plan_placement(b, pl, sizeof pl));
    for (int i = 0; i < k; i++) {
        const struct mp_plan_cand *a = &c[order[i]];
        printf("%s %d. %s %.1f µs", i ? "," : "", i + 1, mp_dedup_choices[a->dedup], a->layer_us);
        if (a != &c[pair])
            printf(" (%+.1f%% against pair)", 100 * (a->layer_us / c[pair].layer_us - 1));
    }
    printf("\n");
}

/* The network and FFN assumptions, once: the congestion a plan's inter-node exchanges assume
 * (docs/planning.md) and the FFN's rates. */
static void print_network_header(const struct mp_cluster *cl)
{
    if (cl->congestion > 0)
        printf("# network: congestion γ = %g: inter-node time × (1 + γ·log2 incast), a tree that "
               "incast slows\n", cl->congestion);
    else
        printf("# network: congestion γ = 0: inter-node exchanges near line rate at any EP size "
               "(a non-blocking fat tree; a profile with congestion > 0 models a tree that incast "
               "slows)\n");
    printf("#   NIC %.0f GB/s × %.2f, NVLink %.0f GB/s × %.2f; FFN: %.0f TFLOP/s × %.2f (fp8 %.0f × "
           "%.2f), %.2f TB/s × %.2f, %.0f µs per fused call, blend %.2f\n",
           cl->inter_bw / 1e9, cl->inter_eff, cl->intra_bw / 1e9, cl->intra_eff, cl->flops / 1e12,
           cl->flops_eff, cl->flops_fp8 / 1e12, cl->flops_fp8_eff, cl->hbm_bw / 1e12, cl->hbm_eff,
           cl->ffn_call_us, cl->ffn_blend);
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

/* The memory assumptions, once: what a GPU may hold and how the weights are placed. */
static void print_memory_header(const struct mp_plan_req *q)
{
    const struct mp_model *m = &q->model;
    double usable = mp_gpumem_usable(&q->cluster, q->mem_reserve);
    if (usable > 0)
        printf("# memory per GPU: %g GB on %s less a %.0f%% reserve = %.1f GB for weights and KV "
               "cache\n",
               q->cluster.gpu_mem_gb, q->cluster.name, 100 * q->mem_reserve, usable / 1e9);
    else
        printf("# memory per GPU: not checked (%s gives no gpu_mem_gb)\n", q->cluster.name);
    int fp8 = 0;
    for (int i = 0; i < q->nwdtype; i++)
        fp8 |= q->wdtypes[i] == MP_DTYPE_FP8;
    printf("#   %g-byte weights%s and KV cache, %ld tokens of context per sequence; parameters "
           "%.4g: routed %.4g, shared %.4g, non-expert %.4g (split by %s)\n",
           q->weight_bytes, fp8 ? " (fp8 experts: 1 byte and a scale per 128x128 block)" : "",
           q->context, mp_model_total_params(m), mp_model_routed_params(m),
           mp_model_shared_params(m), mp_model_nonexpert_params(m),
           q->nonexpert == MP_NONEXPERT_WORLD ? "all tp·ep GPUs" : "tp, a copy per EP rank");
    if (m->attn != MP_ATTN_NONE && m->params > 0)
        printf("#   %s: parameters derived from its attention, vocabulary and dense-layer shape "
               "(the model card states %.4g)\n", m->name, m->params);
    else if (m->attn != MP_ATTN_NONE)
        printf("#   %s: parameters derived from its attention, vocabulary and dense-layer shape\n",
               m->name);
    else if (m->params <= 0)
        printf("#   %s gives no params: only the experts' weights are counted\n", m->name);
    if (m->attn_layers <= 0 || m->kv_heads <= 0 || m->kv_head_dim <= 0)
        printf("#   %s gives no KV-cache shape (attn_layers, kv_heads, kv_head_dim): no KV cache "
               "counted\n", m->name);
}

/* ---- plan.json: the question and the answer (docs/planning.md, "plan.json") ---- */

static void add_ints(cJSON *o, const char *key, const struct mp_list *l)
{
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (int i = 0; a && i < l->n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)l->v[i]));
}

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
    cJSON_AddStringToObject(o, "name", cl->name);
    for (int i = 0; i < mp_cluster_npresets; i++)
        if (strcmp(spec, mp_cluster_presets[i].name) == 0) {
            cJSON_AddStringToObject(o, "source", "preset");
            cJSON_AddStringToObject(o, "hardware", cl->name);
            return o;
        }
    cJSON_AddStringToObject(o, "path", spec);
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
    if (sscanf(line, "# fitted by moeperf-plan --calibrate to %d points of:%n", &points, &at) == 1 &&
        at > 0) {
        cJSON_AddStringToObject(o, "source", "fitted");
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
            cJSON_AddNumberToObject(e, "points", n);
        }
        if (f)
            fclose(f);
    } else {
        cJSON_AddStringToObject(o, "source", "file");
    }
    return o;
}

/* The question: the model (and the flags that overrode its preset), the profile, the SLO, the
 * target, the context and every constraint the candidates were drawn from. */
static cJSON *question_json(const struct plan_opts *o, const struct mp_plan_req *q)
{
    cJSON *j = cJSON_CreateObject(), *m = cJSON_AddObjectToObject(j, "model");
    const struct mp_model *md = &q->model;
    cJSON_AddStringToObject(m, "name", md->name);
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
    cJSON_AddItemToObject(j, "cluster", profile_json(o->b.cluster, &q->cluster));
    cJSON *slo = cJSON_AddObjectToObject(j, "slo");
    mp_plan_json_bound(slo, "token_p99_ms", q->slo_token_ms);
    mp_plan_json_bound(slo, "layer_p99_us", q->slo_layer_us);
    mp_plan_json_bound(j, "throughput_tokens_per_s", q->throughput);
    cJSON_AddStringToObject(j, "token_scope", "step"); /* SLO and throughput: the whole step */
    mp_plan_json_bound(j, "gpu_hour_price_usd", q->gpu_hour_price);
    cJSON_AddNumberToObject(j, "context_tokens", (double)q->context);
    cJSON_AddNumberToObject(j, "seq", q->seq);
    add_strs(j, "routings", &o->b.routing);
    cJSON *c = cJSON_AddObjectToObject(j, "constraints");
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
    cJSON_AddNumberToObject(c, "max_gpus", q->max_gpus);
    cJSON_AddNumberToObject(c, "mem_reserve", q->mem_reserve);
    cJSON_AddStringToObject(c, "nonexpert_split", o->nonexpert);
    cJSON_AddNumberToObject(c, "weight_bytes", q->weight_bytes);
    return j;
}

/* Why the cheapest-looking candidates were dropped: those meeting the SLO within --max-gpus but
 * not fitting in memory, cheaper than the plan chosen. */
static void print_dropped(const struct mp_plan_req *q, const struct mp_plan_cand *c, int n,
                          int best)
{
    int nofit = 0, order[3];
    for (int i = 0; i < n; i++)
        nofit += !c[i].fits;
    if (nofit == 0)
        return;
    int k = mp_plan_dropped(c, n, best, q->max_gpus, order, 3);
    printf("memory: %d of %d candidates do not fit in %.1f GB per GPU%s\n", nofit, n,
           mp_gpumem_usable(&q->cluster, q->mem_reserve) / 1e9,
           k ? "; cheaper ones dropped although they met the SLO:" : "");
    for (int i = 0; i < k; i++) {
        const struct mp_plan_cand *a = &c[order[i]];
        char pl[64];
        printf("  tp%dep%d %s batch %ld: %d GPUs, p99 token %.2f ms, needs %.1f GB per GPU "
               "(routed experts %.1f, shared %.1f, non-expert %.1f, KV cache %.1f): %s overflow\n",
               a->tp, a->ep, mp_plan_remedy(a, pl, sizeof pl), a->batch, a->gpus, a->token_p99_ms,
               a->mem.total / 1e9, a->mem.routed / 1e9, a->mem.shared / 1e9,
               a->mem.nonexpert / 1e9, a->mem.kv / 1e9, a->over);
    }
    if (best < 0) { /* no plan: the least memory any candidate needs */
        int least = 0;
        for (int i = 1; i < n; i++)
            if (c[i].mem.total < c[least].mem.total)
                least = i;
        if (n > 0 && !c[least].fits)
            printf("  the least any candidate needs: %.1f GB per GPU (weights %.1f) at tp%dep%d "
                   "batch %ld\n",
                   c[least].mem.total / 1e9, c[least].mem.weights / 1e9, c[least].tp,
                   c[least].ep, c[least].batch);
    }
}

static int run_plan(struct plan_opts *o, int argc, char **argv)
{
    struct mp_plan_req q = {0};
    cJSON *plan = NULL, *answers = NULL, *question = NULL;
    char root[4096], vpath[4200];
    const char *validation = NULL; /* ci/validate --summary's table, for plan.json's trust */
    struct mp_csv csv = {0};
    int *tps = NULL, *eps = NULL, *reps = NULL, *eplbs = NULL, *overlaps = NULL, *dedups = NULL, rc;
    int *wdtypes = NULL, *ddtypes = NULL, *micro = NULL;
    long *batches = NULL;
    if (o->validation && access(o->validation, R_OK) != 0) {
        mp_usage("--validation '%s': %s (a table of ci/validate --summary)", o->validation,
                 strerror(errno));
        return MP_ERR_USAGE;
    }
    if (!o->b.cluster) {
        mp_usage("--cluster: the planner needs a cluster profile (h100-ndr, h200-ndr, h800-ib, "
                 "a100-hdr, b200-xdr or a file from --calibrate)");
        return MP_ERR_USAGE;
    }
    if (mp_bench_model(&o->b, &q.model) != MP_OK || mp_cluster_resolve(o->b.cluster, &q.cluster) != MP_OK)
        return MP_ERR_USAGE;
    if ((rc = to_ints(&o->tp, &tps)) != MP_OK || (rc = to_ints(&o->ep, &eps)) != MP_OK ||
        (rc = to_ints(&o->replicate, &reps)) != MP_OK || (rc = to_ints(&o->eplb, &eplbs)) != MP_OK ||
        (rc = to_ints(&o->b.overlap, &overlaps)) != MP_OK ||
        (rc = to_ints(&o->b.micro_batches, &micro)) != MP_OK)
        goto out;
    q.micro_batches = micro;
    q.nmicro = o->b.micro_batches.n;
    batches = malloc((size_t)o->b.batch.n * sizeof *batches);
    dedups = malloc((size_t)(o->b.dedup.n > 0 ? o->b.dedup.n : 1) * sizeof *dedups);
    if (!batches || !dedups) {
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    for (int i = 0; i < o->b.batch.n; i++)
        batches[i] = (long)o->b.batch.v[i];
    for (int i = 0; i < o->b.dedup.n; i++) {
        enum mp_dedup d;
        if ((rc = mp_dedup_parse(o->b.dedup.v[i], &d)) != MP_OK)
            goto out;
        dedups[i] = (int)d;
    }
    q.dedups = dedups;
    q.ndedup = o->b.dedup.n;
    if ((rc = to_dtypes("--weight-dtype", &o->b.weight_dtype, &wdtypes)) != MP_OK ||
        (rc = to_dtypes("--dispatch-dtype", &o->b.dispatch_dtype, &ddtypes)) != MP_OK)
        goto out;
    q.wdtypes = wdtypes;
    q.nwdtype = o->b.weight_dtype.n;
    q.ddtypes = ddtypes;
    q.nddtype = o->b.dispatch_dtype.n;
    q.batches = batches;
    q.nbatch = o->b.batch.n;
    q.seq = o->b.seq;
    q.tps = tps;
    q.ntp = o->tp.n;
    q.eps = eps;
    q.nep = o->ep.n;
    q.reps = reps;
    q.nrep = o->replicate.n;
    q.eplbs = eplbs;
    q.neplb = o->eplb.n;
    q.overlaps = overlaps;
    q.noverlap = o->b.overlap.n;
    q.slo_token_ms = o->slo_token_ms;
    q.slo_layer_us = o->slo_layer_us;
    q.throughput = o->throughput;
    q.gpu_hour_price = o->gpu_hour_price;
    q.max_gpus = o->max_gpus;
    q.iters = o->b.iters;
    q.seed = (unsigned long long)o->b.seed;
    q.context = o->context;
    q.weight_bytes = MP_BF16_BYTES;
    q.kv_bytes = MP_BF16_BYTES;
    q.mem_reserve = o->mem_reserve >= 0 ? o->mem_reserve : q.cluster.mem_reserve;
    q.nonexpert = strcmp(o->nonexpert, "world") == 0 ? MP_NONEXPERT_WORLD : MP_NONEXPERT_TP;
    if ((rc = parse_offload(o->expert_cache, &q)) != MP_OK)
        goto out;
    if (o->b.out) {
        const struct mp_csv_schema *f = &mp_schema_plan;
        const char *cols[MP_SCHEMA_MAX_COLS];
        rc = mp_mkdir_p(o->b.out, "--out");
        if (rc == MP_OK)
            rc = mp_csv_open(&csv, o->b.out, f->file, cols, mp_schema_header(f, cols), 0);
        if (rc != MP_OK)
            goto out;
    }
    const struct mp_model *m = &q.model;
    printf("# moeperf-plan: %s (H %d, D %d, E %d, top-%d, %d shared, %d MoE layers) on %s\n",
           m->name, m->hidden, m->ffn, m->experts, m->topk, m->shared, m->layers, q.cluster.name);
    printf("# SLO: p99 token %s, p99 layer %s; target %.0f tokens/s; at most %d GPUs\n",
           q.slo_token_ms > 0 ? "set" : "none", q.slo_layer_us > 0 ? "set" : "none",
           q.throughput, q.max_gpus);
    if (q.slo_token_ms > 0 || q.slo_layer_us > 0)
        printf("#   token p99 <= %.2f ms, layer p99 <= %.1f us (0 = not bounded)\n",
               q.slo_token_ms, q.slo_layer_us);
    printf("# token_ms: the whole decode step per output token at %ld tokens of context: attention,\n"
           "# dense layers, LM head, small kernels, host and the MoE layers (layers × layer time;\n"
           "# docs/planning.md, \"What a step includes\"); layer_us: one MoE layer%s.\n",
           q.context, o->b.micro_batches.n > 1 || o->b.micro_batches.v[0] > 1
                          ? " (of one micro-batch where two overlap)" : "");
    print_memory_header(&q);
    print_network_header(&q.cluster);
    if (o->b.out && (rc = write_profile(o->b.out, &q.cluster)) != MP_OK)
        goto out;
    if (o->b.out) {
        plan = mp_runjson_new("moeperf-plan", argc, argv);
        if (!plan) {
            rc = MP_ERR_RUNTIME;
            goto out;
        }
        question = question_json(o, &q);
        cJSON_AddItemToObject(plan, "question", question);
        if (o->validation) {
            validation = o->validation;
        } else if (rp_source_root(root, sizeof root) == 0) {
            snprintf(vpath, sizeof vpath, "%s/tests/published/validation.csv", root);
            validation = access(vpath, R_OK) == 0 ? vpath : NULL;
        }
        answers = cJSON_AddArrayToObject(plan, "answers");
    }
    for (int ri = 0; ri < o->b.routing.n; ri++) {
        struct mp_routing rt;
        rc = mp_routing_parse(o->b.routing.v[ri], m->experts, m->topk, (uint64_t)o->b.seed, &rt);
        if (rc != MP_OK)
            goto out;
        q.routing = &rt;
        struct mp_plan_cand *c = NULL;
        int n = 0;
        rc = mp_plan_evaluate(&q, &c, &n);
        if (rc != MP_OK) {
            mp_routing_free(&rt);
            goto out;
        }
        if (csv.f)
            write_plan_csv(o, o->b.routing.v[ri], c, n, &csv);
        printf("\n## routing %s: %d candidates\n", o->b.routing.v[ri], n);
        int best = mp_plan_best(c, n);
        if (answers)
            cJSON_AddItemToArray(answers, mp_plan_answer_json(o->b.routing.v[ri], &q, c, n, best,
                                                      validation,
                                                      cJSON_GetObjectItem(question, "cluster")));
        if (best >= 0) {
            const struct mp_plan_cand *b = &c[best];
            char pl[64];
            mp_plan_remedy(b, pl, sizeof pl);
            printf("cheapest plan: tp%dep%d, %s, batch %ld × %d replica(s) = %d GPUs, "
                   "p99 token %.2f ms, %.0f tokens/s, %.1f GB per GPU (weights %.1f, KV cache "
                   "%.1f)\n",
                   b->tp, b->ep, pl, b->batch, b->dp, b->gpus, b->token_p99_ms,
                   b->replica_tps * b->dp, b->mem.total / 1e9, b->mem.weights / 1e9,
                   b->mem.kv / 1e9);
            long cap = mp_plan_batch_cap(c, n, b);
            if (cap > 0)
                printf("batch cap for tp%dep%d %s: %ld (the largest batch with comm/ffn <= 1)\n",
                       b->tp, b->ep, pl, cap);
            else
                printf("batch cap for tp%dep%d %s: none (network-bound at every batch)\n", b->tp,
                       b->ep, pl);
            print_remedies(c, n, b);
            print_dedup(c, n, b);
            char rvb[256];
            for (int twice = 1; twice >= 0; twice--)
                if (mp_plan_replicas_vs_batch(c, n, best, twice, rvb, sizeof rvb) >= 0)
                    printf("replicas vs batch: %s\n", rvb);
        } else {
            printf("no candidate meets the SLO and fits in memory within %d GPUs\n", q.max_gpus);
        }
        print_dropped(&q, c, n, best);
        /* the ranked table, then the shape of the best layout over batch */
        struct mp_plan_cand *sorted = malloc((size_t)(n > 0 ? n : 1) * sizeof *sorted);
        if (sorted && !o->b.quiet) {
            memcpy(sorted, c, (size_t)n * sizeof *sorted);
            qsort(sorted, (size_t)n, sizeof *sorted, mp_plan_by_cost);
            printf("\nranked (fewest GPUs meeting the SLO first):\n");
            print_cand_header();
            for (int i = 0; i < n && i < 12; i++)
                print_cand(&sorted[i]);
            const struct mp_plan_cand *ref = best >= 0 ? &c[best] : n > 0 ? &c[0] : NULL;
            for (int pass = 0; ref && pass < 2; pass++) {
                /* the chosen setup, then contiguous placement without overlap beside it */
                struct mp_plan_cand like = *ref;
                if (pass == 1) {
                    if (ref->replicate == 0 && ref->eplb == 0 && ref->overlap <= 1 &&
                        ref->dedup == MP_DEDUP_PAIR)
                        break;
                    like.replicate = like.eplb = 0;
                    like.overlap = 1;
                    like.dedup = MP_DEDUP_PAIR;
                }
                char pl[64];
                printf("\ntp%dep%d %s over batch:\n", like.tp, like.ep,
                       mp_plan_remedy(&like, pl, sizeof pl));
                print_cand_header();
                for (int i = 0; i < n; i++)
                    if (mp_plan_same_setup(&c[i], &like))
                        print_cand(&c[i]);
            }
        }
        free(sorted);
        free(c);
        mp_routing_free(&rt);
    }
    if (plan && (rc = mp_json_write(plan, o->b.out, "plan.json")) != MP_OK)
        goto out;
    if (o->b.out)
        printf("\n# every candidate: %s/plan.csv; the question and the answer: %s/plan.json; the "
               "profile assumed: %s/cluster.ini\n", o->b.out, o->b.out, o->b.out);
out:
    cJSON_Delete(plan);
    mp_csv_close(&csv);
    free(tps);
    free(eps);
    free(reps);
    free(eplbs);
    free(overlaps);
    free(dedups);
    free(wdtypes);
    free(micro);
    free(ddtypes);
    free(batches);
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
