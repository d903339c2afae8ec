/* fuzz_trace.c - routing trace files in both formats, then draws from what parsed. */
#include <stdio.h>

#include "fuzz_common.h"
#include "routing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet("fuzz_trace");
    const char *path = fuzz_file(data, size, ".csv");
    if (!path)
        return 0;
    char spec[300];
    snprintf(spec, sizeof spec, "trace:%s", path);
    struct mp_routing r;
    for (int k = 1; k <= 3; k++) /* the header decides the format; top-k must match it */
        if (mp_routing_parse(spec, 12, k, 7, &r) == MP_OK) {
            int32_t ids[5 * 3];
            float w[5 * 3];
            mp_routing_draw(&r, 7, 2, 5, 0, 5, ids, w);
            for (int i = 0; i < 5 * k; i++)
                if (ids[i] < 0 || ids[i] >= 12 || !(w[i] > 0))
                    __builtin_trap(); /* a parsed trace must only ever give valid routing */
            mp_routing_free(&r);
        }
    return 0;
}
