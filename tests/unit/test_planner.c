/* test_planner.c - the planner's findings on hand-made candidates: batch cap, the cheapest plan
 * meeting the SLO, the doubled-batch comparison and the remedies ranking (placements and overlap);
 * and pipelined candidates evaluated through the model. */
#include <stdlib.h>

#include "check.h"
#include "dedup.h"
#include "error.h"
#include "capacity_plan.h"

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

    /* overlap is part of a setup: its own batch cap, its own label */
    struct mp_plan_cand o2 = c[2];
    o2.overlap = 2;
    o2.ratio = 0.7;
    CHECK(!mp_plan_same_setup(&o2, &c[2]));
    struct mp_plan_cand o1 = c[2];
    o1.overlap = 1; /* 0 and 1 both mean no pipeline */
    CHECK(mp_plan_same_setup(&o1, &c[2]));
    CHECK_STR(mp_plan_remedy(&o2, buf, sizeof buf), "overlap 2");
    CHECK_STR(mp_plan_remedy(&c[0], buf, sizeof buf), "contiguous");
    struct mp_plan_cand both = c[4];
    both.overlap = 4;
    CHECK_STR(mp_plan_remedy(&both, buf, sizeof buf), "replicate-hot:4 + overlap 4");

    /* remedies at tp4ep16 batch 64: against contiguous without overlap (c[2], 100 µs), the other
     * setups there by time saved, whatever the layout elsewhere or the batch */
    struct mp_plan_cand r[] = {
        {.tp = 4, .ep = 16, .batch = 64, .layer_us = 100},                            /* base */
        {.tp = 4, .ep = 16, .batch = 64, .replicate = 4, .layer_us = 80},
        {.tp = 4, .ep = 16, .batch = 64, .overlap = 2, .layer_us = 70},
        {.tp = 4, .ep = 16, .batch = 64, .overlap = 4, .layer_us = 110},
        {.tp = 4, .ep = 16, .batch = 64, .eplb = 12, .overlap = 2, .layer_us = 60},
        {.tp = 4, .ep = 16, .batch = 128, .overlap = 2, .layer_us = 10},               /* batch */
        {.tp = 2, .ep = 16, .batch = 64, .overlap = 2, .layer_us = 10},                /* layout */
        {.tp = 4, .ep = 16, .batch = 64, .eplb = 12, .layer_us = 75},
    };
    int base, order[8];
    CHECK_INT(mp_plan_remedies(r, 8, &r[2], &base, order, 8), 5);
    CHECK_INT(base, 0);
    static const int ranked[] = {4, 2, 7, 1, 3};
    for (int i = 0; i < 5; i++)
        CHECK_INT(order[i], ranked[i]);
    CHECK_INT(mp_plan_remedies(r, 8, &r[5], &base, order, 8), 1); /* batch 128: only overlap 2, */
    CHECK_INT(base, -1); /* no contiguous run without overlap to rank it against */
    CHECK_INT(mp_plan_remedies(r, 8, &r[0], &base, order, 2), 2); /* room for two */

    /* dedup is part of a setup and of its label; a dedup mode is a remedy, and the modes at one
     * layout, batch, placement and overlap rank fastest first */
    struct mp_plan_cand dd[] = {
        {.tp = 1, .ep = 16, .batch = 64, .layer_us = 100},                            /* pair */
        {.tp = 1, .ep = 16, .batch = 64, .dedup = MP_DEDUP_RANK, .layer_us = 90},
        {.tp = 1, .ep = 16, .batch = 64, .dedup = MP_DEDUP_NODE, .layer_us = 95},
        {.tp = 1, .ep = 16, .batch = 64, .replicate = 2, .dedup = MP_DEDUP_NODE, .layer_us = 50},
        {.tp = 1, .ep = 16, .batch = 128, .dedup = MP_DEDUP_NODE, .layer_us = 10},
    };
    CHECK(!mp_plan_same_setup(&dd[0], &dd[1]));
    CHECK_STR(mp_plan_remedy(&dd[1], buf, sizeof buf), "dedup rank");
    CHECK_STR(mp_plan_remedy(&dd[3], buf, sizeof buf), "replicate-hot:2 + dedup node");
    struct mp_plan_cand odd = dd[2];
    odd.overlap = 2;
    CHECK_STR(mp_plan_remedy(&odd, buf, sizeof buf), "overlap 2 + dedup node");
    CHECK_INT(mp_plan_dedup_modes(dd, 5, &dd[0], order, 8), 3);
    CHECK_INT(order[0], 1);
    CHECK_INT(order[1], 2);
    CHECK_INT(order[2], 0);
    CHECK_INT(mp_plan_remedies(dd, 5, &dd[1], &base, order, 8), 3);
    CHECK_INT(base, 0);
    CHECK_INT(order[0], 3);

    /* pipelined candidates through the model: every setup at every depth, overlap 1 the same as
     * a sweep without --overlap, and at the first seed's setting overlap 2 saves time at batch 128 */
    struct mp_plan_req q = {0};
    struct mp_routing rt;
    CHECK_INT(mp_model_resolve("seed-k3", &q.model), MP_OK);
    CHECK_INT(mp_cluster_resolve("h100-ndr", &q.cluster), MP_OK);
    CHECK_INT(mp_routing_parse("hot:4:15", q.model.experts, q.model.topk, 1, &rt), MP_OK);
    static const long batches[] = {128};
    static const int tps[] = {4}, eps[] = {16}, reps[] = {0}, ovl[] = {1, 2, 4};
    q.routing = &rt;
    q.batches = batches;
    q.nbatch = 1;
    q.seq = 1;
    q.tps = tps;
    q.eps = eps;
    q.reps = reps;
    q.ntp = q.nep = q.nrep = 1;
    q.max_gpus = 4096;
    q.iters = 4;
    q.seed = 1;
    struct mp_plan_cand *plain = NULL, *pipe = NULL;
    int np = 0, nq = 0;
    CHECK_INT(mp_plan_evaluate(&q, &plain, &np), MP_OK);
    q.overlaps = ovl;
    q.noverlap = 3;
    CHECK_INT(mp_plan_evaluate(&q, &pipe, &nq), MP_OK);
    CHECK_INT(np, 1);
    CHECK_INT(nq, 3);
    if (np == 1 && nq == 3) {
        CHECK_INT(plain[0].overlap, 1);
        CHECK_INT(pipe[0].overlap, 1);
        CHECK_INT(pipe[1].overlap, 2);
        CHECK_INT(pipe[2].overlap, 4);
        CHECK(pipe[0].layer_us == plain[0].layer_us);
        CHECK(pipe[1].layer_us < pipe[0].layer_us);
        /* the same experts, weight-bound: the chunks' parts add up to the whole (to rounding) */
        CHECK(fabs(pipe[1].ffn_us - pipe[0].ffn_us) <= 1e-9 * pipe[0].ffn_us);
        CHECK_INT(mp_plan_remedies(pipe, nq, &pipe[0], &base, order, 8), 2);
        CHECK_INT(order[0], 1);
    }
    free(plain);
    free(pipe);
    mp_routing_free(&rt);
    CHECK_DONE();
}
