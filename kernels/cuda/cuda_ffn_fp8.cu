/* cuda_ffn_fp8.cu - the expert FFN with fp8 weights through moeperf's own kernel (w8a8: the input
 * rows quantized first, pieces of at most MP_SKINNY_ROWS rows streaming the fp8 images), and which
 * fp8 path each --gemm mode takes. */
#include "cuda_ffn_internal.h"

/* The lanes' partials of fp8w_cols, padded against bank conflicts; and a tile's sums. */
template <int R> struct fp8w_smem {
    float red[FP8W_COLS][R][33];
    float sum[R][FP8W_COLS];
    int last;
};

/* fp8w_ffn's block: piece blockIdx.y of table t, FP8W_COLS image columns blockIdx.x. */
template <int R> __device__ __forceinline__ void fp8w_ffn(const struct skinny_table &t)
{
    __shared__ fp8w_smem<R> sm;
    const int e = blockIdx.y, m = t.rows[e];
    const int S = (int)gridDim.z, tile = e * (int)gridDim.x + (int)blockIdx.x;
    fp8w_cols<R>(t.K, t.N, t.swiglu, (size_t)t.lda, (const unsigned char *)t.w[e],
                 (const unsigned char *)t.in[e], m,
                 (int)blockIdx.x * (t.swiglu ? 16 : FP8W_COLS), sm.red, &sm.sum[0][0], FP8W_COLS,
                 0, 16);
    float(*sum)[FP8W_COLS] = sm.sum;
    if (S > 1) { /* split K: the tile's last block to finish adds the partials */
        float *mine = t.ws + ((size_t)tile * S + blockIdx.z) * FP8W_TILE;
        __syncthreads();
        for (int i = threadIdx.x; i < FP8W_COLS * m; i += blockDim.x)
            mine[i] = sum[i / FP8W_COLS][i % FP8W_COLS];
        __threadfence(); /* the partial is visible device-wide before the count says so */
        __syncthreads();
        if (threadIdx.x == 0)
            sm.last = atomicAdd(&t.count[tile], 1) == S - 1;
        __syncthreads();
        if (!sm.last)
            return;
        __threadfence();
        const volatile float *ps = t.ws + (size_t)tile * S * FP8W_TILE;
        for (int i = threadIdx.x; i < FP8W_COLS * m; i += blockDim.x) {
            float v = 0.0f;
            for (int z = 0; z < S; z++)
                v += ps[(size_t)z * FP8W_TILE + i];
            sum[i / FP8W_COLS][i % FP8W_COLS] = v;
        }
        if (threadIdx.x == 0)
            t.count[tile] = 0;
    }
    __syncthreads();
    if (t.swiglu) { /* gate and up rounded to bf16 first, as the GEMM paths store them */
        for (int i = threadIdx.x; i < 16 * m; i += blockDim.x) {
            int r = i / 16, j = i % 16;
            float gate = __bfloat162float(__float2bfloat16(sum[r][j]));
            float up = __bfloat162float(__float2bfloat16(sum[r][16 + j]));
            t.out[e][(size_t)r * t.ldc + blockIdx.x * 16 + j] = __float2bfloat16(mp_swiglu(gate, up));
        }
    } else {
        for (int i = threadIdx.x; i < FP8W_COLS * m; i += blockDim.x) {
            int r = i / FP8W_COLS, j = i % FP8W_COLS;
            t.out[e][(size_t)r * t.ldc + blockIdx.x * FP8W_COLS + j] = __float2bfloat16(sum[r][j]);
        }
    }
}

/* fp8w_ffn for tables whose pieces have at most 1, 2, 4 or 8 (MP_SKINNY_ROWS) rows */
__global__ void __launch_bounds__(256) fp8w_ffn_r1_kernel(const __grid_constant__ struct skinny_table t)
{
    fp8w_ffn<1>(t);
}
__global__ void __launch_bounds__(256) fp8w_ffn_r2_kernel(const __grid_constant__ struct skinny_table t)
{
    fp8w_ffn<2>(t);
}
__global__ void __launch_bounds__(256) fp8w_ffn_r4_kernel(const __grid_constant__ struct skinny_table t)
{
    fp8w_ffn<4>(t);
}
__global__ void __launch_bounds__(256) fp8w_ffn_r8_kernel(const __grid_constant__ struct skinny_table t)
{
    fp8w_ffn<MP_SKINNY_ROWS>(t);
}

