/* nccl.cc - the NCCL calls of moeperf's GPU path on the CPU stand-in: communicators are MPI
 * communicators (the world one a duplicate of MPI_COMM_WORLD, splits MPI_Comm_split), a group's
 * sends and receives are non-blocking MPI calls completed together, the allreduce sums in fp32;
 * each runs when its stream does. CUDAEMU_NCCL_FAULT injects a failed or hung operation.
 *
 * As NCCL: ncclCommInitRank refuses two ranks on one GPU of one host (the host told by
 * NCCL_HOSTID when set, else the host name), ncclCommAbort and ncclCommDestroy free the
 * communicator (a later use of the handle is caught), and a communicator's queued operations end
 * when it is aborted. CUDAEMU_NCCL_VERSION=M.m.p makes ncclGetVersion report another version.
 * CUDAEMU_TRACE=1 prints, when MPI_Init starts, which device is current and whether it was chosen
 * (an MPI built with GPU support makes a context there). CUDAEMU_NCCL_DELAY_US makes a slow link. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <vector>

#include "internal.h"
#include "nccl.h"

using namespace cudaemu;

struct cudaemu_nccl_comm {
    MPI_Comm mpi;
    int rank, size;
    bool freed;   /* by ncclCommAbort or ncclCommDestroy: the handle must not be used again */
    bool aborted; /* by ncclCommAbort: its queued operations end without running */
};

/* Freed communicators stay allocated, and reachable, so a later use of a handle is caught
 * (an address is never handed out twice) and no leak is reported. */
static std::vector<cudaemu_nccl_comm *> *freed_comms = new std::vector<cudaemu_nccl_comm *>();

/* Whether `comm` may be used by `call`: NULL is an invalid argument; a freed one is a fault. */
static bool usable(ncclComm_t comm, const char *call)
{
    if (!comm)
        return false;
    if (comm->freed)
        fault("%s: communicator %p used after %s freed it", call, (void *)comm,
              comm->aborted ? "ncclCommAbort" : "ncclCommDestroy");
    return true;
}

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

/* CUDAEMU_NCCL_FAULT=KIND:N[@R], with @R on world rank R only. KIND error, hang or fail: the N-th
 * NCCL operation this process queues on a stream (a group of sends and receives, one outside a
 * group, an allreduce) never completes, as when a peer or a link dies. With error,
 * ncclCommGetAsyncError of its communicator reports ncclRemoteError once its stream has reached
 * it; with fail at once, and every later call on that communicator returns it (as NCCL returns a
 * communicator's asynchronous error from the next call), so the rank fails with the operation
 * still queued. ncclCommAbort of that communicator drops it. A captured operation is recorded
 * without the fault. KIND bootstrap: the N-th ncclCommInitRank or ncclCommSplit call never
 * returns, as when bootstrap connects over an interface that does not reach the peers. */
static long nccl_ops, fault_at = -1, setups;
static bool fault_error, fault_fail, fault_bootstrap;
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
    char kind[16] = "";
    long n = 0;
    int only = -1, got = sscanf(v, "%15[a-z]:%ld@%d", kind, &n, &only);
    if (got < 2 || n < 1 || (got == 3 && only < 0) ||
        (strcmp(kind, "error") && strcmp(kind, "hang") && strcmp(kind, "fail") &&
         strcmp(kind, "bootstrap")))
        fault("CUDAEMU_NCCL_FAULT=%s: error:N, hang:N, fail:N or bootstrap:N, N ≥ 1 (the N-th "
              "NCCL operation or communicator set-up), then @R for world rank R only", v);
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (only >= 0 && only != me)
        return;
    fault_at = n;
    fault_error = !strcmp(kind, "error");
    fault_fail = !strcmp(kind, "fail");
    fault_bootstrap = !strcmp(kind, "bootstrap");
}

