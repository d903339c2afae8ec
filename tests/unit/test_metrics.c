/* test_metrics.c - the per-iteration metrics of docs/METRICS.md on hand-computed rank records. */
#include "check.h"
#include "metrics.h"

int main(void)
{
    /* rank 0: q1 d10 f100 t0 c9 = 120; rank 1: q2 d50 f40 t0 c20 = 112 */
    struct mp_rank_iter r[2] = {
        {.route = 1, .dispatch = 10, .ffn = 100, .tp_reduce = 0, .combine = 9, .tokens = 4,
         .rows = 12, .ffn_rows = 12, .pairs = 8, .local_pairs = 6, .bytes_sent = 1000,
         .bytes_internode = 400},
        {.route = 2, .dispatch = 50, .ffn = 40, .tp_reduce = 0, .combine = 20, .tokens = 4,
         .rows = 4, .ffn_rows = 4, .pairs = 8, .local_pairs = 2, .bytes_sent = 3000,
         .bytes_internode = 0, .dropped = 3},
    };
    struct mp_iter_metrics m;
    mp_metrics_iter(r, 2, &m);
    CHECK_NEAR(m.layer_us, 120, 1e-12);
    CHECK_NEAR(m.ffn_us, 100, 1e-12);
    CHECK_NEAR(m.ffn_mean_us, 70, 1e-12);
    CHECK_NEAR(m.comm_us, 120 - 100 - 2, 1e-12);       /* layer − ffn − max q */
    CHECK_NEAR(m.comm_comp_ratio, 18.0 / 100, 1e-12);
    CHECK_NEAR(m.bubble_ratio, (0 + 60) / (2 * 120.0), 1e-12);
    CHECK_NEAR(m.load_imbalance, 12 / 8.0, 1e-12);
    CHECK_NEAR(m.local_hit_rate, 8 / 16.0, 1e-12);
    CHECK_NEAR(m.bytes_rank_max, 3000, 1e-12);
    CHECK_NEAR(m.bytes_internode, 400, 1e-12);
    CHECK_NEAR(m.dispatch_us, 50, 1e-12);
    CHECK_NEAR(m.combine_us, 20, 1e-12);
    CHECK_NEAR(m.drop_rate, 3 / 16.0, 1e-12);          /* Σ dropped / Σ pairs */
    CHECK_STR(mp_iter_metric_names[0], "layer_us");
    CHECK_STR(mp_iter_metric_names[MP_ITER_METRICS - 1], "drop_rate");
    CHECK_DONE();
}
