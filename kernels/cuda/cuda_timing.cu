/* cuda_timing.cu - what the backend runs on its streams around the kernels: the phase timers'
 * events, the L2 flush, the roofline's peak measurements, graph capture and replay, and the expert
 * cache's copy stream and events. */
#include "cuda_internal.h"

int cuda_mark(struct mp_compute *c, int slot)
{
    /* external: inside a graph capture the record becomes a node, so replays keep the timers.
     * CUDA accepts the flag only while the stream is capturing (cudaErrorIllegalState outside). */
    if (c->capturing)
        CUDACHECK(cudaEventRecordWithFlags(c->ev[slot], c->stream, cudaEventRecordExternal));
    else
        CUDACHECK(cudaEventRecord(c->ev[slot], c->stream));
    return MP_OK;
}

double cuda_elapsed_us(struct mp_compute *c, int a, int b)
{
    float ms = 0;
    if (cudaEventElapsedTime(&ms, c->ev[a], c->ev[b]) != cudaSuccess) {
        (void)cudaGetLastError(); /* an unrecorded or unfinished mark: no error for the next launch */
        return -1;
    }
    return ms * 1e3;
}

int cuda_sync(struct mp_compute *c)
{
    CUDACHECK(cudaStreamSynchronize(c->stream));
    return MP_OK;
}

/* Evict L2: a memset of 2 × cudaDevAttrL2CacheSize bytes queued on the stream, whose every line
 * passes through L2 and displaces what it held (nvbench flushes L2 between measurements the same
 * way). Never inside a capture: a replay would run it between the marks. */
int cuda_flush_cache(struct mp_compute *c)
{
    if (c->capturing) {
        mp_error("--flush-cache: a flush inside a graph capture would be replayed as timed work");
        return MP_ERR_RUNTIME;
    }
    CUDACHECK(cudaMemsetAsync(c->flush_buf, (int)(++c->flushes & 0xff), c->flush_bytes, c->stream));
    return MP_OK;
}

/* x[i] = a uniform value in [−1, 1) from a hash of (i, seed): tensor cores switch fewer bits on
 * zeros, so a rate measured on zeros would overstate what real operands reach. */
