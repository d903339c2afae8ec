/* cuda_compute.cu - the cuda compute backend (bf16 activations and weights in device memory, fp32
 * accumulation): its ops table, its start and end, and its memory (device buffers, uploads and
 * downloads); the hooks that launch kernels are in the other files of kernels/cuda, which
 * cuda_internal.h names. */
#include "cuda_internal.h"

/* cuBLAS and cuBLASLt, resolved when the first backend starts (cublas_entry.h) */
struct mp_cublas_entry cublas;
struct mp_cublaslt_entry cublaslt;

/* Grow a device buffer to at least `need` bytes (first calls only; the timed loop reuses it). */
int grow(void **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return MP_OK;
    if (*p)
        cudaFree(*p);
    *p = NULL;
    *cap = 0; /* a failed allocation leaves no buffer behind */
    CUDACHECK(cudaMalloc(p, need));
    *cap = need;
    return MP_OK;
}

/* The device preselect made current before MPI started, or −1. */
static int preselected = -1;

static int cuda_preselect(int local_rank)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return MP_OK; /* init reports the missing device */
    int d = mp_gpu_index(local_rank, n);
    if (cudaSetDevice(d) != cudaSuccess) {
        mp_error("--backend cuda: cannot select GPU %d of %d for local rank %d", d, n, local_rank);
        return MP_ERR_RUNTIME;
    }
    preselected = d;
    return MP_OK;
}

static int cuda_init(struct mp_compute **out, int local_rank)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        mp_error("--backend cuda: no CUDA device is present (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return MP_ERR_RUNTIME;
    }
    struct mp_compute *c = (struct mp_compute *)calloc(1, sizeof *c);
    if (!c) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    c->device = mp_gpu_index(local_rank, n); /* one rank per GPU, in order (compute.h) */
    *out = c;
    if (preselected >= 0 && preselected != c->device)
        mp_warn("--backend cuda: the launcher's local rank chose GPU %d before MPI started, the "
                "local rank settled with MPI (%d) chooses GPU %d; using GPU %d (GPU %d may keep a "
                "context MPI made there)", preselected, local_rank, c->device, c->device,
                preselected);
    CUDACHECK(cudaSetDevice(c->device));
    CUDACHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    char why[512];
    if (mp_cublas_load(&cublas, why, sizeof why) != 0) {
        mp_error("--backend cuda: %s", why);
        return MP_ERR_RUNTIME;
    }
    CUBLASCHECK(cublas.create(&c->blas));
    CUBLASCHECK(cublas.set_stream(c->blas, c->stream));
    /* a fixed workspace: cuBLAS then allocates nothing while a graph is captured */
    const size_t ws = (size_t)32 << 20;
    CUDACHECK(cudaMalloc(&c->blas_ws, ws));
    c->blas_ws_bytes = ws;
    CUBLASCHECK(cublas.set_workspace(c->blas, c->blas_ws, ws));
    if (mp_cublaslt_load(&cublaslt, why, sizeof why) != 0) {
        mp_error("--backend cuda: %s", why);
        return MP_ERR_RUNTIME;
    }
    CUBLASCHECK(cublaslt.create(&c->lt));
    /* --flush-cache's buffer, 2 × L2 (MP_QUICK_FLUSH_BYTES under the test hook mp_compute_quick),
     * taken now: the memory checks then see it as used, and a device too small for it fails here
     * at start-up, not at a point's first flush */
    c->flush_bytes = MP_QUICK_FLUSH_BYTES;
    if (!mp_compute_quick()) {
        int l2 = 0;
        CUDACHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, c->device));
        c->flush_bytes = 2 * (l2 > 0 ? (size_t)l2 : (size_t)64 << 20);
    }
    CUDACHECK(cudaMalloc(&c->flush_buf, c->flush_bytes));
    for (int i = 0; i < MP_TIMER_SLOTS; i++)
        CUDACHECK(cudaEventCreate(&c->ev[i]));
    cudaDeviceProp p;
    CUDACHECK(cudaGetDeviceProperties(&p, c->device));
    c->sms = p.multiProcessorCount > 0 ? p.multiProcessorCount : 1;
    char bus[32] = "";
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, c->device) == cudaSuccess)
        memcpy(c->bus, bus, sizeof c->bus);
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(c->name, sizeof c->name, "%s (pci %s, sm_%d%d, %.0f GiB; driver %d.%d, runtime %d.%d)",
             p.name, bus, p.major, p.minor, (double)p.totalGlobalMem / (1 << 30), drv / 1000,
             (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
    return MP_OK;
}

static void cuda_fini(struct mp_compute *c)
{
    if (!c)
        return;
    plan_free(&c->plan);
    cache_free(c);
    if (c->copy_stream)
        cudaStreamDestroy(c->copy_stream);
    cudaStreamSynchronize(c->stream);
    for (int i = 0; i < MP_TIMER_SLOTS; i++)
        if (c->ev[i])
            cudaEventDestroy(c->ev[i]);
    if (c->exec)
        cudaGraphExecDestroy(c->exec);
    if (c->graph)
        cudaGraphDestroy(c->graph);
    if (c->blas)
        cublas.destroy(c->blas);
    if (c->lt)
        cublaslt.destroy(c->lt);
    cuda_free_all({c->blas_ws, c->d_q, c->d_qs, c->d_lt_out, c->d_xq});
    if (c->stream)
        cudaStreamDestroy(c->stream);
    cuda_free_all({c->d_idx, c->d_f, c->d_logits, c->d_noise, c->d_ids, c->d_w, c->d_acc,
                   c->d_wire, c->skinny_ws, c->skinny_count, c->fused_act, c->flush_buf});
    free(c->fused_ent);
    if (c->g) {
        free(c->g->op);
        free(c->g->m);
        free(c->g->alpha);
        free(c->g->ptr);
        cudaFree(c->g->d_ptr);
        free(c->g);
    }
    cudaFreeHost(c->h_bf);
    free(c);
}

static const char *cuda_device_name(struct mp_compute *c) { return c->name; }

static void *cuda_alloc(struct mp_compute *c, size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, (n ? n : 1) * sizeof(bf16)) != cudaSuccess)
        return NULL;
    return p;
}

