/* cudaemu_launch.hpp - kernels on the CPU stand-in: the qualifiers and built-ins device code uses,
 * and the launch that tests/cudaemu/rewrite.py puts in place of `kernel<<<grid, block, shmem,
 * stream>>>(args)`. Arguments are converted and copied when the kernel is launched, as CUDA copies
 * them into the parameter space, so a captured launch replays the values it was captured with. */
#ifndef CUDAEMU_LAUNCH_HPP
#define CUDAEMU_LAUNCH_HPP

#include <functional>
#include <tuple>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __grid_constant__
#define __launch_bounds__(...)
#define __shared__ static /* blocks run one after another: a static is the running block's */
#define __restrict__ __restrict

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
    unsigned x, y, z;
};
struct alignas(16) int4 {
    int x, y, z, w;
};

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

void __syncthreads(void);
static inline void __threadfence(void) {} /* blocks run one after another */
static inline float atomicAdd(float *a, float v)
{
    float old = *a; /* one thread runs at a time */
    *a = old + v;
    return old;
}
static inline int atomicAdd(int *a, int v)
{
    int old = *a;
    *a = old + v;
    return old;
}
static inline unsigned atomicOr(unsigned *a, unsigned v)
{
    unsigned old = *a;
    *a = old | v;
    return old;
}
static inline int atomicOr(int *a, int v)
{
    int old = *a;
    *a = old | v;
    return old;
}
static inline int __popc(unsigned v) { return __builtin_popcount(v); }

namespace cudaemu {
/* Queue work on a stream (run now, or recorded while the stream is captured); `what` names it in
 * messages. The operation gets the stream it runs on (a replayed graph's launch stream). */
void enqueue(cudaStream_t s, const char *what, std::function<void(cudaStream_t)> op);
/* Whether [p, p+bytes) lies in one device (or page-locked host) allocation. */
bool device_range(const void *p, size_t bytes);
/* Report a fault a device would take (an illegal address): the message, then abort. */
[[noreturn]] void fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The running block's dynamic shared memory (the launch's third argument, in bytes). */
void *dynamic_shared(void);
/* Check a launch and queue it: every block of `grid` in turn; `coop` kernels (those calling
 * __syncthreads) run each thread as a fiber, the others thread after thread. */
cudaError_t launch(const char *name, bool coop, dim3 grid, dim3 block, size_t shmem,
                   cudaStream_t s, size_t param_bytes, const void *const *ptrs, int nptrs,
                   std::function<void()> body);

template <class T> inline void collect_pointer(const void **ptrs, int &n, const T &v)
{
    if constexpr (std::is_pointer_v<T>)
        ptrs[n++] = (const void *)v;
}

template <class... P> struct launcher {
    const char *name;
    bool coop;
    void (*kernel)(P...);
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    void operator()(P... a) const
    {
        const void *ptrs[sizeof...(P) + 1] = {};
        int n = 0;
        (collect_pointer(ptrs, n, a), ...);
        std::tuple<std::decay_t<P>...> args(a...); /* a const T & parameter (__grid_constant__)
                                                     * refers to this one copy */
        void (*k)(P...) = kernel;
        launch(name, coop, grid, block, shmem, stream, sizeof(args), ptrs, n,
               [k, args]() { std::apply(k, args); });
    }
};
} // namespace cudaemu

template <class... P>
inline cudaemu::launcher<P...> cudaemu_launch(const char *name, bool coop, void (*k)(P...), dim3 grid,
                                              dim3 block, size_t shmem = 0, cudaStream_t s = 0)
{
    return cudaemu::launcher<P...>{name, coop, k, grid, block, shmem, s};
}

#endif
