/* device_scan.cuh (cudaemu) - cub::DeviceScan::ExclusiveSum on the CPU stand-in, with CUB's
 * two-phase scratch-size protocol. */
#ifndef CUDAEMU_DEVICE_SCAN_CUH
#define CUDAEMU_DEVICE_SCAN_CUH

#include "cuda_runtime.h"

namespace cub {
struct DeviceScan {
    template <class I, class O, class N>
    static cudaError_t ExclusiveSum(void *temp, size_t &temp_bytes, const I *in, O *out, N num_items,
                                    cudaStream_t stream = 0)
    {
        long n = (long)num_items;
        const size_t need = 1024;
        if (!temp) {
            temp_bytes = need;
            return cudaSuccess;
        }
        if (temp_bytes < need || n < 0)
            return cudaErrorInvalidValue;
        if (!cudaemu::device_range(temp, need) || !cudaemu::device_range(in, n * sizeof(I)) ||
            !cudaemu::device_range(out, n * sizeof(O)))
            cudaemu::fault("cub::DeviceScan::ExclusiveSum: an operand of %ld items is not in device "
                           "memory", n);
        cudaemu::enqueue(stream, "cub::DeviceScan::ExclusiveSum", [=](cudaStream_t) {
            O sum = 0;
            for (long i = 0; i < n; i++) {
                O v = (O)in[i]; /* in and out may be the same array */
                out[i] = sum;
                sum += v;
            }
        });
        return cudaSuccess;
    }
};
} // namespace cub

#endif
