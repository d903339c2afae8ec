/* vtraffic.h - a routing draw's traffic on virtual ranks, independent of the cluster's speeds: per
 * EP rank its tokens, rows, FFN rows, active experts and bytes per phase and link class, and the
 * exchange rounds its rows between ranks make. The traffic builders (core/cluster_model/vtraffic_modes.c) and the traced
 * ranks (core/cluster_model/vexec.c) both fill it; core/cluster_model/vlayer.c times it. */
#ifndef MP_VTRAFFIC_H
#define MP_VTRAFFIC_H

#include "cluster.h"
#include "layer.h"

/* One exchange round of an all-to-all, as mp_cost_exchange_us needs it. */
struct mp_vexchange {
    double intra_max, inter_max; /* the largest bytes any rank sends or receives per class */
    int uses_intra, uses_inter, incast;
};

/* The exchange round that `rows_to` makes ([ep·ep] rows of `row_bytes` bytes each from EP rank e
 * to EP rank p at e·ep + p; a rank's rows to itself stay off the links) on a tp × ep layout whose
 * ranks are packed gpn to a node: the largest volume any EP rank sends or receives on each link
 * class, which classes carry rows, and the incast (the most senders on other nodes any rank
 * receives from). The exchanges of the modelled layer are built by the same function. */
void mp_vexchange_of(const double *rows_to, int ep, int tp, int gpn, double row_bytes,
                     struct mp_vexchange *x);

/* The duration of exchange `x` under profile `cl`: mp_cost_exchange_us of its volumes  [µs] */
double mp_vexchange_us(const struct mp_cluster *cl, const struct mp_vexchange *x);

/* The traffic of one routing draw on a tp × ep layout (ranks packed gpus_per_node to a node). */
struct mp_vtraffic {
    int tp, ep, gate;
    int count_exchange; /* the dispatch exchanges counts before the data (dynamic: 1, padded: 0) */
    int straggle_rank;  /* --straggle: this world rank's FFN takes straggle_us more (us 0: off) */
    double straggle_us;
    /* --dispatch-dtype: a dispatched row's bytes over a combined row's (1 for bf16; fp8:
     * (H + 4·⌈H/128⌉) / (H · elem_bytes)); the exchanges below count combine-sized rows except
     * the deduplicated hops, which count the dispatch's own */
    double dispatch_scale;
    int weight_dtype; /* --weight-dtype (enum mp_dtype): the FFN's rate and weight bytes */
    int gemm;         /* --gemm (enum mp_gemm): a loop's launches or one fused call */
    double *tokens, *rows, *ffn_rows, *pairs, *local; /* [ep] per EP rank */
    double *dropped;                                  /* [ep] pairs over capacity it sent */
    int *active;                                      /* [ep] experts with rows, shared included */
    double *bytes_sent;                               /* [ep] dispatch + combine, to other ranks */
    /* [ep] of bytes_sent, per phase, to ranks of the sender's node (intra) and of other nodes */
    double *dispatch_intra, *dispatch_inter, *combine_intra, *combine_inter;
    struct mp_vexchange a2a;                          /* the whole layer's exchange */
    /* with --dedup rank or node (core/layer/dedup.h): the dispatch's hops (node: the direct and
     * inter-node rows, then the forwards inside the node) and the combine's return of each, its
     * rows one per row received, without metadata; dedup_hops 0 (pair): a2a is both ways */
    int dedup_hops;
    struct mp_vexchange hop[2], back[2];
    /* with a pipelined point (overlap N > 1), the same cut into the N chunks of the measured
     * pipeline (mp_plan_expert_group); nchunks = 1 and the arrays NULL otherwise */
    int nchunks;
    double *chunk_rows;            /* [nchunks·ep] routed rows of chunk k at EP rank p */
    int *chunk_active;             /* [nchunks·ep] its active experts (shared ones in chunk 0) */
    struct mp_vexchange *chunk_a2a; /* [nchunks] each chunk's exchange */
    /* with --dedup rank|node pipelined (chunks of tokens, mp_vtraffic_dedup_pipelined): each
     * chunk's rows per hop out and back ([nchunks·2], hop h of chunk k at 2k + h; rows only: the
     * metadata goes ahead with the counts), and each hop's metadata exchange for all chunks;
     * NULL otherwise */
    struct mp_vexchange *chunk_hop, *chunk_back;
    struct mp_vexchange meta[2];
    /* with --expert-cache (docs/METRICS.md, "Expert cache"): [ep·max_local] 1 where EP rank p's
     * local expert l is accessed in this draw (it has rows; padded: every local expert), NULL
     * otherwise; and, set for the iteration being timed, [ep] the µs rank p's fetches add to its
     * FFN (NULL: none) */
    unsigned char *used;
    double *used_rows; /* [ep·max_local] with used: the rows of each accessed expert */
    int max_local;
    const double *fetch_us;
};

/* Ready `t` for one draw of point `pt` on a tp × ep layout under profile `cl`: its scalars (gate,
 * straggler, dtypes, the dispatched row's scale) and its per-rank arrays, zeroed, cut into
 * pt->overlap chunks when that is above 1. MP_OK or MP_ERR_RUNTIME (out of memory; free with
 * mp_vtraffic_free). Shared by the traffic builders and the traced ranks (core/cluster_model/vexec.c). */
int mp_vtraffic_start(struct mp_vtraffic *t, const struct mp_cluster *cl,
                      const struct mp_model *m, int tp, int ep, const struct mp_point *pt);

/* mp_vexchange_of with the per-rank bytes: the dispatch sends rows_to in rows of
 * dispatch_row_bytes, the combine returns what came in, in rows of row_bytes; each rank's
 * bytes_sent and its dispatch_/combine_ intra/inter into t. */
void mp_vexchange_bytes_of(const double *rows_to, int ep, int tp, int gpn, double row_bytes,
                           double dispatch_row_bytes, struct mp_vexchange *x,
                           struct mp_vtraffic *t);

void mp_vtraffic_free(struct mp_vtraffic *t, int ndraws);

/* The EP ranks [*lo, *hi) on the node of EP rank p of a tp × ep layout packed gpn ranks to a node:
 * nodes hold consecutive EP ranks. Called with p rising from a range of [0, 0), it recomputes the
 * range only when p leaves it. */
void mp_vnode_range(int p, int ep, int tp, int gpn, int *lo, int *hi);

#endif
