/* layer_internal.h - the state of one layout's layer and the steps its files share (buffers,
 * weights, routing pool, --check, the dispatch modes); not for use outside core/layer*.c,
 * core/dispatch*.c and core/layer/routing_pool.c. */
#ifndef MP_LAYER_INTERNAL_H
#define MP_LAYER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "compute.h"
#include "layer.h"
#include "dispatch_plan.h"
#include "dispatch_plan_dedup.h"
#include "routing.h"
#include "weight_cache.h"

/* The compute backend's timer marks of one iteration (kernels/compute.h counts MP_PHASE_MARKS of
 * them): the phases' ends, then this rank's arrival at the start barrier, the end of the count
 * exchange and the bounds of --dedup node's hops; the pipelined layer's per-chunk marks follow. */
enum mp_layer_mark {
    MARK_START, MARK_ROUTE, MARK_DISPATCH, MARK_FFN, MARK_TP, MARK_COMBINE,
    MARK_ALIGN,  /* this rank's arrival at the start barrier */
    MARK_NOTIFY, /* the end of the count exchange (notify phase, from ROUTE; dynamic dispatch) */
    /* --dedup node: the dispatch's inter-node hop (its rows and metadata all-to-all) from
     * HOP0_BEGIN to HOP0_END, its intra-node forward (count exchange, permute, all-to-alls) from
     * HOP0_END to HOP1_END; the combine's return of the forwards to their relays (all-to-all and
     * the relay's sum) from BACK1_BEGIN to BACK1_END, its inter-node return from BACK1_END to
     * BACK0_END */
    MARK_HOP0_BEGIN, MARK_HOP0_END, MARK_HOP1_END, MARK_BACK1_BEGIN, MARK_BACK1_END, MARK_BACK0_END,
    MARK_CHUNKS
};
_Static_assert(MARK_CHUNKS == MP_PHASE_MARKS, "kernels/compute.h's MP_PHASE_MARKS counts the marks");

/* The pipelined layer's marks of chunk k (MP_CHUNK_MARKS per chunk): FFN start, FFN end, TP
 * reduce start (after the wait for the exchanges in flight), TP reduce end. */
enum mp_chunk_mark { CHUNK_FFN_BEGIN, CHUNK_FFN_END, CHUNK_TP_BEGIN, CHUNK_TP_END, CHUNK_MARKS };
_Static_assert(CHUNK_MARKS == MP_CHUNK_MARKS, "kernels/compute.h's MP_CHUNK_MARKS counts them");
#define MARK_CHUNK(k, i) (MARK_CHUNKS + CHUNK_MARKS * (k) + (i))

struct mp_layer {
    const struct mp_compute_ops *ops;
    struct mp_compute *dev;
    struct mp_comm *comm;
    struct mp_model m;
    uint64_t seed;
    int tp, ep, Dl, S;
    long max_tokens, max_tok_rank;
    long max_rows; /* routed rows the buffers below hold: what this rank can receive (rows_bound) */
    long long max_memory;
    int max_overlap; /* the most chunks a point of this layout pipelines */
    size_t row_bytes;
    /* the point's --dispatch-dtype (enum mp_dtype) and the bytes of one dispatched row on the
     * wire in it (row_bytes for bf16, mp_fp8_row_bytes(H) for fp8), set by mp_layer_run */
    int dispatch_dtype;
    size_t dispatch_row_bytes;
    /* the rows the records count on the wire: hidden size and element bytes of the rows this layer
     * stands for (its own, or the real model's on the model's traced ranks,
     * mp_layer_count_rows_as), and a combined and a dispatched row's bytes in them for the point */
    int count_hidden;
    double count_elem_bytes, count_row_bytes, count_dispatch_row_bytes;
    double count_expert_bytes; /* an expert's weights a cache fetch moves; 0: the cache's own */
    int *wire_sdispl, *wire_rdispl; /* [ep] an fp8 exchange's displacements from its first row */

