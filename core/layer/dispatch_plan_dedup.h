/* dispatch_plan_dedup.h - the host plan of the deduplicated dispatches (--dedup rank|node): which of this
 * rank's tokens go to which EP rank once, the top-K metadata each row carries there, what a node's
 * relay forwards inside its node, and how a destination expands the rows it receives into its
 * local experts' expert-major blocks (docs/METRICS.md, "Deduplicated dispatch"). */
#ifndef MP_DISPATCH_PLAN_DEDUP_H
#define MP_DISPATCH_PLAN_DEDUP_H

#include <stdint.h>

#include "placement.h"

/* One top-K choice of a dispatched row: rank mode, the expert's index among the destination's
 * local experts; node mode, its cell (serving EP rank · max_local + local index), so a relay knows
 * where to forward it; with the routing weight, or li −1 and w 0 for a choice this row does not
 * carry. A row carries K of them: K·(4 + 4) bytes, what mp_dedup_meta_bytes counts. */
struct mp_dedup_meta {
    int32_t li;
    float w;
};
_Static_assert(sizeof(struct mp_dedup_meta) == 8, "a choice is an int32 index and a float weight");

struct mp_dedup_plan {
    int ep, K, max_local;
    long max_tok, max_send, max_recv, max_exp, max_fwd;

    /* send side: one row per (token, serving rank), rows ordered by rank then token; the rows
     * for this rank's own experts form its own block, which the all-to-all copies in place (no
     * wire) */
    long ntok, nsend, local_pairs;
    int *send_rows, *send_displ;      /* [ep] */
    int32_t *send_tok;                /* [max_send] local token index of send row i */
    struct mp_dedup_meta *send_meta;  /* [max_send·K] */
    float *ones;                      /* [max(max_send, max_fwd)] 1: the returned rows' weight */
    int32_t *ids;                     /* [max_tok·K] host routing scratch (gate routing) */
    float *w;                         /* [max_tok·K] */

    /* receive side, after the count exchange filled recv_rows and the metadata arrived */
    long nrecv, nexp;
    int *recv_rows, *recv_displ;      /* [ep] */
    struct mp_dedup_meta *recv_meta;  /* [max_recv·K] */
    int32_t *exp_row;                 /* [max_exp] received row of expanded row j */
    float *exp_w;                     /* [max_exp] its routing weight */
    long *expert_off;                 /* [max_local+1] block of each local expert */

    /* node's second hop: the forwards this rank relays to the ranks of its node, one per
     * (received row, rank serving one of its choices), ordered by rank then received row; the
     * forwards it receives land after its nrecv first-hop rows (recv1_displ counts from 0) */
    long nfwd, nrecv1;
    int *fwd_rows, *fwd_displ;        /* [ep] */
    int32_t *fwd_src;                 /* [max_fwd] received first-hop row of forward f */
    struct mp_dedup_meta *fwd_meta;   /* [max_fwd·K] */
    int *recv1_rows, *recv1_displ;    /* [ep] */

    /* node's two phases (docs/METRICS.md, "Hop times"): the inter-node phase sends x_rows (the
     * send_rows to relays on other nodes; received into recv_rows, rows [0, nrecv)); the
     * intra-node phase sends each rank q of this node its d_rows[q] direct rows then its
     * fwd_rows[q] forwards, in_rows[q] from in_displ[q] of one buffer (in_meta their metadata),
     * after the count exchange of in_cnt [2·ep] (direct, forwards per rank) into in_rcnt; it
     * receives in_rrows[s] from in_rdispl[s] (counted from 0, after the nrecv first rows):
     * d_rrows[s] direct rows, then recv1_rows[s] forwards; nrecv1 all of them, nin_send the rows
     * it sends */
    int *x_rows, *in_cnt, *in_rcnt;   /* [ep], [2·ep], [2·ep] */
    int *d_rows, *d_rrows;            /* [ep] */
    int *in_rows, *in_displ, *in_rrows, *in_rdispl; /* [ep] */
    struct mp_dedup_meta *in_meta;    /* [(max_send + max_fwd)·K] */
    long nin_send;