/* Launch fp8w_ffn for the table's pieces (c->skinny, filled but for the shapes): K image rows, N
 * outputs per part (SwiGLU: the gate/up image's Dl; else the down image's H), input and output
 * row strides. K is split S ways when the tiles alone would not fill one wave of resident blocks
 * (as skinny_launch), at most one step of FP8W_STEP rows per split. */
static int fp8w_launch(struct mp_compute *c, int K, int N, int lda, int ldc, int swiglu)
{
    struct skinny_table *t = &c->skinny;
    const int rows = table_shapes(t, K, N, 0, lda, ldc, swiglu);
    const int per_piece = swiglu ? N / 16 : N / FP8W_COLS, tiles = per_piece * t->n;
    const int S = split_k(c, tiles, 2, (K + FP8W_STEP - 1) / FP8W_STEP, FP8W_TILE, "fp8 kernel");
    return table_launch(c, t, rows, (unsigned)per_piece, (unsigned)t->n, S, fp8w_ffn_r1_kernel,
                        fp8w_ffn_r2_kernel, fp8w_ffn_r4_kernel, fp8w_ffn_r8_kernel);
}

/* Whether moeperf's fp8 kernel takes these shapes: whole blocks of outputs (Dl a multiple of 16, H
 * of 32), image rows in whole 16-code chunks (H and Dl multiples of 16) and 16-byte aligned
 * inputs, work rows and images. */
static int fp8w_fits(const struct mp_ffn_args *a) { return table_fits(a, 16, 32); }

/* Quantize the table's rows (base/fp8.h's rules: one scale amax/448 per 128 values) into their
 * quantized rows. grid (MP_SKINNY_ROWS, pieces, ⌈K/128⌉), 128 threads. */
__global__ void quantize_pieces_kernel(const __grid_constant__ struct quantize_table t)
{
    const int r = (int)blockIdx.x, i = (int)blockIdx.y, b = (int)blockIdx.z;
    const int k = b * MP_FP8_BLOCK + (int)threadIdx.x;
    if (r >= t.rows[i]) /* the whole block leaves together: no barrier is left waiting */
        return;
    float v = k < t.K ? __bfloat162float(t.src[i][r * t.lds + k]) : 0.0f;
    const float s = block_scale(v);
    unsigned char *row = t.dst[i] + (size_t)r * quantized_row_bytes(t.K);
    if (k < t.K)
        row[k] = mp_fp8_code(v, s);
    if (threadIdx.x == 0)
        ((float *)(void *)(row + t.K))[b] = s;
}

