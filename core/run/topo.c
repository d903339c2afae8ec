/* topo.c - this host's hardware summary from hwloc for run.json, and the memory a run may still
 * use. */
#include "topo.h"

#include "config.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#if HAVE_HWLOC
#include <hwloc.h>

/* Names of the OS devices (NICs, GPUs, ...) whose osdev type is one of `t1`, `t2`. */
static cJSON *osdev_names(hwloc_topology_t topo, hwloc_obj_osdev_type_t t1,
                          hwloc_obj_osdev_type_t t2)
{
    cJSON *a = cJSON_CreateArray();
    if (!a)
        return NULL;
    for (hwloc_obj_t o = hwloc_get_next_osdev(topo, NULL); o; o = hwloc_get_next_osdev(topo, o)) {
        if (!o->attr || !o->name)
            continue;
        hwloc_obj_osdev_type_t t = o->attr->osdev.type;
        if (t == t1 || t == t2)
            cJSON_AddItemToArray(a, cJSON_CreateString(o->name));
    }
    return a;
}

static int count_type(hwloc_topology_t topo, hwloc_obj_type_t type)
{
    int n = hwloc_get_nbobjs_by_type(topo, type);
    return n < 0 ? 0 : n;
}

/* Destroying the last topology makes hwloc unload its PCI plugin, after which the
 * state libpciaccess still holds is reported as leaked by LeakSanitizer in every binary; keeping
 * it also makes later calls cheap. */
hwloc_topology_t mp_host_topology(const char **why)
{
    static hwloc_topology_t topo;
    static const char *failed;
    if (topo || failed) {
        *why = failed;
        return topo;
    }
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0) {
        *why = failed = "hwloc_topology_init failed";
        return NULL;
    }
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        *why = failed = "hwloc_topology_load failed";
        return NULL;
    }
    topo = t;
    *why = NULL;
    return topo;
}

struct cJSON *mp_topo_summary(void)
{
    char ver[32];
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    /* HWLOC_API_VERSION is hex: major << 16 | minor << 8 | revision (0x00020800 is 2.8.0). */
    unsigned v = HWLOC_API_VERSION;
    snprintf(ver, sizeof ver, "%u.%u.%u", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff);
    cJSON_AddItemToObject(j, "hwloc", cJSON_CreateString(ver));

    const char *why;
    hwloc_topology_t topo = mp_host_topology(&why);
    if (!topo) {
        cJSON_AddItemToObject(j, "error", cJSON_CreateString(why));
        return j;
    }
    hwloc_obj_t root = hwloc_get_root_obj(topo);
    const char *model = root ? hwloc_obj_get_info_by_name(root, "CPUModel") : NULL;
    if (!model) { /* hwloc 2 attaches it to the packages */
        hwloc_obj_t pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
        model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
    }
    if (model)
        cJSON_AddItemToObject(j, "cpu_model", cJSON_CreateString(model));
    cJSON_AddItemToObject(j, "packages", cJSON_CreateNumber(count_type(topo, HWLOC_OBJ_PACKAGE)));
    cJSON_AddItemToObject(j, "cores", cJSON_CreateNumber(count_type(topo, HWLOC_OBJ_CORE)));
    cJSON_AddItemToObject(j, "pus", cJSON_CreateNumber(count_type(topo, HWLOC_OBJ_PU)));
    cJSON_AddItemToObject(j, "numa_nodes",
                          cJSON_CreateNumber(count_type(topo, HWLOC_OBJ_NUMANODE)));
    double mem = root ? (double)root->total_memory : 0;
    cJSON_AddItemToObject(j, "memory_bytes", cJSON_CreateNumber(mem));
    cJSON *nics = osdev_names(topo, HWLOC_OBJ_OSDEV_NETWORK, HWLOC_OBJ_OSDEV_OPENFABRICS);
    cJSON *gpus = osdev_names(topo, HWLOC_OBJ_OSDEV_GPU, HWLOC_OBJ_OSDEV_COPROC);
    cJSON_AddItemToObject(j, "nics", nics ? nics : cJSON_CreateNull());
    cJSON_AddItemToObject(j, "gpus", gpus ? gpus : cJSON_CreateNull());
    return j;
}

#else

struct cJSON *mp_topo_summary(void)
{
    cJSON *j = cJSON_CreateObject();
    if (j)
        cJSON_AddItemToObject(j, "hwloc", cJSON_CreateNull());
    return j;
}

#endif

long long mp_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
        kb = -1;
    }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

double mp_memory_budget(long long max_memory, int local_ranks)
{
    if (max_memory > 0)
        return (double)max_memory;
    long long avail = mp_mem_available();
    if (avail <= 0)
        return -1;
    return 0.9 * (double)avail / (local_ranks > 0 ? local_ranks : 1);
}
