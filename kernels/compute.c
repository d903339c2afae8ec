/* compute.c - the list of compute backends built into this binary and lookup by name. */
#include "compute.h"

#include <string.h>

#include "config.h"
#include "error.h"

const struct mp_compute_ops *const mp_compute_backends[] = {
    &mp_compute_cpu,
#if HAVE_CUDA
    &mp_compute_cuda,
#endif
    &mp_compute_model,
    NULL,
};

const struct mp_compute_ops *mp_compute_find(const char *name)
{
    char built[256] = "";
    for (int i = 0; mp_compute_backends[i]; i++) {
        if (strcmp(mp_compute_backends[i]->name, name) == 0)
            return mp_compute_backends[i];
        if (i)
            strncat(built, "|", sizeof built - strlen(built) - 1);
        strncat(built, mp_compute_backends[i]->name, sizeof built - strlen(built) - 1);
    }
    if (strcmp(name, "cuda") == 0)
        mp_usage("--backend: cuda is not built into this binary (built: %s); configure with nvcc "
                 "available", built);
    else
        mp_usage("--backend: '%s' is not one of the built backends: %s", name, built);
    return NULL;
}
