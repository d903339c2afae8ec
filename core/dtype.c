/* dtype.c - the --dispatch-dtype and --weight-dtype words, the wire bytes of a dispatched row and
 * the bytes of an expert's weights in each. */
#include "dtype.h"

#include <string.h>

#include "error.h"
#include "fp8.h"
#include "registry.h"

const char *const mp_dtype_choices[] = {"bf16", "fp8", NULL};
_Static_assert(MP_DTYPE_COUNT == 2, "mp_dtype_choices names every enum mp_dtype");

int mp_dtype_parse(const char *flag, const char *word, enum mp_dtype *dt)
{
    char accepted[64] = "";
    for (int i = 0; mp_dtype_choices[i]; i++) {
        if (strcmp(word, mp_dtype_choices[i]) == 0) {
            *dt = (enum mp_dtype)i;
            return MP_OK;
        }
        mp_registry_append(accepted, sizeof accepted, mp_dtype_choices[i]);
    }
    mp_usage("%s: '%s' is not one of %s", flag, word, accepted);
    return MP_ERR_USAGE;
}

double mp_dispatch_row_bytes(enum mp_dtype dt, int H, double act_row_bytes)
{
    return dt == MP_DTYPE_FP8 ? (double)mp_fp8_row_bytes(H) : act_row_bytes;
}

double mp_expert_weight_bytes(enum mp_dtype dt, int H, int Dl, double elem)
{
    if (dt != MP_DTYPE_FP8)
        return 3.0 * H * (double)Dl * elem;
    return (double)mp_fp8_weight_bytes(H, Dl) * 2 + (double)mp_fp8_weight_bytes(Dl, H);
}