__global__ void fill_random_kernel(bf16 *x, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16;
        h *= 0x7feb352du;
        h ^= h >> 15;
        x[i] = __float2bfloat16((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

/* Best of 5: an 8192³ bf16 GEMM on random operands (2·8192³ FLOPs) and a 1 GiB device copy (read + written);
 * under the test hook mp_compute_quick, MP_QUICK_PEAK_GEMM_N³ and MP_QUICK_PEAK_COPY_BYTES. */
/* The FP8 GEMM rate: the best of a few cuBLASLt block-scaled FP8 GEMMs of n×n×n (as --gemm loop
 * runs fp8 weights: the image's BLK128x128 scales, the rows' VEC128 ones), on random codes of
 * magnitude up to 2 (no NaN) with unit scales. */
__global__ void fill_codes_kernel(unsigned char *q, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        q[i] = (unsigned char)((h & 0x80u) | (h % 0x40u)); /* exponent field below 8: |v| < 2 */
    }
}
__global__ void fill_ones_kernel(float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = 1.0f;
}

static int measure_fp8_gemm(struct mp_compute *c, int n, double *flops_per_s)
{
    const size_t img = mp_fp8_image_bytes(n, n, 1), q = (size_t)n * mp_fp8_image_ld(n);
    const size_t qs = (size_t)n * mp_fp8_blocks(n);
    unsigned char *a = NULL, *b = NULL;
    float *bs = NULL;
    bf16 *d = NULL;
    int rc = MP_ERR_RUNTIME;
    *flops_per_s = 0;
    if (cudaMalloc((void **)&a, img) != cudaSuccess || cudaMalloc((void **)&b, q) != cudaSuccess ||
        cudaMalloc((void **)&bs, qs * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&d, (size_t)n * n * sizeof(bf16)) != cudaSuccess) {
        mp_error("cannot allocate the FP8 roofline GEMM buffers");
        goto out;
    }
    fill_codes_kernel<<<1024, 256, 0, c->stream>>>(a, mp_fp8_image_scales_at(n, n, 1), 3u);
    fill_ones_kernel<<<64, 256, 0, c->stream>>>((float *)(void *)(a + mp_fp8_image_scales_at(n, n, 1)),
                                               (img - mp_fp8_image_scales_at(n, n, 1)) / sizeof(float));
    fill_codes_kernel<<<1024, 256, 0, c->stream>>>(b, q, 4u);
    fill_ones_kernel<<<64, 256, 0, c->stream>>>(bs, qs);
    for (int i = 0; i < 6; i++) {
        cudaEventRecord(c->ev[0], c->stream);
        if (lt_matmul(c, a, n, n, 1, b, bs, n, d) != MP_OK)
            goto out;
        cudaEventRecord(c->ev[1], c->stream);
        cudaEventSynchronize(c->ev[1]);
        double us = cuda_elapsed_us(c, 0, 1);
        if (i > 0 && us > 0 && 2.0 * n * n * n / (us * 1e-6) > *flops_per_s)
            *flops_per_s = 2.0 * n * n * n / (us * 1e-6);
    }
    rc = MP_OK;
out:
    cudaFree(a);
    cudaFree(b);
    cudaFree(bs);
    cudaFree(d);
    return rc;
}

int cuda_measure_peak(struct mp_compute *c, double *flops_per_s, double *fp8_flops_per_s,
                      double *bytes_per_s)
{
    const int quick = mp_compute_quick(), n = quick ? MP_QUICK_PEAK_GEMM_N : 8192;
    const size_t bytes = quick ? MP_QUICK_PEAK_COPY_BYTES : (size_t)1 << 30;
    void *a = NULL, *b = NULL, *d = NULL;
    int rc = MP_ERR_RUNTIME;
    double best_f = 0, best_b = 0;
    if (measure_fp8_gemm(c, n, fp8_flops_per_s) != MP_OK)
        return MP_ERR_RUNTIME;
    if (cudaMalloc(&a, (size_t)n * n * sizeof(bf16)) != cudaSuccess ||
        cudaMalloc(&b, (size_t)n * n * sizeof(bf16)) != cudaSuccess ||
        cudaMalloc(&d, (size_t)n * n * sizeof(bf16)) != cudaSuccess) {
        mp_error("cannot allocate the roofline GEMM buffers");
        goto out;
    }
    fill_random_kernel<<<1024, 256, 0, c->stream>>>((bf16 *)a, (size_t)n * n, 1u);
    fill_random_kernel<<<1024, 256, 0, c->stream>>>((bf16 *)b, (size_t)n * n, 2u);
    for (int i = 0; i < 6; i++) {
        cudaEventRecord(c->ev[0], c->stream);
        if (gemm_rm(c->blas, n, n, n, a, n, b, n, d, CUDA_R_16BF, n) != CUBLAS_STATUS_SUCCESS)
            goto out;
        cudaEventRecord(c->ev[1], c->stream);
        cudaEventSynchronize(c->ev[1]);
        double us = cuda_elapsed_us(c, 0, 1);
        if (i > 0 && us > 0 && 2.0 * n * n * n / (us * 1e-6) > best_f)
            best_f = 2.0 * n * n * n / (us * 1e-6);
    }
    cudaFree(a);
    cudaFree(b);
    a = b = NULL;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
        mp_error("cannot allocate the roofline copy buffers");
        goto out;
    }
    cudaMemsetAsync(a, 1, bytes, c->stream);
    for (int i = 0; i < 6; i++) {
        cudaEventRecord(c->ev[0], c->stream);
        cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, c->stream);
        cudaEventRecord(c->ev[1], c->stream);
        cudaEventSynchronize(c->ev[1]);
        double us = cuda_elapsed_us(c, 0, 1);
        if (i > 0 && us > 0 && 2.0 * bytes / (us * 1e-6) > best_b)
            best_b = 2.0 * bytes / (us * 1e-6);
    }
    *flops_per_s = best_f;
    *bytes_per_s = best_b;
    rc = MP_OK;
out:
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    return rc;
}

void *cuda_native_stream(struct mp_compute *c) { return (void *)c->stream; }

void cuda_graph_reset(struct mp_compute *c)
{
    if (c->exec)
        cudaGraphExecDestroy(c->exec);
    if (c->graph)
        cudaGraphDestroy(c->graph);
    c->exec = NULL;
    c->graph = NULL;
}

int cuda_capture_begin(struct mp_compute *c)
{
    cuda_graph_reset(c);
    CUDACHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = 1;
    return MP_OK;
}

int cuda_capture_end(struct mp_compute *c)
{
    c->capturing = 0;
    cudaError_t e = cudaStreamEndCapture(c->stream, &c->graph);
    if (e != cudaSuccess) {
        mp_error("--graph: capturing the layer failed: %s (an operation in it cannot be captured)",
                 cudaGetErrorString(e));
        c->graph = NULL;
        return MP_ERR_RUNTIME;
    }
    CUDACHECK(cudaGraphInstantiate(&c->exec, c->graph, 0));
    return MP_OK;
}

int cuda_replay(struct mp_compute *c)
{
    if (!c->exec) {
        mp_error("--graph: no captured layer to replay");
        return MP_ERR_RUNTIME;
    }
    CUDACHECK(cudaGraphLaunch(c->exec, c->stream));
    return MP_OK;
}