    /* device buffers */
    void *x;        /* [max_tok_rank × H] this rank's tokens */
    void *sendbuf;  /* [max_tok_rank·K × H] dispatch out / combine in */
    /* the routed rows: a pipelined layer's chunk k uses the rows after the earlier chunks' (its
     * slice is as large as its received counts) */
    void *recvbuf;  /* [max_rows × H] dispatch in (source-major) / combine out */
    void *expbuf;   /* [max_rows × H] dispatch in, expert-major */
    void *outbuf;   /* [(max_rows + S·max_tok_rank) × H] FFN out: routed rows, then shared rows */
    void *work;     /* [max(max_rows, max_tok_rank) × 2·Dl] */
    void *y;        /* [max_tok_rank × H] layer output */
    void *wg;       /* [H × E] router weights (gate routing), uploaded on first use */
    float *wg_host;

    /* local expert weights, cached while the set of local experts stays the same */
    int nlocal, cap_local;
    int *local_ids;
    void **wgu, **wd;       /* [nlocal + S] */
    int weight_dtype;       /* enum mp_dtype the weights above are stored in */
    int blocked_weights;    /* they were generated blocked (struct mp_point's blocked_weights) */

    /* --expert-cache (docs/METRICS.md, "Expert cache"; layer_cache.c over core/layer/weight_cache.c):
     * the local experts' host pool and device slots, with the current iteration's counts */
    struct mp_weight_cache wcache;

    struct mp_plan plan;
    float *host_tok;        /* [max_tok_rank × H] host scratch for generated activations */

    /* the dispatch plan is built by the compute backend (plan_setup/plan_build): the routing goes
     * from the gate or the pool to the backend, which sorts the pairs where they are; the host
     * sees only the pairs per cell */
    const int32_t *dplan_totals; /* [chunks·ep·max_local of the plan in use] */
    int32_t *route_off, *route_cell; /* this rank's route table (mp_route_table) */
    /* --graph with the backend plan: the draw's routing inputs in page-locked memory, read by the
     * replay (pooled ids and weights, or the gate's noise) */
    int32_t *pin_ids;
    float *pin_rw, *pin_noise;
    size_t pin_ids_n, pin_noise_n;

    /* the pipelined mode: one plan per chunk; chunk c uses its own slice of the row buffers */
    int nchunk_plans;
    struct mp_plan *chunk_plans;
    int *chunk_cnt_send, *chunk_cnt_recv; /* [ep][chunks][max_local]: one count exchange for all */

    /* the padded dispatch: fixed slots, its own buffers (grown when a point needs more rows) */
    struct mp_padded pad;
    long pad_rows;              /* slot rows the buffers below hold */
    void *pad_send;             /* [pad_rows × H] dispatch out / combine in */
    void *pad_recv;             /* [pad_rows × H] dispatch in (source-major) / combine out */
    void *pad_exp;              /* [pad_rows × H] expert-major */
    void *pad_out;              /* [(pad_rows + S·max_tok_rank) × H] FFN out: slot rows, then shared */
    void *pad_work;             /* [max(pad_rows, max_tok_rank) × 2·Dl] */
    int *pad_cnt_recv;          /* [ep·max_local] valid rows per received slot (metrics) */
    int captured; /* --graph: the padded layer captured for the current point */

    /* the deduplicated dispatch (--dedup rank|node): its host plan, sized at the point's setup;
     * node mode's first-hop rows with the forwards received after them, and the forwards sent */
    struct mp_dedup_plan dedup;
    void *dedup_recv, *dedup_fwd;
    long dedup_recv_rows, dedup_fwd_rows;
    /* node's intra-node phase: each rank of the node's direct rows then its forwards, one buffer
     * out and back (the dynamic form), and the row moves that fill and empty it [2·ep] */
    void *dedup_intra;
    long dedup_intra_rows;
    struct mp_chunk *dedup_moves;
    /* on a device backend, the metadata's device copies the exchanges move (rows of K choices):
     * sent on the first hop, forwarded (node), received */
    void *dedup_meta_send, *dedup_meta_fwd, *dedup_meta_recv;
    long dedup_meta_send_rows, dedup_meta_fwd_rows, dedup_meta_recv_rows;