/* Count a communicator set-up; a bootstrap fault never returns from its. */
static void bootstrap_step()
{
    fault_setting();
    if (fault_bootstrap && ++setups == fault_at)
        for (;;)
            sleep(1);
}

/* What a call on `comm` returns while a fail fault has struck it. */
static ncclResult_t fault_result(ncclComm_t comm)
{
    return fault_fail && fault_reached && comm == fault_comm && !fault_aborted ? ncclRemoteError
                                                                              : ncclSuccess;
}

static void enqueue_nccl(cudaStream_t s, const char *what, ncclComm_t comm, stream_op op)
{
    fault_setting();
    if (fault_bootstrap || ++nccl_ops != fault_at) {
        enqueue(s, what, std::move(op));
        return;
    }
    fault_comm = comm;
    if (fault_fail)
        fault_reached = true;
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

/* Complete n requests as MPI_Waitall does, but without holding a core while a peer is late: after
 * a short spin each further test comes after a 50 µs sleep. A GPU's host thread waits for NCCL
 * without spinning either; and the stand-in's ranks usually outnumber the cores, where a spinning
 * rank takes the core its peer needs to reach the exchange. */
static void wait_all(int n, MPI_Request *req)
{
    for (int spin = 0;; spin++) {
        int done = 0;
        MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (done)
            return;
        if (spin >= 100) {
            struct timespec t = {0, 50 * 1000};
            nanosleep(&t, nullptr);
        }
    }
}

static void run_p2p(std::vector<p2p> ops)
{
    if (ops[0].comm->aborted) /* ncclCommAbort ends what was queued */
        return;
    p2p_delay();
    std::vector<MPI_Request> req(ops.size());
    for (size_t i = 0; i < ops.size(); i++) /* receives first, then sends, all completed together */
        if (!ops[i].send)
            MPI_Irecv(ops[i].buf, (int)ops[i].bytes, MPI_BYTE, ops[i].peer, 17, ops[i].comm->mpi, &req[i]);
    for (size_t i = 0; i < ops.size(); i++)
        if (ops[i].send)
            MPI_Isend(ops[i].buf, (int)ops[i].bytes, MPI_BYTE, ops[i].peer, 17, ops[i].comm->mpi, &req[i]);
    wait_all((int)req.size(), req.data());
}

static ncclResult_t queue_p2p(bool send, const void *buf, size_t count, ncclDataType_t type, int peer,
                              ncclComm_t comm, cudaStream_t s)
{
    const char *call = send ? "ncclSend" : "ncclRecv";
    size_t bytes = count * nccl_type_size(type);
    if (usable(comm, call) && fault_result(comm) != ncclSuccess)
        return fault_result(comm);
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
    const char *v = getenv("CUDAEMU_NCCL_VERSION");
    int major, minor, patch;
    if (v && *v) {
        if (sscanf(v, "%d.%d.%d", &major, &minor, &patch) != 3 || major < 2 || minor < 0 ||
            minor > 99 || patch < 0 || patch > 99)
            fault("CUDAEMU_NCCL_VERSION=%s: MAJOR.MINOR.PATCH, 2.x.y", v);
        /* NCCL's code: major·1000 + minor·100 + patch before 2.9, major·10000 + … since */
        *version = major * (minor < 9 && major == 2 ? 1000 : 10000) + minor * 100 + patch;
    }
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
    bootstrap_step();
    ncclUniqueId root = id;
    MPI_Bcast(&root, (int)sizeof root, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (memcmp(&root, &id, sizeof id) != 0) {
        fprintf(stderr, "cudaemu: ncclCommInitRank: rank %d has another unique id than rank 0\n", me);
        return ncclInvalidUsage;
    }
    /* NCCL runs one rank per GPU: its host hash (NCCL_HOSTID, else the host) and bus id */
    struct gpu_of_rank {
        char host[128];
        int device;
    } mine, *all = new gpu_of_rank[size];
    memset(&mine, 0, sizeof mine);
    const char *hostid = getenv("NCCL_HOSTID");
    if (hostid && *hostid)
        snprintf(mine.host, sizeof mine.host, "%s", hostid);
    else
        gethostname(mine.host, sizeof mine.host - 1);
    mine.device = current_device();
    MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        if (r != me && all[r].device == mine.device && !strcmp(all[r].host, mine.host)) {
            fprintf(stderr, "cudaemu: ncclCommInitRank: Duplicate GPU detected: rank %d and rank %d "
                            "both on CUDA device %d (host hash %s)\n", me, r, mine.device, mine.host);
            delete[] all;
            return ncclInvalidUsage;
        }
    delete[] all;
    cudaemu_nccl_comm *c = new cudaemu_nccl_comm();
    MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
    c->rank = rank;
    c->size = nranks;
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out, ncclConfig_t *config)
{
    if (!usable(comm, "ncclCommSplit"))
        return ncclInvalidArgument;
    bootstrap_step();
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

/* Free a communicator as NCCL does: its handle is dead from now on. */
static void free_comm(ncclComm_t comm, bool aborted)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
        MPI_Comm_free(&comm->mpi);
    comm->freed = true;
    comm->aborted = aborted;
    freed_comms->push_back(comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!usable(comm, "ncclCommDestroy"))
        return ncclInvalidArgument;
    free_comm(comm, false);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!usable(comm, "ncclCommAbort"))
        return ncclInvalidArgument;
    if (comm == fault_comm)
        fault_aborted = true;
    free_comm(comm, true);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
    if (!usable(comm, "ncclCommGetAsyncError"))
        return ncclInvalidArgument;
    bool failed = (fault_error || fault_fail) && fault_reached && comm == fault_comm && !fault_aborted;
    *async = failed ? ncclRemoteError : ncclSuccess;
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
    if (usable(comm, "ncclAllReduce") && fault_result(comm) != ncclSuccess)
        return fault_result(comm);
    if (!comm || op != ncclSum || (type != ncclFloat32 && type != ncclBfloat16) || count > INT_MAX)
        return ncclInvalidArgument;
    size_t bytes = count * nccl_type_size(type);
    if (!device_range(send, bytes) || !device_range(recv, bytes))
        fault("ncclAllReduce: %zu bytes at %p or %p are not in device memory", bytes, send, recv);
    cudaDataType t = type == ncclFloat32 ? CUDA_R_32F : CUDA_R_16BF;
    enqueue_nccl(s, "ncclAllReduce", comm, [=](cudaStream_t) {
        if (comm->aborted) /* ncclCommAbort ends what was queued */
            return;
        std::vector<float> v(count);
        for (size_t i = 0; i < count; i++)
            v[i] = load(send, t, i);
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, v.data(), (int)count, MPI_FLOAT, MPI_SUM, comm->mpi, &r);
        wait_all(1, &r);
        for (size_t i = 0; i < count; i++)
            store(recv, t, i, v[i]);
    });
    return ncclSuccess;
}

/* MPI_Init and MPI_Init_thread, through MPI's profiling interface: with CUDAEMU_TRACE=1 say which
 * device is current as MPI starts, and whether cudaSetDevice chose it. */
static void trace_mpi_init(const char *call)
{
    const char *t = getenv("CUDAEMU_TRACE");
    if (!t || strcmp(t, "1") != 0)
        return;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    fprintf(stderr, "cudaemu: %s with device %d current (%s; launcher local rank %s)\n", call,
            current_device(), device_chosen() ? "chosen by cudaSetDevice" : "never chosen",
            lr ? lr : "unknown");
}

int MPI_Init(int *argc, char ***argv)
{
    trace_mpi_init("MPI_Init");
    return PMPI_Init(argc, argv);
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    trace_mpi_init("MPI_Init_thread");
    return PMPI_Init_thread(argc, argv, required, provided);
}

} /* extern "C" */
