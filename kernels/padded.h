/* padded.h - the index rules of the padded dispatch mode (fixed rows per expert slot, no count
 * exchange before the data moves), plain C usable in host and device code: a contract between the
 * backends' kernels and core's host plan (core/layer/dispatch_plan.c), so core may include it beside compute.h. */
#ifndef MP_PADDED_H
#define MP_PADDED_H

#include <math.h>

#include "hostdevice.h"

/* Rows per (source, destination expert) slot of the padded dispatch: with capacity factor
 * `factor` > 0, ⌈tokens·K·factor / experts⌉ (the per-expert capacity of GShard, Lepikhin et al.
 * 2020, §2.2, for the `tokens` one source holds), rounded up to a multiple of `align` (≥ 1) and
 * never more than `tokens`, which no slot can exceed because a token picks an expert at most once;
 * `factor` ≤ 0 asks for exactly that lossless bound. At least 1. */
static inline MP_HD long mp_padded_capacity(long tokens, int K, int experts, double factor, int align)
{
    long cap = tokens;
    if (factor > 0) {
        double rows = (double)tokens * K * factor / experts;
        cap = (long)ceil(rows);
        if (align > 1)
            cap = (cap + align - 1) / align * align;
        if (cap > tokens)
            cap = tokens;
    }
    return cap < 1 ? 1 : cap;
}

/* The send-buffer row of the j-th pair (in token order) bound for local expert `li` of EP rank
 * `dest`, when every rank sends `max_local` slots of `cap` rows to every peer: slot-major, so the
 * rows for one peer are one contiguous block of max_local·cap rows. −1 when j ≥ cap (dropped). */
static inline MP_HD long mp_padded_row(int dest, int li, long j, int max_local, long cap)
{
    return j < cap ? ((long)dest * max_local + li) * cap + j : -1;
}

/* Where the receiver puts row j of source `src`'s slot for its local expert `li` so every expert's
 * rows are contiguous (expert-major: expert li owns rows [li·ep·cap, (li+1)·ep·cap)). */
static inline MP_HD long mp_padded_expert_row(int src, int li, long j, int ep, long cap)
{
    return ((long)li * ep + src) * cap + j;
}

#endif
