/* selftest.cu - the CPU stand-in's own checks, each on a case built to trip it: launch limits,
 * device ranges, block barriers, deferred streams in both schedules, stream capture and replay,
 * cuBLAS's argument rules and results, cuBLASLt's block-scaled FP8 GEMM and its refusals, CUB's sort
 * and scan. Faults that end a process (an illegal
 * address, a divergent barrier) run in a child that must abort. Compiled through rewrite.py, as the
 * cuda backend is; exits 0 when every check holds. */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cublasLt.h>
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

#include "fp8.h"

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

/* The layout of a column-major rows × cols matrix of type t. */
static cublasLtMatrixLayout_t lt_layout(cudaDataType t, int rows, int cols, int ld)
{
    cublasLtMatrixLayout_t l;
    cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld);
    return l;
}

static void lt_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, int32_t v)
{
    cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v);
}

/* cuBLASLt's FP8 GEMM in the TN format, D(M×N) = α·op(A)·B + β·C with op(A) = Aᵀ, A stored K × M and
 * B K × N: 128×128 block scales on A, 128-value scales on B, K not a multiple of 128, against a
 * double reference from the decoded codes and the scales; then the configurations it refuses. */
static void blas_lt()
{
    const int M = 256, N = 12, K = 320, L = 3, L4 = 4; /* L = ⌈K/128⌉, L4: L to a multiple of 4 */
    static uint8_t ha[K * M], hb[K * N];
    uint32_t r = 12345;
    for (uint8_t *code : {ha, hb})
        for (int i = 0; i < K * (code == ha ? M : N); i++) {
            r = r * 1664525u + 1013904223u;
            uint8_t c = (uint8_t)(r >> 24);
            code[i] = (c & 0x7F) == 0x7F ? (uint8_t)(c ^ 1) : c; /* no NaN codes */
        }
    /* A's scales K-major, L4 × ⌈M/128⌉ (block (p, b) at p·L4 + b), the padding slot NaN so that a
     * read of it shows; B's N-major, N × L ((j, b) at b·N + j); all distinct */
    float sa[L4 * 2], sb[L * N];
    for (int p = 0; p < 2; p++)
        for (int b = 0; b < L4; b++)
            sa[p * L4 + b] = b < L ? 0.5f + 0.25f * (float)(p * L + b) : NAN;
    for (int b = 0; b < L; b++)
        for (int j = 0; j < N; j++)
            sb[b * N + j] = 1.0f + 0.125f * (float)(j * L + b);
    float hc[M * N];
    __nv_bfloat16 hc16[M * N];
    for (int i = 0; i < M * N; i++)
        hc16[i] = __float2bfloat16(hc[i] = (float)(i % 7) - 3.0f);
    void *dA, *dB, *dD, *dC16, *dD16, *dsa, *dsb, *ws;
    cudaMalloc(&dA, sizeof ha);
    cudaMalloc(&dB, sizeof hb);
    cudaMalloc(&dD, M * N * sizeof(float));
    cudaMalloc(&dC16, sizeof hc16);
    cudaMalloc(&dD16, sizeof hc16);
    cudaMalloc(&dsa, sizeof sa);
    cudaMalloc(&dsb, sizeof sb);
    cudaMalloc(&ws, 1 << 20);
    cudaMemcpy(dA, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, hb, sizeof hb, cudaMemcpyHostToDevice);
    cudaMemcpy(dC16, hc16, sizeof hc16, cudaMemcpyHostToDevice);
    cudaMemcpy(dsa, sa, sizeof sa, cudaMemcpyHostToDevice);
    cudaMemcpy(dsb, sb, sizeof sb, cudaMemcpyHostToDevice);

    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    lt_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    lt_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    lt_set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F);
    lt_set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dsa, sizeof dsa);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dsb, sizeof dsb);
    cublasLtMatrixLayout_t la = lt_layout(CUDA_R_8F_E4M3, K, M, K), lb = lt_layout(CUDA_R_8F_E4M3, K, N, K),
                           ld32 = lt_layout(CUDA_R_32F, M, N, M), ld16 = lt_layout(CUDA_R_16BF, M, N, M);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    uint64_t ws_bytes = 1 << 20;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                         sizeof ws_bytes);
    cublasLtMatmulHeuristicResult_t found = {};
    int nfound = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld32, ld32, pref, 1, &found, &nfound);
    expect(st == CUBLAS_STATUS_SUCCESS && nfound == 1 && found.state == CUBLAS_STATUS_SUCCESS,
           "cublasLt heuristic: one algorithm for FP8 TN, BLK128x128 × VEC128");

    /* fp32 D (C = D, β = 0), then bf16 D = α·(A·B) + β·C from a bf16 C */
    const float alpha = 0.5f, zero = 0.0f, beta = -0.5f;
    st = cublasLtMatmul(h, desc, &alpha, dA, la, dB, lb, &zero, dD, ld32, dD, ld32, &found.algo, ws,
                        ws_bytes, 0);
    cublasStatus_t st16 = cublasLtMatmul(h, desc, &alpha, dA, la, dB, lb, &beta, dC16, ld16, dD16, ld16,
                                         NULL, NULL, 0, 0);
    static float d[M * N];
    static __nv_bfloat16 d16[M * N];
    cudaMemcpy(d, dD, sizeof d, cudaMemcpyDeviceToHost);
    cudaMemcpy(d16, dD16, sizeof d16, cudaMemcpyDeviceToHost);
    bool ok = st == CUBLAS_STATUS_SUCCESS, ok16 = st16 == CUBLAS_STATUS_SUCCESS;
    double worst = 0;
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            double want = 0, mag = 0; /* Σ over k-blocks of sA·sB·(the block's dot product) */
            for (int b = 0; b < L; b++) {
                double part = 0, part_mag = 0;
                for (int k = b * 128; k < K && k < (b + 1) * 128; k++) {
                    double t = (double)mp_fp8_decode(ha[k + i * K]) * mp_fp8_decode(hb[k + j * K]);
                    part += t;
                    part_mag += fabs(t);
                }
                double s = (double)sa[(i / 128) * L4 + b] * sb[b * N + j];
                want += s * part;
                mag += fabs(s) * part_mag;
            }
            want *= alpha;
            mag *= alpha;
            double err = fabs(d[i + j * M] - want); /* fp32 sums: within 1e-5 of the magnitudes */
            worst = fmax(worst, err / mag);
            ok = ok && err <= 1e-5 * mag;
            double want16 = want + beta * hc[i + j * M];
            double err16 = fabs(__bfloat162float(d16[i + j * M]) - want16);
            ok16 = ok16 && err16 <= fabs(want16) / 256 + 1e-5 * (mag + fabs(beta * hc[i + j * M]));
        }
    printf("  (FP8 GEMM: worst error %.2g of the magnitude of the sum)\n", worst);
    expect(ok, "cublasLtMatmul: FP8 TN, BLK128x128 × VEC128 scales, K = 320, fp32 D");
    expect(ok16, "cublasLtMatmul: the same to a bf16 D with β·C, within bf16 rounding");

    /* refusals */
    cublasLtMatrixLayout_t la_nn = lt_layout(CUDA_R_8F_E4M3, M, K, M);
    lt_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N);
    nfound = 1;
    st = cublasLtMatmulAlgoGetHeuristic(h, desc, la_nn, lb, ld32, ld32, pref, 1, &found, &nfound);
    cublasStatus_t st2 = cublasLtMatmul(h, desc, &alpha, dA, la_nn, dB, lb, &zero, dD, ld32, dD, ld32,
                                        NULL, NULL, 0, 0);
    expect(st == CUBLAS_STATUS_NOT_SUPPORTED && nfound == 0 && st2 == CUBLAS_STATUS_NOT_SUPPORTED,
           "cublasLt: FP8 in the NN format is not supported, nor found");
    lt_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    lt_set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F);
    st = cublasLtMatmul(h, desc, &alpha, dA, la, dB, lb, &zero, dD, ld32, dD, ld32, NULL, NULL, 0, 0);
    expect(st == CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: BLK128x128 scales on both A and B: not supported");
    lt_set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F);
    cublasLtMatrixLayout_t la_m = lt_layout(CUDA_R_8F_E4M3, K, M - 2, K), ld_m = lt_layout(CUDA_R_32F, M - 2, N, M);
    st = cublasLtMatmul(h, desc, &alpha, dA, la_m, dB, lb, &zero, dD, ld_m, dD, ld_m, NULL, NULL, 0, 0);
    expect(st == CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: block scales, M not a multiple of 4: not supported");
    cublasLtMatrixLayout_t la_ld = lt_layout(CUDA_R_8F_E4M3, K, M, K + 8);
    st = cublasLtMatmul(h, desc, &alpha, dA, la_ld, dB, lb, &zero, dD, ld32, dD, ld32, NULL, NULL, 0, 0);
    expect(st != CUBLAS_STATUS_SUCCESS, "cublasLtMatmul: an FP8 lda not a multiple of 16 is refused");
    st = cublasLtMatmul(h, desc, &alpha, dA, la, dB, lb, &zero, dD, ld32, dD, ld32, NULL,
                        (char *)ws + 16, 4096, 0);
    expect(st == CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: a workspace not aligned to 256 bytes: invalid");
    alignas(16) static float host_scales[L4 * 2];
    const float *hs = host_scales;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &hs, sizeof hs);
    expect_fault("cublasLtMatmul: block scales in host memory fault", [=] {
        cublasLtMatmul(h, desc, &alpha, dA, la, dB, lb, &zero, dD, ld32, dD, ld32, NULL, NULL, 0, 0);
    });

    for (cublasLtMatrixLayout_t l : {la, lb, ld32, ld16, la_nn, la_m, ld_m, la_ld})
        cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
    for (void *p : {dA, dB, dD, dC16, dD16, dsa, dsb, ws})
        cudaFree(p);
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
    blas_lt();
    cub_calls();
    printf("%s\n", failures ? "FAILED" : "all checks hold");
    return failures ? 1 : 0;
}
