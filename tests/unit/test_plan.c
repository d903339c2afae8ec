/* test_plan.c - the dispatch plan: counts balance across ranks, rows land in the right blocks, and
 * the expert-major reordering is a permutation that its inverse undoes. */
#include <stdlib.h>

#include "check.h"
#include "error.h"
#include "plan.h"
#include "routing.h"

#define EP 3
#define E 7
#define K 3
#define B 20

int main(void)
{
    struct mp_routing rt;
    struct mp_placement pl;
    CHECK_INT(mp_routing_parse("hot:2:5", E, K, 7, &rt), MP_OK);
    CHECK_INT(mp_placement_build("replicate-hot:1", E, EP, rt.prob, &pl), MP_OK);

    /* tokens split 7,7,6 over the three ranks */
    static const long tok0[EP] = {0, 7, 14}, ntok[EP] = {7, 7, 6};
    int32_t ids[B * K];
    float w[B * K];
    mp_routing_draw(&rt, 7, 0, B, 0, B, ids, w);

    struct mp_plan p[EP];
    for (int r = 0; r < EP; r++) {
        CHECK_INT(mp_plan_alloc(&p[r], EP, pl.max_local, 7, K), MP_OK);
        mp_plan_send(&p[r], &pl, r, tok0[r], ntok[r], ids + tok0[r] * K, w + tok0[r] * K);
        CHECK_INT(p[r].nsend, ntok[r] * K);
    }
    /* emulate the count exchange: recv_cnt[src][l] of rank r = send_cnt[r][l] of rank src */
    int L = pl.max_local;
    for (int r = 0; r < EP; r++)
        for (int s = 0; s < EP; s++)
            for (int l = 0; l < L; l++)
                p[r].recv_cnt[s * L + l] = p[s].send_cnt[r * L + l];
    long total_sent = 0, total_recv = 0, local = 0;
    for (int r = 0; r < EP; r++) {
        mp_plan_recv(&p[r], mp_placement_nlocal(&pl, r));
        total_sent += p[r].nsend;
        total_recv += p[r].nrecv;
        local += p[r].local_pairs;
        /* every send row goes to a rank holding its expert, in its (peer, expert) block */
        for (int d = 0; d < EP; d++) {
            long row = p[r].send_displ[d];
            for (int l = 0; l < L; l++)
                for (int c = 0; c < p[r].send_cnt[d * L + l]; c++, row++) {
                    int t = p[r].src_tok[row];
                    int expert = pl.local_ids[pl.local_off[d] + l];
                    int found = 0;
                    for (int k = 0; k < K; k++)
                        found |= ids[(tok0[r] + t) * K + k] == expert;
                    CHECK(found);
                }
            CHECK_INT(row, p[r].send_displ[d] + p[r].send_rows[d]);
        }
        /* the reordering maps rows one-to-one, and to_source undoes to_expert */
        int *seen = calloc((size_t)p[r].nrecv + 1, sizeof *seen);
        long moved = 0;
        for (int c = 0; c < p[r].nchunks; c++) {
            struct mp_chunk a = p[r].to_expert[c], b = p[r].to_source[c];
            CHECK_INT(a.src, b.dst);
            CHECK_INT(a.dst, b.src);
            for (long i = 0; i < a.n; i++)
                seen[a.dst + i]++;
            moved += a.n;
        }
        CHECK_INT(moved, p[r].nrecv);
        for (long i = 0; i < p[r].nrecv; i++)
            CHECK_INT(seen[i], 1);
        free(seen);
        CHECK_INT(p[r].expert_off[L], p[r].nrecv);
    }
    CHECK_INT(total_sent, B * K);
    CHECK_INT(total_recv, B * K);
    /* replicate-hot:1 keeps every pair of the hottest expert (0) on its own rank */
    long hot_pairs = 0;
    for (int i = 0; i < B * K; i++)
        hot_pairs += ids[i] == 0;
    CHECK(local >= hot_pairs);
    for (int r = 0; r < EP; r++)
        mp_plan_free(&p[r]);
    mp_placement_free(&pl);
    mp_routing_free(&rt);
    CHECK_DONE();
}
