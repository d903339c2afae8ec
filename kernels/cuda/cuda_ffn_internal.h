/* cuda_ffn_internal.h - what the expert FFN's files of the cuda backend share: the table kernels'
 * constants, their tiles and reductions as device functions (skinny, tensor-core and fp8 ones),
 * their launch, the fp8 inputs' quantization rules and the FFN paths' host functions; included
 * only by the files of kernels/cuda. */
#ifndef MP_CUDA_FFN_INTERNAL_H
#define MP_CUDA_FFN_INTERNAL_H

#include "cuda_internal.h"

#include <mma.h> /* after cuda_runtime.h (cuda_internal.h), as the stand-in's needs it */

/* The skinny kernel's block: 256 threads = 8 lanes × 32 slices. A lane streams 8 consecutive weight
 * columns (one 16-byte load per weight row) of groups of SKINNY_GROUP consecutive rows, so the 8
 * lanes of a slice cover a 64-column tile; with SwiGLU the tile is 32 gate and the matching 32 up
 * columns. The slices take every 32nd group of rows in turn, and a split-K grid (grid.z = S) gives
 * each block every S-th run of 32 groups, so enough blocks stream at once to keep HBM busy even
 * for one expert. grid = (tiles, experts, S), tiles = N / 32 (SwiGLU) or N / 64. */
#define SKINNY_SLICES 32
#define SKINNY_GROUP 8 /* weight rows per step: 8 loads of 16 bytes in flight per thread */
#define SKINNY_TILE (MP_SKINNY_ROWS * 64) /* floats of one block's partial tile */

