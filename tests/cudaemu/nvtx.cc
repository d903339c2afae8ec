/* nvtx.cc - the stand-in's NVTX ranges: a per-thread nesting level, as nvtxRangePushA and
 * nvtxRangePop return it, and with CUDAEMU_NVTX_LOG=PREFIX a log of every push ("push LEVEL NAME")
 * and pop ("pop LEVEL") in PREFIX.<pid>, one file per process (rank). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "nvtx3/nvToolsExt.h"

static thread_local int depth;

/* The log of this process, opened at its first range; NULL without CUDAEMU_NVTX_LOG. */
static FILE *nvtx_log(void)
{
    static FILE *f;
    static int tried;
    if (!tried) {
        tried = 1;
        const char *prefix = getenv("CUDAEMU_NVTX_LOG");
        if (prefix && *prefix) {
            char path[4096];
            snprintf(path, sizeof path, "%s.%d", prefix, (int)getpid());
            f = fopen(path, "w");
            if (!f)
                fprintf(stderr, "cudaemu: CUDAEMU_NVTX_LOG: cannot write %s\n", path);
        }
    }
    return f;
}

extern "C" int nvtxRangePushA(const char *name)
{
    FILE *f = nvtx_log();
    if (f) {
        fprintf(f, "push %d %s\n", depth, name ? name : "");
        fflush(f);
    }
    return depth++;
}

extern "C" int nvtxRangePop(void)
{
    if (depth == 0)
        return -1;
    FILE *f = nvtx_log();
    if (f) {
        fprintf(f, "pop %d\n", depth - 1);
        fflush(f);
    }
    return --depth;
}
