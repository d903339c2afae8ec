/* vlayer.h - the layer pipeline for virtual ranks: the same routing, placement, dispatch plan and
 * metrics as a measurement, with every phase's duration taken from the cluster model instead of
 * hardware, so one process plays a whole cluster. Split in two: the traffic a routing draw makes
 * (independent of the cluster's speeds) and the durations the model gives it, so calibration can
 * re-time the same traffic under many candidate profiles. */
#ifndef MP_VLAYER_H
#define MP_VLAYER_H

#include <stdint.h>

#include "cluster.h"
#include "layer.h"

/* One exchange round of an all-to-all, as mp_model_exchange_us needs it. */
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

/* The duration of exchange `x` under profile `cl`: mp_model_exchange_us of its volumes  [µs] */
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
    /* with --dedup rank or node (core/dedup.h): the dispatch's hops (node: the direct and
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

struct mp_plan;
struct mp_dedup_counts;

/* One routing draw as a dispatch mode's traffic builder gets it: the point, the draw's pairs and
 * scratch that mp_vtraffic_build sized for the point. */
struct mp_vdraw {
    const struct mp_cluster *cl;
    const struct mp_model *m;
    const struct mp_point *pt; /* placement, capacity factor, overlap */
    long tokens;               /* T, the whole batch (batch · seq) */
    const int32_t *ids;        /* [T·K] expert of each token-expert pair */
    const float *w;            /* [T·K] its routing weight */
    struct mp_plan *plan;      /* one source rank's plan, cells for the placement's max_local */
    double *rows_to;           /* [ep·ep] scratch */
    double *exp_rows;          /* [ep·max_local] scratch */
    double *chunk_to;          /* [nchunks·ep·ep] scratch when t->nchunks > 1, else NULL */
    struct mp_dedup_counts *dedup; /* scratch when pt->dedup is not pair, else NULL */
    /* [holder_off[experts]] the local index of each holder entry's expert at that holder
     * (mp_placement_local_index of pl->holders[h]), or NULL: mp_placement_dest's route found by
     * the placement's functions */
    const int *holder_li;
    /* [experts] where an expert has one holder, that rank (dest) and the expert's local index
     * there (li), read with one load per pair; dest −1 where it has several; or NULL */
    const struct mp_vsole {
        int dest, li;
    } *sole;
    /* [ep + ep·max_local + 6·ep] zeroed scratch for whole-number counts (a source rank's rows to
     * each rank, then every (rank, local expert) cell's, then an exchange's per-rank sums), left
     * zeroed, or NULL */
    long *counts;
};

/* A dispatch mode's traffic: fill every per-rank array and exchange of `t` (allocated for the
 * point by mp_vtraffic_build) with what that mode's measured layer moves and computes for the
 * draw `d`, and set t->count_exchange. One function per mode, so a dispatch-mode table can name
 * its model hook. */
typedef void (*mp_vtraffic_fn)(struct mp_vtraffic *t, const struct mp_vdraw *d);

/* Dynamic dispatch (core/layer.c's default mode): counts exchanged first, then exactly the routed
 * rows; nothing dropped; with t->nchunks > 1 also cut into the pipelined layer's chunks. With
 * pt->dedup rank or node (never pipelined) the wire carries mp_dedup_count's rows instead, each
 * dispatched row with its metadata (mp_dedup_meta_bytes), in t->dedup_hops exchange rounds; the
 * FFN rows stay the pairs each rank serves. */
void mp_vtraffic_dynamic(struct mp_vtraffic *t, const struct mp_vdraw *d);

/* Padded dispatch (--dispatch padded[:F], kernels/padded.h): no count exchange; every rank sends
 * every peer max_local slots of cap rows (mp_padded_capacity of the most tokens a rank holds),
 * padding included, and gets as many back; a slot keeps its first cap pairs and the rest are
 * dropped (t->dropped, at the sender); rows counts the kept pairs a rank receives, ffn_rows every
 * slot row of its local experts (nlocal·ep·cap) plus the shared experts' tokens, and every local
 * expert is active. Never pipelined (t->nchunks must be 1). */
void mp_vtraffic_padded(struct mp_vtraffic *t, const struct mp_vdraw *d);

/* Padded dispatch deduplicated (--dispatch padded[:F] --dedup rank|node,
 * core/dispatch_dedup_padded.c): no count exchange; every source sends each of its targets
 * (mp_dedup_padded_layout, nodes packed gpus_per_node ranks to one) a slot of
 * mp_dedup_padded_capacity rows, each with its metadata, node's relays their node's ranks slots of
 * the lossless forward capacity, and the slots come back without it (t->dedup_hops 1 or 2); the
 * pairs kept, dropped and run are mp_dedup_padded_walk's; rows and ffn_rows count the kept pairs
 * a rank runs (plus the shared experts' tokens). */