/* the two bf16 values packed in a 32-bit word, as floats (bf16 is the top half of an fp32) */
static __device__ __forceinline__ float bf16_low(uint32_t v)
{
    uint32_t u = v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static __device__ __forceinline__ float bf16_high(uint32_t v)
{
    uint32_t u = v & 0xffff0000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
/* element i (0..7, a constant after unrolling) of 8 bf16 values loaded as one int4 */
static __device__ __forceinline__ float bf16_at(const int4 &v, int i)
{
    int word = i < 2 ? v.x : i < 4 ? v.y : i < 6 ? v.z : v.w;
    return i & 1 ? bf16_high((uint32_t)word) : bf16_low((uint32_t)word);
}

/* out_e = in_e · W_e (with SwiGLU: SwiGLU of both halves) for the experts of table `t`, each of at
 * most R rows: every weight element is read once, whatever the rows. Sums run in a fixed order
 * (slices, then splits), so results repeat bit for bit. With S > 1 each block leaves its partial
 * tile in t.ws and counts itself in t.count; the tile's last block adds the S partials, writes
 * the output and resets the count for the next launch. R sizes the registers and shared memory:
 * the fewer rows, the more blocks an SM holds, and the more loads are in flight. */
template <int R> struct skinny_smem {
    float part[SKINNY_SLICES / 2][R][64]; /* 4 KiB per row */
    float sum[R][64];
    int last;
};

/* The end of one output tile of 64 image columns (with SwiGLU 32 gate then the matching 32 up
 * columns, else 64 outputs) for m rows, its sums in sum[r·ld + q] (every thread's written and
 * synchronized): with a split-K grid (grid.z = S > 1) each block leaves its partial in t.ws
 * (`stride` floats per partial) and counts itself in t.count[tile]; the tile's last block adds the
 * S partials in z order (so results repeat bit for bit), resets the count for the next launch and
 * writes the outputs, at column tile ct of out (row stride t.ldc): SwiGLU of gate and up, each
 * rounded to bf16 first as the GEMM paths store them, or the sums. */
template <class Table>
__device__ __forceinline__ void tile_finish(const Table &t, int m, float *sum, int ld, int &last,
                                            bf16 *out, int ct, int tile, size_t stride)
{
    const int S = (int)gridDim.z;
    if (S > 1) {
        float *mine = t.ws + ((size_t)tile * S + blockIdx.z) * stride;
        for (int i = threadIdx.x; i < m * 64; i += blockDim.x)
            mine[i] = sum[(i / 64) * ld + i % 64];
        __threadfence(); /* the partial is visible device-wide before the count says so */
        __syncthreads();
        if (threadIdx.x == 0)
            last = atomicAdd(&t.count[tile], 1) == S - 1;
        __syncthreads();
        if (!last)
            return;
        __threadfence();
        const volatile float *parts = t.ws + (size_t)tile * S * stride;
        for (int i = threadIdx.x; i < m * 64; i += blockDim.x) {
            float v = 0.0f;
            for (int z = 0; z < S; z++)
                v += parts[(size_t)z * stride + i];
            sum[(i / 64) * ld + i % 64] = v;
        }
        if (threadIdx.x == 0)
            t.count[tile] = 0;
        __syncthreads();
    }
    if (t.swiglu) {
        for (int i = threadIdx.x; i < m * 32; i += blockDim.x) {
            int r = i / 32, j = i % 32;
            float gate = __bfloat162float(__float2bfloat16(sum[r * ld + j]));
            float up = __bfloat162float(__float2bfloat16(sum[r * ld + 32 + j]));
            out[(size_t)r * t.ldc + ct * 32 + j] = __float2bfloat16(mp_swiglu(gate, up));
        }
    } else {
        for (int i = threadIdx.x; i < m * 64; i += blockDim.x)
            out[(size_t)(i / 64) * t.ldc + ct * 64 + i % 64] = __float2bfloat16(sum[(i / 64) * ld + i % 64]);
    }
}

/* One output tile of skinny_ffn: column tile `ct` of an expert's m ≤ R rows (weights w0, input
 * rows in, output rows out), `tile` its index among the launch's tiles for the split-K partials
 * (`stride` floats apart) and counts; the shapes, scratch and counts from table `t` (a
 * skinny_table or a fused_table). */
template <int R, class Table>
__device__ __forceinline__ void skinny_tile(const Table &t, int m, const void *w0, const void *in0,
                                            bf16 *out, int ct, int tile, size_t stride,
                                            skinny_smem<R> &sm)
{
    float(*part)[R][64] = sm.part;
    float(*sum)[64] = sm.sum;
    const int lane = threadIdx.x & 7, slice = threadIdx.x >> 3, S = (int)gridDim.z;
    /* this lane's first column in W, and its place among the block's 64 outputs */
    int col, at;
    if (t.swiglu) {
        col = (lane >= 4 ? t.N : 0) + ct * 32 + (lane & 3) * 8;
        at = (lane >= 4 ? 32 : 0) + (lane & 3) * 8;
    } else {
        col = ct * 64 + lane * 8;
        at = lane * 8;
    }
    const bf16 *w = (const bf16 *)w0 + col, *in = (const bf16 *)in0;
    float acc[R][8] = {}; /* registers: indexed by unrolled constants only */
    const int groups = t.K / SKINNY_GROUP;
    for (int gi = ((int)blockIdx.z * SKINNY_SLICES) + slice; gi < groups; gi += SKINNY_SLICES * S) {
        const int k = gi * SKINNY_GROUP;
        int4 wv[SKINNY_GROUP], xv[R] = {};
#pragma unroll
        for (int u = 0; u < SKINNY_GROUP; u++) /* all loads first: they overlap in flight */
            wv[u] = *(const int4 *)(w + (size_t)(k + u) * t.ldw);
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < m)
                xv[r] = *(const int4 *)(in + (size_t)r * t.lda + k);
#pragma unroll
        for (int u = 0; u < SKINNY_GROUP; u++) {
            float wf[8];
#pragma unroll
            for (int j = 0; j < 8; j++)
                wf[j] = bf16_at(wv[u], j);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r >= m)
                    break;
                const float x = bf16_at(xv[r], u);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[r][j] += x * wf[j];
            }
        }
    }
    /* slices 16..31 store, slices 0..15 add theirs, then each output sums the 16 in order */
    const int half = slice % (SKINNY_SLICES / 2);
    if (slice >= SKINNY_SLICES / 2) {
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < m)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    part[half][r][at + j] = acc[r][j];
    }
    __syncthreads();
    if (slice < SKINNY_SLICES / 2) {
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < m)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    part[half][r][at + j] += acc[r][j];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < m * 64; i += blockDim.x) {
        float s = 0.0f;
        for (int p = 0; p < SKINNY_SLICES / 2; p++)
            s += part[p][i / 64][i % 64];
        sum[i / 64][i % 64] = s;
    }
    __syncthreads();
    tile_finish(t, m, &sum[0][0], 64, sm.last, out, ct, tile, stride);
}

