/* fuzz_common.h - what the fuzz targets share: quiet usage errors and writing the input to a file
 * for parsers that take a path. */
#ifndef MP_FUZZ_COMMON_H
#define MP_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A per-process scratch path holding `data`; NULL if it cannot be written. */
static inline const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/moeperf-fuzz-%d%s", (int)getpid(), suffix);
    FILE *f = fopen(path, "wb");
    if (!f)
        return NULL;
    fwrite(data, 1, size, f);
    fclose(f);
    return path;
}

/* Write `n` bytes to dir/name (a run directory's file made from the fuzzer's bytes). */
static inline void fuzz_put(const char *dir, const char *name, const uint8_t *d, size_t n)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(d, 1, n, f);
        fclose(f);
    }
}

/* Rank 1 prints no usage errors: the fuzzer feeds thousands of bad inputs a second. */
static inline void fuzz_quiet(const char *prog) { mp_log_init(prog, 1); }

#endif
