/* cuda_ffn_gemm.cu - the expert FFN through cuBLAS and cuBLASLt: the GEMM loop and the grouped
 * GEMM in bf16, SwiGLU between their two stages, cuBLASLt's block-scaled FP8 GEMM for fp8
 * weights, and the FFN's entry, which picks the path of --gemm and --weight-dtype. */
#include "cuda_ffn_internal.h"

/* C[m×n] = A[m×k]·B[k×n], row-major, bf16 inputs, fp32 compute; cuBLAS is column-major, so this
 * computes Cᵀ = Bᵀ·Aᵀ with the same memory. */
cublasStatus_t gemm_rm(cublasHandle_t h, int m, int n, int k, const void *A, int lda,
                       const void *B, int ldb, void *C, cudaDataType ctype, int ldc)
{
    const float one = 1.0f, zero = 0.0f;
    return cublas.gemm_ex(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, B, CUDA_R_16BF, ldb, A,
                        CUDA_R_16BF, lda, &zero, C, ctype, ldc, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
}

/* SwiGLU in place on rows of [gate | up]: the first half of each row becomes the activation. */
__global__ void swiglu_kernel(bf16 *g, long m, int Dl)
{
    long i = blockIdx.x;
    if (i >= m)
        return;
    bf16 *row = g + i * 2L * Dl;
    for (int j = threadIdx.x; j < Dl; j += blockDim.x)
        row[j] = __float2bfloat16(mp_swiglu(__bfloat162float(row[j]), __bfloat162float(row[Dl + j])));
}

/* Room for `n` problems in the grouped GEMM's argument arrays (grown on a first, untimed call). */
static int grouped_reserve(struct mp_compute *c, int n)
{
    struct grouped_args *g = c->g;
    if (g && g->cap >= n)
        return MP_OK;
    if (!g && !(g = c->g = (struct grouped_args *)calloc(1, sizeof *g)))
        return MP_ERR_RUNTIME;
    if (c->capturing) { /* nothing may allocate inside a capture */
        mp_error("--graph: the grouped GEMM's arguments for %d experts were not reserved before "
                 "the capture", n);
        return MP_ERR_RUNTIME;
    }
    free(g->op);
    free(g->m);
    free(g->alpha);
    free(g->ptr);
    cudaFree(g->d_ptr);
    g->d_ptr = NULL;
    g->cap = 0;
    g->op = (cublasOperation_t *)malloc((size_t)n * sizeof *g->op);
    g->m = (int *)malloc((size_t)n * 7 * sizeof(int)); /* m, n, k, lda, ldb, ldc, size */
    g->alpha = (float *)malloc((size_t)n * 2 * sizeof(float));
    g->ptr = (const void **)malloc((size_t)n * 3 * sizeof(void *));
    if (!g->op || !g->m || !g->alpha || !g->ptr)
        return MP_ERR_RUNTIME;
    CUDACHECK(cudaMalloc((void **)&g->d_ptr, (size_t)n * 3 * sizeof(void *)));
    g->n = g->m + n;
    g->k = g->m + 2 * n;
    g->lda = g->m + 3 * n;
    g->ldb = g->m + 4 * n;
    g->ldc = g->m + 5 * n;
    g->size = g->m + 6 * n;
    g->beta = g->alpha + n;
    for (int i = 0; i < n; i++) {
        g->op[i] = CUBLAS_OP_N;
        g->alpha[i] = 1.0f;
        g->beta[i] = 0.0f;
        g->size[i] = 1;
    }
    g->cap = n;
    return MP_OK;
}

/* out[i] = t.p[i] for i < t.n: pointers from the launch's parameter to device memory. */
__global__ void fill_pointers_kernel(const __grid_constant__ struct ptr_table t, const void **out)
{
    for (int i = threadIdx.x; i < t.n; i += blockDim.x)
        out[i] = t.p[i];
}

/* One stage of the expert FFN for `np` experts as one grouped GEMM: problem i computes
 * C_i[rows_i × N] = A_i[rows_i × K] · W_i[K × N], row-major, as cuBLAS's column-major
 * C_iᵀ = W_iᵀ·A_iᵀ (the same memory). The A, B, C pointer arrays reach the device as kernel
 * parameters (struct ptr_table), so the host arrays can be refilled right away. */
static int grouped_stage(struct mp_compute *c, int np, int N, int K, int lda, int ldc)
{
    struct grouped_args *g = c->g;
    for (int at = 0; at < 3 * np; at += PTR_TABLE) {
        c->ptrs.n = 3 * np - at < PTR_TABLE ? 3 * np - at : PTR_TABLE;
        memcpy(c->ptrs.p, g->ptr + at, (size_t)c->ptrs.n * sizeof(void *));
        fill_pointers_kernel<<<1, 256, 0, c->stream>>>(c->ptrs, (const void **)g->d_ptr + at);
        CUDACHECK(cudaGetLastError());
    }
    for (int i = 0; i < np; i++) {
        g->k[i] = K;
        g->n[i] = g->m[i]; /* rows of problem i (filled by the caller in m) */
        g->m[i] = N;
        g->lda[i] = N;     /* W: K × N row-major */
        g->ldb[i] = lda;   /* A: rows × K row-major */
        g->ldc[i] = ldc;
    }
    CUBLASCHECK(cublas.gemm_grouped_batched_ex(
        c->blas, g->op, g->op, g->m, g->n, g->k, g->alpha, (const void *const *)g->d_ptr,
        CUDA_R_16BF, g->lda, (const void *const *)(g->d_ptr + np), CUDA_R_16BF, g->ldb, g->beta,
        g->d_ptr + 2 * np, CUDA_R_16BF, g->ldc, np, g->size, CUBLAS_COMPUTE_32F));
    return MP_OK;
}

/* The expert FFN with grouped GEMMs: [gate | up] for every expert in one call, SwiGLU over all
 * rows at once (they are contiguous), then the down projection in one call. Work holds all rows. */
static int ffn_grouped(struct mp_compute *c, const struct mp_ffn_args *a)
{
    const bf16 *in = (const bf16 *)a->in;
    bf16 *out = (bf16 *)a->out, *g = (bf16 *)a->work;
    int H = a->H, Dl = a->Dl, np = 0;
    long base = a->row_off[0], total = a->row_off[a->nexp] - base;
    if (total <= 0)
        return MP_OK;
    if (grouped_reserve(c, a->nexp) != MP_OK) {
        mp_error("out of memory for the grouped GEMM's arguments (%d experts)", a->nexp);
        return MP_ERR_RUNTIME;
    }
    struct grouped_args *ga = c->g;
    /* stage 1: W = wgu[e] (H × 2Dl), A = in rows, C = work rows */
    for (int e = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
        if (m <= 0)
            continue;
        ga->m[np] = (int)m;
        np++;
    }
    for (int e = 0, i = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
        if (m <= 0)
            continue;
        ga->ptr[i] = a->wgu[e];
        ga->ptr[np + i] = in + r0 * H;
        ga->ptr[2 * np + i] = g + (r0 - base) * 2L * Dl;
        i++;
    }
    if (grouped_stage(c, np, 2 * Dl, H, H, 2 * Dl) != MP_OK)
        return MP_ERR_RUNTIME;
    swiglu_kernel<<<(unsigned)total, 256, 0, c->stream>>>(g, total, Dl);
    CUDACHECK(cudaGetLastError());
    /* stage 2: W = wd[e] (Dl × H), A = activation rows (stride 2Dl), C = out rows */
    for (int e = 0, i = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
        if (m <= 0)
            continue;
        ga->m[i] = (int)m;
        ga->ptr[i] = a->wd[e];
        ga->ptr[np + i] = g + (r0 - base) * 2L * Dl;
        ga->ptr[2 * np + i] = out + r0 * H;
        i++;
    }
    return grouped_stage(c, np, H, Dl, 2 * Dl, H);
}

/* Expert e of `a` as two GEMMs: [gate | up] = in · [Wg | Wu] (m × 2Dl) into `g`, SwiGLU, then
 * act · Wd (m × H). */
int ffn_one_expert(struct mp_compute *c, const struct mp_ffn_args *a, int e, bf16 *g)
{
    const bf16 *in = (const bf16 *)a->in;
    bf16 *out = (bf16 *)a->out;
    int H = a->H, Dl = a->Dl;
    long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
    if (m <= 0)
        return MP_OK;
    CUBLASCHECK(gemm_rm(c->blas, (int)m, 2 * Dl, H, in + r0 * H, H, a->wgu[e], 2 * Dl, g,
                        CUDA_R_16BF, 2 * Dl));
    swiglu_kernel<<<(unsigned)m, 256, 0, c->stream>>>(g, m, Dl);
    CUDACHECK(cudaGetLastError());
    CUBLASCHECK(gemm_rm(c->blas, (int)m, H, Dl, g, 2 * Dl, a->wd[e], H, out + r0 * H, CUDA_R_16BF,
                        H));
    return MP_OK;
}

/* cuBLASLt's block-scaled FP8 GEMM (Hopper; cuBLAS documentation, cublasLtMatmul and section
 * 3.1.4.5): D = op(A)·op(B) in the "TN" format, A the K-major fp8 image of a weight matrix (M =
 * parts·N outputs, its 128×128 block scales in the BLK128x128_32F layout), B the activations'
 * codes (K × rows, K-major) with one scale per 128 values (VEC128_32F, k-block major), D bf16. */

/* Quantize rows [0, m) of x (row stride lda, K values) into c->d_q (row stride ld = K rounded up
 * to 16, base/fp8.h's rules: one scale amax/448 per 128 values) and their scales into c->d_qs at
 * k-block·mpad + row; rows [m, mpad) get zero codes and scales. grid (mpad, ⌈K/128⌉), 128 threads:
 * a block takes one row's 128-value block. */
__global__ void quantize_rows_kernel(const bf16 *x, long lda, int K, long m, long mpad, size_t ld,
                                     unsigned char *q, float *qs)
{
    const long r = blockIdx.x;
    const int b = (int)blockIdx.y, k = b * MP_FP8_BLOCK + (int)threadIdx.x;
    float v = r < m && k < K ? __bfloat162float(x[r * lda + k]) : 0.0f;
    const float s = block_scale(v);
    if (k < K)
        q[r * ld + k] = r < m ? mp_fp8_code(v, s) : 0;
    if (threadIdx.x == 0)
        qs[(long)b * mpad + r] = r < m ? s : 0.0f;
}

/* Room for the GEMM of `mpad` rows: codes, scales and output (first, untimed calls only). */
static int lt_reserve(struct mp_compute *c, long mpad, int K, long M)
{
    size_t q = (size_t)mpad * mp_fp8_image_ld(K), qs = (size_t)mpad * mp_fp8_blocks(K) * sizeof(float);
    size_t out = (size_t)mpad * (size_t)M * sizeof(bf16);
    if (q <= c->q_cap && qs <= c->qs_cap && out <= c->lt_out_cap)
        return MP_OK;
    if (c->capturing) {
        mp_error("--graph: the FP8 GEMM's scratch for %ld rows was not reserved before the capture",
                 mpad);
        return MP_ERR_RUNTIME;
    }
    if (grow((void **)&c->d_q, &c->q_cap, q) != MP_OK ||
        grow((void **)&c->d_qs, &c->qs_cap, qs) != MP_OK ||
        grow((void **)&c->d_lt_out, &c->lt_out_cap, out) != MP_OK)
        return MP_ERR_RUNTIME;
    return MP_OK;
}

/* D (mpad rows of M = parts·N bf16 values) = the quantized rows (q: mpad rows of mp_fp8_image_ld(K)
 * codes, qs: their scales k-block major) · W, W the image img of `parts` K×N matrices, through
 * cuBLASLt; mpad a multiple of 4. */
int lt_matmul(struct mp_compute *c, const void *img, int K, int N, int parts,
              const unsigned char *q, const float *qs, long mpad, bf16 *D)
{
    const long M = (long)parts * N;
    const size_t ld = mp_fp8_image_ld(K);
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld_ = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    const int32_t blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                  vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const float *a_scale = mp_fp8_image_scales((const unsigned char *)img, K, N, parts),
                *b_scale = qs;
    const float one = 1.0f, zero = 0.0f;
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublasStatus_t st = cublaslt.desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
#define LT_STEP(call)                                                                              \
    if (st == CUBLAS_STATUS_SUCCESS)                                                               \
        st = (call);
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &blk, sizeof blk));
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec));
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
    LT_STEP(cublaslt.layout_create(&la, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)M, (int64_t)ld));
    LT_STEP(cublaslt.layout_create(&lb, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)mpad, (int64_t)ld));
    LT_STEP(cublaslt.layout_create(&ld_, CUDA_R_16BF, (uint64_t)M, (uint64_t)mpad, (int64_t)M));
    LT_STEP(cublaslt.pref_create(&pref));
    LT_STEP(cublaslt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c->blas_ws_bytes,
                              sizeof c->blas_ws_bytes));
    LT_STEP(cublaslt.heuristic(c->lt, desc, la, lb, ld_, ld_, pref, 1, &h, &found));
    if (st == CUBLAS_STATUS_SUCCESS && found < 1)
        st = CUBLAS_STATUS_NOT_SUPPORTED;
    LT_STEP(cublaslt.matmul(c->lt, desc, &one, img, la, q, lb, &zero, D, ld_, D, ld_, &h.algo,
                            c->blas_ws, c->blas_ws_bytes, c->stream));
