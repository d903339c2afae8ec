/* cuda_ffn_fused.cu - the fused expert FFN with bf16 weights (--gemm fused): one launch per stage
 * for every expert, the shared ones included; pieces of a few rows as the skinny kernel computes
 * them, larger ones on the tensor cores (wmma). */
#include <cuda_runtime.h>
#include <mma.h>

#include "cuda_ffn_internal.h"

/* the fused kernel's shared memory: a skinny piece's or a tensor-core piece's */
template <int R> union alignas(128) fused_smem {
    skinny_smem<R> skinny;
    struct mma_smem mma;
};

/* One output tile of a piece of m ≤ FUSED_ROWS rows on the tensor cores (bf16 × bf16 → fp32,
 * wmma 16×16×16): 8 warps, warp i the 16 rows of fragment row i / 2 and 32 columns of half i % 2;
 * each k step stages 64 input rows (zeros past m) and the 32 × 64 weight tile through shared
 * memory, one 16-byte load per thread each. A split-K grid gives block z the k steps z, z + S, …
 * and adds the partials as skinny_tile does (in z order), so results repeat bit for bit. */
__device__ __forceinline__ void mma_tile(const struct fused_table &t, int m, const bf16 *w,
                                         const bf16 *in, bf16 *out, int ct, int tile,
                                         struct mma_smem &sm)
{
    using namespace nvcuda;
    const int warp = threadIdx.x >> 5, fr = warp >> 1, fc = (warp & 1) * 2;
    const int S = (int)gridDim.z, steps = t.K / FUSED_KSTEP;
    /* this thread's loads: input row ar, k offset ak; weight row wr, column wc (in W) */
    const int ar = threadIdx.x >> 2, ak = (threadIdx.x & 3) * 8;
    const int wr = threadIdx.x >> 3, wl = (threadIdx.x & 7) * 8;
    const int wc = t.swiglu ? (wl >= 32 ? t.N : 0) + ct * 32 + (wl & 31) : ct * 64 + wl;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
    wmma::fill_fragment(acc[0], 0.0f);
    wmma::fill_fragment(acc[1], 0.0f);
    for (int st = (int)blockIdx.z; st < steps; st += S) {
        const int k = st * FUSED_KSTEP;
        int4 av = {0, 0, 0, 0};
        if (ar < m)
            av = *(const int4 *)(in + (size_t)ar * t.lda + k + ak);
        const int4 wv = *(const int4 *)(w + (size_t)(k + wr) * t.ldw + wc);
        __syncthreads(); /* the last step's fragments are loaded */
        sm.a[ar][ak / 8] = av;
        sm.w[wr][wl / 8] = wv;
        __syncthreads();
        mma_kstep<wmma::row_major>(
            acc, (const bf16 *)&sm.a[fr * 16][0],
            [&](int kk, int j) { return (const bf16 *)&sm.w[kk][(fc + j) * 2]; }, MMA_LDW);
    }
    wmma::store_matrix_sync(&sm.c[fr * 16][fc * 16], acc[0], 64 + 8, wmma::mem_row_major);
    wmma::store_matrix_sync(&sm.c[fr * 16][(fc + 1) * 16], acc[1], 64 + 8, wmma::mem_row_major);
    __syncthreads();
    tile_finish(t, m, &sm.c[0][0], 64 + 8, sm.last, out, ct, tile, FUSED_TILE);
}

/* The fused kernel's block: piece blockIdx.x (its entry found by bisecting t.first), column tile
 * blockIdx.y; R: the most rows of any skinny piece in the launch. */
template <int R> __device__ __forceinline__ void fused_ffn(const struct fused_table &t)
{
    __shared__ fused_smem<R> sm;
    const int p = (int)blockIdx.x, ct = (int)blockIdx.y;
    const int tile = ct * (int)gridDim.x + p;
    const int e = fused_entry_of(t, p), rows = t.rows[e];
    if (rows <= MP_SKINNY_ROWS) {
        skinny_tile<R>(t, rows, t.w[e], t.in[e], t.out[e], ct, tile, FUSED_TILE, sm.skinny);
        return;
    }
    const int r0 = (p - t.first[e]) * FUSED_ROWS;
    const int m = rows - r0 < FUSED_ROWS ? rows - r0 : FUSED_ROWS;
    mma_tile(t, m, (const bf16 *)t.w[e], (const bf16 *)t.in[e] + (size_t)r0 * t.lda,
             t.out[e] + (size_t)r0 * t.ldc, ct, tile, sm.mma);
}