/* --gemm fused: one kernel launch per stage for every expert, the shared ones included, whatever
 * their rows. Each block computes one piece's output tile of 64 columns (with SwiGLU: 32 gate and
 * the matching 32 up columns, so 32 activations): a piece of at most MP_SKINNY_ROWS rows as the
 * skinny kernel does (registers per row, every weight read once), a piece of up to FUSED_ROWS
 * rows on the tensor cores (mma_tile). grid = (pieces, column tiles, S): the pieces of one column
 * tile run side by side, so an expert's later pieces find its weight tile in L2. */
#define FUSED_ROWS 64                      /* rows of a tensor-core piece */
#define FUSED_KSTEP 32                     /* k per shared-memory stage of mma_tile */
#define FUSED_TILE (FUSED_ROWS * 64)       /* floats of one block's partial tile */

/* mma_tile's shared memory: the piece's input rows and the weight tile of one k step (bf16, rows
 * padded to keep every 16×16 fragment 256-bit aligned), and the fp32 output tile */
#define MMA_LDA (FUSED_KSTEP + 16) /* bf16 per staged input row */
#define MMA_LDW (64 + 16)         /* bf16 per staged weight row */
struct mma_smem {
    int4 a[FUSED_ROWS][MMA_LDA / 8]; /* bf16 values, 8 to an int4 */
    int4 w[FUSED_KSTEP][MMA_LDW / 8];
    float c[FUSED_ROWS][64 + 8];
    int last;
};

/* One staged k step of a tensor-core piece, shared by the bf16 and fp8 fused kernels: the warp's
 * A fragments (16 rows from `a_rows`, a row-major tile of MMA_LDA bf16 per row) times its two B
 * fragments, `b(kk, j)` the j-th (0, 1) at k offset kk with leading dimension `ldb` in layout
 * LayoutB (row-major: weights staged k-major; col-major: a column's k values contiguous), added
 * into acc[0] and acc[1]. */
template <typename LayoutB, typename BFragment>
static __device__ __forceinline__ void
mma_kstep(nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> (&acc)[2],
          const bf16 *a_rows, BFragment b, unsigned ldb)
{
#pragma unroll
    for (int kk = 0; kk < FUSED_KSTEP; kk += 16) {
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, bf16, nvcuda::wmma::row_major> fa;
        nvcuda::wmma::load_matrix_sync(fa, a_rows + kk, MMA_LDA);
#pragma unroll
        for (int j = 0; j < 2; j++) {
            nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, bf16, LayoutB> fb;
            nvcuda::wmma::load_matrix_sync(fb, b(kk, j), ldb);
            nvcuda::wmma::mma_sync(acc[j], fa, fb, acc[j]);
        }
    }
}

/* The entry whose pieces hold piece p: the i with first[i] ≤ p < first[i + 1], by bisection. */
static __device__ __forceinline__ int fused_entry_of(const struct fused_table &t, int p)
{
    int lo = 0, hi = t.n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t.first[mid] <= p)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* An FFN entry of the fused kernel: an expert's rows, weights, input and output rows, and where
 * its activations go. */
