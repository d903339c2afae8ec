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

/* What the two sides of a comparison are (the traced ranks and the counted traffic, unless a
 * check of the counted paths against each other names them otherwise). */
static const char *left = "traced", *right = "counted";

#define SAME(field, i)                                                                             \
    do {                                                                                           \
        if (a->field[i] != b->field[i]) {                                                          \
            fprintf(stderr, "%s draw %d rank %d: " #field " %s %g, %s %g\n", what, d, i, left,    \
                    (double)a->field[i], right, (double)b->field[i]);                              \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

static void same_exchange(const char *what, int d, const char *name, int i,
                          const struct mp_vexchange *x, const struct mp_vexchange *y)
{
    if (x->intra_max != y->intra_max || x->inter_max != y->inter_max || x->incast != y->incast ||
        x->uses_intra != y->uses_intra || x->uses_inter != y->uses_inter) {
        fprintf(stderr, "%s draw %d: %s %d %s %g/%g B, incast %d, classes %d%d; %s "
                "%g/%g B, incast %d, classes %d%d\n", what, d, name, i, left, x->intra_max,
                x->inter_max, x->incast, x->uses_intra, x->uses_inter, right, y->intra_max,
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
        fprintf(stderr, "%s draw %d: count exchange %d/%d, chunks %d/%d, hops %d/%d, scale %g/%g "
                "(%s/%s)\n",
                what, d, a->count_exchange, b->count_exchange, a->nchunks, b->nchunks,
                a->dedup_hops, b->dedup_hops, a->dispatch_scale, b->dispatch_scale, left, right);
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
        fprintf(stderr, "%s draw %d: cached experts %s %s (%d slots), %s %s (%d)\n", what, d,
                left, a->used ? "kept" : "absent", a->max_local, right,
                b->used ? "kept" : "absent", b->max_local);
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

/* Build point pt both ways (the traced ranks, a; the counted traffic, b) and compare each draw. */
static void traced_point(const struct mp_cluster *cl, int tp, int ep, const struct mp_point *pt,
                         const char *what)
{
    struct mp_vtraffic *a = NULL, *b = NULL;
    int na = 0, nb = 0;
    int rb = mp_vtraffic_build(cl, &model, tp, ep, 7, pt, &b, &nb);
    int ra = rb == MP_OK ? mp_vexec_build(cl, &model, tp, ep, 7, pt, &a, &na) : rb;
    if (ra != rb)
        fprintf(stderr, "%s: traced %d, counted %d\n", what, ra, rb);
    CHECK_INT(ra, rb);
    CHECK_INT(na, nb);
    for (int d = 0; d < na && d < nb && a && b; d++)
        compare(what, d, &a[d], &b[d]);
    mp_vtraffic_free(a, na);
    mp_vtraffic_free(b, nb);
}

/* The traced ranks against the counted traffic over layouts, routings, placements, dispatch
 * modes, batches, dedup forms, chunks and dtypes. */
static void traced_sweep(struct mp_cluster *cl)
{
    static const struct { int tp, ep, gpn; } layouts[] = {
        {1, 4, 2}, {2, 4, 4}, {1, 8, 4}, {1, 1, 8}};
    static const char *placements[] = {"contiguous", "round-robin", "replicate-hot:2", "eplb:6"};
    static const char *routings[] = {"uniform", "zipf:1.2", "hot:2:10", "gate"};
    static const char *dispatches[] = {"dynamic", "padded", "padded:0.5"};
#ifdef __OPTIMIZE__
    static const long batches[] = {1, 13, 64};
#else /* an unoptimised (debug) build: the largest batch, most of the traced ranks' time, out */
    static const long batches[] = {1, 13};
#endif
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
        for (size_t ri = 0; ri < sizeof routings / sizeof *routings; ri++) {
            int tp = layouts[li].tp, ep = layouts[li].ep;
            cl->gpus_per_node = layouts[li].gpn;
            struct mp_routing r;
            CHECK_INT(mp_routing_parse(routings[ri], model.experts, model.topk, 5, &r), MP_OK);
            /* each layout meets every placement and every routing, not every pair of them */
            size_t pi = (li + ri) % 4;
            struct mp_placement pl;
            if (mp_placement_build(placements[pi], model.experts, ep, r.prob, &pl) != MP_OK) {
                mp_routing_free(&r);
                continue; /* eplb:6 needs more slots than one rank: not this layout */
            }
            CHECK_INT(mp_placement_pack_nodes(&pl, tp, cl->gpus_per_node), MP_OK);
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
                                 "overlap %d", tp, ep, cl->gpus_per_node, routings[ri],
                                 placements[pi], dispatches[di], batches[bi],
                                 fp8 ? "fp8" : "bf16", mp_dedup_choices[pt.dedup], overlap);
                        traced_point(cl, tp, ep, &pt, what);
                    }
            mp_placement_free(&pl);
            mp_routing_free(&r);
        }
}

/* A mode without a traffic builder is modelled by the traced ranks: the same traffic as the
 * builder of the mode it copies; and with an expert cache the traced ranks run without it and
 * read each local expert's rows off their FFNs, for the model's cache timeline (a fresh draw
 * every step, 12 draws here). */
static void bare_and_cached(struct mp_cluster *cl)
{
    struct mp_dispatch_mode bare_dynamic = mp_dispatch_dynamic, bare_padded = mp_dispatch_padded;
    bare_dynamic.model_traffic = bare_padded.model_traffic = NULL;
    bare_dynamic.pipelined = NULL; /* so the copy itself runs, not dynamic's pipelined form */
    cl->gpus_per_node = 2;
    struct mp_routing r;
    CHECK_INT(mp_routing_parse("zipf:1.2", model.experts, model.topk, 5, &r), MP_OK);
    struct mp_placement pl;
    CHECK_INT(mp_placement_build("replicate-hot:2", model.experts, 4, r.prob, &pl), MP_OK);
    CHECK_INT(mp_placement_pack_nodes(&pl, 1, cl->gpus_per_node), MP_OK);
    const struct mp_dispatch_mode *bare[] = {&bare_dynamic, &bare_padded};
    const struct mp_dispatch_mode *built[] = {&mp_dispatch_dynamic, &mp_dispatch_padded};
    for (int i = 0; i < 2; i++) {
        struct mp_point pt = {.batch = 40, .seq = 1, .routing = &r, .placement = &pl, .iters = 3,
                              .dispatch = bare[i], .dispatch_arg = i ? 0.8 : 0};
        struct mp_vtraffic *a = NULL, *b = NULL;
        int na = 0, nb = 0;
        CHECK_INT(mp_vtraffic_build(cl, &model, 1, 4, 7, &pt, &a, &na), MP_OK);
        pt.dispatch = built[i];
        CHECK_INT(mp_vtraffic_build(cl, &model, 1, 4, 7, &pt, &b, &nb), MP_OK);
        CHECK_INT(na, nb);
        for (int d = 0; d < na && d < nb && a && b; d++)
            compare(i ? "padded without a builder" : "dynamic without a builder", d, &a[d], &b[d]);
        mp_vtraffic_free(a, na);
        mp_vtraffic_free(b, nb);
    }
    for (int i = 0; i < 4; i++) {
        struct mp_point pt = {.batch = i < 2 ? 6 : 48, .seq = 1, .routing = &r, .placement = &pl,
                              .iters = 10, .warmup = 2, .dispatch = built[i % 2],
                              .dispatch_arg = i % 2 ? 0.8 : 0};
        CHECK_INT(mp_cache_spec_parse(i < 2 ? "2" : "3:lfu", &pt.cache), MP_OK);
        struct mp_vtraffic *a = NULL, *b = NULL;
        int na = 0, nb = 0;
        CHECK_INT(mp_vexec_build(cl, &model, 1, 4, 7, &pt, &a, &na), MP_OK);
        CHECK_INT(mp_vtraffic_build(cl, &model, 1, 4, 7, &pt, &b, &nb), MP_OK);
        CHECK(na == nb && na == 12);
        for (int d = 0; d < na && d < nb && a && b; d++)
            compare(i % 2 ? "padded with a cache" : "dynamic with a cache", d, &a[d], &b[d]);
        mp_vtraffic_free(a, na);
        mp_vtraffic_free(b, nb);
    }
    mp_placement_free(&pl);
    mp_routing_free(&r);
}

/* Point pt's draws counted on the ep × ep matrices (MOEPERF_MODEL_MATRIX=1: the path the fast
 * path's sums replace) and by its builder as it runs: the same traffic, to the bit, and the
 * dynamic modes counted on the fast path (counted 1) there and not on the matrices. For those,
 * also the draws re-priced for the other dispatch dtype (mp_vtraffic_retype) against draws built
 * for it, and re-priced back against the matrices'. */
static void fast_point(const struct mp_cluster *cl, int tp, int ep, struct mp_point *pt,
                       const char *what)
{
    struct mp_vtraffic *a = NULL, *b = NULL, *c = NULL;
    int na = 0, nb = 0, nc = 0, dynamic = !pt->dispatch || pt->dispatch == &mp_dispatch_dynamic;
    setenv("MOEPERF_MODEL_MATRIX", "1", 1);
    int ra = mp_vtraffic_build(cl, &model, tp, ep, 7, pt, &a, &na);
    unsetenv("MOEPERF_MODEL_MATRIX");
    int rb = mp_vtraffic_build(cl, &model, tp, ep, 7, pt, &b, &nb);
    CHECK_INT(ra, rb);
    CHECK_INT(na, nb);
    left = "matrices";
    right = "sums";
    for (int d = 0; d < na && d < nb && a && b; d++) {
        compare(what, d, &a[d], &b[d]);
        CHECK(!a[d].counted && b[d].counted == dynamic);
    }
    int dd = pt->dispatch_dtype;
    pt->dispatch_dtype = dd == MP_DTYPE_FP8 ? MP_DTYPE_BF16 : MP_DTYPE_FP8;
    if (rb == MP_OK && dynamic && mp_vtraffic_build(cl, &model, tp, ep, 7, pt, &c, &nc) == MP_OK) {
        CHECK_INT(mp_vtraffic_retype(b, nb, cl, &model, pt), MP_OK);
        left = "built";
        right = "re-priced";
        for (int d = 0; d < nb && d < nc; d++)
            compare(what, d, &c[d], &b[d]);
        pt->dispatch_dtype = dd;
        CHECK_INT(mp_vtraffic_retype(b, nb, cl, &model, pt), MP_OK);
        left = "matrices";
        right = "re-priced back";
        for (int d = 0; d < na && d < nb; d++)
            compare(what, d, &a[d], &b[d]);
    }
    if (rb == MP_OK && a) /* draws the fast path did not count cannot be re-priced */
        CHECK_INT(mp_vtraffic_retype(a, na, cl, &model, pt), MP_ERR_USAGE);
    pt->dispatch_dtype = dd;
    left = "traced";
    right = "counted";
    mp_vtraffic_free(a, na);
    mp_vtraffic_free(b, nb);
    mp_vtraffic_free(c, nc);
}

/* The fast path against the matrices on every dispatch mode and dedup form (pair, rank, node),
 * unpipelined and (dynamic) in 3 chunks, bf16 and fp8 rows, on layouts of one to eight nodes
 * (nodes of unequal EP ranks among them, TP 1 and 2) with EP groups larger than traced ranks
 * afford, placements whose experts have one copy, a copy on every rank (replicate-hot) and copies
 * on many but not all ranks (eplb:40 on 16 and 32 ranks), every routing and batches from one token
 * to more than the ranks hold evenly. */
static void fast_sweep(struct mp_cluster *cl)
{
    static const struct { int tp, ep, gpn; } layouts[] = {
        {1, 4, 2}, {2, 16, 8}, {1, 10, 4}, {2, 12, 3}, {1, 32, 4}};
    static const char *placements[] = {"contiguous", "round-robin", "replicate-hot:2", "eplb:40",
                                       "replicate-hot:8"};
    static const char *routings[] = {"uniform", "zipf:1.2", "hot:2:10", "gate"};
    static const char *dispatches[] = {"dynamic", "padded", "padded:0.5"};
    static const long batches[] = {1, 13, 200};
    for (int li = 0; li < 5; li++)
        for (int ri = 0; ri < 4; ri++)
            for (int k = 0; k < 2; k++) {
                int tp = layouts[li].tp, ep = layouts[li].ep, pi = (li + ri + 2 * k) % 5;
                cl->gpus_per_node = layouts[li].gpn;
                struct mp_routing r;
                struct mp_placement pl;
                CHECK_INT(mp_routing_parse(routings[ri], model.experts, model.topk, 5, &r), MP_OK);
                if (mp_placement_build(placements[pi], model.experts, ep, r.prob, &pl) != MP_OK) {
                    mp_routing_free(&r);
                    continue; /* more slots than the layout's ranks hold */
                }
                CHECK_INT(mp_placement_pack_nodes(&pl, tp, cl->gpus_per_node), MP_OK);
                for (int v = 0; v < 3 * 3 * 3 * 2; v++) { /* dispatch, batch, dedup, chunks */
                    int di = v % 3, bi = v / 3 % 3, dedup = v / 9 % 3, overlap = v >= 27 ? 3 : 1;
                    if (overlap > 1 && di > 0)
                        continue; /* padded has no pipelined form */
                    struct mp_point pt = {.batch = batches[bi], .seq = 1, .routing = &r,
                                          .placement = &pl, .iters = 3, .warmup = 1,
                                          .dedup = dedup, .overlap = overlap,
                                          .dispatch_dtype = (v + li) % 2 ? MP_DTYPE_FP8
                                                                         : MP_DTYPE_BF16};
                    CHECK_INT(mp_dispatch_parse(dispatches[di], &pt.dispatch, &pt.dispatch_arg),
                              MP_OK);
                    char what[200];
                    snprintf(what, sizeof what, "tp%dep%d/%d %s %s %s batch %ld %s %s overlap %d",
                             tp, ep, cl->gpus_per_node, routings[ri], placements[pi],
                             dispatches[di], batches[bi], pt.dispatch_dtype ? "fp8" : "bf16",
                             mp_dedup_choices[dedup], overlap);
                    fast_point(cl, tp, ep, &pt, what);
                }
                mp_placement_free(&pl);
                mp_routing_free(&r);
            }
}

/* A pipelined point's overlap efficiency in `a` against one from the metrics of each of its
 * draws unpipelined as mp_metrics_iter gives them, every field. */
static void same_efficiency(const struct mp_cluster *cl, int tp, int ep, const struct mp_point *pt,
                            const struct mp_vtraffic *t, int P, const struct mp_point_result *a)
{
    struct mp_rank_iter *rec = malloc((size_t)tp * ep * sizeof *rec);
    struct mp_iter_metrics *plain = calloc((size_t)pt->iters, sizeof *plain);
    for (int it = 0; rec && plain && it < pt->iters; it++) {
        struct mp_vtraffic whole = t[(pt->warmup + it) % P];
        whole.nchunks = 1;
        mp_vtraffic_time(cl, &model, &whole, rec);
        mp_metrics_iter(rec, tp * ep, tp, &plain[it]);
    }
    double e = plain ? mp_overlap_efficiency(plain, a->metrics, pt->iters) : 0;
    if (memcmp(&e, &a->overlap_efficiency, sizeof e) != 0) {
        fprintf(stderr, "dedup %d overlap %d: overlap efficiency %.17g, from full metrics %.17g\n",
                pt->dedup, pt->overlap, a->overlap_efficiency, e);
        check_failures++;
    }
    free(rec);
    free(plain);
}

/* mp_vlayer_time of draws built, or re-priced, for other weight and dispatch dtypes, timed in the
 * caller's records, against mp_vlayer_run of each point itself: the same metrics to the bit, for
 * every dedup form, unpipelined and in 3 chunks, and with an expert cache. */
static void shared_timing(struct mp_cluster *cl)
{
    enum { TP = 2, EP = 16 };
    cl->gpus_per_node = 8;
    struct mp_routing r;
    struct mp_placement pl;
    CHECK_INT(mp_routing_parse("hot:2:10", model.experts, model.topk, 5, &r), MP_OK);
    CHECK_INT(mp_placement_build("replicate-hot:2", model.experts, EP, r.prob, &pl), MP_OK);
    CHECK_INT(mp_placement_pack_nodes(&pl, TP, cl->gpus_per_node), MP_OK);
    struct mp_rank_iter *recs = malloc(TP * EP * sizeof *recs);
    for (int v = 0; v < 7 && recs; v++) {
        struct mp_point pt = {.batch = 64, .seq = 1, .routing = &r, .placement = &pl, .iters = 9,
                              .dedup = v % 3, .overlap = v < 3 ? 1 : 3};
        if (v == 6) { /* an expert cache: its own draws, warm-up first */
            pt.dedup = MP_DEDUP_PAIR;
            pt.overlap = 1;
            pt.warmup = 2;
            CHECK_INT(mp_cache_spec_parse("3", &pt.cache), MP_OK);
        }
        struct mp_vtraffic *t = NULL;
        int P = 0;
        CHECK_INT(mp_vtraffic_build(cl, &model, TP, EP, 7, &pt, &t, &P), MP_OK);
        for (int y = 0; y < 4 && t; y++) {
            pt.weight_dtype = y % 2 ? MP_DTYPE_FP8 : MP_DTYPE_BF16;
            if ((y / 2 ? MP_DTYPE_FP8 : MP_DTYPE_BF16) != pt.dispatch_dtype) {
                pt.dispatch_dtype = y / 2 ? MP_DTYPE_FP8 : MP_DTYPE_BF16;
                CHECK_INT(mp_vtraffic_retype(t, P, cl, &model, &pt), MP_OK);
            }
            struct mp_point_result a, b;
            CHECK_INT(mp_vlayer_time(cl, &model, TP, EP, &pt, t, P, recs, &a), MP_OK);
            CHECK_INT(mp_vlayer_run(cl, &model, TP, EP, 7, &pt, &b), MP_OK);
            CHECK(a.ranks == NULL && a.iters == b.iters && a.metrics && b.metrics);
            if (a.metrics && b.metrics && a.iters == b.iters &&
                memcmp(a.metrics, b.metrics, (size_t)a.iters * sizeof *a.metrics) != 0) {
                fprintf(stderr, "shared timing: dedup %d overlap %d cache %d, weights %d, "
                        "dispatch %d: metrics differ\n", pt.dedup, pt.overlap, pt.cache.slots,
                        pt.weight_dtype, pt.dispatch_dtype);
                check_failures++;
            }
            /* the planner's timing leaves the unpipelined reference out; the run's is the
             * reference unpipelined, all its metrics */
            CHECK(pt.overlap == 1 || isnan(a.overlap_efficiency));
            if (pt.overlap > 1 && b.metrics)
                same_efficiency(cl, TP, EP, &pt, t, P, &b);
            mp_point_result_free(&a);
            mp_point_result_free(&b);
        }
        mp_vtraffic_free(t, P);
    }
    free(recs);
    mp_placement_free(&pl);
    mp_routing_free(&r);
}

int main(void)
{
    struct mp_cluster cl;
    CHECK_INT(mp_cluster_resolve("h100-ndr", &cl), MP_OK);
    traced_sweep(&cl);
    bare_and_cached(&cl);
    printf("%d draws compared with the traced ranks\n", compared);
    CHECK(compared > 1000);
    int traced = compared;
    fast_sweep(&cl);
    printf("%d draws compared on the fast path\n", compared - traced);
    CHECK(compared - traced > 5000);
    shared_timing(&cl);
    CHECK_DONE();
}
