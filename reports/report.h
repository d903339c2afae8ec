/* report.h - the data behind moeperf-report: run directories loaded (run.json, layer.csv, a2a.csv,
 * ffn.csv, any subset), their rows grouped into curves, and the findings computed from them as pure
 * functions (batch cap, knee, bubble, the effect of one workload change, model vs measurement). */
#ifndef MP_REPORT_H
#define MP_REPORT_H

#include <stdio.h>

#include "results.h"

struct cJSON;

/* ---- run directories ---- */

/* One run directory. A table that is absent has ncols == 0. */
struct rp_run {
    char *dir;
    struct cJSON *json;      /* run.json, NULL when absent */
    struct cJSON *plan_json; /* plan.json (moeperf-plan --out), NULL when absent */
    struct mp_table layer, a2a, ffn, plan;
    /* layer_rank_samples.csv and layer_ranks.csv when present (ncols 0 otherwise), and the
     * points of the first: rank_pt_first[i], rank_pt_count[i] its rows (a point's rows are
     * contiguous), the first rank_key cells its key */
    struct mp_table rank_samples, ranks;
    long *rank_pt_first, *rank_pt_count;
    int n_rank_pts, rank_key;
};

/* Load `dir`: run.json and plan.json when present (unparseable: MP_ERR_USAGE), then each of
 * layer.csv, a2a.csv,
 * ffn.csv and plan.csv (moeperf-plan --out) that exists, checking that it has the columns the
 * report reads. A directory with none of the four CSV files, a missing directory or a missing column is MP_ERR_USAGE with one
 * line naming the file and, where it applies, the column. */
int rp_run_load(const char *dir, struct rp_run *run);
void rp_run_free(struct rp_run *run);

/* ---- curves ---- */

/* The key columns that identify a layer or FFN workload apart from its batch (docs/CSV.md), plus
 * `overlap`, `dispatch`, `dedup`, `dispatch_dtype`, `weight_dtype`, `expert_cache` and
 * `flush_cache`, `context`, `micro_batches`, `phase` and `chunk` where a file has them; a file
 * without `group_limit` or `expert_cache` (written before those flags) counts as `off`, one
 * without `dispatch_dtype` or `weight_dtype` as `bf16`, one without `context` as 4096, without
 * `micro_batches` as 1, without `phase` as `decode` and without `chunk` as 0. */
enum {
    RP_K_SOURCE, RP_K_BACKEND, RP_K_COMM, RP_K_MODEL, RP_K_HIDDEN, RP_K_FFN, RP_K_EXPERTS,
    RP_K_TOPK, RP_K_SHARED, RP_K_LAYOUT, RP_K_ROUTING, RP_K_GROUP_LIMIT, RP_K_PLACEMENT, RP_K_SEQ,
    RP_K_SEED, RP_K_OVERLAP, RP_K_DISPATCH, RP_K_DEDUP, RP_K_DTYPE, RP_K_WDTYPE, RP_K_CACHE,
    RP_K_FLUSH, RP_K_CONTEXT, RP_K_MICRO, RP_K_PHASE, RP_K_CHUNK,
    RP_NKEY
};
extern const char *const rp_key_names[RP_NKEY];

/* One point of a layer curve: medians unless named p99; NAN where the cell is empty. */
struct rp_point {
    double batch;
    double layer_us, layer_p99_us, ffn_us, ffn_p99_us, comm_us, comm_p99_us;
    double layer_ci_lo_us, layer_ci_hi_us; /* 95 % CI of the layer median; NAN when absent */
    double ratio, bubble, imbalance, hit;
    double drop_rate; /* share of token-expert pairs a padded dispatch dropped; NAN when absent */
    double spread;    /* (p90 − p10) / p50 of layer_us over iterations (layer.csv's spread:
                         docs/METRICS.md, "Stability"); NAN when absent */
    double bytes_internode; /* bytes_internode (one layer, all ranks); NAN when absent */
    /* a model point's whole decode step (docs/planning.md, "What a step includes"): step_us and
     * its p99, its parts attn … overlap (medians) and tok_s_gpu; NAN for measured points */
    double step_us, step_p99_us, tok_s_gpu;
    double part_us[7]; /* attn, dense, head, misc, host, moe, overlap: RP_PART_* */
};
enum { RP_PART_ATTN, RP_PART_DENSE, RP_PART_HEAD, RP_PART_MISC, RP_PART_HOST, RP_PART_MOE,
       RP_PART_OVERLAP, RP_NPART };
extern const char *const rp_part_names[RP_NPART]; /* the layer.csv columns, "attn_us" … */

/* One curve: the rows of one run directory that share every key cell but batch, sorted by batch. */
struct rp_series {
    const struct rp_run *run;
    char *key[RP_NKEY]; /* cells as written; "" where the file has no such column */
    char *label;        /* the key cells that differ between the series (docs/plots.md, "Curve
                           labels"), e.g. "hot:4:15 replicate-hot:4 (measured)" */
    int n;
    struct rp_point *pt;
};

