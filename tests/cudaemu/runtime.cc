/* runtime.cc - the CPU stand-in for the CUDA runtime, cuBLAS and NCCL calls moeperf's GPU path
 * makes, so the cuda and nccl backends run without a GPU: device memory is host memory kept in a
 * registry (every copy, kernel pointer and GEMM operand is checked against it), kernels run block
 * after block on the calling thread (threads of kernels that call __syncthreads as fibers), a
 * captured stream records its work into a graph that launches replay, and NCCL's communicators are
 * MPI communicators.
 *
 * Streams are queues that run as late as CUDA allows, so missing synchronisation shows: a stream's
 * work runs when the host waits for it (cudaStreamSynchronize, cudaStreamQuery, cudaEventSynchronize,
 * cudaDeviceSynchronize, a copy into pageable memory, cudaFree), or when work queued on another
 * stream waits for one of its events (cudaStreamWaitEvent), and not before. A host read of a
 * page-locked buffer that misses its synchronisation reads what was there before; a kernel on one
 * stream that misses its event wait on another runs before that stream's work; a page-locked source
 * the host rewrites before the copy ran is copied as rewritten. The device synchronisation runs the
 * streams newest first. Fresh allocations are filled with 0xff bytes (NaN in fp32 and bf16, −1 in
 * int32). Calls CUDA refuses while a stream is captured in the thread-local mode (synchronisation,
 * allocation, copies from pageable memory) invalidate the capture, as on a device. */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "nccl.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define CUDAEMU_ASAN 1
#else
#define CUDAEMU_ASAN 0
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

typedef std::function<void(cudaStream_t)> stream_op;

struct queued_op {
    long seq; /* the stream's count of operations queued, this one included */
    std::string what;
    stream_op op;
    std::function<bool()> ready; /* empty, or whether it may run now (an event wait, a fault) */
};
struct cudaemu_stream {
    std::deque<queued_op> queue; /* queued, not yet run */
    long queued;
};
struct cudaemu_event {
    unsigned flags;
    bool in_capture;
    cudaemu_stream *stream; /* the latest record (NULL: none): on this queue, its operation seq */
    long seq;
    bool done; /* that record has run, at ms */
    double ms;
};
struct cudaemu_graph {
    std::vector<std::pair<std::string, stream_op>> ops;
};
struct cudaemu_graph_exec {
    std::vector<std::pair<std::string, stream_op>> ops;
};

