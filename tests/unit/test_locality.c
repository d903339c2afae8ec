/* test_locality.c - GPU and NIC locality on a made-up two-node host (hwloc XML), the run.json
 * form of a rank's facts, and --cpu-bind leaving a rank without a GPU as it was. */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "check.h"
#include "error.h"
#include "locality.h"

#if HAVE_HWLOC

static hwloc_topology_t load(const char *path, const char *buffer)
{
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0)
        return NULL;
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    int rc = path ? hwloc_topology_set_xml(t, path)
                  : hwloc_topology_set_xmlbuffer(t, buffer, (int)strlen(buffer) + 1);
    if (rc != 0 || hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return NULL;
    }
    return t;
}

static void list_of(hwloc_const_bitmap_t set, char *buf, size_t len)
{
    hwloc_bitmap_list_snprintf(buf, len, set);
}

/* tests/unit/data/two_numa_gpu.xml: the GPU 82:00.0 and mlx5_0 behind one switch in package 1 */
static void test_gpu_under_node1(const char *xml)
{
    hwloc_topology_t t = load(xml, NULL);
    CHECK(t != NULL);
    if (!t)
        return;
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    char numa[64], nics[128], text[64];

    CHECK_INT(mp_pci_locality(t, "0000:82:00.0", cpus, numa, sizeof numa, nics, sizeof nics), 0);
    list_of(cpus, text, sizeof text);
    CHECK(strcmp(text, "4-7") == 0);
    CHECK(strcmp(numa, "1") == 0);
    /* the NIC behind the same switch, not mlx5_1 under the host bridge nor eth0 on node 0; ib0
     * is mlx5_0's own interface and is not named twice */
    CHECK(strcmp(nics, "mlx5_0") == 0);
    if (strcmp(nics, "mlx5_0") != 0)
        fprintf(stderr, "nearest NICs to the GPU: '%s'\n", nics);

    /* the bus id without its domain, as some tools print it */
    CHECK_INT(mp_pci_locality(t, "82:00.0", cpus, numa, sizeof numa, nics, sizeof nics), 0);
    CHECK(strcmp(numa, "1") == 0);

    /* a device the host does not have: nothing is claimed */
    CHECK_INT(mp_pci_locality(t, "0000:99:00.0", cpus, numa, sizeof numa, nics, sizeof nics), -1);
    CHECK(numa[0] == '\0' && nics[0] == '\0' && hwloc_bitmap_iszero(cpus));

    /* a list too long for the buffer is left out, not cut */
    char tiny[4];
    mp_pci_locality(t, "0000:82:00.0", cpus, numa, sizeof numa, tiny, sizeof tiny);
    CHECK(tiny[0] == '\0');

    /* ranks without a GPU: the NICs nearest their CPUs */
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_bitmap_list_sscanf(set, "0-3");
    mp_cpuset_nics(t, set, nics, sizeof nics);
    CHECK(strcmp(nics, "eth0") == 0);
    hwloc_bitmap_list_sscanf(set, "4-7");
    mp_cpuset_nics(t, set, nics, sizeof nics);
    CHECK(strcmp(nics, "mlx5_0,mlx5_1") == 0);
    hwloc_bitmap_list_sscanf(set, "5");
    mp_cpuset_nics(t, set, nics, sizeof nics);
    CHECK(strcmp(nics, "mlx5_0,mlx5_1") == 0);
    /* a rank free to run on both nodes has no nearest NIC */
    hwloc_bitmap_list_sscanf(set, "0-7");
    mp_cpuset_nics(t, set, nics, sizeof nics);
    CHECK(nics[0] == '\0');
    hwloc_bitmap_list_sscanf(set, "3-4");
    mp_cpuset_nics(t, set, nics, sizeof nics);
    CHECK(nics[0] == '\0');

    hwloc_bitmap_free(set);
    hwloc_bitmap_free(cpus);
    hwloc_topology_destroy(t);
}

/* A GPU whose host bridge hangs from the whole machine: its NUMA node is unknown, but the NIC
 * behind the same bridge is still its nearest. */
