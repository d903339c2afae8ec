/* model_compute.c - the model compute backend: moves no data; the layer's FFN, gate and permute
 * durations come from the cluster model (core/cluster_model/vlayer.c, core/cluster_model/cluster.c). The table exists so that
 * --backend model is chosen, named and recorded like any other backend. */
#include <stdlib.h>
#include <string.h>

#include "compute.h"
#include "error.h"

struct mp_compute {
    char name[64];
};

static int model_init(struct mp_compute **out, int local_rank)
{
    struct mp_compute *c = calloc(1, sizeof *c);
    if (!c) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    strcpy(c->name, "model (durations from the cluster profile)");
    *out = c;
    return MP_OK;
}

static void model_fini(struct mp_compute *c) { free(c); }
static const char *model_device_name(struct mp_compute *c) { return c->name; }
static int model_sync(struct mp_compute *c) { return MP_OK; }

const struct mp_compute_ops mp_compute_model = {
    .name = "model",
    .memory = MP_MEMORY_VIRTUAL,
    .dispatch_modes = MP_DISPATCH_ALL, /* what core/cluster_model/vlayer.c models */
    .dispatch_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16) | MP_DTYPE_BIT(MP_DTYPE_FP8),
    .weight_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16) | MP_DTYPE_BIT(MP_DTYPE_FP8),
    .gemm_modes = 1u << MP_GEMM_GROUPED | 1u << MP_GEMM_SKINNY | 1u << MP_GEMM_FUSED, /* modelled: launches or a call */
    .fp8_gemm_modes = 1u << MP_GEMM_LOOP | 1u << MP_GEMM_GROUPED | 1u << MP_GEMM_SKINNY |
                      1u << MP_GEMM_FUSED,
    .elem_size = 2, /* the profile's element size governs; bf16 by default */
    .init = model_init,
    .fini = model_fini,
    .device_name = model_device_name,
    .sync = model_sync,
};
