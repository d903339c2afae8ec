/* capacity_plan.h - the capacity planner: every candidate (layout tp×ep, batch, hot-expert replicas, eplb
 * slots, pipeline depth, dedup mode) run through the cluster model, the DP replicas each needs for a target throughput, the latency SLO
 * check, and the findings a capacity plan rests on (batch cap, cheapest layout, replicas vs batch). */
#ifndef MP_CAPACITY_PLAN_H
#define MP_CAPACITY_PLAN_H

#include "cluster.h"
#include "expert_cache.h"
#include "gpumem.h"
#include "model.h"
#include "routing.h"
#include "step.h"

/* The most replicas a candidate is counted with: a target throughput that needs more is beyond any
 * --max-gpus (an int), and the count stays far inside 64 bits when multiplied by TP × EP. */
#define MP_PLAN_MAX_REPLICAS 1000000000000L

struct mp_plan_req {
    struct mp_model model;
    struct mp_cluster cluster;
    const struct mp_routing *routing;
    const long *batches;
    int nbatch, seq;
    const int *tps, *eps, *reps; /* candidate TP sizes, EP sizes, replicate-hot counts */
    int ntp, nep, nrep;
    const int *eplbs;            /* candidate eplb:SLOTS slot counts (may be none) */
    int neplb;
    const int *overlaps;         /* candidate pipeline depths (--overlap; none: 1 only) */
    int noverlap;
    const int *dedups;           /* candidate dedup modes, enum mp_dedup (none: pair only) */
    int ndedup;
    const int *wdtypes, *ddtypes; /* candidate expert weight and dispatch types, enum mp_dtype
                                   * (none: bf16 only) */
    int nwdtype, nddtype;
    const int *micro_batches; /* candidate micro-batch counts, 1 or 2 (none: 1 only) */
    int nmicro;
    double slo_token_ms;  /* p99 per output token, the whole decode step, or 0 */
    double slo_layer_us;  /* p99 per MoE layer, or 0 */
    double throughput;    /* target output tokens/s over all replicas */
    double gpu_hour_price; /* USD per GPU-hour for the cost per million tokens, or 0 */
    int max_gpus, iters;
    unsigned long long seed;
    /* memory per GPU (docs/planning.md, "Memory per GPU") */
    long context;            /* tokens of KV cache per sequence: memory and the step's attention
                                (prefill: the prompt's length) */
    int phase;               /* enum mp_phase of the step (docs/planning.md, "A prefill step") */
    long chunk;              /* prefill: prompts in pieces of at most `chunk` tokens; 0: whole */
    double weight_bytes;     /* bytes per weight element (MP_BF16_BYTES) */
    double kv_bytes;         /* bytes per KV-cache element (MP_BF16_BYTES) */
    double mem_reserve;      /* share of gpu_mem_gb kept outside weights and KV cache */
    enum mp_nonexpert_split nonexpert;
    /* --expert-cache fit[:POLICY]: a candidate that does not fit keeps the largest expert cache
     * that does (docs/planning.md, "Offloaded experts"); 0: off */
    int offload;
    enum mp_cache_policy offload_policy;
};

struct mp_plan_cand {
    int tp, ep, replicate; /* replicate-hot:R (0: contiguous, or eplb when eplb > 0) */
    int eplb;              /* eplb:SLOTS, 0 when not */
    int overlap;           /* chunks pipelined (1: none) */
    int dedup;             /* enum mp_dedup: what a dispatched row stands for */
    int weight_dtype;      /* enum mp_dtype of the experts' weights (--weight-dtype) */
    int dispatch_dtype;    /* enum mp_dtype of the dispatched rows (--dispatch-dtype) */
    int micro_batches;     /* 1, or 2: two-batch overlap (the layer model runs one half) */
    long batch;
    double layer_us, layer_p99_us, ffn_us, comm_us, ratio, bubble, imbalance, hit;
    double token_ms, token_p99_ms; /* the whole decode step (core/cluster_model/step.h): median and p99 */
    double part_ms[MP_STEP_NPARTS]; /* its parts' medians, ms (enum MP_STEP_TOTAL...) */
    double moe_ffn_ms, moe_comm_ms; /* of the MoE layers' time, the expert compute (route and FFN
                                       of every layer, micro-batch) and the exchanges less what two
                                       micro-batches hide */
    double replica_tps;            /* output tokens/s of one replica: batch · seq / step */
    double tok_s_gpu;              /* replica_tps / (tp · ep) */
    double usd_per_mtok;           /* with a GPU-hour price: USD per million output tokens at the
                                      replicas' capacity; NaN without */
    long dp, gpus; /* replicas for the target throughput, and their GPUs (64 bits: a target far
                    * beyond the cluster multiplies them past an int; MP_PLAN_MAX_REPLICAS) */
    int slo_ok;                    /* p99 within the SLO (GPUs and memory aside) */
    int meets;                     /* p99 within the SLO, gpus ≤ max_gpus and fits */
    struct mp_gpumem mem;          /* bytes per GPU on the layout's fullest GPU */
    int fits;                      /* mem.total within the usable memory (1 when not known) */
    const char *over;              /* mp_gpumem_over: "weights", "kv" or "none" */
    int cache_slots;               /* with offload: the experts per layer each EP rank keeps
                                      resident, the rest in host memory; 0: all resident */
    double cache_hit_rate;         /* its median hit rate (NaN without a cache) */
};

