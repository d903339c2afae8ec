/* report_groups.h - moeperf-report's curves of a2a.csv and ffn.csv: the rows of every run grouped
 * by the cells their figure groups by, sorted along the x axis and labelled as plots/render labels
 * them (docs/plots.md, "Curve labels"). */
#ifndef MP_REPORT_GROUPS_H
#define MP_REPORT_GROUPS_H

#include "report_findings.h"

#define MAX_GROUP_COLS 32 /* a figure's group and extra columns together */

/* Rows of the a2a (which = 1) or ffn (which = 2) table of runs[0..nruns), grouped by the cells of
 * cols[0..ncols) ("source" first; a column a file lacks counts as empty), each group sorted by
 * `xcol` and labelled (cols[1..nbare] bare, the others as name=value): a heap array into *out of
 * *nout groups. MP_OK, or MP_ERR_RUNTIME after a message (out of memory). */
int make_groups(const struct rp_run *runs, int nruns, int which, const char *const *cols,
                int ncols, int nbare, const char *xcol, struct group **out, int *nout);

/* Frees groups g[0..n) and the array (g may be NULL). */
void groups_free(struct group *g, int n);

#endif
