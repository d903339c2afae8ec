/* test_harness.c - the shared measurement loop's order (warm-up, capture, replay, timed samples
 * with their draws) and the max over ranks, on a recording iteration and a one-process gather
 * standing in for three ranks. */
#include <string.h>

#include "check.h"
#include "error.h"
#include "harness.h"

/* What the loop called, in order: 'i' iterations (step, sample, replay), 'c' the capture, 'f' the
 * flush before a timed iteration. */
struct log {
    char kind[64];
    int step[64], sample[64], replay[64], timed[64];
    int n, fail_at;
};

static int rec_iterate(void *arg, int step, int sample, int replay)
{
    struct log *l = arg;
    l->kind[l->n] = 'i';
    l->step[l->n] = step;
    l->sample[l->n] = sample;
    l->replay[l->n] = replay;
    l->timed[l->n] = mp_in_timed_loop;
    return l->n++ == l->fail_at ? MP_ERR_RUNTIME : MP_OK;
}

static int rec_capture(void *arg)
{
    struct log *l = arg;
    l->kind[l->n++] = 'c';
    return MP_OK;
}

static int rec_flush(void *arg)
{
    struct log *l = arg;
    l->timed[l->n] = mp_in_timed_loop;
    l->kind[l->n++] = 'f';
    return MP_OK;
}

/* Three ranks' samples laid out rank-major, as a gather to rank 0 leaves them. */
static const double ranks3[3][4] = {{1, 9, 3, 4}, {2, 1, 7, 4}, {0, 5, 3, 8}};

static int fake_gather(struct mp_comm *c, const void *send, size_t bytes, void *recv_root)
{
    (void)send;
    if (c->rank == 0)
        memcpy(recv_root, ranks3, bytes * (size_t)c->size);
    return MP_OK;
}

int main(void)
{
    /* warm-up 2, capture, 3 timed: steps 0 1 | c, 0 replayed | f 2, f 3, f 4 as samples 0..2 */
    struct log l = {.fail_at = -1};
    struct mp_harness h = {.warmup = 2, .iters = 3, .iterate = rec_iterate, .capture = rec_capture,
                           .before_timed = rec_flush, .arg = &l};
    double timed = 5;
    CHECK_INT(mp_harness_run(&h, &timed), MP_OK);
    CHECK_STR(l.kind, "iicifififi");
    CHECK_INT(l.step[0], 0);
    CHECK_INT(l.step[1], 1);
    CHECK_INT(l.sample[1], -1);
    CHECK_INT(l.timed[1], 0);
    CHECK_INT(l.step[3], 0); /* the replay after the capture: draw 0, untimed */
    CHECK_INT(l.replay[3], 1);
    CHECK_INT(l.sample[3], -1);
    for (int k = 0; k < 3; k++) { /* timed: steps continue after the warm-up, replayed */
        int at = 5 + 2 * k;
        CHECK_INT(l.step[at], 2 + k);
        CHECK_INT(l.sample[at], k);
        CHECK_INT(l.replay[at], 1);
        CHECK_INT(l.timed[at], 1);
        CHECK_INT(l.timed[at - 1], 0); /* the flush is outside the timed iteration */
    }
    CHECK_INT(mp_in_timed_loop, 0);
    CHECK(timed >= 5);

    /* no warm-up: one untimed iteration grows the buffers before the capture */
    memset(&l, 0, sizeof l);
    l.fail_at = -1;
    h.warmup = 0;
    h.iters = 1;
    h.before_timed = NULL;
    CHECK_INT(mp_harness_run(&h, NULL), MP_OK);
    CHECK_STR(l.kind, "icii");
    CHECK_INT(l.replay[0], 0);
    CHECK_INT(l.replay[2], 1);
    CHECK_INT(l.step[3], 0);
    CHECK_INT(l.sample[3], 0);

    /* no capture: nothing is replayed; a failing timed iteration ends the loop, its time not
     * added and the timed flag cleared */
    memset(&l, 0, sizeof l);
    l.fail_at = 2;
    h.warmup = 1;
    h.iters = 4;
    h.capture = NULL;
    timed = 0;
    CHECK_INT(mp_harness_run(&h, &timed), MP_ERR_RUNTIME);
    CHECK_STR(l.kind, "iii");
    CHECK_INT(l.replay[1], 0);
    CHECK_INT(mp_in_timed_loop, 0);
    CHECK_NEAR(timed, 0, 0);

    /* the slowest rank's sample, per iteration */
    struct mp_comm_ops ops = {.gather = fake_gather};
    struct mp_comm c = {.ops = &ops, .rank = 0, .size = 3};
    double all[12], max[4] = {0};
    CHECK_INT(mp_harness_max_over_ranks(&c, ranks3[0], 4, all, max), MP_OK);
    CHECK_NEAR(max[0], 2, 0);
    CHECK_NEAR(max[1], 9, 0);
    CHECK_NEAR(max[2], 7, 0);
    CHECK_NEAR(max[3], 8, 0);

    /* a strided summary leaves its samples in place */
    double x[6] = {5, 0, 1, 0, 3, 0};
    struct mp_summary s;
    double scratch[3];
    mp_harness_summarize(x, 2, 3, scratch, &s);
    CHECK_NEAR(s.p50, 3, 0);
    CHECK_NEAR(s.max, 5, 0);
    CHECK_NEAR(x[0], 5, 0);
    CHECK_DONE();
}
