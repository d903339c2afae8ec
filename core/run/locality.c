/* locality.c - per-rank placement facts from hwloc and binding near the GPU (see locality.h). */
#include "locality.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "topo.h"

/* Copy `src` into dst[len], or leave dst empty when it does not fit (absent rather than cut). */
static void put_text(char *dst, size_t len, const char *src)
{
    dst[0] = '\0';
    if (src && strlen(src) < len)
        strcpy(dst, src);
}

static void add_text_or_null(cJSON *o, const char *key, const char *text)
{
    if (text[0])
        cJSON_AddStringToObject(o, key, text);
    else
        cJSON_AddNullToObject(o, key);
}

void mp_locality_json(const struct mp_locality *l, cJSON *rank)
{
    add_text_or_null(rank, "cpu_bind", l->cpu_bind);
    if (l->bound < 0)
        cJSON_AddNullToObject(rank, "cpu_bound");
    else
        cJSON_AddBoolToObject(rank, "cpu_bound", l->bound);
    add_text_or_null(rank, "numa", l->numa);
    add_text_or_null(rank, "numa_from", l->numa[0] ? l->numa_from : "");
    add_text_or_null(rank, "gpu_pci", l->gpu_pci);
    add_text_or_null(rank, "gpu_numa", l->gpu_numa);
    cJSON *nics = NULL;
    if (l->nics[0]) {
        nics = cJSON_CreateArray();
        char buf[sizeof l->nics];
        strcpy(buf, l->nics);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
            cJSON_AddItemToArray(nics, cJSON_CreateString(t));
    }
    cJSON_AddItemToObject(rank, "nics", nics ? nics : cJSON_CreateNull());
    add_text_or_null(rank, "nics_near", l->nics[0] ? l->nics_near : "");
}

#if HAVE_HWLOC

/* A bitmap as an hwloc list string into buf[len]; empty when it does not fit or is empty. */
static void list_text(hwloc_const_bitmap_t set, char *buf, size_t len)
{
    buf[0] = '\0';
    if (hwloc_bitmap_iszero(set))
        return;
    int n = hwloc_bitmap_list_snprintf(buf, len, set);
    if (n < 0 || (size_t)n >= len)
        buf[0] = '\0';
}

static int is_nic(hwloc_obj_t o)
{
    return o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS ||
           o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK;
}

/* A network interface whose PCI device also carries an OPENFABRICS device (ib0 beside mlx5_0). */
static int shadowed_netdev(hwloc_obj_t o)
{
    if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK || !o->parent)
        return 0;
    for (hwloc_obj_t s = o->parent->io_first_child; s; s = s->next_sibling)
        if (s->type == HWLOC_OBJ_OS_DEVICE && s->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)
            return 1;
    return 0;
}

#define MAX_CHAIN 128

/* Index in chain[0..n) of the first ancestor of `o` (or `o`) that is in it; -1 if none. */
static int meeting_level(hwloc_obj_t o, hwloc_obj_t *chain, int n)
{
    for (; o; o = o->parent)
        for (int i = 0; i < n; i++)
            if (chain[i] == o)
                return i;
    return -1;
}

void mp_nearest_nics(hwloc_topology_t topo, hwloc_obj_t anchor, char *nics, size_t len)
{
    nics[0] = '\0';
    hwloc_obj_t chain[MAX_CHAIN];
    int n = 0;
    for (hwloc_obj_t o = anchor; o && n < MAX_CHAIN; o = o->parent)
        chain[n++] = o;
    int best = -1;
    for (hwloc_obj_t o = hwloc_get_next_osdev(topo, NULL); o; o = hwloc_get_next_osdev(topo, o)) {
        if (!is_nic(o) || shadowed_netdev(o))
            continue;
        int lv = meeting_level(o, chain, n);
        if (lv >= 0 && (best < 0 || lv < best))
            best = lv;
    }
    if (best < 0)
        return;
    hwloc_obj_t root = hwloc_get_root_obj(topo);
    hwloc_obj_t attached = hwloc_obj_type_is_io(anchor->type)
                               ? hwloc_get_non_io_ancestor_obj(topo, anchor) : anchor;
    if (chain[best] == root && attached == root &&
        hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE) > 1)
        return; /* the anchor's place is unknown: every NIC would look as near */
    size_t used = 0;
    for (hwloc_obj_t o = hwloc_get_next_osdev(topo, NULL); o; o = hwloc_get_next_osdev(topo, o)) {
        if (!is_nic(o) || shadowed_netdev(o) || !o->name || meeting_level(o, chain, n) != best)
            continue;
        int w = snprintf(nics + used, len - used, "%s%s", used ? "," : "", o->name);
        if (w < 0 || (size_t)w >= len - used) {
            nics[0] = '\0'; /* absent rather than cut */
            return;
        }
        used += (size_t)w;
    }
}

int mp_pci_locality(hwloc_topology_t topo, const char *busid, hwloc_bitmap_t cpus, char *numa,
                    size_t numa_len, char *nics, size_t nics_len)
{
    numa[0] = nics[0] = '\0';
    hwloc_bitmap_zero(cpus);
    hwloc_obj_t dev = busid ? hwloc_get_pcidev_by_busidstring(topo, busid) : NULL;
    if (!dev)
        return -1;
    hwloc_obj_t attached = hwloc_get_non_io_ancestor_obj(topo, dev);
    int known = attached && (attached != hwloc_get_root_obj(topo) ||
                             hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE) <= 1);
    if (known && attached->nodeset && !hwloc_bitmap_iszero(attached->nodeset)) {
        list_text(attached->nodeset, numa, numa_len);
        hwloc_cpuset_from_nodeset(topo, cpus, attached->nodeset);
    }
    mp_nearest_nics(topo, dev, nics, nics_len);
    return 0;
}

