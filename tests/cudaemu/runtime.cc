/* runtime.cc - the CPU stand-in for the CUDA runtime calls moeperf's GPU path makes (kernels.cc,
 * cublas.cc, cublaslt.cc and nccl.cc hold the rest), so the cuda and nccl backends run without a GPU: device
 * memory is host memory kept in a registry (every copy, kernel pointer and GEMM operand is checked
 * against it) and counted against each device's emulated size (CUDAEMU_DEVICE_MEMORY:
 * cudaMemGetInfo reports it, cudaMalloc refuses beyond it), and a captured stream records its work
 * into a graph that launches replay.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "internal.h"

using cudaemu::stream_op;

struct queued_op {
    long seq; /* the stream's count of operations queued, this one included */
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
    int device; /* the device current when it was made (device memory only) */
};
static std::map<uintptr_t, allocation> allocations;
static std::vector<cudaemu_stream *> streams; /* in creation order */
static cudaemu_stream legacy;
static cudaError_t last_error = cudaSuccess;
static int device_now;
static bool device_set;

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

void enqueue_gated(cudaStream_t s, const char *what, stream_op op, std::function<bool()> ready)
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
    q->queue.push_back({++q->queued, std::move(op), std::move(ready)});
}

void enqueue(cudaStream_t s, const char *what, stream_op op)
{
    enqueue_gated(s, what, std::move(op), nullptr);
}

bool allocated(const void *p) { return owner(p, nullptr) != nullptr; }

cudaError_t set_error(cudaError_t e) { return last_error = e; }

int current_device() { return device_now; }
bool device_chosen() { return device_set; }

} // namespace cudaemu

using namespace cudaemu;

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
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
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
    device_now = d;
    device_set = true;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    *d = device_now;
    return cudaSuccess;
}

/* The emulated memory of device d: CUDAEMU_DEVICE_MEMORY in bytes, with a K, M, G or T suffix
 * (powers of 1000), one value for every device or a comma-separated list whose entry d is device
 * d's (the last entry repeats); 141 GB, an H200's, when unset. */
static size_t device_memory(int d)
{
    const char *v = getenv("CUDAEMU_DEVICE_MEMORY");
    if (!v || !*v)
        return (size_t)141e9;
    double bytes = -1;
    for (int i = 0; i <= d && *v; i++) {
        char *end;
        bytes = strtod(v, &end);
        double unit = 1;
        switch (*end) {
        case 'K': unit = 1e3; end++; break;
        case 'M': unit = 1e6; end++; break;
        case 'G': unit = 1e9; end++; break;
        case 'T': unit = 1e12; end++; break;
        }
        if (end == v || bytes < 0 || (*end && *end != ','))
            fault("CUDAEMU_DEVICE_MEMORY=%s: bytes with an optional K/M/G/T suffix, "
                  "comma-separated per device", getenv("CUDAEMU_DEVICE_MEMORY"));
        bytes *= unit;
        v = *end ? end + 1 : end;
    }
    return (size_t)bytes;
}

/* Device memory allocated on device d. */
static size_t device_allocated(int d)
{
    size_t n = 0;
    for (const auto &a : allocations)
        if (!a.second.pinned && a.second.device == d)
            n += a.second.bytes;
    return n;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    if (!free_bytes || !total_bytes)
        return last_error = cudaErrorInvalidValue;
    size_t total = device_memory(device_now), used = device_allocated(device_now);
    *total_bytes = total;
    *free_bytes = used < total ? total - used : 0;
    return cudaSuccess;
}

/* as an H100 or H200 (sm_90): 132 SMs, so grids sized from them split as there, and 50 MiB of L2 */
#define STANDIN_SMS 132
#define STANDIN_L2_BYTES (50 << 20)

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d < 0 || d >= device_count())
        return last_error = cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cudaemu CPU stand-in");
    p->totalGlobalMem = device_memory(d);
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = STANDIN_SMS;
    p->l2CacheSize = STANDIN_L2_BYTES;
    p->pciBusID = 0x10 + d;
    return cudaSuccess;
}

/* The attributes of cudaDeviceProp above that moeperf reads one at a time; as CUDA, an invalid
 * device is cudaErrorInvalidDevice and an attribute it does not know (here: one the stand-in
 * does not answer) cudaErrorInvalidValue, with *value untouched. */
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int d)
{
    if (!value)
        return last_error = cudaErrorInvalidValue;
    if (d < 0 || d >= device_count())
        return last_error = cudaErrorInvalidDevice;
    switch ((int)attr) {
    case cudaDevAttrMultiProcessorCount: *value = STANDIN_SMS; return cudaSuccess;
    case cudaDevAttrL2CacheSize: *value = STANDIN_L2_BYTES; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    }
    return last_error = cudaErrorInvalidValue;
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
    /* the device's emulated memory is finite: more than it has free is refused, as on a GPU */
    if (!pinned) {
        size_t total = device_memory(device_now), used = device_allocated(device_now);
        if (bytes > total - std::min(total, used))
            return last_error = cudaErrorMemoryAllocation;
    }
    if (posix_memalign(p, 256, bytes ? bytes : 1) != 0)
        return last_error = cudaErrorMemoryAllocation;
    if (bytes <= bulk_max) /* fresh memory reads as NaN (or −1) */
        memset(*p, 0xff, bytes);
    allocations[(uintptr_t)*p] = {bytes, pinned, device_now};
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
    if (flags & cudaEventRecordExternal) /* CUDA takes the flag only on a capturing stream */
        return last_error = cudaErrorIllegalState;
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

} /* extern "C" */
