/* selftest.cu - the CPU stand-in's own checks, each on a case built to trip it: launch limits,
 * device ranges, block barriers, deferred streams in both schedules, stream capture and replay,
 * cuBLAS's argument rules and results, CUB's sort and scan. Faults that end a process (an illegal
 * address, a divergent barrier) run in a child that must abort. Compiled through rewrite.py, as the
 * cuda backend is; exits 0 when every check holds. */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

static void expect(bool ok, const char *what)
{
    printf("  %-66s %s\n", what, ok ? "ok" : "FAIL");
    failures += !ok;
}

/* Runs f in a child, which must die of SIGABRT (the stand-in's fault). */
template <class F> static void expect_fault(const char *what, F f)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr))
            _exit(2);
        f();
        cudaDeviceSynchronize();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, what);
}

/* out[blockIdx.x] = Σ in over the block's 128 elements, through shared memory and barriers. */
__global__ void block_sum_kernel(const float *in, float *out)
{
    __shared__ float part[128];
    int t = threadIdx.x;
    part[t] = in[blockIdx.x * 128 + t];
    __syncthreads();
    for (int half = 64; half > 0; half /= 2) {
        if (t < half)
            part[t] += part[t + half];
        __syncthreads();
    }
    if (t == 0)
        out[blockIdx.x] = part[0];
}

/* out[i] = i·scale over the grid; the dynamic shared memory holds scale (thread 0 writes it). */
__global__ void scale_kernel(float *out, long n, float scale)
{
    extern __shared__ float s_scale[];
    if (threadIdx.x == 0)
        s_scale[0] = scale;
    __syncthreads();
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = (float)i * s_scale[0];
}

__global__ void add_kernel(float *x, float v) { x[threadIdx.x] += v; }

/* Threads 0..15 return before the barrier the others wait at. */
__global__ void divergent_kernel(float *x)
{
    if (threadIdx.x < 16)
        return;
    __syncthreads();
    x[threadIdx.x] = 1;
}

static void launches()
{
    float h[4 * 128], sums[4], *d_in, *d_out;
    for (int i = 0; i < 4 * 128; i++)
        h[i] = (float)(i % 7);
    cudaMalloc((void **)&d_in, sizeof h);
    cudaMalloc((void **)&d_out, sizeof sums);
    cudaMemcpy(d_in, h, sizeof h, cudaMemcpyHostToDevice);
    block_sum_kernel<<<4, 128>>>(d_in, d_out);
    cudaMemcpy(sums, d_out, sizeof sums, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int b = 0; b < 4; b++) {
        float want = 0;
        for (int i = 0; i < 128; i++)
            want += h[b * 128 + i];
        ok = ok && sums[b] == want;
    }
    expect(ok, "block reduction through __shared__ and __syncthreads");

    float *d_s, hs[1000];
    cudaMalloc((void **)&d_s, sizeof hs);
    scale_kernel<<<3, 64, sizeof(float)>>>(d_s, 1000, 0.5f);
    cudaMemcpy(hs, d_s, sizeof hs, cudaMemcpyDeviceToHost);
    ok = cudaGetLastError() == cudaSuccess;
    for (int i = 0; i < 1000; i++)
        ok = ok && hs[i] == 0.5f * (float)i;
    expect(ok, "grid-stride loop with dynamic shared memory");

    scale_kernel<<<1, 2048, 4>>>(d_s, 10, 1.0f);
    cudaError_t e = cudaGetLastError();
    expect(e == cudaErrorInvalidConfiguration && cudaGetLastError() == cudaSuccess,
           "a 2048-thread block is refused, once");
    scale_kernel<<<1, 32, 64 * 1024>>>(d_s, 10, 1.0f);
    expect(cudaGetLastError() != cudaSuccess, "64 KiB of dynamic shared memory is refused");
    expect_fault("a kernel given a host pointer faults", [] {
        static float host[32];
        add_kernel<<<1, 32>>>(host, 1.0f);
    });
    expect_fault("a barrier only some threads of a block reach faults",
                 [d_s] { divergent_kernel<<<1, 32>>>(d_s); });
    cudaFree(d_in);
    cudaFree(d_out);
    cudaFree(d_s);
}

static void copies()
{
    float *d, h[8] = {0};
    cudaMalloc((void **)&d, 8 * sizeof(float));
    expect(cudaMemcpyAsync(d, h, 9 * sizeof(float), cudaMemcpyHostToDevice, 0) == cudaErrorInvalidValue,
           "a copy past the end of a device allocation is refused");
    (void)cudaGetLastError();
    expect(cudaMemcpyAsync(d + 4, d, 4, cudaMemcpyHostToDevice, 0) == cudaErrorInvalidValue,
           "a host-to-device copy from device memory is refused");
    (void)cudaGetLastError();
    expect(cudaMemsetAsync(d + 4, 0, 5 * sizeof(float), 0) == cudaErrorInvalidValue,
           "a memset past the end is refused");
    (void)cudaGetLastError();
    float first = 0;
    cudaMemcpy(&first, d, sizeof first, cudaMemcpyDeviceToHost);
    expect(isnan(first), "fresh device memory reads as NaN");
    expect(cudaFree(h) == cudaErrorInvalidValue, "cudaFree of host memory is refused");
    (void)cudaGetLastError();
    cudaFree(d);
}