    /* --dispatch padded with --dedup rank|node: fixed slots (mp_dedup_padded_layout) of the
     * first hop (send1/recv1) and node's forwards (send2/recv2), their rows in the backend's
     * memory (send: the first hop's out; recv: its rows in, then the forwards in; fwd: the
     * forwards out), their tokens (or received rows), weights and metadata on the host
     * (core/layer/dispatch_dedup_padded.c) */
    struct {
        long cap1, cap2, nsend1, nrecv1, nsend2, nrecv2; /* rows: Σ of each per-peer array */
        int node;
        long send_cap, recv_cap, fwd_cap;   /* rows the buffers below hold */
        void *send, *recv, *fwd;            /* [× H] */
        int32_t *tok, *fsrc;                /* [nsend1], [nsend2] */
        float *w, *fw;                      /* [nsend1], [nsend2] */
        struct mp_dedup_meta *meta, *fmeta; /* [nsend1·K], [nsend2·K] */
        int *send1, *sdispl1, *recv1, *rdispl1, *send2, *sdispl2, *recv2; /* [ep] */
        /* node's phases: inter-node, the relay slots (xsend: send1 to other nodes; xrecv/xrdispl:
         * received into recv's first nrecvx rows); intra-node, each rank q of the node's direct
         * slot (dsend: send1 on the node) then its forward slot, isend[q] rows from isdispl[q] of
         * L->dedup_intra, received irecv[s] (drecv[s] + recv2[s]) from irdispl[s] after the
         * nrecvx rows; imeta the phase's metadata in that order */
        int *xsend, *xrecv, *xrdispl, *dsend, *drecv, *isend, *isdispl, *irecv, *irdispl;
        long nrecvx, nisend;
        struct mp_dedup_meta *imeta; /* [nisend·K] */
    } dpad;

    /* --dedup rank|node with --overlap N: one host plan per chunk of this rank's tokens, and the
     * count exchange's arrays for every chunk at once (core/layer/dispatch_dedup_pipelined.c) */
    struct mp_dedup_plan *dchunk;
    int ndchunk;
    int *dchunk_cnt_send, *dchunk_cnt_recv; /* [ep·ndchunk] */
};

/* The routing pool of one point: draws for this rank's tokens (ids/w), or gate noise. */
struct mp_routing_pool {
    int n;
    int32_t *ids;  /* [n][ntok·K] */
    float *w;      /* [n][ntok·K] */
    float *noise;  /* [n][ntok·E], gate only */
    int groups, group_pick; /* the point's --group-limit G:M (0, 0: off), for the gate */
};

/* ---- layer_buffers.c: the routed-row buffers and the memory checks -------------------------- */

/* The most token-expert rows a rank holding `nlocal` experts can receive for `tokens` tokens in
 * all: a token's top-K experts are distinct, so it sends a rank at most min(K, nlocal) pairs. */
long mp_layer_rows_bound(long tokens, int K, int nlocal);
/* (Re)allocate the routed-row buffers for `rows` rows (recvbuf, expbuf, outbuf, work); what they
 * held is not kept. */
int mp_layer_alloc_rows(struct mp_layer *L, long rows);
/* Size the routed-row buffers for a point of `total` tokens on which this rank holds `nlocal`
 * experts: grown (never shrunk) to what it can receive, after a collective memory check of the
 * growth. Collective: every rank calls it for every point of a mode that uses them. */
int mp_layer_size_rows(struct mp_layer *L, long total, int nlocal);
/* The received rows fit the routed-row buffers (mp_layer_size_rows bounds them; a count beyond is
 * a broken exchange, refused before it overwrites memory). */
int mp_layer_check_rows(struct mp_layer *L, long nrecv);
/* Refuse, on every rank alike, when `need` bytes exceed some rank's budget: the message names the
 * bytes, the worst rank's free memory and where it is. MP_OK when they fit everywhere. */
