/* fuzz_compare.c - moeperf-compare's reader: two run directories (run.json, layer.csv and
 * layer_samples.csv each) from the fuzzer's bytes, split at NULs, matched and tested. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compare.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet("fuzz_compare");
    if (size > 65536)
        return 0;
    char dirs[2][128];
    static const char *const names[] = {"run.json", "layer.csv", "layer_samples.csv"};
    const uint8_t *p = data, *end = data + size;
    for (int side = 0; side < 2; side++) {
        snprintf(dirs[side], sizeof dirs[side], "/tmp/moeperf-fuzz-cmp-%d-%d", (int)getpid(), side);
        mkdir(dirs[side], 0755);
        for (int i = 0; i < 3; i++) {
            const uint8_t *nul = memchr(p, 0, (size_t)(end - p));
            size_t n = nul ? (size_t)(nul - p) : (size_t)(end - p);
            char path[300];
            snprintf(path, sizeof path, "%s/%s", dirs[side], names[i]);
            FILE *f = fopen(path, "wb");
            if (f) {
                fwrite(p, 1, n, f);
                fclose(f);
            }
            p = nul ? nul + 1 : end;
        }
    }
    struct mp_cmp_opts o = {.threshold = 0.05, .alpha = 0.01, .tool = NULL,
                            .unit = MP_CMP_UNIT_AUTO};
    struct mp_cmp c;
    if (mp_cmp_load(dirs[0], dirs[1], &o, &c) == MP_OK) {
        for (long i = 0; i < c.npoints; i++)
            free(mp_cmp_point_label(&c, i));
        mp_cmp_free(&c);
    }
    return 0;
}
