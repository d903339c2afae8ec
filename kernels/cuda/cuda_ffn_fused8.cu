/* cuda_ffn_fused8.cu - the fused expert FFN with fp8 weights (--gemm fused, --weight-dtype fp8):
 * quantized input rows, pieces of a few rows streaming fp8 codes as moeperf's fp8 kernel does and
 * larger ones on the tensor cores (codes as bf16 through wmma, then the block scales). */
#include <cuda_runtime.h>
#include <mma.h>

#include "cuda_ffn_internal.h"

/* --gemm fused with fp8 weights (w8a8): the fused kernel's pieces on fp8 images and quantized
 * input rows (quantized_row_bytes), one quantize launch and one GEMM launch per stage for every
 * expert with rows and every shared expert. A piece of at most MP_SKINNY_ROWS rows streams its
 * column tile's codes as fp8w_ffn does (fp8w_cols, twice: the 64 image columns of a fused tile);
 * a piece of up to FUSED_ROWS rows runs on the tensor cores: codes of both operands turned into
 * bf16 (exact: every e4m3 value is a bf16 value) and multiplied by wmma, whose fp32 products of
 * two codes are exact, each 128-value k block's sums then scaled by the weight block's and each
 * row's input block's scales, as fp8w_ffn and cuBLASLt's block-scaled GEMM scale them. */
struct fused8_mma_smem {
    int4 a[FUSED_ROWS][MMA_LDA / 8]; /* input codes as bf16, row-major */
    int4 w[64][MMA_LDA / 8];         /* weight codes as bf16, a column's k values contiguous */
    float c[FUSED_ROWS][64 + 8];
    float sx[FUSED_ROWS];            /* the rows' scales of this k block */
    int last;
};
template <int R> union alignas(128) fused8_smem {
    struct {
        float red[FP8W_COLS][R][33];
        float sum[R][64];
        int last;
    } tile;
    struct fused8_mma_smem mma;
};

