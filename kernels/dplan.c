/* dplan.c - the backend-built dispatch plan on the host (see dplan_host.h): cells from the route
 * table, a stable counting sort by cell, rows from mp_dplan_row. */
#include "dplan_host.h"

#include <stdlib.h>
#include <string.h>

#include "dplan.h"
#include "error.h"
#include "freeall.h"

static int same_shape(const struct mp_dplan_host *p, const struct mp_dplan_shape *s)
{
    const struct mp_dplan_shape *o = &p->s;
    if (!p->totals || o->experts != s->experts || o->K != s->K || o->max_local != s->max_local ||
        o->ncells != s->ncells || o->ntok != s->ntok || o->tok0 != s->tok0 || o->cap != s->cap)
        return 0;
    size_t ncand = (size_t)s->route_off[s->experts];
    return memcmp(p->route_off, s->route_off, ((size_t)s->experts + 1) * sizeof(int32_t)) == 0 &&
           memcmp(p->route_cell, s->route_cell, ncand * sizeof(int32_t)) == 0;
}

int mp_dplan_host_setup(struct mp_dplan_host *p, const struct mp_dplan_shape *s)
{
    if (same_shape(p, s))
        return MP_OK;
    mp_dplan_host_free(p);
    size_t ncand = (size_t)s->route_off[s->experts], pairs = (size_t)(s->ntok > 0 ? s->ntok : 0) * s->K;
    p->rows = s->cap > 0 ? (long)s->ncells * s->cap : (long)pairs;
    p->route_off = malloc(((size_t)s->experts + 1) * sizeof(int32_t));
    p->route_cell = malloc((ncand ? ncand : 1) * sizeof(int32_t));
    p->totals = calloc((size_t)s->ncells, sizeof(int32_t));
    p->cursor = calloc((size_t)s->ncells, sizeof(int32_t));
    p->start = calloc((size_t)s->ncells, sizeof(int32_t));
    p->pair_cell = malloc((pairs ? pairs : 1) * sizeof(int32_t));
    p->src_tok = calloc((size_t)(p->rows > 0 ? p->rows : 1), sizeof(int32_t));
    p->row_w = calloc((size_t)(p->rows > 0 ? p->rows : 1), sizeof(float));
    if (!p->route_off || !p->route_cell || !p->totals || !p->cursor || !p->start || !p->pair_cell ||
        !p->src_tok || !p->row_w) {
        mp_dplan_host_free(p);
        mp_error("out of memory for the dispatch plan (%ld tokens × top-%d, %d cells)", s->ntok,
                 s->K, s->ncells);
        return MP_ERR_RUNTIME;
    }
    memcpy(p->route_off, s->route_off, ((size_t)s->experts + 1) * sizeof(int32_t));
    memcpy(p->route_cell, s->route_cell, ncand * sizeof(int32_t));
    p->s = *s;
    p->s.route_off = p->route_off;
    p->s.route_cell = p->route_cell;
    return MP_OK;
}

void mp_dplan_host_free(struct mp_dplan_host *p)
{
    MP_FREE_ALL(p->route_off, p->route_cell, p->totals, p->cursor, p->start, p->pair_cell,
                p->src_tok, p->row_w);
    memset(p, 0, sizeof *p);
}

void mp_dplan_host_build(struct mp_dplan_host *p, const int32_t *ids, const float *w)
{
    const struct mp_dplan_shape *s = &p->s;
    long npairs = s->ntok * s->K;
    memset(p->totals, 0, (size_t)s->ncells * sizeof(int32_t));
    for (long i = 0; i < npairs; i++) {
        int32_t cell = mp_dplan_cell(s->route_off, s->route_cell, ids[i], s->tok0 + i / s->K);
        p->pair_cell[i] = cell;
        if (cell >= 0)
            p->totals[cell]++;
    }
    long start = 0; /* exclusive prefix sums: where each cell starts in the sorted order */
    for (int c = 0; c < s->ncells; c++) {
        p->start[c] = (int32_t)start;
        p->cursor[c] = (int32_t)start;
        start += p->totals[c];
    }
    if (s->cap > 0) { /* padding rows: token 0, weight 0 */
        memset(p->src_tok, 0, (size_t)p->rows * sizeof(int32_t));
        memset(p->row_w, 0, (size_t)p->rows * sizeof(float));
    }
    p->nrows = s->cap > 0 ? p->rows : start;
    for (long i = 0; i < npairs; i++) { /* stable: token order inside a cell */
        int32_t cell = p->pair_cell[i];
        if (cell < 0)
            continue;
        long row = mp_dplan_row(cell, p->cursor[cell]++, p->start[cell], s->cap, s->max_local);
        if (row < 0)
            continue; /* over the slot's capacity: dropped */
        p->src_tok[row] = (int32_t)(i / s->K);
        p->row_w[row] = w[i];
    }
}
