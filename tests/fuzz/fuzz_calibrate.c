/* fuzz_calibrate.c - the run-directory reader of moeperf-plan --calibrate/--validate: run.json and
 * layer.csv as a run writes them, both from the fuzzer's bytes (split at the first NUL). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calibrate.h"
#include "fuzz_common.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet("fuzz_calibrate");
    if (size > 65536)
        return 0;
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/moeperf-fuzz-run-%d", (int)getpid());
    mkdir(dir, 0755);
    const uint8_t *nul = memchr(data, 0, size);
    size_t n1 = nul ? (size_t)(nul - data) : size;
    fuzz_put(dir, "run.json", data, n1);
    fuzz_put(dir, "layer.csv", nul ? nul + 1 : data, nul ? size - n1 - 1 : 0);
    struct mp_cluster base;
    struct mp_calib_set set;
    const char *dirs[1] = {dir};
    if (mp_cluster_resolve("h100-ndr", &base) == MP_OK &&
        mp_calib_load(dirs, 1, &base, &set) == MP_OK) {
        for (int i = 0; i < set.n && i < 4; i++)
            mp_calib_predict(&set, i, &set.base, CAL_LAYER_LAYER);
        mp_calib_free(&set);
    }
    return 0;
}
