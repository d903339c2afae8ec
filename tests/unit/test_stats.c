/* test_stats.c - Welford moments, merge, nearest-rank percentiles and the median CI against values
 * computed by hand or by an independent method. */
#include "check.h"
#include "sort.h"
#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Two-pass mean and sample standard deviation, the textbook reference. */
static void two_pass(const double *x, long n, double *mean, double *sd)
{
    double s = 0;
    for (long i = 0; i < n; i++)
        s += x[i];
    *mean = s / (double)n;
    double q = 0;
    for (long i = 0; i < n; i++)
        q += (x[i] - *mean) * (x[i] - *mean);
    *sd = sqrt(q / (double)(n - 1));
}

static void test_welford(void)
{
    double x[10];
    struct mp_welford w = {0, 0, 0};
    for (int i = 0; i < 10; i++) {
        x[i] = i + 1;
        mp_welford_add(&w, x[i]);
    }
    CHECK_INT(w.n, 10);
    CHECK_NEAR(w.mean, 5.5, 1e-15);
    CHECK_NEAR(mp_welford_stdev(&w), 3.0276503540974917, 1e-14);

    /* A large offset: the naive sum-of-squares formula loses every digit here, Welford does not. */
    double y[1000], m, sd;
    struct mp_welford wy = {0, 0, 0};
    for (int i = 0; i < 1000; i++) {
        y[i] = 1e9 + (double)((i * 37) % 101) * 0.25;
        mp_welford_add(&wy, y[i]);
    }
    two_pass(y, 1000, &m, &sd);
    CHECK_NEAR(wy.mean, m, 1e-15);
    CHECK_NEAR(mp_welford_stdev(&wy), sd, 1e-8);

    /* Merge of two unequal parts equals the whole stream. */
    struct mp_welford a = {0, 0, 0}, b = {0, 0, 0};
    for (int i = 0; i < 1000; i++)
        mp_welford_add(i < 317 ? &a : &b, y[i]);
    mp_welford_merge(&a, &b);
    CHECK_INT(a.n, 1000);
    CHECK_NEAR(a.mean, wy.mean, 1e-15);
    CHECK_NEAR(mp_welford_stdev(&a), sd, 1e-8);

    /* Halves of 1..10. */
    struct mp_welford h1 = {0, 0, 0}, h2 = {0, 0, 0};
    for (int i = 0; i < 10; i++)
        mp_welford_add(i < 5 ? &h1 : &h2, x[i]);
    mp_welford_merge(&h1, &h2);
    CHECK_NEAR(h1.mean, 5.5, 1e-15);
    CHECK_NEAR(mp_welford_stdev(&h1), 3.0276503540974917, 1e-14);

    /* Merging with an empty stream, either way round. */
    struct mp_welford e = {0, 0, 0}, c = w;
    mp_welford_merge(&c, &e);
    CHECK_INT(c.n, 10);
    CHECK_NEAR(c.mean, 5.5, 1e-15);
    mp_welford_merge(&e, &w);
    CHECK_INT(e.n, 10);
    CHECK_NEAR(mp_welford_stdev(&e), 3.0276503540974917, 1e-14);

    struct mp_welford one = {0, 0, 0};
    mp_welford_add(&one, 4.0);
    CHECK(mp_welford_stdev(&one) == 0);
}

static void test_percentile(void)
{
    double x[200];
    for (int i = 0; i < 200; i++)
        x[i] = i + 1; /* x_(r) = r */
    CHECK(isnan(mp_percentile(x, 0, 50)));
    CHECK_NEAR(mp_percentile(x, 10, 50), 5, 0);  /* ceil(5) = 5th */
    CHECK_NEAR(mp_percentile(x, 10, 99), 10, 0); /* ceil(9.9) = 10th */
    CHECK_NEAR(mp_percentile(x, 10, 100), 10, 0);
    CHECK_NEAR(mp_percentile(x, 10, 1), 1, 0);
    CHECK_NEAR(mp_percentile(x, 10, 10), 1, 0);   /* ceil(1) = 1st */
    CHECK_NEAR(mp_percentile(x, 10, 10.5), 2, 0); /* ceil(1.05) = 2nd */
    CHECK_NEAR(mp_percentile(x, 200, 99), 198, 0);
    CHECK_NEAR(mp_percentile(x, 200, 50), 100, 0);
    CHECK_NEAR(mp_percentile(x, 100, 99), 99, 0);
    CHECK_NEAR(mp_percentile(x, 1, 50), 1, 0);
    CHECK_NEAR(mp_percentile(x, 7, 50), 4, 0); /* ceil(3.5) = 4th */
}

