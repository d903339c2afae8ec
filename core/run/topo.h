/* topo.h - a summary of this host's hardware (sockets, cores, NUMA, memory, NICs, GPUs) for run.json. */
#ifndef MP_TOPO_H
#define MP_TOPO_H

#include "config.h"

#if HAVE_HWLOC
#include <hwloc.h>

/* This host's hwloc topology with its important I/O devices (PCI devices, NICs, GPUs), loaded on
 * first use and kept for the life of the process. Main thread only. NULL on failure, with *why
 * saying what failed. */
hwloc_topology_t mp_host_topology(const char **why);
#endif

struct cJSON;

/* A JSON object describing this host from hwloc: {"hwloc": version, "packages", "cores", "pus",
 * "numa_nodes", "memory_bytes", "nics": [names], "gpus": [names]}; {"hwloc": null} without hwloc. */
struct cJSON *mp_topo_summary(void);

/* Bytes of memory available to a new allocation on this host (MemAvailable), or -1 if unknown. */
long long mp_mem_available(void);

/* The bytes one rank may allocate: `max_memory` (--max-memory) when > 0, else 90% of this host's
 * available memory shared by its `local_ranks` ranks; a negative value when unknown. */
double mp_memory_budget(long long max_memory, int local_ranks);

#endif
