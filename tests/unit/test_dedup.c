/* test_dedup.c - the rows and bytes each --dedup mode puts on every link equal a brute-force count
 * made token by token from the route table, on nodes of 1, 2 and 4 EP ranks, with plain and
 * replicated placements (a replica on the token's rank, else on its node, first); deduplication
 * never adds inter-node bytes, and with one rank per node the node mode is the rank mode. */
#include <stdlib.h>

#include "check.h"
#include "dedup.h"
#include "error.h"
#include "dispatch_plan.h"
#include "routing.h"

#define EP 8
#define E 32
#define K 4
#define T 203
#define ROW 14336.0 /* hidden row bytes: H 7168 in bf16 */

/* The brute force's own node map: world rank of EP rank p's first TP rank over the node size. */
static int bf_node(int p, int tp, int gpn) { return p * tp / gpn; }

/* The relay on node n for a token of rank e: the rank of n at e's index within e's node. */
static int bf_relay(int n, int e, int tp, int gpn)
{
    int mine[EP], nm = 0, theirs[EP], nt = 0, idx = 0;
    for (int q = 0; q < EP; q++) {
        if (bf_node(q, tp, gpn) == bf_node(e, tp, gpn))
            mine[nm++] = q;
        if (bf_node(q, tp, gpn) == n)
            theirs[nt++] = q;
    }
    for (int i = 0; i < nm; i++)
        if (mine[i] == e)
            idx = i;
    return theirs[idx % nt];
}

/* The brute force's own replica rule: rank e itself when it holds x; else the holders of x on e's
 * node (ascending), the t-th modulo their number; else all holders likewise. */
static int bf_dest(const struct mp_placement *pl, int e, int x, long t, int tp, int gpn)
{
    int all[EP], na = 0, near[EP], nn = 0;
    for (int q = 0; q < EP; q++)
        for (int i = pl->local_off[q]; i < pl->local_off[q + 1]; i++)
            if (pl->local_ids[i] == x) {
                if (q == e)
                    return e;
                all[na++] = q;
                if (bf_node(q, tp, gpn) == bf_node(e, tp, gpn))
                    near[nn++] = q;
            }
    return nn ? near[t % nn] : all[t % na];
}

static int has(const int *v, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return 1;
    return 0;
}

/* Brute force: rows[2][EP][EP] and the bytes sent within and between nodes, dispatch + combine. */
static void brute(enum mp_dedup mode, const struct mp_placement *pl, const int32_t *ids, int tp,
                  int gpn, double *rows, double *intra_b, double *inter_b)
{
    double meta = mode == MP_DEDUP_PAIR ? 0 : K * 8.0;
    for (int i = 0; i < 2 * EP * EP; i++)
        rows[i] = 0;
    *intra_b = *inter_b = 0;
    for (int e = 0; e < EP; e++) {
        long tok0, n = mp_token_split(T, EP, e, &tok0);
        for (long t = tok0; t < tok0 + n; t++) {
            int dest[K], nd = 0, all[K];
            for (int k = 0; k < K; k++) {
                all[k] = bf_dest(pl, e, ids[t * K + k], t, tp, gpn);
                if (all[k] != e && !has(dest, nd, all[k]))
                    dest[nd++] = all[k];
            }
            /* each (from, to, hop) row sent: count it and its bytes both ways */
            int from[3 * K], to[3 * K], hop[3 * K], nr = 0;
            if (mode == MP_DEDUP_PAIR) {
                for (int k = 0; k < K; k++)
                    if (all[k] != e) {
                        from[nr] = e, to[nr] = all[k], hop[nr++] = 0;
                    }
            } else if (mode == MP_DEDUP_RANK) {
                for (int i = 0; i < nd; i++)
                    from[nr] = e, to[nr] = dest[i], hop[nr++] = 0;
            } else {
                int nodes[K], nn = 0;
                for (int i = 0; i < nd; i++) {
                    int nod = bf_node(dest[i], tp, gpn);
                    if (nod == bf_node(e, tp, gpn)) /* direct: the intra-node phase */
                        from[nr] = e, to[nr] = dest[i], hop[nr++] = 1;
                    else if (!has(nodes, nn, nod))
                        nodes[nn++] = nod;
                }
                for (int j = 0; j < nn; j++) {
                    int r = bf_relay(nodes[j], e, tp, gpn);
                    from[nr] = e, to[nr] = r, hop[nr++] = 0;
                    for (int i = 0; i < nd; i++)
                        if (bf_node(dest[i], tp, gpn) == nodes[j] && dest[i] != r)
                            from[nr] = r, to[nr] = dest[i], hop[nr++] = 1;
                }
            }
            for (int i = 0; i < nr; i++) {
                rows[hop[i] * EP * EP + from[i] * EP + to[i]] += 1;
                double b = (ROW + meta) + ROW; /* the dispatch row and its combine row */
                if (bf_node(from[i], tp, gpn) == bf_node(to[i], tp, gpn))
                    *intra_b += b;
                else
                    *inter_b += b;
            }
        }
    }
}