/* The exact j for every n in 1..nmax by an independent method: Pascal's triangle of
 * Binomial(n, 1/2) probabilities, p_k(n) = (p_k(n-1) + p_{k-1}(n-1)) / 2, no logarithms.
 * Compares with the CI of 1..n, whose order statistics are their ranks. */
static void test_ci_exact(long nmax)
{
    double *p = calloc((size_t)nmax + 2, sizeof *p);
    double *x = malloc((size_t)nmax * sizeof *x);
    CHECK(p && x);
    if (!p || !x) {
        free(p);
        free(x);
        return;
    }
    for (long i = 0; i < nmax; i++)
        x[i] = (double)(i + 1);
    p[0] = 1;
    int bad = 0;
    for (long n = 1; n <= nmax; n++) {
        for (long k = n; k >= 1; k--)
            p[k] = (p[k] + p[k - 1]) / 2;
        p[0] /= 2;
        long j = 0; /* largest j with sum_{k<j} p_k <= 0.025 */
        double c = 0;
        while (j < n && c + p[j] <= 0.025)
            c += p[j++];
        double lo, hi;
        mp_median_ci95(x, n, &lo, &hi);
        double elo = j >= 1 ? (double)j : 1, ehi = j >= 1 ? (double)(n - j + 1) : (double)n;
        if (lo != elo || hi != ehi) {
            if (bad++ < 5)
                fprintf(stderr, "n=%ld: CI [%g, %g], exact [%g, %g]\n", n, lo, hi, elo, ehi);
        }
    }
    CHECK_INT(bad, 0);
    free(p);
    free(x);
}

static void test_ci(void)
{
    double x[100], lo, hi;
    for (int i = 0; i < 100; i++)
        x[i] = i + 1;
    /* n = 10: P(X <= 1) = 11/1024 <= 0.025 < P(X <= 2) = 56/1024, so j = 2: [x_(2), x_(9)]. */
    mp_median_ci95(x, 10, &lo, &hi);
    CHECK_NEAR(lo, 2, 0);
    CHECK_NEAR(hi, 9, 0);
    /* n = 100: the tabulated ranks 40 and 61. */
    mp_median_ci95(x, 100, &lo, &hi);
    CHECK_NEAR(lo, 40, 0);
    CHECK_NEAR(hi, 61, 0);
    /* n = 5: P(X = 0) = 1/32 > 0.025, no j qualifies: [min, max]. */
    mp_median_ci95(x, 5, &lo, &hi);
    CHECK_NEAR(lo, 1, 0);
    CHECK_NEAR(hi, 5, 0);
    /* n = 6: P(X = 0) = 1/64 <= 0.025 < 7/64: j = 1, also [min, max]. */
    mp_median_ci95(x, 6, &lo, &hi);
    CHECK_NEAR(lo, 1, 0);
    CHECK_NEAR(hi, 6, 0);
    /* n = 9: P(X <= 1) = 10/512 = 0.0195 <= 0.025 < P(X <= 2) = 46/512: j = 2: [x_(2), x_(8)]. */
    mp_median_ci95(x, 9, &lo, &hi);
    CHECK_NEAR(lo, 2, 0);
    CHECK_NEAR(hi, 8, 0);
    mp_median_ci95(x, 1, &lo, &hi);
    CHECK_NEAR(lo, 1, 0);
    CHECK_NEAR(hi, 1, 0);
    mp_median_ci95(x, 0, &lo, &hi);
    CHECK(isnan(lo) && isnan(hi));

    test_ci_exact(2000);

    /* Large n: the exact j stays within a rank or two of the normal approximation
     * n/2 + 1/2 - 1.96 sqrt(n)/2, and the interval is symmetric in rank. */
    long ns[] = {10000, 123457, 1000000};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        long n = ns[t];
        double *y = malloc((size_t)n * sizeof *y);
        CHECK(y != NULL);
        if (!y)
            continue;
        for (long i = 0; i < n; i++)
            y[i] = (double)(i + 1);
        mp_median_ci95(y, n, &lo, &hi);
        double japprox = (double)n / 2 + 0.5 - 0.98 * sqrt((double)n);
        CHECK(fabs(lo - japprox) <= 2);
        CHECK_NEAR(hi, (double)n - lo + 1, 0);
        free(y);
    }
}

