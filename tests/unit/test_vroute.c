/* test_vroute.c - the model's dynamic traffic routes every pair where the placement sends it: for
 * contiguous, round-robin, replicate-hot and eplb placements on two nodes, each rank's received
 * rows, its pairs served locally, its active experts and the rows between every pair of ranks
 * equal a count made with mp_placement_dest and mp_placement_local_index alone; the exchange the
 * traffic builder sums while routing (largest volumes per link class, incast, every rank's bytes
 * per phase and class) is, to the bit, mp_vexchange_of's from those rows. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cluster.h"
#include "error.h"
#include "placement.h"
#include "dispatch_plan.h"
#include "routing.h"
#include "vlayer.h"

#define EP 8
#define T 203

static const struct mp_model model = {.name = "test", .hidden = 256, .ffn = 256, .experts = 32,
                                      .topk = 4, .shared = 0, .layers = 1};

int main(void)
{
    static const char *specs[] = {"contiguous", "round-robin", "replicate-hot:4", "eplb:12"};
    struct mp_cluster cl;
    CHECK_INT(mp_cluster_resolve("h100-ndr", &cl), MP_OK);
    cl.gpus_per_node = EP / 2; /* two nodes: replicas on the source's node are preferred */
    struct mp_routing r;
    CHECK_INT(mp_routing_parse("zipf:1.2", model.experts, model.topk, 3, &r), MP_OK);
    int32_t *ids = malloc(sizeof *ids * T * model.topk);
    float *w = malloc(sizeof *w * T * model.topk);
    for (size_t s = 0; s < sizeof specs / sizeof *specs; s++) {
        struct mp_placement pl;
        CHECK_INT(mp_placement_build(specs[s], model.experts, EP, r.prob, &pl), MP_OK);
        CHECK_INT(mp_placement_pack_nodes(&pl, 1, cl.gpus_per_node), MP_OK);
        struct mp_point pt = {.batch = T, .seq = 1, .routing = &r, .placement = &pl, .iters = 3};
        struct mp_vtraffic *t = NULL;
        int ndraws = 0;
        CHECK_INT(mp_vtraffic_build(&cl, &model, 1, EP, 9, &pt, &t, &ndraws), MP_OK);
        for (int d = 0; d < ndraws; d++) {
            double rows[EP] = {0}, local[EP] = {0}, to[EP][EP] = {{0}};
            unsigned char used[EP][64] = {{0}};
            int active[EP] = {0};
            mp_routing_draw(&r, 9, d, T, 0, T, ids, w);
            for (int e = 0; e < EP; e++) {
                long tok0, n = mp_token_split(T, EP, e, &tok0);
                for (long i = tok0 * model.topk; i < (tok0 + n) * model.topk; i++) {
                    int p = mp_placement_dest(&pl, e, ids[i], i / model.topk);
                    int li = mp_placement_local_index(&pl, p, ids[i]);
                    rows[p]++;
                    local[e] += p == e;
                    to[e][p]++;
                    active[p] += !used[p][li];
                    used[p][li] = 1;
                }
            }
            double row = model.hidden * cl.elem_bytes, dense[EP * EP];
            for (int e = 0; e < EP; e++)
                for (int p = 0; p < EP; p++)
                    dense[e * EP + p] = to[e][p];
            struct mp_vexchange x;
            mp_vexchange_of(dense, EP, 1, cl.gpus_per_node, row, &x);
            CHECK(x.intra_max == t[d].a2a.intra_max && x.inter_max == t[d].a2a.inter_max);
            CHECK_INT(t[d].a2a.incast, x.incast);
            CHECK_INT(t[d].a2a.uses_intra, x.uses_intra);
            CHECK_INT(t[d].a2a.uses_inter, x.uses_inter);
            CHECK(x.incast > 1); /* two nodes of four ranks: several senders across */
            for (int p = 0; p < EP; p++) {
                if (t[d].rows[p] != rows[p] || t[d].local[p] != local[p] ||
                    t[d].active[p] != active[p]) {
                    fprintf(stderr, "%s draw %d rank %d: rows %g local %g active %d, expected "
                            "%g %g %d\n", specs[s], d, p, t[d].rows[p], t[d].local[p],
                            t[d].active[p], rows[p], local[p], active[p]);
                    check_failures++;
                }
                /* the bytes each rank sends and receives follow the rows between ranks, on its
                 * node (ranks of one half) and across */
                double sent[2] = {0, 0}, got[2] = {0, 0};
                for (int q = 0; q < EP; q++)
                    if (q != p) {
                        int across = q / cl.gpus_per_node != p / cl.gpus_per_node;
                        sent[across] += to[p][q];
                        got[across] += to[q][p];
                    }
                CHECK(t[d].dispatch_intra[p] == sent[0] * row);
                CHECK(t[d].dispatch_inter[p] == sent[1] * row);
                CHECK(t[d].combine_intra[p] == got[0] * row);
                CHECK(t[d].combine_inter[p] == got[1] * row);
                CHECK(t[d].bytes_sent[p] == (sent[0] + sent[1] + got[0] + got[1]) * row);
            }
        }
        mp_vtraffic_free(t, ndraws);
        mp_placement_free(&pl);
    }
    free(ids);
    free(w);
    mp_routing_free(&r);
    CHECK_DONE();
}