    /* scratch: [ep] the last token counted at each rank, the next row of each rank's block, the
     * token that has a row at each rank and which row; [max_local+1] the next expanded row of
     * each local expert */
    int *ep_node;                     /* [ep] node of each EP rank (node mode; set by the caller) */
    int32_t *last_tok, *row_tok;
    int *cursor, *row_at;
    long *exp_cursor;
};

/* Allocate for `ep` ranks of at most `max_local` experts, top-`K`, at most `max_tok` tokens per
 * rank and `max_rows` rows expanded (the layer's routed-row bound: rank mode receives no more);
 * node mode: `max_relayed` first-hop rows a rank may receive (the tokens of all ranks), 0 for rank
 * mode. MP_OK or MP_ERR_RUNTIME (out of memory; the plan is then empty). */
int mp_dedup_plan_alloc(struct mp_dedup_plan *p, int ep, int max_local, int K, long max_tok,
                        long max_rows, long max_relayed);
void mp_dedup_plan_free(struct mp_dedup_plan *p);

/* The relay on node `node` for a token of EP rank `src`, EP rank q on node ep_node[q]: the rank
 * of that node at src's index within its own node, modulo the node's ranks (core/layer/dedup.h's rule,
 * ranks in EP order); −1 when the node has no rank. */
int mp_dedup_relay(const int *ep_node, int ep, int src, int node);

/* Send side for the `ntok` tokens of EP rank `ep_rank` whose global indices start at `tok0`,
 * routed to ids/w [ntok·K]: each pair served by mp_placement_dest (as the pair dispatch serves
 * it). Rank mode (ep_node NULL): one row per (token, serving rank), its metadata holding for
 * choice k the local index and weight of the pair when that rank serves it, −1/0 otherwise. Node
 * mode (ep_node [ep]: the node of each EP rank): a pair served on ep_rank's node goes to its rank
 * directly, one on another node to that node's relay (mp_dedup_relay); one row per (token, such
 * target), choice k's cell and weight when its pair goes to that target. Fills send_rows,
 * send_displ, send_tok, send_meta, nsend, local_pairs (pairs served on ep_rank). */
void mp_dedup_plan_send(struct mp_dedup_plan *p, const struct mp_placement *pl, int ep_rank,
                        long tok0, long ntok, const int32_t *ids, const float *w,
                        const int *ep_node);

/* --dispatch padded with --dedup rank or node: the fixed slots of EP rank `me` (mp_dedup_padded
 * _capacity's cap1 rows per first-hop target, cap2 per forward). First hop: a slot of cap1 rows to
 * every target a token of `me` can have, every rank with rank mode (ep_node NULL), the ranks of
 * me's node and me's relay on every other node with node mode (mp_dedup_relay); received alike
 * from every source that has me as a target. Node's forwards: a slot of cap2 rows to every other
 * rank of me's node, received alike. Fills send1/recv1/send2/recv2 [ep], rows per peer (0 where
 * no slot). */
void mp_dedup_padded_layout(const int *ep_node, int ep, int me, long cap1, long cap2, int *send1,
                            int *recv1, int *send2, int *recv2);

/* The most sources on other nodes that relay through one rank (mp_dedup_relay), for node mode's
 * lossless forward slots (cap2 = this · cap1: a relay forwards at most each row it received once
 * to each rank); 0 with one node. */
int mp_dedup_padded_relays(const int *ep_node, int ep);

/* Lay the send side (after mp_dedup_plan_send for EP rank ep_rank) out in fixed slots: slot_rows
 * [ep] rows for each target, one after another. Slot row i of target q holds row i bound for q
 * when i < min(send_rows[q], slot_rows[q]); the others are padding (token 0, weight 0, every
 * choice −1), and the rows past the slot are dropped with their pairs. slot_tok, slot_w and
 * slot_meta (·K) hold Σ slot_rows (slot_w: 1 for a row, 0 for padding: the combine's weight of the
 * row coming back). Sets local_pairs to the pairs kept on ep_rank; returns the pairs dropped. */
