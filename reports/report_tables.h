/* report_tables.h - moeperf-report's tables, each a section of the document: the legend of the
 * curves, the layer's and the whole step's medians and p99, the bubble, the projection beside a
 * measurement, the All-to-All's and the FFN's, and the environment of every run. */
#ifndef MP_REPORT_TABLES_H
#define MP_REPORT_TABLES_H

#include "report_findings.h"

/* The curves' legend (docs/plots.md, "Curve labels"): each label of the figures and findings, its
 * run directory and its whole workload, the layer curves, then the All-to-All's and the FFN's. */
void write_legend(struct doc *d, const struct rp_series *s, int ns, const struct group *a2a,
                  int na2a, const struct group *ffn, int nffn);

/* Each layer curve's medians and p99 per batch (scope: one MoE layer). */
void write_layer_tables(struct doc *d, const struct rp_series *s, int ns);

/* The whole decode step of each model curve: the step and its parts per batch (scope: every layer
 * of the model, docs/planning.md "What a step includes"). */
void write_step_tables(struct doc *d, const struct rp_series *s, int ns);

/* The bubble of every curve at each batch, the reference's beside them. MP_OK or MP_ERR_RUNTIME
 * (out of memory). */
int write_bubble_table(struct doc *d, const struct rp_series *s, int ns,
                       const struct reference *ref);

/* The model's projection beside the measurement, batch by batch. */
void write_projection_tables(struct doc *d, const struct rp_series *s, int ns);

/* The isolated All-to-All's and the expert FFN's medians and p99, a table per group. */
void write_a2a_tables(struct doc *d, const struct group *g, int n);
void write_ffn_tables(struct doc *d, const struct group *g, int n);

/* "Environment": each run directory's run.json, its tool, build, hosts, ranks and libraries. */
void write_environment(struct doc *d, const struct rp_run *runs, int nruns);

/* How many per-rank timelines plots/render drew into `dir` (timeline-1.svg, timeline-2.svg, ...). */
int timeline_count(const char *dir);

/* The per-rank timelines plots/render drew into `figdir` (docs/plots.md, "Per-rank timeline"):
 * inlined in the HTML, linked from the Markdown as `md_plots_rel`/timeline-K.svg. MP_OK, or
 * MP_ERR_RUNTIME when one cannot be read or holds no <svg> element. */
int write_timelines(struct doc *d, const char *figdir, const char *md_plots_rel);

#endif