/* The curves of the layer.csv rows of `runs[0..nruns)`, in order of first appearance.
 * Returns MP_OK or MP_ERR_RUNTIME (out of memory). */
int rp_layer_series(const struct rp_run *runs, int nruns, struct rp_series **out, int *nout);
void rp_series_free(struct rp_series *s, int n);

/* ---- findings (pure functions of the numbers) ---- */

/* Batch cap: the largest batch before comm_comp_ratio exceeds 1. Points are in increasing batch
 * order. A leading stretch of network-bound points (small batches, where fixed per-message
 * latency dominates both phases) is skipped; from the first compute-bound point (ratio <= 1) on,
 * the cap is the last batch before the first point whose ratio exceeds 1. NAN ratios are
 * ignored. */
enum rp_cap_kind {
    RP_CAP_FOUND,       /* cap, next, next_ratio and cross are set */
    RP_CAP_NOT_REACHED, /* ratio <= 1 up to the largest batch: cap = that batch (a lower bound) */
    RP_CAP_NETWORK,     /* ratio > 1 at every batch: no compute-bound batch */
    RP_CAP_NO_DATA,     /* no point with a ratio */
};
struct rp_cap {
    enum rp_cap_kind kind;
    double cap, cap_ratio;   /* the cap and its ratio */
    double next, next_ratio; /* the first batch above 1 after the cap (FOUND) */
    double cross;            /* batch where the ratio crosses 1, interpolated linearly in
                                (log2 batch, ratio) between cap and next (FOUND) */
    int leading;             /* network-bound points skipped at the start */
    double start;            /* the first compute-bound batch (NAN for NETWORK, NO_DATA) */
    double max_compute;      /* the largest ratio from `start` up to the cap */
    double max_ratio, max_ratio_at; /* largest ratio of all points and its batch */
};
struct rp_cap rp_batch_cap(const double *batch, const double *ratio, int n);

/* Knee: the first batch from which latency grows faster than batch. For each point i the growth
 * exponent is the log-log slope log(L_j / L_i) / log(b_j / b_i) to the first point j with
 * b_j >= 2·b_i (the last point if none), so a fine sweep does not turn noise into a knee. The knee
 * is the first i whose slope exceeds `threshold` (1 means exactly proportional). Points with a
 * non-positive or NAN batch or latency are ignored. */
struct rp_knee {
    int found;
    double batch, to, slope;          /* the knee: slope from `batch` to `to` */
    double max_slope, max_from, max_to; /* the steepest segment (NAN when fewer than 2 points) */
};
struct rp_knee rp_knee(const double *batch, const double *lat, int n, double threshold);

/* Bubble over a curve: the largest bubble_ratio and its batch, and the value at the largest
 * batch. NAN values are ignored; all fields NAN without data. */
struct rp_bubble {
    double max, max_at, last, last_at;
};
struct rp_bubble rp_bubble_summary(const double *batch, const double *bubble, int n);

/* The effect of one change (alt against base) over the batches both curves have: the geometric
 * mean and the range of alt/base layer latency medians, the same at the largest common batch,
 * and the bubble and load imbalance there. `faster` and `slower` count the batches where the two
 * 95 % confidence intervals of the medians do not overlap (alt's above or below base's); batches
 * without intervals count in neither. n = 0 when they share no batch. */
struct rp_effect {
    int n, faster, slower;
    double geomean, min_ratio, max_ratio;
    double at, ratio_at;                 /* the largest common batch and alt/base there */
    double bubble_base, bubble_alt;      /* at `at` */
    double imbalance_base, imbalance_alt; /* at `at` */
    double spread;                        /* the largest spread of the points compared (NAN: none
                                             known) */
};
struct rp_effect rp_effect(const struct rp_series *base, const struct rp_series *alt);

/* Curves that differ only in key `k` (all other key cells equal; with `ignore_env` set, source,
 * backend, comm, seed and flush_cache may differ too, which pairs a model run with a measured
 * one). Returns 1 when a and b form such a pair. */
int rp_differ_only_in(const struct rp_series *a, const struct rp_series *b, int k, int ignore_env);

/* 1 when `measured` is a measured curve and `model` the model's run of the same workload (they
 * differ only in source and its run environment): the planner's projection beside a measurement. */
int rp_projects(const struct rp_series *measured, const struct rp_series *model);

/* Whether a placement replicates experts (replicate-hot:R, eplb:SLOTS). */
int rp_placement_replicates(const char *placement);

/* The pipeline depth an `overlap` cell names: its value when above 1, else 1 (no pipeline, or a
 * file without the column). */
int rp_overlap_depth(const char *cell);

/* The overlap settings measured against s[b], a curve without overlap: the curves that differ from
 * it only in `overlap`, as indices in `order` with their effects against s[b] in `eff` (room for
 * `max` each), by geometric-mean latency ratio, most gain first. Returns how many. */