static int quantize_launch(struct mp_compute *c, const struct quantize_table *t)
{
    dim3 grid(MP_SKINNY_ROWS, (unsigned)t->n, (unsigned)mp_fp8_blocks(t->K));
    quantize_pieces_kernel<<<grid, MP_FP8_BLOCK, 0, c->stream>>>(*t);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* The expert FFN with fp8 weights through moeperf's kernel for the experts `take` accepts (rows):
 * each cut into pieces of MP_SKINNY_ROWS rows, SKINNY_TABLE pieces at a time ([gate | up] with
 * SwiGLU for all of them, then the down projection). */
int ffn_fp8_own(struct mp_compute *c, const struct mp_ffn_args *a, int (*take)(long rows))
{
    const bf16 *in = (const bf16 *)a->in;
    bf16 *out = (bf16 *)a->out, *g = (bf16 *)a->work;
    int H = a->H, Dl = a->Dl;
    long base = a->row_off[0], total = a->row_off[a->nexp] - base;
    if (total <= 0)
        return MP_OK;
    /* the quantized inputs of stage 1, then of stage 2 after them */
    const size_t qh = quantized_row_bytes(H), qd = quantized_row_bytes(Dl);
    size_t xq_need = (size_t)total * (qh + qd);
    if (xq_need > c->xq_cap) {
        if (c->capturing) {
            mp_error("--graph: the fp8 kernel's input scratch (%zu bytes) was not reserved before "
                     "the capture", xq_need);
            return MP_ERR_RUNTIME;
        }
        if (grow((void **)&c->d_xq, &c->xq_cap, xq_need) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    unsigned char *xq1 = c->d_xq, *xq2 = c->d_xq + (size_t)total * qh;
    struct skinny_table *t = &c->skinny;
    struct quantize_table *qt = &c->quantize;
    int ids[SKINNY_TABLE];
    long first[SKINNY_TABLE];
    int e = 0;
    long r = a->row_off[0];
    while (e < a->nexp) {
        t->n = 0;
        for (; e < a->nexp && t->n < SKINNY_TABLE;) {
            long end = a->row_off[e + 1];
            if (r >= end || !take(end - a->row_off[e])) {
                e++;
                r = e < a->nexp ? a->row_off[e] : r;
                continue;
            }
            long m = end - r < MP_SKINNY_ROWS ? end - r : MP_SKINNY_ROWS;
            ids[t->n] = e;
            first[t->n] = r;
            t->rows[t->n] = qt->rows[t->n] = (int)m;
            t->w[t->n] = a->wgu[e];
            t->in[t->n] = xq1 + (size_t)(r - base) * qh;
            t->out[t->n] = g + (r - base) * 2L * Dl;
            qt->src[t->n] = in + r * H;
            qt->dst[t->n] = xq1 + (size_t)(r - base) * qh;
            t->n++;
            r += m;
        }
        if (t->n == 0)
            break;
        /* w8a8: the pieces' input rows quantized, then [gate | up] with SwiGLU */
        qt->n = t->n;
        qt->K = H;
        qt->lds = H;
        if (quantize_launch(c, qt) != MP_OK || fp8w_launch(c, H, Dl, (int)qh, 2 * Dl, 1) != MP_OK)
            return MP_ERR_RUNTIME;
        for (int i = 0; i < t->n; i++) { /* the same pieces, down projection */
            t->w[i] = a->wd[ids[i]];
            t->in[i] = qt->dst[i] = xq2 + (size_t)(first[i] - base) * qd;
            t->out[i] = out + first[i] * H;
            qt->src[i] = g + (first[i] - base) * 2L * Dl;
        }
        qt->K = Dl; /* the activations */
        qt->lds = 2L * Dl;
        if (quantize_launch(c, qt) != MP_OK || fp8w_launch(c, Dl, H, (int)qd, H, 0) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* --weight-dtype fp8: --gemm loop runs every expert through cuBLASLt (ffn_fp8_large), grouped
 * every expert through moeperf's kernel (one launch per stage for all of them, in pieces of
 * MP_SKINNY_ROWS rows, so a larger expert streams its weights once per piece), skinny the experts
 * of at most MP_SKINNY_ROWS rows through moeperf's kernel and the larger ones as loop. */
int ffn_fp8(struct mp_compute *c, const struct mp_ffn_args *a)
{
    if (!fp8w_fits(a)) {
        mp_error("--weight-dtype fp8 on cuda needs H a multiple of 32 and the per-rank FFN width "
                 "a multiple of 16 (H %d, width %d)", a->H, a->Dl);
        return MP_ERR_RUNTIME;
    }
    if (a->gemm == MP_GEMM_SKINNY) {
        if (ffn_fp8_own(c, a, rows_decode) != MP_OK)
            return MP_ERR_RUNTIME;
        return ffn_fp8_large(c, a, rows_large);
    }
    if (a->gemm == MP_GEMM_GROUPED)
        return ffn_fp8_own(c, a, rows_any);
    if (a->gemm == MP_GEMM_FUSED)
        return ffn_fused_fp8(c, a);
    return ffn_fp8_large(c, a, rows_any);
}
