/* plan_answer.h - plan.json's answer of a capacity plan: what moeperf-plan writes per routing
 * beside its console (docs/planning.md, "moeperf-plan"). */
#ifndef MP_PLAN_ANSWER_H
#define MP_PLAN_ANSWER_H

#include <cjson/cJSON.h>

#include "capacity_plan.h"

/* The answer for `routing` among candidates c[0..n) of request q, best its cheapest (-1: none):
 * its layout, setup, batch, replicas, GPUs, the whole step's times and parts, tokens/s per GPU and
 * cost, memory, batch cap, SLO headroom, alternatives, sensitivity, plans per remedy, trust (from
 * `validation`, ci/validate's table, and the profile `cluster` as plan.json states it) and
 * replicas against batch. A new object. */
cJSON *mp_plan_answer_json(const char *routing, const struct mp_plan_req *q,
                           const struct mp_plan_cand *c, int n, int best, const char *validation,
                           const cJSON *cluster);

/* Replicas against batch for plan `best`: its setup at twice (`twice`) or half the batch, in words
 * as the console and plan.json state it (into out). Returns that candidate's index, or -1 when
 * the sweep has no such batch. */
int mp_plan_replicas_vs_batch(const struct mp_plan_cand *c, int n, int best, int twice, char *out,
                              size_t size);

/* qsort order of candidates (struct mp_plan_cand): meeting the SLO first, then fewest GPUs, then
 * the lowest p99 token time. */
int mp_plan_by_cost(const void *pa, const void *pb);

/* `v` into o under `key`, or null where v is 0 or not a number (no bound given). */
void mp_plan_json_bound(cJSON *o, const char *key, double v);

#endif