struct fused_entry {
    long rows;
    const void *wgu, *wd;
    const void *in; /* bf16 rows, or quantized rows (fp8) */
    bf16 *act, *out;
};

/* --weight-dtype fp8: the expert FFN on fp8 images (base/fp8.h: K-major e4m3 codes, one fp32 scale
 * per 128×128 block) with moeperf's own kernel, for pieces of at most MP_SKINNY_ROWS rows (the
 * decode case; a larger expert is cut into such pieces, each streaming the weights again). A
 * block computes FP8W_COLS outputs for every row of its piece: 8 warps of FP8W_WARP_COLS image
 * columns each (with SwiGLU, warps 0-3 take 16 gate columns and warps 4-7 the matching up
 * columns). A lane streams 16 consecutive codes of each of its warp's columns (one 16-byte load,
 * so a warp reads 512 contiguous bytes of a column per step; half the bytes of bf16 weights) and
 * the matching 16 input codes of each row (the rows quantized first, w8a8: quantize_pieces), sums
 * code·code over the 16 and scales the sum by the weight block's and the input block's scales,
 * as cuBLASLt's block-scaled GEMM does (16 codes never straddle a 128-value block). The lanes' partials are added in
 * shared memory in lane order, and a split-K grid (grid.z = S) adds its partials as the skinny
 * kernel does, so results repeat bit for bit. grid = (N / 16 with SwiGLU or N / 32, pieces, S). */
#define FP8W_COLS 32
#define FP8W_WARP_COLS 4
#define FP8W_CHUNK 16                /* codes per lane per step */
#define FP8W_STEP (32 * FP8W_CHUNK)  /* image rows (k) a warp covers per step */
#define FP8W_TILE (FP8W_COLS * MP_SKINNY_ROWS) /* floats of one block's partial tile */

/* The four e4m3 codes of a 32-bit word (lowest byte first) as floats, exactly: the sm_89+
 * conversion instruction two codes at a time, or base/fp8.h's decoding elsewhere. */
static __device__ __forceinline__ void fp8x4_to_float(uint32_t v, float *f)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t lo, hi;
    unsigned short lo16 = (unsigned short)(v & 0xffffu), hi16 = (unsigned short)(v >> 16);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"(lo16));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"(hi16));
    unsigned short h0 = (unsigned short)(lo & 0xffffu), h1 = (unsigned short)(lo >> 16);
    unsigned short h2 = (unsigned short)(hi & 0xffffu), h3 = (unsigned short)(hi >> 16);
    asm("cvt.f32.f16 %0, %1;" : "=f"(f[0]) : "h"(h0));
    asm("cvt.f32.f16 %0, %1;" : "=f"(f[1]) : "h"(h1));
    asm("cvt.f32.f16 %0, %1;" : "=f"(f[2]) : "h"(h2));
    asm("cvt.f32.f16 %0, %1;" : "=f"(f[3]) : "h"(h3));
#else
    for (int i = 0; i < 4; i++)
        f[i] = mp_fp8_decode((uint8_t)(v >> (8 * i)));
#endif
}

/* word i (0..3, a constant after unrolling) of an int4 */
static __device__ __forceinline__ uint32_t int4_word(const int4 &v, int i)
{
    return (uint32_t)(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w);
}

/* FP8W_COLS image columns of a piece of m ≤ R quantized input rows (in, row stride lda bytes)
 * through the K×(parts·N) image img, summed over this block's k steps (blockIdx.z, + gridDim.z,
 * …): with SwiGLU the gate columns of outputs ocol .. ocol + 15 and the matching up columns, else
 * outputs ocol .. ocol + 31. Output j of the 32 goes to dst[r·ld + q], q = qa + j, or with SwiGLU
 * qa + j for the 16 gate columns and qb + j − 16 for the up ones. Synchronize before reading dst
 * or calling again (red is reused). */