int mp_layer_memory_refusal(struct mp_comm *comm, const struct mp_compute_ops *ops,
                            struct mp_compute *dev, long long max_memory, double need,
                            const char *what);
/* A zero-filled backend buffer of n elements (padding rows must hold finite values); NULL when
 * out of memory. */
void *mp_layer_alloc_zero(struct mp_layer *L, size_t n);
/* Free every buffer mp_layer_create allocated (the routed rows, x, sendbuf, y). */
void mp_layer_free_buffers(struct mp_layer *L);

/* ---- layer_weights.c: expert and router weights ----------------------------------------------- */

/* Start the point's expert cache (layer_cache.c): for `spec` with slots, the host pool of this
 * rank's local experts (set up by mp_layer_setup_weights first) and spec->slots device slots
 * (one more for static), static's resident experts loaded; `share` ([nlocal] the routing's
 * expected share of each local expert, NULL: alike) picks them. A spec without slots frees any
 * cache. MP_OK or MP_ERR_RUNTIME. */
int mp_layer_cache_setup(struct mp_layer *L, const struct mp_cache_spec *spec, const double *share);
void mp_layer_cache_free(struct mp_layer *L);

/* The weights local expert `e`'s FFN reads (*wgu, *wd): with a cache, its slot (*slot), the
 * fetch from the host pool queued first on a miss (counted into the iteration's counts); else its
 * own (*slot −1). mp_layer_cache_release(slot) follows the FFN that read it. */
int mp_layer_cache_weights(struct mp_layer *L, int e, void **wgu, void **wd, int *slot);
int mp_layer_cache_release(struct mp_layer *L, int slot);

/* Make this rank's expert weights match the placement, generated `blocked` or not
 * (mp_weights_expert) and stored in `weight_dtype` (enum mp_dtype; no work when the set, the
 * generation and the type are unchanged). */
int mp_layer_setup_weights(struct mp_layer *L, const struct mp_placement *pl, int weight_dtype,
                           int blocked);
/* The router weights, generated and uploaded on first use. */
int mp_layer_setup_gate(struct mp_layer *L);
void mp_layer_free_weights(struct mp_layer *L);

/* ---- routing_pool.c: the point's routing draws and the route step ----------------------------- */

int mp_routing_pool_make(struct mp_routing_pool *p, const struct mp_point *pt, uint64_t seed,
                         long batch_tokens, long tok0, long ntok, int K, int E);
void mp_routing_pool_free(struct mp_routing_pool *p);
/* The routing step for draw `d`: the gate on the device (gate routing; its result stays there)
 * or the pooled draw handed over, then the backend's sort by cell. `pinned`: read the draw from
 * the page-locked copies (mp_layer_pin_routing) a captured graph replays from. `wait`: return once
 * the pairs per cell are on the host (the dynamic dispatch's one host sync). */
int mp_layer_route(struct mp_layer *L, struct mp_routing_pool *pool, int d, long ntok, int pinned,
                   int wait);
/* Copy draw `d`'s routing inputs where a captured graph reads them (allocated on first use). */
int mp_layer_pin_routing(struct mp_layer *L, struct mp_routing_pool *pool, int d, long ntok);
/* The page-locked routing inputs of a graph that routes on the device. */
void mp_layer_free_pinned(struct mp_layer *L);
/* Gate routing: the TP ranks of an EP rank each compute the gate on their own device, and must
 * come out alike (a difference changes the counts, and the TP reduce of unequal row counts hangs).
 * Untimed, before a point's iterations: every draw of the pool through the gate, the top-k ids
 * hashed, the hashes compared within each TP group on rank 0, the verdict agreed by every rank.
 * MP_ERR_RUNTIME on every rank, with rank 0 naming the ranks and the draw, when they differ. */
int mp_layer_check_tp_routing(struct mp_layer *L, const struct mp_point *pt,
                              struct mp_routing_pool *pool, long ntok);
/* Test hook: MOEPERF_TEST_GATE_SKEW=RANK negates world rank RANK's first token before the gate
 * reads it, as a TP rank whose gate came out different. */
void mp_layer_gate_skew_hook(struct mp_layer *L, long ntok);

