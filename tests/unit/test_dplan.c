/* test_dplan.c - the dispatch plan a backend builds itself (kernels/dplan.h, dplan.c) equals the host
 * plan exactly: the route table picks the rank and expert slot mp_placement_dest does for every
 * (expert, token); the sort by cell gives the same send rows, tokens and weights as mp_plan_send
 * (dynamic), the host padded oracle (padded, with drops) and mp_plan_send_group chunk by chunk (pipelined);
 * the counts rebuild the same totals. */
#include <stdlib.h>

#include "check.h"
#include "dplan.h"
#include "dplan_host.h"
#include "error.h"
#include "padded.h"
#include "padded_oracle.h"
#include "dispatch_plan.h"
#include "routing.h"

/* One source rank of one case: the backend plan against the host plan, dynamic and padded. */
static void compare_rank(const struct mp_placement *pl, int ep, int K, long total, int r,
                         const int32_t *ids, const float *w, long cap)
{
    long tok0, ntok = mp_token_split(total, ep, r, &tok0);
    int L = pl->experts; /* the layer's dynamic plan has a cell for every expert id */
    struct mp_plan hp;
    CHECK_INT(mp_plan_alloc(&hp, ep, L, ntok, K), MP_OK);
    mp_plan_send(&hp, pl, r, tok0, ntok, ids + tok0 * K, w + tok0 * K);

    int32_t *off = malloc(((size_t)pl->experts + 1) * sizeof *off);
    int32_t *cell = malloc((size_t)mp_route_table_size(pl) * sizeof *cell);
    int n = mp_route_table(pl, r, L, 1, off, cell);
    CHECK(n <= mp_route_table_size(pl));
    CHECK_INT(off[pl->experts], n);
    /* the route table: every (expert, token) lands where the placement sends it */
    for (int e = 0; e < pl->experts; e++)
        for (long t = tok0; t < tok0 + ntok + 3; t++) {
            int dest = mp_placement_dest(pl, r, e, t);
            int c = mp_dplan_cell(off, cell, e, t);
            CHECK_INT(c, dest * L + mp_placement_local_index(pl, dest, e));
        }

    /* dynamic: rows, tokens, weights and counts equal mp_plan_send's */
    struct mp_dplan_host dp = {0};
    struct mp_dplan_shape s = {.experts = pl->experts, .K = K, .max_local = L, .ncells = ep * L,
                               .ntok = ntok, .tok0 = tok0, .cap = 0, .route_off = off,
                               .route_cell = cell};
    CHECK_INT(mp_dplan_host_setup(&dp, &s), MP_OK);
    mp_dplan_host_build(&dp, ids + tok0 * K, w + tok0 * K);
    CHECK_INT(dp.nrows, hp.nsend);
    for (long i = 0; i < hp.nsend; i++) {
        CHECK_INT(dp.src_tok[i], hp.src_tok[i]);
        CHECK(dp.row_w[i] == hp.row_w[i]);
    }
    struct mp_plan fp;
    CHECK_INT(mp_plan_alloc(&fp, ep, L, ntok, K), MP_OK);
    for (int c = 0; c < ep * L; c++) {
        CHECK_INT(dp.totals[c], hp.send_cnt[c]);
        fp.send_cnt[c] = dp.totals[c];
    }
    mp_plan_from_counts(&fp, r, ntok);
    CHECK_INT(fp.nsend, hp.nsend);
    CHECK_INT(fp.local_pairs, hp.local_pairs);
    for (int d = 0; d < ep; d++) {
        CHECK_INT(fp.send_rows[d], hp.send_rows[d]);
        CHECK_INT(fp.send_displ[d], hp.send_displ[d]);
    }

    /* padded: the slot rows, padding and drops equal the host oracle's */
    int PL = pl->max_local;
    struct mp_padded pd;
    CHECK_INT(mp_padded_alloc(&pd, ep, PL, cap), MP_OK);
    struct mp_plan hq; /* the host padded layout reads a plan in the padded cell layout */
    CHECK_INT(mp_plan_alloc(&hq, ep, PL, ntok, K), MP_OK);
    mp_plan_send(&hq, pl, r, tok0, ntok, ids + tok0 * K, w + tok0 * K);
    oracle_padded_send(&pd, &hq, r);
    mp_route_table(pl, r, PL, 1, off, cell);
    s.max_local = PL;
    s.ncells = ep * PL;
    s.cap = cap;
    struct mp_dplan_host dq = {0};
    CHECK_INT(mp_dplan_host_setup(&dq, &s), MP_OK);
    mp_dplan_host_build(&dq, ids + tok0 * K, w + tok0 * K);
    CHECK_INT(dq.rows, pd.rows);
    CHECK_INT(dq.nrows, pd.rows);
    for (long i = 0; i < pd.rows; i++) {
        CHECK_INT(dq.src_tok[i], pd.src_tok[i]);
        CHECK(dq.row_w[i] == pd.w[i]);
    }
    struct mp_padded pc;
    CHECK_INT(mp_padded_alloc(&pc, ep, PL, cap), MP_OK);
    mp_padded_from_counts(&pc, dq.totals, r);
    CHECK_INT(pc.dropped, pd.dropped);
    CHECK_INT(pc.local_pairs, pd.local_pairs);
    for (int c = 0; c < ep * PL; c++)
        CHECK_INT(pc.kept[c], pd.kept[c]);

    /* a second build over the same buffers (the sweep's later iterations) gives the same rows */
    mp_dplan_host_build(&dq, ids + tok0 * K, w + tok0 * K);
    for (long i = 0; i < pd.rows; i++)
        CHECK_INT(dq.src_tok[i], pd.src_tok[i]);

    /* pipelined: with the cells of each chunk in a block of their own, the sorted rows are the
     * chunks one after another, each with mp_plan_send_group's rows and counts */
    for (int ng = 2; ng <= 3; ng++) {
        mp_route_table(pl, r, L, ng, off, cell);
        for (int e = 0; e < pl->experts; e++)
            for (long t = tok0; t < tok0 + ntok + 3; t++) {
                int dest = mp_placement_dest(pl, r, e, t);
                int li = mp_placement_local_index(pl, dest, e);
                int grp = mp_plan_expert_group(li, mp_placement_nlocal(pl, dest), ng);
                CHECK_INT(mp_dplan_cell(off, cell, e, t), (grp * ep + dest) * L + li);
            }
        struct mp_dplan_shape gs = {.experts = pl->experts, .K = K, .max_local = L,
                                    .ncells = ng * ep * L, .ntok = ntok, .tok0 = tok0, .cap = 0,
                                    .route_off = off, .route_cell = cell};
        struct mp_dplan_host dg = {0};
        CHECK_INT(mp_dplan_host_setup(&dg, &gs), MP_OK);
        mp_dplan_host_build(&dg, ids + tok0 * K, w + tok0 * K);
        CHECK_INT(dg.nrows, ntok * K); /* every pair is in some chunk */
        long row0 = 0;
        for (int k = 0; k < ng; k++) {
            mp_plan_send_group(&hp, pl, r, tok0, ntok, ids + tok0 * K, w + tok0 * K, k, ng);
            for (int c = 0; c < ep * L; c++)
                CHECK_INT(dg.totals[k * ep * L + c], hp.send_cnt[c]);
            for (long i = 0; i < hp.nsend; i++) {
                CHECK_INT(dg.src_tok[row0 + i], hp.src_tok[i]);
                CHECK(dg.row_w[row0 + i] == hp.row_w[i]);
            }
            row0 += hp.nsend;
        }
        CHECK_INT(row0, ntok * K);
        mp_dplan_host_free(&dg);
    }

    mp_padded_free(&pc);
    mp_padded_free(&pd);
    mp_plan_free(&hq);
    mp_plan_free(&fp);
    mp_plan_free(&hp);
    mp_dplan_host_free(&dp);
    mp_dplan_host_free(&dq);
    free(off);
    free(cell);
}

