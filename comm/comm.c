/* comm.c - the registry of communication backends (the ones built into this binary, from
 * meson.build's list), lookup by name, the start-up check of a backend's table, and agreement. */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "registry.h"

#define OPS_OF(n) &mp_comm_##n,
const struct mp_comm_ops *const mp_comm_backends[] = {
    MP_COMM_BACKENDS(OPS_OF, MP_REGISTRY_SKIP_ABSENT) NULL};
#undef OPS_OF
const char *const mp_comm_choices[] = MP_REGISTRY_CHOICES(MP_COMM_BACKENDS);
static const struct mp_backend_absent absent[] = MP_REGISTRY_ABSENT(MP_COMM_BACKENDS);

const char *const mp_comm_group_names[MP_GROUP_COUNT] = {"ep", "ep-intra-node", "ep-inter-node"};

static void drop_members(struct mp_comm *c)
{
    for (int g = 0; g < MP_GROUP_COUNT; g++) {
        free(c->members[g]);
        c->members[g] = NULL;
        c->group_size[g] = 0;
        c->group_rank[g] = 0;
    }
    free(c->group_scratch);
    free(c->slot_scratch);
    c->group_scratch = c->slot_scratch = NULL;
    c->node_groups = 0;
}

int mp_comm_node_groups(struct mp_comm *c)
{
    drop_members(c);
    int ep = c->ep, tp = c->tp, me = c->ep_rank;
    int *local = malloc((size_t)ep * sizeof *local);
    int *per_node = calloc((size_t)c->size, sizeof *per_node);
    for (int g = 0; g < MP_GROUP_COUNT; g++)
        c->members[g] = malloc((size_t)ep * sizeof *c->members[g]);
    c->group_scratch = malloc((size_t)4 * ep * sizeof *c->group_scratch);
    if (!local || !per_node || !c->members[0] || !c->members[1] || !c->members[2] ||
        !c->group_scratch) {
        free(local);
        free(per_node);
        drop_members(c);
        mp_error("out of memory for the node groups of %d EP ranks", ep);
        return MP_ERR_RUNTIME;
    }
    /* each EP rank's local index among the EP ranks of its node, in EP order; nodes are numbered
     * below size, so per_node counts the EP ranks of each */
    for (int q = 0; q < ep; q++)
        local[q] = per_node[c->node_of[q * tp]]++;
    int even = 1, held = per_node[c->node_of[me * tp]];
    for (int n = 0; n < c->size; n++)
        even &= per_node[n] == 0 || per_node[n] == held;
    for (int q = 0; q < ep; q++) {
        int in[MP_GROUP_COUNT] = {1, c->node_of[q * tp] == c->node_of[me * tp],
                                  local[q] == local[me]};
        for (int g = 0; g < MP_GROUP_COUNT; g++) {
            if (!in[g])
                continue;
            if (q == me)
                c->group_rank[g] = c->group_size[g];
            c->members[g][c->group_size[g]++] = q;
        }
    }
    c->node_groups = even;
    if (!even) /* only the whole EP group: the node groups are absent */
        for (int g = MP_GROUP_EP_INTRA; g < MP_GROUP_COUNT; g++)
            c->group_size[g] = 0;
    free(local);
    free(per_node);
    return MP_OK;
}

void mp_comm_free_node_groups(struct mp_comm *c)
{
    long *n = c->group_exchanges;
    if (getenv("MOEPERF_TEST_GROUPS") && n[0] + n[1] + n[2] > 0)
        fprintf(stderr, "moeperf: rank %d: exchanges on ep (%d ranks) %ld, ep-intra-node (%d "
                        "ranks) %ld, ep-inter-node (%d ranks) %ld\n", c->rank,
                c->group_size[MP_GROUP_EP], n[MP_GROUP_EP], c->group_size[MP_GROUP_EP_INTRA],
                n[MP_GROUP_EP_INTRA], c->group_size[MP_GROUP_EP_INTER], n[MP_GROUP_EP_INTER]);
    drop_members(c);
}

