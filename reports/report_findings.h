/* report_findings.h - moeperf-report's findings and the data they read beside the layer curves:
 * the All-to-All's and the FFN's groups of rows and the published reference table. */
#ifndef MP_REPORT_FINDINGS_H
#define MP_REPORT_FINDINGS_H

#include "report.h"
#include "report_doc.h"

/* Latency that grows with a log-log slope above this is "faster than batch"; the 10 % margin keeps
 * a single noisy median from making a knee. */
#define KNEE_SLOPE 1.1

/* One curve of a2a.csv or ffn.csv rows: its run, its file, its label and whole workload, and its
 * rows. */
struct group {
    const struct rp_run *run;
    const struct mp_table *t;
    char *label;
    char *workload; /* every grouping cell but source, name=value (the legend's) */
    int n;
    long *rows; /* sorted by the x column */
};

/* The published reference table overlaid on the figures and set beside the findings. */
struct reference {
    char *path, *label;
    char *match; /* its "# match:" words, KEY=VALUE of layer.csv key columns; NULL: any run */
    struct mp_table t;
    int n;
    double *batch, *ratio, *lat, *bubble; /* lat: layer_us, else ffn_us + comm_us */
};

/* "Findings": where each configuration stops scaling (the headline, the table of curves with the
 * reference's row, the All-to-All and the FFN alone), what hot experts cost, who the others wait
 * for, which remedy pays, how close the model is to the measurements, and the whole decode step.
 * MP_OK or MP_ERR_RUNTIME (out of memory). */
int write_findings(struct doc *d, struct rp_series *s, int ns, const struct reference *ref,
                   struct group *a2a, int na2a, struct group *ffn, int nffn);

#endif
