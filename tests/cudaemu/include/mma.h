/* mma.h (cudaemu) - the warp matrix functions (nvcuda::wmma) for bf16 16×16×16 tiles with fp32
 * accumulators, the one shape moeperf's kernels use. As on the device, a fragment is spread over
 * the warp's 32 lanes (in a layout of the stand-in's own; the device's is unspecified): lane l
 * holds row l / 2, columns (l % 2)·8 .. +7 of an accumulator, row l / 2 of an A tile and columns
 * (l % 2)·8 .. +7 of a B tile, and computes its own 8 outputs, so a lane that skips a call leaves
 * its part undone. Products of bf16 values are exact in fp32 and summed in fp32 in k order. What
 * the device refuses (CUDA C++ Programming Guide, "Warp Matrix Functions": a pointer not 256-bit
 * aligned, a leading dimension not a multiple of 16 bytes, a block not made of whole warps)
 * faults here. */
#ifndef CUDAEMU_MMA_H
#define CUDAEMU_MMA_H

#include <stdint.h>
#include <type_traits>

#include "cuda_bf16.h"
#include "cudaemu_launch.hpp"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment;

template <class Layout> struct fragment<matrix_a, 16, 16, 16, __nv_bfloat16, Layout> {
    static constexpr int num_elements = 16; /* the lane's row, k = 0..15 */
    float x[16];
};
template <class Layout> struct fragment<matrix_b, 16, 16, 16, __nv_bfloat16, Layout> {
    static constexpr int num_elements = 128; /* k = 0..15 of the lane's 8 columns, x[k·8 + j] */
    float x[128];
};
template <> struct fragment<accumulator, 16, 16, 16, float, void> {
    static constexpr int num_elements = 8; /* the lane's 8 outputs */
    float x[8];
};

namespace detail {
inline void check(const void *p, unsigned ldm, unsigned multiple, const char *what)
{
    if ((uintptr_t)p % 32)
        cudaemu::fault("wmma::%s: pointer %p is not 256-bit aligned", what, p);
    if (ldm % multiple)
        cudaemu::fault("wmma::%s: leading dimension %u is not a multiple of %u elements", what,
                       ldm, multiple);
}
/* the calling thread's lane in its warp */
inline int lane(void)
{
    unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    if (threads % 32)
        cudaemu::fault("wmma: a block of %u threads is not made of whole warps", threads);
    return (int)((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32);
}
/* element (r, c) of a tile at p, ldm apart, stored by rows or by columns */
template <class T> inline T &at(T *p, unsigned ldm, bool rows, int r, int c)
{
    return rows ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}
} // namespace detail

template <class Layout>
inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, Layout> &f,
                             const __nv_bfloat16 *p, unsigned ldm)
{
    detail::check(p, ldm, 8, "load_matrix_sync");
    const int r = detail::lane() / 2;
    for (int k = 0; k < 16; k++)
        f.x[k] = __bfloat162float(detail::at(p, ldm, std::is_same_v<Layout, row_major>, r, k));
}
template <class Layout>
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, Layout> &f,
                             const __nv_bfloat16 *p, unsigned ldm)
{
    detail::check(p, ldm, 8, "load_matrix_sync");
    const int c0 = detail::lane() % 2 * 8;
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 8; j++)
            f.x[k * 8 + j] =
                __bfloat162float(detail::at(p, ldm, std::is_same_v<Layout, row_major>, k, c0 + j));
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t layout)
{
    detail::check(p, ldm, 4, "load_matrix_sync");
    const int l = detail::lane(), r = l / 2, c0 = l % 2 * 8;
    for (int j = 0; j < 8; j++)
        f.x[j] = detail::at(p, ldm, layout == mem_row_major, r, c0 + j);
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout)
{
    detail::check(p, ldm, 4, "store_matrix_sync");
    const int l = detail::lane(), r = l / 2, c0 = l % 2 * 8;
    for (int j = 0; j < 8; j++)
        detail::at(p, ldm, layout == mem_row_major, r, c0 + j) = f.x[j];
}
template <class Use, class T, class L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, float v)
{
    for (float &e : f.x)
        e = v;
}
/* d = a·b + c: the lane's 8 outputs, each c plus its 16 products added in k order */
template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c)
{
    float out[8];
    for (int j = 0; j < 8; j++) {
        float s = c.x[j];
        for (int k = 0; k < 16; k++)
            s += a.x[k] * b.x[k * 8 + j];
        out[j] = s;
    }
    for (int j = 0; j < 8; j++)
        d.x[j] = out[j];
}

} // namespace wmma
} // namespace nvcuda

#endif