enum mp_comm_group mp_comm_phase_group(const struct mp_comm *c, enum mp_comm_group g)
{
    return c->node_groups ? g : MP_GROUP_EP;
}

/* The entries of an EP-indexed array `all` at group g's members into `out`; 0, or 1 after a
 * message when an entry of a non-member is not 0. */
static int gather_members(const struct mp_comm *c, enum mp_comm_group g, const int *all, int n,
                          int *out, const char *what)
{
    int gs = c->group_size[g];
    for (int i = 0, q = 0; q < c->ep; q++) {
        if (i < gs && c->members[g][i] == q) {
            memcpy(out + (size_t)i * n, all + (size_t)q * n, (size_t)n * sizeof *out);
            i++;
            continue;
        }
        for (int j = 0; j < n; j++)
            if (all[(size_t)q * n + j]) {
                mp_error("internal error: %s for EP rank %d, outside the %s group", what, q,
                         mp_comm_group_names[g]);
                return 1;
            }
    }
    return 0;
}

int mp_comm_alltoall_int_on(struct mp_comm *c, enum mp_comm_group g, const int *send, int *recv,
                            int n)
{
    g = mp_comm_phase_group(c, g);
    if (g == MP_GROUP_EP)
        return c->ops->alltoall_int(c, send, recv, n);
    int gs = c->group_size[g];
    int *s = malloc((size_t)2 * gs * n * sizeof *s), *r = s + (size_t)gs * n;
    if (!s) {
        mp_error("out of memory for a count exchange");
        return MP_ERR_RUNTIME;
    }
    int rc = gather_members(c, g, send, n, s, "counts") ? MP_ERR_RUNTIME
                                                        : c->ops->alltoall_int_group(c, g, s, r, n);
    if (rc == MP_OK) {
        memset(recv, 0, (size_t)c->ep * n * sizeof *recv);
        for (int i = 0; i < gs; i++)
            memcpy(recv + (size_t)c->members[g][i] * n, r + (size_t)i * n,
                   (size_t)n * sizeof *recv);
    }
    free(s);
    return rc;
}

/* Group g's per-peer arrays from EP-indexed ones into a[4·group_size]: 0, or 1 after a message. */
static int group_arrays(const struct mp_comm *c, enum mp_comm_group g, const int *scount,
                        const int *sdispl, const int *rcount, const int *rdispl, int *a)
{
    int gs = c->group_size[g];
    int *sc = a, *sd = a + gs, *rc = a + 2 * gs, *rd = a + 3 * gs;
    if (gather_members(c, g, scount, 1, sc, "rows sent") ||
        gather_members(c, g, rcount, 1, rc, "rows received"))
        return 1;
    for (int i = 0; i < gs; i++) { /* displacements of the members only (the others: any) */
        sd[i] = sdispl[c->members[g][i]];
        rd[i] = rdispl[c->members[g][i]];
    }
    return 0;
}

int mp_comm_alltoallv_on(struct mp_comm *c, enum mp_comm_group g, const void *send,
                         const int *scount, const int *sdispl, void *recv, const int *rcount,
                         const int *rdispl, size_t row_bytes)
{
    g = mp_comm_phase_group(c, g);
    if (g == MP_GROUP_EP)
        return c->ops->alltoallv(c, send, scount, sdispl, recv, rcount, rdispl, row_bytes);
    int gs = c->group_size[g], *a = c->group_scratch;
    if (group_arrays(c, g, scount, sdispl, rcount, rdispl, a))
        return MP_ERR_RUNTIME;
    return c->ops->alltoallv_group(c, g, send, a, a + gs, recv, a + 2 * gs, a + 3 * gs, row_bytes);
}

