/* mannwhitney.c - the two-sided Mann–Whitney U test: midranks, exact null distribution by dynamic
 * programming, normal approximation with tie and continuity corrections. */
#include "mannwhitney.h"

#include <math.h>
#include <stdlib.h>

/* The null distribution P(U = u), u = 0..n1·n2, for samples of n1 and n2 values without ties, in
 * pmf[0..n1·n2] (caller allocates). Mann & Whitney (1947), Ann. Math. Statist. 18, 50–60:
 *   p(m, n, u) = m/(m + n) · p(m − 1, n, u − n) + n/(m + n) · p(m, n − 1, u),
 *   p(0, n, 0) = p(m, 0, 0) = 1,
 * where m values of x and n of y are arranged in random order and the largest value is either an x
 * (it beats all n values of y: u − n) or a y (it adds nothing). Layers over m are kept for every
 * n = 0..n2. Returns 0 or -1 when out of memory. */
static int exact_pmf(long n1, long n2, double *pmf)
{
    long stride = n1 * n2 + 1;
    double *prev = calloc((size_t)(n2 + 1) * (size_t)stride, sizeof *prev);
    double *cur = calloc((size_t)(n2 + 1) * (size_t)stride, sizeof *cur);
    if (!prev || !cur) {
        free(prev);
        free(cur);
        return -1;
    }
    /* layer m = 0: U is 0 whatever n */
    for (long n = 0; n <= n2; n++)
        prev[n * stride] = 1.0;
    for (long m = 1; m <= n1; m++) {
        cur[0] = 1.0; /* n = 0 */
        for (long u = 1; u <= m * n2 && u < stride; u++)
            cur[u] = 0.0;
        for (long n = 1; n <= n2; n++) {
            double a = (double)m / (double)(m + n), b = (double)n / (double)(m + n);
            double *c = cur + n * stride, *left = cur + (n - 1) * stride, *up = prev + n * stride;
            long umax = m * n;
            for (long u = 0; u <= umax; u++) {
                double from_x = u >= n ? up[u - n] : 0.0;             /* p(m−1, n, u−n) */
                double from_y = u <= m * (n - 1) ? left[u] : 0.0;     /* p(m, n−1, u) */
                c[u] = a * from_x + b * from_y;
            }
        }
        double *t = prev;
        prev = cur;
        cur = t;
    }
    for (long u = 0; u < stride; u++)
        pmf[u] = prev[n2 * stride + u];
    free(prev);
    free(cur);
    return 0;
}

double mp_mw_exact_cdf(long n1, long n2, long u)
{
    if (u < 0)
        return 0.0;
    if (u >= n1 * n2)
        return 1.0;
    double *pmf = malloc((size_t)(n1 * n2 + 1) * sizeof *pmf);
    if (!pmf || exact_pmf(n1, n2, pmf) != 0) {
        free(pmf);
        return -1.0;
    }
    double s = 0.0;
    for (long k = 0; k <= u; k++)
        s += pmf[k];
    free(pmf);
    return s > 1.0 ? 1.0 : s;
}

struct tagged {
    double v;
    int from_x;
};

static int cmp_tagged(const void *a, const void *b)
{
    double x = ((const struct tagged *)a)->v, y = ((const struct tagged *)b)->v;
    return (x > y) - (x < y);
}

int mp_mannwhitney(const double *x, long n1, const double *y, long n2, struct mp_mw *r)
{
    r->n1 = n1;
    r->n2 = n2;
    r->u1 = r->u2 = r->z = r->p = NAN;
    r->exact = 0;
    r->ties = 0;
    if (n1 <= 0 || n2 <= 0)
        return 0;
    long N = n1 + n2;
    struct tagged *all = malloc((size_t)N * sizeof *all);
    if (!all)
        return -1;
    for (long i = 0; i < n1; i++)
        all[i] = (struct tagged){x[i], 1};
    for (long j = 0; j < n2; j++)
        all[n1 + j] = (struct tagged){y[j], 0};
    qsort(all, (size_t)N, sizeof *all, cmp_tagged);

    /* midranks: a group of t equal values at sorted positions i..i+t−1 (0-based) all get the mean
     * of the 1-based ranks i+1..i+t, i.e. i + (t + 1)/2 */
    double r1 = 0.0, tie_sum = 0.0;
    for (long i = 0; i < N;) {
        long j = i + 1;
        while (j < N && all[j].v == all[i].v)
            j++;
        double t = (double)(j - i), midrank = (double)i + (t + 1.0) / 2.0;
        for (long k = i; k < j; k++)
            if (all[k].from_x)
                r1 += midrank;
        if (j - i > 1) {
            r->ties++;
            tie_sum += t * t * t - t;
        }
        i = j;
    }
    free(all);

    double nn = (double)n1 * (double)n2;
    r->u1 = r1 - (double)n1 * ((double)n1 + 1.0) / 2.0;
    r->u2 = nn - r->u1;

    if (r->ties == 0 && n1 < MP_MW_EXACT_MAX && n2 < MP_MW_EXACT_MAX) {
        long u = lround(r->u1), umax = n1 * n2;
        double *pmf = malloc((size_t)(umax + 1) * sizeof *pmf);
        if (!pmf || exact_pmf(n1, n2, pmf) != 0) {
            free(pmf);
            return -1;
        }
        /* the null distribution is symmetric about n1·n2/2: P(U ≥ u) = P(U ≤ n1·n2 − u) */
        long tail = u < umax - u ? u : umax - u;
        double s = 0.0;
        for (long k = 0; k <= tail; k++)
            s += pmf[k];
        free(pmf);
        r->p = 2.0 * s > 1.0 ? 1.0 : 2.0 * s;
        r->exact = 1;
        return 0;
    }

    double dn = (double)N;
    double var = nn / 12.0 * ((dn + 1.0) - tie_sum / (dn * (dn - 1.0)));
    double d = r->u1 - nn / 2.0;
    if (!(var > 0.0)) { /* every value equal */
        r->z = 0.0;
        r->p = 1.0;
        return 0;
    }
    double zabs = (fabs(d) - 0.5) / sqrt(var);
    if (zabs < 0.0)
        zabs = 0.0;
    r->z = d < 0 ? -zabs : zabs;
    r->p = erfc(zabs / sqrt(2.0));
    if (r->p > 1.0)
        r->p = 1.0;
    return 0;
}
