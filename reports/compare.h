/* compare.h - two run directories of the same sweep, matched point by point, with a verdict per
 * point and metric from the medians and a Mann–Whitney U test of samples or per-run medians. */
#ifndef MP_COMPARE_H
#define MP_COMPARE_H

#include "compare_facts.h"
#include "mannwhitney.h"

struct cJSON;

/* Fewer values than this (per-iteration samples, or runs when the test ranks per-run medians) on
 * either side make a comparison inconclusive. At 5 vs 5 the smallest exact two-sided p is
 * 2/C(10,5) = 2/252 = 0.0079, just below the default alpha 0.01; at 4 vs 4 it is 2/70 = 0.029, so
 * no regression could ever be shown. */
#define MP_CMP_MIN_SAMPLES 5

enum mp_cmp_verdict {
    MP_CMP_UNCHANGED,
    MP_CMP_REGRESSION,
    MP_CMP_IMPROVEMENT,
    MP_CMP_INCONCLUSIVE,
};

/* "regression", "improvement", "unchanged", "inconclusive". */
const char *mp_cmp_verdict_name(enum mp_cmp_verdict v);

/* The verdict of one point and metric, where `change` = (new median − base median) / base median,
 * `p` the two-sided Mann–Whitney p-value and n_base, n_new the numbers of values (units) the test
 * ranked (lower times are better for every metric compared):
 *   inconclusive  n_base or n_new < MP_CMP_MIN_SAMPLES, or even the most extreme arrangement of the
 *                 samples could not give p < alpha (2/C(n_base + n_new, n_base) ≥ alpha), or the
 *                 change is undefined (NAN: base median ≤ 0) or p is NAN;
 *   regression    change ≥ +threshold and p < alpha;
 *   improvement   change ≤ −threshold and p < alpha;
 *   unchanged     otherwise.
 * `threshold` is a fraction (0.05 = 5 %). *reason, when not NULL, receives a short static text for
 * an inconclusive verdict (NULL otherwise). */
enum mp_cmp_verdict mp_cmp_verdict(long n_base, long n_new, double change, double p,
                                   double threshold, double alpha, const char **reason);

/* A metric compared: a samples column. Primary metrics decide the exit status by default. */
struct mp_cmp_metric {
    const char *name;
    int primary;
};

/* One point × metric. The medians are over every per-iteration sample of the side (all runs
 * pooled); the test ranks the comparison's unit (mp_cmp.unit_run). */
struct mp_cmp_row {
    long point;  /* index into mp_cmp.keys */
    int metric;  /* index into mp_cmp.metrics */
    long n_base, n_new;         /* per-iteration samples */
    long runs_base, runs_new;   /* runs with samples of this point */
    long units_base, units_new; /* values the test ranked: samples or runs */
    double base_med, base_lo, base_hi; /* nearest-rank median and its 95 % CI (METRICS.md) */
    double new_med, new_lo, new_hi;
    double change; /* (new_med − base_med) / base_med; NAN when base_med ≤ 0 or a side is empty */
    double noise_base, noise_new; /* mp_spread of each side's ranked values (NAN: under 2) */
    struct mp_mw mw;
    enum mp_cmp_verdict verdict;
    const char *reason; /* why inconclusive, or "within noise" for an unchanged verdict whose
                         * test alone would have called a change; else NULL */
};

/* The verdict after the noise rule: a regression or improvement whose medians stand apart (the
 * larger over the smaller, less 1: 1 + change or 1 / (1 + change), so that swapping the sides
 * swaps the verdict and nothing else) by no more than the larger of the two sides' spreads
 * (noise_base, noise_new; NAN counts as 0) is unchanged, with *reason "within noise"
 * (docs/regression.md, "Noise"). Other verdicts pass as they are. */
enum mp_cmp_verdict mp_cmp_noise_rule(enum mp_cmp_verdict v, double change, double noise_base,
                                      double noise_new, const char **reason);

/* The independent unit the Mann–Whitney test ranks. Iterations of one run share the machine's
 * state during that run (frequency, neighbours, placement), so on a noisy host two runs of the same
 * build differ by more than their iterations scatter; with repeated runs on both sides the run is
 * the honest unit (Kalibera & Jones, "Rigorous Benchmarking in Reasonable Time", ISMM 2013). */
enum mp_cmp_unit {
    MP_CMP_UNIT_AUTO,      /* runs when both sides pool at least 2 runs, else iterations */
    MP_CMP_UNIT_ITERATION, /* every per-iteration sample (all runs pooled) */
    MP_CMP_UNIT_RUN,       /* each run's median of its iterations at the point */
};

struct mp_cmp_opts {
    double threshold;  /* fraction */
    double alpha;
    const char *tool;  /* "layer", "a2a", "ffn", or NULL to detect */
    enum mp_cmp_unit unit;
};

struct mp_cmp {
    const char *tool;         /* "moeperf-layer", "moeperf-a2a", "moeperf-ffn" */
    const char *samples_file; /* e.g. "layer_samples.csv" */
    char *dir[2];             /* base, new */
    int nruns[2];             /* runs pooled on each side (repeats in subdirectories) */
    int unit_run;             /* 1: the test ranked per-run medians, 0: per-iteration samples */
    int low_confidence; /* one run on a side, iterations ranked: run-to-run variation unseen */
    int nkey;
    char **key_cols;   /* [nkey] */
    int *key_varies;   /* [nkey]: 1 when the column takes more than one value over the points */
    long npoints;
    char ***key_cells; /* [npoints][nkey] */
    long only_base, only_new; /* points measured on one side only */
    int nmetrics;
    struct mp_cmp_metric metrics[4];
    long nrows;
    struct mp_cmp_row *rows; /* point-major: rows[point · nmetrics + metric] */
    int nfacts;
    struct mp_cmp_fact *facts;
    int nwarn;
    char **warn; /* about the runs, also printed to stderr by a successful mp_cmp_load */
    struct cJSON *run[2]; /* run.json of each side's first run, or NULL */
};

/* Load both sides, match their points and compute every row's statistics and verdict. A side is
 * a run directory, or a directory whose subdirectories are runs (repeats of the same sweep, e.g.
 * alternated with the other side's): their samples are pooled per point, and the facts come from
 * the first run in name order. The tool is the one whose samples or summary file the base side
 * holds (exactly one, unless opts->tool names it); both sides must have its samples files with the
 * same columns and at least one point in common. Points of one side only become rows with no
 * samples on the other (inconclusive). A samples row whose point has no summary row (a point cut
 * short) is ignored. Warnings are collected in c->warn and printed to stderr on success.
 * Returns MP_OK, MP_ERR_USAGE (one line naming the file or directory printed) or MP_ERR_RUNTIME. */
int mp_cmp_load(const char *base_dir, const char *new_dir, const struct mp_cmp_opts *opts,
                struct mp_cmp *c);
void mp_cmp_free(struct mp_cmp *c);

/* A short label of a point from the key columns that vary ("layout=tp1ep2 batch=16"); the full
 * key when none varies. Heap string, NULL when out of memory. */
char *mp_cmp_point_label(const struct mp_cmp *c, long point);

#endif
