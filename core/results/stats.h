/* stats.h - running moments (Welford), percentiles from kept samples and the order-statistic
 * confidence interval of the median. */
#ifndef MP_STATS_H
#define MP_STATS_H

struct mp_welford {
    long n;
    double mean, m2;
};

/* Welford's online update (Welford 1962; Knuth TAOCP vol. 2, 4.2.2). */
void mp_welford_add(struct mp_welford *w, double x);
/* Merge two streams (Chan, Golub, LeVeque 1979, parallel variance): a ← a ∪ b. */
void mp_welford_merge(struct mp_welford *a, const struct mp_welford *b);
/* Sample standard deviation (n−1 denominator); 0 when n < 2. */
double mp_welford_stdev(const struct mp_welford *w);

struct mp_summary {
    long n;
    double p50, p99, mean, stdev, min, max;
    double ci_lo, ci_hi; /* 95% confidence interval of the median */
    double spread;       /* mp_spread of the values */
};

/* A point is too noisy to compare when its spread exceeds this: a change smaller than its own
 * scatter cannot be told from it (docs/METRICS.md, "Stability"). */
#define MP_NOISY_SPREAD 0.10

/* The stability of sorted x[0..n): (p90 − p10) / p50, nearest-rank percentiles, the width of the
 * middle 80 % of the values relative to their median; NAN when n < 2 or the median is not
 * positive. */
double mp_spread(const double *sorted, long n);

/* How far apart two medians stand, given their ratio: the larger over the smaller, less 1, the same
 * whichever is divided by which (1.25 and 0.8 are both 0.25 apart); NAN for a ratio that is not
 * positive. A change counts against noise only when this exceeds a spread. */
double mp_apart(double ratio);

/* Nearest-rank percentile of sorted x[0..n): x[ceil(p/100·n) − 1], p in (0, 100]; NAN if n == 0. */
double mp_percentile(const double *sorted, long n, double p);
/* The same percentile of unsorted x[0..n) by selection, O(n) expected: x is reordered, and the
 * value returned is mp_percentile's of x sorted, bit for bit. NAN if n == 0. */
double mp_percentile_select(double *x, long n, double p);

/* Distribution-free 95% CI of the median from order statistics: the largest j with
 * P(Binomial(n, 1/2) < j) ≤ 0.025 gives [x_(j), x_(n−j+1)] (1-based). Exact binomial sums for every n
 * (in log space). For n < 6 no j qualifies and the interval is [min, max]. */
void mp_median_ci95(const double *sorted, long n, double *lo, double *hi);

/* Sort x in place and fill every field of s (p50 is the nearest-rank median). NAN fields if n == 0. */
void mp_summarize(double *x, long n, struct mp_summary *s);

#endif
