/* plan_request.h - moeperf-plan's request: its options, the planner's request built from them and
 * plan.json's question that states both (docs/planning.md, "plan.json"). */
#ifndef MP_PLAN_REQUEST_H
#define MP_PLAN_REQUEST_H

#include <cjson/cJSON.h>

#include "bench_opts.h"
#include "capacity_plan.h"

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
    /* a serving workload (docs/planning.md, "Serving a workload"): requests of isl prompt and
     * osl output tokens at `rate` per second; 0: a decode plan alone */
    int isl, osl;
    char *lengths; /* instead of --isl and --osl: a file of request lengths */
    double rate, slo_ttft_ms;
    struct mp_list prefill_tokens, chunk;
};

/* The heap arrays a request's candidate lists point into; all NULL before plan_req_build. */
struct plan_req_lists {
    int *tps, *eps, *reps, *eplbs, *overlaps, *dedups, *wdtypes, *ddtypes, *micro;
    long *batches, *prefill_tokens, *chunks;
    long *isls, *osls; /* the workload's length classes */
    double *p;
};

/* The request q (zeroed by the caller) of a plan from options o: checks --validation and
 * --cluster, resolves the model and the profile, turns every candidate list into a heap array of
 * *l (freed by plan_req_free, also after an error) and sets the targets, the memory settings and
 * --expert-cache. Returns MP_OK, MP_ERR_USAGE after a message naming the flag, or MP_ERR_RUNTIME
 * (out of memory). */
int plan_req_build(const struct plan_opts *o, struct mp_plan_req *q, struct plan_req_lists *l);

struct mp_serving_req;
/* With a workload (--isl, or --lengths FILE): its request *w from o, its lists in *l (after
 * plan_req_build), and q's decode targets from it: the decode context (isl + osl, or its mean
 * over the output tokens), throughput rate · E[osl]. 1 when there is a workload, 0 when not,
 * −MP_ERR_USAGE after a message naming the file, line and column of a bad --lengths, or
 * −MP_ERR_RUNTIME (out of memory). */
int plan_serving_build(const struct plan_opts *o, struct mp_plan_req *q, struct plan_req_lists *l,
                       struct mp_serving_req *w);

/* plan.json's question's `workload` of w (the mean lengths, the longest prompt, the classes and
 * the file they came from, the rate, the TTFT bound and the prefill lists). */
void plan_workload_json(cJSON *question, const struct plan_opts *o,
                        const struct mp_serving_req *w);

/* With --isl or --lengths, the flags a workload needs (--osl with --isl, --rate) and those it
 * sets itself (--context, --throughput, given on their own), and --lengths with --isl or --osl:
 * MP_OK, or MP_ERR_USAGE after a message naming the flag; without a workload, its other flags
 * given alone are refused likewise. */
int plan_serving_check(const struct plan_opts *o, int argc, char **argv);

/* Frees the arrays of *l (any of them NULL). */
void plan_req_free(struct plan_req_lists *l);

/* plan.json's question: the model (and the flags that overrode its preset), the profile and where
 * it came from, the SLO, the target, the context and every constraint the candidates were drawn
 * from. A new object. */
cJSON *plan_question_json(const struct plan_opts *o, const struct mp_plan_req *q);

#endif
