/* fuzz_cluster.c - cluster profile files (--cluster FILE), and the equations on what parsed. */
#include <math.h>

#include "cluster.h"
#include "compute.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet("fuzz_cluster");
    const char *path = fuzz_file(data, size, ".ini");
    struct mp_cluster c;
    if (path && mp_cluster_resolve(path, &c) == MP_OK) {
        /* a profile that validated must give finite, non-negative times */
        double t = mp_cost_ffn_us(&c, 1e9, 1e8, 4, MP_GEMM_LOOP) +
                   mp_cost_ffn_us(&c, 1e9, 1e8, 4, MP_GEMM_GROUPED) +
                   mp_cost_exchange_us(&c, 1e6, 1e6, 1, 1, 7) +
                   mp_cost_allreduce_us(&c, 1e6, 4);
        if (!(t >= 0) || isinf(t))
            __builtin_trap();
    }
    return 0;
}