/* Eight e4m3 codes (a 64-bit word, lowest byte first) as eight bf16 values in an int4. */
__device__ __forceinline__ int4 fp8x8_to_bf16(uint64_t v)
{
    float f[8];
    fp8x4_to_float((uint32_t)v, f);
    fp8x4_to_float((uint32_t)(v >> 32), f + 4);
    bf16 b[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        b[i] = __float2bfloat16(f[i]);
    int4 out;
    memcpy(&out, b, sizeof out);
    return out;
}

/* The image column of position q (0..63) of column tile ct: with SwiGLU gate columns ct·32 + q
 * for q < 32 and up columns N + ct·32 + q − 32, else ct·64 + q. */
__device__ __forceinline__ int tile_column(const struct fused_table &t, int ct, int q)
{
    return t.swiglu ? (q >= 32 ? t.N : 0) + ct * 32 + (q & 31) : ct * 64 + q;
}

/* One output tile of a piece of m ≤ FUSED_ROWS quantized rows on the tensor cores (fp8 codes as
 * bf16, wmma 16×16×16 as mma_tile: warp i the 16 rows of fragment row i / 2 and 32 columns of half
 * i % 2). Per 128-value k block (this block's: blockIdx.z, + S, …) the fragments sum codes times
 * codes over 32-value steps staged through shared memory, then each thread adds its column's 16
 * rows of them, times the weight block's scale and each row's scale, into its registers; the
 * tile ends as mma_tile's (split K in z order, SwiGLU). */
__device__ __forceinline__ void fused8_mma_tile(const struct fused_table &t, int m,
                                                const unsigned char *img, const unsigned char *in,
                                                bf16 *out, int ct, int tile,
                                                struct fused8_mma_smem &sm)
{
    using namespace nvcuda;
    const int warp = threadIdx.x >> 5, fr = warp >> 1, fc = (warp & 1) * 2;
    const int S = (int)gridDim.z, kblocks = mp_fp8_blocks(t.K);
    const size_t ld = mp_fp8_image_ld(t.K);
    const float *scales = mp_fp8_image_scales(img, t.K, t.N, t.swiglu ? 2 : 1);
    /* loads: input row / weight column tid / 4, k offset (tid % 4)·8; sums: column q, rows
     * tid / 64 + 4i */
    const int lr = threadIdx.x >> 2, lk = (threadIdx.x & 3) * 8, q = threadIdx.x & 63;
    const unsigned char *wcol = img + (size_t)tile_column(t, ct, lr) * ld;
    const int cq = tile_column(t, ct, q);
    float tot[FUSED_ROWS / 4] = {};
    for (int kb = (int)blockIdx.z; kb < kblocks; kb += S) {
        const int k0 = kb * MP_FP8_BLOCK;
        const int k1 = k0 + MP_FP8_BLOCK < t.K ? k0 + MP_FP8_BLOCK : t.K;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
        wmma::fill_fragment(acc[0], 0.0f);
        wmma::fill_fragment(acc[1], 0.0f);
        for (int k = k0; k < k1; k += FUSED_KSTEP) {
            uint64_t av = 0;
            if (lr < m)
                av = *(const uint64_t *)(in + (size_t)lr * t.lda + k + lk);
            const uint64_t wv = *(const uint64_t *)(wcol + k + lk);
            const int4 ab = fp8x8_to_bf16(av), wb = fp8x8_to_bf16(wv);
            __syncthreads(); /* the last step's fragments (and the last block's sums) are read */
            sm.a[lr][lk / 8] = ab;
            sm.w[lr][lk / 8] = wb;
            __syncthreads();
            mma_kstep<wmma::col_major>(
                acc, (const bf16 *)&sm.a[fr * 16][0],
                [&](int kk, int j) { return (const bf16 *)&sm.w[(fc + j) * 16][kk / 8]; }, MMA_LDA);
        }
        if (threadIdx.x < FUSED_ROWS)
            sm.sx[threadIdx.x] = (int)threadIdx.x < m
                                     ? ((const float *)(const void *)(in + (size_t)threadIdx.x * t.lda + t.K))[kb]
                                     : 0.0f;
        wmma::store_matrix_sync(&sm.c[fr * 16][fc * 16], acc[0], 64 + 8, wmma::mem_row_major);
        wmma::store_matrix_sync(&sm.c[fr * 16][(fc + 1) * 16], acc[1], 64 + 8, wmma::mem_row_major);
        __syncthreads();
        const float sw = scales[mp_fp8_image_scale_index(t.K, t.N, cq, k0)];
#pragma unroll
        for (int i = 0; i < FUSED_ROWS / 4; i++) {
            const int r = (int)(threadIdx.x >> 6) + 4 * i;
            tot[i] += sw * sm.sx[r] * sm.c[r][q];
        }
    }
    __syncthreads(); /* every thread's last sums are read */
#pragma unroll
    for (int i = 0; i < FUSED_ROWS / 4; i++)
        sm.c[(threadIdx.x >> 6) + 4 * i][q] = tot[i];
    __syncthreads();
    tile_finish(t, m, &sm.c[0][0], 64 + 8, sm.last, out, ct, tile, FUSED_TILE);
}

/* The fp8 fused kernel's block: piece blockIdx.x, column tile blockIdx.y; R: the most rows of any
 * skinny piece in the launch. */
template <int R> __device__ __forceinline__ void fused8_ffn(const struct fused_table &t)
{
    __shared__ fused8_smem<R> sm;
    const int p = (int)blockIdx.x, ct = (int)blockIdx.y;
    const int tile = ct * (int)gridDim.x + p;
    const int e = fused_entry_of(t, p), rows = t.rows[e];
    const unsigned char *img = (const unsigned char *)t.w[e], *in = (const unsigned char *)t.in[e];
    if (rows <= MP_SKINNY_ROWS) {
        for (int half = 0; half < 2; half++) {
            const int ocol = t.swiglu ? ct * 32 + half * 16 : ct * 64 + half * FP8W_COLS;
            fp8w_cols<R>(t.K, t.N, t.swiglu, (size_t)t.lda, img, in, rows, ocol, sm.tile.red,
                         &sm.tile.sum[0][0], 64, t.swiglu ? half * 16 : half * FP8W_COLS,
                         32 + half * 16);
            __syncthreads();
        }
        tile_finish(t, rows, &sm.tile.sum[0][0], 64, sm.tile.last, t.out[e], ct, tile, FUSED_TILE);
        return;
    }
    const int r0 = (p - t.first[e]) * FUSED_ROWS;
    const int m = rows - r0 < FUSED_ROWS ? rows - r0 : FUSED_ROWS;
    fused8_mma_tile(t, m, img, in + (size_t)r0 * t.lda, t.out[e] + (size_t)r0 * t.ldc, ct, tile,
                    sm.mma);
}

/* fused8_ffn for launches whose skinny pieces have at most 1, 2, 4 or 8 (MP_SKINNY_ROWS) rows */
__global__ void __launch_bounds__(256) fused8_ffn_r1_kernel(const __grid_constant__ struct fused_table t)
{
    fused8_ffn<1>(t);
}
__global__ void __launch_bounds__(256) fused8_ffn_r2_kernel(const __grid_constant__ struct fused_table t)
{
    fused8_ffn<2>(t);
}
__global__ void __launch_bounds__(256) fused8_ffn_r4_kernel(const __grid_constant__ struct fused_table t)
{
    fused8_ffn<4>(t);
}
__global__ void __launch_bounds__(256) fused8_ffn_r8_kernel(const __grid_constant__ struct fused_table t)
{
    fused8_ffn<MP_SKINNY_ROWS>(t);
}

/* Rows of up to two ranges of K bf16 values (row strides lds) to quantize, range 0's rows first,
 * into consecutive rows of quantized_row_bytes(K) at dst; passed by value. */
struct quantize_ranges {
    int K;
    long rows[2], lds[2];
    const bf16 *src[2];
    unsigned char *dst;
};

/* Quantize the ranges' rows (base/fp8.h's rules: one scale amax/448 per 128 values). grid (rows,
 * ⌈K/128⌉), 128 threads: a block takes one row's 128-value block. */
__global__ void quantize_ranges_kernel(const __grid_constant__ struct quantize_ranges q)
{
    const long r = blockIdx.x;
    const int b = (int)blockIdx.y, k = b * MP_FP8_BLOCK + (int)threadIdx.x, i = r >= q.rows[0];
    const long rr = r - (i ? q.rows[0] : 0);
    const float v = k < q.K ? __bfloat162float(q.src[i][rr * q.lds[i] + k]) : 0.0f;
    const float s = block_scale(v);
    unsigned char *row = q.dst + (size_t)r * quantized_row_bytes(q.K);
    if (k < q.K)
        row[k] = mp_fp8_code(v, s);
    if (threadIdx.x == 0)
        ((float *)(void *)(row + q.K))[b] = s;
}

static int quantize_ranges_launch(struct mp_compute *c, const struct quantize_ranges *q)
{
    const long rows = q->rows[0] + q->rows[1];
    if (rows <= 0)
        return MP_OK;
    quantize_ranges_kernel<<<dim3((unsigned)rows, (unsigned)mp_fp8_blocks(q->K)), MP_FP8_BLOCK, 0,
                             c->stream>>>(*q);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* Launch the fp8 fused kernel for c->fused's entries (filled but for the shapes and pieces): K,
 * N per part, quantized input rows of lda bytes, outputs of row stride ldc; K split as the fp8
 * kernel splits it (at most one step of FP8W_STEP values per split). */
static int fused8_launch(struct mp_compute *c, int K, int N, int lda, int ldc, int swiglu)
{
    struct fused_table *t = &c->fused;
    int skinny_rows, mma;
    const int pieces = fused_pieces(t, K, N, 0, lda, ldc, swiglu, &skinny_rows, &mma);
    const int cts = swiglu ? N / 32 : N / 64;
    const int S = split_k(c, pieces * cts, 2, (K + FP8W_STEP - 1) / FP8W_STEP, FUSED_TILE,
                          "fused fp8 kernel");
    return table_launch(c, t, skinny_rows, (unsigned)pieces, (unsigned)cts, S,
                        fused8_ffn_r1_kernel, fused8_ffn_r2_kernel, fused8_ffn_r4_kernel,
                        fused8_ffn_r8_kernel);
}

/* --gemm fused, --weight-dtype fp8: the routed rows and the shared experts' rows quantized (one
 * launch), [gate | up] with SwiGLU for every entry into the activations (a launch per
 * SKINNY_TABLE entries), the activations quantized (one launch), the down projection (likewise).
 * Shapes the kernel does not take (fused_fits) run as --gemm grouped, shared experts after. */
int ffn_fused_fp8(struct mp_compute *c, const struct mp_ffn_args *a)
{
    const int H = a->H, Dl = a->Dl;
    const long base = a->row_off[0], routed = a->row_off[a->nexp] - base;
    const long sh = a->nshared > 0 ? a->shared_rows : 0, acts = routed + a->nshared * sh;
    if (!fused_fits(a)) {
        if (ffn_fp8_own(c, a, rows_any) != MP_OK)
            return MP_ERR_RUNTIME;
        const long off[2] = {0, sh};
        for (int s = 0; s < a->nshared && sh > 0; s++) {
            struct mp_ffn_args one = *a;
            one.in = a->shared_in;
            one.out = (bf16 *)a->shared_out + (size_t)s * sh * H;
            one.row_off = off;
            one.nexp = 1;
            one.wgu = a->wgu + a->nexp + s;
            one.wd = a->wd + a->nexp + s;
            if (ffn_fp8_own(c, &one, rows_any) != MP_OK)
                return MP_ERR_RUNTIME;
        }
        return MP_OK;
    }
    const size_t qh = quantized_row_bytes(H), qd = quantized_row_bytes(Dl);
    const size_t xq = (size_t)(routed + sh) * qh + (size_t)acts * qd;
    const size_t act = (size_t)acts * Dl * sizeof(bf16);
    if (xq > c->xq_cap || act > c->fused_act_cap) {
        if (c->capturing) {
            mp_error("--graph: the fused fp8 FFN's scratch (%zu and %zu bytes) was not reserved "
                     "before the capture", xq, act);
            return MP_ERR_RUNTIME;
        }
        if (grow((void **)&c->d_xq, &c->xq_cap, xq) != MP_OK ||
            grow((void **)&c->fused_act, &c->fused_act_cap, act) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    if (fused_reserve_entries(c, a->nexp + a->nshared) != MP_OK)
        return MP_ERR_RUNTIME;
    unsigned char *xq1 = c->d_xq, *xq2 = c->d_xq + (size_t)(routed + sh) * qh;
    struct fused_entry *ent = c->fused_ent;
    int n = 0;
    for (int e = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], rows = a->row_off[e + 1] - r0;
        if (rows > 0)
            ent[n++] = (struct fused_entry){rows, a->wgu[e], a->wd[e], xq1 + (size_t)(r0 - base) * qh,
                                            c->fused_act + (r0 - base) * Dl, (bf16 *)a->out + r0 * H};
    }
    for (int s = 0; s < a->nshared && sh > 0; s++)
        ent[n++] = (struct fused_entry){sh, a->wgu[a->nexp + s], a->wd[a->nexp + s],
                                        xq1 + (size_t)routed * qh, c->fused_act + (routed + s * sh) * Dl,
                                        (bf16 *)a->shared_out + (size_t)s * sh * H};
    if (n == 0)
        return MP_OK;
    struct quantize_ranges q = {H, {routed, sh}, {H, H},
                                {(const bf16 *)a->in + base * H, (const bf16 *)a->shared_in}, xq1};
    if (quantize_ranges_launch(c, &q) != MP_OK)
        return MP_ERR_RUNTIME;
    struct fused_table *t = &c->fused;
    for (int i0 = 0; i0 < n; i0 += SKINNY_TABLE) { /* [gate | up] with SwiGLU */
        t->n = n - i0 < SKINNY_TABLE ? n - i0 : SKINNY_TABLE;
        for (int i = 0; i < t->n; i++) {
            t->rows[i] = (int)ent[i0 + i].rows;
            t->w[i] = ent[i0 + i].wgu;
            t->in[i] = ent[i0 + i].in;
            t->out[i] = ent[i0 + i].act;
        }
        if (fused8_launch(c, H, Dl, (int)qh, Dl, 1) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    struct quantize_ranges qa = {Dl, {acts, 0}, {Dl, Dl}, {c->fused_act, c->fused_act}, xq2};
    if (quantize_ranges_launch(c, &qa) != MP_OK)
        return MP_ERR_RUNTIME;
    for (int i0 = 0; i0 < n; i0 += SKINNY_TABLE) { /* the down projection */
        t->n = n - i0 < SKINNY_TABLE ? n - i0 : SKINNY_TABLE;
        for (int i = 0; i < t->n; i++) {
            t->rows[i] = (int)ent[i0 + i].rows;
            t->w[i] = ent[i0 + i].wd;
            t->in[i] = xq2 + (size_t)((ent[i0 + i].act - c->fused_act) / Dl) * qd;
            t->out[i] = ent[i0 + i].out;
        }
        if (fused8_launch(c, Dl, H, (int)qd, H, 0) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    return MP_OK;
}
