/* metrics.h - the per-iteration layer metrics of docs/METRICS.md computed from every rank's phase
 * durations and counts, and their summary over iterations. */
#ifndef MP_METRICS_H
#define MP_METRICS_H

#include "stats.h"

/* What one rank records in one iteration (all doubles so a rank's records gather as one array). */
struct mp_rank_iter {
    double route, notify, dispatch, ffn, tp_reduce, combine; /* µs: q_r, n_r, d_r, f_r, t_r, c_r
                                                              * (notify: the count exchange) */
    double tokens;       /* tokens this rank holds */
    double rows;         /* routed rows this rank's experts computed (token-expert pairs received) */
    double ffn_rows;     /* rows + shared-expert rows */
    double pairs, local_pairs; /* this rank's token-expert pairs, and those served on this rank */
    double bytes_sent;   /* dispatch + combine bytes this rank sent to other ranks */
    /* of those, per phase and link class: to other ranks of its node (intra) or of other nodes
     * (inter); the four sum to bytes_sent */
    double dispatch_intra, dispatch_inter, combine_intra, combine_inter;
    double dropped;      /* of `pairs`, those a padded dispatch dropped (over capacity) */
    double start_skew;   /* µs this rank waited at the iteration's start for the last rank to arrive
                          * (its arrival at the start barrier to the end of the alignment) */
    /* µs of --dedup node's hops (docs/METRICS.md, "Hop times"): the dispatch's inter-node hop and
     * intra-node forward, the combine's intra-node return and inter-node return; NAN for the
     * other modes */
    double dispatch_inter_us, dispatch_intra_us, combine_inter_us, combine_intra_us;
    /* --expert-cache (docs/METRICS.md, "Expert cache"): this iteration's accesses of resident
     * experts and fetches, the bytes fetched and the µs the fetches took before their FFNs (all 0
     * without a cache) */
    double cache_hits, cache_misses, fetch_bytes, fetch_us;
};
#define MP_RANK_ITER_FIELDS (sizeof(struct mp_rank_iter) / sizeof(double))

/* The metrics of one iteration across the N ranks of a layout. */
struct mp_iter_metrics {
    double layer_us;        /* max_r L_r, L_r = q_r + n_r + d_r + f_r + t_r + c_r */
    double ffn_us;          /* max_r f_r */
    double ffn_mean_us;     /* mean_r f_r */
    double comm_us;         /* layer_us − ffn_us − max_r q_r */
    double route_us, notify_us, dispatch_us, tp_reduce_us, combine_us; /* max over ranks of each
                                                                         * phase */
    double comm_comp_ratio; /* comm_us / ffn_us */
    double bubble_ratio;    /* Σ_r (ffn_us − f_r) / (N · layer_us) */
    double wait_ratio;      /* Σ_r w_r / (N · layer_us), w_r the time rank r waits in the
                             * collectives for the last of its group to arrive (mp_metrics_iter) */
    double load_imbalance;  /* max_r rows_r / mean_r rows_r */
    double local_hit_rate;  /* Σ local_pairs / Σ pairs */
    double bytes_rank_max;  /* max_r bytes_sent */
    double bytes_internode; /* Σ_r (dispatch_inter + combine_inter) */
    double bytes_intranode; /* Σ_r (dispatch_intra + combine_intra) */
    double dispatch_bytes_intranode, dispatch_bytes_internode; /* Σ_r dispatch_intra, _inter */
    double combine_bytes_intranode, combine_bytes_internode;   /* Σ_r combine_intra, _inter */
    double drop_rate;       /* Σ_r dropped / Σ_r pairs (0 unless the dispatch is padded) */
    /* the link classes' achieved bandwidth of the slowest rank s of a phase (longest d_s or c_s):
     * its bytes on the class in that phase / its phase time, GB/s (moeperf-a2a's algbw
     * convention, docs/METRICS.md); NAN when no rank sends on the class in that phase, when the
     * phase time is 0, or for a pipelined point (mp_metrics_pipelined) */
    double dispatch_intranode_GBps, dispatch_internode_GBps;
    double combine_intranode_GBps, combine_internode_GBps;
    /* --dedup node's hop times of the same slowest ranks s (its dispatch_inter_us ... of struct
     * mp_rank_iter): dispatch_inter_us + dispatch_intra_us ≤ dispatch_us, combine_inter_us +
     * combine_intra_us ≤ combine_us; NAN for the other modes */
    double dispatch_inter_us, dispatch_intra_us, combine_inter_us, combine_intra_us;
    /* --expert-cache: Σ_r hits / Σ_r (hits + misses), NAN without an access (no cache); the
     * bytes all ranks fetched; the longest fetch time of a rank */
    double cache_hit_rate, fetch_bytes, fetch_us;
};
#define MP_ITER_METRICS (sizeof(struct mp_iter_metrics) / sizeof(double))

/* Column names of struct mp_iter_metrics in field order. */
extern const char *const mp_iter_metric_names[MP_ITER_METRICS];

/* One rank's layer time L_r: the sum of its six phases. */
double mp_rank_layer_us(const struct mp_rank_iter *r);

/* The collectives a rank can wait in, in phase order: notify, dispatch, TP reduce, combine. */
#define MP_WAIT_PHASES 4

/* Each rank's wait in each collective of one iteration (docs/METRICS.md, "wait_ratio"): w[i * 4 +
 * p] is how long rank i waited in phase p (notify, dispatch, TP reduce, combine) for the last rank
 * of its group to arrive; w holds n * MP_WAIT_PHASES values. Returns 0, or -1 (w all 0) when tp does
 * not divide n. Σ w / (n · layer_us) is the iteration's wait_ratio. */
int mp_metrics_rank_waits(const struct mp_rank_iter *r, int n, int tp, double *w);

/* Compute one iteration's metrics from `n` ranks' records, rank r = ep_rank·tp + tp_rank. */
void mp_metrics_iter(const struct mp_rank_iter *r, int n, int tp, struct mp_iter_metrics *m);

/* A pipelined point's metrics: its dispatch time is the communication left exposed and its
 * combine 0, so no phase time is the time its bytes took; the link bandwidths become NAN. */
void mp_metrics_pipelined(struct mp_iter_metrics *m);

/* IMB-NBC's overlap efficiency of a pipelined point (Intel MPI Benchmarks user guide, IMB-NBC):
 * (t_comm + t_comp − t_ovrl) / min(t_comm, t_comp), with t_comm and t_comp the medians of comm_us
 * and ffn_us over the `n` iterations of `plain` (the point unpipelined) and t_ovrl the median of
 * layer_us − route_us over those of `ovl` (pipelined). 1 is a perfect overlap, 0 none; NAN when
 * min(t_comm, t_comp) is not positive. */
double mp_overlap_efficiency(const struct mp_iter_metrics *plain,
                             const struct mp_iter_metrics *ovl, int n);

#endif
