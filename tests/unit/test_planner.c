/* test_planner.c - the planner's findings on hand-made candidates: batch cap, the cheapest plan
 * meeting the SLO, and the doubled-batch comparison. */
#include "check.h"
#include "plan.h"

int main(void)
{
    struct mp_plan_cand c[] = {
        /* tp, ep, replicate, batch; ratio; gpus; meets; token_p99 */
        {.tp = 4, .ep = 16, .replicate = 0, .batch = 16, .ratio = 0.9, .gpus = 640, .dp = 10, .meets = 1, .token_p99_ms = 20},
        {.tp = 4, .ep = 16, .replicate = 0, .batch = 32, .ratio = 0.95, .gpus = 320, .dp = 5, .meets = 1, .token_p99_ms = 25},
        {.tp = 4, .ep = 16, .replicate = 0, .batch = 64, .ratio = 1.3, .gpus = 192, .dp = 3, .meets = 1, .token_p99_ms = 45},
        {.tp = 4, .ep = 16, .replicate = 0, .batch = 128, .ratio = 1.8, .gpus = 128, .dp = 2, .meets = 0, .token_p99_ms = 90},
        {.tp = 4, .ep = 16, .replicate = 4, .batch = 64, .ratio = 0.8, .gpus = 192, .dp = 3, .meets = 1, .token_p99_ms = 30},
        {.tp = 4, .ep = 16, .replicate = 4, .batch = 128, .ratio = 1.1, .gpus = 128, .dp = 2, .meets = 1, .token_p99_ms = 48},
        {.tp = 2, .ep = 8, .replicate = 0, .batch = 64, .ratio = 2.0, .gpus = 128, .dp = 8, .meets = 1, .token_p99_ms = 49},
    };
    int n = (int)(sizeof c / sizeof c[0]);
    CHECK_INT(mp_plan_batch_cap(c, n, &c[0]), 32);
    CHECK_INT(mp_plan_batch_cap(c, n, &c[4]), 64);
    CHECK_INT(mp_plan_batch_cap(c, n, &c[6]), -1); /* network-bound at every batch */
    /* an eplb candidate is a placement of its own: not mixed with contiguous or replicate-hot */
    struct mp_plan_cand e = c[0];
    e.eplb = 6;
    e.batch = 256;
    e.ratio = 0.5;
    CHECK(!mp_plan_same_setup(&e, &c[0]));
    CHECK_INT(mp_plan_batch_cap(c, n, &e), -1);
    char buf[32];
    CHECK_STR(mp_plan_placement(&e, buf, sizeof buf), "eplb:6");
    CHECK_STR(mp_plan_placement(&c[4], buf, sizeof buf), "replicate-hot:4");
    CHECK_STR(mp_plan_placement(&c[0], buf, sizeof buf), "contiguous");
    /* 128 GPUs twice among those meeting the SLO: the lower p99 wins */
    int best = mp_plan_best(c, n);
    CHECK_INT(best, 5);
    CHECK_INT(mp_plan_scaled_batch(c, n, best, 2, 1), -1); /* no batch 256 in the sweep */
    CHECK_INT(mp_plan_scaled_batch(c, n, best, 1, 2), 4);  /* 128 → 64 with replicate-hot:4 */
    CHECK_INT(mp_plan_scaled_batch(c, n, 2, 2, 1), 3);     /* 64 → 128, same layout and replicas */
    c[5].meets = 0;
    c[6].meets = 0;
    CHECK_INT(mp_plan_best(c, n), 4); /* 192 GPUs twice: replicate-hot:4 has the lower p99 */
    CHECK_DONE();
}
