/* cublaslt.cc - the cuBLASLt calls of moeperf's GPU path on the CPU stand-in: D = α·op(A)·op(B) + β·C,
 * column-major, summed in fp32 on e4m3 operands with per-tensor or 128-block fp32 scales, or on bf16
 * or fp32 operands; the refusals cuBLASLt documents (cuBLAS documentation, "cublasLtMatmul()" and
 * "128-element 1D and 128x128 2D Block Scaling For FP8 Data Types"); operands and scales checked to
 * lie in device memory; queued on the call's stream. */
#include <stdint.h>
#include <stdio.h>

#include <vector>

#include "cublasLt.h"
#include "internal.h"

using namespace cudaemu;

struct cublasLtContext {
    int device; /* the device current when it was created */
};

/* a matmul descriptor with its defaults (cublasLtMatmulDescAttributes_t) */
struct cudaemu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType scale_type;
    int32_t trans[2] = {CUBLAS_OP_N, CUBLAS_OP_N};                    /* A, B */
    const void *scale[2] = {nullptr, nullptr};                        /* A, B; NULL reads as 1 */
    int32_t mode[2] = {CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F};
    int8_t fast_accum = 0; /* accepted; the stand-in sums in fp32 either way */
};

struct cudaemu_lt_layout {
    cudaDataType type;
    int64_t rows, cols, ld;
};

struct cudaemu_lt_pref {
    uint64_t max_workspace = 0;
};

/* data[0] of the algorithms the stand-in's heuristic returns */
static const uint64_t algo_mark = 0x6375646165;

/* Values per scale along K (and along M or N in the 128×128 blocks). */
static const int64_t scale_block = 128;

/* One matmul: the shapes and types its descriptors give, then the pointers and scalars of the call. */
struct lt_problem {
    int64_t m, n, k, lda, ldb, ldc, ldd;
    cublasOperation_t ta, tb;
    cudaDataType At, Bt, Ct, Dt;
    int32_t mode[2]; /* scale modes of A and B */
    const void *scale[2];
    float alpha, beta;
    const void *A, *B, *C;
    void *D;
};

static bool block_mode(int32_t mode)
{
    return mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
           mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Floats in the scales of a matrix whose product dimension (M for A, N for B) is mn, over K
 * (docs 3.1.4.5.1): VEC128_32F is mn-major, mn × L with L = ⌈K/128⌉; BLK128x128_32F is K-major,
 * L4 × ⌈mn/128⌉ with L4 = L rounded up to a multiple of 4 (the stride between its columns). */
static int64_t scale_count(int32_t mode, int64_t mn, int64_t k)
{
    int64_t l = ceil_div(k, scale_block);
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F)
        return l * mn;
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
        return ceil_div(l, 4) * 4 * ceil_div(mn, scale_block);
    return 1;
}

/* The scale of row i of op(A) (or column i of op(B)) in k-block b, in the layouts of scale_count;
 * a scalar mode's NULL pointer reads as 1. */
static float scale_at(const float *s, int32_t mode, int64_t mn, int64_t k, int64_t i, int64_t b)
{
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F)
        return s[b * mn + i];
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
        return s[(i / scale_block) * (ceil_div(ceil_div(k, scale_block), 4) * 4) + b];
    return s ? s[0] : 1.0f;
}

