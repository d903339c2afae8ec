/* mannwhitney.h - the two-sided Mann–Whitney U (Wilcoxon rank-sum) test of two independent samples:
 * exact p-values for small samples without ties, the normal approximation otherwise. */
#ifndef MP_MANNWHITNEY_H
#define MP_MANNWHITNEY_H

/* Both samples below this size and no tied values: the exact null distribution is used (the rule
 * R's wilcox.test follows). The dynamic program costs O(n1²·n2²) time and O(n1·n2²) memory: about
 * 6 million steps and 2 MB at 49 × 49. NAN values are not allowed in either sample. */
#define MP_MW_EXACT_MAX 50

struct mp_mw {
    long n1, n2;
    double u1;  /* U of sample x: pairs (x_i, y_j) with x_i > y_j, a tie counting 1/2 */
    double u2;  /* U of sample y; u1 + u2 = n1·n2 */
    double z;   /* normal approximation: continuity-corrected z of u1 (sign: x larger > 0);
                 * NAN when the exact distribution was used */
    double p;   /* two-sided p-value in [0, 1]; NAN when a sample is empty */
    int exact;  /* 1: exact null distribution, 0: normal approximation */
    int ties;   /* number of groups of tied values across both samples */
};

/* Test x[0..n1) against y[0..n2) (neither is modified). Ties get midranks. Exact p when
 * n1, n2 < MP_MW_EXACT_MAX and no value is tied: p = min(1, 2·min(P(U ≤ u1), P(U ≥ u1))) under the
 * null distribution of Mann & Whitney (1947). Otherwise the normal approximation with the tie
 * correction of the variance and a continuity correction of 1/2 (Hollander & Wolfe, Nonparametric
 * Statistical Methods, 2nd ed. 1999, section 4.1, large-sample approximation and ties):
 *   E[U] = n1·n2/2,  Var[U] = n1·n2/12 · ((N + 1) − Σ_g (t_g³ − t_g) / (N·(N − 1))),  N = n1 + n2,
 *   z = (|u1 − E[U]| − 1/2) / sqrt(Var[U]) (0 when negative),  p = 2·(1 − Φ(z)) = erfc(z/√2).
 * When every value is equal (Var[U] = 0) p is 1. Returns 0, or -1 when out of memory (exact
 * path). */
int mp_mannwhitney(const double *x, long n1, const double *y, long n2, struct mp_mw *r);

/* P(U ≤ u) under the null hypothesis for sample sizes n1, n2 without ties, from the recurrence of
 * Mann & Whitney (1947): p(n1, n2, u) = n1/N · p(n1 − 1, n2, u − n2) + n2/N · p(n1, n2 − 1, u).
 * Returns a value in [0, 1], or -1 when out of memory. n1 = 0 or n2 = 0 gives 1 for u ≥ 0. */
double mp_mw_exact_cdf(long n1, long n2, long u);

#endif
