/* comm.c - the list of communication backends built into this binary and lookup by name. */
#include "comm.h"

#include <string.h>

#include "config.h"
#include "error.h"

const struct mp_comm_ops *const mp_comm_backends[] = {
    &mp_comm_mpi,
#if HAVE_NCCL
    &mp_comm_nccl,
#endif
    &mp_comm_model,
    NULL,
};

int mp_comm_agree(struct mp_comm *c, int ok)
{
    double failed = ok ? 0 : 1;
    int rc = c->ops->max_double(c, &failed);
    if (rc != MP_OK)
        return -rc;
    return failed == 0;
}

const struct mp_comm_ops *mp_comm_find(const char *name)
{
    char built[256] = "";
    for (int i = 0; mp_comm_backends[i]; i++) {
        if (strcmp(mp_comm_backends[i]->name, name) == 0)
            return mp_comm_backends[i];
        if (i)
            strncat(built, "|", sizeof built - strlen(built) - 1);
        strncat(built, mp_comm_backends[i]->name, sizeof built - strlen(built) - 1);
    }
    if (strcmp(name, "nccl") == 0)
        mp_usage("--comm: nccl is not built into this binary (built: %s); configure with NCCL "
                 "available", built);
    else
        mp_usage("--comm: '%s' is not one of the built backends: %s", name, built);
    return NULL;
}
