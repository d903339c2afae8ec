/* test_plan_dedup.c - the deduplicated dispatch's host plan (core/layer/dispatch_plan_dedup.h) against a brute
 * force: in rank mode every rank sends each token once to each rank serving one of its pairs (the
 * rows mp_dedup_count counts for the model), the metadata names exactly the pairs served there
 * with their weights, and a destination's expansion of the rows it receives runs each pair it
 * serves exactly once, with its weight, in its expert's block; in node mode, on nodes of 1 to 6
 * ranks, the inter-node phase carries mp_dedup_count's hop 0 and the intra-node phase (direct rows
 * and forwards) its hop 1, forwards stay inside a node, and after them every rank runs exactly the
 * pairs it serves. */
#include <stdlib.h>

#include "check.h"
#include "dedup.h"
#include "error.h"
#include "dispatch_plan.h"
#include "dispatch_plan_dedup.h"
#include "routing.h"

#define EP 6
#define E 16
#define K 4
#define T 211

/* The node of every token's rank and the rank holding it, for the node test below. */
static int rank_of_token(long t)
{
    int e = 0;
    long tok0, n;
    while ((n = mp_token_split(T, EP, e, &tok0)), t >= tok0 + n)
        e++;
    return e;
}

/* Node mode with `gpn` EP ranks per node, one plan per rank as the layer keeps it: the inter-node
 * phase's rows (to relays on other nodes) are mp_dedup_count's hop 0, the intra-node phase's
 * (direct rows, then the forwards of what came in) its hop 1, each inside its link class, and
 * after both phases every rank's expansion runs exactly the pairs it serves. */
static void check_node(const struct mp_placement *pl, const int32_t *ids, const float *w, int gpn,
                       struct mp_dedup_counts *cnt)
{
    static struct mp_dedup_plan rp[EP];
    static long tok_in[EP][T * K + T]; /* global token of every row a rank received, both phases */
    static char used[T * K];
    int ep_node[EP];
    long first[EP];
    for (int q = 0; q < EP; q++)
        ep_node[q] = q / gpn;
    mp_dedup_count(MP_DEDUP_NODE, pl, ids, T, K, 1, gpn, cnt);
    for (int e = 0; e < EP; e++) {
        long n = mp_token_split(T, EP, e, &first[e]);
        CHECK_INT(mp_dedup_plan_alloc(&rp[e], EP, pl->max_local, K, n, T * K, T), MP_OK);
        for (int q = 0; q < EP; q++)
            rp[e].ep_node[q] = ep_node[q];
        mp_dedup_plan_send(&rp[e], pl, e, first[e], n, ids + first[e] * K, w + first[e] * K,
                           ep_node);
        mp_dedup_plan_inter(&rp[e], e);
        for (int q = 0; q < EP; q++)
            if (q != e) /* only rows to other nodes in the inter-node phase */
                CHECK_INT(rp[e].x_rows[q], (long)cnt->rows[e * EP + q]);
    }
    /* the inter-node phase by hand, then every rank's forwards and the intra-node counts */
    for (int q = 0; q < EP; q++) {
        long nr = 0;
        for (int e = 0; e < EP; e++) {
            rp[q].recv_rows[e] = rp[e].x_rows[q];
            for (long r = rp[e].send_displ[q]; r < rp[e].send_displ[q] + rp[e].x_rows[q];
                 r++, nr++) {
                tok_in[q][nr] = first[e] + rp[e].send_tok[r];
                for (int k = 0; k < K; k++)
                    rp[q].recv_meta[nr * K + k] = rp[e].send_meta[r * K + k];
            }
        }
        CHECK_INT(mp_dedup_plan_recv(&rp[q]), MP_OK);
        CHECK_INT(mp_dedup_plan_forward(&rp[q], q), MP_OK);
        for (int d = 0; d < EP; d++)
            if (rp[q].fwd_rows[d]) /* forwards stay inside the relay's node */
                CHECK_INT(ep_node[d], ep_node[q]);
        mp_dedup_plan_intra_counts(&rp[q], q);
    }
    /* the intra-node phase's count exchange and rows by hand, after each rank's inter-node rows */
    for (int q = 0; q < EP; q++) {
        for (int s = 0; s < EP; s++) {
            rp[q].in_rcnt[2 * s] = rp[s].in_cnt[2 * q];
            rp[q].in_rcnt[2 * s + 1] = rp[s].in_cnt[2 * q + 1];
        }
    }
    for (int q = 0; q < EP; q++)
        CHECK_INT(mp_dedup_plan_intra(&rp[q], q), MP_OK);
    for (int q = 0; q < EP; q++) {
        for (int d = 0; d < EP; d++) {
            if (d != q) /* direct rows and forwards: the model's hop 1 */
                CHECK_INT(rp[q].in_rows[d], (long)cnt->rows[EP * EP + q * EP + d]);
            if (rp[q].in_rows[d])
                CHECK_INT(ep_node[d], ep_node[q]);
        }
        for (int s = 0; s < EP; s++) {
            struct mp_dedup_plan *src = &rp[s];
            long at = rp[q].nrecv + rp[q].in_rdispl[s];
            CHECK_INT(rp[q].in_rrows[s], src->in_rows[q]);
            for (long i = 0; i < src->in_rows[q]; i++) {
                int direct = i < src->d_rows[q];
                tok_in[q][at + i] =
                    direct ? first[s] + src->send_tok[src->send_displ[q] + i]
                           : tok_in[s][src->fwd_src[src->fwd_displ[q] + i - src->d_rows[q]]];
                for (int k = 0; k < K; k++)
                    rp[q].recv_meta[(at + i) * K + k] =
                        src->in_meta[(src->in_displ[q] + i) * K + k];
            }
        }
    }
    for (int q = 0; q < EP; q++) {
        int nlocal = mp_placement_nlocal(pl, q);
        CHECK_INT(mp_dedup_plan_expand(&rp[q], q, nlocal), MP_OK);
        long served = 0;
        for (long i = 0; i < (long)T * K; i++) {
            used[i] = 0;
            served += mp_placement_dest(pl, rank_of_token(i / K), ids[i], i / K) == q;
        }
        CHECK_INT(rp[q].nexp, served);
        for (int l = 0; l < nlocal; l++) {
            int expert = pl->local_ids[pl->local_off[q] + l];
            for (long j = rp[q].expert_off[l]; j < rp[q].expert_off[l + 1]; j++) {
                long t = tok_in[q][rp[q].exp_row[j]];
                int found = 0;
                for (int k = 0; k < K && !found; k++)
                    if (ids[t * K + k] == expert && !used[t * K + k] &&
                        w[t * K + k] == rp[q].exp_w[j])
                        found = used[t * K + k] = 1;
                CHECK(found);
            }
        }
    }
    for (int e = 0; e < EP; e++)
        mp_dedup_plan_free(&rp[e]);
}