/* ---- layer_steps.c: the steps every dispatch mode's iteration shares ------------------------- */

/* Wait for this rank's queued device work: the comm backend's drain where it has one (it watches
 * its communicators while waiting), else the compute backend's sync. */
int mp_layer_drain(struct mp_layer *L);
/* The ranks' common start of an iteration: the device drained, mark ALIGN (this rank's arrival),
 * the world barrier, the comm backend's device alignment where it has one, mark START. ALIGN to
 * START is the time this rank waited for the last one (its start_skew). */
int mp_layer_start_aligned(struct mp_layer *L);
/* A drained iteration's six phase durations and its start skew, from the marks ALIGN … COMBINE.
 * `notified`: the iteration exchanged counts between marks ROUTE and NOTIFY (notify phase), and
 * its dispatch runs from NOTIFY to DISPATCH; 0: no count exchange (notify 0, dispatch from
 * ROUTE). */
void mp_layer_phase_times(struct mp_layer *L, struct mp_rank_iter *rec, int notified);
/* A drained deduplicated iteration's record (the dedup modes, core/dispatch_dedup*.c) after its
 * phase times: with `node` the hops' times apart (docs/METRICS.md, "Hop times"), then its counts
 * (`ntok` tokens of K pairs each, `nexp` routed rows its experts computed plus the shared experts'
 * rows, `local_pairs` served on this rank) and its byte counters zeroed for the mode to add its
 * own exchanges. */
void mp_layer_dedup_record(struct mp_layer *L, struct mp_rank_iter *rec, int node, long ntok,
                           int K, long nexp, long local_pairs);
/* A drained pipelined iteration's phases over its N chunks, from the marks ALIGN, START, ROUTE,
 * NOTIFY, each chunk's FFN and TP marks (MARK_CHUNK) and COMBINE: route, notify, the chunks' FFN
 * and TP reduce summed, dispatch the rest (the communication left exposed), combine 0, no hop
 * times; and the start skew. */
void mp_layer_pipelined_times(struct mp_layer *L, int N, struct mp_rank_iter *rec);

/* ---- dispatch_dedup.c: what the deduplicated modes share ---------------------------------------- */

/* This rank's routing of draw `d` for a deduplicated mode's host plan: the pool's draw, or the
 * gate's top-K (downloaded to the host plan's scratch, L->dedup.ids/w) for gate routing; *ids and
 * *w point at `ntok`·K entries. MP_OK or the gate's error. */
int mp_dedup_route(struct mp_layer *L, const struct mp_point *pt, struct mp_routing_pool *pool,
                   int d, long ntok, const int32_t **ids, const float **w);
/* On a device backend, the device copies of the metadata that the exchanges move (a device comm
 * backend moves device memory only), for up to `send_rows` rows sent on the first hop,
 * `fwd_rows` forwards (node) and `recv_rows` received (grown, never shrunk, after a collective
 * memory check). A host backend exchanges the plan's own arrays and has none: MP_OK. */
int mp_dedup_meta_buffers(struct mp_layer *L, long send_rows, long fwd_rows, long recv_rows);
/* The metadata exchange of one hop: `n` rows of the host array `send` out, and into the host
 * array `recv` the `nin` rows from row `at` on that this hop fills (rdispl counts from row 0). On
 * a device backend through device copies: the sent rows uploaded into `dsend` (dedup_meta_send or
 * dedup_meta_fwd), received into dedup_meta_recv and downloaded once the exchange is done, for
 * the host's steps after it (mp_dedup_plan_forward, mp_dedup_plan_expand). _on: on group g
 * (per-peer arrays indexed by EP rank, mp_comm_alltoallv_on); without: the whole EP group. */
/* --dedup node's intra-node phase: the buffer L->dedup_intra of at least `rows` rows and the row
 * moves (grown after a memory check every rank calls it for: collective). MP_OK or an error after
 * a message. */
