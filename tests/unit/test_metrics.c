/* test_metrics.c - the per-iteration metrics of docs/METRICS.md on hand-computed rank records. */
#include <math.h>

#include "check.h"
#include "metrics.h"

/* wait_ratio on tp2ep2 (rank = ep_rank·2 + tp_rank): the TP reduce waits within (0,1) and (2,3),
 * the combine within the EP groups (0,2) and (1,3); a wait is at most its phase's length. */
static void check_wait_groups(void)
{
    struct mp_rank_iter r[4] = {{.ffn = 10, .tp_reduce = 5, .combine = 50},
                                {.ffn = 30, .tp_reduce = 5, .combine = 50},
                                {.ffn = 20, .tp_reduce = 5, .combine = 50},
                                {.ffn = 20, .tp_reduce = 5, .combine = 50}};
    struct mp_iter_metrics m;
    mp_metrics_iter(r, 4, 2, &m);
    /* TP reduce: rank 0 starts at 10, rank 1 at 30: 20 capped at 5; ranks 2 and 3 together.
     * combine: ranks 0 and 2 start at 15 and 25 (0 waits 10), ranks 1 and 3 at 35 and 25 (3
     * waits 10) */
    CHECK_NEAR(m.layer_us, 85, 1e-12);
    CHECK_NEAR(m.wait_ratio, (5 + 10 + 10) / (4 * 85.0), 1e-12);
    /* the same waits per rank and phase (notify, dispatch, TP reduce, combine) */
    double w[4 * MP_WAIT_PHASES];
    CHECK_INT(mp_metrics_rank_waits(r, 4, 2, w), 0);
    const double want[4 * MP_WAIT_PHASES] = {0, 0, 5, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10};
    for (int i = 0; i < 4 * MP_WAIT_PHASES; i++)
        CHECK_NEAR(w[i], want[i], 1e-12);
    CHECK_INT(mp_metrics_rank_waits(r, 4, 3, w), -1); /* tp 3 does not divide 4 ranks */
    /* identical ranks wait for nobody */
    for (int i = 0; i < 4; i++)
        r[i].ffn = 20;
    mp_metrics_iter(r, 4, 2, &m);
    CHECK_NEAR(m.wait_ratio, 0, 0);
}

