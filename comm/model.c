/* model.c - the model communication backend as the session holds it: the facts of a virtual world
 * of --world ranks in one process (its size, its nodes). Every exchange of a modelled run happens
 * on that world's virtual ranks, each a fiber with a comm of its own (comm/model_world.c, run by
 * core/cluster_model/vrun.c), so this one refuses exchanges, started ones too (it has them as the
 * virtual ranks do: what a binary asks of the backend holds for them); host collectives act as if
 * every virtual rank held what this process holds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "error.h"

static int model_init(struct mp_comm **out, int *argc, char ***argv, const struct mp_comm_params *p)
{
    if (!p || p->world < 1 || p->gpus_per_node < 1) {
        mp_usage("--comm model: --world (virtual ranks) must be >= 1");
        return MP_ERR_USAGE;
    }
    struct mp_comm *c = calloc(1, sizeof *c);
    if (!c || !(c->node_of = malloc((size_t)p->world * sizeof *c->node_of))) {
        free(c);
        mp_error("out of memory for %d virtual ranks", p->world);
        return MP_ERR_RUNTIME;
    }
    c->ops = &mp_comm_model;
    c->rank = 0;
    c->size = p->world;
    c->local_rank = 0;
    c->local_size = 1; /* one process: the memory guard counts it once */
    for (int r = 0; r < p->world; r++)
        c->node_of[r] = r / p->gpus_per_node;
    c->nnodes = (p->world + p->gpus_per_node - 1) / p->gpus_per_node;
    *out = c;
    return MP_OK;
}

static void model_fini(struct mp_comm *c)
{
    if (c) {
        mp_comm_free_node_groups(c);
        free(c->node_of);
        free(c);
    }
}

static const char *model_version(struct mp_comm *c) { return "cluster model"; }

static int model_split(struct mp_comm *c, int tp, int ep)
{
    if (tp * ep != c->size) {
        mp_usage("--layout: tp%dep%d needs %d ranks, --world is %d", tp, ep, tp * ep, c->size);
        return MP_ERR_USAGE;
    }
    c->tp = tp;
    c->ep = ep;
    c->ep_rank = 0;
    c->tp_rank = 0;
    return mp_comm_node_groups(c); /* the groups' facts, as EP rank 0 sees them */
}

static int model_nodata(const char *what)
{
    mp_error("the model comm backend moves no data (%s)", what);
    return MP_ERR_RUNTIME;
}

static int model_alltoall_int(struct mp_comm *c, const int *send, int *recv, int n)
{
    return model_nodata("alltoall");
}

static int model_alltoallv(struct mp_comm *c, const void *send, const int *scount,
                           const int *sdispl, void *recv, const int *rcount, const int *rdispl,
                           size_t row_bytes)
{
    return model_nodata("alltoallv");
}

static int model_alltoall_int_group(struct mp_comm *c, enum mp_comm_group g, const int *send,
                                    int *recv, int n)
{
    return model_nodata("alltoall");
}

static int model_alltoallv_group(struct mp_comm *c, enum mp_comm_group g, const void *send,
                                 const int *scount, const int *sdispl, void *recv,
                                 const int *rcount, const int *rdispl, size_t row_bytes)
{
    return model_nodata("alltoallv");
}

static int model_ialltoallv(struct mp_comm *c, const void *send, const int *scount,
                            const int *sdispl, void *recv, const int *rcount, const int *rdispl,
                            size_t row_bytes, int slot)
{
    return model_nodata("ialltoallv");
}

static int model_ialltoallv_group(struct mp_comm *c, enum mp_comm_group g, const void *send,
                                  const int *scount, const int *sdispl, void *recv,
                                  const int *rcount, const int *rdispl, size_t row_bytes, int slot)
{
    return model_nodata("ialltoallv");
}

static int model_wait(struct mp_comm *c, int slot) { return model_nodata("wait"); }

static void model_progress(struct mp_comm *c) {}

static int model_allreduce_sum(struct mp_comm *c, void *buf, size_t n)
{
    return model_nodata("allreduce");
}

static int model_barrier(struct mp_comm *c) { return MP_OK; }

/* every virtual rank "sends" what this process holds */
static int model_gather(struct mp_comm *c, const void *send, size_t bytes, void *recv_root)
{
    for (int r = 0; r < c->size; r++)
        memcpy((char *)recv_root + (size_t)r * bytes, send, bytes);
    return MP_OK;
}

static int model_gatherv(struct mp_comm *c, const void *send, size_t bytes, void *recv_root,
                         const size_t *bytes_of)
{
    return model_nodata("gatherv");
}

static int model_bcast(struct mp_comm *c, void *buf, size_t bytes) { return MP_OK; }
static int model_max_double(struct mp_comm *c, double *v) { return MP_OK; }

const struct mp_comm_ops mp_comm_model = {
    .name = "model",
    .memory = MP_MEMORY_VIRTUAL,
    .max_row_bytes = SIZE_MAX, /* moves no data */
    .init = model_init,
    .fini = model_fini,
    .version = model_version,
    .split = model_split,
    .alltoall_int = model_alltoall_int,
    .alltoallv = model_alltoallv,
    .alltoall_int_group = model_alltoall_int_group,
    .alltoallv_group = model_alltoallv_group,
    .ialltoallv = model_ialltoallv,
    .ialltoallv_group = model_ialltoallv_group,
    .wait = model_wait,
    .progress = model_progress,
    .allreduce_sum = model_allreduce_sum,
    .barrier = model_barrier,
    .gather = model_gather,
    .gatherv = model_gatherv,
    .bcast = model_bcast,
    .max_double = model_max_double,
};
