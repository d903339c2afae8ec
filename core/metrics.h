/* metrics.h - the per-iteration layer metrics of docs/METRICS.md computed from every rank's phase
 * durations and counts, and their summary over iterations. */
#ifndef MP_METRICS_H
#define MP_METRICS_H

#include "stats.h"

/* What one rank records in one iteration (all doubles so a rank's records gather as one array). */
struct mp_rank_iter {
    double route, dispatch, ffn, tp_reduce, combine; /* µs: q_r, d_r, f_r, t_r, c_r */
    double tokens;       /* tokens this rank holds */
    double rows;         /* routed rows this rank's experts computed (token-expert pairs received) */
    double ffn_rows;     /* rows + shared-expert rows */
    double pairs, local_pairs; /* this rank's token-expert pairs, and those served on this rank */
    double bytes_sent;   /* dispatch + combine bytes this rank sent to other ranks */
    double bytes_internode; /* of those, bytes to ranks on other nodes */
    double dropped;      /* of `pairs`, those a padded dispatch dropped (over capacity) */
    double start_skew;   /* µs this rank waited at the iteration's start for the last rank to arrive
                          * (its arrival at the start barrier to the end of the alignment) */
};
#define MP_RANK_ITER_FIELDS (sizeof(struct mp_rank_iter) / sizeof(double))

/* The metrics of one iteration across the N ranks of a layout. */
struct mp_iter_metrics {
    double layer_us;        /* max_r L_r, L_r = q_r + d_r + f_r + t_r + c_r */
    double ffn_us;          /* max_r f_r */
    double ffn_mean_us;     /* mean_r f_r */
    double comm_us;         /* layer_us − ffn_us − max_r q_r */
    double route_us, dispatch_us, tp_reduce_us, combine_us; /* max over ranks of each phase */
    double comm_comp_ratio; /* comm_us / ffn_us */
    double bubble_ratio;    /* Σ_r (ffn_us − f_r) / (N · layer_us) */
    double load_imbalance;  /* max_r rows_r / mean_r rows_r */
    double local_hit_rate;  /* Σ local_pairs / Σ pairs */
    double bytes_rank_max;  /* max_r bytes_sent */
    double bytes_internode; /* Σ_r bytes_internode */
    double drop_rate;       /* Σ_r dropped / Σ_r pairs (0 unless the dispatch is padded) */
};
#define MP_ITER_METRICS (sizeof(struct mp_iter_metrics) / sizeof(double))

/* Column names of struct mp_iter_metrics in field order. */
extern const char *const mp_iter_metric_names[MP_ITER_METRICS];

/* Compute one iteration's metrics from `n` ranks' records. */
void mp_metrics_iter(const struct mp_rank_iter *r, int n, struct mp_iter_metrics *m);

/* IMB-NBC's overlap efficiency of a pipelined point (Intel MPI Benchmarks user guide, IMB-NBC):
 * (t_comm + t_comp − t_ovrl) / min(t_comm, t_comp), with t_comm and t_comp the medians of comm_us
 * and ffn_us over the `n` iterations of `plain` (the point unpipelined) and t_ovrl the median of
 * layer_us − route_us over those of `ovl` (pipelined). 1 is a perfect overlap, 0 none; NAN when
 * min(t_comm, t_comp) is not positive. */
double mp_overlap_efficiency(const struct mp_iter_metrics *plain,
                             const struct mp_iter_metrics *ovl, int n);

#endif
