/* report_plan.h - moeperf-report's view of a capacity plan: plan.json's answer (the cheapest plan
 * per routing, its step's parts as a stacked bar, the alternatives, the sensitivity and how far to
 * trust it) and plan.csv's candidates beside the chosen one. */
#ifndef MP_REPORT_PLAN_H
#define MP_REPORT_PLAN_H

#include "report.h"
#include "report_doc.h"

/* "The answer": every run directory's plan.json, the question and per routing the cheapest plan,
 * in words and as a table, with its step (docs/planning.md, "What a step includes"). */
void write_answer(struct doc *d, const struct rp_run *runs, int nruns);

/* "Capacity plan": per run directory and routing, plan.csv's chosen candidate, its setup at half
 * and twice the batch, and the cheapest ones dropped for memory. */
void write_plan_tables(struct doc *d, const struct rp_run *runs, int nruns);

#endif
