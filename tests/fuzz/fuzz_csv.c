/* fuzz_csv.c - the CSV reader every report tool uses, the schema's checks of what it read (every
 * file of the schema, validation.csv included), row keys, and --resume's filter. */
#include <math.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "results.h"
#include "schema.h"

/* A table that passed file f's checks holds in each of f's number columns only empty cells and
 * finite numbers. */
static void check_passed(const struct mp_table *t, const struct mp_csv_schema *f)
{
    for (int c = 0; c < t->ncols; c++) {
        int i = mp_schema_index(f, t->cols[c]);
        if (i < 0 || mp_schema_column(f, i)->format == MP_CELL_TEXT)
            continue;
        for (long r = 0; r < t->nrows; r++) {
            char *end;
            double v = strtod(t->cells[r][c], &end);
            if (t->cells[r][c][0] && (*end || !isfinite(v)))
                __builtin_trap();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet("fuzz_csv");
    const char *path = fuzz_file(data, size, ".csv");
    struct mp_table t;
    if (!path || mp_table_read(path, &t) != MP_OK)
        return 0;
    for (int f = 0; mp_schemas[f]; f++)
        if (mp_table_validate(&t, mp_schemas[f]) == MP_OK)
            check_passed(&t, mp_schemas[f]);
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
