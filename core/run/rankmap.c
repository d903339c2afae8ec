/* rankmap.c - local rank from the launcher's variables checked against MPI's shared-memory split,
 * and the GPU index a local rank takes (see rankmap.h). */
#include "rankmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "error.h"

const char *const mp_local_rank_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                          "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                                          "PMI_LOCAL_RANK", NULL};

#define SPLIT_SOURCE "shared-memory split"

int mp_local_rank_env(const char **var)
{
    *var = NULL;
    for (int i = 0; mp_local_rank_vars[i]; i++) {
        const char *v = getenv(mp_local_rank_vars[i]);
        if (!v)
            continue;
        *var = mp_local_rank_vars[i];
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (end == v || *end != '\0' || errno != 0 || n < 0 || n > 1 << 20)
            return -1;
        return (int)n;
    }
    return -1;
}

int mp_local_ranks_usable(int size, const int *env, const int *split, const int *node_of,
                          int *differ)
{
    int any = 0, all = 1;
    *differ = 0;
    for (int r = 0; r < size; r++) {
        any |= env[r] >= 0;
        all &= env[r] >= 0;
    }
    if (!any)
        return 0;
    for (int r = 0; r < size; r++)
        *differ += env[r] != split[r];
    if (!all)
        return 0;
    /* each host's values must be 0..n-1 once each: value < n and no two ranks of a host alike */
    for (int r = 0; r < size; r++) {
        int n = 0;
        for (int q = 0; q < size; q++) {
            if (node_of[q] != node_of[r])
                continue;
            n++;
            if (q != r && env[q] == env[r])
                return 0;
        }
        if (env[r] >= n)
            return 0;
    }
    return 1;
}

/* What every rank sends rank 0 to settle the local ranks. */
struct local_rank_seen {
    int env, split, var; /* var: index in mp_local_rank_vars, -1 none */
};

int mp_local_rank_resolve(struct mp_comm *c, const char **source)
{
    const char *var;
    struct local_rank_seen mine = {mp_local_rank_env(&var), c->local_rank, -1};
    for (int i = 0; var && mp_local_rank_vars[i]; i++)
        if (strcmp(var, mp_local_rank_vars[i]) == 0)
            mine.var = i;
    struct local_rank_seen *all = NULL;
    int *env = NULL, *split = NULL;
    if (c->rank == 0) {
        all = calloc((size_t)c->size, sizeof *all);
        env = calloc((size_t)c->size, sizeof *env);
        split = calloc((size_t)c->size, sizeof *split);
        if (!all || !env || !split) {
            free(all);
            free(env);
            free(split);
            mp_error("out of memory");
            return MP_ERR_RUNTIME;
        }
    }
    int rc = c->ops->gather(c, &mine, sizeof mine, all);
    int decision[2] = {0, -1}; /* use the launcher's numbering; the variable's index */
    if (rc == MP_OK && c->rank == 0) {
        int var0 = -1;
        for (int r = 0; r < c->size; r++) {
            env[r] = all[r].env;
            split[r] = all[r].split;
            if (var0 < 0)
                var0 = all[r].var;
        }
        int differ = 0;
        decision[0] = mp_local_ranks_usable(c->size, env, split, c->node_of, &differ);
        decision[1] = var0;
        const char *name = var0 >= 0 ? mp_local_rank_vars[var0] : "";
        if (differ > 0 && decision[0])
            mp_warn("local ranks: %s differs from MPI's shared-memory split on %d of %d ranks; "
                    "using %s, which numbers each host's ranks 0..n-1 once",
                    name, differ, c->size, name);
        else if (differ > 0)
            mp_warn("local ranks: %s does not number each host's ranks 0..n-1 once (%d of %d "
                    "ranks differ from MPI's shared-memory split; a value left from an outer "
                    "launch?); using the shared-memory split",
                    name, differ, c->size);
    }
    free(all);
    free(env);
    free(split);
    if (rc == MP_OK)
        rc = c->ops->bcast(c, decision, sizeof decision);
    if (rc != MP_OK)
        return rc;
    if (decision[0]) {
        c->local_rank = mine.env;
        *source = mp_local_rank_vars[decision[1]];
    } else {
        *source = SPLIT_SOURCE;
    }
    return MP_OK;
}
