/* test_vworld.c - the traced ranks' virtual clocks (comm/comm.h, kernels/compute.h): a
 * collective starts at its last member's arrival, started exchanges queue on their group's
 * network and wait() reaches their end, a world barrier starts an epoch without losing a time,
 * and a mark prices the compute queued since the one before; ranks (fibers) that wait for a
 * collective another rank never calls, or that fail, make the run fail instead of hanging; a
 * deep stack holds. */
#include "check.h"
#include "comm.h"
#include "compute.h"
#include "error.h"
#include "vtime.h"

enum { RANKS = 4, DUR = 5 };

/* Every exchange takes DUR µs, every allreduce 1 µs per element. */
static double cost(void *arg, const struct mp_vworld_exchange *x)
{
    (void)arg;
    return x->reduce ? (double)x->elems : DUR;
}

static double work(void *arg, const struct mp_vwork *w)
{
    (void)arg;
    return w->delay_us + 100.0 * w->ffn_calls;
}

struct seen {
    double arrive, after_block, after_start, after_wait1, after_wait2, after_reduce;
    double skew, across;
};
static struct seen seen[RANKS];
static struct mp_vworld *world;

static int run_rank(struct mp_comm *c, void *arg)
{
    (void)arg;
    struct seen *s = &seen[c->rank];
    struct mp_vtime *t = mp_vworld_time_of(world, c->rank);
    const struct mp_compute_ops *o = &mp_compute_model_rank;
    struct mp_compute *dev = NULL;
    struct mp_vwork_cost k = {.work_us = work};
    int rows[RANKS] = {1, 1, 1, 1}, displ[RANKS] = {0, 1, 2, 3};
    char sbuf[RANKS], rbuf[RANKS];
    int rc = o->init(&dev, 0);
    if (rc != MP_OK)
        return rc;
    mp_compute_model_rank_clock(dev, t, &k);
    if ((rc = c->ops->split(c, 2, 2)) != MP_OK) /* tp2ep2: EP groups of 2, TP groups of 2 */
        goto out;
    /* rank r arrives r·10 µs late: the blocking exchange of its EP group ends at its last
     * member's arrival plus DUR */
    mp_compute_delay(o, dev, 10.0 * c->rank);
    o->mark(dev, 0);
    s->arrive = t->clock;
    if ((rc = c->ops->alltoallv(c, sbuf, rows, displ, rbuf, rows, displ, 1)) != MP_OK)
        goto out;
    s->after_block = t->clock;
    /* two started exchanges: the second queues behind the first; starting moves no clock */
    if ((rc = c->ops->ialltoallv(c, sbuf, rows, displ, rbuf, rows, displ, 1, 0)) != MP_OK ||
        (rc = c->ops->ialltoallv(c, sbuf, rows, displ, rbuf, rows, displ, 1, 1)) != MP_OK)
        goto out;
    s->after_start = t->clock;
    if ((rc = c->ops->wait(c, 0)) != MP_OK)
        goto out;
    s->after_wait1 = t->clock;
    if ((rc = c->ops->wait(c, 1)) != MP_OK)
        goto out;
    s->after_wait2 = t->clock;
    /* the TP group's allreduce of 3 elements: 3 µs from its last member */
    char buf[3 * sizeof(float)];
    if ((rc = c->ops->allreduce_sum(c, buf, 3)) != MP_OK)
        goto out;
    s->after_reduce = t->clock;
    /* an FFN queued, then a mark across a world barrier */
    struct mp_ffn_args a = {.nexp = 0};
    o->expert_ffn(dev, &a);
    o->mark(dev, 1); /* the FFN's 100 µs priced here */
    if ((rc = c->ops->barrier(c)) != MP_OK)
        goto out;
    o->mark(dev, 2);
    s->skew = o->elapsed_us(dev, 1, 2);
    s->across = o->elapsed_us(dev, 0, 2);
out:
    o->fini(dev);
    return rc;
}

/* Rank 0 leaves at once while the others wait at a world barrier it never joins; or (arg set)
 * rank 1 fails while the others wait for it. */
static int strand(struct mp_comm *c, void *arg)
{
    if (c->rank == 0 && !arg)
        return MP_OK;
    if (c->rank == 1 && arg)
        return MP_ERR_RUNTIME;
    return c->ops->barrier(c);
}

/* A rank that uses a megabyte of stack and then meets the others. */
static int deep(struct mp_comm *c, void *arg)
{
    (void)arg;
    volatile char big[1 << 20];
    for (size_t i = 0; i < sizeof big; i += 4096)
        big[i] = (char)c->rank;
    int rc = c->ops->barrier(c);
    return rc == MP_OK && big[4096] == (char)c->rank ? MP_OK : MP_ERR_RUNTIME;
}

static void test_stranded(void)
{
    struct mp_vworld *w = NULL;
    CHECK_INT(mp_vworld_create(&w, RANKS, 2), MP_OK);
    void *none[RANKS] = {0}, *fail[RANKS] = {w, w, w, w};
    printf("  a barrier rank 0 never joins (an error expected):\n");
    CHECK_INT(mp_vworld_run(w, strand, none), MP_ERR_RUNTIME);
    CHECK_INT(mp_vworld_run(w, strand, fail), MP_ERR_RUNTIME); /* rank 1 fails: no message */
    CHECK_INT(mp_vworld_run(w, deep, none), MP_OK); /* and the world runs again afterwards */
    mp_vworld_free(w);
}

int main(void)
{
    test_stranded();
    CHECK_INT(mp_vworld_create(&world, RANKS, 2), MP_OK);
    mp_vworld_time(world, cost, NULL);
    void *args[RANKS] = {0};
    CHECK_INT(mp_vworld_run(world, run_rank, args), MP_OK);
    for (int r = 0; r < RANKS; r++) {
        /* EP groups: world ranks {0, 2} and {1, 3} (tp2ep2: rank = ep_rank·2 + tp_rank) */
        double last = 10.0 * (r % 2 == 0 ? 2 : 3);
        struct seen *s = &seen[r];
        CHECK_NEAR(s->arrive, 10.0 * r, 1e-12);
        CHECK_NEAR(s->after_block, last + DUR, 1e-12);
        CHECK_NEAR(s->after_start, last + DUR, 1e-12);
        CHECK_NEAR(s->after_wait1, last + 2 * DUR, 1e-12);
        CHECK_NEAR(s->after_wait2, last + 3 * DUR, 1e-12); /* queued behind the first */
        /* TP groups {0, 1} and {2, 3}: the later EP group's end, then 3 µs */
        double tp_last = 30.0 + 3 * DUR;
        CHECK_NEAR(s->after_reduce, tp_last + 3, 1e-12);
        /* the world's slowest reached the barrier at tp_last + 3 + 100 */
        CHECK(s->skew == 0);
        CHECK_NEAR(s->across, tp_last + 3 + 100 - 10.0 * r, 1e-12);
    }
    struct mp_vtime a = {.clock = 7.25, .epoch = 3}, b = {.clock = 0, .shift = 7.25, .epoch = 4};
    CHECK(mp_vtime_between(&a, &b) == 0); /* across one barrier, exactly */
    mp_vworld_free(world);
    return check_failures;
}
