/* test_vexec.c - the model's traced ranks against its traffic builders: every virtual rank runs
 * the layer's own stages (core/cluster_model/vexec.c), and what they did, read off their records, exchanges and
 * expert FFNs, must be, to the bit, what each dispatch mode's model_traffic counts for the same
 * draws: per rank its tokens, pairs, local pairs, dropped pairs, rows, FFN rows, active experts
 * and bytes per phase and link class, per chunk its rows and active experts, and every exchange
 * (the layer's, each deduplicated hop's out and back, their metadata, each chunk's) in its largest
 * volumes, link classes and incast. The dedup modes (rank, node) unpipelined, padded and in 3
 * chunks, and the dynamic dispatch in 3 chunks, too; gate routing (replayed with the model's
 * draws of it); and with an expert cache, each local expert's rows in each of a fresh draw per
 * step.
 * Layouts of one and two nodes with TP 1 and 2, four placements, three routings, batches from one
 * token to more than the ranks hold evenly, the dynamic and padded dispatches (with and without
 * drops), bf16 and fp8 rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dedup.h"
#include "cluster.h"
#include "dispatch.h"
#include "error.h"
#include "expert_cache.h"
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

static void same_exchange(const char *what, int d, const char *name, int i,
                          const struct mp_vexchange *x, const struct mp_vexchange *y)
{
    if (x->intra_max != y->intra_max || x->inter_max != y->inter_max || x->incast != y->incast ||
        x->uses_intra != y->uses_intra || x->uses_inter != y->uses_inter) {
        fprintf(stderr, "%s draw %d: %s %d traced %g/%g B, incast %d, classes %d%d; counted "
                "%g/%g B, incast %d, classes %d%d\n", what, d, name, i, x->intra_max,
                x->inter_max, x->incast, x->uses_intra, x->uses_inter, y->intra_max,
                y->inter_max, y->incast, y->uses_intra, y->uses_inter);
        check_failures++;
    }
}

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
    for (int k = 0; k < a->nchunks && a->nchunks > 1; k++)
        for (int i = 0; i < a->ep; i++) {
            SAME(chunk_rows, k * a->ep + i);
            SAME(chunk_active, k * a->ep + i);
        }
    if (!a->used != !b->used || a->max_local != b->max_local) {
        fprintf(stderr, "%s draw %d: cached experts traced %s (%d slots), counted %s (%d)\n", what,
                d, a->used ? "kept" : "absent", a->max_local, b->used ? "kept" : "absent",
                b->max_local);
        check_failures++;
    }
    for (int i = 0; a->used && b->used && i < a->ep * a->max_local; i++) {
        SAME(used, i);
        SAME(used_rows, i);
    }
    same_exchange(what, d, "a2a", 0, &a->a2a, &b->a2a);
    for (int h = 0; h < a->dedup_hops; h++) {
        same_exchange(what, d, "hop", h, &a->hop[h], &b->hop[h]);
        same_exchange(what, d, "back", h, &a->back[h], &b->back[h]);
        if (a->nchunks > 1)
            same_exchange(what, d, "meta", h, &a->meta[h], &b->meta[h]);
    }
    for (int k = 0; k < a->nchunks && a->nchunks > 1; k++) {
        if (!a->dedup_hops) {
            same_exchange(what, d, "chunk", k, &a->chunk_a2a[k], &b->chunk_a2a[k]);
            continue;
        }
        for (int h = 0; h < a->dedup_hops; h++) {
            same_exchange(what, d, "chunk hop", 2 * k + h, &a->chunk_hop[2 * k + h],
                          &b->chunk_hop[2 * k + h]);
            same_exchange(what, d, "chunk back", 2 * k + h, &a->chunk_back[2 * k + h],
                          &b->chunk_back[2 * k + h]);
        }
    }
}

int main(void)
{
    static const struct { int tp, ep, gpn; } layouts[] = {{1, 4, 2}, {2, 4, 4}, {1, 8, 4}, {1, 1, 8}};
    static const char *placements[] = {"contiguous", "round-robin", "replicate-hot:2", "eplb:6"};
    static const char *routings[] = {"uniform", "zipf:1.2", "hot:2:10", "gate"};
    static const char *dispatches[] = {"dynamic", "padded", "padded:0.5"};
#ifdef __OPTIMIZE__
    static const long batches[] = {1, 13, 64};
#else /* an unoptimised (debug) build: the largest batch, most of the traced ranks' time, left out */
    static const long batches[] = {1, 13};