int main(void)
{
    static const char *const placements[] = {"contiguous", "replicate-hot:2", "eplb:8"};
    static const int layouts[][2] = {{1, 1}, {1, 2}, {1, 4}, {2, 4}}; /* tp, gpus per node */
    struct mp_dedup_counts c;
    CHECK_INT(mp_dedup_alloc(&c, EP), MP_OK);
    int32_t *ids = malloc(sizeof *ids * T * K);
    float *w = malloc(sizeof *w * T * K);
    double bf[2 * EP * EP], sent[EP], inter[EP];
    for (int seed = 1; seed <= 2; seed++) {
        struct mp_routing rt;
        CHECK_INT(mp_routing_parse("zipf:1.1", E, K, (uint64_t)seed, &rt), MP_OK);
        mp_routing_draw(&rt, (uint64_t)seed, 0, T, 0, T, ids, w);
        for (int pi = 0; pi < 3; pi++) {
            struct mp_placement pl;
            CHECK_INT(mp_placement_build(placements[pi], E, EP, rt.prob, &pl), MP_OK);
            for (int li = 0; li < 4; li++) {
                int tp = layouts[li][0], gpn = layouts[li][1], node[EP];
                for (int p = 0; p < EP; p++)
                    node[p] = mp_dedup_node_of(p, tp, gpn);
                CHECK_INT(mp_placement_set_nodes(&pl, node), MP_OK); /* as the benchmarks do */
                double inter_of[3], rank_rows[EP * EP];
                for (int mode = MP_DEDUP_PAIR; mode <= MP_DEDUP_NODE; mode++) {
                    double intra_b, inter_b;
                    brute((enum mp_dedup)mode, &pl, ids, tp, gpn, bf, &intra_b, &inter_b);
                    mp_dedup_count((enum mp_dedup)mode, &pl, ids, T, K, tp, gpn, &c);
                    int bad = 0;
                    for (int i = 0; i < 2 * EP * EP; i++)
                        bad += c.rows[i] != bf[i];
                    if (bad)
                        fprintf(stderr, "seed %d %s tp%d gpn%d mode %d: %d cells differ\n", seed,
                                placements[pi], tp, gpn, mode, bad);
                    CHECK_INT(bad, 0);
                    CHECK_INT(c.hops, mode == MP_DEDUP_NODE ? 2 : 1);
                    /* node's phases: hop 0 only between nodes, hop 1 only inside one */
                    for (int h = 0; mode == MP_DEDUP_NODE && h < 2; h++)
                        for (int e = 0; e < EP; e++)
                            for (int q = 0; q < EP; q++)
                                if (c.rows[h * EP * EP + e * EP + q] > 0)
                                    CHECK_INT(bf_node(e, tp, gpn) != bf_node(q, tp, gpn), h == 0);
                    double pairs = 0;
                    for (int p = 0; p < EP; p++)
                        pairs += c.pairs[p];
                    CHECK_INT((long)pairs, (long)T * K); /* the FFN work is every mode's */
                    mp_dedup_bytes(&c, tp, gpn, ROW, mp_dedup_meta_bytes((enum mp_dedup)mode, K),
                                   sent, inter);
                    double all = 0, across = 0;
                    for (int p = 0; p < EP; p++)
                        all += sent[p], across += inter[p];
                    CHECK_NEAR(across, inter_b, 0);
                    CHECK_NEAR(all - across, intra_b, 0);
                    inter_of[mode] = across;
                    if (mode == MP_DEDUP_RANK)
                        for (int i = 0; i < EP * EP; i++)
                            rank_rows[i] = c.rows[i];
                    if (mode == MP_DEDUP_NODE && tp * 1 == gpn) { /* one EP rank per node */
                        int same = 1;
                        for (int i = 0; i < EP * EP; i++)
                            same &= c.rows[i] == rank_rows[i] && c.rows[EP * EP + i] == 0;
                        CHECK(same);
                    }
                }
                CHECK(inter_of[MP_DEDUP_PAIR] >= inter_of[MP_DEDUP_RANK]);
                CHECK(inter_of[MP_DEDUP_RANK] >= inter_of[MP_DEDUP_NODE]);
                if (gpn / tp > 1) /* with ≥ 2 ranks per node and skewed routing, node saves */
                    CHECK(inter_of[MP_DEDUP_RANK] > inter_of[MP_DEDUP_NODE]);
            }
            mp_placement_free(&pl);
        }
        mp_routing_free(&rt);
    }
    /* the words */
    enum mp_dedup m;
    CHECK_INT(mp_dedup_parse("node", &m), MP_OK);
    CHECK_INT(m, MP_DEDUP_NODE);
    CHECK_INT(mp_dedup_parse("token", &m), MP_ERR_USAGE);
    CHECK_NEAR(mp_dedup_meta_bytes(MP_DEDUP_RANK, 8), 64, 0);
    CHECK_NEAR(mp_dedup_meta_bytes(MP_DEDUP_PAIR, 8), 0, 0);
    free(ids);
    free(w);
    mp_dedup_free(&c);
    return check_failures;
}
