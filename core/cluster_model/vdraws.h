/* vdraws.h - the routing draws of recent modelled points, kept so a sweep draws each once. */
#ifndef MP_VDRAWS_H
#define MP_VDRAWS_H

#include <stddef.h>
#include <stdint.h>

#include "routing.h"

/* Draw number `draw` of a whole batch of `tokens` tokens under routing `r` and `seed` into ids and
 * w ([tokens·topk]): exactly what mp_routing_draw(r, seed, draw, tokens, 0, tokens, ids, w)
 * writes. A draw of the first MP_ROUTING_POOL_DRAWS whose routing (kind, experts, top-k, group
 * limit, the contents of prob and cdf), seed and tokens match one drawn before is copied from a
 * process-wide cache of recent batches instead of drawn again: a prefill pass's batch is drawn once
 * for every layout, placement, dtype and dedup form weighed at it. The cache holds at most
 * MP_VDRAWS_BUDGET_BYTES of draws (the least recently used batches make room); per-token traces
 * and draws of more than half of it are always drawn. Thread-safe: one lock, held while a kept
 * draw is made, so two threads asking for it draw it once. */
void mp_vdraws_get(const struct mp_routing *r, uint64_t seed, int draw, long tokens, int32_t *ids,
                   float *w);

/* The bytes of draws (8 a token-expert pair: its expert and weight) the cache holds at most. */
#define MP_VDRAWS_BUDGET_BYTES ((size_t)1 << 30)

/* Empty the cache (its memory returned). */
void mp_vdraws_forget(void);

/* Set the cache's budget to `bytes` (0: MP_VDRAWS_BUDGET_BYTES again), emptying it first; the
 * previous budget is returned. For tests, which reach the eviction with small batches. */
size_t mp_vdraws_set_budget(size_t bytes);

/* The bytes of draws the cache holds now (at most its budget). */
size_t mp_vdraws_held(void);

#endif