/* Says why a call is refused (on stderr) and returns st. */
static cublasStatus_t refuse(cublasStatus_t st, const char *call, const char *why)
{
    fprintf(stderr, "cudaemu: %s: %s (%s)\n", call, why,
            st == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED" : "CUBLAS_STATUS_INVALID_VALUE");
    return st;
}

static bool bf16_or_fp32(cudaDataType t) { return t == CUDA_R_16BF || t == CUDA_R_32F; }

/* cuBLASLt's checks of what the descriptors say (the part cublasLtMatmulAlgoGetHeuristic makes too):
 * CUBLAS_STATUS_SUCCESS with *p's shapes, types and modes filled, or the status the library returns. */
static cublasStatus_t lt_check(const cudaemu_lt_desc *d, const cudaemu_lt_layout *a,
                               const cudaemu_lt_layout *b, const cudaemu_lt_layout *c,
                               const cudaemu_lt_layout *dd, lt_problem *p, const char *call)
{
    const cublasStatus_t inval = CUBLAS_STATUS_INVALID_VALUE, unsup = CUBLAS_STATUS_NOT_SUPPORTED;
    if (!d || !a || !b || !c || !dd)
        return refuse(inval, call, "a NULL descriptor");
    for (const cudaemu_lt_layout *l : {a, b, c, dd})
        if (l->rows < 0 || l->cols < 0 || l->ld < (l->rows > 1 ? l->rows : 1))
            return refuse(inval, call, "a layout whose ld is below its rows");
    for (int32_t t : d->trans)
        if (t != CUBLAS_OP_N && t != CUBLAS_OP_T)
            return refuse(unsup, call, "an operation other than N or T");
    p->ta = (cublasOperation_t)d->trans[0];
    p->tb = (cublasOperation_t)d->trans[1];
    bool an = p->ta == CUBLAS_OP_N, bn = p->tb == CUBLAS_OP_N;
    p->m = an ? a->rows : a->cols;
    p->k = an ? a->cols : a->rows;
    p->n = bn ? b->cols : b->rows;
    if ((bn ? b->rows : b->cols) != p->k)
        return refuse(inval, call, "op(A) and op(B) disagree on K");
    if (dd->rows != p->m || dd->cols != p->n || c->rows != p->m || c->cols != p->n)
        return refuse(inval, call, "C or D is not M × N");
    p->lda = a->ld, p->ldb = b->ld, p->ldc = c->ld, p->ldd = dd->ld;
    p->At = a->type, p->Bt = b->type, p->Ct = c->type, p->Dt = dd->type;
    p->mode[0] = d->mode[0], p->mode[1] = d->mode[1];
    p->scale[0] = d->scale[0], p->scale[1] = d->scale[1];

    if (d->compute != CUBLAS_COMPUTE_32F || d->scale_type != CUDA_R_32F)
        return refuse(unsup, call, "a compute type other than CUBLAS_COMPUTE_32F or a scale type "
                                   "other than CUDA_R_32F");
    bool fp8 = p->At == CUDA_R_8F_E4M3 || p->Bt == CUDA_R_8F_E4M3;
    if (!fp8) {
        /* bf16 or fp32 in, bf16 or fp32 out (fp32 in only to fp32), no scales */
        if (p->At != p->Bt || !bf16_or_fp32(p->At) || p->Ct != p->Dt || !bf16_or_fp32(p->Dt) ||
            (p->At == CUDA_R_32F && p->Dt != CUDA_R_32F))
            return refuse(unsup, call, "a combination of types the stand-in does not have");
        if (p->scale[0] || p->scale[1])
            return refuse(inval, call, "scale pointers on operands that are not FP8");
        if (p->mode[0] != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
            p->mode[1] != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
            return refuse(unsup, call, "scale modes on operands that are not FP8");
        return CUBLAS_STATUS_SUCCESS;
    }
    /* FP8: e4m3 × e4m3 to bf16 or fp32 (C of D's type); an FP8 D is not modelled */
    if (p->At != p->Bt || p->Ct != p->Dt || !bf16_or_fp32(p->Dt))
        return refuse(unsup, call, "an FP8 combination of types the stand-in does not have "
                                   "(A, B e4m3; C, D both bf16 or both fp32)");
    if (p->ta != CUBLAS_OP_T || p->tb != CUBLAS_OP_N)
        return refuse(unsup, call, "FP8 takes the TN format only (TRANSA T, TRANSB N)");
    if ((p->lda * (int64_t)type_size(p->At)) % 16 || (p->ldb * (int64_t)type_size(p->Bt)) % 16 ||
        (p->ldc * (int64_t)type_size(p->Ct)) % 16 || (p->ldd * (int64_t)type_size(p->Dt)) % 16)
        return refuse(unsup, call, "an FP8 matrix whose leading dimension is not a multiple of 16 bytes");
    const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    bool scalar = p->mode[0] == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F &&
                  p->mode[1] == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    bool blocks = block_mode(p->mode[0]) && block_mode(p->mode[1]) &&
                  (p->mode[0] == vec || p->mode[1] == vec); /* BLK128x128 on both is not supported */
    if (!scalar && !blocks)
        return refuse(unsup, call, "scale modes other than SCALAR_32F on both or VEC128_32F with "
                                   "VEC128_32F or BLK128x128_32F");
    if (blocks && (p->m % 4 || p->n % 4))
        return refuse(unsup, call, "block scales with M or N not a multiple of 4");
    return CUBLAS_STATUS_SUCCESS;
}

static bool aligned(const void *ptr, uintptr_t bytes) { return (uintptr_t)ptr % bytes == 0; }

/* The operands and the scales in device memory, or a fault. */
static void lt_in_device(const lt_problem &p, const char *call)
{
    bool an = p.ta == CUBLAS_OP_N, bn = p.tb == CUBLAS_OP_N;
    int64_t ar = an ? p.m : p.k, ac = an ? p.k : p.m, br = bn ? p.k : p.n, bc = bn ? p.n : p.k;
    if (!device_range(p.A, span(ar, ac, p.lda, p.At)))
        fault("%s: A (%p, %lld×%lld, lda %lld) is not in device memory", call, p.A, (long long)ar,
              (long long)ac, (long long)p.lda);
    if (!device_range(p.B, span(br, bc, p.ldb, p.Bt)))
        fault("%s: B (%p, %lld×%lld, ldb %lld) is not in device memory", call, p.B, (long long)br,
              (long long)bc, (long long)p.ldb);
    if (p.beta != 0.0f && !device_range(p.C, span(p.m, p.n, p.ldc, p.Ct)))
        fault("%s: C (%p, %lld×%lld, ldc %lld) is not in device memory", call, p.C, (long long)p.m,
              (long long)p.n, (long long)p.ldc);
    if (!device_range(p.D, span(p.m, p.n, p.ldd, p.Dt)))
        fault("%s: D (%p, %lld×%lld, ldd %lld) is not in device memory", call, p.D, (long long)p.m,
              (long long)p.n, (long long)p.ldd);
    for (int s = 0; s < 2; s++)
        if (p.scale[s] &&
            !device_range(p.scale[s], (size_t)scale_count(p.mode[s], s ? p.n : p.m, p.k) * sizeof(float)))
            fault("%s: the scales of %c (%p, mode %d) are not in device memory", call, "AB"[s],
                  p.scale[s], p.mode[s]);
}

/* D = α·Σ_b sA(i, b)·sB(j, b)·Σ_{k in block b} op(A)(i, k)·op(B)(k, j) + β·C, all in fp32, over the
 * 128-value blocks b of K (one scale pair for all of them in the scalar modes). */
static void lt_run(const lt_problem &p)
{
    if (p.m == 0 || p.n == 0 || !gemm_computed(p.m, p.n, p.k))
        return;
    size_t m = (size_t)p.m, n = (size_t)p.n, k = (size_t)p.k;
    std::vector<float> a, bt; /* op(A) by rows, op(B) by columns */
    gemm_operands(p.A, p.At, p.ta, p.lda, p.B, p.Bt, p.tb, p.ldb, m, n, k, a, bt);
    const float *sa = (const float *)p.scale[0], *sb = (const float *)p.scale[1];
    int64_t blocks = ceil_div(p.k, scale_block);
    for (int64_t j = 0; j < p.n; j++)
        for (int64_t i = 0; i < p.m; i++) {
            float acc = 0;
            for (int64_t b = 0; b < blocks; b++) {
                int64_t from = b * scale_block, len = p.k - from < scale_block ? p.k - from : scale_block;
                float part = dot(&a[(size_t)(i * p.k + from)], &bt[(size_t)(j * p.k + from)], (size_t)len);
                acc += scale_at(sa, p.mode[0], p.m, p.k, i, b) * scale_at(sb, p.mode[1], p.n, p.k, j, b) * part;
            }
            float v = p.alpha * acc; /* β = 0: C is not read (it may hold anything) */
            if (p.beta != 0.0f)
                v += p.beta * load(p.C, p.Ct, (size_t)(i + j * p.ldc));
            store(p.D, p.Dt, (size_t)(i + j * p.ldd), v);
        }
}

/* Whether size is the size of the attribute's value (the library refuses any other). */
static bool sized(size_t size, size_t want) { return size == want; }

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasLtContext{current_device()};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type)
{
    if (!desc)
        return CUBLAS_STATUS_INVALID_VALUE;
    *desc = new cudaemu_lt_desc{compute, scale_type};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t size)
{
    const char *call = "cublasLtMatmulDescSetAttribute";
    if (!desc || !buf)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a NULL descriptor or value");
    bool ok = true;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
        if ((ok = sized(size, sizeof(int32_t))))
            desc->compute = (cublasComputeType_t) * (const int32_t *)buf;
        break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
        if ((ok = sized(size, sizeof(int32_t))))
            desc->scale_type = (cudaDataType) * (const int32_t *)buf;
        break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
        if ((ok = sized(size, sizeof(int32_t))) && *(const int32_t *)buf != CUBLASLT_POINTER_MODE_HOST)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                          "a pointer mode other than host (the stand-in does not model the others)");
        break;
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if ((ok = sized(size, sizeof(int32_t))))
            desc->trans[attr == CUBLASLT_MATMUL_DESC_TRANSB] = *(const int32_t *)buf;
        break;
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
        if ((ok = sized(size, sizeof(void *))))
            desc->scale[attr == CUBLASLT_MATMUL_DESC_B_SCALE_POINTER] = *(const void *const *)buf;
        break;
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
        if ((ok = sized(size, sizeof(int32_t))))
            desc->mode[attr == CUBLASLT_MATMUL_DESC_B_SCALE_MODE] = *(const int32_t *)buf;
        break;
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
        if ((ok = sized(size, sizeof(int8_t))))
            desc->fast_accum = *(const int8_t *)buf;
        break;
    default:
        fprintf(stderr, "cudaemu: %s: attribute %d is not modelled by the stand-in\n", call, (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return ok ? CUBLAS_STATUS_SUCCESS
              : refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a value of the wrong size for the attribute");
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld)
{
    if (!layout)
        return CUBLAS_STATUS_INVALID_VALUE;
    *layout = new cudaemu_lt_layout{type, (int64_t)rows, (int64_t)cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    if (!pref)
        return CUBLAS_STATUS_INVALID_VALUE;
    *pref = new cudaemu_lt_pref();
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size)
{
    const char *call = "cublasLtMatmulPreferenceSetAttribute";
    if (!pref || !buf)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a NULL preference or value");
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (!sized(size, sizeof(uint64_t)))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a value of the wrong size for the attribute");
        pref->max_workspace = *(const uint64_t *)buf;
        return CUBLAS_STATUS_SUCCESS;
    }
    fprintf(stderr, "cudaemu: %s: attribute %d is not modelled by the stand-in\n", call, (int)attr);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returned)
{
    const char *call = "cublasLtMatmulAlgoGetHeuristic";
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!pref || requested < 1 || !results || !returned)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a NULL preference or result, or no result asked for");
    *returned = 0;
    lt_problem p = {};
    cublasStatus_t st = lt_check(desc, Adesc, Bdesc, Cdesc, Ddesc, &p, call);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    /* one algorithm, which needs no workspace (so any MAX_WORKSPACE_BYTES admits it) */
    results[0] = cublasLtMatmulHeuristicResult_t{};
    results[0].algo.data[0] = algo_mark;
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                              cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream)
{
    const char *call = "cublasLtMatmul";
    const cublasStatus_t inval = CUBLAS_STATUS_INVALID_VALUE, unsup = CUBLAS_STATUS_NOT_SUPPORTED;
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    lt_problem p = {};
    cublasStatus_t st = lt_check(desc, Adesc, Bdesc, Cdesc, Ddesc, &p, call);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (!alpha || !beta)
        return refuse(inval, call, "a NULL alpha or beta");
    p.alpha = *(const float *)alpha; /* host pointers (the only pointer mode modelled) */
    p.beta = *(const float *)beta;
    p.A = A, p.B = B, p.C = C, p.D = D;
    bool empty = p.m == 0 || p.n == 0;
    if (!empty && (!D || (p.k > 0 && (!A || !B)) || (p.beta != 0.0f && !C)))
        return refuse(inval, call, "a NULL operand");
    if (C && C == D && (p.ldc != p.ldd || p.Ct != p.Dt))
        return refuse(inval, call, "C in place of D with another leading dimension or type");
    if (algo && algo->data[0] != algo_mark)
        return refuse(inval, call, "an algorithm cublasLtMatmulAlgoGetHeuristic did not return");
    if (workspace && !aligned(workspace, 256))
        return refuse(inval, call, "a workspace not aligned to 256 bytes");
    if (p.At == CUDA_R_8F_E4M3) {
        if (!aligned(A, 16) || !aligned(B, 16) || !aligned(C, 16) || !aligned(D, 16))
            return refuse(unsup, call, "an FP8 operand not aligned to 16 bytes");
        for (int s = 0; s < 2; s++)
            if (block_mode(p.mode[s]) && !p.scale[s])
                return refuse(inval, call, "block scales without a scale pointer");
            else if (block_mode(p.mode[s]) && !aligned(p.scale[s], 16))
                return refuse(unsup, call, "block scales not aligned to 16 bytes");
    }
    if (workspace_bytes > 0 && !device_range(workspace, workspace_bytes))
        fault("%s: the workspace (%p, %zu bytes) is not in device memory", call, workspace,
              workspace_bytes);
    if (!empty)
        lt_in_device(p, call);
    enqueue(stream, call, [p](cudaStream_t) { lt_run(p); });
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
