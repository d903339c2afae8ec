/* fuzz_model_file.c - key=value model files (--model FILE). */
#include "fuzz_common.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet("fuzz_model_file");
    const char *path = fuzz_file(data, size, ".model");
    struct mp_model m;
    if (path && mp_model_resolve(path, &m) == MP_OK)
        mp_model_override(&m, -1, -1, -1, -1, -1, -1);
    return 0;
}
