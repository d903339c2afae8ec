/* cuda_permute.cu - the dispatch's row moves on the device: the gather into send order, the
 * block moves of copy_rows (runs of rows passed by value to one kernel) and the fp8 dispatch's
 * packing and unpacking of rows in place. */
#include "cuda_internal.h"

/* Gather rows: out[i] = x[src[i]], 8 bf16 (16 bytes) at a time when H allows. */
__global__ void permute_kernel(const bf16 *x, const int32_t *src, long nrows, int H, bf16 *out)
{
    long i = blockIdx.x;
    if (i >= nrows)
        return;
    const bf16 *from = x + (long)mp_permute_src(src, i) * H;
    bf16 *to = out + i * H;
    if (H % 8 == 0) {
        const int4 *f = (const int4 *)from;
        int4 *t = (int4 *)to;
        for (int h = threadIdx.x; h < H / 8; h += blockDim.x)
            t[h] = f[h];
    } else {
        for (int h = threadIdx.x; h < H; h += blockDim.x)
            to[h] = from[h];
    }
}

int cuda_permute(struct mp_compute *c, const void *x, const int32_t *src_row, long row0,
                 long nrows, int H, void *out)
{
    if (nrows <= 0)
        return MP_OK;
    const int32_t *src = c->plan.d_tok + row0; /* src_row NULL: the device plan's rows */
    if (src_row) {
        if (grow((void **)&c->d_idx, &c->idx_cap, (size_t)nrows * sizeof(int32_t)) != MP_OK)
            return MP_ERR_RUNTIME;
        CUDACHECK(cudaMemcpyAsync(c->d_idx, src_row + row0, (size_t)nrows * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, c->stream));
        src = c->d_idx;
    }
    permute_kernel<<<(unsigned)nrows, 128, 0, c->stream>>>((const bf16 *)x, src, nrows, H,
                                                           (bf16 *)out);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* One block per row of the table: find its run (kernels/chunks.h), then copy the row, 16 bytes at
 * a time when H allows. The table stays in the constant parameter space (__grid_constant__). */
__global__ void copy_rows_kernel(const bf16 *src, bf16 *dst, const __grid_constant__ struct copy_table t,
                                 int H)
{
    __shared__ long from, to;
    int32_t r = (int32_t)blockIdx.x;
    if (threadIdx.x == 0) {
        int run = mp_chunk_find(t.start, t.n, r);
        from = (long)t.src[run] + (r - t.start[run]);
        to = (long)t.dst[run] + (r - t.start[run]);
    }
    __syncthreads();
    const bf16 *f = src + from * H;
    bf16 *d = dst + to * H;
    if (H % 8 == 0) {
        for (int h = threadIdx.x; h < H / 8; h += blockDim.x)
            ((int4 *)d)[h] = ((const int4 *)f)[h];
    } else {
        for (int h = threadIdx.x; h < H; h += blockDim.x)
            d[h] = f[h];
    }
}

static int copy_table_launch(struct mp_compute *c, const void *src, void *dst,
                             const struct copy_table *t, int H)
{
    if (t->start[t->n] == 0)
        return MP_OK;
    copy_rows_kernel<<<(unsigned)t->start[t->n], 128, 0, c->stream>>>((const bf16 *)src, (bf16 *)dst,
                                                                      *t, H);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* Block moves as maximal runs: a single run is one device copy; several go to copy_rows_kernel in
 * tables of up to COPY_TABLE runs (a launch each), not one copy call per run, whose launch costs
 * would grow with EP ranks × local experts. */
int cuda_copy_rows(struct mp_compute *c, const void *src, void *dst,
                   const struct mp_chunk *ch, int nch, int H)
{
    size_t row = (size_t)H * sizeof(bf16);
    struct mp_chunk run, first;
    int i = 0;
    if (!mp_chunks_next(ch, nch, &i, &first))
        return MP_OK;
    int j = i;
    if (!mp_chunks_next(ch, nch, &j, &run)) { /* one run: a plain device copy */
        CUDACHECK(cudaMemcpyAsync((char *)dst + first.dst * row, (const char *)src + first.src * row,
                                  first.n * row, cudaMemcpyDeviceToDevice, c->stream));
        return MP_OK;
    }
    struct copy_table *t = &c->copy; /* 12 KiB: kept with the backend, off the stack */
    i = 0;
    while ((t->n = mp_chunks_table(ch, nch, &i, COPY_TABLE, t->start, t->src, t->dst)) > 0)
        if (copy_table_launch(c, src, dst, t, H) != MP_OK)
            return MP_ERR_RUNTIME;
    return MP_OK;
}

/* --dispatch-dtype fp8 (base/fp8.h's rules, the host's own functions): one thread block of
 * MP_FP8_BLOCK threads per block of 128 values of a row, block k of the grid on row k / nb, value
 * block k mod nb (nb = ⌈H/128⌉); thread t on value 128·(k mod nb) + t. The packed rows go to a
 * staging area (`wire`, rows of mp_fp8_row_bytes(H) bytes from row 0), since threads of other rows
 * may still read the activations a packed row overwrites in place. */
__global__ void fp8_pack_kernel(const bf16 *x, int H, unsigned char *wire)
{
    __shared__ float amax[MP_FP8_BLOCK];
    int nb = mp_fp8_blocks(H), t = (int)threadIdx.x;
    long row = (long)(blockIdx.x / (unsigned)nb);
    int b = (int)(blockIdx.x % (unsigned)nb), i = b * MP_FP8_BLOCK + t;
    float v = i < H ? __bfloat162float(x[row * H + i]) : 0.0f;
    /* max |x| over the block, NaNs ignored as the host's fmaxf loop ignores them (max is exact
     * in any order, so the scale is the host's bit for bit) */
    amax[t] = fmaxf(0.0f, fabsf(v));
    __syncthreads();
    for (int half = MP_FP8_BLOCK / 2; half > 0; half /= 2) {
        if (t < half)
            amax[t] = fmaxf(amax[t], amax[t + half]);
        __syncthreads();
    }
    float s = mp_fp8_scale(amax[0]);
    unsigned char *w = wire + (size_t)row * mp_fp8_row_bytes(H);
    if (i < H)
        w[i] = mp_fp8_code(v, s);
    if (t == 0)
        memcpy(w + H + sizeof(float) * (size_t)b, &s, sizeof s);
}

/* The reverse: packed rows in `wire` (from row 0) into bf16 activations, decode(code) · scale
 * rounded to nearest even; the same grid. */
__global__ void fp8_unpack_kernel(const unsigned char *wire, int H, bf16 *y)
{
    int nb = mp_fp8_blocks(H);
    long row = (long)(blockIdx.x / (unsigned)nb);
    int b = (int)(blockIdx.x % (unsigned)nb), i = b * MP_FP8_BLOCK + (int)threadIdx.x;
    if (i >= H)
        return;
    const unsigned char *w = wire + (size_t)row * mp_fp8_row_bytes(H);
    y[row * H + i] = __float2bfloat16(mp_fp8_decode(w[i]) * mp_fp8_row_scale(w, H, b));
}

/* Rows of packed bytes the staging area holds for one piece of n rows of H values: grown to all
 * n rows (with a quarter more, so a later larger exchange rarely grows it again) outside a graph
 * capture; inside one, the rows it already holds (at least one, or an error). */
static long fp8_piece_rows(struct mp_compute *c, long n, int H)
{
    size_t W = mp_fp8_row_bytes(H);
    if (W > (size_t)H * sizeof(bf16)) {
        mp_error("fp8 dispatch with H = %d: a packed row (%zu bytes) is longer than its bf16 "
                 "row", H, W);
        return -1;
    }
    if (!c->capturing && (size_t)n * W > c->wire_cap &&
        grow((void **)&c->d_wire, &c->wire_cap, (size_t)n * W + (size_t)n * W / 4) != MP_OK)
        return -1;
    long rows = (long)(c->wire_cap / W);
    if (rows < 1)
        mp_error("--graph: the fp8 dispatch's staging of packed rows was not reserved before the "
                 "capture");
    return rows < 1 ? -1 : rows < n ? rows : n;
}

/* Pack in place (kernels/compute.h's contract): in pieces of rows [a, a+k) in increasing order,
 * each packed into the staging area, then copied to byte W·a of buf. Its bytes [W·a, W·(a+k)) lie
 * before the activations of every later row (byte 2H·(a+k) ≥ W·(a+k)), and the piece's own rows
 * were read before the copy (stream order). Bytes past the n packed rows keep what they held. */
int cuda_fp8_pack(struct mp_compute *c, void *buf, long n, int H)
{
    if (n <= 0)
        return MP_OK;
    long m = fp8_piece_rows(c, n, H);
    if (m < 0)
        return MP_ERR_RUNTIME;
    size_t W = mp_fp8_row_bytes(H), nb = (size_t)mp_fp8_blocks(H);
    for (long a = 0; a < n; a += m) {
        long k = n - a < m ? n - a : m;
        fp8_pack_kernel<<<(unsigned)(k * nb), MP_FP8_BLOCK, 0, c->stream>>>(
            (const bf16 *)buf + (size_t)a * H, H, c->d_wire);
        CUDACHECK(cudaGetLastError());
        CUDACHECK(cudaMemcpyAsync((char *)buf + (size_t)a * W, c->d_wire, (size_t)k * W,
                                  cudaMemcpyDeviceToDevice, c->stream));
    }
    return MP_OK;
}

/* Unpack in place: pieces in decreasing order, each one's packed bytes [W·a, W·(a+k)) copied to
 * the staging area, then unpacked into its rows' activations [2H·a, 2H·(a+k)), which lie past the
 * packed bytes of every earlier row still to be read (W·a ≤ 2H·a). */
int cuda_fp8_unpack(struct mp_compute *c, void *buf, long n, int H)
{
    if (n <= 0)
        return MP_OK;
    long m = fp8_piece_rows(c, n, H);
    if (m < 0)
        return MP_ERR_RUNTIME;
    size_t W = mp_fp8_row_bytes(H), nb = (size_t)mp_fp8_blocks(H);
    for (long a = (n - 1) / m * m; a >= 0; a -= m) {
        long k = n - a < m ? n - a : m;
        CUDACHECK(cudaMemcpyAsync(c->d_wire, (const char *)buf + (size_t)a * W, (size_t)k * W,
                                  cudaMemcpyDeviceToDevice, c->stream));
        fp8_unpack_kernel<<<(unsigned)(k * nb), MP_FP8_BLOCK, 0, c->stream>>>(
            c->d_wire, H, (bf16 *)buf + (size_t)a * H);
        CUDACHECK(cudaGetLastError());
    }
    return MP_OK;
}