/* `per_node` > 0: EP ranks on nodes of that many, so replicas on the source's node come first. */
static void run_case(const char *placement, const char *routing, int E, int ep, int K, long total,
                     double factor, int per_node)
{
    struct mp_routing rt;
    struct mp_placement pl;
    CHECK_INT(mp_routing_parse(routing, E, K, 11, &rt), MP_OK);
    CHECK_INT(mp_placement_build(placement, E, ep, rt.prob, &pl), MP_OK);
    if (per_node > 0) {
        int node[64];
        for (int q = 0; q < ep && q < 64; q++)
            node[q] = q / per_node;
        CHECK_INT(mp_placement_set_nodes(&pl, node), MP_OK);
    }
    int32_t *ids = malloc((size_t)total * K * sizeof *ids);
    float *w = malloc((size_t)total * K * sizeof *w);
    mp_routing_draw(&rt, 11, 0, total, 0, total, ids, w);
    long cap = mp_padded_capacity((total + ep - 1) / ep, K, E, factor, 1);
    for (int r = 0; r < ep; r++)
        compare_rank(&pl, ep, K, total, r, ids, w, cap);
    free(ids);
    free(w);
    mp_placement_free(&pl);
    mp_routing_free(&rt);
}

int main(void)
{
    CHECK_INT(mp_dplan_key_bits(1), 1);  /* keys 0 and 1 (unsent) */
    CHECK_INT(mp_dplan_key_bits(2), 2);  /* keys 0..2 */
    CHECK_INT(mp_dplan_key_bits(255), 8);
    CHECK_INT(mp_dplan_key_bits(256), 9);
    /* a slot row past the capacity is dropped; the dynamic row is the sorted position */
    CHECK_INT(mp_dplan_row(5, 17, 15, 0, 4), 17);
    CHECK_INT(mp_dplan_row(5, 17, 15, 3, 4), mp_padded_row(1, 1, 2, 4, 3));
    CHECK_INT(mp_dplan_row(5, 18, 15, 3, 4), -1);

    run_case("contiguous", "uniform", 8, 4, 2, 37, 0, 0);
    run_case("round-robin", "zipf:1.2", 12, 3, 4, 50, 1.0, 0);
    run_case("replicate-hot:2", "hot:2:10", 16, 4, 4, 64, 0.5, 0);
    run_case("eplb:5", "hot:3:6", 13, 4, 3, 41, 1.25, 0);
    run_case("eplb:7", "hot:3:6", 13, 6, 3, 41, 1.25, 3); /* replicas on and off the node */
    run_case("eplb:9", "zipf:1.2", 16, 8, 4, 77, 0, 2);
    run_case("contiguous", "hot:1:20", 8, 1, 2, 9, 0.5, 0); /* one rank: everything local */
    run_case("replicate-hot:1", "uniform", 6, 4, 2, 3, 0, 0); /* ranks without tokens */
    return check_failures != 0;
}