/* fused_ffn for launches whose skinny pieces have at most 1, 2, 4 or 8 (MP_SKINNY_ROWS) rows */
__global__ void __launch_bounds__(256) fused_ffn_r1_kernel(const __grid_constant__ struct fused_table t)
{
    fused_ffn<1>(t);
}
__global__ void __launch_bounds__(256) fused_ffn_r2_kernel(const __grid_constant__ struct fused_table t)
{
    fused_ffn<2>(t);
}
__global__ void __launch_bounds__(256) fused_ffn_r4_kernel(const __grid_constant__ struct fused_table t)
{
    fused_ffn<4>(t);
}
__global__ void __launch_bounds__(256) fused_ffn_r8_kernel(const __grid_constant__ struct fused_table t)
{
    fused_ffn<MP_SKINNY_ROWS>(t);
}

/* Fill c->fused's shapes and its entries' pieces (first[]); return the pieces, and in
 * *skinny_rows the most rows of a skinny piece (at least 1) and in *mma whether any entry has
 * tensor-core pieces. */
int fused_pieces(struct fused_table *t, int K, int N, int ldw, int lda, int ldc, int swiglu,
                 int *skinny_rows, int *mma)
{
    t->K = K;
    t->N = N;
    t->ldw = ldw;
    t->lda = lda;
    t->ldc = ldc;
    t->swiglu = swiglu;
    *skinny_rows = 1;
    *mma = 0;
    t->first[0] = 0;
    for (int i = 0; i < t->n; i++) {
        int r = t->rows[i];
        if (r <= MP_SKINNY_ROWS && r > *skinny_rows)
            *skinny_rows = r;
        *mma |= r > MP_SKINNY_ROWS;
        t->first[i + 1] = t->first[i] + (r <= MP_SKINNY_ROWS ? 1 : (r + FUSED_ROWS - 1) / FUSED_ROWS);
    }
    return t->first[t->n];
}

/* Launch the fused kernel for c->fused's entries (filled but for the shapes and pieces): pieces
 * and R from the entries' rows, K split S ways as skinny_launch splits it (the same residency per
 * R, a first guess for the tensor-core pieces until measured). */
static int fused_launch(struct mp_compute *c, int K, int N, int ldw, int lda, int ldc, int swiglu)
{
    struct fused_table *t = &c->fused;
    int skinny_rows, mma;
    const int pieces = fused_pieces(t, K, N, ldw, lda, ldc, swiglu, &skinny_rows, &mma);
    const int cts = swiglu ? N / 32 : N / 64;
    int resident = skinny_rows <= 1 ? 4 : skinny_rows <= 2 ? 3 : skinny_rows <= 4 ? 2 : 1;
    resident = mma && resident > 2 ? 2 : resident;
    const int S = split_k(c, pieces * cts, resident, K / SKINNY_GROUP / SKINNY_SLICES, FUSED_TILE,
                          "fused kernel");
    return table_launch(c, t, skinny_rows, (unsigned)pieces, (unsigned)cts, S, fused_ffn_r1_kernel,
                        fused_ffn_r2_kernel, fused_ffn_r4_kernel, fused_ffn_r8_kernel);
}

/* Whether the fused kernel takes these shapes: whole tiles and k steps, 16-byte aligned rows. */
int fused_fits(const struct mp_ffn_args *a)
{
    if (!table_fits(a, 32, 64))
        return 0;
    for (int s = 0; s < a->nshared; s++)
        if ((uintptr_t)a->wgu[a->nexp + s] % 16 || (uintptr_t)a->wd[a->nexp + s] % 16)
            return 0;
    return !a->nshared || ((uintptr_t)a->shared_in % 16 == 0 && (uintptr_t)a->shared_out % 16 == 0);
}

