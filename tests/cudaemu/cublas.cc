/* cublas.cc - the cuBLAS calls of moeperf's GPU path on the CPU stand-in: GEMMs summed in fp32 on
 * bf16 or fp32 operands, cuBLAS's argument rules, and operands (with their leading dimensions)
 * checked to lie in device memory; queued on the handle's stream. */
#include <stdio.h>

#include <vector>

#include "internal.h"

using namespace cudaemu;

struct cudaemu_blas {
    cudaStream_t stream;
};

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

/* On the stand-in's own copies of the operands, whose bounds the callers have checked: left out of
 * the sanitizers, which would otherwise make this loop most of a sanitized test run. */
__attribute__((no_sanitize("address", "undefined"))) float cudaemu::dot(const float *x,
                                                                        const float *y, size_t n)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t p = 0;
    for (; p + 8 <= n; p += 8)
        for (int l = 0; l < 8; l++)
            s[l] += x[p + l] * y[p + l];
    for (; p < n; p++)
        s[p & 7] += x[p] * y[p];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* The largest GEMM (multiply-adds) computed. */
static const double gemm_max_work = 4294967296.0;

bool cudaemu::gemm_computed(int64_t m, int64_t n, int64_t k)
{
    if ((double)m * (double)n * (double)k <= gemm_max_work)
        return true;
    static int told;
    if (!told++)
        fprintf(stderr, "cudaemu: GEMMs over 2^32 multiply-adds (%lld×%lld×%lld) are not computed; "
                        "their output is left as it was\n", (long long)m, (long long)n, (long long)k);
    return false;
}

void cudaemu::gemm_operands(const void *A, cudaDataType At, cublasOperation_t ta, int64_t lda,
                            const void *B, cudaDataType Bt, cublasOperation_t tb, int64_t ldb,
                            size_t m, size_t n, size_t k, std::vector<float> &a,
                            std::vector<float> &bt)
{
    a.assign(m * k, 0.0f);
    bt.assign(n * k, 0.0f);
    for (size_t i = 0; i < m; i++)
        for (size_t p = 0; p < k; p++)
            a[i * k + p] = load(A, At, ta == CUBLAS_OP_N ? i + p * (size_t)lda : p + i * (size_t)lda);
    for (size_t j = 0; j < n; j++)
        for (size_t p = 0; p < k; p++)
            bt[j * k + p] = load(B, Bt, tb == CUBLAS_OP_N ? p + j * (size_t)ldb : j + p * (size_t)ldb);
}

static void gemm_run(const gemm_problem &g)
{
    if (g.m == 0 || g.n == 0)
        return;
    if (!gemm_computed(g.m, g.n, g.k))
        return;
    size_t m = (size_t)g.m, n = (size_t)g.n, k = (size_t)g.k;
    std::vector<float> a, bt; /* op(A) by rows, op(B) by columns */
    gemm_operands(g.A, g.At, g.ta, g.lda, g.B, g.Bt, g.tb, g.ldb, m, n, k, a, bt);
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < m; i++) {
            float acc = dot(&a[i * k], &bt[j * k], k);
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

} /* extern "C" */
