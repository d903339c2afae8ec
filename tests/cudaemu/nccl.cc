/* nccl.cc - the NCCL calls of moeperf's GPU path on the CPU stand-in: communicators are MPI
 * communicators (the world one a duplicate of MPI_COMM_WORLD, splits MPI_Comm_split), a group's
 * sends and receives are non-blocking MPI calls completed together, the allreduce sums in fp32;
 * each runs when its stream does. CUDAEMU_NCCL_FAULT injects a failed or hung operation,
 * CUDAEMU_NCCL_DELAY_US a slow link. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <climits>
#include <vector>

#include "internal.h"
#include "nccl.h"

using namespace cudaemu;

struct cudaemu_nccl_comm {
    MPI_Comm mpi;
    int rank, size;
};

struct p2p {
    bool send;
    void *buf;
    size_t bytes;
    int peer;
    ncclComm_t comm;
    cudaStream_t stream;
};
static int group_depth;
static std::vector<p2p> group_ops;

/* CUDAEMU_NCCL_FAULT=error:N or hang:N: the N-th NCCL operation this process queues on a stream
 * (a group of sends and receives, one outside a group, an allreduce) never completes, as when a
 * peer or a link dies; with error, ncclCommGetAsyncError of its communicator reports
 * ncclRemoteError once its stream has reached it. ncclCommAbort of that communicator (from the
 * --timeout watchdog's thread too) drops it. A captured operation is recorded without the fault. */
static long nccl_ops, fault_at = -1;
static bool fault_error;
static ncclComm_t fault_comm;
static std::atomic<bool> fault_reached{false}, fault_aborted{false};

static void fault_setting()
{
    static bool read;
    if (read)
        return;
    read = true;
    const char *v = getenv("CUDAEMU_NCCL_FAULT");
    if (!v || !*v)
        return;
    char kind[8] = "";
    long n = 0;
    if (sscanf(v, "%7[a-z]:%ld", kind, &n) != 2 || n < 1 || (strcmp(kind, "error") && strcmp(kind, "hang")))
        fault("CUDAEMU_NCCL_FAULT=%s: error:N or hang:N, N ≥ 1 (the N-th NCCL operation)", v);
    fault_at = n;
    fault_error = !strcmp(kind, "error");
}

static void enqueue_nccl(cudaStream_t s, const char *what, ncclComm_t comm, stream_op op)
{
    fault_setting();
    if (++nccl_ops != fault_at) {
        enqueue(s, what, std::move(op));
        return;
    }
    fault_comm = comm;
    enqueue_gated(s, what, [op](cudaStream_t on) {
        if (!fault_aborted)
            op(on);
    }, [] {
        fault_reached = true;
        return fault_aborted.load();
    });
}

static size_t nccl_type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    }
    return 0;
}

/* CUDAEMU_NCCL_DELAY_US=N: every group of sends and receives (an EP exchange) takes N µs more when
 * its stream runs it, as over a slow link; the allreduce is not delayed. */
static void p2p_delay()
{
    static long us = -1;
    if (us < 0) {
        const char *v = getenv("CUDAEMU_NCCL_DELAY_US");
        char *end = nullptr;
        us = v && *v ? strtol(v, &end, 10) : 0;
        if (v && *v && (*end || us < 0))
            fault("CUDAEMU_NCCL_DELAY_US=%s: microseconds, ≥ 0", v);
    }
    if (us > 0) {
        struct timespec t = {us / 1000000, (us % 1000000) * 1000};
        while (nanosleep(&t, &t) != 0)
            ;
    }
}

static void run_p2p(std::vector<p2p> ops)
{
    p2p_delay();
    std::vector<MPI_Request> req(ops.size());
    for (size_t i = 0; i < ops.size(); i++) /* receives first, then sends, all completed together */
        if (!ops[i].send)
            MPI_Irecv(ops[i].buf, (int)ops[i].bytes, MPI_BYTE, ops[i].peer, 17, ops[i].comm->mpi, &req[i]);
    for (size_t i = 0; i < ops.size(); i++)
        if (ops[i].send)
            MPI_Isend(ops[i].buf, (int)ops[i].bytes, MPI_BYTE, ops[i].peer, 17, ops[i].comm->mpi, &req[i]);
    MPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE);
}