int rp_overlap_ranking(const struct rp_series *s, int ns, int b, int *order, struct rp_effect *eff,
                       int max);

/* One remedy against a base curve at one batch. */
struct rp_remedy {
    int series;             /* the curve */
    int placement, overlap; /* 1 where it changes the placement (to a replicating one), the overlap */
    double ratio;           /* its layer_us median / the base's */
    int verdict;            /* −1 faster, +1 slower with the 95 % CIs of the medians apart, else 0 */
};

/* The remedies measured against s[b], a curve whose placement does not replicate and without
 * overlap: every curve that differs from it only in placement (to replicate-hot:R or eplb:SLOTS),
 * only in overlap (above 1), or in both. They are compared at one batch, *at: the largest batch of
 * s[b] that the most of them have (those without it are left out), and sorted by ratio, most gain
 * first. Returns how many (at most `max`); *at is NAN when none. */
int rp_remedies(const struct rp_series *s, int ns, int b, struct rp_remedy *out, int max,
                double *at);

/* The deduplication modes of one workload at one batch: s[b], a curve with dedup `pair`, and the
 * curves that differ from it only in `dedup` (rank, node). */
struct rp_dedup_mode {
    int series;                /* the curve */
    double layer_us, bytes_internode, ci_lo, ci_hi; /* its point at the batch (NAN when absent) */
};
struct rp_dedup_cmp {
    double batch;
    int n;                        /* modes with a point at this batch, s[b] ('pair') first */
    struct rp_dedup_mode mode[8];
    int best;                     /* index in mode[] of the lowest layer_us */
    double ratio;                 /* the best mode's layer_us / pair's */
    int verdict; /* −1 faster than pair with the 95 % CIs of the medians apart, 0 within them,
                    2 when either point has no interval (modelled rows) */
};

/* The deduplication comparison of s[b] (dedup `pair`) at its point i against every curve that
 * differs from it only in `dedup` and has a point at the same batch. Returns how many modes
 * (pair included) it compares, 0 when s[b] is not `pair`, has no such point or no other mode. */
int rp_dedup_compare(const struct rp_series *s, int ns, int b, int i, struct rp_dedup_cmp *out);

/* ---- who the others wait for (layer_rank_samples.csv) ---- */

/* A rank whose routed rows are at least this multiple of the mean over ranks is slow because of
 * its routing (its experts' rows), not because of itself. */
#define RP_ROUTING_ROWS 1.25
/* A rank critical in fewer than this share of a point's iterations is not named as its cause. */
#define RP_CRITICAL_SHARE 0.5

/* Who the other ranks waited for at one point (docs/METRICS.md, "Who waits for whom"). In each
 * iteration the critical rank is the one with the longest busy time L_r − w_r (its layer time
 * less its waits in the collectives: the work the others wait for; ties to the lower rank). */
struct rp_critical {
    int iters, nranks;
    int rank;          /* the rank most often critical; −1 without data (no wait_us column) */
    int row;           /* a row of that rank in the table (its host and node) */
    double share;      /* the share of iterations in which it is critical */
    double rows_ratio; /* its routed rows over those iterations / the mean rank's */
    double explains;   /* Σ w_r over the iterations it is critical in, / Σ N · layer_us over all:
                          the share of all ranks' layer time spent waiting for it */
    int routing;       /* rows_ratio ≥ RP_ROUTING_ROWS: its routing makes it slow */
};

/* The critical rank of the point whose rows are t's rows first .. first + count − 1 (columns
 * iter, rank, layer_us, wait_us, rows of layer_rank_samples.csv). */
struct rp_critical rp_point_critical(const struct mp_table *t, long first, long count);

/* The rows of `run`'s layer_rank_samples.csv for curve s's point at `batch`: returns the index of
 * the point (run->rank_pt_first/count), or −1 when the run has no such rows. */
int rp_rank_point_find(const struct rp_run *run, const struct rp_series *s, double batch);

/* The local_experts cell of layer_ranks.csv for rank `rank` of run's rank point `pt`, or "" when
 * the run has no layer_ranks.csv or no such cell. */
const char *rp_rank_experts(const struct rp_run *run, int pt, int rank);

/* ---- the reference table ---- */

/* The "# label: TEXT" comment of a CSV file (a heap string), or NULL when it has none or cannot
 * be read. */
char *rp_csv_label(const char *path);
/* The text of the first "# KEY: TEXT" comment of a CSV file (a heap string), or NULL. */
char *rp_csv_comment(const char *path, const char *key);

/* ---- inline SVG ---- */

/* Write `svg` (a whole SVG document) to `out` as an element to inline in HTML: the XML prolog and
 * DOCTYPE before "<svg" are dropped, and every id (id="x"), and every reference to one (href="#x",
 * url(#x)), gets `prefix`, so several figures in one page keep their ids apart. Returns MP_OK, or
 * MP_ERR_RUNTIME when there is no <svg element. */
int rp_svg_inline(const char *svg, const char *prefix, FILE *out);

#endif
