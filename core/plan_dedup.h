/* plan_dedup.h - the host plan of the rank-deduplicated dispatch (--dedup rank): which of this
 * rank's tokens go to which EP rank once, the top-K metadata each row carries there, and how a
 * destination expands the rows it receives into its local experts' expert-major blocks
 * (docs/METRICS.md, "Deduplicated dispatch"). */
#ifndef MP_PLAN_DEDUP_H
#define MP_PLAN_DEDUP_H

#include <stdint.h>

#include "placement.h"

/* One top-K choice of a dispatched row as its destination sees it: the expert's index among the
 * destination's local experts and the routing weight, or li −1 and w 0 for a choice served on
 * another rank. A row carries K of them: K·(4 + 4) bytes, what mp_dedup_meta_bytes counts. */
struct mp_dedup_meta {
    int32_t li;
    float w;
};
_Static_assert(sizeof(struct mp_dedup_meta) == 8, "a choice is an int32 index and a float weight");

struct mp_dedup_plan {
    int ep, K, max_local;
    long max_tok, max_send, max_recv, max_exp;

    /* send side: one row per (token, serving rank), rows ordered by rank then token; the rows
     * for this rank's own experts form its own block, which the all-to-all copies in place (no
     * wire) */
    long ntok, nsend, local_pairs;
    int *send_rows, *send_displ;      /* [ep] */
    int32_t *send_tok;                /* [max_send] local token index of send row i */
    struct mp_dedup_meta *send_meta;  /* [max_send·K] */
    float *ones;                      /* [max_send] 1: the weight of every returned row */
    int32_t *ids;                     /* [max_tok·K] host routing scratch (gate routing) */
    float *w;                         /* [max_tok·K] */

    /* receive side, after the count exchange filled recv_rows and the metadata arrived */
    long nrecv, nexp;
    int *recv_rows, *recv_displ;      /* [ep] */
    struct mp_dedup_meta *recv_meta;  /* [max_recv·K] */
    int32_t *exp_row;                 /* [max_exp] received row of expanded row j */
    float *exp_w;                     /* [max_exp] its routing weight */
    long *expert_off;                 /* [max_local+1] block of each local expert */

    /* scratch: [ep] the last token counted at each rank, the next row of each rank's block, the
     * token that has a row at each rank and which row; [max_local+1] the next expanded row of
     * each local expert */
    int32_t *last_tok, *row_tok;
    int *cursor, *row_at;
    long *exp_cursor;
};

/* Allocate for `ep` ranks of at most `max_local` experts, top-`K`, at most `max_tok` tokens per
 * rank and `max_rows` rows received or expanded (the layer's routed-row bound). MP_OK or
 * MP_ERR_RUNTIME (out of memory; the plan is then empty). */
int mp_dedup_plan_alloc(struct mp_dedup_plan *p, int ep, int max_local, int K, long max_tok,
                        long max_rows);
void mp_dedup_plan_free(struct mp_dedup_plan *p);

/* Send side for the `ntok` tokens of EP rank `ep_rank` whose global indices start at `tok0`,
 * routed to ids/w [ntok·K]: each pair served by mp_placement_dest (as the pair dispatch serves
 * it); one row per (token, serving rank), its metadata holding for choice k the local index and
 * weight of the pair when that rank serves it, −1/0 otherwise. Fills send_rows, send_displ,
 * send_tok, send_meta, nsend, local_pairs (pairs served on ep_rank). */
void mp_dedup_plan_send(struct mp_dedup_plan *p, const struct mp_placement *pl, int ep_rank,
                        long tok0, long ntok, const int32_t *ids, const float *w);

/* Receive displacements and nrecv from recv_rows (filled by the count exchange). MP_OK, or
 * MP_ERR_RUNTIME when the rows exceed max_recv. */
int mp_dedup_plan_recv(struct mp_dedup_plan *p);

/* Expand the nrecv received rows (recv_meta) for a rank holding `nlocal` experts: local expert
 * li's block lists, in received order, every row with a choice of li (exp_row, exp_w), blocks in
 * expert order (expert_off). MP_OK, or MP_ERR_RUNTIME after a message when a choice names a local
 * index outside [0, nlocal) or the rows exceed max_exp (a broken exchange). */
int mp_dedup_plan_expand(struct mp_dedup_plan *p, int nlocal);

#endif
