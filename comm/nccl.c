/* nccl.c - the nccl communication backend: device buffers, grouped ncclSend/ncclRecv for dispatch
 * and combine, ncclAllReduce in the TP group, communicators split per layout from one world
 * communicator bootstrapped over MPI (the EP group's intra- and inter-node groups split from the
 * EP communicator where the nodes hold equal numbers of EP ranks); host collectives and the count
 * exchange go over MPI. The non-blocking exchanges of a pipelined layer run on a second (comm)
 * stream joined to the compute stream by events, and waiting polls ncclCommGetAsyncError. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "watchdog.h"

/* Request slots of the non-blocking exchange (comm.h: 0..63). */
#define NCCL_SLOTS 64

struct nccl_state {
    struct mp_comm *mpi; /* the MPI world: bootstrap, count exchange, host collectives */
    ncclComm_t world, ep, tp;
    ncclComm_t node[MP_GROUP_COUNT]; /* [EP]: ep; the intra- and inter-node groups, split from ep */
    cudaStream_t stream;       /* the compute backend's: blocking exchanges and the allreduce */
    cudaStream_t comm_stream;  /* the pipelined layer's exchanges, beside the compute stream */
    cudaEvent_t ready[NCCL_SLOTS], done[NCCL_SLOTS]; /* data ready on compute; exchange finished */
    int last_slot; /* the latest exchange started on the comm stream since the last drain, or −1 */
    ncclDataType_t reduce_type;
    void *align_buf; /* the start alignment's one element (device) */
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

/* Abort every communicator (NCCL frees each: the handles must not be used again). Runs on the
 * thread that polls them, never on the --timeout watchdog's: NCCL's calls on one communicator
 * must not run in two threads at once. */
static void abort_all(struct nccl_state *s)
{
    for (int g = MP_GROUP_EP_INTRA; g < MP_GROUP_COUNT; g++)
        if (s->node[g])
            ncclCommAbort(s->node[g]);
    memset(s->node, 0, sizeof s->node);
    if (s->ep)
        ncclCommAbort(s->ep);
    if (s->tp)
        ncclCommAbort(s->tp);
    if (s->world)
        ncclCommAbort(s->world);
    s->ep = s->tp = s->world = NULL;
}

/* ncclCommSplit, which the tp × ep communicators are made with, came with NCCL 2.18. */
#define NCCL_OLDEST 21800

/* NCCL's version code as major, minor, patch: major·10000 + minor·100 + patch since 2.9,
 * major·1000 + minor·100 + patch before (nccl.h, NCCL_VERSION). */
static void version_parts(int v, int *major, int *minor, int *patch)
{
    int base = v >= 10000 ? 10000 : 1000;
    *major = v / base;
    *minor = (v % base) / 100;
    *patch = v % 100;
}

/* Arm the --timeout watchdog around a set-up step that waits for every rank (bootstrap over
 * NCCL_SOCKET_IFNAME's interface: a wrong one hangs there); disarmed by the caller. */
static void arm_setup(struct mp_comm *c, const char *step)
{
    if (c->timeout_s > 0)
        mp_watchdog_arm(c->timeout_s, step);
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
    int v = 0, major, minor, patch;
    ncclGetVersion(&v);
    version_parts(v, &major, &minor, &patch);
    if (v < NCCL_OLDEST) { /* every rank loads the same library: each refuses alike, before MPI */
        if (mp_log_rank() <= 0) /* one message, from the launcher's rank 0 */
            mp_error("--comm nccl: the NCCL library loaded is %d.%d.%d; moeperf needs NCCL 2.18 or "
                     "newer (ncclCommSplit makes its tp × ep communicators): put a newer "
                     "libnccl.so.2 first on LD_LIBRARY_PATH", major, minor, patch);
        free(c);
        free(s);
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
    s->last_slot = -1;
    c->rank = s->mpi->rank;
    c->size = s->mpi->size;
    c->local_rank = s->mpi->local_rank;
    c->local_size = s->mpi->local_size;
    c->nnodes = s->mpi->nnodes;
    c->node_of = s->mpi->node_of; /* shared: freed with the MPI world */
    snprintf(s->version, sizeof s->version, "NCCL %d.%d.%d over %s", major, minor, patch,
             mp_comm_mpi.version(s->mpi));
    *out = c;
    return MP_OK;
}

/* Destroy the communicators of the current layout (the node groups before the EP one they were
 * split from). */
static void destroy_layout(struct nccl_state *s)
{
    for (int g = MP_GROUP_EP_INTRA; g < MP_GROUP_COUNT; g++)
        if (s->node[g])
            ncclCommDestroy(s->node[g]);
    memset(s->node, 0, sizeof s->node);
    if (s->ep)
        ncclCommDestroy(s->ep);
    if (s->tp)
        ncclCommDestroy(s->tp);
    s->ep = s->tp = NULL;
}

static void nccl_fini(struct mp_comm *c)
{
    if (!c)
        return;
    struct nccl_state *s = st(c);
    /* s->stream belongs to the compute backend, which synchronised and destroyed it already */
    if (s->comm_stream) {
        cudaStreamSynchronize(s->comm_stream);
        for (int i = 0; i < NCCL_SLOTS; i++) {
            cudaEventDestroy(s->ready[i]);
            cudaEventDestroy(s->done[i]);
        }
        cudaStreamDestroy(s->comm_stream);
    }
    destroy_layout(s);
    if (s->world)
        ncclCommDestroy(s->world);
    cudaFree(s->align_buf);
    mp_comm_free_node_groups(c);
    memset(s->mpi->group_exchanges, 0, sizeof s->mpi->group_exchanges); /* counted here */
    mp_comm_mpi.fini(s->mpi);
    free(s);
    free(c);
}

static void nccl_abort(struct mp_comm *c)
{
    if (c)
        abort_all(st(c));
}

static const char *nccl_version(struct mp_comm *c) { return st(c)->version; }

static int nccl_bind_device(struct mp_comm *c, void *stream, size_t elem_size)
{
    struct nccl_state *s = st(c);
    s->stream = (cudaStream_t)stream;
    s->reduce_type = elem_size == 2 ? ncclBfloat16 : ncclFloat32;
    /* the world communicator, on the device the compute backend selected */
    ncclUniqueId id;
    arm_setup(c, "NCCL communicator set-up (ncclGetUniqueId, ncclCommInitRank)");
    ncclResult_t r = c->rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    int rc = s->mpi->ops->bcast(s->mpi, &id, sizeof id);
    if (r == ncclSuccess && rc == MP_OK)
        r = ncclCommInitRank(&s->world, c->size, id, c->rank);
    mp_watchdog_disarm();
    if (rc != MP_OK)
        return rc;
    if (r != ncclSuccess) {
        mp_error("--comm nccl: setting up the world communicator (ncclGetUniqueId, "
                 "ncclCommInitRank): %s", ncclGetErrorString(r));
        return MP_ERR_RUNTIME;
    }
    /* the pipelined layer's comm stream and its events (no timing: they only order work) */
    if (cudaStreamCreateWithFlags(&s->comm_stream, cudaStreamNonBlocking) != cudaSuccess) {
        mp_error("--comm nccl: cannot create the communication stream");
        return MP_ERR_RUNTIME;
    }
    for (int i = 0; i < NCCL_SLOTS; i++)
        if (cudaEventCreateWithFlags(&s->ready[i], cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&s->done[i], cudaEventDisableTiming) != cudaSuccess) {
            mp_error("--comm nccl: cannot create the pipeline's events");
            return MP_ERR_RUNTIME;
        }
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
    destroy_layout(s);
    char step[96];
    snprintf(step, sizeof step, "NCCL communicator split (ncclCommSplit) for tp%dep%d", tp, ep);
    arm_setup(c, step);
    ncclResult_t r = ncclCommSplit(s->world, c->tp_rank, c->ep_rank, &s->ep, NULL);
    if (r == ncclSuccess)
        r = ncclCommSplit(s->world, c->ep_rank, c->tp_rank, &s->tp, NULL);
    /* the EP group's node groups, split from it as the MPI world's were (comm/mpi.c): coloured by
     * node and by local index, keyed by EP rank */
    rc = r == ncclSuccess ? mp_comm_node_groups(c) : MP_OK;
    if (r == ncclSuccess && rc == MP_OK && c->node_groups) {
        int inter_color = 0;
        for (int q = 0; q < c->ep_rank; q++)
            inter_color += c->node_of[q * tp] == c->node_of[c->ep_rank * tp];
        r = ncclCommSplit(s->ep, c->node_of[c->ep_rank * tp], c->ep_rank,
                          &s->node[MP_GROUP_EP_INTRA], NULL);
        if (r == ncclSuccess)
            r = ncclCommSplit(s->ep, inter_color, c->ep_rank, &s->node[MP_GROUP_EP_INTER], NULL);
    }
    mp_watchdog_disarm();
    if (r != ncclSuccess) {
        mp_error("--comm nccl: ncclCommSplit for tp%dep%d: %s", tp, ep, ncclGetErrorString(r));
        return MP_ERR_RUNTIME;
    }
    /* ranks and sizes as members[]: the MPI world's split checked them (comm/mpi.c) */
    s->node[MP_GROUP_EP] = s->ep;
    return rc;
}

/* The communicator of group g, or NULL after a message when the layout has no such group. */
static ncclComm_t group_comm(struct mp_comm *c, enum mp_comm_group g)
{
    if (g < 0 || g >= MP_GROUP_COUNT || !st(c)->node[g]) {
        mp_error("internal error: an exchange on the %s group, which this layout lacks",
                 g >= 0 && g < MP_GROUP_COUNT ? mp_comm_group_names[g] : "unknown");
        return NULL;
    }
    return st(c)->node[g];
}

/* The count exchange of group g over the MPI world's communicator of the same group. */
static int nccl_alltoall_int_group(struct mp_comm *c, enum mp_comm_group g, const int *send,
                                   int *recv, int n)
{
    if (!group_comm(c, g))
        return MP_ERR_RUNTIME;
    c->group_exchanges[g]++;
    return st(c)->mpi->ops->alltoall_int_group(st(c)->mpi, g, send, recv, n);
}

static int nccl_alltoall_int(struct mp_comm *c, const int *send, int *recv, int n)
{
    return nccl_alltoall_int_group(c, MP_GROUP_EP, send, recv, n);
}

/* Grouped ncclSend/ncclRecv of rows to and from every peer of group g, queued on `stream`. */
static int exchange(struct mp_comm *c, enum mp_comm_group g, const void *send, const int *scount,
                    const int *sdispl, void *recv, const int *rcount, const int *rdispl,
                    size_t row_bytes, cudaStream_t stream)
{
    ncclComm_t comm = group_comm(c, g);
    if (!comm)
        return MP_ERR_RUNTIME;
    c->group_exchanges[g]++;
    NCCLCHECK(ncclGroupStart());
    ncclResult_t r = ncclSuccess;
    for (int p = 0; p < c->group_size[g] && r == ncclSuccess; p++) {
        if (scount[p] > 0)
            r = ncclSend((const char *)send + (size_t)sdispl[p] * row_bytes,
                         (size_t)scount[p] * row_bytes, ncclUint8, p, comm, stream);
        if (r == ncclSuccess && rcount[p] > 0)
            r = ncclRecv((char *)recv + (size_t)rdispl[p] * row_bytes,
                         (size_t)rcount[p] * row_bytes, ncclUint8, p, comm, stream);
    }
    ncclResult_t end = ncclGroupEnd(); /* always close the group, or later NCCL calls join it */
    if (r == ncclSuccess)
        r = end;
    if (r != ncclSuccess) {
        mp_error("--comm nccl: grouped ncclSend/ncclRecv of the %s exchange: %s, during %s",
                 mp_comm_group_names[g], ncclGetErrorString(r), mp_watchdog_point());
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

static int nccl_alltoallv_group(struct mp_comm *c, enum mp_comm_group g, const void *send,
                                const int *scount, const int *sdispl, void *recv,
                                const int *rcount, const int *rdispl, size_t row_bytes)
{
    return exchange(c, g, send, scount, sdispl, recv, rcount, rdispl, row_bytes, st(c)->stream);
}

static int nccl_alltoallv(struct mp_comm *c, const void *send, const int *scount, const int *sdispl,
                          void *recv, const int *rcount, const int *rdispl, size_t row_bytes)
{
    return nccl_alltoallv_group(c, MP_GROUP_EP, send, scount, sdispl, recv, rcount, rdispl,
                                row_bytes);
}

/* Start an exchange on the comm stream once the compute stream has produced its data (event
 * ready[slot]); done[slot] marks its end. Neither call blocks the host. */
static int nccl_ialltoallv_group(struct mp_comm *c, enum mp_comm_group g, const void *send,
                                 const int *scount, const int *sdispl, void *recv,
                                 const int *rcount, const int *rdispl, size_t row_bytes, int slot)
{
    struct nccl_state *s = st(c);
    if (slot < 0 || slot >= NCCL_SLOTS) {
        mp_error("--comm nccl: exchange slot %d outside 0..%d", slot, NCCL_SLOTS - 1);
        return MP_ERR_RUNTIME;
    }
    if (cudaEventRecord(s->ready[slot], s->stream) != cudaSuccess ||
        cudaStreamWaitEvent(s->comm_stream, s->ready[slot], 0) != cudaSuccess) {
        mp_error("--comm nccl: cannot order exchange %d after its data", slot);
        return MP_ERR_RUNTIME;
    }
    int rc = exchange(c, g, send, scount, sdispl, recv, rcount, rdispl, row_bytes,
                      s->comm_stream);
    if (rc == MP_OK && cudaEventRecord(s->done[slot], s->comm_stream) != cudaSuccess) {
        mp_error("--comm nccl: cannot mark the end of exchange %d", slot);
        return MP_ERR_RUNTIME;
    }
    if (rc == MP_OK)
        s->last_slot = slot;
    return rc;
}

static int nccl_ialltoallv(struct mp_comm *c, const void *send, const int *scount,
                           const int *sdispl, void *recv, const int *rcount, const int *rdispl,
                           size_t row_bytes, int slot)
{
    return nccl_ialltoallv_group(c, MP_GROUP_EP, send, scount, sdispl, recv, rcount, rdispl,
                                 row_bytes, slot);
}

/* What follows on the compute stream waits for exchange `slot`; the host does not. */
static int nccl_wait(struct mp_comm *c, int slot)
{
    struct nccl_state *s = st(c);
    if (slot < 0 || slot >= NCCL_SLOTS ||
        cudaStreamWaitEvent(s->stream, s->done[slot], 0) != cudaSuccess) {
        mp_error("--comm nccl: cannot wait for exchange %d", slot);
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* The device progresses NCCL's kernels by itself. */
static void nccl_progress(struct mp_comm *c) { (void)c; }

/* Wait for both streams, polling every communicator's asynchronous error (a peer that died or a
 * network error surfaces there while the streams never finish): on an error the communicators are
 * aborted and the message names the point. A hang without an error is ended by the --timeout
 * watchdog: once it has expired, this loop aborts the communicators and ends the process. */
static int nccl_drain(struct mp_comm *c)
{
    struct nccl_state *s = st(c);
    cudaStream_t streams[2] = {s->stream, s->comm_stream};
    for (long spin = 0;; spin++) {
        int busy = 0;
        for (int i = 0; i < 2; i++) {
            if (!streams[i])
                continue;
            cudaError_t q = cudaStreamQuery(streams[i]);
            if (q == cudaErrorNotReady) {
                busy = 1;
                (void)cudaGetLastError(); /* not an error: keep it from failing the next launch check */
            } else if (q != cudaSuccess) {
                mp_error("--comm nccl: the device stream failed (%s) during %s",
                         cudaGetErrorString(q), mp_watchdog_point());
                return MP_ERR_RUNTIME;
            }
        }
        if (!busy) {
            s->last_slot = -1;
            return MP_OK;
        }
        if (mp_watchdog_expired()) { /* its message is out; abort here, in the polling thread */
            abort_all(s);
            _exit(MP_ERR_RUNTIME);
        }
        ncclComm_t comms[5] = {s->ep, s->tp, s->world, s->node[MP_GROUP_EP_INTRA],
                               s->node[MP_GROUP_EP_INTER]};
        for (int i = 0; i < 5; i++) {
            ncclResult_t r = ncclSuccess;
            if (!comms[i] || ncclCommGetAsyncError(comms[i], &r) != ncclSuccess)
                continue;
            if (r != ncclSuccess && r != ncclInProgress) {
                abort_all(s);
                mp_error("--comm nccl: NCCL reported '%s' during %s; the communicators were "
                         "aborted, completed rows are kept and --resume finishes the sweep",
                         ncclGetErrorString(r), mp_watchdog_point());
                return MP_ERR_RUNTIME;
            }
        }
        if (spin > 2000) /* short waits spin; long ones yield the core */
            usleep(spin > 200000 ? 1000 : 20);
    }
}

/* The TP allreduce on the compute stream. In a pipelined layer it first waits for the latest
 * exchange started on the comm stream: kernels of two communicators that may run at the same time
 * on a device must follow one order, the same on every rank, or they can deadlock (NCCL's "Using
 * multiple NCCL communicators concurrently"; before 2.26 NCCL does not order them itself). With
 * every exchange after its data on the compute stream, the order is the host's, on every rank. */
static int nccl_allreduce_sum(struct mp_comm *c, void *buf, size_t n)
{
    struct nccl_state *s = st(c);
    if (s->last_slot >= 0 && cudaStreamWaitEvent(s->stream, s->done[s->last_slot], 0) != cudaSuccess) {
        mp_error("--comm nccl: cannot order the TP allreduce after exchange %d", s->last_slot);
        return MP_ERR_RUNTIME;
    }
    NCCLCHECK(ncclAllReduce(buf, buf, n, s->reduce_type, ncclSum, s->tp, s->stream));
    return MP_OK;
}

/* The pipelined layer's wait for the latest exchange, queued on the compute stream on its own. */
static int nccl_join_exchanges(struct mp_comm *c)
{
    struct nccl_state *s = st(c);
    if (s->last_slot >= 0 &&
        cudaStreamWaitEvent(s->stream, s->done[s->last_slot], 0) != cudaSuccess) {
        mp_error("--comm nccl: cannot wait for exchange %d", s->last_slot);
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* The start alignment: a one-element allreduce of the world communicator on the compute stream
 * (a rank's kernels after it cannot start before every rank has queued it). */
static int nccl_align(struct mp_comm *c)
{
    struct nccl_state *s = st(c);
    if (!s->align_buf && cudaMalloc(&s->align_buf, sizeof(float)) != cudaSuccess) {
        mp_error("--comm nccl: cannot allocate the alignment's element");
        return MP_ERR_RUNTIME;
    }
    NCCLCHECK(ncclAllReduce(s->align_buf, s->align_buf, 1, ncclFloat32, ncclSum, s->world,
                            s->stream));
    return MP_OK;
}

static int nccl_barrier(struct mp_comm *c)
{
    struct nccl_state *s = st(c);
    int rc = nccl_drain(c);
    return rc == MP_OK ? s->mpi->ops->barrier(s->mpi) : rc;
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
    .memory = MP_MEMORY_DEVICE,
    .max_row_bytes = SIZE_MAX, /* NCCL counts elements in size_t */
    .init = nccl_init,
    .fini = nccl_fini,
    .abort = nccl_abort,
    .version = nccl_version,
    .split = nccl_split,
    .alltoall_int = nccl_alltoall_int,
    .alltoallv = nccl_alltoallv,
    .ialltoallv = nccl_ialltoallv,
    .alltoall_int_group = nccl_alltoall_int_group,
    .alltoallv_group = nccl_alltoallv_group,
    .ialltoallv_group = nccl_ialltoallv_group,
    .wait = nccl_wait,
    .progress = nccl_progress,
    .drain = nccl_drain,
    .allreduce_sum = nccl_allreduce_sum,
    .join_exchanges = nccl_join_exchanges,
    .barrier = nccl_barrier,
    .align = nccl_align,
    .gather = nccl_gather,
    .gatherv = nccl_gatherv,
    .bcast = nccl_bcast,
    .max_double = nccl_max_double,
    .bind_device = nccl_bind_device,
};
