/* vdraws.h - the routing draws of recent modelled points, kept so a sweep draws each once. */
#ifndef MP_VDRAWS_H
#define MP_VDRAWS_H

#include <stdint.h>

#include "routing.h"

/* Draw number `draw` of a whole batch of `tokens` tokens under routing `r` and `seed` into ids and
 * w ([tokens·topk]): exactly what mp_routing_draw(r, seed, draw, tokens, 0, tokens, ids, w)
 * writes. A draw of the first MP_ROUTING_POOL_DRAWS whose routing (kind, experts, top-k, group
 * limit, the contents of prob and cdf), seed and tokens match one drawn before is copied from a
 * process-wide cache of a few recent batches instead of drawn again; per-token traces and batches
 * of more than MP_VDRAWS_MAX_PAIRS pairs are always drawn. Not thread-safe. */
void mp_vdraws_get(const struct mp_routing *r, uint64_t seed, int draw, long tokens, int32_t *ids,
                   float *w);

/* The most token-expert pairs one cached batch holds. */
#define MP_VDRAWS_MAX_PAIRS (1L << 16)

/* Empty the cache (its memory returned). */
void mp_vdraws_forget(void);

#endif
