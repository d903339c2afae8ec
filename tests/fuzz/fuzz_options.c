/* fuzz_options.c - the option parser on arbitrary argument vectors (NUL- or newline-separated
 * words), with the benchmark flags of every type: lists, ranges, sizes, choices, flags. */
#include <stdlib.h>
#include <string.h>

#include "bench_opts.h"
#include "fuzz_common.h"

static const struct mp_opt table[] = {
    MP_OPT_MODEL("qwen3-30b-a3b"), MP_OPT_EXPERTS, MP_OPT_TOPK, MP_OPT_SHARED, MP_OPT_HIDDEN,
    MP_OPT_FFN, MP_OPT_BATCH("1:128:x2"), MP_OPT_SEQ, MP_OPT_LAYOUT(NULL), MP_OPT_ROUTING,
    MP_OPT_PLACEMENT, MP_OPT_SEED, MP_OPT_WARMUP("3"), MP_OPT_ITERS("20"), MP_OPT_BACKEND,
    MP_OPT_COMM, MP_OPT_CLUSTER, MP_OPT_WORLD, MP_OPT_OUT, MP_OPT_RESUME, MP_OPT_CHECK,
    MP_OPT_TIMEOUT, MP_OPT_INJECT_DELAY, MP_OPT_STRAGGLE,
    {"bytes", MP_OPT_SIZE_LIST, MP_O(bytes), "1K:16M:x4", 1, 1 << 30, NULL, "LIST", "sizes"},
    MP_OPT_END,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet("fuzz_options");
    if (size > 4096)
        return 0;
    char *buf = malloc(size + 1);
    char *argv[256];
    int argc = 0;
    argv[argc++] = "moeperf-layer";
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *word = buf;
    for (size_t i = 0; i <= size && argc < 255; i++)
        if (buf[i] == '\0' || buf[i] == '\n') {
            buf[i] = '\0';
            if (strcmp(word, "--help") && strcmp(word, "-h") && strcmp(word, "--version"))
                argv[argc++] = word; /* help prints to stdout: not what is being fuzzed */
            word = buf + i + 1;
        }
    argv[argc] = NULL;
    struct mp_bench_opts o;
    char **pos = NULL;
    int npos = 0;
    if (mp_opts_parse(table, &o, argc, argv, "fuzz", &pos, &npos) == MP_OK) {
        struct mp_model m;
        if (mp_bench_model(&o, &m) == MP_OK) { /* model files and overrides too */
            int r;
            double us;
            mp_straggle_parse(o.straggle, 64, &r, &us);
        }
    }
    free(pos);
    mp_opts_free(table, &o);
    free(buf);
    return 0;
}
