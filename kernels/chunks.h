/* chunks.h - block row moves (struct mp_chunk) taken as maximal runs, and the lookup of a row in a
 * table of runs that one kernel walks; plain C usable in host and device code. */
#ifndef MP_CHUNKS_H
#define MP_CHUNKS_H

#include <stdint.h>

#include "compute.h" /* struct mp_chunk */
#include "hostdevice.h"

/* The next maximal run of the moves ch[0..nch) from *i on: consecutive chunks that continue one
 * another on both sides (each starts where the previous ends, in src and in dst) form one run, and
 * empty chunks are skipped. Returns 0 when none is left; else fills *run and moves *i past it. A
 * layer's regrouping on one source rank, or a slot layout read in order, is a single run. */
static inline int mp_chunks_next(const struct mp_chunk *ch, int nch, int *i, struct mp_chunk *run)
{
    while (*i < nch && ch[*i].n <= 0)
        (*i)++;
    if (*i >= nch)
        return 0;
    *run = ch[(*i)++];
    while (*i < nch && (ch[*i].n <= 0 || (ch[*i].src == run->src + run->n &&
                                          ch[*i].dst == run->dst + run->n))) {
        if (ch[*i].n > 0)
            run->n += ch[*i].n;
        (*i)++;
    }
    return 1;
}

/* The next table of at most `cap` runs of ch[0..nch) from *i on, for one kernel launch: run c's
 * first source and destination rows in src[c], dst[c], its rows numbered start[c] .. start[c+1]−1
 * in the launch (start[0] = 0; a launch holds fewer than 2^31 rows). Returns the runs filled, 0
 * when none is left, and moves *i past them. */
static inline int mp_chunks_table(const struct mp_chunk *ch, int nch, int *i, int cap,
                                  int32_t *start, int32_t *src, int32_t *dst)
{
    int n = 0;
    start[0] = 0;
    while (n < cap) {
        int at = *i;
        struct mp_chunk run;
        if (!mp_chunks_next(ch, nch, i, &run))
            break;
        if (n > 0 && (long)start[n] + run.n > INT32_MAX) { /* the next launch takes it */
            *i = at;
            break;
        }
        src[n] = (int32_t)run.src;
        dst[n] = (int32_t)run.dst;
        start[n + 1] = (int32_t)(start[n] + run.n);
        n++;
    }
    return n;
}

/* The run c of a table of `n` ≥ 1 runs whose rows are numbered one after another (run c holds rows
 * start[c] .. start[c+1]−1, start[0] = 0) that holds row r < start[n]: a binary search. */
static inline MP_HD int mp_chunk_find(const int32_t *start, int n, int32_t r)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (start[mid] <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

#endif