namespace cudaemu {

struct allocation {
    size_t bytes;
    bool pinned;
};
static std::map<uintptr_t, allocation> allocations;
static std::vector<cudaemu_stream *> streams; /* in creation order */
static cudaemu_stream legacy;
static cudaError_t last_error = cudaSuccess;
static int current_device;

/* the capture in progress (cudaStreamBeginCapture .. cudaStreamEndCapture), if any */
static cudaemu_graph *capture;
static cudaStream_t capture_origin;
static std::set<cudaStream_t> capture_streams; /* the origin and the streams that joined it */
static std::string capture_broken;             /* why the capture is invalid, or empty */

void fault(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cudaemu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
    fflush(stderr);
    abort();
}

static double now_ms()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static cudaemu_stream *obj(cudaStream_t s) { return s ? s : &legacy; }

/* The allocation holding p (p may be one past its end), or NULL. */
static const allocation *owner(const void *p, uintptr_t *base)
{
    uintptr_t a = (uintptr_t)p;
    auto it = allocations.upper_bound(a);
    if (it == allocations.begin())
        return nullptr;
    --it;
    if (a > it->first + it->second.bytes)
        return nullptr;
    if (base)
        *base = it->first;
    return &it->second;
}

bool device_range(const void *p, size_t bytes)
{
    if (bytes == 0)
        return true;
    uintptr_t base = 0;
    const allocation *al = owner(p, &base);
    return al && (uintptr_t)p + bytes <= base + al->bytes;
}

static bool is_pinned(const void *p)
{
    const allocation *al = owner(p, nullptr);
    return al && al->pinned;
}

static bool is_device(const void *p)
{
    const allocation *al = owner(p, nullptr);
    return al && !al->pinned;
}

/* A call the thread-local capture mode forbids: the capture becomes invalid, the call fails. */
static cudaError_t refuse_in_capture(const char *call)
{
    if (capture_broken.empty())
        capture_broken = call;
    fprintf(stderr, "cudaemu: %s while a stream is captured\n", call);
    return last_error = cudaErrorStreamCaptureUnsupported;
}

static bool live(cudaemu_stream *s)
{
    return s == &legacy || std::find(streams.begin(), streams.end(), s) != streams.end();
}

/* Run a stream's queued operations up to its operation number `seq` (all: LONG_MAX); false if
 * one of them cannot run yet (it waits on a stuck stream, or it is an injected NCCL fault). */
static bool run_until(cudaemu_stream *s, long seq)
{
    while (!s->queue.empty() && s->queue.front().seq <= seq) {
        if (s->queue.front().ready && !s->queue.front().ready())
            return false;
        queued_op item = std::move(s->queue.front());
        s->queue.pop_front();
        item.op(s == &legacy ? nullptr : s);
    }
    return true;
}

static bool run_all(cudaemu_stream *s) { return run_until(s, LONG_MAX); }

/* What the host does while a stream it waits for is stuck: wait, as for a device that never
 * finishes (the --timeout watchdog ends the process; ncclCommAbort from it unsticks a fault). */
static void stall() { usleep(20000); }

/* The device's synchronisation: every stream, newest first, then the legacy one. */
static void run_device()
{
    for (;;) {
        bool all = true;
        for (size_t i = streams.size(); i-- > 0;)
            all = run_all(streams[i]) && all;
        all = run_all(&legacy) && all;
        if (all)
            return;
        stall();
    }
}

/* The host waits for stream s up to its operation seq. CUDAEMU_SCHEDULE=others-first runs every
 * other stream to its end first (newest first), the opposite legal order to the default's (the
 * others only as far as s's event waits need): a wait missing in one direction between two streams
 * shows in one of the two schedules. */
static bool host_run(cudaemu_stream *s, long seq)
{
    static int others_first = -1;
    if (others_first < 0) {
        const char *v = getenv("CUDAEMU_SCHEDULE");
        if (v && strcmp(v, "others-first") != 0 && strcmp(v, "late") != 0)
            fault("CUDAEMU_SCHEDULE=%s: late (the default) or others-first", v);
        others_first = v && !strcmp(v, "others-first");
    }
    if (others_first)
        for (size_t i = streams.size(); i-- > 0;)
            if (streams[i] != s)
                run_all(streams[i]);
    return run_until(s, seq);
}

static void host_wait(cudaemu_stream *s, long seq)
{
    while (!host_run(s, seq))
        stall();
}

/* enqueue, with a condition the operation waits for on the stream (not in a captured graph) */
static void enqueue_gated(cudaStream_t s, const char *what, stream_op op, std::function<bool()> ready)
{
    if (capture && capture_streams.count(s)) {
        capture->ops.emplace_back(what, std::move(op));
        return;
    }
    if (capture && !s) {
        refuse_in_capture(what); /* the legacy stream synchronises with the captured one */
        return;
    }
    cudaemu_stream *q = obj(s);
    q->queue.push_back({++q->queued, what, std::move(op), std::move(ready)});
}

void enqueue(cudaStream_t s, const char *what, stream_op op)
{
    enqueue_gated(s, what, std::move(op), nullptr);
}

/* ---- kernels ------------------------------------------------------------------------------ */

static bool in_coop;              /* a kernel whose threads run as fibers is running */
static const char *running_kernel = "";
static void *shared_dynamic;

void *dynamic_shared(void) { return shared_dynamic; }

struct fiber {
    ucontext_t ctx;
    char *stack;
    bool done;
};
static const size_t fiber_stack = (size_t)256 << 10;
static std::vector<fiber> fibers;
static ucontext_t scheduler;
static int current_fiber;
static const std::function<void()> *fiber_body;
#if CUDAEMU_ASAN
static const void *scheduler_bottom;
static size_t scheduler_size;
#endif

static void fiber_main()
{
#if CUDAEMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &scheduler_bottom, &scheduler_size);
#endif
    (*fiber_body)();
    fibers[(size_t)current_fiber].done = true;
#if CUDAEMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, scheduler_bottom, scheduler_size);
#endif
    setcontext(&scheduler);
}

static void block_index(unsigned t, const dim3 &b, uint3 *idx)
{
    idx->x = t % b.x;
    idx->y = (t / b.x) % b.y;
    idx->z = t / (b.x * b.y);
}

/* One block whose threads synchronise: each thread a fiber; a round runs every live thread up to
 * its next __syncthreads (or its end). Threads that ended while others wait at a barrier are a
 * divergent __syncthreads, which a device may hang on: reported as a fault. */
static void run_block_fibers(unsigned nthreads, const std::function<void()> &body)
{
    if (fibers.size() < nthreads) {
        size_t old = fibers.size();
        fibers.resize(nthreads);
        for (size_t t = old; t < nthreads; t++) {
            fibers[t].stack = (char *)mmap(nullptr, fiber_stack, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (fibers[t].stack == MAP_FAILED)
                fault("no memory for the stacks of a %u-thread block", nthreads);
        }
    }
    fiber_body = &body;
    for (unsigned t = 0; t < nthreads; t++) {
        fiber &f = fibers[t];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = fiber_stack;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
        f.done = false;
    }
    in_coop = true;
    for (unsigned live = nthreads; live > 0;) {
        unsigned waiting = 0;
        for (unsigned t = 0; t < nthreads; t++) {
            if (fibers[t].done)
                continue;
            current_fiber = (int)t;
            block_index(t, blockDim, &threadIdx);
#if CUDAEMU_ASAN
            void *fake = nullptr;
            __sanitizer_start_switch_fiber(&fake, fibers[t].stack, fiber_stack);
#endif
            swapcontext(&scheduler, &fibers[t].ctx);
#if CUDAEMU_ASAN
            __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
            waiting += !fibers[t].done;
        }
        if (waiting > 0 && waiting < live)
            fault("%s, block (%u,%u,%u): %u of %u threads wait at __syncthreads while the others "
                  "have returned", running_kernel, blockIdx.x, blockIdx.y, blockIdx.z, waiting, live);
        live = waiting;
    }
    in_coop = false;
}

cudaError_t launch(const char *name, bool coop, dim3 grid, dim3 block, size_t shmem, cudaStream_t s,
                   size_t param_bytes, const void *const *ptrs, int nptrs, std::function<void()> body)
{
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr, "cudaemu: %s<<<(%u,%u,%u), (%u,%u,%u)>>>: invalid configuration\n", name,
                grid.x, grid.y, grid.z, block.x, block.y, block.z);
        return last_error = cudaErrorInvalidConfiguration;
    }
    if (shmem > 48 * 1024) {
        fprintf(stderr, "cudaemu: %s: %zu bytes of dynamic shared memory (48 KiB without opting in)\n",
                name, shmem);
        return last_error = cudaErrorInvalidValue;
    }
    if (param_bytes > 32764)
        fault("%s: %zu bytes of parameters (at most 32764)", name, param_bytes);
    for (int i = 0; i < nptrs; i++)
        if (ptrs[i] && !owner(ptrs[i], nullptr))
            fault("%s: pointer argument %d (%p) is neither device nor page-locked host memory", name,
                  i, ptrs[i]);
    enqueue(s, name, [=](cudaStream_t) {
        running_kernel = name;
        gridDim = grid;
        blockDim = block;
        for (unsigned z = 0; z < grid.z; z++)
            for (unsigned y = 0; y < grid.y; y++)
                for (unsigned x = 0; x < grid.x; x++) {
                    blockIdx = {x, y, z};
                    /* each block's dynamic shared memory is fresh, NaN-filled, exactly sized */
                    shared_dynamic = shmem ? malloc(shmem) : nullptr;
                    if (shmem)
                        memset(shared_dynamic, 0xff, shmem);
                    if (coop) {
                        run_block_fibers((unsigned)threads, body);
                    } else {
                        for (unsigned t = 0; t < threads; t++) {
                            block_index(t, block, &threadIdx);
                            body();
                        }
                    }
                    free(shared_dynamic);
                    shared_dynamic = nullptr;
                }
    });
    return cudaSuccess;
}

} // namespace cudaemu

