/* cuda_ffn_skinny.cu - the skinny expert FFN (--gemm skinny: experts of at most MP_SKINNY_ROWS
 * rows through one kernel that reads every weight once, larger ones through cuBLAS), and the host
 * steps all table kernels share: their shapes, split-K factor and scratch, and fit. */
#include "cuda_ffn_internal.h"

/* skinny_ffn: expert blockIdx.y of table t, column tile blockIdx.x */
template <int R> __device__ __forceinline__ void skinny_ffn(const struct skinny_table &t)
{
    __shared__ skinny_smem<R> sm;
    const int e = blockIdx.y;
    skinny_tile<R>(t, t.rows[e], t.w[e], t.in[e], t.out[e], (int)blockIdx.x,
                   e * (int)gridDim.x + (int)blockIdx.x, SKINNY_TILE, sm);
}

/* skinny_ffn for tables whose experts have at most 1, 2, 4 or 8 (MP_SKINNY_ROWS) rows */
__global__ void __launch_bounds__(256)
skinny_ffn_r1_kernel(const __grid_constant__ struct skinny_table t)
{
    skinny_ffn<1>(t);
}
__global__ void __launch_bounds__(256)
skinny_ffn_r2_kernel(const __grid_constant__ struct skinny_table t)
{
    skinny_ffn<2>(t);
}
__global__ void __launch_bounds__(256)
skinny_ffn_r4_kernel(const __grid_constant__ struct skinny_table t)
{
    skinny_ffn<4>(t);
}
__global__ void __launch_bounds__(256)
skinny_ffn_r8_kernel(const __grid_constant__ struct skinny_table t)
{
    skinny_ffn<MP_SKINNY_ROWS>(t);
}

/* Fill the table's shapes and return the most rows any of its entries has. */
int table_shapes(struct skinny_table *t, int K, int N, int ldw, int lda, int ldc, int swiglu)
{
    t->K = K;
    t->N = N;
    t->ldw = ldw;
    t->lda = lda;
    t->ldc = ldc;
    t->swiglu = swiglu;
    int rows = 0;
    for (int i = 0; i < t->n; i++)
        rows = t->rows[i] > rows ? t->rows[i] : rows;
    return rows;
}

/* The split-K factor of a table kernel: enough blocks for `waves` blocks per SM over `tiles`
 * tiles, at most 16 and at most `limit`, at least 1; with S > 1 the partials' scratch
 * (`tile_floats` per tile and split) and the tiles' counts grow on a first (untimed) call, never
 * in a capture; the counts start at zero and every launch leaves them there. Returns S, or 0 after
 * an error naming `what`. */
int split_k(struct mp_compute *c, int tiles, int waves, int limit, size_t tile_floats,
            const char *what)
{
    struct skinny_table *t = &c->skinny;
    int S = (waves * c->sms + tiles - 1) / tiles;
    S = S > 16 ? 16 : S;
    S = S > limit ? limit : S;
    S = S < 1 ? 1 : S;
    if (S > 1) {
        size_t ws = (size_t)tiles * S * tile_floats * sizeof(float);
        size_t cnt = (size_t)tiles * sizeof(int);
        if (ws > c->skinny_ws_cap || cnt > c->skinny_count_cap) {
            if (c->capturing) {
                mp_error("--graph: the %s's scratch (%zu bytes) was not reserved before the "
                         "capture", what, ws);
                return 0;
            }
            if (grow((void **)&c->skinny_ws, &c->skinny_ws_cap, ws) != MP_OK ||
                grow((void **)&c->skinny_count, &c->skinny_count_cap, cnt) != MP_OK)
                return 0;
            cudaError_t e = cudaMemsetAsync(c->skinny_count, 0, c->skinny_count_cap, c->stream);
            if (e != cudaSuccess) {
                mp_error("the %s's tile counts: %s", what, cudaGetErrorString(e));
                return 0;
            }
        }
    }
    t->ws = c->skinny_ws;
    t->count = c->skinny_count;
    return S;
}

/* Whether a table kernel takes these shapes: Dl and H multiples of dl_mult and h_mult, and
 * 16-byte aligned inputs, work rows and weights. */
