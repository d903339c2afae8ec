/* dispatch_plan.h - the dispatch plan of one iteration on one rank: where each token-expert pair goes, the
 * per-peer counts and displacements for the all-to-all, and the reordering of received rows into
 * per-expert blocks. All arrays are allocated once and reused, so building a plan allocates nothing. */
#ifndef MP_DISPATCH_PLAN_H
#define MP_DISPATCH_PLAN_H

#include <stdint.h>

#include "compute.h"
#include "placement.h"

struct mp_plan {
    int ep, max_local, K;
    long max_tok;

    /* send side: this rank's tokens, one row per token-expert pair, ordered by (peer, expert) */
    long ntok, nsend, local_pairs;
    int *send_cnt;   /* [ep·max_local] rows to each (peer, local expert index at that peer) */
    int *send_rows;  /* [ep] */
    int *send_displ; /* [ep] */
    int32_t *src_tok; /* [nsend] local token index of send row i */
    float *row_w;     /* [nsend] routing weight of send row i */

    /* receive side, after the count exchange filled recv_cnt */
    long nrecv;
    int *recv_cnt;   /* [ep·max_local] rows from each (source, my local expert) */
    int *recv_rows;  /* [ep] */
    int *recv_displ; /* [ep] */
    long *expert_off; /* [max_local+1] block of each local expert in expert-major order */
    struct mp_chunk *to_expert; /* source-major → expert-major, one chunk per (source, expert) */
    struct mp_chunk *to_source; /* the inverse */
    int nchunks;

    int32_t *pair_dest, *pair_li; /* scratch [max_tok·K] */
    int *cursor;                  /* scratch [ep·max_local] */
};

/* Tokens of EP rank `e` when `total` tokens are spread as evenly as possible over `ep` ranks (the
 * first total mod ep ranks hold one more); the rank's first global token index in *tok0. */
long mp_token_split(long total, int ep, int e, long *tok0);

/* Allocate for up to `max_tok` tokens per rank, top-`K`, `ep` peers holding ≤ `max_local` experts.
 * Returns MP_OK or MP_ERR_RUNTIME. */
int mp_plan_alloc(struct mp_plan *p, int ep, int max_local, long max_tok, int K);
void mp_plan_free(struct mp_plan *p);

/* Send side for `ntok` tokens of EP rank `ep_rank` whose global indices start at `tok0`, routed to
 * ids/w ([ntok·K]). Pairs go to mp_placement_dest(). */
void mp_plan_send(struct mp_plan *p, const struct mp_placement *pl, int ep_rank, long tok0,
                  long ntok, const int32_t *ids, const float *w);

/* The chunk of a pipelined layer that local expert `li` of a rank holding `nlocal` experts belongs
 * to: group ⌊li·ngroups / nlocal⌋ of `ngroups` (0 when ngroups ≤ 1). The measured pipeline and the
 * cluster model cut a layer into the same chunks through this one function. */
int mp_plan_expert_group(int li, int nlocal, int ngroups);

/* The same for the pairs whose expert falls in group `group` of `ngroups` at its destination
 * (mp_plan_expert_group). A pipelined layer sends one group at a time, so each expert's weights
 * are read once per layer. */
void mp_plan_send_group(struct mp_plan *p, const struct mp_placement *pl, int ep_rank, long tok0,
                        long ntok, const int32_t *ids, const float *w, int group, int ngroups);

/* The send side's counts, displacements and totals from send_cnt alone, for a plan whose rows a
 * compute backend built (plan_build's totals copied into send_cnt): what mp_plan_send computes
 * besides src_tok/row_w, for `ntok` tokens of EP rank `ep_rank`. */
void mp_plan_from_counts(struct mp_plan *p, int ep_rank, long ntok);

/* The route table of EP rank `ep_rank` for a backend-built plan (struct mp_dplan_shape): for each
 * of the placement's experts, route_off[e] .. route_off[e+1] into route_cell lists the cells
 * (group·ep·max_local + dest·max_local + local index at dest) its pairs may go to, in the order
 * mp_placement_dest picks them by token; group is the pipelined layer's chunk of that local expert
 * (mp_plan_expert_group over `ngroups`; 0 with one group), so a sort by cell lays the chunks out
 * one after another, each ordered by (dest, local expert) as mp_plan_send_group orders it.
 * route_off has experts+1 entries, route_cell at most mp_route_table_size(). Returns the number of
 * cells written. */
int mp_route_table(const struct mp_placement *pl, int ep_rank, int max_local, int ngroups,
                   int32_t *route_off, int32_t *route_cell);
int mp_route_table_size(const struct mp_placement *pl);

/* Receive side from recv_cnt (filled by the count exchange) for a rank holding `nlocal` experts. */
void mp_plan_recv(struct mp_plan *p, int nlocal);

/* The padded dispatch layout (--dispatch padded): every rank sends every peer `max_local` slots of
 * `cap` rows, one per local expert of the peer, whatever the routing, so the all-to-all has fixed
 * sizes and needs no count exchange first (kernels/padded.h has the row rules). A slot holds the
 * first `cap` of its pairs in token order; the rest are dropped. Padding rows point at token 0 with
 * weight 0, so kernels run over whole slots and the combine adds nothing for them. */
struct mp_padded {
    int ep, max_local;
    long cap, rows;      /* rows = ep·max_local·cap, the send (and receive) buffer */
    int32_t *src_tok;    /* [rows] token of each send row (padding: 0) */
    float *w;            /* [rows] routing weight (padding: 0) */
    int *peer_rows, *peer_displ; /* [ep] max_local·cap and its prefix: the fixed all-to-all */
    int *kept;           /* [ep·max_local] pairs kept per slot, for the metrics */
    long dropped, local_pairs; /* pairs over capacity; kept pairs served on this rank */
    /* receive side for a rank holding nlocal experts: slot (src, li) → expert-major */
    long *expert_off;    /* [max_local+1] */
    struct mp_chunk *to_expert, *to_source; /* [ep·max_local] */
    int nchunks;
};

/* Allocate for `ep` peers of at most `max_local` experts and slots of `cap` rows. */
int mp_padded_alloc(struct mp_padded *p, int ep, int max_local, long cap);
void mp_padded_free(struct mp_padded *p);

/* The kept/dropped/local counts of a padded send side whose slot rows a compute backend built, from
 * the pairs of each cell (`totals`, [ep·max_local]) of EP rank `ep_rank`. */
void mp_padded_from_counts(struct mp_padded *p, const int32_t *totals, int ep_rank);

/* Receive side of a rank holding `nlocal` experts: expert li's rows are every source's slot for li,
 * sources in order (expert_off[li] = li·ep·cap). */
void mp_padded_recv(struct mp_padded *p, int nlocal);

/* Zero the weights of the pairs the padded dispatch drops, for the whole batch of `total` tokens
 * split over `ep` ranks as mp_token_split does (ids/w: [total·K]), so a reference forward sees the
 * same pairs the padded layer kept. Returns the number of pairs dropped, or −1 out of memory. */
long mp_padded_drop(const struct mp_placement *pl, int ep, long total, int K, const int32_t *ids,
                    float *w, long cap);

#endif
