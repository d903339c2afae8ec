/* comm.c - the registry of communication backends (the ones built into this binary, from
 * meson.build's list), lookup by name, the start-up check of a backend's table, and agreement. */
#include "comm.h"

#include <stdio.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "registry.h"

#define MP_BUILT(n) &mp_comm_##n,
#define MP_ABSENT(n, hint)
const struct mp_comm_ops *const mp_comm_backends[] = {MP_COMM_BACKENDS NULL};
#undef MP_BUILT
#undef MP_ABSENT

#define MP_BUILT(n) #n,
#define MP_ABSENT(n, hint) #n,
const char *const mp_comm_choices[] = {MP_COMM_BACKENDS NULL};
#undef MP_BUILT
#undef MP_ABSENT

#define MP_BUILT(n)
#define MP_ABSENT(n, hint) {#n, hint},
static const struct mp_backend_absent absent[] = {MP_COMM_BACKENDS{NULL, NULL}};
#undef MP_BUILT
#undef MP_ABSENT

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
    int nonblocking = !!o->ialltoallv + !!o->wait + !!o->progress;
    REQUIRE(nonblocking == 0 || nonblocking == 3,
            "fills %d of ialltoallv, wait, progress (all three or none)", nonblocking);
    /* device memory: the compute backend's stream, given once it starts */
    REQUIRE((o->memory == MP_MEMORY_DEVICE) == !!o->bind_device, "has %s memory but %s bind_device",
            o->memory == MP_MEMORY_DEVICE ? "device" : "no device",
            o->bind_device ? "fills" : "lacks");
    REQUIRE(o->memory == MP_MEMORY_DEVICE || (!o->align && !o->drain && !o->abort),
            "has no device but fills align, drain or abort");
    return 1;
}

int mp_comm_find(const char *name, const struct mp_comm_ops **out)
{
    *out = NULL;
    int n = 0;
    while (mp_comm_backends[n])
        n++;
    int i = mp_registry_find("--comm", name, n, name_at, absent);
    if (i < 0)
        return MP_ERR_USAGE;
    char why[256];
    if (!mp_comm_check(mp_comm_backends[i], why, sizeof why)) {
        mp_error("internal error: the %s comm backend's table %s", name, why);
        return MP_ERR_RUNTIME;
    }
    *out = mp_comm_backends[i];
    return MP_OK;
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