int table_fits(const struct mp_ffn_args *a, int dl_mult, int h_mult)
{
    if (a->Dl % dl_mult || a->H % h_mult || (uintptr_t)a->in % 16 || (uintptr_t)a->work % 16)
        return 0;
    for (int e = 0; e < a->nexp; e++)
        if ((uintptr_t)a->wgu[e] % 16 || (uintptr_t)a->wd[e] % 16)
            return 0;
    return 1;
}

/* Launch the skinny kernel for the table's experts (c->skinny, filled but for the shapes), sized
 * for the most rows among them. K is split S ways when the tiles alone would not fill one wave of
 * resident blocks: S = ⌈SMs·resident / tiles⌉, at most 16 and at most what keeps a group of rows
 * per thread. resident: blocks of 256 threads an SM holds at the kernel's registers on sm_90
 * (ptxas: 60, 76, 99 and 150 per thread for 1, 2, 4 and 8 rows). The partials' scratch and the
 * tiles' counts grow on a first (untimed) call; the counts start at zero and every launch leaves
 * them there. */
static int skinny_launch(struct mp_compute *c, int K, int N, int ldw, int lda, int ldc, int swiglu)
{
    struct skinny_table *t = &c->skinny;
    const int rows = table_shapes(t, K, N, ldw, lda, ldc, swiglu);
    const int tiles = (swiglu ? N / 32 : N / 64) * t->n;
    const int resident = rows <= 1 ? 4 : rows <= 2 ? 3 : rows <= 4 ? 2 : 1;
    const int S = split_k(c, tiles, resident, K / SKINNY_GROUP / SKINNY_SLICES, SKINNY_TILE,
                          "skinny kernel");
    return table_launch(c, t, rows, (unsigned)(swiglu ? N / 32 : N / 64), (unsigned)t->n, S,
                        skinny_ffn_r1_kernel, skinny_ffn_r2_kernel, skinny_ffn_r4_kernel,
                        skinny_ffn_r8_kernel);
}

/* Whether the skinny kernel takes these shapes: whole tiles and groups of rows, and 16-byte
 * aligned weight and input rows. */
static int skinny_fits(const struct mp_ffn_args *a) { return table_fits(a, 32, 64); }

/* --gemm skinny: experts of 1..MP_SKINNY_ROWS rows through the skinny kernel, SKINNY_TABLE at a
 * time ([gate | up] with SwiGLU for all of them, then the down projection for all of them), the
 * larger ones through the GEMM loop. Work holds all rows. Shapes the kernel does not take run as
 * the loop. */
int ffn_skinny(struct mp_compute *c, const struct mp_ffn_args *a)
{
    const bf16 *in = (const bf16 *)a->in;
    bf16 *out = (bf16 *)a->out, *g = (bf16 *)a->work;
    int H = a->H, Dl = a->Dl, fits = skinny_fits(a);
    long base = a->row_off[0];
    struct skinny_table *t = &c->skinny;
    int ids[SKINNY_TABLE]; /* the table's experts */
    for (int e = 0; fits && e < a->nexp;) {
        t->n = 0;
        for (; e < a->nexp && t->n < SKINNY_TABLE; e++) {
            long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
            if (m < 1 || m > MP_SKINNY_ROWS)
                continue;
            ids[t->n] = e;
            t->rows[t->n] = (int)m;
            t->w[t->n] = a->wgu[e];
            t->in[t->n] = in + r0 * H;
            t->out[t->n] = g + (r0 - base) * 2L * Dl;
            t->n++;
        }
        if (t->n == 0)
            break;
        if (skinny_launch(c, H, Dl, 2 * Dl, H, 2 * Dl, 1) != MP_OK)
            return MP_ERR_RUNTIME;
        for (int i = 0; i < t->n; i++) { /* the same experts, down projection */
            long r0 = a->row_off[ids[i]];
            t->w[i] = a->wd[ids[i]];
            t->in[i] = g + (r0 - base) * 2L * Dl;
            t->out[i] = out + r0 * H;
        }
        if (skinny_launch(c, Dl, H, H, 2 * Dl, H, 0) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    for (int e = 0; e < a->nexp; e++) {
        long m = a->row_off[e + 1] - a->row_off[e];
        if (fits && m <= MP_SKINNY_ROWS)
            continue; /* done above, or no rows */
        if (ffn_one_expert(c, a, e, g + (a->row_off[e] - base) * 2L * Dl) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    return MP_OK;
}