void mp_cpuset_nics(hwloc_topology_t topo, hwloc_const_cpuset_t cpus, char *nics, size_t len)
{
    nics[0] = '\0';
    hwloc_bitmap_t in = hwloc_bitmap_alloc();
    if (!in)
        return;
    hwloc_bitmap_and(in, cpus, hwloc_topology_get_topology_cpuset(topo));
    hwloc_obj_t o = hwloc_bitmap_iszero(in) ? NULL : hwloc_get_obj_covering_cpuset(topo, in);
    if (o)
        mp_nearest_nics(topo, o, nics, len);
    hwloc_bitmap_free(in);
}

/* Is `set` all the CPUs this process may use (no binding by the launcher)? */
static int covers_allowed(hwloc_topology_t topo, hwloc_const_cpuset_t set)
{
    return hwloc_bitmap_isincluded(hwloc_topology_get_allowed_cpuset(topo), set);
}

void mp_cpu_bind_apply(const char *policy, const char *gpu_pci, char *bound_to, size_t len)
{
    bound_to[0] = '\0';
    int want_gpu = policy && strcmp(policy, "gpu") == 0;
    int want_auto = policy && strcmp(policy, "auto") == 0;
    if ((!want_gpu && !want_auto) || !gpu_pci)
        return; /* none, or no GPU to be near (auto on the cpu backend) */
    const char *why;
    hwloc_topology_t topo = mp_host_topology(&why);
    if (!topo) {
        if (want_gpu)
            mp_warn("--cpu-bind gpu: binding left as the launcher set it: %s", why);
        return;
    }
    hwloc_bitmap_t now = hwloc_bitmap_alloc(), near = hwloc_bitmap_alloc();
    if (!now || !near)
        goto out;
    if (want_auto && hwloc_get_cpubind(topo, now, HWLOC_CPUBIND_PROCESS) == 0 &&
        !covers_allowed(topo, now))
        goto out; /* the launcher bound this rank: keep its choice */
    char numa[128], nics[512];
    if (mp_pci_locality(topo, gpu_pci, near, numa, sizeof numa, nics, sizeof nics) != 0) {
        mp_warn("--cpu-bind %s: hwloc does not list the GPU at PCI %s (is libhwloc-plugins "
                "installed?); binding left as the launcher set it", policy, gpu_pci);
        goto out;
    }
    hwloc_bitmap_and(near, near, hwloc_topology_get_allowed_cpuset(topo));
    if (hwloc_bitmap_iszero(near)) {
        mp_warn("--cpu-bind %s: hwloc does not know the NUMA node of the GPU at PCI %s (or may "
                "not use its CPUs); binding left as the launcher set it", policy, gpu_pci);
        goto out;
    }
    if (hwloc_set_cpubind(topo, near, HWLOC_CPUBIND_PROCESS) != 0) {
        mp_warn("--cpu-bind %s: binding to CPUs near the GPU at PCI %s failed: %s", policy,
                gpu_pci, strerror(errno));
        goto out;
    }
    list_text(near, bound_to, len);
out:
    hwloc_bitmap_free(now);
    hwloc_bitmap_free(near);
}

void mp_locality_read(struct mp_locality *l, const char *gpu_pci)
{
    memset(l, 0, sizeof *l);
    l->bound = -1;
    put_text(l->gpu_pci, sizeof l->gpu_pci, gpu_pci);
    put_text(l->nics_near, sizeof l->nics_near, gpu_pci ? "gpu" : "cpu");
    const char *why;
    hwloc_topology_t topo = mp_host_topology(&why);
    if (!topo)
        return;
    hwloc_bitmap_t set = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc(),
                   scratch = hwloc_bitmap_alloc();
    if (!set || !nodes || !scratch)
        goto out;
    int have_set = hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0;
    if (have_set) {
        list_text(set, l->cpu_bind, sizeof l->cpu_bind);
        l->bound = !covers_allowed(topo, set);
    }
    if (l->bound == 1) {
        hwloc_cpuset_to_nodeset(topo, set, nodes);
        put_text(l->numa_from, sizeof l->numa_from, "binding");
        list_text(nodes, l->numa, sizeof l->numa);
    } else if (hwloc_get_last_cpu_location(topo, scratch, HWLOC_CPUBIND_THREAD) == 0) {
        hwloc_cpuset_to_nodeset(topo, scratch, nodes);
        put_text(l->numa_from, sizeof l->numa_from, "last_cpu");
        list_text(nodes, l->numa, sizeof l->numa);
    }
    if (gpu_pci)
        mp_pci_locality(topo, gpu_pci, scratch, l->gpu_numa, sizeof l->gpu_numa, l->nics,
                        sizeof l->nics);
    else if (have_set)
        mp_cpuset_nics(topo, set, l->nics, sizeof l->nics);
out:
    hwloc_bitmap_free(set);
    hwloc_bitmap_free(nodes);
    hwloc_bitmap_free(scratch);
}

#else

void mp_cpu_bind_apply(const char *policy, const char *gpu_pci, char *bound_to, size_t len)
{
    bound_to[0] = '\0';
    if (policy && strcmp(policy, "gpu") == 0 && gpu_pci)
        mp_warn("--cpu-bind gpu: built without hwloc; binding left as the launcher set it");
}

void mp_locality_read(struct mp_locality *l, const char *gpu_pci)
{
    memset(l, 0, sizeof *l);
    l->bound = -1;
    put_text(l->gpu_pci, sizeof l->gpu_pci, gpu_pci);
}

#endif
