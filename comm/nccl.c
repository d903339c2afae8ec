/* nccl.c - the nccl communication backend: device buffers, grouped ncclSend/ncclRecv for dispatch
 * and combine, ncclAllReduce in the TP group, communicators split per layout from one world
 * communicator bootstrapped over MPI; host collectives and the count exchange go over MPI. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "error.h"
#include "watchdog.h"

struct nccl_state {
    struct mp_comm *mpi; /* the MPI world: bootstrap, count exchange, host collectives */
    ncclComm_t world, ep, tp;
    cudaStream_t stream;
    ncclDataType_t reduce_type;
    char version[192];
};

static struct nccl_state *st(struct mp_comm *c) { return c->priv; }

#define NCCLCHECK(call)                                                                            \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            mp_error("%s: %s", #call, ncclGetErrorString(r_));                                     \
            return MP_ERR_RUNTIME;                                                                 \
        }                                                                                          \
    } while (0)

/* Abort every communicator when the --timeout watchdog fires: a hung collective never returns. */
static void abort_all(void *arg)
{
    struct nccl_state *s = arg;
    if (s->ep)
        ncclCommAbort(s->ep);
    if (s->tp)
        ncclCommAbort(s->tp);
    if (s->world)
        ncclCommAbort(s->world);
}

static int nccl_init(struct mp_comm **out, int *argc, char ***argv, const struct mp_comm_params *p)
{
    struct mp_comm *c = calloc(1, sizeof *c);
    struct nccl_state *s = calloc(1, sizeof *s);
    if (!c || !s) {
        free(c);
        free(s);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    int rc = mp_comm_mpi.init(&s->mpi, argc, argv, p);
    if (rc != MP_OK) {
        free(c);
        free(s);
        return rc;
    }
    c->ops = &mp_comm_nccl;
    c->priv = s;
    c->rank = s->mpi->rank;
    c->size = s->mpi->size;
    c->local_rank = s->mpi->local_rank;
    c->local_size = s->mpi->local_size;
    c->nnodes = s->mpi->nnodes;
    c->node_of = s->mpi->node_of; /* shared: freed with the MPI world */
    int v = 0;
    ncclGetVersion(&v);
    snprintf(s->version, sizeof s->version, "NCCL %d.%d.%d over %s", v / 10000, (v / 100) % 100,
             v % 100, mp_comm_mpi.version(s->mpi));
    mp_watchdog_on_expire(abort_all, s);
    *out = c;
    return MP_OK;
}

static void nccl_fini(struct mp_comm *c)
{
    if (!c)
        return;
    struct nccl_state *s = st(c);
    mp_watchdog_on_expire(NULL, NULL);
    if (s->stream)
        cudaStreamSynchronize(s->stream);
    if (s->ep)
        ncclCommDestroy(s->ep);
    if (s->tp)
        ncclCommDestroy(s->tp);
    if (s->world)
        ncclCommDestroy(s->world);
    mp_comm_mpi.fini(s->mpi);
    free(s);
    free(c);
}

static const char *nccl_version(struct mp_comm *c) { return st(c)->version; }

static int nccl_bind_device(struct mp_comm *c, void *stream, size_t elem_size)
{
    struct nccl_state *s = st(c);
    s->stream = (cudaStream_t)stream;
    s->reduce_type = elem_size == 2 ? ncclBfloat16 : ncclFloat32;
    /* the world communicator, on the device the compute backend selected */
    ncclUniqueId id;
    if (c->rank == 0)
        NCCLCHECK(ncclGetUniqueId(&id));
    int rc = s->mpi->ops->bcast(s->mpi, &id, sizeof id);
    if (rc != MP_OK)
        return rc;
    NCCLCHECK(ncclCommInitRank(&s->world, c->size, id, c->rank));
    return MP_OK;
}

static int nccl_split(struct mp_comm *c, int tp, int ep)
{
    struct nccl_state *s = st(c);
    int rc = s->mpi->ops->split(s->mpi, tp, ep);
    if (rc != MP_OK)
        return rc;
    if (!s->world) {
        mp_error("--comm nccl: the communicator was not bound to a device");
        return MP_ERR_RUNTIME;
    }
    c->tp = tp;
    c->ep = ep;
    c->ep_rank = c->rank / tp;
    c->tp_rank = c->rank % tp;
    if (s->ep)
        ncclCommDestroy(s->ep);
    if (s->tp)
        ncclCommDestroy(s->tp);
    s->ep = s->tp = NULL;
    NCCLCHECK(ncclCommSplit(s->world, c->tp_rank, c->ep_rank, &s->ep, NULL));
    NCCLCHECK(ncclCommSplit(s->world, c->ep_rank, c->tp_rank, &s->tp, NULL));
    return MP_OK;
}

static int nccl_alltoall_int(struct mp_comm *c, const int *send, int *recv, int n)
{
    return st(c)->mpi->ops->alltoall_int(st(c)->mpi, send, recv, n);
}

static int nccl_alltoallv(struct mp_comm *c, const void *send, const int *scount, const int *sdispl,
                          void *recv, const int *rcount, const int *rdispl, size_t row_bytes)
{
    struct nccl_state *s = st(c);
    NCCLCHECK(ncclGroupStart());
    for (int p = 0; p < c->ep; p++) {
        if (scount[p] > 0)
            NCCLCHECK(ncclSend((const char *)send + (size_t)sdispl[p] * row_bytes,
                               (size_t)scount[p] * row_bytes, ncclUint8, p, s->ep, s->stream));
        if (rcount[p] > 0)
            NCCLCHECK(ncclRecv((char *)recv + (size_t)rdispl[p] * row_bytes,
                               (size_t)rcount[p] * row_bytes, ncclUint8, p, s->ep, s->stream));
    }
    NCCLCHECK(ncclGroupEnd());
    return MP_OK;
}

static int nccl_allreduce_sum(struct mp_comm *c, void *buf, size_t n)
{
    struct nccl_state *s = st(c);
    NCCLCHECK(ncclAllReduce(buf, buf, n, s->reduce_type, ncclSum, s->tp, s->stream));
    return MP_OK;
}

static int nccl_barrier(struct mp_comm *c)
{
    struct nccl_state *s = st(c);
    if (s->stream && cudaStreamSynchronize(s->stream) != cudaSuccess) {
        mp_error("device stream failed before the barrier");
        return MP_ERR_RUNTIME;
    }
    return s->mpi->ops->barrier(s->mpi);
}

static int nccl_gather(struct mp_comm *c, const void *send, size_t bytes, void *recv_root)
{
    return st(c)->mpi->ops->gather(st(c)->mpi, send, bytes, recv_root);
}

static int nccl_gatherv(struct mp_comm *c, const void *send, size_t bytes, void *recv_root,
                        const size_t *bytes_of)
{
    return st(c)->mpi->ops->gatherv(st(c)->mpi, send, bytes, recv_root, bytes_of);
}

static int nccl_bcast(struct mp_comm *c, void *buf, size_t bytes)
{
    return st(c)->mpi->ops->bcast(st(c)->mpi, buf, bytes);
}

static int nccl_max_double(struct mp_comm *c, double *v)
{
    return st(c)->mpi->ops->max_double(st(c)->mpi, v);
}

const struct mp_comm_ops mp_comm_nccl = {
    .name = "nccl",
    .init = nccl_init,
    .fini = nccl_fini,
    .version = nccl_version,
    .split = nccl_split,
    .alltoall_int = nccl_alltoall_int,
    .alltoallv = nccl_alltoallv,
    .allreduce_sum = nccl_allreduce_sum,
    .barrier = nccl_barrier,
    .gather = nccl_gather,
    .gatherv = nccl_gatherv,
    .bcast = nccl_bcast,
    .max_double = nccl_max_double,
    .bind_device = nccl_bind_device,
};
