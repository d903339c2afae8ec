/* test_backends.c - the backend registries: every built compute and comm backend passes its table
 * check and is found by name, the choice lists hold every built backend, and a table whose hooks
 * disagree with its capability data (copies of the real tables with a hook removed or a capability
 * changed) is refused; the EP group's intra- and inter-node groups of a layout are built where
 * every node holds the same number of EP ranks, and absent otherwise. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "compute.h"
#include "error.h"

static int in_list(const char *const *list, const char *name)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(list[i], name) == 0)
            return 1;
    return 0;
}

/* Every table of the KIND registry (compute or comm) passes its check, is found by its name and
 * is among the choices; the value is the number of tables. */
#define CHECK_REGISTRY(KIND)                                                                       \
    __extension__({                                                                                \
        int n_ = 0;                                                                                \
        for (; mp_##KIND##_backends[n_]; n_++) {                                                   \
            const struct mp_##KIND##_ops *o_ = mp_##KIND##_backends[n_], *found_ = NULL;           \
            char why_[256] = "";                                                                   \
            CHECK(mp_##KIND##_check(o_, why_, sizeof why_));                                       \
            if (why_[0])                                                                           \
                fprintf(stderr, "the %s table: %s\n", o_->name, why_);                             \
            CHECK_INT(mp_##KIND##_find(o_->name, &found_), MP_OK);                                 \
            CHECK(found_ == o_);                                                                   \
            CHECK(in_list(mp_##KIND##_choices, o_->name));                                         \
        }                                                                                          \
        n_;                                                                                        \
    })

/* Whether the check refuses `o`, printing the fault it names. */
static int compute_refused(const struct mp_compute_ops *o, const char *what)
{
    char why[256] = "";
    int ok = mp_compute_check(o, why, sizeof why);
    printf("  compute %s (%s): %s\n", o->name, what, ok ? "accepted" : why);
    return !ok && why[0];
}

static int comm_refused(const struct mp_comm_ops *o, const char *what)
{
    char why[256] = "";
    int ok = mp_comm_check(o, why, sizeof why);
    printf("  comm %s (%s): %s\n", o->name, what, ok ? "accepted" : why);
    return !ok && why[0];
}

static void test_built_compute(void)
{
    CHECK(CHECK_REGISTRY(compute) >= 2); /* cpu and model are always built */
    CHECK(mp_compute_cpu.memory == MP_MEMORY_HOST);
    CHECK(mp_compute_model.memory == MP_MEMORY_VIRTUAL);
    const struct mp_compute_ops *found = &mp_compute_cpu;
    CHECK_INT(mp_compute_find("gpu", &found), MP_ERR_USAGE);
    CHECK(found == NULL);
}

static void test_built_comm(void)
{
    CHECK(CHECK_REGISTRY(comm) >= 2); /* mpi and model are always built */
    /* the model's traced ranks: complete tables, host memory both, not a --comm/--backend choice */
    char why[256] = "";
    CHECK(mp_comm_check(&mp_comm_model_rank, why, sizeof why));
    CHECK(mp_compute_check(&mp_compute_model_rank, why, sizeof why));
    if (why[0])
        fprintf(stderr, "a traced rank's table: %s\n", why);
    CHECK(mp_comm_model_rank.memory == MP_MEMORY_HOST);
    CHECK(mp_compute_model_rank.memory == MP_MEMORY_HOST);
    CHECK(!in_list(mp_comm_choices, mp_comm_model_rank.name));
    CHECK(!in_list(mp_compute_choices, mp_compute_model_rank.name));
    const struct mp_comm_ops *found = &mp_comm_mpi;
    CHECK_INT(mp_comm_find("tcp", &found), MP_ERR_USAGE);
    CHECK(found == NULL);
}

/* t becomes a copy of the table BASE with CHANGE made to it, and its check must refuse it (WHAT
 * names the fault) */
#define REFUSED(BASE, CHANGE, WHAT)                                                                \
    do {                                                                                           \
        t = (BASE);                                                                                \
        CHANGE;                                                                                    \
        CHECK(_Generic(&t, struct mp_compute_ops *: compute_refused, struct mp_comm_ops *:         \
                           comm_refused)(&t, WHAT));                                               \
    } while (0)

/* Copies of the real compute tables, each broken in one way, are refused. */
static void test_broken_compute(void)
{
    struct mp_compute_ops t;
    REFUSED(mp_compute_cpu, t.combine = NULL, "combine removed");
    REFUSED(mp_compute_cpu, t.sync = NULL, "sync removed");
    REFUSED(mp_compute_cpu, t.graph = 1, "claims graph capture without its hooks");
    REFUSED(mp_compute_cpu, t.memory = MP_MEMORY_DEVICE,
            "claims device memory without native_stream");
    REFUSED(mp_compute_cpu, t.dispatch_modes = 0, "no dispatch mode");
    REFUSED(mp_compute_cpu, t.dispatch_dtypes = MP_DTYPE_BIT(MP_DTYPE_FP8), "no bf16 dispatch");
    REFUSED(mp_compute_cpu, t.fp8_unpack = NULL, "fp8 dispatch claimed, fp8_unpack removed");
    REFUSED(mp_compute_cpu, t.dispatch_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16),
            "fp8 hooks without the fp8 dispatch claimed");
    REFUSED(mp_compute_model, t.fp8_pack = NULL, "virtual, fp8 dispatch claimed, fp8_pack removed");
    REFUSED(mp_compute_cpu, t.check_tolerance = 0, "no --check tolerance");
    REFUSED(mp_compute_cpu, t.download_bytes = NULL, "download_bytes removed");
    REFUSED(mp_compute_model, t.alloc = NULL, "virtual without alloc");
    REFUSED(mp_compute_model, t.upload_bytes = NULL, "virtual without upload_bytes");
    REFUSED(mp_compute_model, t.flush_cache = mp_compute_cpu.flush_cache,
            "virtual with a cache flush");
    REFUSED(mp_compute_cpu, t.fp8_gemm_modes = 0, "fp8 weights claimed without an fp8 gemm mode");
    REFUSED(mp_compute_cpu, t.fp8_gemm_modes |= 1u << MP_GEMM_SKINNY,
            "an fp8 gemm mode the backend does not honour");
    REFUSED(mp_compute_cpu, t.weight_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16),
            "fp8 gemm modes without fp8 weights");
    REFUSED(mp_compute_cpu, t.shared_gemm_modes = 1u << MP_GEMM_FUSED,
            "shared experts in the call of a gemm mode the backend lacks");
    REFUSED(mp_compute_cpu, t.gemm_modes = 1u << MP_GEMM_COUNT, "a gemm mode past the last");
    for (int i = 0; mp_compute_backends[i]; i++) { /* the device backends (cuda) */
        const struct mp_compute_ops *o = mp_compute_backends[i];
        if (o->memory != MP_MEMORY_DEVICE)
            continue;
        REFUSED(*o, t.replay = NULL, "replay removed");
        REFUSED(*o, t.native_stream = NULL, "native_stream removed");
        REFUSED(*o, t.memory = MP_MEMORY_HOST, "host memory with a stream");
    }
}

/* Copies of the real comm tables, each broken in one way, are refused. */
static void test_broken_comm(void)
{
    struct mp_comm_ops t;
    REFUSED(mp_comm_mpi, t.wait = NULL, "wait removed, ialltoallv kept");
    REFUSED(mp_comm_mpi, t.alltoallv = NULL, "alltoallv removed");
    REFUSED(mp_comm_mpi, t.alltoallv_group = NULL, "alltoallv_group removed");
    REFUSED(mp_comm_mpi, t.ialltoallv_group = NULL, "ialltoallv_group removed, ialltoallv kept");
    REFUSED(mp_comm_mpi, t.memory = MP_MEMORY_DEVICE, "device memory without bind_device");
    REFUSED(mp_comm_mpi, t.max_row_bytes = 0, "no largest row");
    REFUSED(mp_comm_model, t.max_double = NULL, "max_double removed");
    for (int i = 0; mp_comm_backends[i]; i++) { /* the device backends (nccl) */
        const struct mp_comm_ops *o = mp_comm_backends[i];
        if (o->memory != MP_MEMORY_DEVICE)
            continue;
        REFUSED(*o, t.bind_device = NULL, "bind_device removed");
        REFUSED(*o, t.memory = MP_MEMORY_HOST, "host memory with bind_device");
    }
}

/* The EP group's node groups of a layout (mp_comm_node_groups), as EP rank 0 of the model
 * backend's virtual world of `world` ranks, `gpn` per node, sees them; `intra`/`inter` the member
 * lists, -1-terminated, or NULL where the nodes hold different numbers of EP ranks. */
static void check_groups(int world, int gpn, int tp, const int *intra, const int *inter)
{
    struct mp_comm *c = NULL;
    struct mp_comm_params p = {.world = world, .gpus_per_node = gpn};
    CHECK_INT(mp_comm_model.init(&c, NULL, NULL, &p), MP_OK);
    CHECK_INT(mp_comm_model.split(c, tp, world / tp), MP_OK);
    printf("  world %d, %d per node, tp%d: node groups %s\n", world, gpn, tp,
           c->node_groups ? "built" : "absent");
    CHECK_INT(c->node_groups, intra != NULL);
    CHECK_INT(c->group_size[MP_GROUP_EP], world / tp);
    for (int i = 0; i < world / tp; i++)
        CHECK_INT(c->members[MP_GROUP_EP][i], i);
    const int *want[MP_GROUP_COUNT] = {NULL, intra, inter};
    for (int g = MP_GROUP_EP_INTRA; g < MP_GROUP_COUNT; g++) {
        int n = 0;
        while (want[g] && want[g][n] >= 0)
            n++;
        CHECK_INT(c->group_size[g], n);
        for (int i = 0; i < n && i < c->group_size[g]; i++)
            CHECK_INT(c->members[g][i], want[g][i]);
        CHECK_INT(c->group_rank[g], 0);
        CHECK_INT(mp_comm_phase_group(c, (enum mp_comm_group)g), intra ? g : MP_GROUP_EP);
    }
    CHECK_INT(mp_comm_model.split(c, world, 1), MP_OK); /* the next layout's replace them */
    CHECK_INT(c->group_size[MP_GROUP_EP], 1);
    mp_comm_model.fini(c);
}

static void test_node_groups(void)
{
    check_groups(8, 4, 1, (const int[]){0, 1, 2, 3, -1}, (const int[]){0, 4, -1});
    check_groups(8, 2, 2, (const int[]){0, -1}, (const int[]){0, 1, 2, 3, -1});
    check_groups(12, 6, 2, (const int[]){0, 1, 2, -1}, (const int[]){0, 3, -1});
    check_groups(6, 4, 1, NULL, NULL); /* nodes of 4 and 2 EP ranks */
    check_groups(12, 4, 2, (const int[]){0, 1, -1}, (const int[]){0, 2, 4, -1});
    check_groups(10, 4, 2, NULL, NULL); /* EP ranks on nodes 0 0 1 1 2 */
}

int main(void)
{
    mp_log_init("test_backends", -1);
    test_built_compute();
    test_built_comm();
    test_broken_compute();
    test_broken_comm();
    test_node_groups();
    return check_failures;
}