/* A kernel writes 3 into x on s1 and records e; s2 copies x into page-locked memory, waiting on
 * e or not. Only s2 is synchronised. */
static float two_streams(bool wait, bool sync)
{
    cudaStream_t s1, s2;
    cudaEvent_t e;
    float *x, *pinned;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaMalloc((void **)&x, 32 * sizeof(float));
    cudaMallocHost((void **)&pinned, sizeof(float));
    cudaMemsetAsync(x, 0, 32 * sizeof(float), s1);
    *pinned = -1;
    add_kernel<<<1, 32, 0, s1>>>(x, 3.0f);
    cudaEventRecord(e, s1);
    if (wait)
        cudaStreamWaitEvent(s2, e, 0);
    cudaMemcpyAsync(pinned, x, sizeof(float), cudaMemcpyDeviceToHost, s2);
    float before = *pinned;
    if (sync)
        cudaStreamSynchronize(s2);
    float v = sync ? *pinned : before;
    cudaDeviceSynchronize();
    cudaFreeHost(pinned);
    cudaFree(x);
    cudaEventDestroy(e);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    return v;
}

static void streams()
{
    bool others_first = getenv("CUDAEMU_SCHEDULE") && !strcmp(getenv("CUDAEMU_SCHEDULE"), "others-first");
    expect(two_streams(true, false) == -1, "a page-locked copy is not there before the host waits");
    expect(two_streams(true, true) == 3, "an event wait runs the other stream's work first");
    float v = two_streams(false, true);
    expect(others_first ? v == 3 : isnan(v), /* late: not even the memset has run */
           others_first ? "without the wait, others-first runs the kernel first"
                        : "without the wait, the copy runs before the kernel");
}

static void capture()
{
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t x;
    float *d, h[32];
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMalloc((void **)&d, sizeof h);
    cudaMemsetAsync(d, 0, sizeof h, s);
    float v = 2.0f;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    add_kernel<<<1, 32, 0, s>>>(d, v);
    v = 100.0f; /* the captured launch keeps 2 */
    bool ok = cudaStreamEndCapture(s, &g) == cudaSuccess && cudaGraphInstantiate(&x, g, 0) == cudaSuccess;
    for (int i = 0; i < 3; i++)
        cudaGraphLaunch(x, s);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    expect(ok && h[0] == 6 && h[31] == 6, "a captured launch replays its arguments, three times");
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);

    float *more = NULL, page[4] = {0};
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaMalloc((void **)&more, 16);
    expect(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated && !g,
           "cudaMalloc inside a capture invalidates it");
    (void)cudaGetLastError();
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaMemcpyAsync(d, page, sizeof page, cudaMemcpyHostToDevice, s);
    expect(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated,
           "a copy from pageable memory inside a capture invalidates it");
    (void)cudaGetLastError();
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaStreamSynchronize(s);
    expect(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated,
           "a synchronisation inside a capture invalidates it");
    (void)cudaGetLastError();
    cudaEvent_t ev;
    cudaEventCreate(&ev);
    expect(cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal) == cudaErrorIllegalState &&
               cudaGetLastError() == cudaErrorIllegalState,
           "an external event record outside a capture is refused");
    cudaEventDestroy(ev);
    cudaFree(d);
    cudaStreamDestroy(s);
}