template <int R>
__device__ __forceinline__ void fp8w_cols(int K, int N, int swiglu, size_t lda,
                                          const unsigned char *img, const unsigned char *in, int m,
                                          int ocol, float (*red)[R][33], float *dst, int ld, int qa,
                                          int qb)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, S = (int)gridDim.z;
    const int parts = swiglu ? 2 : 1;
    const size_t ld_img = mp_fp8_image_ld(K);
    /* this warp's first image column */
    const int c0 = swiglu ? (warp >= 4 ? N : 0) + ocol + (warp & 3) * 4 : ocol + warp * FP8W_WARP_COLS;
    const float *scales = mp_fp8_image_scales(img, K, N, parts);
    float acc[FP8W_WARP_COLS][R] = {};
    const int steps = (K + FP8W_STEP - 1) / FP8W_STEP;
    for (int st = (int)blockIdx.z; st < steps; st += S) {
        const int k = st * FP8W_STEP + lane * FP8W_CHUNK;
        if (k >= K) /* K is a multiple of 16: a chunk lies wholly inside or outside */
            continue;
        /* xv and sx are read only for r < m, where they are loaded; zeroed so that a host
         * compiler's flow analysis of the stand-in (-Wmaybe-uninitialized) sees them set */
        int4 wv[FP8W_WARP_COLS], xv[R] = {};
        float sw[FP8W_WARP_COLS], sx[R] = {};
#pragma unroll
        for (int j = 0; j < FP8W_WARP_COLS; j++) { /* all loads first: they overlap in flight */
            wv[j] = *(const int4 *)(img + (size_t)(c0 + j) * ld_img + k);
            sw[j] = scales[mp_fp8_image_scale_index(K, N, c0 + j, k)];
        }
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < m) {
                const unsigned char *row = in + (size_t)r * lda;
                xv[r] = *(const int4 *)(row + k);
                sx[r] = ((const float *)(const void *)(row + K))[k / MP_FP8_BLOCK];
            }
        float wf[FP8W_WARP_COLS][FP8W_CHUNK];
#pragma unroll
        for (int j = 0; j < FP8W_WARP_COLS; j++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                fp8x4_to_float(int4_word(wv[j], q), wf[j] + 4 * q);
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= m)
                break;
            float xf[FP8W_CHUNK];
#pragma unroll
            for (int q = 0; q < 4; q++)
                fp8x4_to_float(int4_word(xv[r], q), xf + 4 * q);
#pragma unroll
            for (int j = 0; j < FP8W_WARP_COLS; j++) { /* codes times codes, both scales after */
                float dot = 0.0f;
#pragma unroll
                for (int i = 0; i < FP8W_CHUNK; i++)
                    dot += wf[j][i] * xf[i];
                acc[j][r] += sw[j] * sx[r] * dot;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < FP8W_WARP_COLS; j++)
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < m)
                red[warp * FP8W_WARP_COLS + j][r][lane] = acc[j][r];
    __syncthreads();
    for (int i = threadIdx.x; i < FP8W_COLS * m; i += blockDim.x) {
        const int j = i / m, r = i % m;
        float v = 0.0f;
        for (int l = 0; l < 32; l++)
            v += red[j][r][l];
        dst[r * ld + (swiglu && j >= 16 ? qb + j - 16 : qa + j)] = v;
    }
}

/* The scale of one 128-value block of a row (its values, one per thread of a 128-thread block; 0
 * past the row's end): amax/448 (base/fp8.h), reduced in shared memory. */
static __device__ inline float block_scale(float v)
{
    __shared__ float amax[MP_FP8_BLOCK];
    amax[threadIdx.x] = fabsf(v);
    __syncthreads();
    for (int half = MP_FP8_BLOCK / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            amax[threadIdx.x] = fmaxf(amax[threadIdx.x], amax[threadIdx.x + half]);
        __syncthreads();
    }
    return mp_fp8_scale(amax[0]);
}