int mp_dedup_intra_buffers(struct mp_layer *L, long rows);
/* Fill L->dedup_intra for the intra-node phase (back 0) or empty it after the phase's return
 * (back 1): rank q's block at in_displ[q] holds drows[q] rows of dbuf from ddispl[q] (the direct
 * rows or slots), then frows[q] rows of fbuf from fdispl[q] (the forwards); two copy_rows. */
int mp_dedup_intra_moves(struct mp_layer *L, void *dbuf, const int *ddispl, const int *drows,
                         void *fbuf, const int *fdispl, const int *frows, const int *in_displ,
                         int back);

/* Where --dedup node's rows lie on this rank for the combine's return (the dynamic form's plan
 * and the padded form's slots alike). */
struct mp_node_rows {
    void *recv;            /* the received rows: the inter-node phase's, then the intra's */
    long relayed;          /* rows of the inter-node phase in recv (the intra-node phase's after) */
    void *send;            /* this rank's own rows (slots), by destination, from send_displ */
    const int *send_displ;
    const int *x_rows;     /* [ep] sent to each relay in the inter-node phase */
    const int *x_rrows, *x_rdispl; /* [ep] received from each in it, and where */
    const int *d_rows;     /* [ep] direct rows to the ranks of this node */
    void *fwd;             /* the forwards of relayed rows, fwd_rows[q] at fwd_displ[q] */
    const int *fwd_rows, *fwd_displ;
    const int32_t *fwd_src; /* [nfwd] the relayed row each forward came from */
    const float *fwd_w;     /* [nfwd] its weight in the sum (1; 0 for padding) */
    long nfwd;
    const int *in_rows, *in_displ, *in_rrows, *in_rdispl; /* [ep] the intra-node phase's */
};

/* --dedup node's combine all-to-all on this rank, between the marks BACK1_BEGIN, BACK1_END and
 * BACK0_END: the intra-node phase's rows back first (the direct ones to their place, the
 * forwards' sums added to the relayed rows they came from), then the inter-node phase's.
 * Collective on the EP group's node groups. */
int mp_dedup_node_combine(struct mp_layer *L, const struct mp_node_rows *n);
int mp_dedup_meta_exchange_on(struct mp_layer *L, enum mp_comm_group g,
                              const struct mp_dedup_meta *send, void *dsend, long n,
                              const int *scount, const int *sdispl, struct mp_dedup_meta *recv,
                              const int *rcount, const int *rdispl, long at, long nin);
int mp_dedup_meta_exchange(struct mp_layer *L, const struct mp_dedup_meta *send, void *dsend,
                           long n, const int *scount, const int *sdispl, struct mp_dedup_meta *recv,
                           const int *rcount, const int *rdispl, long at, long nin);
/* The FFN and TP-reduce phases of an unpipelined iteration: mp_layer_ffn from L->expbuf (the
 * `routed` rows, expert_off into them) to L->outbuf, marked FFN, then with TP > 1 the sum of the
 * D-shards of every routed and shared row over the TP group, marked TP. */
int mp_layer_ffn_reduce(struct mp_layer *L, const struct mp_point *pt, const long *expert_off,
                        long routed, long ntok);
/* The FFN and TP-reduce phases of pipelined chunk k (the pipelined modes, core/dispatch_*pipelined.c):
 * mp_layer_ffn from `in` (`routed` rows, expert_off into them, `nshared` shared experts on `ntok`
 * tokens) to `out` between the chunk's FFN marks, then with TP > 1 the wait for the exchanges in
 * flight (where the comm backend orders its collectives so: that wait is communication, so the
 * reduce's mark follows it) and the sum of the rows' D-shards over the TP group between its TP
 * marks. */
int mp_layer_chunk_ffn_reduce(struct mp_layer *L, const struct mp_point *pt, int k, const void *in,
                              void *out, const long *expert_off, long routed, long ntok,
                              int nshared, void (*progress)(void *), void *progress_arg);
/* The expert FFN phase of one rank: the routed rows of every local expert (`row_off` into `in`),
 * then each shared expert on the rank's own `ntok` tokens, written after the `routed` rows of
 * `out`, then the debug straggler's delay. `progress` (may be NULL) runs between experts. */