/* The expert cache's events and copy stream, after both streams are idle. */
void cache_free(struct mp_compute *c)
{
    if (c->copy_stream)
        cudaStreamSynchronize(c->copy_stream);
    for (int i = 0; i < c->cache_slots; i++)
        cudaEventDestroy(c->slot_free[i]);
    for (int i = 0; i < c->fetch_cap; i++) {
        cudaEventDestroy(c->fetch_ready[i]);
        cudaEventDestroy(c->fetch_done[i]);
    }
    free(c->slot_free);
    free(c->fetch_ready);
    free(c->fetch_done);
    free(c->slot_used);
    c->slot_free = c->fetch_ready = c->fetch_done = NULL;
    c->slot_used = NULL;
    c->cache_slots = c->fetch_cap = c->nfetch = 0;
}

/* The expert cache (compute.h): fetches on a copy stream of their own, so a miss's copy overlaps
 * the FFNs queued before it; each waits for its slot's last reader, and the compute stream waits
 * for each. Outside timed iterations (a point's start). */
int cuda_cache_setup(struct mp_compute *c, int nslots, int fetches)
{
    CUDACHECK(cudaStreamSynchronize(c->stream));
    cache_free(c);
    if (!c->copy_stream)
        CUDACHECK(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
    c->slot_free = (cudaEvent_t *)calloc((size_t)(nslots > 0 ? nslots : 1), sizeof(cudaEvent_t));
    c->slot_used = (unsigned char *)calloc((size_t)(nslots > 0 ? nslots : 1), 1);
    c->fetch_ready = (cudaEvent_t *)calloc((size_t)(fetches > 0 ? fetches : 1), sizeof(cudaEvent_t));
    c->fetch_done = (cudaEvent_t *)calloc((size_t)(fetches > 0 ? fetches : 1), sizeof(cudaEvent_t));
    if (!c->slot_free || !c->slot_used || !c->fetch_ready || !c->fetch_done) {
        mp_error("out of memory for the expert cache's events");
        return MP_ERR_RUNTIME;
    }
    for (; c->cache_slots < nslots; c->cache_slots++)
        CUDACHECK(cudaEventCreateWithFlags(&c->slot_free[c->cache_slots], cudaEventDisableTiming));
    for (; c->fetch_cap < fetches; c->fetch_cap++) {
        CUDACHECK(cudaEventCreate(&c->fetch_ready[c->fetch_cap]));
        CUDACHECK(cudaEventCreate(&c->fetch_done[c->fetch_cap]));
    }
    return MP_OK;
}

int cuda_cache_fetch(struct mp_compute *c, int slot, void *const *dst, const void *const *src,
                     const size_t *bytes, int n)
{
    if (slot < 0 || slot >= c->cache_slots || c->nfetch >= c->fetch_cap) {
        mp_error("internal error: an expert-cache fetch into slot %d of %d, fetch %d of %d",
                 slot, c->cache_slots, c->nfetch + 1, c->fetch_cap);
        return MP_ERR_RUNTIME;
    }
    if (c->slot_used[slot])
        CUDACHECK(cudaStreamWaitEvent(c->copy_stream, c->slot_free[slot], 0));
    for (int i = 0; i < n; i++)
        CUDACHECK(cudaMemcpyAsync(dst[i], src[i], bytes[i], cudaMemcpyHostToDevice,
                                  c->copy_stream));
    int k = c->nfetch++;
    CUDACHECK(cudaEventRecord(c->fetch_done[k], c->copy_stream));
    CUDACHECK(cudaEventRecord(c->fetch_ready[k], c->stream));
    CUDACHECK(cudaStreamWaitEvent(c->stream, c->fetch_done[k], 0));
    return MP_OK;
}

int cuda_cache_release(struct mp_compute *c, int slot)
{
    if (slot < 0 || slot >= c->cache_slots) {
        mp_error("internal error: an expert-cache release of slot %d of %d", slot, c->cache_slots);
        return MP_ERR_RUNTIME;
    }
    CUDACHECK(cudaEventRecord(c->slot_free[slot], c->stream));
    c->slot_used[slot] = 1;
    return MP_OK;
}

/* Each fetch's exposed part: from the compute stream's arrival at its wait to the copy's end, 0
 * when the copy was done first (the events are on two streams of one device). */
int cuda_cache_exposed_us(struct mp_compute *c, double *us)
{
    *us = 0;
    for (int k = 0; k < c->nfetch; k++) {
        float ms = 0;
        CUDACHECK(cudaEventElapsedTime(&ms, c->fetch_ready[k], c->fetch_done[k]));
        if (ms > 0)
            *us += 1e3 * (double)ms;
    }
    c->nfetch = 0;
    return MP_OK;
}