/* Bytes of a quantized input row of fp8w_ffn: K codes, then its ⌈K/128⌉ fp32 scales (K a multiple
 * of 16, so they are aligned), rounded up to 16 so every row starts 16-byte aligned. */
static inline __host__ __device__ size_t quantized_row_bytes(int K)
{
    return ((size_t)K + 4 * (size_t)mp_fp8_blocks(K) + 15) & ~(size_t)15;
}

/* the fp8 FFN's experts by their rows: of a few (decode), any, more than a few */
static inline int rows_decode(long rows) { return rows >= 1 && rows <= MP_SKINNY_ROWS; }
static inline int rows_any(long rows) { return rows >= 1; }
static inline int rows_large(long rows) { return rows > MP_SKINNY_ROWS; }

/* Launch a table kernel for pieces of at most `rows` rows (the skinny, fused, fp8 and fused fp8
 * FFN kernels come in four: k1, k2, k4 and k8 take pieces of at most 1, 2, 4 and MP_SKINNY_ROWS
 * rows): grid (x, y, S) of 256 threads, the table t by value with the split-K scratch and counts
 * split_k grew; S as split_k returned it (0: its error, reported). */
template <class Table, class Kernel>
static inline int table_launch(struct mp_compute *c, Table *t, int rows, unsigned x, unsigned y,
                               int S, Kernel k1, Kernel k2, Kernel k4, Kernel k8)
{
    if (S < 1)
        return MP_ERR_RUNTIME;
    t->ws = c->skinny_ws;
    t->count = c->skinny_count;
    dim3 grid(x, y, (unsigned)S);
    const Kernel kernel = rows <= 1 ? k1 : rows <= 2 ? k2 : rows <= 4 ? k4 : k8;
    kernel<<<grid, 256, 0, c->stream>>>(*t);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* ---- the FFN paths' host functions one file defines for others, by file ---- */

/* cuda_ffn_gemm.cu: an expert through cuBLAS, the experts through cuBLASLt's FP8 GEMM */
int ffn_one_expert(struct mp_compute *c, const struct mp_ffn_args *a, int e, bf16 *g);
int ffn_fp8_large(struct mp_compute *c, const struct mp_ffn_args *a, int (*take)(long rows));

/* cuda_ffn_skinny.cu: the table kernels' shapes, split-K factor and fit; the skinny FFN */
int table_shapes(struct skinny_table *t, int K, int N, int ldw, int lda, int ldc, int swiglu);
int split_k(struct mp_compute *c, int tiles, int waves, int limit, size_t tile_floats,
            const char *what);
int table_fits(const struct mp_ffn_args *a, int dl_mult, int h_mult);
int ffn_skinny(struct mp_compute *c, const struct mp_ffn_args *a);

/* cuda_ffn_fused.cu: the fused kernel's pieces, fit and entries; the fused FFN */
int fused_pieces(struct fused_table *t, int K, int N, int ldw, int lda, int ldc, int swiglu,
                 int *skinny_rows, int *mma);
int fused_fits(const struct mp_ffn_args *a);
int fused_reserve_entries(struct mp_compute *c, int n);
int ffn_fused(struct mp_compute *c, const struct mp_ffn_args *a);

/* cuda_ffn_fp8.cu: the fp8 FFN through moeperf's kernel, and the fp8 path of each --gemm mode */
int ffn_fp8_own(struct mp_compute *c, const struct mp_ffn_args *a, int (*take)(long rows));
int ffn_fp8(struct mp_compute *c, const struct mp_ffn_args *a);

/* cuda_ffn_fused8.cu: the fused FFN with fp8 weights */
int ffn_fused_fp8(struct mp_compute *c, const struct mp_ffn_args *a);

#endif
