/* padded_oracle.h - the padded send side laid out on the host from a dynamic plan, slot by slot:
 * the oracle the backend-built padded plan (kernels/dplan.h) and the slot rules are tested against. */
#ifndef MP_TEST_PADDED_ORACLE_H
#define MP_TEST_PADDED_ORACLE_H

#include "padded.h"
#include "dispatch_plan.h"

/* Lay out the send side of plan `src` (built by mp_plan_send for EP rank `ep_rank`) in the slots
 * of p (mp_padded_alloc): each slot holds the first `cap` pairs of its block in token order,
 * padding rows token 0 with weight 0; fills kept, dropped and local_pairs as the layer does. */
static inline void oracle_padded_send(struct mp_padded *p, const struct mp_plan *src, int ep_rank)
{
    int L = p->max_local;
    long pos = 0; /* the plan's rows are ordered by (peer, expert), token order inside a block */
    p->dropped = 0;
    p->local_pairs = 0;
    for (int d = 0; d < p->ep; d++)
        for (int l = 0; l < L; l++) {
            long n = l < src->max_local ? src->send_cnt[d * src->max_local + l] : 0;
            long keep = n < p->cap ? n : p->cap;
            for (long j = 0; j < p->cap; j++) {
                long row = mp_padded_row(d, l, j, L, p->cap);
                p->src_tok[row] = j < keep ? src->src_tok[pos + j] : 0;
                p->w[row] = j < keep ? src->row_w[pos + j] : 0.0f;
            }
            p->kept[d * L + l] = (int)keep;
            p->dropped += n - keep;
            if (d == ep_rank)
                p->local_pairs += keep;
            pos += n;
        }
}

#endif