#endif
    struct mp_cluster cl;
    CHECK_INT(mp_cluster_resolve("h100-ndr", &cl), MP_OK);
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
        for (size_t ri = 0; ri < sizeof routings / sizeof *routings; ri++) {
            int tp = layouts[li].tp, ep = layouts[li].ep;
            cl.gpus_per_node = layouts[li].gpn;
            struct mp_routing r;
            CHECK_INT(mp_routing_parse(routings[ri], model.experts, model.topk, 5, &r), MP_OK);
            /* each layout meets every placement and every routing, not every pair of them */
            for (size_t pi = (li + ri) % 4; pi == (li + ri) % 4; pi++) {
                struct mp_placement pl;
                if (mp_placement_build(placements[pi], model.experts, ep, r.prob, &pl) != MP_OK)
                    continue; /* eplb:6 needs more slots than one rank: not this layout */
                CHECK_INT(mp_placement_pack_nodes(&pl, tp, cl.gpus_per_node), MP_OK);
                for (size_t di = 0; di < sizeof dispatches / sizeof *dispatches; di++)
                    for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++)
                        for (int v = 0; v < 8; v++) {
                            /* bf16 and fp8 rows of each dedup mode, unpipelined and in 3 chunks
                             * (padded has no pipelined form: refused alike) */
                            int fp8 = v & 1, dedup = (v >> 1) % 3, overlap = v >= 6 ? 3 : 1;
                            if (v == 7 || (bi == 0 && v >= 4) || (fp8 && bi != 1))
                                continue; /* fp8 rows: the odd batch */
                            struct mp_point pt = {.batch = batches[bi], .seq = 1, .routing = &r,
                                                  .placement = &pl, .iters = 2, .warmup = 1,
                                                  .dispatch_dtype = fp8 ? MP_DTYPE_FP8
                                                                        : MP_DTYPE_BF16,
                                                  .dedup = dedup, .overlap = overlap};
                            if (v == 6)
                                pt.dedup = bi == 1 ? MP_DEDUP_NODE : bi == 2 ? MP_DEDUP_RANK
                                                                             : MP_DEDUP_PAIR;
                            CHECK_INT(mp_dispatch_parse(dispatches[di], &pt.dispatch,
                                                        &pt.dispatch_arg), MP_OK);
                            char what[200];
                            snprintf(what, sizeof what, "tp%dep%d/%d %s %s %s batch %ld %s %s "
                                     "overlap %d", tp, ep, cl.gpus_per_node, routings[ri],
                                     placements[pi], dispatches[di], batches[bi],
                                     fp8 ? "fp8" : "bf16", mp_dedup_choices[pt.dedup], overlap);
                            struct mp_vtraffic *a = NULL, *b = NULL;
                            int na = 0, nb = 0;
                            int rb = mp_vtraffic_build(&cl, &model, tp, ep, 7, &pt, &b, &nb);
                            int ra = rb == MP_OK ? mp_vexec_build(&cl, &model, tp, ep, 7, &pt, &a,
                                                                  &na)
                                                 : rb;
                            if (ra != rb)
                                fprintf(stderr, "%s: traced %d, counted %d\n", what, ra, rb);
                            CHECK_INT(ra, rb);
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
    /* a mode without a traffic builder is modelled by the traced ranks: the same traffic as the
     * builder of the mode it copies */
    struct mp_dispatch_mode bare_dynamic = mp_dispatch_dynamic, bare_padded = mp_dispatch_padded;
    bare_dynamic.model_traffic = bare_padded.model_traffic = NULL;
    bare_dynamic.pipelined = NULL; /* so the copy itself runs, not dynamic's pipelined form */
    cl.gpus_per_node = 2;
    struct mp_routing r;
    CHECK_INT(mp_routing_parse("zipf:1.2", model.experts, model.topk, 5, &r), MP_OK);
    struct mp_placement pl;
    CHECK_INT(mp_placement_build("replicate-hot:2", model.experts, 4, r.prob, &pl), MP_OK);
    CHECK_INT(mp_placement_pack_nodes(&pl, 1, cl.gpus_per_node), MP_OK);
    const struct mp_dispatch_mode *bare[] = {&bare_dynamic, &bare_padded};
    const struct mp_dispatch_mode *built[] = {&mp_dispatch_dynamic, &mp_dispatch_padded};
    for (int i = 0; i < 2; i++) {
        struct mp_point pt = {.batch = 40, .seq = 1, .routing = &r, .placement = &pl, .iters = 3,
                              .dispatch = bare[i], .dispatch_arg = i ? 0.8 : 0};
        struct mp_vtraffic *a = NULL, *b = NULL;
        int na = 0, nb = 0;
        CHECK_INT(mp_vtraffic_build(&cl, &model, 1, 4, 7, &pt, &a, &na), MP_OK);
        pt.dispatch = built[i];
        CHECK_INT(mp_vtraffic_build(&cl, &model, 1, 4, 7, &pt, &b, &nb), MP_OK);
        CHECK_INT(na, nb);
        for (int d = 0; d < na && d < nb && a && b; d++)
            compare(i ? "padded without a builder" : "dynamic without a builder", d, &a[d], &b[d]);
        mp_vtraffic_free(a, na);
        mp_vtraffic_free(b, nb);
    }
    /* an expert cache: the traced ranks run without it and read each local expert's rows off
     * their FFNs, for the model's cache timeline; a fresh draw every step (12 draws here) */
    for (int i = 0; i < 4; i++) {
        struct mp_point pt = {.batch = i < 2 ? 6 : 48, .seq = 1, .routing = &r, .placement = &pl,
                              .iters = 10, .warmup = 2, .dispatch = built[i % 2],
                              .dispatch_arg = i % 2 ? 0.8 : 0};
        CHECK_INT(mp_cache_spec_parse(i < 2 ? "2" : "3:lfu", &pt.cache), MP_OK);
        struct mp_vtraffic *a = NULL, *b = NULL;
        int na = 0, nb = 0;
        CHECK_INT(mp_vexec_build(&cl, &model, 1, 4, 7, &pt, &a, &na), MP_OK);
        CHECK_INT(mp_vtraffic_build(&cl, &model, 1, 4, 7, &pt, &b, &nb), MP_OK);
        CHECK(na == nb && na == 12);
        for (int d = 0; d < na && d < nb && a && b; d++)
            compare(i % 2 ? "padded with a cache" : "dynamic with a cache", d, &a[d], &b[d]);
        mp_vtraffic_free(a, na);
        mp_vtraffic_free(b, nb);
    }
    mp_placement_free(&pl);
    mp_routing_free(&r);
    printf("%d draws compared\n", compared);
    CHECK(compared > 1000);
    CHECK_DONE();
}
