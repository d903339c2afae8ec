/* report_serving.h - moeperf-report's view of a serving workload's answer (plan.json's `serving`,
 * docs/planning.md "Serving a workload"): the pools as a table, the KV transfer and a figure of
 * the P:D split against the input/output ratio. */
#ifndef MP_REPORT_SERVING_H
#define MP_REPORT_SERVING_H

#include <cjson/cJSON.h>

#include "report_doc.h"

/* Per answer with a `serving` member (a question with a `workload`): the workload in a sentence,
 * the answer (disaggregated, co-located or none and why), a row per pool, the KV transfer and the
 * split figure. Nothing for a plan.json without a workload. */
void write_serving(struct doc *d, const cJSON *question, const cJSON *answers);

#endif
