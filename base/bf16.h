/* bf16.h - a float rounded to bfloat16 on the host (nearest, ties to even), the value a bf16
 * activation of the cuda backend holds, for a reference that models what that backend computes. */
#ifndef MP_BF16_H
#define MP_BF16_H

#include <stdint.h>
#include <string.h>

/* x rounded to the nearest bfloat16 (8 bits of mantissa; ties to the even one), as a float: the
 * upper 16 bits of the IEEE single rounded (IEEE 754-2019, roundTiesToEven; bfloat16 is binary32
 * with 16 fraction bits dropped). NaN stays NaN; values past the largest bf16 become ±inf. */
static inline float mp_bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN */
        return x;
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

#endif
