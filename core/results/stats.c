/* stats.c - running moments, nearest-rank percentiles and the order-statistic CI of the median. */
#include "stats.h"

#include <math.h>
#include <stdlib.h>

#include "sort.h"

void mp_welford_add(struct mp_welford *w, double x)
{
    /* Welford 1962; Knuth TAOCP vol. 2, 4.2.2: M_k = M_{k-1} + (x - M_{k-1}) / k,
     * S_k = S_{k-1} + (x - M_{k-1}) (x - M_k). */
    w->n++;
    double d = x - w->mean;
    w->mean += d / (double)w->n;
    w->m2 += d * (x - w->mean);
}

void mp_welford_merge(struct mp_welford *a, const struct mp_welford *b)
{
    if (b->n == 0)
        return;
    if (a->n == 0) {
        *a = *b;
        return;
    }
    /* Chan, Golub, LeVeque 1979: delta = mean_b - mean_a,
     * M2 = M2_a + M2_b + delta^2 * n_a * n_b / n. */
    double na = (double)a->n, nb = (double)b->n, n = na + nb;
    double delta = b->mean - a->mean;
    a->mean += delta * nb / n;
    a->m2 += b->m2 + delta * delta * na * nb / n;
    a->n += b->n;
}

double mp_welford_stdev(const struct mp_welford *w)
{
    if (w->n < 2 || w->m2 <= 0)
        return 0;
    return sqrt(w->m2 / (double)(w->n - 1));
}

/* The 0-based index of the nearest-rank p-th percentile among n samples: the smallest rank r with
 * r >= p/100 * n, less one, clamped to [0, n-1]. p*n/100 is exact for integral p and n; the
 * relative epsilon keeps a product like 198.00000000000003 from becoming rank 199. */
static long percentile_index(long n, double p)
{
    double r = p * (double)n / 100.0;
    double idx = ceil(r - 1e-9 * fmax(1.0, fabs(r))) - 1;
    if (!(idx >= 0)) /* also catches NAN p */
        idx = 0;
    if (idx > (double)(n - 1))
        idx = (double)(n - 1);
    return (long)idx;
}

double mp_percentile(const double *sorted, long n, double p)
{
    if (n <= 0)
        return NAN;
    return sorted[percentile_index(n, p)];
}

double mp_percentile_select(double *x, long n, double p)
{
    if (n <= 0)
        return NAN;
    for (long i = 0; i < n; i++)
        if (isnan(x[i])) { /* NaN orders with nothing: the sort's answer, whatever it is */
            qsort(x, (size_t)n, sizeof *x, mp_cmp_double);
            return mp_percentile(x, n, p);
        }
    /* Hoare's FIND (CACM 4(7), 1961, algorithm 65): partition [lo, hi] around the median of its
     * first, middle and last values until the k-th smallest sits at k. */
    long k = percentile_index(n, p), lo = 0, hi = n - 1;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        double a = x[lo], b = x[mid], c = x[hi];
        double pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        long i = lo, j = hi;
        while (i <= j) {
            while (x[i] < pivot)
                i++;
            while (x[j] > pivot)
                j--;
            if (i <= j) {
                double t = x[i];
                x[i++] = x[j];
                x[j--] = t;
            }
        }
        /* now x[lo..j] <= pivot <= x[i..hi], and x[j+1..i-1] == pivot */
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    return x[k];
}

/* P(X = k) for X ~ Binomial(n, 1/2), from log C(n, k) - n ln 2 (lgamma). */
static double binom_half_pmf(long n, long k)
{
    int sg;
    double lc = lgamma_r((double)n + 1, &sg) - lgamma_r((double)k + 1, &sg) -
                lgamma_r((double)(n - k) + 1, &sg);
    return exp(lc - (double)n * M_LN2);
}

/* P(X <= m) for X ~ Binomial(n, 1/2): the exact sum of the pmf from k = m down to 0, each term from
 * the previous one by pmf(k-1) = pmf(k) * k / (n-k+1). Below the mode the terms shrink
 * geometrically, so the sum stops once the bound term * r / (1 - r) on the rest is negligible. */
static double binom_half_cdf(long n, long m)
{
    if (m < 0)
        return 0;
    if (m >= n)
        return 1;
    double term = binom_half_pmf(n, m), sum = 0;
    for (long k = m; k >= 0; k--) {
        sum += term;
        if (k == 0)
            break;
        double r = (double)k / (double)(n - k + 1);
        term *= r;
        if (r < 1 && (term == 0 || term / (1 - r) < 1e-17 * sum))
            break;
    }
    return sum > 1 ? 1 : sum;
}

void mp_median_ci95(const double *sorted, long n, double *lo, double *hi)
{
    if (n <= 0) {
        *lo = *hi = NAN;
        return;
    }
    /* The largest j with P(X < j) = P(X <= j-1) <= 0.025, X ~ Binomial(n, 1/2) (e.g. Conover,
     * Practical Nonparametric Statistics, 3.2). The search starts at the normal approximation
     * j ~ n/2 + 1/2 - 0.98 sqrt(n) and walks to the exact answer, a few steps at most. */
    const double alpha = 0.025;
    long j = (long)floor((double)n / 2 + 0.5 - 0.98 * sqrt((double)n));
    if (j < 0)
        j = 0;
    if (j > n / 2)
        j = n / 2;
    double c = binom_half_cdf(n, j - 1);
    if (c <= alpha) {
        while (j < n / 2) {
            double next = c + binom_half_pmf(n, j);
            if (next > alpha)
                break;
            c = next;
            j++;
        }
    } else {
        while (j > 0 && c > alpha) {
            j--;
            c = binom_half_cdf(n, j - 1);
        }
    }
    if (j < 1) { /* n < 6: no order statistic qualifies */
        *lo = sorted[0];
        *hi = sorted[n - 1];
        return;
    }
    *lo = sorted[j - 1]; /* x_(j), 1-based */
    *hi = sorted[n - j]; /* x_(n-j+1) */
}

double mp_spread(const double *sorted, long n)
{
    double mid = n >= 2 ? mp_percentile(sorted, n, 50) : NAN;
    if (!(mid > 0))
        return NAN;
    return (mp_percentile(sorted, n, 90) - mp_percentile(sorted, n, 10)) / mid;
}

double mp_apart(double ratio)
{
    if (!(ratio > 0))
        return NAN;
    return ratio >= 1 ? ratio - 1 : 1 / ratio - 1;
}

void mp_summarize(double *x, long n, struct mp_summary *s)
{
    s->n = n > 0 ? n : 0;
    if (n <= 0) {
        s->p50 = s->p99 = s->mean = s->stdev = s->min = s->max = s->ci_lo = s->ci_hi = NAN;
        s->spread = NAN;
        return;
    }
    qsort(x, (size_t)n, sizeof *x, mp_cmp_double);
    struct mp_welford w = {0, 0, 0};
    for (long i = 0; i < n; i++)
        mp_welford_add(&w, x[i]);
    s->p50 = mp_percentile(x, n, 50);
    s->p99 = mp_percentile(x, n, 99);
    s->mean = w.mean;
    s->stdev = mp_welford_stdev(&w);
    s->min = x[0];
    s->max = x[n - 1];
    mp_median_ci95(x, n, &s->ci_lo, &s->ci_hi);
    s->spread = mp_spread(x, n);
}
