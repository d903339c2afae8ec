/* fuzz_csv.c - the CSV reader every report tool uses, row keys, and --resume's filter. */
#include <stdlib.h>

#include "fuzz_common.h"
#include "results.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet("fuzz_csv");
    const char *path = fuzz_file(data, size, ".csv");
    struct mp_table t;
    if (!path || mp_table_read(path, &t) != MP_OK)
        return 0;
    struct mp_keyset ks = {0};
    for (long i = 0; i < t.nrows; i++) {
        char *k = mp_table_key(&t, i, t.ncols < 3 ? t.ncols : 3);
        if (k && (i & 1))
            mp_keyset_add(&ks, k);
        free(k);
    }
    mp_table_col(&t, "layer_us");
    mp_table_free(&t);
    mp_keyset_free(&ks);
    return 0;
}
