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
    /* the largest whole numbers of rows behind intra_max and inter_max when the fast path
     * counted them (mp_vsum_exchange: the maxima are these times the row bytes); 0 otherwise */
    long intra_rows, inter_rows;
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
    /* counted by the fast path (d->fast, core/cluster_model/vtraffic_modes.c): 1, and per rank
     * the rows it dispatches to ranks of its node and of other nodes over every hop (what its
     * dispatch_intra and dispatch_inter price), while each exchange keeps its largest rows
     * (struct mp_vexchange), so mp_vtraffic_retype can price the same rows in another dispatch
     * dtype; 0 otherwise */
    int counted;
    double *dispatch_rows_intra, *dispatch_rows_inter;
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

/* The scratch of the counted fast path of the dynamic dispatch and its pipelined and
 * deduplicated forms (mp_vtraffic_dynamic, mp_vtraffic_dedup_pipelined): every exchange round's
 * per-rank sums kept while the pairs are routed (struct mp_vsum), O(pairs + ep) a draw instead of
 * the O(ep²) matrices, for a point with N chunks on ep EP ranks, Lm = max(max_local, 1). */
struct mp_vfast {
    /* [(2 + 2N)·ep] cleared rounds (mp_vsum_clear): round 0 the layer's exchange (pair) or dedup
     * hop 0, round 1 hop 1, round 2 + 2k + h chunk k's (hop h) */
    struct mp_vsum *sum;
    int *node, *node_lo, *node_n; /* [ep] each EP rank's node, its node's first rank and ranks */
    int *group; /* [ep·Lm] with N > 1: the chunk of each (rank, local expert), as pipelined */
    long *seen; /* [2·ep] dedup: the last token with a row to each rank, and one to each relay */
    long *chunk_cells; /* [N·ep·Lm] zeroed: dedup pipelined, each chunk's pairs per cell */
    int *dst, *lix; /* [pairs of the rank with the most] one rank's pairs routed, in turn */
};

/* Whether the fast path counts point `pt`'s traffic on profile `cl` to the bit: its dispatched,
 * combined and metadata row bytes whole numbers, and twice its pairs times the largest of them
 * below 2^53, so that every sum of bytes is exact in any order. */
int mp_vtraffic_fast_ok(const struct mp_cluster *cl, const struct mp_model *m,
                        const struct mp_point *pt);

/* Ready `f` for point `pt` of top-K routing on a tp × ep layout whose ranks pack gpn to a node
 * (every round cleared, the groups of placement pt->placement's cells): MP_OK or MP_ERR_RUNTIME
 * (out of memory; free with mp_vfast_free either way). */
int mp_vfast_alloc(struct mp_vfast *f, const struct mp_point *pt, int tp, int ep, int gpn, int K);
void mp_vfast_free(struct mp_vfast *f);

/* Price the draws t [P], counted by the fast path for a point that differs from pt in its
 * dispatch dtype alone, for pt's: the dispatched row's scale, every rank's dispatch bytes and
 * the exchanges whose rows travel in the dispatch dtype (the deduplicated hops out, their
 * metadata, each chunk's hops out), to the bit what mp_vtraffic_build gives for pt. MP_OK, or
 * MP_ERR_USAGE with t unchanged when a draw was not counted so or pt's byte sums would not be
 * exact (mp_vtraffic_fast_ok): then build pt's traffic afresh. */
int mp_vtraffic_retype(struct mp_vtraffic *t, int P, const struct mp_cluster *cl,
                       const struct mp_model *m, const struct mp_point *pt);

/* The whole-number sums of one exchange round at one EP rank, kept while the round's rows are
 * counted one by one (the counted traffic's fast path, core/cluster_model/vtraffic_modes.c) in
 * place of its ep × ep matrix: the rows the rank sends (out) and receives (in), each to or from
 * ranks of other nodes ([MP_VINTER]) and of its own ([MP_VINTRA]), how many ranks of other nodes
 * send it rows (senders) and receive rows from it (receivers), and the last sender of another
 * node whose rows to it were counted (mark, −1 before the first). A round is an array of ep. */
enum { MP_VINTER, MP_VINTRA };
struct mp_vsum {
    long out[2], in[2];
    int senders, receivers, mark;
};

/* c (0 or 1) rows from EP rank e to EP rank p ≠ e of round `s` ([ep], ranks on the nodes `node`
 * [ep]): into e's and p's sums, without a branch on where p is or on c (c 0 changes nothing).
 * Rows between ranks of different nodes must come one sender at a time (all of e's before
 * another sender's), so that each such (sender, receiver) pair counts once among p's senders
 * and e's receivers. */
static inline void mp_vsum_addn(struct mp_vsum *s, const int *node, int e, int p, int c)
{
    int same = node[p] == node[e], other = c & !same, first = other & (s[p].mark != e);
    s[e].out[same] += c;
    s[p].in[same] += c;
    s[p].senders += first;
    s[e].receivers += first;
    s[p].mark = other ? e : s[p].mark;
}

/* One row from EP rank e to EP rank p ≠ e of round s: mp_vsum_addn of 1. */
static inline void mp_vsum_add(struct mp_vsum *s, const int *node, int e, int p)
{
    mp_vsum_addn(s, node, e, p, 1);
}

/* The largest rows of one exchange round so far (mp_vsum_exchange's maxima), rank by rank. */
struct mp_vsum_max {
    long intra, inter;
    int incast;
};

/* Rank sums `s` into the maxima `x` of its round (the receivers as the incast with `back`). */
static inline void mp_vsum_max_add(struct mp_vsum_max *x, const struct mp_vsum *s, int back)
{
    long a = s->in[MP_VINTRA] > s->out[MP_VINTRA] ? s->in[MP_VINTRA] : s->out[MP_VINTRA];
    long b = s->in[MP_VINTER] > s->out[MP_VINTER] ? s->in[MP_VINTER] : s->out[MP_VINTER];
    int c = back ? s->receivers : s->senders;
    x->intra = a > x->intra ? a : x->intra;
    x->inter = b > x->inter ? b : x->inter;
    x->incast = c > x->incast ? c : x->incast;
}

/* The exchange of a round whose every rank's sums went into `mx` (mp_vsum_max_add), on the nodes
 * `node` [ep], in rows of row_bytes: what mp_vsum_exchange gives for the round. */
void mp_vsum_exchange_of(const struct mp_vsum_max *mx, const int *node, int ep, double row_bytes,
                         struct mp_vexchange *x);

/* Round `s` [ep] (ranks on the nodes `node` [ep], numbered from 0 and rising with the rank, as
 * mp_vnode_range lays them out) as exchange x in rows of row_bytes each way; with `back` the same
 * rows returned, each by its receiver to its sender. When every rank's rows times row_bytes is a
 * whole number below 2^53, x is, to the bit, what mp_vexchange_of makes of the round's ep × ep
 * matrix (of its transpose with `back`). */
void mp_vsum_exchange(const struct mp_vsum *s, const int *node, int ep, double row_bytes,
                      int back, struct mp_vexchange *x);

/* Zero round `s` [ep] for the next draw (its marks −1). */
void mp_vsum_clear(struct mp_vsum *s, int ep);

/* The EP ranks [*lo, *hi) on the node of EP rank p of a tp × ep layout packed gpn ranks to a node:
 * nodes hold consecutive EP ranks. Called with p rising from a range of [0, 0), it recomputes the
 * range only when p leaves it. */
void mp_vnode_range(int p, int ep, int tp, int gpn, int *lo, int *hi);

#endif