void mp_vtraffic_dedup_padded(struct mp_vtraffic *t, const struct mp_vdraw *d);

/* The deduplicated dispatch pipelined (--dedup rank|node --overlap N,
 * core/dispatch_dedup_pipelined.c): the unpipelined dedup traffic for the per-rank counts and
 * bytes, then the chunks cut by tokens (each rank's tokens in N shares, mp_dedup_count_chunk):
 * each chunk's rows per hop out and back (t->chunk_hop, chunk_back) and its rows and active
 * experts per rank (the shared experts in chunk 0), and each hop's metadata exchange (t->meta),
 * which the measured layer sends with the counts, before the pipeline. */
void mp_vtraffic_dedup_pipelined(struct mp_vtraffic *t, const struct mp_vdraw *d);

/* Ready `t` for one draw of point `pt` on a tp × ep layout under profile `cl`: its scalars (gate,
 * straggler, dtypes, the dispatched row's scale) and its per-rank arrays, zeroed, cut into
 * pt->overlap chunks when that is above 1. MP_OK or MP_ERR_RUNTIME (out of memory; free with
 * mp_vtraffic_free). Shared by the traffic builders and the traced ranks (core/vexec.c). */
int mp_vtraffic_start(struct mp_vtraffic *t, const struct mp_cluster *cl,
                      const struct mp_model *m, int tp, int ep, const struct mp_point *pt);

/* mp_vexchange_of with the per-rank bytes: the dispatch sends rows_to in rows of
 * dispatch_row_bytes, the combine returns what came in, in rows of row_bytes; each rank's
 * bytes_sent and its dispatch_/combine_ intra/inter into t. */
void mp_vexchange_bytes_of(const double *rows_to, int ep, int tp, int gpn, double row_bytes,
                           double dispatch_row_bytes, struct mp_vexchange *x,
                           struct mp_vtraffic *t);

/* The traffic of the point's routing pool (one draw per warm-up and timed iteration, at most
 * MP_ROUTING_POOL_DRAWS without an expert cache, as measured runs cycle through them,
 * mp_routing_pool_size): *ndraws
 * entries in *out, built by the point's dispatch mode's traffic builder (its model_traffic,
 * core/dispatch.h) or, for a mode without one (and for every point with MOEPERF_MODEL_TRACED=1),
 * by traced ranks running its stages (core/vexec.h), with the profile's node size and
 * element bytes, cut into pt->overlap chunks when that is above 1.
 * Free with mp_vtraffic_free. Returns MP_OK, MP_ERR_USAGE (more memory than the host has, a point
 * with overlap above 1 whose mode has no pipelined form, which the measured layer refuses too,
 * --dedup rank|node with a dispatch that does not carry it out, or --expert-cache beyond what the
 * cache timeline models) or MP_ERR_RUNTIME. */
int mp_vtraffic_build(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                      uint64_t seed, const struct mp_point *pt, struct mp_vtraffic **out,
                      int *ndraws);
void mp_vtraffic_free(struct mp_vtraffic *t, int ndraws);

/* Every rank's phase durations and counts for one draw's traffic under profile `cl`:
 * ranks[tp·ep], rank r = ep_rank·tp + tp_rank. The count-exchange round is the notify phase,
 * when t->count_exchange (0 otherwise), and not part of the dispatch. With t->dedup_hops each
 * hop exchanges its counts (the first hop's round is the notify phase, a later hop's is part of
 * the dispatch, as measured), then its rows (dispatch: launch and the hop's exchange), and the
 * combine is launch and the return exchange per hop. With t->nchunks > 1 the layer is pipelined (mp_model_pipeline_us)
 * and, as a measured pipelined point records it, each rank's dispatch is the communication left
 * exposed and its combine 0; otherwise the phases follow one another. A straggler (straggle_us
 * > 0) spends that much more in its FFN phase (in the first chunk when pipelined), and its TP
 * peers wait for it in the TP reduce. */
void mp_vtraffic_time(const struct mp_cluster *cl, const struct mp_model *m,
                      const struct mp_vtraffic *t, struct mp_rank_iter *ranks);

/* Run one point: traffic, then durations for each of pt->iters iterations (timed iteration i is
 * step warmup + i and routes draw (warmup + i) mod ndraws, as the measured layer's).
 * Fills `res` as mp_layer_run does on rank 0; check_error NAN; with pt->overlap > 1 the point is
 * pipelined and overlap_efficiency is computed against the same draws unpipelined. Gate routing
 * is modelled with uniform draws (there are no activations). Returns MP_OK or MP_ERR_RUNTIME. */
int mp_vlayer_run(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                  uint64_t seed, const struct mp_point *pt, struct mp_point_result *res);

#endif
