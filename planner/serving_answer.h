/* serving_answer.h - a serving workload's answer (serving_plan.h) on the console and as
 * plan.json's `serving` member (docs/planning.md, "Serving a workload"). */
#ifndef MP_SERVING_ANSWER_H
#define MP_SERVING_ANSWER_H

#include <cjson/cJSON.h>

#include "serving_plan.h"

/* plan.json's `serving` object of answer a to workload w under request q (the decode request):
 * the choice (and why none), the GPUs, TTFT, p99 token time, output tokens/s per GPU and cost,
 * each pool, the KV transfer, the co-located pool and the P:D split curve. A new object. */
cJSON *mp_serving_json(const struct mp_plan_req *q, const struct mp_serving_req *w,
                       const struct mp_serving_answer *a);

/* The answer's lines on the console. */
void mp_serving_print(const struct mp_plan_req *q, const struct mp_serving_req *w,
                      const struct mp_serving_answer *a);

#endif
