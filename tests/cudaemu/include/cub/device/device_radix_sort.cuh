/* device_radix_sort.cuh (cudaemu) - cub::DeviceRadixSort::SortPairs on the CPU stand-in: a stable
 * sort by the key bits [begin_bit, end_bit), with CUB's two-phase scratch-size protocol. */
#ifndef CUDAEMU_DEVICE_RADIX_SORT_CUH
#define CUDAEMU_DEVICE_RADIX_SORT_CUH

#include <algorithm>
#include <numeric>
#include <type_traits>
#include <vector>

#include "cuda_runtime.h"

namespace cub {
struct DeviceRadixSort {
    /* Scratch asked for: a fixed part plus a double buffer of keys and values, as CUB's grows. */
    template <class K, class V> static size_t scratch(long n)
    {
        return 4096 + (size_t)(n > 0 ? n : 0) * (sizeof(K) + sizeof(V)) * 2;
    }
    template <class K, class V, class N>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const K *keys_in, K *keys_out,
                                 const V *vals_in, V *vals_out, N num_items, int begin_bit = 0,
                                 int end_bit = sizeof(K) * 8, cudaStream_t stream = 0)
    {
        static_assert(std::is_integral_v<K>, "cudaemu sorts integer keys");
        long n = (long)num_items;
        size_t need = scratch<K, V>(n);
        if (!temp) {
            temp_bytes = need;
            return cudaSuccess;
        }
        if (temp_bytes < need || n < 0 || begin_bit < 0 || end_bit > (int)sizeof(K) * 8 ||
            begin_bit >= end_bit)
            return cudaErrorInvalidValue;
        if (!cudaemu::device_range(temp, need) || !cudaemu::device_range(keys_in, n * sizeof(K)) ||
            !cudaemu::device_range(keys_out, n * sizeof(K)) ||
            !cudaemu::device_range(vals_in, n * sizeof(V)) ||
            !cudaemu::device_range(vals_out, n * sizeof(V)))
            cudaemu::fault("cub::DeviceRadixSort::SortPairs: an operand of %ld items is not in device "
                           "memory", n);
        cudaemu::enqueue(stream, "cub::DeviceRadixSort::SortPairs", [=](cudaStream_t) {
            using U = std::make_unsigned_t<K>;
            const U flip = std::is_signed_v<K> ? (U)((U)1 << (sizeof(K) * 8 - 1)) : (U)0;
            const U mask = end_bit - begin_bit >= (int)sizeof(U) * 8
                               ? (U)~(U)0
                               : (U)(((U)1 << (end_bit - begin_bit)) - 1);
            auto digits = [=](K k) { return (U)(((U)k ^ flip) >> begin_bit) & mask; };
            std::vector<long> order((size_t)n);
            std::iota(order.begin(), order.end(), 0L);
            std::stable_sort(order.begin(), order.end(),
                             [&](long a, long b) { return digits(keys_in[a]) < digits(keys_in[b]); });
            std::vector<K> k((size_t)n);
            std::vector<V> v((size_t)n);
            for (long i = 0; i < n; i++) {
                k[(size_t)i] = keys_in[order[(size_t)i]];
                v[(size_t)i] = vals_in[order[(size_t)i]];
            }
            std::copy(k.begin(), k.end(), keys_out);
            std::copy(v.begin(), v.end(), vals_out);
        });
        return cudaSuccess;
    }
};
} // namespace cub

#endif