int main(void)
{
    check_wait_groups();
    /* rank 0: q1 d10 f100 t0 c9 = 120; rank 1: q2 d50 f40 t0 c20 = 112 */
    struct mp_rank_iter r[2] = {
        {.route = 1, .dispatch = 10, .ffn = 100, .tp_reduce = 0, .combine = 9, .tokens = 4,
         .rows = 12, .ffn_rows = 12, .pairs = 8, .local_pairs = 6, .bytes_sent = 1000,
         .dispatch_intra = 300, .dispatch_inter = 250, .combine_intra = 300, .combine_inter = 150},
        {.route = 2, .dispatch = 50, .ffn = 40, .tp_reduce = 0, .combine = 20, .tokens = 4,
         .rows = 4, .ffn_rows = 4, .pairs = 8, .local_pairs = 2, .bytes_sent = 3000,
         .dispatch_intra = 1000, .combine_intra = 2000, .dropped = 3},
    };
    struct mp_iter_metrics m;
    mp_metrics_iter(r, 2, 1, &m);
    CHECK_NEAR(m.layer_us, 120, 1e-12);
    CHECK_NEAR(m.ffn_us, 100, 1e-12);
    CHECK_NEAR(m.ffn_mean_us, 70, 1e-12);
    CHECK_NEAR(m.comm_us, 120 - 100 - 2, 1e-12);       /* layer − ffn − max q */
    CHECK_NEAR(m.comm_comp_ratio, 18.0 / 100, 1e-12);
    CHECK_NEAR(m.bubble_ratio, (0 + 60) / (2 * 120.0), 1e-12);
    /* waits in the collectives: dispatch starts at 1 (rank 0) and 2 (rank 1): rank 0 waits 1;
     * combine starts at 111 and 92: rank 1 waits 19 (of its 20) */
    CHECK_NEAR(m.wait_ratio, (1 + 19) / (2 * 120.0), 1e-12);
    CHECK_NEAR(m.load_imbalance, 12 / 8.0, 1e-12);
    CHECK_NEAR(m.local_hit_rate, 8 / 16.0, 1e-12);
    CHECK_NEAR(m.bytes_rank_max, 3000, 1e-12);
    CHECK_NEAR(m.bytes_internode, 400, 1e-12);
    CHECK_NEAR(m.bytes_intranode, 300 + 300 + 1000 + 2000, 1e-12);
    CHECK_NEAR(m.dispatch_bytes_intranode, 1300, 0);
    CHECK_NEAR(m.dispatch_bytes_internode, 250, 0);
    CHECK_NEAR(m.combine_bytes_intranode, 2300, 0);
    CHECK_NEAR(m.combine_bytes_internode, 150, 0);
    CHECK_NEAR(m.notify_us, 0, 0);
    CHECK_NEAR(m.dispatch_us, 50, 1e-12);
    CHECK_NEAR(m.combine_us, 20, 1e-12);
    CHECK_NEAR(m.drop_rate, 3 / 16.0, 1e-12);          /* Σ dropped / Σ pairs */
    /* the slowest rank of both phases is rank 1: its bytes per class over its phase time (B/µs
     * / 1e3 = GB/s); it sent nothing across nodes, though rank 0 did: 0, not empty */
    CHECK_NEAR(m.dispatch_intranode_GBps, 1000 / 50.0 / 1e3, 1e-15);
    CHECK_NEAR(m.dispatch_internode_GBps, 0, 0);
    CHECK_NEAR(m.combine_intranode_GBps, 2000 / 20.0 / 1e3, 1e-15);
    CHECK_NEAR(m.combine_internode_GBps, 0, 0);
    mp_metrics_pipelined(&m); /* a pipelined point's phases are not the bytes' time */
    CHECK(isnan(m.dispatch_intranode_GBps) && isnan(m.combine_internode_GBps));

    /* the count exchange is a phase of its own: in the layer time, not in the dispatch; the
     * slowest dispatch is rank 0 now, whose bandwidth counts; no inter-node bytes: empty */
    r[0].notify = 15;
    r[0].dispatch = 60;
    r[0].dispatch_inter = r[0].combine_inter = 0;
    mp_metrics_iter(r, 2, 1, &m);
    CHECK_NEAR(m.notify_us, 15, 0);
    CHECK_NEAR(m.dispatch_us, 60, 0);
    CHECK_NEAR(m.layer_us, 1 + 15 + 60 + 100 + 0 + 9, 1e-12);
    CHECK_NEAR(mp_rank_layer_us(&r[0]), m.layer_us, 1e-12);
    CHECK_NEAR(m.dispatch_intranode_GBps, 300 / 60.0 / 1e3, 1e-15);
    CHECK(isnan(m.dispatch_internode_GBps) && isnan(m.combine_internode_GBps));
    CHECK_STR(mp_iter_metric_names[0], "layer_us");
    CHECK_STR(mp_iter_metric_names[MP_ITER_METRICS - 1], "fetch_us");
    CHECK(isnan(m.cache_hit_rate) && m.fetch_bytes == 0 && m.fetch_us == 0); /* no cache */
    /* --dedup node's hop times are those of each phase's slowest rank (rank 0's dispatch of 60,
     * rank 1's combine of 20) */
    r[0].dispatch_inter_us = 30, r[0].dispatch_intra_us = 20;
    r[1].dispatch_inter_us = r[1].dispatch_intra_us = 1;
    r[0].combine_inter_us = r[0].combine_intra_us = 2;
    r[1].combine_inter_us = 12, r[1].combine_intra_us = 5;
    mp_metrics_iter(r, 2, 1, &m);
    CHECK_NEAR(m.dispatch_inter_us, 30, 0);
    CHECK_NEAR(m.dispatch_intra_us, 20, 0);
    CHECK_NEAR(m.combine_inter_us, 12, 0);
    CHECK_NEAR(m.combine_intra_us, 5, 0);
    CHECK(m.dispatch_inter_us + m.dispatch_intra_us <= m.dispatch_us);
    CHECK_DONE();
}
