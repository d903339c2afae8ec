/* test_mannwhitney.c - the Mann–Whitney U test against hand-checked values, a textbook example,
 * brute-force enumeration of the null distribution, ties, and symmetry. */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "mannwhitney.h"

/* U of x against y counted pair by pair (ties 1/2): the definition, independent of ranking. */
static double pair_u(const double *x, long n1, const double *y, long n2)
{
    double u = 0.0;
    for (long i = 0; i < n1; i++)
        for (long j = 0; j < n2; j++)
            u += x[i] > y[j] ? 1.0 : x[i] == y[j] ? 0.5 : 0.0;
    return u;
}

/* P(U ≤ u) by enumerating every way to choose which n1 of the ranks 1..n1+n2 belong to x
 * (bit masks), the definition of the null distribution. */
static double brute_cdf(int n1, int n2, long u)
{
    int N = n1 + n2;
    long hit = 0, total = 0;
    for (unsigned mask = 0; mask < (1u << N); mask++) {
        if (__builtin_popcount(mask) != n1)
            continue;
        long uu = 0;
        int ys_below = 0; /* y ranks seen so far, walking ranks upwards */
        for (int k = 0; k < N; k++) {
            if (mask & (1u << k))
                uu += ys_below;
            else
                ys_below++;
        }
        total++;
        hit += uu <= u;
    }
    return (double)hit / (double)total;
}

static void test_separated_5_5(void)
{
    /* every x below every y: U = 0, the most extreme of C(10,5) = 252 arrangements on either
     * side, so the exact two-sided p is 2/252 */
    double x[] = {1, 2, 3, 4, 5}, y[] = {6, 7, 8, 9, 10};
    struct mp_mw r;
    CHECK_INT(mp_mannwhitney(x, 5, y, 5, &r), 0);
    CHECK(r.exact);
    CHECK_INT(r.ties, 0);
    CHECK_NEAR(r.u1, 0.0, 0);
    CHECK_NEAR(r.u2, 25.0, 0);
    CHECK_NEAR(r.p, 2.0 / 252.0, 1e-12);
    CHECK(isnan(r.z));
    /* swapped: U = 25, same p */
    CHECK_INT(mp_mannwhitney(y, 5, x, 5, &r), 0);
    CHECK_NEAR(r.u1, 25.0, 0);
    CHECK_NEAR(r.p, 2.0 / 252.0, 1e-12);
}

static void test_small_by_hand(void)
{
    /* n1 = 3, n2 = 2: the C(5,3) = 10 arrangements give U = 0..6 with counts 1,1,2,2,2,1,1.
     * x = {1, 4, 5}, y = {2, 3}: U = 0 + 2 + 2 = 4; two-sided tail P(U ≤ 2) = 4/10, p = 0.8 */
    double x[] = {1, 4, 5}, y[] = {2, 3};
    struct mp_mw r;
    CHECK_INT(mp_mannwhitney(x, 3, y, 2, &r), 0);
    CHECK_NEAR(r.u1, 4.0, 0);
    CHECK_NEAR(r.p, 0.8, 1e-12);
    CHECK_NEAR(mp_mw_exact_cdf(3, 2, 0), 0.1, 1e-12);
    CHECK_NEAR(mp_mw_exact_cdf(3, 2, 1), 0.2, 1e-12);
    CHECK_NEAR(mp_mw_exact_cdf(3, 2, 2), 0.4, 1e-12);
    CHECK_NEAR(mp_mw_exact_cdf(3, 2, 3), 0.6, 1e-12);
    CHECK_NEAR(mp_mw_exact_cdf(3, 2, 5), 0.9, 1e-12);
    CHECK_NEAR(mp_mw_exact_cdf(3, 2, 6), 1.0, 1e-12);
    CHECK_NEAR(mp_mw_exact_cdf(3, 2, -1), 0.0, 0);
}

static void test_textbook(void)
{
    /* Hollander & Wolfe (1973), p. 69 (permeability constants of the human chorioamnion at term,
     * x, and at 12 to 26 weeks, y), the example of R's wilcox.test: W = U = 35, one-sided
     * p = 0.1272, two-sided exact p = 0.2544 (382 of the C(15,5) = 3003 arrangements have
     * U ≥ 35). */
    double x[] = {0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46};
    double y[] = {1.15, 0.88, 0.90, 0.74, 1.21};
    struct mp_mw r;
    CHECK_INT(mp_mannwhitney(x, 10, y, 5, &r), 0);
    CHECK(r.exact);
    CHECK_NEAR(r.u1, 35.0, 0);
    CHECK_NEAR(r.u1, pair_u(x, 10, y, 5), 0);
    CHECK_NEAR(r.p, 0.2544122544, 1e-9);
    CHECK_NEAR(1.0 - mp_mw_exact_cdf(10, 5, 34), 0.1272061272, 1e-9);
}

static void test_against_enumeration(void)
{
    /* the dynamic program equals brute-force enumeration for every u and small sizes */
    for (int n1 = 1; n1 <= 7; n1++)
        for (int n2 = 1; n2 <= 7; n2++)
            for (long u = 0; u <= (long)n1 * n2; u++) {
                double dp = mp_mw_exact_cdf(n1, n2, u), bf = brute_cdf(n1, n2, u);
                if (fabs(dp - bf) > 1e-12) {
                    fprintf(stderr, "n1 %d n2 %d u %ld: dp %.15g brute %.15g\n", n1, n2, u, dp,
                            bf);
                    check_failures++;
                }
            }
    /* symmetry of the null distribution: P(U ≤ u) = P(U ≥ n1·n2 − u) */
    for (long u = 0; u < 12 * 9; u++)
        CHECK_NEAR(mp_mw_exact_cdf(12, 9, u), 1.0 - mp_mw_exact_cdf(12, 9, 12 * 9 - u - 1), 1e-12);
}