static ncclResult_t queue_p2p(bool send, const void *buf, size_t count, ncclDataType_t type, int peer,
                              ncclComm_t comm, cudaStream_t s)
{
    const char *call = send ? "ncclSend" : "ncclRecv";
    size_t bytes = count * nccl_type_size(type);
    if (!comm || peer < 0 || peer >= comm->size || nccl_type_size(type) == 0 || bytes > INT_MAX) {
        fprintf(stderr, "cudaemu: %s(count %zu, peer %d of %d): invalid argument\n", call, count,
                peer, comm ? comm->size : 0);
        return ncclInvalidArgument;
    }
    if (!device_range(buf, bytes))
        fault("%s: %zu bytes at %p are not in device memory", call, bytes, buf);
    p2p op = {send, (void *)buf, bytes, peer, comm, s};
    if (group_depth > 0) {
        group_ops.push_back(op);
        return ncclSuccess;
    }
    std::vector<p2p> one = {op};
    enqueue_nccl(s, call, comm, [one](cudaStream_t) { run_p2p(one); });
    return ncclSuccess;
}

extern "C" {

ncclResult_t ncclGetVersion(int *version)
{
    *version = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    snprintf(id->internal, sizeof id->internal, "cudaemu-%ld.%09ld", (long)t.tv_sec, t.tv_nsec);
    return ncclSuccess;
}

/* The world communicator only: every rank of MPI_COMM_WORLD, in its order, with rank 0's id. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    int size = 0, me = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (nranks != size || rank != me) {
        fprintf(stderr, "cudaemu: ncclCommInitRank(%d ranks, rank %d): the stand-in builds the "
                        "world communicator only (%d ranks, this is %d)\n", nranks, rank, size, me);
        return ncclInvalidUsage;
    }
    ncclUniqueId root = id;
    MPI_Bcast(&root, (int)sizeof root, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (memcmp(&root, &id, sizeof id) != 0) {
        fprintf(stderr, "cudaemu: ncclCommInitRank: rank %d has another unique id than rank 0\n", me);
        return ncclInvalidUsage;
    }
    cudaemu_nccl_comm *c = new cudaemu_nccl_comm();
    MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
    c->rank = rank;
    c->size = nranks;
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out, ncclConfig_t *config)
{
    if (!comm)
        return ncclInvalidArgument;
    MPI_Comm m;
    MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &m);
    if (m == MPI_COMM_NULL) {
        *out = nullptr;
        return ncclSuccess;
    }
    cudaemu_nccl_comm *c = new cudaemu_nccl_comm();
    c->mpi = m;
    MPI_Comm_rank(m, &c->rank);
    MPI_Comm_size(m, &c->size);
    *out = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclInvalidArgument;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
        MPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm)
        return ncclInvalidArgument;
    if (comm == fault_comm)
        fault_aborted = true;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
    if (!comm)
        return ncclInvalidArgument;
    *async = fault_error && fault_reached && comm == fault_comm && !fault_aborted ? ncclRemoteError
                                                                                  : ncclSuccess;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth <= 0)
        return ncclInvalidUsage;
    if (--group_depth > 0 || group_ops.empty())
        return ncclSuccess;
    std::vector<p2p> ops;
    ops.swap(group_ops);
    cudaStream_t s = ops[0].stream;
    for (const p2p &op : ops)
        if (op.stream != s) {
            fprintf(stderr, "cudaemu: a group of sends and receives on several streams\n");
            return ncclInvalidUsage;
        }
    enqueue_nccl(s, "ncclGroupEnd", ops[0].comm, [ops](cudaStream_t) { run_p2p(ops); });
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t s)
{
    return queue_p2p(true, buf, count, type, peer, comm, s);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t s)
{
    return queue_p2p(false, buf, count, type, peer, comm, s);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
    if (!comm || op != ncclSum || (type != ncclFloat32 && type != ncclBfloat16) || count > INT_MAX)
        return ncclInvalidArgument;
    size_t bytes = count * nccl_type_size(type);
    if (!device_range(send, bytes) || !device_range(recv, bytes))
        fault("ncclAllReduce: %zu bytes at %p or %p are not in device memory", bytes, send, recv);
    cudaDataType t = type == ncclFloat32 ? CUDA_R_32F : CUDA_R_16BF;
    enqueue_nccl(s, "ncclAllReduce", comm, [=](cudaStream_t) {
        std::vector<float> v(count);
        for (size_t i = 0; i < count; i++)
            v[i] = load(send, t, i);
        MPI_Allreduce(MPI_IN_PLACE, v.data(), (int)count, MPI_FLOAT, MPI_SUM, comm->mpi);
        for (size_t i = 0; i < count; i++)
            store(recv, t, i, v[i]);
    });
    return ncclSuccess;
}

} /* extern "C" */