/* Whether any candidate can be formed: some listed layout passes the rules mp_plan_evaluate
 * applies, with some listed placement room to place. MP_OK, or MP_ERR_USAGE after one line that
 * names, for the first refused TP and EP sizes, the flag and why (a TP size that does not divide
 * the FFN width or exceeds a node's GPUs, an EP size above the experts, every tp·ep above
 * --max-gpus, no placement with room). */
int mp_plan_check_layouts(const struct mp_plan_req *req);

/* Evaluate every candidate (layouts with tp | D, tp ≤ GPUs per node, ep ≤ experts, tp·ep ≤
 * max_gpus; dedup rank and node only without overlap, as the model times them), each with its
 * memory per GPU; one that does not fit never meets. *out is a heap array of *n candidates in
 * enumeration order. The placements are evaluated on threads (one per CPU; MOEPERF_PLAN_THREADS
 * caps them), each into its own candidates, and their messages printed in enumeration order, so
 * the result and the output are a serial run's. */
int mp_plan_evaluate(const struct mp_plan_req *req, struct mp_plan_cand **out, int *n);

/* A candidate's replicas (enough for req->throughput at its replica_tps; 1 without a target), its
 * GPUs, whether it is within the SLO, and whether it meets the request (SLO, max_gpus, memory):
 * what mp_plan_evaluate sets after timing it, so a changed target re-plans without the model. */
void mp_plan_apply_targets(const struct mp_plan_req *req, struct mp_plan_cand *c);

/* Candidate c as if the cluster took f times the model's time (f > 1: slower than modelled):
 * every latency × f, its replica's tokens/s ÷ f, then mp_plan_apply_targets for q. */
void mp_plan_scale_times(const struct mp_plan_req *q, struct mp_plan_cand *c, double f);

/* The placement of a candidate as --placement writes it ("contiguous", "replicate-hot:4",
 * "eplb:6") into buf. */
const char *mp_plan_placement(const struct mp_plan_cand *c, char *buf, unsigned long len);

/* The remedies a candidate applies, as a label: its placement when not contiguous, "overlap N"
 * when pipelined, "dedup rank|node" when not pair, "fp8 weights" and "fp8 dispatch" when so,
 * "two micro-batches" when overlapped, joined by " + ", or "contiguous" when none. */
const char *mp_plan_remedy(const struct mp_plan_cand *c, char *buf, unsigned long len);

/* 1 when two candidates have the same layout, placement, overlap, dedup, dtypes and micro-batches
 * (batch may differ). */
int mp_plan_same_setup(const struct mp_plan_cand *a, const struct mp_plan_cand *b);

/* The remedies at the layout and batch of `at`: *base receives the index of the candidate there
 * with contiguous placement, no overlap, dedup pair and bf16 (-1 when the sweep has none), and `order` (room for
 * `max`) the indices of every other candidate there, by layer time saved against it, most first.
 * Returns how many are in `order`. */
int mp_plan_remedies(const struct mp_plan_cand *c, int n, const struct mp_plan_cand *at,
                     int *base, int *order, int max);

/* The dedup modes at the layout, batch, placement, overlap and dtypes of `at`: the indices of the
 * candidates there that differ from it at most in dedup (itself included) in `order` (room for
 * `max`), fastest first, ties in sweep order. Returns how many. */
int mp_plan_dedup_modes(const struct mp_plan_cand *c, int n, const struct mp_plan_cand *at,
                        int *order, int max);

/* Largest batch whose comm_comp_ratio is ≤ 1 for the layout, placement and overlap of `like`, or
 * -1 if every batch is network-bound. */
long mp_plan_batch_cap(const struct mp_plan_cand *c, int n, const struct mp_plan_cand *like);

/* Index of the cheapest candidate meeting the SLO: fewest GPUs, then lowest p99 token time, then
 * fewest replicas; -1 if none meets it. */
int mp_plan_best(const struct mp_plan_cand *c, int n);

/* The candidates that would meet the SLO within max_gpus but do not fit in memory and need fewer
 * GPUs than `best` (all of them when best < 0): their indices in `order` (room for `max`), fewest
 * GPUs first, then lowest p99 token time. Returns how many. */
int mp_plan_dropped(const struct mp_plan_cand *c, int n, int best, int max_gpus, int *order,
                    int max);

/* Replicas against batch for the best candidate's layout: the candidate with the same layout and
 * placement at `num`/`den` times its batch (2/1: twice, 1/2: half), or -1 when the sweep has none. */
int mp_plan_scaled_batch(const struct mp_plan_cand *c, int n, int best, int num, int den);

#endif