static const char gpu_unattached[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
    "<topology version=\"2.0\">\n"
    " <object type=\"Machine\" os_index=\"0\" cpuset=\"0x3\" complete_cpuset=\"0x3\""
    "  allowed_cpuset=\"0x3\" nodeset=\"0x3\" complete_nodeset=\"0x3\" allowed_nodeset=\"0x3\">\n"
    "  <object type=\"Package\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\""
    "   nodeset=\"0x1\" complete_nodeset=\"0x1\">\n"
    "   <object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\""
    "    nodeset=\"0x1\" complete_nodeset=\"0x1\" local_memory=\"1073741824\"/>\n"
    "   <object type=\"PU\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\""
    "    nodeset=\"0x1\" complete_nodeset=\"0x1\"/>\n"
    "   <object type=\"Bridge\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[10-10]\">\n"
    "    <object type=\"PCIDev\" pci_busid=\"0000:10:00.0\" pci_type=\"0207 [15b3:101b]"
    " [15b3:0007] 00\"><object type=\"OSDev\" name=\"mlx5_9\" osdev_type=\"3\"/></object>\n"
    "   </object>\n"
    "  </object>\n"
    "  <object type=\"Package\" os_index=\"1\" cpuset=\"0x2\" complete_cpuset=\"0x2\""
    "   nodeset=\"0x2\" complete_nodeset=\"0x2\">\n"
    "   <object type=\"NUMANode\" os_index=\"1\" cpuset=\"0x2\" complete_cpuset=\"0x2\""
    "    nodeset=\"0x2\" complete_nodeset=\"0x2\" local_memory=\"1073741824\"/>\n"
    "   <object type=\"PU\" os_index=\"1\" cpuset=\"0x2\" complete_cpuset=\"0x2\""
    "    nodeset=\"0x2\" complete_nodeset=\"0x2\"/>\n"
    "  </object>\n"
    "  <object type=\"Bridge\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[40-41]\">\n"
    "   <object type=\"PCIDev\" pci_busid=\"0000:40:00.0\" pci_type=\"0302 [10de:2330]"
    " [10de:16c1] a1\"/>\n"
    "   <object type=\"PCIDev\" pci_busid=\"0000:41:00.0\" pci_type=\"0207 [15b3:101b]"
    " [15b3:0007] 00\"><object type=\"OSDev\" name=\"mlx5_4\" osdev_type=\"3\"/></object>\n"
    "  </object>\n"
    " </object>\n"
    "</topology>\n";

static void test_gpu_unattached(void)
{
    hwloc_topology_t t = load(NULL, gpu_unattached);
    CHECK(t != NULL);
    if (!t)
        return;
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    char numa[64], nics[128];
    CHECK_INT(mp_pci_locality(t, "0000:40:00.0", cpus, numa, sizeof numa, nics, sizeof nics), 0);
    CHECK(numa[0] == '\0');
    CHECK(hwloc_bitmap_iszero(cpus));
    CHECK(strcmp(nics, "mlx5_4") == 0);
    hwloc_bitmap_free(cpus);
    hwloc_topology_destroy(t);
}

/* --cpu-bind must not move a rank that drives no GPU, nor any rank with none. */
static void test_binding_left_alone(void)
{
    struct mp_locality before, after;
    char bound[512];
    mp_locality_read(&before, NULL);
    mp_cpu_bind_apply("auto", NULL, bound, sizeof bound);
    CHECK(bound[0] == '\0');
    mp_cpu_bind_apply("gpu", NULL, bound, sizeof bound);
    CHECK(bound[0] == '\0');
    mp_cpu_bind_apply("none", "0000:82:00.0", bound, sizeof bound);
    CHECK(bound[0] == '\0');
    /* a GPU this host does not have: a warning, no binding */
    mp_cpu_bind_apply("gpu", "00ff:ff:1f.7", bound, sizeof bound);
    CHECK(bound[0] == '\0');
    mp_locality_read(&after, NULL);
    CHECK(strcmp(before.cpu_bind, after.cpu_bind) == 0);
    CHECK(before.cpu_bind[0] != '\0');
    CHECK(before.bound == 0 || before.bound == 1);
    CHECK(strcmp(before.numa_from, before.bound ? "binding" : "last_cpu") == 0);
    CHECK(strcmp(before.nics_near, "cpu") == 0);
}

#endif

static void test_json(void)
{
    struct mp_locality l;
    memset(&l, 0, sizeof l);
    l.bound = 1;
    strcpy(l.cpu_bind, "4-7");
    strcpy(l.numa, "1");
    strcpy(l.numa_from, "binding");
    strcpy(l.gpu_pci, "0000:82:00.0");
    strcpy(l.nics, "mlx5_0,mlx5_1");
    strcpy(l.nics_near, "gpu");
    cJSON *o = cJSON_CreateObject();
    mp_locality_json(&l, o);
    CHECK(strcmp(cJSON_GetObjectItem(o, "cpu_bind")->valuestring, "4-7") == 0);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(o, "cpu_bound")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "gpu_numa"))); /* unknown: null, not "" */
    cJSON *nics = cJSON_GetObjectItem(o, "nics");
    CHECK_INT(cJSON_GetArraySize(nics), 2);
    CHECK(strcmp(cJSON_GetArrayItem(nics, 1)->valuestring, "mlx5_1") == 0);
    cJSON_Delete(o);

    memset(&l, 0, sizeof l);
    l.bound = -1;
    strcpy(l.nics_near, "cpu");
    o = cJSON_CreateObject();
    mp_locality_json(&l, o);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "cpu_bound")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "nics")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "nics_near")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "numa_from")));
    cJSON_Delete(o);
}

int main(int argc, char **argv)
{
    mp_log_init("test_locality", 0);
    test_json();
#if HAVE_HWLOC
    if (argc < 2) {
        fprintf(stderr, "usage: test_locality two_numa_gpu.xml\n");
        return 2;
    }
    test_gpu_under_node1(argv[1]);
    test_gpu_unattached();
    test_binding_left_alone();
#else
    (void)argc;
    (void)argv;
#endif
    return check_failures;
}
