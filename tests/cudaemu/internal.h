/* internal.h - what the parts of the CPU stand-in (runtime.cc, kernels.cc, cublas.cc, cublaslt.cc,
 * nccl.cc) share: the stream queue, the allocation registry's queries, the error cudaGetLastError
 * returns, the GEMMs' dot product and size cap, and element loads and stores in the types the GEMMs
 * and the allreduce take. */
#ifndef CUDAEMU_INTERNAL_H
#define CUDAEMU_INTERNAL_H

#include <functional>
#include <vector>

#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "fp8.h"

namespace cudaemu {

typedef std::function<void(cudaStream_t)> stream_op;

/* enqueue (cudaemu_launch.hpp), with a condition the operation waits for at the head of its
 * stream's queue (an event wait, an injected fault); in a captured graph the condition is dropped. */
void enqueue_gated(cudaStream_t s, const char *what, stream_op op, std::function<bool()> ready);

/* Whether p lies in an allocation, device or page-locked (one past its end included). */
bool allocated(const void *p);

/* The device cudaSetDevice made current (0 before any), and whether cudaSetDevice has run. */
int current_device();
bool device_chosen();

/* Make e the error cudaGetLastError returns next; returns e. */
cudaError_t set_error(cudaError_t e);

/* x · y over n floats in fp32, in eight partial sums (as a GPU's GEMM, not in sequence). */
float dot(const float *x, const float *y, size_t n);

/* Whether a GEMM of m·n·k multiply-adds is computed: larger ones (the roofline's 8192³) are checked
 * and queued but leave their output as it was, which nothing reads (said once on stderr). */
bool gemm_computed(int64_t m, int64_t n, int64_t k);

/* The GEMM D = op(A)·op(B)'s operands in fp32, column-major inputs with leading dimensions lda and
 * ldb: a[i·k + p] = op(A)(i, p) (m × k, by rows) and bt[j·k + p] = op(B)(p, j) (n × k, by
 * columns), so each output is one dot product of contiguous runs. */
void gemm_operands(const void *A, cudaDataType At, cublasOperation_t ta, int64_t lda, const void *B,
                   cudaDataType Bt, cublasOperation_t tb, int64_t ldb, size_t m, size_t n, size_t k,
                   std::vector<float> &a, std::vector<float> &bt);

static inline size_t type_size(cudaDataType t)
{
    return t == CUDA_R_32F ? 4 : t == CUDA_R_8F_E4M3 ? 1 : 2;
}

/* Bytes a column-major operand of rows × cols with leading dimension ld spans. */
static inline size_t span(int64_t rows, int64_t cols, int64_t ld, cudaDataType t)
{
    return rows > 0 && cols > 0 ? ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * type_size(t) : 0;
}

/* element i of p: fp32, bf16, or an e4m3 code decoded exactly (base/fp8.h) */
static inline float load(const void *p, cudaDataType t, size_t i)
{
    if (t == CUDA_R_32F)
        return ((const float *)p)[i];
    if (t == CUDA_R_8F_E4M3)
        return mp_fp8_decode(((const uint8_t *)p)[i]);
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

/* element i of p = v, rounded to the type (fp32 or bf16: the GEMMs' outputs) */
static inline void store(void *p, cudaDataType t, size_t i, float v)
{
    if (t == CUDA_R_32F)
        ((float *)p)[i] = v;
    else
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
}

} // namespace cudaemu

#endif