#undef LT_STEP
    if (pref)
        cublaslt.pref_destroy(pref);
    if (ld_)
        cublaslt.layout_destroy(ld_);
    if (lb)
        cublaslt.layout_destroy(lb);
    if (la)
        cublaslt.layout_destroy(la);
    if (desc)
        cublaslt.desc_destroy(desc);
    if (st != CUBLAS_STATUS_SUCCESS) {
        mp_error("cuBLASLt FP8 GEMM (%ld×%d by %d×%ld, block scales): status %d", mpad, K, K, M,
                 (int)st);
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* out (m rows, row stride M) = x (m rows, stride lda, K values) · W, W the image img of `parts`
 * K×N matrices (M = parts·N outputs), through cuBLASLt: x quantized, the GEMM over m rounded up to
 * 4 rows into the padded output, its first m rows copied to out. */
static int lt_gemm(struct mp_compute *c, const bf16 *x, long lda, long m, const void *img, int K,
                   int N, int parts, bf16 *out)
{
    const long M = (long)parts * N, mpad = (m + 3) & ~3L;
    if (lt_reserve(c, mpad, K, M) != MP_OK)
        return MP_ERR_RUNTIME;
    quantize_rows_kernel<<<dim3((unsigned)mpad, (unsigned)mp_fp8_blocks(K)), MP_FP8_BLOCK, 0,
                           c->stream>>>(x, lda, K, m, mpad, mp_fp8_image_ld(K), c->d_q, c->d_qs);
    CUDACHECK(cudaGetLastError());
    if (lt_matmul(c, img, K, N, parts, c->d_q, c->d_qs, mpad, c->d_lt_out) != MP_OK)
        return MP_ERR_RUNTIME;
    CUDACHECK(cudaMemcpyAsync(out, c->d_lt_out, (size_t)m * (size_t)M * sizeof(bf16),
                              cudaMemcpyDeviceToDevice, c->stream));
    return MP_OK;
}

/* The experts `take` accepts, whatever their rows, through cuBLASLt's FP8 GEMM: [gate | up],
 * SwiGLU, down projection, one expert at a time. Where the gate/up width Dl is not a multiple of
 * 128, cuBLASLt's 128×128 block layout would make blocks straddle the gate and up matrices, which
 * the image quantizes apart: such shapes run through moeperf's kernel in pieces instead. */
int ffn_fp8_large(struct mp_compute *c, const struct mp_ffn_args *a, int (*take)(long rows))
{
    if (a->Dl % MP_FP8_BLOCK)
        return ffn_fp8_own(c, a, take);
    const bf16 *in = (const bf16 *)a->in;
    bf16 *out = (bf16 *)a->out, *g = (bf16 *)a->work;
    int H = a->H, Dl = a->Dl;
    long base = a->row_off[0];
    for (int e = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
        if (m < 1 || !take(m))
            continue;
        bf16 *ge = g + (r0 - base) * 2L * Dl;
        if (lt_gemm(c, in + r0 * H, H, m, a->wgu[e], H, Dl, 2, ge) != MP_OK)
            return MP_ERR_RUNTIME;
        swiglu_kernel<<<(unsigned)m, 256, 0, c->stream>>>(ge, m, Dl);
        CUDACHECK(cudaGetLastError());
        if (lt_gemm(c, ge, 2L * Dl, m, a->wd[e], Dl, H, 1, out + r0 * H) != MP_OK)
            return MP_ERR_RUNTIME;
        if (a->progress)
            a->progress(a->progress_arg);
    }
    return MP_OK;
}

int cuda_expert_ffn(struct mp_compute *c, const struct mp_ffn_args *a)
{
    if (a->weight_dtype == MP_DTYPE_FP8)
        return ffn_fp8(c, a);
    if (a->gemm == MP_GEMM_GROUPED)
        return ffn_grouped(c, a);
    if (a->gemm == MP_GEMM_SKINNY)
        return ffn_skinny(c, a);
    if (a->gemm == MP_GEMM_FUSED)
        return ffn_fused(c, a);
    for (int e = 0; e < a->nexp; e++)
        if (ffn_one_expert(c, a, e, (bf16 *)a->work) != MP_OK)
            return MP_ERR_RUNTIME;
    return MP_OK;
}
