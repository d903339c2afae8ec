/* cuda_helpers.cuh - kernel logic that needs no launch, as __host__ __device__ functions, so a host
 * program compiled by nvcc can unit-test it on a machine without a GPU. */
#ifndef MP_CUDA_HELPERS_CUH
#define MP_CUDA_HELPERS_CUH

#include <math.h>
#include <stdint.h>

#include "padded.h"
#include "topk.h"

/* SwiGLU on one element pair (Shazeer 2020): silu(g)·u, silu(z) = z / (1 + e^−z), in fp32. */
static inline MP_HD float mp_swiglu(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* The source row of output row `i` of a permutation given as a list of source rows. */
static inline MP_HD long mp_permute_src(const int32_t *src_row, long i) { return src_row[i]; }

/* The combine's view of a pair sent to plan row `row` (−1: dropped), when the rows at hand are the
 * plan's window [row0, row0+nrows): its index in that window, or −1 if it is not there. */
static inline MP_HD int32_t mp_combine_pick(int32_t row, long row0, long nrows)
{
    return row >= row0 && row < row0 + nrows ? (int32_t)(row - row0) : -1;
}

/* One token's element h of the weighted combine: shared sum plus Σ w_i·row_i over the rows that
 * belong to the token, given as (first, count) into a token-sorted list `order` of row indices.
 * Used by the reference-checking host test; the device kernel accumulates with atomics instead. */
static inline MP_HD float mp_combine_elem(const float *rows, const int32_t *order, const float *w,
                                          long first, long count, int H, int h, float shared)
{
    float acc = shared;
    for (long j = first; j < first + count; j++)
        acc += w[order[j]] * rows[(long)order[j] * H + h];
    return acc;
}

#endif
