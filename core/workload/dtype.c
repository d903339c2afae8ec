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

/* The type and use mp_compute_names_where's predicate asks about (it takes no argument). */
static enum mp_dtype asked_dtype;
static enum mp_dtype_use asked_use;

static unsigned dtype_bits(const struct mp_compute_ops *ops, enum mp_dtype_use use)
{
    return use == MP_DTYPE_USE_WEIGHTS ? ops->weight_dtypes : ops->dispatch_dtypes;
}

static int takes_asked_dtype(const struct mp_compute_ops *ops)
{
    return !!(dtype_bits(ops, asked_use) & MP_DTYPE_BIT(asked_dtype));
}

int mp_dtype_refuse_unsupported(const char *flag, char *const *words, int n,
                                const struct mp_compute_ops *ops, enum mp_dtype_use use)
{
    for (int i = 0; i < n; i++) {
        enum mp_dtype dt;
        int rc = mp_dtype_parse(flag, words[i], &dt);
        if (rc != MP_OK)
            return rc;
        if (dtype_bits(ops, use) & MP_DTYPE_BIT(dt))
            continue;
        char names[256];
        asked_dtype = dt;
        asked_use = use;
        mp_usage("%s %s: the %s backend does not %s in %s; use %s bf16 with it, or a --backend "
                 "that does (built: %s)", flag, words[i], ops->name,
                 use == MP_DTYPE_USE_WEIGHTS ? "store expert weights" : "dispatch", words[i], flag,
                 mp_compute_names_where(takes_asked_dtype, names, sizeof names));
        return MP_ERR_USAGE;
    }
    return MP_OK;
}
