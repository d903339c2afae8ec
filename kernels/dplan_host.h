/* dplan_host.h - the dispatch plan a backend builds itself, built on the host: the cpu backend's
 * plan, and the reference the cuda backend's kernels are checked against. */
#ifndef MP_DPLAN_HOST_H
#define MP_DPLAN_HOST_H

#include <stdint.h>

#include "compute.h"

struct mp_dplan_host {
    struct mp_dplan_shape s; /* route_off/route_cell point at the copies below */
    int32_t *route_off, *route_cell;
    int32_t *totals;    /* [ncells] pairs per cell of the last build */
    int32_t *start;     /* [ncells] where each cell starts in the sorted order */
    int32_t *cursor;    /* [ncells] scratch */
    int32_t *pair_cell; /* [ntok·K] scratch */
    long rows;          /* send rows: ntok·K (dynamic) or ncells·cap (padded) */
    long nrows;         /* rows of the last build: the pairs sent (dynamic) or `rows` (padded) */
    int32_t *src_tok;   /* [rows] local token of each send row (padding: 0) */
    float *row_w;       /* [rows] its routing weight (padding: 0) */
};

/* Size for shape `s` (copies its route table). Returns MP_OK or MP_ERR_RUNTIME (out of memory);
 * an unchanged shape reuses what is allocated. */
int mp_dplan_host_setup(struct mp_dplan_host *p, const struct mp_dplan_shape *s);
void mp_dplan_host_free(struct mp_dplan_host *p);

/* Sort this iteration's pairs (ids/w [ntok·K]) stably by cell into src_tok/row_w and totals:
 * a counting sort, then mp_dplan_row places each pair. */
void mp_dplan_host_build(struct mp_dplan_host *p, const int32_t *ids, const float *w);

#endif
