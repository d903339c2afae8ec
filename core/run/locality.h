/* locality.h - where a rank runs in its host (CPU binding, NUMA node, its GPU's NUMA node and the
 * nearest NICs, from hwloc), and binding a rank to the CPUs near its GPU (--cpu-bind). */
#ifndef MP_LOCALITY_H
#define MP_LOCALITY_H

#include <stddef.h>

#include "config.h"

struct cJSON;

/* One rank's placement facts, plain text so it can be gathered as bytes. An empty string is a
 * fact hwloc could not tell (null in run.json). Lists are hwloc list strings ("0-7,16-23"). */
struct mp_locality {
    int bound;              /* 1: on fewer CPUs than the process may use; 0: not; -1: unknown */
    char cpu_bind[512];     /* the CPUs the rank may run on (OS indexes) */
    char numa[128];         /* NUMA node(s) of the binding; of the last CPU used when unbound */
    char numa_from[16];     /* "binding" or "last_cpu" */
    char gpu_pci[32];       /* the GPU's PCI bus id ("" without a GPU) */
    char gpu_numa[128];     /* NUMA node(s) local to the GPU */
    char nics[512];         /* nearest NICs, comma-separated: to the GPU, or to the CPU binding */
    char nics_near[8];      /* "gpu" or "cpu" */
};

/* Bind this process per `policy`, a --cpu-bind value: "gpu" binds to the CPUs of the GPU's NUMA
 * node(s); "auto" does so only when the launcher left the process unbound; "none" does nothing;
 * a rank without a GPU is never moved. `gpu_pci` is the PCI bus id of the
 * rank's GPU (NULL without one). A binding that cannot be made is a warning, not an error: the
 * facts in run.json show what the rank ran on. *bound_to receives the CPU list bound to ("" when
 * the binding was left alone). */
void mp_cpu_bind_apply(const char *policy, const char *gpu_pci, char *bound_to, size_t len);

/* This process's facts now (call after mp_cpu_bind_apply). `gpu_pci` as above. */
void mp_locality_read(struct mp_locality *l, const char *gpu_pci);

/* Add the facts to a run.json rank object: cpu_bind, cpu_bound, numa, numa_from, gpu_pci,
 * gpu_numa, nics, nics_near; unknown facts as null. */
void mp_locality_json(const struct mp_locality *l, struct cJSON *rank);

#if HAVE_HWLOC
#include <hwloc.h>

/* The locality of the PCI device `busid` ("0000:17:00.0" or "17:00.0") in `topo`: the NUMA node(s)
 * it is attached to as a list into numa[len] and their CPUs into `cpus`, and the nearest NICs into
 * nics[nics_len] (see mp_nearest_nics). Returns 0; -1 when the device is not in the topology
 * (everything left empty). A device whose attachment hwloc does not know (it hangs from the whole
 * machine on a multi-node host) leaves numa and cpus empty. */
int mp_pci_locality(hwloc_topology_t topo, const char *busid, hwloc_bitmap_t cpus, char *numa,
                    size_t numa_len, char *nics, size_t nics_len);

/* The NICs nearest the object `anchor` (a PCI device or a CPU-side object): the OPENFABRICS and
 * NETWORK OS devices whose lowest common ancestor with `anchor` is the deepest, as comma-separated
 * names into nics[len] (a network interface is left out when an OPENFABRICS device shares its PCI
 * device: mlx5_0, not also ib0). Left empty when there are none, and when the only common ancestor
 * is the whole machine on a host with several NUMA nodes and `anchor` is itself attached to the
 * whole machine (its locality is unknown). */
void mp_nearest_nics(hwloc_topology_t topo, hwloc_obj_t anchor, char *nics, size_t len);

/* The NICs nearest a CPU set: mp_nearest_nics from the smallest object covering `cpus`. */
void mp_cpuset_nics(hwloc_topology_t topo, hwloc_const_cpuset_t cpus, char *nics, size_t len);
#endif

#endif