int mp_layer_ffn(struct mp_layer *L, const struct mp_point *pt, const void *in, void *out,
                 const long *row_off, void *work, long routed, long ntok, int nshared,
                 void (*progress)(void *), void *progress_arg);
/* Hand the compute backend this rank's route table in a mode's cell layout: `max_local` cells per
 * peer, one block of cells per chunk of `chunks`, slots of `cap` rows (padded; 0 otherwise). */
int mp_layer_plan_setup(struct mp_layer *L, const struct mp_point *pt, long tok0, long ntok,
                        int max_local, int chunks, long cap);
/* The dispatch's exchange of data rows: send[sdispl[p] ...] (scount[p] rows to EP peer p) into
 * recv[rdispl[p] ...] (rcount[p] rows from p), displacements in rows of row_bytes. In the point's
 * --dispatch-dtype: bf16 moves the rows as they are; fp8 packs the sent rows in place first
 * (compute op fp8_pack: e4m3 codes and scales, base/fp8.h), moves dispatch_row_bytes per row, and
 * leaves the received rows packed until mp_layer_dispatch_finish. slot < 0: blocking
 * (alltoallv); else started on request slot `slot` (ialltoallv; then, for fp8, both blocks of
 * rows must start at displacement 0, as the pipelined modes' chunks do). */
int mp_layer_dispatch_start(struct mp_layer *L, void *send, const int *scount, const int *sdispl,
                            void *recv, const int *rcount, const int *rdispl, int slot);
/* The same on group g (--dedup node's phases): per-peer arrays indexed by EP rank, as
 * mp_comm_alltoallv_on takes them; the fp8 packing as above. */
int mp_layer_dispatch_start_on(struct mp_layer *L, enum mp_comm_group g, void *send,
                               const int *scount, const int *sdispl, void *recv,
                               const int *rcount, const int *rdispl, int slot);
/* After the exchange of mp_layer_dispatch_start is complete (blocking, or its slot waited for):
 * for fp8, the received rows unpacked in place into activations (compute op fp8_unpack), as the
 * expert reads them; nothing for bf16. */
int mp_layer_dispatch_finish(struct mp_layer *L, void *recv, const int *rcount, const int *rdispl);
/* The two above, blocking: the dispatch's exchange of data rows, the rows activations again. */
int mp_layer_dispatch_rows(struct mp_layer *L, void *send, const int *scount, const int *sdispl,
                           void *recv, const int *rcount, const int *rdispl);
int mp_layer_dispatch_rows_on(struct mp_layer *L, enum mp_comm_group g, void *send,
                              const int *scount, const int *sdispl, void *recv, const int *rcount,
                              const int *rdispl);
/* Add to rec's byte counts what this rank sends the other EP ranks when it dispatches send[p]
 * rows of dispatch_row_bytes + meta_bytes bytes to each EP peer p and returns it recv[p] rows of
 * row_bytes in the combine (a dispatch row's metadata travels one way only: mp_dedup_bytes): bytes_sent,
 * and per phase those to ranks of its own node (dispatch_intra, combine_intra) and of other nodes
 * (_inter). */
void mp_layer_add_peer_bytes(const struct mp_layer *L, const int *send, const int *recv,
                             double meta_bytes, struct mp_rank_iter *rec);

/* ---- layer_check.c ----------------------------------------------------------------------------- */

/* Gather every rank's output to rank 0 and compare with the reference forward of draw 0: *err the
 * relative error against the reference of the inputs as dispatched (with --dispatch-dtype fp8:
 * each token's row through an fp8 round trip for its routed experts) and the weights as stored
 * (with --weight-dtype fp8: quantized and dequantized), and with either in fp8 *err_unq the one
 * against the reference of the unquantized inputs and weights (NAN when both are bf16). */
int mp_layer_check_output(struct mp_layer *L, const struct mp_point *pt,
                          struct mp_routing_pool *pool, long batch_tokens, long ntok, double *err,
                          double *err_unq);

#endif