using namespace cudaemu;

void __syncthreads(void)
{
    if (!in_coop)
        fault("%s calls __syncthreads but was launched as a kernel that does not (rewrite.py)",
              running_kernel);
    fiber &f = fibers[(size_t)current_fiber];
#if CUDAEMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, scheduler_bottom, scheduler_size);
#endif
    swapcontext(&f.ctx, &scheduler);
#if CUDAEMU_ASAN
    __sanitizer_finish_switch_fiber(fake, &scheduler_bottom, &scheduler_size);
#endif
}

/* ---- the runtime API ---------------------------------------------------------------------- */

extern "C" {

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread: return "operation is not permitted on this thread";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

static int device_count()
{
    const char *v = getenv("CUDAEMU_DEVICES");
    int n = v ? atoi(v) : 8;
    return n < 0 ? 0 : n;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = device_count();
    return *n > 0 ? cudaSuccess : (last_error = cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int d)
{
    if (d < 0 || d >= device_count())
        return last_error = cudaErrorInvalidDevice;
    current_device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    *d = current_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d < 0 || d >= device_count())
        return last_error = cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cudaemu CPU stand-in");
    p->totalGlobalMem = (size_t)80 << 30;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    p->pciBusID = 0x10 + d;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d)
{
    if (d < 0 || d >= device_count() || len < 13)
        return last_error = cudaErrorInvalidValue;
    snprintf(bus, (size_t)len, "0000:%02X:00.0", 0x10 + d);
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (capture)
        return refuse_in_capture("cudaDeviceSynchronize");
    run_device();
    return cudaSuccess;
}

/* The largest copy or memset performed; larger ones (the roofline's 1 GiB copy) are checked and
 * timed but not performed, so the stand-in's memory stays small. */
static const size_t bulk_max = (size_t)256 << 20;

static bool bulk_skipped(const char *call, size_t bytes)
{
    if (bytes <= bulk_max)
        return false;
    static int told;
    if (!told++)
        fprintf(stderr, "cudaemu: copies and memsets over 256 MiB (%s of %zu bytes) are not "
                        "performed\n", call, bytes);
    return true;
}

static cudaError_t allocate(void **p, size_t bytes, bool pinned, const char *call)
{
    if (capture)
        return refuse_in_capture(call);
    *p = nullptr;
    if (posix_memalign(p, 256, bytes ? bytes : 1) != 0)
        return last_error = cudaErrorMemoryAllocation;
    if (bytes <= bulk_max) /* fresh memory reads as NaN (or −1) */
        memset(*p, 0xff, bytes);
    allocations[(uintptr_t)*p] = {bytes, pinned};
    return cudaSuccess;
}

static cudaError_t release(void *p, bool pinned, const char *call)
{
    if (!p)
        return cudaSuccess;
    if (capture)
        return refuse_in_capture(call);
    run_device(); /* freeing waits for the device, as on one */
    auto it = allocations.find((uintptr_t)p);
    if (it == allocations.end() || it->second.pinned != pinned) {
        fprintf(stderr, "cudaemu: %s(%p): not an allocation of %s\n", call, p,
                pinned ? "cudaMallocHost" : "cudaMalloc");
        return last_error = cudaErrorInvalidValue;
    }
    allocations.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) { return allocate(p, bytes, false, "cudaMalloc"); }
cudaError_t cudaFree(void *p) { return release(p, false, "cudaFree"); }
cudaError_t cudaMallocHost(void **p, size_t bytes) { return allocate(p, bytes, true, "cudaMallocHost"); }
cudaError_t cudaFreeHost(void *p) { return release(p, true, "cudaFreeHost"); }

static const char *kind_name(enum cudaMemcpyKind k)
{
    static const char *names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice",
                                  "Default"};
    return (unsigned)k <= 4 ? names[k] : "?";
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
    if (bytes == 0)
        return cudaSuccess;
    if (kind == cudaMemcpyDefault)
        kind = (enum cudaMemcpyKind)((owner(src, nullptr) ? 2 : 0) + (owner(dst, nullptr) ? 1 : 0));
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const char *bad = nullptr;
    if (src_dev && !device_range(src, bytes))
        bad = "the source is not a device range of that size";
    else if (dst_dev && !device_range(dst, bytes))
        bad = "the destination is not a device range of that size";
    else if (!src_dev && is_device(src))
        bad = "the source is device memory";
    else if (!dst_dev && is_device(dst))
        bad = "the destination is device memory";
    if (bad) {
        fprintf(stderr, "cudaemu: cudaMemcpyAsync(%p, %p, %zu, %s): %s\n", dst, src, bytes,
                kind_name(kind), bad);
        return last_error = cudaErrorInvalidValue;
    }
    if (capture && capture_streams.count(s) &&
        ((!src_dev && !is_pinned(src)) || (!dst_dev && !is_pinned(dst))))
        return refuse_in_capture("cudaMemcpyAsync with pageable host memory");
    if (bulk_skipped("cudaMemcpyAsync", bytes))
        return cudaSuccess;
    if (!src_dev && !is_pinned(src)) { /* pageable source: staged now, the caller may reuse it */
        auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + bytes);
        enqueue(s, "cudaMemcpyAsync", [=](cudaStream_t) { memcpy(dst, staged->data(), bytes); });
    } else {
        enqueue(s, "cudaMemcpyAsync", [=](cudaStream_t) { memmove(dst, src, bytes); });
    }
    if (!dst_dev && !is_pinned(dst) && !(capture && capture_streams.count(s)))
        host_wait(obj(s), LONG_MAX); /* into pageable memory: the call returns once it is done */
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    if (capture)
        return refuse_in_capture("cudaMemcpy");
    run_device();
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
    run_device();
    return e;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    if (!device_range(p, bytes)) {
        fprintf(stderr, "cudaemu: cudaMemsetAsync(%p, %d, %zu): not a device range of that size\n",
                p, value, bytes);
        return last_error = cudaErrorInvalidValue;
    }
    if (bulk_skipped("cudaMemsetAsync", bytes))
        return cudaSuccess;
    enqueue(s, "cudaMemsetAsync", [=](cudaStream_t) { memset(p, value, bytes); });
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    *s = new cudaemu_stream();
    streams.push_back(*s);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    auto it = std::find(streams.begin(), streams.end(), s);
    if (!s || it == streams.end())
        return last_error = cudaErrorInvalidResourceHandle;
    run_all(s); /* its work completes, as on a device */
    streams.erase(it);
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (capture)
        return refuse_in_capture("cudaStreamSynchronize");
    host_wait(obj(s), LONG_MAX);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    if (capture && capture_streams.count(s))
        return refuse_in_capture("cudaStreamQuery");
    if (obj(s)->queue.empty())
        return cudaSuccess;
    host_run(obj(s), LONG_MAX); /* busy now; done by the next query unless stuck */
    return cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    if (!e)
        return last_error = cudaErrorInvalidResourceHandle;
    if (capture && e->in_capture) {
        capture_streams.insert(s); /* s joins the capture; the graph replays in queue order */
        return cudaSuccess;
    }
    cudaemu_stream *on = e->stream; /* NULL: never recorded */
    long seq = e->seq;
    if (on && on != obj(s)) /* the record as it is now; a never-recorded event is no wait */
        enqueue_gated(s, "cudaStreamWaitEvent", [](cudaStream_t) {}, [on, seq] {
            static int depth; /* streams that wait on each other would recurse for ever */
            if (++depth > 256)
                fault("streams wait on each other's events in a cycle: a device deadlocks");
            bool reached = !live(on) || run_until(on, seq);
            depth--;
            return reached;
        });
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    if (capture || !s)
        return last_error = cudaErrorInvalidValue;
    capture = new cudaemu_graph();
    capture_origin = s;
    capture_streams = {s};
    capture_broken.clear();
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    if (!capture || s != capture_origin)
        return last_error = cudaErrorInvalidValue;
    cudaemu_graph *done = capture;
    capture = nullptr;
    capture_streams.clear();
    if (!capture_broken.empty()) {
        delete done;
        *g = nullptr;
        return last_error = cudaErrorStreamCaptureInvalidated;
    }
    *g = done;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    *e = new cudaemu_event();
    (*e)->flags = flags;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned flags)
{
    if (!e)
        return last_error = cudaErrorInvalidResourceHandle;
    if (capture && capture_streams.count(s)) {
        e->in_capture = true;
        if (flags & cudaEventRecordExternal) /* a node: each replay records it where it runs */
            capture->ops.emplace_back("cudaEventRecord", [e](cudaStream_t on) {
                e->in_capture = false;
                e->stream = obj(on);
                e->seq = LONG_MAX;
                e->done = true;
                e->ms = now_ms();
            });
        return cudaSuccess;
    }
    if (capture && !s)
        return refuse_in_capture("cudaEventRecord on the legacy stream");
    cudaemu_stream *q = obj(s);
    long seq = q->queued + 1;
    e->in_capture = false;
    e->stream = q;
    e->seq = seq;
    e->done = false;
    enqueue(s, "cudaEventRecord", [e, seq](cudaStream_t) {
        if (e->seq == seq) { /* not recorded again since */
            e->done = true;
            e->ms = now_ms();
        }
    });
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return cudaEventRecordWithFlags(e, s, 0); }

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!e)
        return last_error = cudaErrorInvalidResourceHandle;
    if (capture)
        return refuse_in_capture("cudaEventSynchronize");
    if (e->stream && live(e->stream))
        host_wait(e->stream, e->seq);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!a || !b || (a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming))
        return last_error = cudaErrorInvalidResourceHandle;
    if (!a->done || !b->done) /* never recorded, or its record has not run */
        return last_error = cudaErrorNotReady;
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags)
{
    if (!g)
        return last_error = cudaErrorInvalidValue;
    *x = new cudaemu_graph_exec();
    (*x)->ops = g->ops;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s)
{
    if (!x)
        return last_error = cudaErrorInvalidValue;
    for (auto &op : x->ops)
        enqueue(s, op.first.c_str(), op.second);
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    delete x;
    return cudaSuccess;
}