static void test_summarize(void)
{
    double x[] = {7, 3, 10, 1, 9, 2, 8, 5, 4, 6};
    struct mp_summary s;
    mp_summarize(x, 10, &s);
    CHECK_INT(s.n, 10);
    for (int i = 0; i < 10; i++)
        CHECK_NEAR(x[i], i + 1, 0); /* sorted in place */
    CHECK_NEAR(s.p50, 5, 0);
    CHECK_NEAR(s.p99, 10, 0);
    CHECK_NEAR(s.mean, 5.5, 1e-15);
    CHECK_NEAR(s.stdev, 3.0276503540974917, 1e-14);
    CHECK_NEAR(s.min, 1, 0);
    CHECK_NEAR(s.max, 10, 0);
    CHECK_NEAR(s.ci_lo, 2, 0);
    CHECK_NEAR(s.ci_hi, 9, 0);

    double one = 3.5;
    mp_summarize(&one, 1, &s);
    CHECK_INT(s.n, 1);
    CHECK_NEAR(s.p50, 3.5, 0);
    CHECK_NEAR(s.stdev, 0, 0);
    CHECK_NEAR(s.ci_lo, 3.5, 0);
    CHECK_NEAR(s.ci_hi, 3.5, 0);

    mp_summarize(NULL, 0, &s);
    CHECK_INT(s.n, 0);
    CHECK(isnan(s.p50) && isnan(s.p99) && isnan(s.mean) && isnan(s.stdev) && isnan(s.min) &&
          isnan(s.max) && isnan(s.ci_lo) && isnan(s.ci_hi));
}

/* Selection agrees with sorting, bit for bit, at every rank of arrays with many ties, runs and
 * random values (a fixed LCG), small and odd sizes included; a NaN takes the sort's path. */
static void test_percentile_select(void)
{
    static const double ps[] = {1, 25, 50, 75, 90, 99, 99.9, 100};
    unsigned long long state = 12345;
    double a[257], sorted[257];
    long bad = 0, cases = 0;
    for (long n = 1; n <= 257; n += (n < 20 ? 1 : 17))
        for (int kind = 0; kind < 4; kind++)
            for (size_t q = 0; q < sizeof ps / sizeof ps[0]; q++) {
                for (long i = 0; i < n; i++) {
                    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
                    double r = (double)(state >> 11) / 9007199254740992.0;
                    a[i] = kind == 0   ? r                          /* distinct */
                           : kind == 1 ? floor(r * 4)               /* many ties */
                           : kind == 2 ? (double)(n - i)            /* descending */
                                       : (i % 2 ? 7.0 : -r * 1e300); /* halves, wide range */
                    sorted[i] = a[i];
                }
                qsort(sorted, (size_t)n, sizeof *sorted, mp_cmp_double);
                double want = mp_percentile(sorted, n, ps[q]);
                double got = mp_percentile_select(a, n, ps[q]);
                bad += memcmp(&want, &got, sizeof want) != 0;
                cases++;
            }
    CHECK_INT(bad, 0);
    CHECK(cases > 300);
    double with_nan[5] = {3, NAN, 1, 2, 0}, nan_sorted[5];
    memcpy(nan_sorted, with_nan, sizeof with_nan);
    qsort(nan_sorted, 5, sizeof *nan_sorted, mp_cmp_double);
    double v = mp_percentile_select(with_nan, 5, 20), w = mp_percentile(nan_sorted, 5, 20);
    CHECK(memcmp(&v, &w, sizeof v) == 0);
    CHECK(isnan(mp_percentile_select(NULL, 0, 50)));
}

/* The stability figure and how far two medians stand apart (docs/METRICS.md, "Stability"). */
static void test_spread_apart(void)
{
    const double ten[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    CHECK_NEAR(mp_spread(ten, 10), (9.0 - 1.0) / 5.0, 1e-12); /* nearest ranks 9, 1 and 5 */
    CHECK(isnan(mp_spread(ten, 1)));
    const double zero[3] = {-1, 0, 0};
    CHECK(isnan(mp_spread(zero, 3))); /* a median that is not positive */
    struct mp_summary sm;
    double x[10];
    memcpy(x, ten, sizeof x);
    mp_summarize(x, 10, &sm);
    CHECK_NEAR(sm.spread, 1.6, 1e-12);
    CHECK_NEAR(mp_apart(1.25), 0.25, 1e-12);
    CHECK_NEAR(mp_apart(0.8), 0.25, 1e-12); /* the same seen from the other side */
    CHECK_NEAR(mp_apart(1.0), 0.0, 1e-12);
    CHECK(isnan(mp_apart(0)) && isnan(mp_apart(NAN)));
}

int main(void)
{
    test_spread_apart();
    test_welford();
    test_percentile();
    test_percentile_select();
    test_ci();
    test_summarize();
    CHECK_DONE();
}
