/* a2a_pattern.h - moeperf-a2a's MoE pattern: the dispatch counts of its routing draws, each
 * rank's own (measured ranks and the model's virtual ranks alike). */
#ifndef MP_A2A_PATTERN_H
#define MP_A2A_PATTERN_H

#include "a2acounts.h"
#include "dedup.h"
#include "dtype.h"
#include "placement.h"
#include "routing.h"
#include "session.h"

/* The bytes of one dispatched row in `dt`: H times the backend's element size (the profile's on
 * the model) for bf16, H + 4·⌈H/128⌉ for fp8. */
double a2a_row_bytes(const struct mp_session *s, enum mp_dtype dt);

/* MoE deduplicated (`mode` rank or node): the dispatch counts of `ndraws` draws, each cut into
 * `nchunks` chunks, into c (and the node form's forwards into c2); c->bytes_per_rank the largest
 * per-rank send's mean. Collective. On the model (s->modelled), whose virtual ranks are threads
 * of one process, each draw's counts of every rank are worked out once and shared among the
 * ranks at the same `point` of the sweep (its index, which names its routing and placement).
 * MP_OK or MP_ERR_RUNTIME. */
int a2a_counts_dedup(struct mp_a2a_counts *c, struct mp_a2a_counts *c2, enum mp_dedup mode,
                     enum mp_dtype dt, struct mp_session *s, const struct mp_routing *rt,
                     const struct mp_placement *pl, long total, int ndraws, int nchunks,
                     long point);

/* MoE per pair: the dispatch counts of `ndraws` draws, exchanged now (untimed). Collective. */
int a2a_counts_moe(struct mp_a2a_counts *c, enum mp_dtype dt, struct mp_session *s,
                   const struct mp_routing *rt, const struct mp_placement *pl, long total,
                   int ndraws);

#endif