/* ---- cuBLAS ------------------------------------------------------------------------------- */

} /* extern "C" */

struct cudaemu_blas {
    cudaStream_t stream;
};

/* The largest GEMM (multiply-adds) computed; larger ones (the roofline's 8192³) are checked and
 * timed but leave their output as it was, which nothing reads. */
static const double gemm_max_work = 4294967296.0;

static size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static float load(const void *p, cudaDataType t, size_t i)
{
    return t == CUDA_R_32F ? ((const float *)p)[i] : __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

static void store(void *p, cudaDataType t, size_t i, float v)
{
    if (t == CUDA_R_32F)
        ((float *)p)[i] = v;
    else
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
}

struct gemm_problem {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const void *A, *B;
    void *C;
    cudaDataType At, Bt, Ct;
};

/* cuBLAS's argument checks for one column-major problem C = α·op(A)·op(B) + β·C. */
static cublasStatus_t gemm_check(const gemm_problem &g, const char *call)
{
    auto at_least = [](int v) { return v > 1 ? v : 1; };
    const char *bad = nullptr;
    if (g.m < 0 || g.n < 0 || g.k < 0)
        bad = "a negative size";
    else if ((g.ta != CUBLAS_OP_N && g.ta != CUBLAS_OP_T) || (g.tb != CUBLAS_OP_N && g.tb != CUBLAS_OP_T))
        bad = "an operation other than N or T";
    else if (g.lda < at_least(g.ta == CUBLAS_OP_N ? g.m : g.k))
        bad = "lda below the rows of A";
    else if (g.ldb < at_least(g.tb == CUBLAS_OP_N ? g.k : g.n))
        bad = "ldb below the rows of B";
    else if (g.ldc < at_least(g.m))
        bad = "ldc below the rows of C";
    if (bad) {
        fprintf(stderr, "cudaemu: %s(m=%d n=%d k=%d lda=%d ldb=%d ldc=%d): %s\n", call, g.m, g.n, g.k,
                g.lda, g.ldb, g.ldc, bad);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (g.At != g.Bt || (g.At != CUDA_R_16BF && g.At != CUDA_R_32F) ||
        (g.Ct != CUDA_R_16BF && g.Ct != CUDA_R_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

/* Bytes a column-major operand of rows × cols with leading dimension ld spans. */
static size_t span(int rows, int cols, int ld, cudaDataType t)
{
    return rows > 0 && cols > 0 ? ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * type_size(t) : 0;
}

static void gemm_operands_in_device(const gemm_problem &g, const char *call)
{
    bool an = g.ta == CUBLAS_OP_N, bn = g.tb == CUBLAS_OP_N;
    if (!device_range(g.A, span(an ? g.m : g.k, an ? g.k : g.m, g.lda, g.At)))
        fault("%s: A (%p, %d×%d, lda %d) is not in device memory", call, g.A, an ? g.m : g.k,
              an ? g.k : g.m, g.lda);
    if (!device_range(g.B, span(bn ? g.k : g.n, bn ? g.n : g.k, g.ldb, g.Bt)))
        fault("%s: B (%p, %d×%d, ldb %d) is not in device memory", call, g.B, bn ? g.k : g.n,
              bn ? g.n : g.k, g.ldb);
    if (!device_range(g.C, span(g.m, g.n, g.ldc, g.Ct)))
        fault("%s: C (%p, %d×%d, ldc %d) is not in device memory", call, g.C, g.m, g.n, g.ldc);
}

static void gemm_run(const gemm_problem &g)
{
    if (g.m == 0 || g.n == 0)
        return;
    if ((double)g.m * g.n * g.k > gemm_max_work) {
        static int told;
        if (!told++)
            fprintf(stderr, "cudaemu: GEMMs over 2^32 multiply-adds (%d×%d×%d) are not computed; "
                            "their output is left as it was\n", g.m, g.n, g.k);
        return;
    }
    size_t m = (size_t)g.m, n = (size_t)g.n, k = (size_t)g.k;
    std::vector<float> a(m * k), bt(n * k); /* op(A) by rows, op(B) by columns */
    for (size_t i = 0; i < m; i++)
        for (size_t p = 0; p < k; p++)
            a[i * k + p] = load(g.A, g.At, g.ta == CUBLAS_OP_N ? i + p * (size_t)g.lda : p + i * (size_t)g.lda);
    for (size_t j = 0; j < n; j++)
        for (size_t p = 0; p < k; p++)
            bt[j * k + p] = load(g.B, g.Bt, g.tb == CUBLAS_OP_N ? p + j * (size_t)g.ldb : j + p * (size_t)g.ldb);
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < m; i++) {
            float acc = 0;
            const float *x = &a[i * k], *y = &bt[j * k];
            for (size_t p = 0; p < k; p++)
                acc += x[p] * y[p];
            size_t c = i + j * (size_t)g.ldc;
            float v = g.alpha * acc; /* β = 0: C is not read (it may hold anything) */
            if (g.beta != 0.0f)
                v += g.beta * load(g.C, g.Ct, c);
            store(g.C, g.Ct, c, v);
        }
}

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new cudaemu_blas();
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
    if (!device_range(ws, bytes))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda,
                            const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (compute != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    gemm_problem g = {ta, tb, m, n, k, lda, ldb, ldc, *(const float *)alpha, *(const float *)beta,
                      A, B, C, Atype, Btype, Ctype};
    cublasStatus_t st = gemm_check(g, "cublasGemmEx");
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    gemm_operands_in_device(g, "cublasGemmEx");
    enqueue(h->stream, "cublasGemmEx", [g](cudaStream_t) { gemm_run(g); });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmGroupedBatchedEx(
    cublasHandle_t h, const cublasOperation_t ta[], const cublasOperation_t tb[], const int m[],
    const int n[], const int k[], const void *alpha, const void *const A[], cudaDataType_t Atype,
    const int lda[], const void *const B[], cudaDataType_t Btype, const int ldb[], const void *beta,
    void *const C[], cudaDataType_t Ctype, const int ldc[], int groups, const int group_size[],
    cublasComputeType_t compute)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (compute != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (groups < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    /* the host arrays are read now; the device pointer arrays when the GEMMs run */
    std::vector<gemm_problem> problems;
    for (int gi = 0; gi < groups; gi++) {
        if (group_size[gi] < 0)
            return CUBLAS_STATUS_INVALID_VALUE;
        gemm_problem g = {ta[gi], tb[gi], m[gi], n[gi], k[gi], lda[gi], ldb[gi], ldc[gi],
                          ((const float *)alpha)[gi], ((const float *)beta)[gi], nullptr, nullptr,
                          nullptr, Atype, Btype, Ctype};
        cublasStatus_t st = gemm_check(g, "cublasGemmGroupedBatchedEx");
        if (st != CUBLAS_STATUS_SUCCESS)
            return st;
        for (int j = 0; j < group_size[gi]; j++)
            problems.push_back(g);
    }
    size_t total = problems.size();
    if (!device_range(A, total * sizeof(void *)) || !device_range(B, total * sizeof(void *)) ||
        !device_range(C, total * sizeof(void *)))
        fault("cublasGemmGroupedBatchedEx: the pointer arrays of %zu problems are not in device "
              "memory", total);
    enqueue(h->stream, "cublasGemmGroupedBatchedEx", [problems, A, B, C](cudaStream_t) mutable {
        for (size_t i = 0; i < problems.size(); i++) {
            problems[i].A = A[i];
            problems[i].B = B[i];
            problems[i].C = C[i];
            gemm_operands_in_device(problems[i], "cublasGemmGroupedBatchedEx");
            gemm_run(problems[i]);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- NCCL --------------------------------------------------------------------------------- */

} /* extern "C" */

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

static void run_p2p(std::vector<p2p> ops)
{
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
