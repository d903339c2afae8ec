/* harness.c - the measurement protocol the benchmarks share (see harness.h). */
#include "harness.h"

#include "clock.h"
#include "error.h"

volatile int mp_in_timed_loop;

int mp_harness_run(const struct mp_harness *h, double *timed_us)
{
    int rc = MP_OK, replay = 0;
    for (int i = 0; i < h->warmup; i++)
        MP_CHECK(h->iterate(h->arg, i, -1, 0));
    if (h->capture) { /* grown buffers first, then the capture, then a replay */
        if (h->warmup == 0)
            MP_CHECK(h->iterate(h->arg, 0, -1, 0));
        MP_CHECK(h->capture(h->arg));
        replay = 1;
        MP_CHECK(h->iterate(h->arg, 0, -1, 1));
    }
    double t_timed = 0;
    for (int i = 0; i < h->iters; i++) {
        if (h->before_timed)
            MP_CHECK(h->before_timed(h->arg));
        double t0 = mp_now_us();
        mp_in_timed_loop = 1;
        rc = h->iterate(h->arg, h->warmup + i, i, replay);
        mp_in_timed_loop = 0;
        t_timed += mp_now_us() - t0;
        if (rc != MP_OK)
            goto out;
    }
    if (timed_us)
        *timed_us += t_timed;
out:
    return rc;
}

int mp_harness_max_over_ranks(struct mp_comm *c, const double *mine, int n, double *all,
                              double *max)
{
    int rc = c->ops->gather(c, mine, (size_t)n * sizeof *mine, all);
    if (rc != MP_OK || c->rank != 0)
        return rc;
    for (int i = 0; i < n; i++) {
        max[i] = all[i];
        for (int r = 1; r < c->size; r++)
            max[i] = all[(size_t)r * n + i] > max[i] ? all[(size_t)r * n + i] : max[i];
    }
    return MP_OK;
}

void mp_harness_summarize(const double *base, size_t stride, int n, double *scratch,
                          struct mp_summary *s)
{
    for (int i = 0; i < n; i++)
        scratch[i] = base[(size_t)i * stride];
    mp_summarize(scratch, n, s);
}