static void test_ties(void)
{
    /* x = {1,2,2,3,3,3,4}, y = {3,4,4,5,5,6}, worked by hand:
     *   U = (3 x of value 3 each tie one y: 3 · 1/2) + (x = 4 beats y = 3 and ties two 4s: 1 + 1)
     *     = 3.5
     *   tie groups: 2 (t=2), 3 (t=4), 4 (t=3), 5 (t=2): Σ(t³ − t) = 6 + 60 + 24 + 6 = 96
     *   N = 13, Var = 7·6/12 · (14 − 96/156) = 46.846153846
     *   z = (|3.5 − 21| − 0.5)/√46.846153846 = 2.483773283, p = erfc(z/√2) = 0.012999854 */
    double x[] = {1, 2, 2, 3, 3, 3, 4}, y[] = {3, 4, 4, 5, 5, 6};
    struct mp_mw r;
    CHECK_INT(mp_mannwhitney(x, 7, y, 6, &r), 0);
    CHECK(!r.exact);
    CHECK_INT(r.ties, 4);
    CHECK_NEAR(r.u1, 3.5, 0);
    CHECK_NEAR(r.u1, pair_u(x, 7, y, 6), 0);
    CHECK_NEAR(r.z, -2.483773283, 1e-8);
    CHECK_NEAR(r.p, 0.012999854364, 1e-8);
    /* symmetric in the order of the samples */
    struct mp_mw s;
    CHECK_INT(mp_mannwhitney(y, 6, x, 7, &s), 0);
    CHECK_NEAR(s.u1, 42.0 - 3.5, 0);
    CHECK_NEAR(s.z, 2.483773283, 1e-8);
    CHECK_NEAR(s.p, r.p, 1e-15);
}

static void test_identical(void)
{
    /* the same sample twice: every value tied in pairs, U = n1·n2/2, p = 1 */
    double x[] = {5, 1, 4, 2, 3};
    struct mp_mw r;
    CHECK_INT(mp_mannwhitney(x, 5, x, 5, &r), 0);
    CHECK_NEAR(r.u1, 12.5, 0);
    CHECK_INT(r.ties, 5);
    CHECK_NEAR(r.p, 1.0, 0);
    /* all values equal: zero variance, p = 1 */
    double c[] = {7, 7, 7, 7}, d[] = {7, 7, 7};
    CHECK_INT(mp_mannwhitney(c, 4, d, 3, &r), 0);
    CHECK_NEAR(r.p, 1.0, 0);
    CHECK_NEAR(r.u1, 6.0, 0);
    /* interleaved without ties: U = n1·n2/2 exactly in the middle, exact p = 1 */
    double a[] = {1, 4, 5, 8}, b[] = {2, 3, 6, 7};
    CHECK_INT(mp_mannwhitney(a, 4, b, 4, &r), 0);
    CHECK(r.exact);
    CHECK_NEAR(r.u1, 8.0, 0);
    CHECK_NEAR(r.p, 1.0, 0);
    /* an empty sample: no test */
    CHECK_INT(mp_mannwhitney(a, 4, b, 0, &r), 0);
    CHECK(isnan(r.p));
}

static void test_large(void)
{
    /* 60 vs 60 without ties takes the normal approximation; y = x + shift, interleaved so that
     * U can be counted by hand: x_i = 2i, y_j = 2j + 1 + 2s gives U = Σ_i #{j: 2j+1+2s < 2i}. */
    enum { n = 60 };
    double x[n], y[n];
    for (int i = 0; i < n; i++) {
        x[i] = 2.0 * i;
        y[i] = 2.0 * i + 1.0 + 2.0 * 10; /* shifted by 10 steps */
    }
    struct mp_mw r;
    CHECK_INT(mp_mannwhitney(x, n, y, n, &r), 0);
    CHECK(!r.exact);
    CHECK_INT(r.ties, 0);
    CHECK_NEAR(r.u1, pair_u(x, n, y, n), 0);
    double var = n * n / 12.0 * (2 * n + 1), z = (fabs(r.u1 - n * n / 2.0) - 0.5) / sqrt(var);
    CHECK_NEAR(r.p, erfc(z / sqrt(2.0)), 1e-12);
    CHECK(r.z < 0);
    /* near the exact limit the normal approximation agrees with the exact p to ~1e-3 */
    enum { m = 49 };
    double a[m], b[m];
    for (int i = 0; i < m; i++) {
        a[i] = 2.0 * i;
        b[i] = 2.0 * i + 1.0 + 2.0 * 9;
    }
    struct mp_mw ex;
    CHECK_INT(mp_mannwhitney(a, m, b, m, &ex), 0);
    CHECK(ex.exact);
    double vv = m * m / 12.0 * (2 * m + 1), zz = (fabs(ex.u1 - m * m / 2.0) - 0.5) / sqrt(vv);
    CHECK_NEAR(ex.p, erfc(zz / sqrt(2.0)), 2e-3);
    CHECK(ex.p > 0.0 && ex.p < 0.2);
}

int main(void)
{
    test_separated_5_5();
    test_small_by_hand();
    test_textbook();
    test_against_enumeration();
    test_ties();
    test_identical();
    test_large();
    CHECK_DONE();
}
