/* binding.h - whether the ranks of a run share CPUs: the check behind the one-line binding
 * warning and run.json's binding_warning. */
#ifndef MP_BINDING_H
#define MP_BINDING_H

#include <stddef.h>

/* One rank's placement as run.json records it: its host, the CPUs it may run on (an hwloc list
 * string of OS indexes, "0-3,8"; "" unknown) and whether it was bound (1), not (0), unknown (-1). */
struct mp_binding_rank {
    const char *host, *cpus;
    int bound;
};

/* The first way the ranks share CPUs, as one sentence into why[len] (naming the host, the ranks'
 * count, the CPUs and what to do about it); returns 1, or 0 with why empty when none does:
 *   - more ranks than CPUs among a rank and those of its host whose CPUs intersect its own (two
 *     ranks bound to one core, or unbound ranks oversubscribing the host; ranks bound together
 *     to a NUMA node with a CPU or more each are fine);
 *   - with `helper_threads` (NCCL's proxy thread beside each rank), a rank bound to one CPU.
 * Ranks whose CPUs are unknown or unreadable are left out. */
int mp_binding_problem(const struct mp_binding_rank *r, int n, int helper_threads, char *why,
                       size_t len);

#endif