/* Both stages for entries [0, n) of `ent`, SKINNY_TABLE at a time. */
static int fused_stages(struct mp_compute *c, const struct fused_entry *ent, int n, int H, int Dl)
{
    struct fused_table *t = &c->fused;
    for (int i0 = 0; i0 < n; i0 += SKINNY_TABLE) {
        t->n = n - i0 < SKINNY_TABLE ? n - i0 : SKINNY_TABLE;
        for (int i = 0; i < t->n; i++) { /* [gate | up] with SwiGLU into the activations */
            t->rows[i] = (int)ent[i0 + i].rows;
            t->w[i] = ent[i0 + i].wgu;
            t->in[i] = ent[i0 + i].in;
            t->out[i] = ent[i0 + i].act;
        }
        if (fused_launch(c, H, Dl, 2 * Dl, H, Dl, 1) != MP_OK)
            return MP_ERR_RUNTIME;
        for (int i = 0; i < t->n; i++) { /* the down projection */
            t->w[i] = ent[i0 + i].wd;
            t->in[i] = ent[i0 + i].act;
            t->out[i] = ent[i0 + i].out;
        }
        if (fused_launch(c, Dl, H, H, Dl, H, 0) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* Room for n entries of the fused FFN (host memory, grown as needed). */
int fused_reserve_entries(struct mp_compute *c, int n)
{
    if (n <= c->fused_ent_cap)
        return MP_OK;
    void *more = realloc(c->fused_ent, (size_t)n * sizeof *c->fused_ent);
    if (!more) {
        mp_error("out of memory for the fused FFN's %d experts", n);
        return MP_ERR_RUNTIME;
    }
    c->fused_ent = (struct fused_entry *)more;
    c->fused_ent_cap = n;
    return MP_OK;
}

/* --gemm fused: every expert with rows and every shared expert (a->nshared) through the fused
 * kernel, one launch per stage for up to SKINNY_TABLE of them; the activations (rows × Dl) in a
 * buffer of the backend's, grown on a first (untimed) call, never in a capture. Shapes the kernel
 * does not take run as the loop. */
int ffn_fused(struct mp_compute *c, const struct mp_ffn_args *a)
{
    const int H = a->H, Dl = a->Dl, n = a->nexp + a->nshared;
    const long base = a->row_off[0], routed = a->row_off[a->nexp] - base;
    if (!fused_fits(a)) {
        for (int e = 0; e < a->nexp; e++)
            if (ffn_one_expert(c, a, e, (bf16 *)a->work) != MP_OK)
                return MP_ERR_RUNTIME;
        const long off[2] = {0, a->shared_rows};
        for (int s = 0; s < a->nshared; s++) {
            struct mp_ffn_args one = *a;
            one.in = a->shared_in;
            one.out = (bf16 *)a->shared_out + (size_t)s * a->shared_rows * H;
            one.row_off = off;
            one.nexp = 1;
            one.wgu = a->wgu + a->nexp + s;
            one.wd = a->wd + a->nexp + s;
            if (ffn_one_expert(c, &one, 0, (bf16 *)a->work) != MP_OK)
                return MP_ERR_RUNTIME;
        }
        return MP_OK;
    }
    const size_t act = ((size_t)routed + (size_t)a->nshared * (size_t)a->shared_rows) * Dl * sizeof(bf16);
    if (act > c->fused_act_cap) {
        if (c->capturing) {
            mp_error("--graph: the fused FFN's activations (%zu bytes) were not reserved before "
                     "the capture", act);
            return MP_ERR_RUNTIME;
        }
        if (grow((void **)&c->fused_act, &c->fused_act_cap, act) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    if (fused_reserve_entries(c, n) != MP_OK)
        return MP_ERR_RUNTIME;
    struct fused_entry *ent = c->fused_ent;
    int m = 0;
    for (int e = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], rows = a->row_off[e + 1] - r0;
        if (rows > 0)
            ent[m++] = (struct fused_entry){rows, a->wgu[e], a->wd[e], (const bf16 *)a->in + r0 * H,
                                            c->fused_act + (r0 - base) * Dl, (bf16 *)a->out + r0 * H};
    }
    for (int s = 0; s < a->nshared && a->shared_rows > 0; s++)
        ent[m++] = (struct fused_entry){a->shared_rows, a->wgu[a->nexp + s], a->wd[a->nexp + s],
                                        (const bf16 *)a->shared_in,
                                        c->fused_act + (routed + (long)s * a->shared_rows) * Dl,
                                        (bf16 *)a->shared_out + (size_t)s * a->shared_rows * H};
    return m > 0 ? fused_stages(c, ent, m, H, Dl) : MP_OK;
}