int main(void)
{
    static const char *const placements[] = {"contiguous", "round-robin", "replicate-hot:2",
                                             "eplb:6"};
    static const char *const routings[] = {"uniform", "zipf:1.3"};
    int32_t *ids = malloc(sizeof *ids * T * K);
    float *w = malloc(sizeof *w * T * K);
    struct mp_dedup_plan sp[EP], dp;
    /* what each rank received, source-major: the rows' metadata and global tokens */
    struct mp_dedup_meta *meta = malloc(sizeof *meta * T * K * K);
    long *recv_tok = malloc(sizeof *recv_tok * T * K);
    char *used = malloc((size_t)T * K);
    struct mp_dedup_counts cnt;
    CHECK_INT(mp_dedup_alloc(&cnt, EP), MP_OK);
    CHECK(ids && w && meta && recv_tok && used);
    for (int ri = 0; ri < 2; ri++) {
        struct mp_routing rt;
        CHECK_INT(mp_routing_parse(routings[ri], E, K, 5, &rt), MP_OK);
        mp_routing_draw(&rt, 5, 0, T, 0, T, ids, w);
        for (int pi = 0; pi < 4; pi++) {
            struct mp_placement pl;
            CHECK_INT(mp_placement_build(placements[pi], E, EP, rt.prob, &pl), MP_OK);
            mp_dedup_count(MP_DEDUP_RANK, &pl, ids, T, K, 1, EP, &cnt);
            long total_rows = 0, total_exp = 0;
            for (int e = 0; e < EP; e++) {
                long tok0, n = mp_token_split(T, EP, e, &tok0);
                CHECK_INT(mp_dedup_plan_alloc(&sp[e], EP, pl.max_local, K, n, T * K, 0), MP_OK);
                mp_dedup_plan_send(&sp[e], &pl, e, tok0, n, ids + tok0 * K, w + tok0 * K, NULL);
                /* brute force: rows to each rank, the own one included, and the local pairs */
                long rows[EP] = {0}, local = 0;
                for (long t = tok0; t < tok0 + n; t++) {
                    int seen[EP] = {0};
                    for (int k = 0; k < K; k++) {
                        int d = mp_placement_dest(&pl, e, ids[t * K + k], t);
                        local += d == e;
                        rows[d] += !seen[d];
                        seen[d] = 1;
                    }
                }
                CHECK_INT(sp[e].local_pairs, local);
                long off = 0;
                for (int d = 0; d < EP; d++) {
                    CHECK_INT(sp[e].send_rows[d], rows[d]);
                    CHECK_INT(sp[e].send_displ[d], off);
                    off += rows[d];
                    if (d != e) /* the wire rows are the ones the model counts */
                        CHECK_INT(sp[e].send_rows[d], (long)cnt.rows[e * EP + d]);
                }
                CHECK_INT(sp[e].nsend, off);
                /* each row: its token's choices served at its rank, and only those */
                for (int d = 0; d < EP; d++)
                    for (long r = sp[e].send_displ[d]; r < sp[e].send_displ[d] + rows[d]; r++) {
                        long t = tok0 + sp[e].send_tok[r];
                        CHECK(sp[e].send_tok[r] >= 0 && sp[e].send_tok[r] < n);
                        CHECK(r == sp[e].send_displ[d] || sp[e].send_tok[r] > sp[e].send_tok[r - 1]);
                        for (int k = 0; k < K; k++) {
                            struct mp_dedup_meta m = sp[e].send_meta[r * K + k];
                            int here = mp_placement_dest(&pl, e, ids[t * K + k], t) == d;
                            CHECK_INT(m.li, here ? mp_placement_local_index(&pl, d, ids[t * K + k])
                                                 : -1);
                            CHECK(m.w == (here ? w[t * K + k] : 0.0f));
                        }
                    }
                total_rows += sp[e].nsend;
            }
            /* every destination: the exchange by hand, then the expansion */
            CHECK_INT(mp_dedup_plan_alloc(&dp, EP, pl.max_local, K, T, T * K, 0), MP_OK);
            for (int p = 0; p < EP; p++) {
                long nr = 0;
                for (int e = 0; e < EP; e++) {
                    long tok0;
                    mp_token_split(T, EP, e, &tok0);
                    dp.recv_rows[e] = sp[e].send_rows[p];
                    for (long r = sp[e].send_displ[p]; r < sp[e].send_displ[p] + sp[e].send_rows[p];
                         r++, nr++) {
                        recv_tok[nr] = tok0 + sp[e].send_tok[r];
                        for (int k = 0; k < K; k++)
                            meta[nr * K + k] = sp[e].send_meta[r * K + k];
                    }
                }
                CHECK_INT(mp_dedup_plan_recv(&dp), MP_OK);
                CHECK_INT(dp.nrecv, nr);
                for (long i = 0; i < nr * K; i++)
                    dp.recv_meta[i] = meta[i];
                int nlocal = mp_placement_nlocal(&pl, p);
                CHECK_INT(mp_dedup_plan_expand(&dp, -1, nlocal), MP_OK);
                /* each expanded row is an unused pair served here, of its block's expert, with
                 * its weight; together they are every pair served here */
                for (long i = 0; i < (long)T * K; i++)
                    used[i] = 0;
                long served = 0;
                for (long t = 0; t < T; t++) {
                    int e = 0;
                    long tok0, n;
                    while ((n = mp_token_split(T, EP, e, &tok0)), t >= tok0 + n)
                        e++;
                    for (int k = 0; k < K; k++)
                        served += mp_placement_dest(&pl, e, ids[t * K + k], t) == p;
                }
                CHECK_INT(dp.nexp, served);
                CHECK_INT(dp.expert_off[0], 0);
                for (int l = 0; l < nlocal; l++) {
                    int expert = pl.local_ids[pl.local_off[p] + l];
                    for (long j = dp.expert_off[l]; j < dp.expert_off[l + 1]; j++) {
                        long t = recv_tok[dp.exp_row[j]];
                        int found = 0;
                        for (int k = 0; k < K; k++)
                            if (ids[t * K + k] == expert && !used[t * K + k] &&
                                w[t * K + k] == dp.exp_w[j]) {
                                used[t * K + k] = 1;
                                found = 1;
                            }
                        CHECK(found);
                        CHECK(j == dp.expert_off[l] || dp.exp_row[j] > dp.exp_row[j - 1]);
                    }
                }
                total_exp += dp.nexp;
            }
            /* deduplicated: never more rows than pairs, fewer when a token meets a rank twice */
            CHECK(total_rows <= total_exp);
            CHECK_INT(total_exp, (long)T * K);
            /* a broken exchange is refused, not expanded */
            dp.recv_meta[0].li = (int32_t)pl.max_local;
            if (dp.nrecv > 0)
                CHECK_INT(mp_dedup_plan_expand(&dp, -1, mp_placement_nlocal(&pl, EP - 1)),
                          MP_ERR_RUNTIME);
            mp_dedup_plan_free(&dp);
            for (int e = 0; e < EP; e++)
                mp_dedup_plan_free(&sp[e]);
            for (int gpn = 1; gpn <= EP; gpn++) /* 1 rank per node: node is rank; EP: one node */
                check_node(&pl, ids, w, gpn, &cnt);
            mp_placement_free(&pl);
        }
        mp_routing_free(&rt);
    }
    mp_dedup_free(&cnt);
    free(ids);
    free(w);
    free(meta);
    free(recv_tok);
    free(used);
    CHECK_DONE();
}