static void blas()
{
    /* row-major C[2×3] = A[2×4]·B[4×3] as column-major Cᵀ = Bᵀ·Aᵀ, bf16 in, fp32 out */
    float a[8], b[12], c[6];
    __nv_bfloat16 ha[8], hb[12];
    for (int i = 0; i < 8; i++)
        ha[i] = __float2bfloat16(a[i] = (float)(i - 3));
    for (int i = 0; i < 12; i++)
        hb[i] = __float2bfloat16(b[i] = (float)(2 * i % 5));
    void *dA, *dB, *dC;
    cudaMalloc(&dA, sizeof ha);
    cudaMalloc(&dB, sizeof hb);
    cudaMalloc(&dC, sizeof c);
    cudaMemcpy(dA, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, hb, sizeof hb, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    cublasCreate(&h);
    const float one = 1, zero = 0;
    cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 2, 4, &one, dB, CUDA_R_16BF, 3,
                                     dA, CUDA_R_16BF, 4, &zero, dC, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(c, dC, sizeof c, cudaMemcpyDeviceToHost);
    bool ok = st == CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            float want = 0;
            for (int p = 0; p < 4; p++)
                want += a[i * 4 + p] * b[p * 3 + j];
            ok = ok && c[i * 3 + j] == want;
        }
    expect(ok, "cublasGemmEx: a row-major product through the column-major call");
    st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 2, 4, &one, dB, CUDA_R_16BF, 2, dA, CUDA_R_16BF,
                      4, &zero, dC, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    expect(st == CUBLAS_STATUS_INVALID_VALUE, "cublasGemmEx: lda below the rows of A is refused");
    expect_fault("cublasGemmEx: an operand longer than its allocation faults", [=] {
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 3, 4, &one, dB, CUDA_R_16BF, 3, dA, CUDA_R_16BF, 4,
                     &zero, dC, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    cublasDestroy(h);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
}

static void cub_calls()
{
    const int n = 10;
    int32_t key[n] = {5, 1, 4, 1, 0, 5, 3 + 64, 1, 4, 0}, val[n], k2[n], v2[n], scan[n];
    for (int i = 0; i < n; i++)
        val[i] = i;
    int32_t *dk, *dv, *dk2, *dv2, *ds;
    cudaMalloc((void **)&dk, sizeof key);
    cudaMalloc((void **)&dv, sizeof val);
    cudaMalloc((void **)&dk2, sizeof key);
    cudaMalloc((void **)&dv2, sizeof val);
    cudaMalloc((void **)&ds, sizeof scan);
    cudaMemcpy(dk, key, sizeof key, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, val, sizeof val, cudaMemcpyHostToDevice);
    size_t bytes = 0;
    cub::DeviceRadixSort::SortPairs(NULL, bytes, dk, dk2, dv, dv2, n, 0, 3); /* 3 key bits */
    void *tmp;
    cudaMalloc(&tmp, bytes);
    cub::DeviceRadixSort::SortPairs(tmp, bytes, dk, dk2, dv, dv2, n, 0, 3);
    cudaMemcpy(v2, dv2, sizeof v2, cudaMemcpyDeviceToHost);
    cudaMemcpy(k2, dk2, sizeof k2, cudaMemcpyDeviceToHost);
    const int32_t want[n] = {4, 9, 1, 3, 7, 6, 2, 8, 0, 5}; /* stable, 3+64 sorts as 3 */
    expect(!memcmp(v2, want, sizeof want) && k2[5] == 3 + 64,
           "cub::DeviceRadixSort::SortPairs: stable, by the key bits asked for");
    size_t small = bytes - 1;
    expect(cub::DeviceRadixSort::SortPairs(tmp, small, dk, dk2, dv, dv2, n, 0, 3) == cudaErrorInvalidValue,
           "cub::DeviceRadixSort::SortPairs: too little scratch is refused");
    size_t sb = 0;
    cub::DeviceScan::ExclusiveSum(NULL, sb, dv, ds, n);
    void *tmp2;
    cudaMalloc(&tmp2, sb);
    cub::DeviceScan::ExclusiveSum(tmp2, sb, dv, ds, n);
    cudaMemcpy(scan, ds, sizeof scan, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int i = 0, sum = 0; i < n; sum += i, i++)
        ok = ok && scan[i] == sum;
    expect(ok, "cub::DeviceScan::ExclusiveSum");
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dk2);
    cudaFree(dv2);
    cudaFree(ds);
    cudaFree(tmp);
    cudaFree(tmp2);
}

/* Device attributes agree with the properties; an invalid device or attribute is refused. */
static void attributes()
{
    cudaDeviceProp p;
    int l2 = -1, sms = -1, n = 0, v = 7;
    cudaGetDeviceCount(&n);
    bool ok = cudaGetDeviceProperties(&p, 0) == cudaSuccess &&
              cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0) == cudaSuccess &&
              cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess;
    expect(ok && l2 == 52428800 && l2 == p.l2CacheSize && sms == p.multiProcessorCount,
           "cudaDevAttrL2CacheSize is an H200's 50 MiB, as cudaDeviceProp says");
    expect(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, n) == cudaErrorInvalidDevice &&
               cudaGetLastError() == cudaErrorInvalidDevice && v == 7,
           "an attribute of a device past the last is refused");
    expect(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, -1) == cudaErrorInvalidDevice &&
               v == 7,
           "an attribute of device -1 is refused");
    (void)cudaGetLastError();
    expect(cudaDeviceGetAttribute(&v, (enum cudaDeviceAttr)100000, 0) == cudaErrorInvalidValue &&
               v == 7,
           "an unknown attribute is refused");
    (void)cudaGetLastError();
}

int main(void)
{
    printf("cudaemu self-test (schedule %s)\n",
           getenv("CUDAEMU_SCHEDULE") ? getenv("CUDAEMU_SCHEDULE") : "late");
    launches();
    attributes();
    copies();
    streams();
    capture();
    blas();
    cub_calls();
    printf("%s\n", failures ? "FAILED" : "all checks hold");
    return failures ? 1 : 0;
}
