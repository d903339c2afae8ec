/* memguard.h - the collective memory check: do a rank's new buffers fit where they will live (its
 * GPU's free memory, or its share of the host's) on every rank? */
#ifndef MP_MEMGUARD_H
#define MP_MEMGUARD_H

#include "comm.h"
#include "compute.h"

/* What the worst rank (the largest need / budget) reported. */
struct mp_mem_verdict {
    double need;       /* bytes it needs */
    double free_bytes; /* bytes free where its buffers live (GPU or host), −1 when unknown */
    double budget;     /* bytes it may use: --max-memory, or 90% of free_bytes (a share per rank
                        * on a host) */
    int rank;          /* world rank */
    char host[64];
    const char *source; /* what the budget is, for the message */
};

/* The bytes this rank may allocate: `max_memory` (--max-memory) when > 0; else 90% of its
 * device's free memory (ops->mem_info, cudaMemGetInfo); else 90% of the host's available memory
 * shared by its `local_size` ranks (mp_memory_budget). *free_bytes gets the free memory it read
 * (−1 when unknown or not read); *source names the choice. Negative when unknown. */
double mp_rank_memory_budget(const struct mp_compute_ops *ops, struct mp_compute *dev,
                             long long max_memory, int local_size, double *free_bytes,
                             const char **source);

/* Collective over the world: 1 when `need` bytes fit in every rank's budget (an unknown budget
 * fits), 0 when some rank's do not, with *v describing the worst rank on rank 0 (the rank that
 * prints usage errors); a negative status when an exchange failed. Every rank returns the same. */
int mp_memory_agree(struct mp_comm *c, const struct mp_compute_ops *ops, struct mp_compute *dev,
                    long long max_memory, double need, struct mp_mem_verdict *v);

#endif
