/* plan_console.h - moeperf-plan's console: the assumptions a plan rests on, printed once, and each
 * routing's plan, remedies, dropped candidates and ranked tables. */
#ifndef MP_PLAN_CONSOLE_H
#define MP_PLAN_CONSOLE_H

#include "capacity_plan.h"

/* The plan's assumptions on stdout, once: the model and profile, the SLO and target, what
 * token_ms and layer_us span (`split`: some candidate runs two micro-batches), the memory per GPU
 * and the network and FFN rates of q's profile. */
void plan_print_header(const struct mp_plan_req *q, int split);

/* The findings of one routing on stdout, among candidates c[0..n) of request q with `best` the
 * cheapest (-1: none meets the SLO and fits): the plan, its batch cap, remedies, dedup modes and
 * replicas against batch, the candidates memory dropped, and unless `quiet` the ranked table and
 * the best layout over batch. */
void plan_print_findings(const struct mp_plan_req *q, const struct mp_plan_cand *c, int n,
                         int best, int quiet);

#endif