static void cuda_free(struct mp_compute *c, void *p)
{
    if (p)
        cudaFree(p);
}

static int stage(struct mp_compute *c, size_t n)
{
    if (n <= c->h_bf_cap)
        return MP_OK;
    cudaFreeHost(c->h_bf);
    c->h_bf = NULL;
    CUDACHECK(cudaMallocHost((void **)&c->h_bf, n * sizeof(bf16)));
    c->h_bf_cap = n;
    return MP_OK;
}

static int cuda_upload(struct mp_compute *c, void *dst, const float *src, size_t n)
{
    if (stage(c, n) != MP_OK)
        return MP_ERR_RUNTIME;
    for (size_t i = 0; i < n; i++)
        c->h_bf[i] = __float2bfloat16(src[i]);
    CUDACHECK(cudaMemcpyAsync(dst, c->h_bf, n * sizeof(bf16), cudaMemcpyHostToDevice, c->stream));
    CUDACHECK(cudaStreamSynchronize(c->stream));
    return MP_OK;
}

static int cuda_download(struct mp_compute *c, float *dst, const void *src, size_t n)
{
    if (stage(c, n) != MP_OK)
        return MP_ERR_RUNTIME;
    CUDACHECK(cudaMemcpyAsync(c->h_bf, src, n * sizeof(bf16), cudaMemcpyDeviceToHost, c->stream));
    CUDACHECK(cudaStreamSynchronize(c->stream));
    for (size_t i = 0; i < n; i++)
        dst[i] = __bfloat162float(c->h_bf[i]);
    return MP_OK;
}

/* Raw bytes from pageable host memory, which CUDA stages before the call returns, so the caller
 * may reuse `src` at once (as cuda_permute's and cuda_combine's index arrays); the copy itself is
 * queued on the stream. */
static int cuda_upload_bytes(struct mp_compute *c, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return MP_OK;
    CUDACHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    return MP_OK;
}

/* Raw bytes back to the host once the stream's earlier work (the collective that wrote them) is
 * done: a host sync. */
static int cuda_download_bytes(struct mp_compute *c, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return MP_OK;
    CUDACHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDACHECK(cudaStreamSynchronize(c->stream));
    return MP_OK;
}

static void *cuda_host_alloc(struct mp_compute *c, size_t bytes)
{
    void *p = NULL;
    return cudaMallocHost(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

static void cuda_host_free(struct mp_compute *c, void *p)
{
    if (p)
        cudaFreeHost(p);
}

static const char *cuda_pci_bus_id(struct mp_compute *c) { return c->bus[0] ? c->bus : NULL; }

static int cuda_mem_info(struct mp_compute *c, size_t *free_bytes, size_t *total_bytes)
{
    CUDACHECK(cudaSetDevice(c->device));
    CUDACHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return MP_OK;
}

extern "C" const struct mp_compute_ops mp_compute_cuda = {
    .name = "cuda",
    .memory = MP_MEMORY_DEVICE,
    .dispatch_modes = MP_DISPATCH_ALL,
    .dispatch_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16) | MP_DTYPE_BIT(MP_DTYPE_FP8),
    .weight_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16) | MP_DTYPE_BIT(MP_DTYPE_FP8),
    .graph = 1,
    .elem_size = sizeof(bf16),
    .check_tolerance = 2e-2,
    .gemm_modes = 1u << MP_GEMM_GROUPED | 1u << MP_GEMM_SKINNY | 1u << MP_GEMM_FUSED,
    .fp8_gemm_modes = 1u << MP_GEMM_LOOP | 1u << MP_GEMM_GROUPED | 1u << MP_GEMM_SKINNY |
                      1u << MP_GEMM_FUSED,
    .shared_gemm_modes = 1u << MP_GEMM_FUSED,
    .preselect = cuda_preselect,
    .init = cuda_init,
    .fini = cuda_fini,
    .device_name = cuda_device_name,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .upload_bytes = cuda_upload_bytes,
    .download_bytes = cuda_download_bytes,
    .gate = cuda_gate,
    .permute = cuda_permute,
    .copy_rows = cuda_copy_rows,
    .fp8_pack = cuda_fp8_pack,
    .fp8_unpack = cuda_fp8_unpack,
    .expert_ffn = cuda_expert_ffn,
    .combine = cuda_combine,
    .plan_setup = cuda_plan_setup,
    .plan_build = cuda_plan_build,
    .mark = cuda_mark,
    .elapsed_us = cuda_elapsed_us,
    .sync = cuda_sync,
    .measure_peak = cuda_measure_peak,
    .flush_cache = cuda_flush_cache,
    .native_stream = cuda_native_stream,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .replay = cuda_replay,
    .graph_reset = cuda_graph_reset,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .pci_bus_id = cuda_pci_bus_id,
    .mem_info = cuda_mem_info,
    .cache_setup = cuda_cache_setup,
    .cache_fetch = cuda_cache_fetch,
    .cache_release = cuda_cache_release,
    .cache_exposed_us = cuda_cache_exposed_us,
    .delay = nullptr,        /* the host spins (mp_compute_delay) */
    .alloc_zeroed = nullptr, /* cudaMalloc, then zeros uploaded */
};
