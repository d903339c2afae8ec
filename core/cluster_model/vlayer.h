/* vlayer.h - the counted path of the layer's model, the planner's and calibration's: the same
 * routing, placement, dispatch plan and metrics as a measurement, each routing draw's traffic
 * counted (independent of the cluster's speeds) and its durations given by closed forms of the
 * rules the pipeline on virtual clocks follows (vrun.h), so calibration can re-time the same
 * traffic under many candidate profiles and the planner weigh thousands of candidates a second.
 * tests/integration/golden.sh holds the two to the same files. */
#ifndef MP_VLAYER_H
#define MP_VLAYER_H

#include <stdint.h>

#include "cluster.h"
#include "layer.h"
#include "vtraffic.h"





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
    /* [ep + ep·max_local] zeroed scratch for whole-number counts (a source rank's rows to each
     * rank, then every (rank, local expert) cell's), left zeroed, or NULL */
    long *counts;
    /* the counted fast path's scratch (struct mp_vfast, vtraffic.h), or NULL: the ep × ep
     * matrices */
    struct mp_vfast *fast;
};

/* A dispatch mode's traffic: fill every per-rank array and exchange of `t` (allocated for the
 * point by mp_vtraffic_build) with what that mode's measured layer moves and computes for the
 * draw `d`, and set t->count_exchange. One function per mode, so a dispatch-mode table can name
 * its model hook. */
typedef void (*mp_vtraffic_fn)(struct mp_vtraffic *t, const struct mp_vdraw *d);

/* Dynamic dispatch (core/layer/layer.c's default mode): counts exchanged first, then exactly the routed
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
 * core/layer/dispatch_dedup_padded.c): no count exchange; every source sends each of its targets
 * (mp_dedup_padded_layout, nodes packed gpus_per_node ranks to one) a slot of
 * mp_dedup_padded_capacity rows, each with its metadata, node's relays their node's ranks slots of
 * the lossless forward capacity, and the slots come back without it (t->dedup_hops 1 or 2); the
 * pairs kept, dropped and run are mp_dedup_padded_walk's; rows and ffn_rows count the kept pairs
 * a rank runs (plus the shared experts' tokens). */
void mp_vtraffic_dedup_padded(struct mp_vtraffic *t, const struct mp_vdraw *d);

/* The deduplicated dispatch pipelined (--dedup rank|node --overlap N,
 * core/layer/dispatch_dedup_pipelined.c): the unpipelined dedup traffic for the per-rank counts and
 * bytes, then the chunks cut by tokens (each rank's tokens in N shares, mp_dedup_count_chunk):
 * each chunk's rows per hop out and back (t->chunk_hop, chunk_back) and its rows and active
 * experts per rank (the shared experts in chunk 0), and each hop's metadata exchange (t->meta),
 * which the measured layer sends with the counts, before the pipeline. */
void mp_vtraffic_dedup_pipelined(struct mp_vtraffic *t, const struct mp_vdraw *d);



/* Refuse, after a message (MP_ERR_USAGE), a point the measured layer refuses (a dispatch without
 * the pipelined or deduplicated form asked for) or the model cannot time (an expert cache beside
 * a dispatch it does not time it for, or without the profile's pcie_bw; more memory than this
 * host has); else MP_OK. */
int mp_vlayer_refuse(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                     const struct mp_point *pt);

/* The traffic of the point's routing pool (one draw per warm-up and timed iteration, at most
 * MP_ROUTING_POOL_DRAWS without an expert cache, as measured runs cycle through them,
 * mp_routing_pool_size): *ndraws
 * entries in *out, built by the point's dispatch mode's traffic builder (its model_traffic,
 * core/layer/dispatch.h) or, for a mode without one (and for every point with MOEPERF_MODEL_TRACED=1),
 * by traced ranks running its stages (core/cluster_model/vexec.h), with the profile's node size and
 * element bytes, cut into pt->overlap chunks when that is above 1. The dynamic forms count on the
 * fast path (struct mp_vfast) where mp_vtraffic_fast_ok holds and MOEPERF_MODEL_MATRIX=1 (a
 * test hook) is not set, else on the ep × ep matrices: the same traffic either way.
 * Free with mp_vtraffic_free. Returns MP_OK, MP_ERR_USAGE (more memory than the host has, a point
 * with overlap above 1 whose mode has no pipelined form, which the measured layer refuses too,
 * --dedup rank|node with a dispatch that does not carry it out, or --expert-cache beyond what the
 * cache timeline models) or MP_ERR_RUNTIME. */
int mp_vtraffic_build(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                      uint64_t seed, const struct mp_point *pt, struct mp_vtraffic **out,
                      int *ndraws);

/* Every rank's phase durations and counts for one draw's traffic under profile `cl`:
 * ranks[tp·ep], rank r = ep_rank·tp + tp_rank. The count-exchange round is the notify phase,
 * when t->count_exchange (0 otherwise), and not part of the dispatch. With t->dedup_hops each
 * hop exchanges its counts (the first hop's round is the notify phase, a later hop's is part of
 * the dispatch, as measured), then its rows (dispatch: launch and the hop's exchange), and the
 * combine is launch and the return exchange per hop. With t->nchunks > 1 the layer is pipelined (mp_cost_pipeline_us)
 * and, as a measured pipelined point records it, each rank's dispatch is the communication left
 * exposed and its combine 0; otherwise the phases follow one another. A straggler (straggle_us
 * > 0) spends that much more in its FFN phase (in the first chunk when pipelined), and its TP
 * peers wait for it in the TP reduce. */
void mp_vtraffic_time(const struct mp_cluster *cl, const struct mp_model *m,
                      const struct mp_vtraffic *t, struct mp_rank_iter *ranks);

/* mp_vlayer_run's timing of traffic t [P] that mp_vtraffic_build built for a point that differs
 * from pt at most in its weight dtype and GEMM form (which the timing takes from pt; t keeps
 * them): res as mp_vlayer_run fills it, its wall and timed µs 0. With `recs` (room for tp·ep
 * records) every iteration is timed in it and res keeps its metrics alone (ranks NULL,
 * rank_period 0, and for a pipelined point no unpipelined reference: overlap_efficiency NAN), so
 * a caller that needs no records (the planner) allocates none and times each draw once.
 * Returns MP_OK or MP_ERR_RUNTIME (out of memory). t stays the caller's. */
int mp_vlayer_time(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                   const struct mp_point *pt, struct mp_vtraffic *t, int P,
                   struct mp_rank_iter *recs, struct mp_point_result *res);

/* Run one point on the counted path (moeperf-layer with MOEPERF_MODEL_COUNTED=1, the tests'
 * reference for the pipeline): traffic, then durations for each of pt->iters iterations (timed
 * iteration i is step warmup + i and routes draw (warmup + i) mod ndraws, as the measured
 * layer's).
 * Fills `res` as mp_layer_run does on rank 0; check_error NAN; with pt->overlap > 1 the point is
 * pipelined and overlap_efficiency is computed against the same draws unpipelined. Gate routing
 * is modelled with uniform draws (there are no activations). Returns MP_OK or MP_ERR_RUNTIME. */
int mp_vlayer_run(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                  uint64_t seed, const struct mp_point *pt, struct mp_point_result *res);

#endif
