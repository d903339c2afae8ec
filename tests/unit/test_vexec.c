/* test_vexec.c - the model's traced ranks against its traffic builders: every virtual rank runs
 * the layer's own stages (core/vexec.c), and what they did, read off their records, exchanges and
 * expert FFNs, must be, to the bit, what each dispatch mode's model_traffic counts for the same
 * draws: per rank its tokens, pairs, local pairs, dropped pairs, rows, FFN rows, active experts
 * and bytes per phase and link class, and the exchange's largest volumes, link classes and incast.
 * Layouts of one and two nodes with TP 1 and 2, four placements, three routings, batches from one
 * token to more than the ranks hold evenly, the dynamic and padded dispatches (with and without
 * drops), bf16 and fp8 rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cluster.h"
#include "dispatch.h"
#include "error.h"
#include "placement.h"
#include "routing.h"
#include "vexec.h"
#include "vlayer.h"

static const struct mp_model model = {.name = "test", .hidden = 7168, .ffn = 2048,
                                      .experts = 32, .topk = 4, .shared = 1, .layers = 1};

static int compared;

#define SAME(field, i)                                                                             \
    do {                                                                                           \
        if (a->field[i] != b->field[i]) {                                                          \
            fprintf(stderr, "%s draw %d rank %d: " #field " traced %g, counted %g\n", what, d, i, \
                    (double)a->field[i], (double)b->field[i]);                                     \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

static void compare(const char *what, int d, const struct mp_vtraffic *a,
                    const struct mp_vtraffic *b)
{
    compared++;
    if (a->count_exchange != b->count_exchange || a->nchunks != b->nchunks ||
        a->dedup_hops != b->dedup_hops || a->dispatch_scale != b->dispatch_scale) {
        fprintf(stderr, "%s draw %d: count exchange %d/%d, chunks %d/%d, hops %d/%d, scale %g/%g\n",
                what, d, a->count_exchange, b->count_exchange, a->nchunks, b->nchunks,
                a->dedup_hops, b->dedup_hops, a->dispatch_scale, b->dispatch_scale);
        check_failures++;
    }
    for (int i = 0; i < a->ep; i++) {
        SAME(tokens, i);
        SAME(pairs, i);
        SAME(local, i);
        SAME(dropped, i);
        SAME(rows, i);
        SAME(ffn_rows, i);
        SAME(active, i);
        SAME(bytes_sent, i);
        SAME(dispatch_intra, i);
        SAME(dispatch_inter, i);
        SAME(combine_intra, i);
        SAME(combine_inter, i);
    }
    const struct mp_vexchange *x = &a->a2a, *y = &b->a2a;
    if (x->intra_max != y->intra_max || x->inter_max != y->inter_max || x->incast != y->incast ||
        x->uses_intra != y->uses_intra || x->uses_inter != y->uses_inter) {
        fprintf(stderr, "%s draw %d: exchange traced %g/%g B, incast %d, classes %d%d; counted "
                "%g/%g B, incast %d, classes %d%d\n", what, d, x->intra_max, x->inter_max,
                x->incast, x->uses_intra, x->uses_inter, y->intra_max, y->inter_max, y->incast,
                y->uses_intra, y->uses_inter);
        check_failures++;
    }
}

int main(void)
{
    static const struct { int tp, ep, gpn; } layouts[] = {{1, 4, 2}, {2, 4, 4}, {1, 8, 4}, {1, 1, 8}};
    static const char *placements[] = {"contiguous", "round-robin", "replicate-hot:2", "eplb:6"};
    static const char *routings[] = {"uniform", "zipf:1.2", "hot:2:10"};
    static const char *dispatches[] = {"dynamic", "padded", "padded:0.5"};
    static const long batches[] = {1, 13, 64};
    struct mp_cluster cl;
    CHECK_INT(mp_cluster_resolve("h100-ndr", &cl), MP_OK);
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
        for (size_t ri = 0; ri < sizeof routings / sizeof *routings; ri++) {
            int tp = layouts[li].tp, ep = layouts[li].ep;
            cl.gpus_per_node = layouts[li].gpn;
            struct mp_routing r;
            CHECK_INT(mp_routing_parse(routings[ri], model.experts, model.topk, 5, &r), MP_OK);
            for (size_t pi = 0; pi < sizeof placements / sizeof *placements; pi++) {
                struct mp_placement pl;
                if (mp_placement_build(placements[pi], model.experts, ep, r.prob, &pl) != MP_OK)
                    continue; /* eplb:6 needs more slots than one rank: not this layout */
                CHECK_INT(mp_placement_pack_nodes(&pl, tp, cl.gpus_per_node), MP_OK);
                for (size_t di = 0; di < sizeof dispatches / sizeof *dispatches; di++)
                    for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++)
                        for (int fp8 = 0; fp8 < 2; fp8++) {
                            struct mp_point pt = {.batch = batches[bi], .seq = 1, .routing = &r,
                                                  .placement = &pl, .iters = 2, .warmup = 1,
                                                  .dispatch_dtype = fp8 ? MP_DTYPE_FP8
                                                                        : MP_DTYPE_BF16};
                            CHECK_INT(mp_dispatch_parse(dispatches[di], &pt.dispatch,
                                                        &pt.dispatch_arg), MP_OK);
                            char what[160];
                            snprintf(what, sizeof what, "tp%dep%d/%d %s %s %s batch %ld %s", tp,
                                     ep, cl.gpus_per_node, routings[ri], placements[pi],
                                     dispatches[di], batches[bi], fp8 ? "fp8" : "bf16");
                            struct mp_vtraffic *a = NULL, *b = NULL;
                            int na = 0, nb = 0;
                            CHECK_INT(mp_vexec_build(&cl, &model, tp, ep, 7, &pt, &a, &na), MP_OK);
                            CHECK_INT(mp_vtraffic_build(&cl, &model, tp, ep, 7, &pt, &b, &nb),
                                      MP_OK);
                            CHECK_INT(na, nb);
                            for (int d = 0; d < na && d < nb && a && b; d++)
                                compare(what, d, &a[d], &b[d]);
                            mp_vtraffic_free(a, na);
                            mp_vtraffic_free(b, nb);
                        }
                mp_placement_free(&pl);
            }
            mp_routing_free(&r);
        }
    printf("%d draws compared\n", compared);
    CHECK(compared > 500);
    CHECK_DONE();
}