long mp_dedup_plan_slots(struct mp_dedup_plan *p, int ep_rank, const int *slot_rows,
                         int32_t *slot_tok, float *slot_w, struct mp_dedup_meta *slot_meta);

/* Node mode's forwards (after mp_dedup_plan_forward) in fixed slots of slot_rows [ep] rows per
 * rank, the same way: slot_src (the received row, 0 for padding), slot_w, slot_meta. Returns the
 * forwards past their slot (0 with mp_dedup_padded_relays' lossless cap2). */
long mp_dedup_plan_fwd_slots(const struct mp_dedup_plan *p, const int *slot_rows,
                             int32_t *slot_src, float *slot_w, struct mp_dedup_meta *slot_meta);

/* Node mode, at every rank after the first hop: the forwards of the nrecv received rows, one per
 * (row, rank other than ep_rank holding one of its cells), with only that rank's choices. Fills
 * fwd_rows, fwd_displ, fwd_src, fwd_meta, nfwd. MP_OK, or MP_ERR_RUNTIME after a message for a
 * cell outside the EP group or more forwards than max_fwd. */
int mp_dedup_plan_forward(struct mp_dedup_plan *p, int ep_rank);

/* Node mode, after mp_dedup_plan_send: the inter-node phase's rows, x_rows[q] = send_rows[q] for q
 * on another node than ep_rank's, else 0. */
void mp_dedup_plan_inter(struct mp_dedup_plan *p, int ep_rank);

/* Node mode, after mp_dedup_plan_forward: the intra-node phase's counts, in_cnt[2q] = d_rows[q] the
 * direct rows (send_rows[q]) and in_cnt[2q + 1] the forwards (fwd_rows[q]) for every q on ep_rank's
 * node (itself included: its own block), 0 elsewhere. */
void mp_dedup_plan_intra_counts(struct mp_dedup_plan *p, int ep_rank);

/* Node mode, once in_rcnt holds what every rank of the node sends this one: d_rrows[s] and
 * recv1_rows[s] of each rank s of the node (0 elsewhere), the intra-node phase's layouts
 * (in_rows/in_displ, in_rrows/in_rdispl after the nrecv inter-node rows), nrecv1, nin_send, and
 * in_meta (each rank's direct rows' metadata, then its forwards'). MP_OK, or MP_ERR_RUNTIME after
 * a message when the rows received exceed max_recv. */
int mp_dedup_plan_intra(struct mp_dedup_plan *p, int ep_rank);

/* Node mode: receive displacements of the forwards (recv1_rows from the count exchange), placed
 * after the nrecv first-hop rows, and nrecv1. MP_OK, or MP_ERR_RUNTIME when both exceed max_recv. */
int mp_dedup_plan_recv_forwards(struct mp_dedup_plan *p);

/* Receive displacements and nrecv from recv_rows (filled by the count exchange). MP_OK, or
 * MP_ERR_RUNTIME when the rows exceed max_recv. */
int mp_dedup_plan_recv(struct mp_dedup_plan *p);

/* Expand the received rows (recv_meta) for a rank holding `nlocal` experts: local expert li's
 * block lists, in received order, every row with a choice of li (exp_row, exp_w), blocks in
 * expert order (expert_off). Rank mode (self −1): the nrecv rows, choices naming local indices.
 * Node mode (self: this EP rank): the nrecv first-hop rows and the nrecv1 forwards after them,
 * the choices whose cell is self's. MP_OK, or MP_ERR_RUNTIME after a message when a choice names a
 * local index outside [0, nlocal) or the rows exceed max_exp (a broken exchange). */
int mp_dedup_plan_expand(struct mp_dedup_plan *p, int self, int nlocal);

#endif
