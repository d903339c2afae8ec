/* a2acounts.c - the per-peer counts and displacements of moeperf-a2a's exchanges, in rows. */
#include "a2acounts.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "error.h"

void mp_a2a_counts_free(struct mp_a2a_counts *c)
{
    free(c->scount);
    free(c->sdispl);
    free(c->rcount);
    free(c->rdispl);
    memset(c, 0, sizeof *c);
}

int mp_a2a_counts_alloc(struct mp_a2a_counts *c, int ndraws, int nchunks, int ep)
{
    size_t n = (size_t)ndraws * (size_t)nchunks * (size_t)ep;
    c->ndraws = ndraws;
    c->nchunks = nchunks;
    c->ep = ep;
    c->scount = calloc(n, sizeof(int));
    c->sdispl = calloc(n, sizeof(int));
    c->rcount = calloc(n, sizeof(int));
    c->rdispl = calloc(n, sizeof(int));
    if (!c->scount || !c->sdispl || !c->rcount || !c->rdispl) {
        mp_a2a_counts_free(c);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

int mp_a2a_counts_uniform(struct mp_a2a_counts *c, int ep, long long bytes_per_peer)
{
    if (mp_a2a_counts_alloc(c, 1, 1, ep) != MP_OK)
        return MP_ERR_RUNTIME;
    c->row_bytes = (size_t)bytes_per_peer; /* one row per peer: counts 1, displacements p */
    for (int p = 0; p < ep; p++) {
        c->scount[p] = c->rcount[p] = 1;
        c->sdispl[p] = c->rdispl[p] = p;
    }
    c->bytes_per_rank = (double)bytes_per_peer * ep;
    return MP_OK;
}

size_t mp_a2a_offset(const int *displ, int p, size_t row_bytes)
{
    return (size_t)displ[p] * row_bytes;
}

size_t mp_a2a_max_row_bytes(const struct mp_comm_ops *comm)
{
    return comm->max_row_bytes;
}

int mp_a2a_moe_fits(long long tokens, int topk, size_t row_bytes, size_t *bytes)
{
    if (tokens < 0 || topk < 1 || tokens > INT_MAX / topk)
        return 0;
    size_t rows = (size_t)tokens * (size_t)topk;
    if (row_bytes > 0 && rows > SIZE_MAX / row_bytes)
        return 0;
    *bytes = rows * row_bytes;
    return 1;
}