int mp_comm_ialltoallv_on(struct mp_comm *c, enum mp_comm_group g, const void *send,
                          const int *scount, const int *sdispl, void *recv, const int *rcount,
                          const int *rdispl, size_t row_bytes, int slot)
{
    g = mp_comm_phase_group(c, g);
    if (g == MP_GROUP_EP)
        return c->ops->ialltoallv(c, send, scount, sdispl, recv, rcount, rdispl, row_bytes, slot);
    if (slot < 0 || slot >= MP_COMM_SLOTS) {
        mp_error("internal error: exchange slot %d outside 0..%d", slot, MP_COMM_SLOTS - 1);
        return MP_ERR_RUNTIME;
    }
    if (!c->slot_scratch &&
        !(c->slot_scratch = malloc((size_t)MP_COMM_SLOTS * 4 * c->ep * sizeof *c->slot_scratch))) {
        mp_error("out of memory for the non-blocking exchanges' arrays");
        return MP_ERR_RUNTIME;
    }
    int gs = c->group_size[g], *a = c->slot_scratch + (size_t)slot * 4 * c->ep;
    if (group_arrays(c, g, scount, sdispl, rcount, rdispl, a))
        return MP_ERR_RUNTIME;
    return c->ops->ialltoallv_group(c, g, send, a, a + gs, recv, a + 2 * gs, a + 3 * gs,
                                    row_bytes, slot);
}

int mp_comm_agree(struct mp_comm *c, int ok)
{
    double failed = ok ? 0 : 1;
    int rc = c->ops->max_double(c, &failed);
    if (rc != MP_OK)
        return -rc;
    return failed == 0;
}

static const char *name_at(int i) { return mp_comm_backends[i]->name; }

#define REQUIRE MP_REGISTRY_REQUIRE

int mp_comm_check(const struct mp_comm_ops *o, char *why, size_t len)
{
    REQUIRE(o->name && o->name[0], "has no name");
    REQUIRE(o->memory == MP_MEMORY_HOST || o->memory == MP_MEMORY_DEVICE ||
                o->memory == MP_MEMORY_VIRTUAL, "has an unknown memory kind %d", (int)o->memory);
    REQUIRE(o->max_row_bytes > 0, "has no largest row of an all-to-all (max_row_bytes)");
    REQUIRE(o->init && o->fini && o->version && o->split && o->alltoall_int && o->alltoallv &&
                o->allreduce_sum && o->barrier && o->gather && o->gatherv && o->bcast &&
                o->max_double,
            "lacks one of init, fini, version, split, alltoall_int, alltoallv, allreduce_sum, "
            "barrier, gather, gatherv, bcast, max_double (required of every backend)");
    REQUIRE(o->alltoall_int_group && o->alltoallv_group,
            "lacks alltoall_int_group or alltoallv_group (required of every backend)");
    int nonblocking = !!o->ialltoallv + !!o->wait + !!o->progress + !!o->ialltoallv_group;
    REQUIRE(nonblocking == 0 || nonblocking == 4,
            "fills %d of ialltoallv, ialltoallv_group, wait, progress (all four or none)",
            nonblocking);
    /* device memory: the compute backend's stream, given once it starts */
    REQUIRE((o->memory == MP_MEMORY_DEVICE) == !!o->bind_device, "has %s memory but %s bind_device",
            o->memory == MP_MEMORY_DEVICE ? "device" : "no device",
            o->bind_device ? "fills" : "lacks");
    REQUIRE(o->memory == MP_MEMORY_DEVICE || (!o->align && !o->drain && !o->abort),
            "has no device but fills align, drain or abort");
    return 1;
}

static int check_at(int i, char *why, size_t len)
{
    return mp_comm_check(mp_comm_backends[i], why, len);
}

int mp_comm_find(const char *name, const struct mp_comm_ops **out)
{
    int n = 0, i;
    while (mp_comm_backends[n])
        n++;
    int rc = mp_registry_lookup("--comm", "comm", name, n, name_at, absent, check_at, &i);
    *out = rc == MP_OK ? mp_comm_backends[i] : NULL;
    return rc;
}

const char *mp_comm_names_where(int (*has)(const struct mp_comm_ops *ops), char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; mp_comm_backends[i]; i++)
        if (has(mp_comm_backends[i]))
            mp_registry_append(buf, len, mp_comm_backends[i]->name);
    if (!buf[0])
        snprintf(buf, len, "none");
    return buf;
}
