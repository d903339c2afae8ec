/* dispatch.c - the table of the layer's dispatch modes and the choice of a point's mode. */
#include "dispatch.h"

#include <stddef.h>

const struct mp_dispatch_mode *const mp_dispatch_modes[] = {
    &mp_dispatch_padded,
    &mp_dispatch_pipelined,
    &mp_dispatch_dynamic, /* last: it accepts every point */
    NULL,
};

const struct mp_dispatch_mode *mp_dispatch_for(const struct mp_point *pt)
{
    for (int i = 0; mp_dispatch_modes[i]; i++)
        if (mp_dispatch_modes[i]->accepts(pt))
            return mp_dispatch_modes[i];
    return &mp_dispatch_dynamic;
}
