/* cuda_combine.cu - the combine on the device: each token's expert rows weighted by their routing
 * weights and summed with the shared experts' rows, gathered per token from the device plan (no
 * atomics) or scattered with fp32 atomics from host index arrays. */
#include "cuda_internal.h"

/* acc[tok[i]] += w[i]·rows[i] (fp32 atomics; rows of one token land from several experts). */
__global__ void combine_scatter_kernel(const bf16 *rows, const int32_t *tok, const float *w,
                                       long nrows, int H, float *acc)
{
    long i = blockIdx.x;
    if (i >= nrows)
        return;
    float wi = w[i];
    const bf16 *r = rows + i * H;
    float *a = acc + (long)tok[i] * H;
    for (int h = threadIdx.x; h < H; h += blockDim.x)
        atomicAdd(a + h, wi * __bfloat162float(r[h]));
}

/* y = acc + Σ_s shared[s] in bf16 (y + acc + ... with accumulate). */
__global__ void combine_finish_kernel(const float *acc, const bf16 *shared, int nshared, long n,
                                      bf16 *y, int accumulate)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        float v = acc[i] + (accumulate ? __bfloat162float(y[i]) : 0.0f);
        for (int s = 0; s < nshared; s++)
            v += __bfloat162float(shared[s * n + i]);
        y[i] = __float2bfloat16(v);
    }
}

/* The combine over the device plan's rows, one block per token: its K pairs' rows (those in the
 * window [row0, row0+nrows) of the plan, at rows[row − row0]) weighted by their routing weights,
 * plus the shared rows (plus y with accumulate), summed in fp32 in pair order: no atomics, the
 * same sum in every run. */
__global__ void combine_gather_kernel(const bf16 *rows, const int32_t *row_of_pair,
                                      const float *pair_w, long row0, long nrows, int K,
                                      const bf16 *shared, int nshared, long ntok, int H, bf16 *y,
                                      int accumulate)
{
    extern __shared__ int32_t pick[]; /* [K] row in the window or −1, then [K] weights */
    float *wk = (float *)(pick + K);
    long t = blockIdx.x;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        long i = t * K + k;
        pick[k] = mp_combine_pick(row_of_pair[i], row0, nrows);
        wk[k] = pair_w[i];
    }
    __syncthreads();
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        long e = t * H + h;
        float v = accumulate ? __bfloat162float(y[e]) : 0.0f;
        for (int s = 0; s < nshared; s++)
            v += __bfloat162float(shared[s * ntok * H + e]);
        for (int k = 0; k < K; k++)
            if (pick[k] >= 0)
                v += wk[k] * __bfloat162float(rows[(long)pick[k] * H + h]);
        y[e] = __float2bfloat16(v);
    }
}

int cuda_combine(struct mp_compute *c, const void *rows, const int32_t *tok, const float *w,
                 long row0, long nrows, const void *shared, int nshared, long ntok, int H,
                 void *y, int accumulate)
{
    size_t n = (size_t)ntok * H;
    if (n == 0)
        return MP_OK;
    if (!tok) { /* the device plan's rows: gathered per token */
        const struct device_plan *p = &c->plan;
        int K = p->s.K;
        if (ntok > p->s.ntok) {
            mp_error("combine: %ld tokens, the dispatch plan was built for %ld", ntok, p->s.ntok);
            return MP_ERR_RUNTIME;
        }
        combine_gather_kernel<<<(unsigned)ntok, 128, (size_t)K * 2 * sizeof(int32_t), c->stream>>>(
            (const bf16 *)rows, p->d_row_of_pair, p->pair_w, row0, nrows, K,
            shared ? (const bf16 *)shared : NULL, shared ? nshared : 0, ntok, H, (bf16 *)y,
            accumulate);
        CUDACHECK(cudaGetLastError());
        return MP_OK;
    }
    if (grow((void **)&c->d_acc, &c->acc_cap, n * sizeof(float)) != MP_OK ||
        grow((void **)&c->d_idx, &c->idx_cap, (size_t)(nrows > 0 ? nrows : 1) * sizeof(int32_t)) != MP_OK ||
        grow((void **)&c->d_f, &c->f_cap, (size_t)(nrows > 0 ? nrows : 1) * sizeof(float)) != MP_OK)
        return MP_ERR_RUNTIME;
    CUDACHECK(cudaMemsetAsync(c->d_acc, 0, n * sizeof(float), c->stream));
    if (nrows > 0) { /* host index arrays: scattered with atomics */
        CUDACHECK(cudaMemcpyAsync(c->d_idx, tok + row0, (size_t)nrows * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, c->stream));
        CUDACHECK(cudaMemcpyAsync(c->d_f, w + row0, (size_t)nrows * sizeof(float),
                                  cudaMemcpyHostToDevice, c->stream));
        combine_scatter_kernel<<<(unsigned)nrows, 256, 0, c->stream>>>(
            (const bf16 *)rows, c->d_idx, c->d_f, nrows, H, c->d_acc);
        CUDACHECK(cudaGetLastError());
    }
    combine_finish_kernel<<<(unsigned)((n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535), 256, 0,
                            c->stream>>>(c->d_acc, shared ? (const bf16 *)shared : NULL,
                                         shared ? nshared : 0, (long)n, (bf16 *)y, accumulate);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}
