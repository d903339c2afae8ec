/* internal.h - what the parts of the CPU stand-in (runtime.cc, kernels.cc, cublas.cc, nccl.cc)
 * share: the stream queue, the allocation registry's queries, the error cudaGetLastError returns,
 * and element loads and stores in the types the GEMMs and the allreduce take. */
#ifndef CUDAEMU_INTERNAL_H
#define CUDAEMU_INTERNAL_H

#include <functional>

#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"

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

static inline size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static inline float load(const void *p, cudaDataType t, size_t i)
{
    return t == CUDA_R_32F ? ((const float *)p)[i] : __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

static inline void store(void *p, cudaDataType t, size_t i, float v)
{
    if (t == CUDA_R_32F)
        ((float *)p)[i] = v;
    else
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
}

} // namespace cudaemu

#endif
