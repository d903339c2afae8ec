/* test_plan.c - the dispatch plan: counts balance across ranks, rows land in the right blocks, and
 * the expert-major reordering is a permutation that its inverse undoes; the padded layout keeps the
 * first `cap` pairs of every slot, in token order, and drops the same pairs the reference does. */
#include <stdlib.h>

#include "check.h"
#include "error.h"
#include "padded.h"
#include "padded_oracle.h"
#include "dispatch_plan.h"
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

    /* padded slots of cap 2: slot (d, l) of rank r holds the plan's first min(n, 2) rows of its
     * block, padding has weight 0, and the drops add up to what mp_padded_drop finds */
    for (long cap = 1; cap <= 7; cap += 3) {
        long dropped = 0, kept = 0;
        for (int r = 0; r < EP; r++) {
            struct mp_padded pd;
            CHECK_INT(mp_padded_alloc(&pd, EP, L, cap), MP_OK);
            CHECK_INT(pd.rows, (long)EP * L * cap);
            oracle_padded_send(&pd, &p[r], r);
            for (int d = 0; d < EP; d++) {
                CHECK_INT(pd.peer_rows[d], L * cap);
                long row = p[r].send_displ[d];
                for (int l = 0; l < L; l++) {
                    int n = p[r].send_cnt[d * L + l];
                    CHECK_INT(pd.kept[d * L + l], n < cap ? n : cap);
                    for (long j = 0; j < cap; j++) {
                        long at = mp_padded_row(d, l, j, L, cap);
                        if (j < n) {
                            CHECK_INT(pd.src_tok[at], p[r].src_tok[row + j]);
                            CHECK(pd.w[at] == p[r].row_w[row + j]);
                        } else {
                            CHECK_INT(pd.src_tok[at], 0);
                            CHECK(pd.w[at] == 0.0f);
                        }
                    }
                    kept += pd.kept[d * L + l];
                    row += n;
                }
            }
            dropped += pd.dropped;
            /* receive side: every (source, local expert) slot moved once, expert-major */
            int nl = mp_placement_nlocal(&pl, r);
            mp_padded_recv(&pd, nl);
            CHECK_INT(pd.nchunks, EP * nl);
            CHECK_INT(pd.expert_off[nl], (long)nl * EP * cap);
            for (int c = 0; c < pd.nchunks; c++) {
                CHECK_INT(pd.to_expert[c].n, cap);
                CHECK_INT(pd.to_expert[c].dst % cap, 0);
                CHECK_INT(pd.to_source[c].src, pd.to_expert[c].dst);
            }
            mp_padded_free(&pd);
        }
        CHECK_INT(kept + dropped, B * K);
        float wd[B * K];
        for (int i = 0; i < B * K; i++)
            wd[i] = w[i];
        CHECK_INT(mp_padded_drop(&pl, EP, B, K, ids, wd, cap), dropped);
        long zeroed = 0;
        for (int i = 0; i < B * K; i++)
            zeroed += wd[i] == 0.0f && w[i] != 0.0f;
        CHECK_INT(zeroed, dropped);
        if (cap == 7) /* a rank's 7 tokens fit any slot: lossless */
            CHECK_INT(dropped, 0);
        if (cap == 1) /* hot:2:5 puts several of a rank's pairs on expert 0's slot */
            CHECK(dropped > 0);
    }
    for (int r = 0; r < EP; r++)
        mp_plan_free(&p[r]);
    mp_placement_free(&pl);
    mp_routing_free(&rt);
    CHECK_DONE();
}
