/* test_placement.c - placement: run sizes, round-robin, hot replicas, holder lists, errors. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "error.h"
#include "placement.h"

/* The structural invariants every placement must satisfy, checked from first principles:
 * local lists ascending and matching the holder lists, every expert held by its home, max_local. */
static void check_consistent(const struct mp_placement *p)
{
    int total = 0, maxl = 0;
    CHECK_INT(p->local_off[0], 0);
    CHECK_INT(p->holder_off[0], 0);
    for (int r = 0; r < p->ep; r++) {
        int n = mp_placement_nlocal(p, r);
        total += n;
        if (n > maxl)
            maxl = n;
        for (int i = 0; i < n; i++) {
            int e = p->local_ids[p->local_off[r] + i];
            CHECK(e >= 0 && e < p->experts);
            if (i > 0)
                CHECK(p->local_ids[p->local_off[r] + i - 1] < e);
            CHECK_INT(mp_placement_local_index(p, r, e), i);
        }
    }
    CHECK_INT(p->max_local, maxl);
    CHECK_INT(total, p->local_off[p->ep]);
    CHECK_INT(total, p->holder_off[p->experts]); /* each copy counted once both ways */
    for (int e = 0; e < p->experts; e++) {
        int n = p->holder_off[e + 1] - p->holder_off[e], has_home = 0;
        CHECK(n >= 1);
        for (int i = 0; i < n; i++) {
            int r = p->holders[p->holder_off[e] + i];
            CHECK(r >= 0 && r < p->ep);
            if (i > 0)
                CHECK(p->holders[p->holder_off[e] + i - 1] < r);
            CHECK(mp_placement_local_index(p, r, e) >= 0);
            has_home |= r == p->home[e];
        }
        CHECK(has_home);
        /* a rank that is not a holder has no copy */
        for (int r = 0; r < p->ep; r++) {
            int is_holder = 0;
            for (int i = 0; i < n; i++)
                is_holder |= p->holders[p->holder_off[e] + i] == r;
            CHECK_INT(mp_placement_local_index(p, r, e) >= 0, is_holder);
        }
    }
}

static void test_contiguous(void)
{
    struct mp_placement p;
    CHECK_INT(mp_placement_build("contiguous", 12, 4, NULL, &p), MP_OK);
    CHECK_STR(p.spec, "contiguous");
    for (int e = 0; e < 12; e++)
        CHECK_INT(p.home[e], e / 3);
    for (int r = 0; r < 4; r++)
        CHECK_INT(mp_placement_nlocal(&p, r), 3);
    CHECK_INT(p.max_local, 3);
    CHECK_INT(mp_placement_local_index(&p, 2, 7), 1);
    CHECK_INT(mp_placement_local_index(&p, 2, 9), -1);
    check_consistent(&p);
    mp_placement_free(&p);

    /* 12 on 5: 3,3,2,2,2 → homes 0 0 0 1 1 1 2 2 3 3 4 4 */
    static const int home5[12] = {0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 4, 4};
    static const int n5[5] = {3, 3, 2, 2, 2};
    CHECK_INT(mp_placement_build("contiguous", 12, 5, NULL, &p), MP_OK);
    for (int e = 0; e < 12; e++)
        CHECK_INT(p.home[e], home5[e]);
    for (int r = 0; r < 5; r++)
        CHECK_INT(mp_placement_nlocal(&p, r), n5[r]);
    CHECK_INT(p.max_local, 3);
    CHECK_INT(p.local_ids[p.local_off[4]], 10);
    check_consistent(&p);
    mp_placement_free(&p);

    /* fewer experts than ranks: ranks 2 and 3 hold none */
    CHECK_INT(mp_placement_build("contiguous", 2, 4, NULL, &p), MP_OK);
    CHECK_INT(p.home[0], 0);
    CHECK_INT(p.home[1], 1);
    CHECK_INT(mp_placement_nlocal(&p, 2), 0);
    CHECK_INT(mp_placement_nlocal(&p, 3), 0);
    CHECK_INT(p.max_local, 1);
    CHECK_INT(mp_placement_dest(&p, 3, 1, 12345), 1);
    CHECK_INT(mp_placement_local_index(&p, 3, 0), -1);
    check_consistent(&p);
    mp_placement_free(&p);
}

static void test_round_robin(void)
{
    struct mp_placement p;
    CHECK_INT(mp_placement_build("round-robin", 10, 4, NULL, &p), MP_OK);
    for (int e = 0; e < 10; e++)
        CHECK_INT(p.home[e], e % 4);
    CHECK_INT(mp_placement_nlocal(&p, 0), 3); /* 0 4 8 */
    CHECK_INT(mp_placement_nlocal(&p, 3), 2); /* 3 7 */
    CHECK_INT(p.local_ids[p.local_off[1] + 2], 9);
    CHECK_INT(p.max_local, 3);
    CHECK_INT(mp_placement_local_index(&p, 1, 5), 1);
    for (int src = 0; src < 4; src++)
        for (int e = 0; e < 10; e++)
            CHECK_INT(mp_placement_dest(&p, src, e, 7), e % 4);
    check_consistent(&p);
    mp_placement_free(&p);
}

static void test_replicate_hot(void)
{
    /* 8 experts on 4 ranks, homes 0 0 1 1 2 2 3 3; the two hottest are 5 and 2 (3 ties with 2
     * on load but loses on id). */
    static const double load[8] = {0.05, 0.05, 0.2, 0.2, 0.05, 0.3, 0.1, 0.05};
    struct mp_placement p;
    CHECK_INT(mp_placement_build("replicate-hot:2", 8, 4, load, &p), MP_OK);
    CHECK_INT(p.replicate, 2);
    CHECK_INT(p.kind, MP_PLACE_REPLICATE_HOT);
    for (int e = 0; e < 8; e++)
        CHECK_INT(p.home[e], e / 2);
    for (int r = 0; r < 4; r++) {
        CHECK(mp_placement_local_index(&p, r, 5) >= 0);
        CHECK(mp_placement_local_index(&p, r, 2) >= 0);
        CHECK_INT(mp_placement_local_index(&p, r, 3) >= 0, r == 1);
    }
    CHECK_INT(p.holder_off[3] - p.holder_off[2], 4);
    CHECK_INT(p.holder_off[6] - p.holder_off[5], 4);
    CHECK_INT(p.holder_off[4] - p.holder_off[3], 1);
    /* rank 0: 0 1 2 5; rank 1: 2 3 5; rank 2: 2 4 5; rank 3: 2 5 6 7 */
    static const int want_n[4] = {4, 3, 3, 4};
    static const int want_ids[14] = {0, 1, 2, 5, 2, 3, 5, 2, 4, 5, 2, 5, 6, 7};
    for (int r = 0; r < 4; r++)
        CHECK_INT(mp_placement_nlocal(&p, r), want_n[r]);
    for (int i = 0; i < 14; i++)
        CHECK_INT(p.local_ids[i], want_ids[i]);
    CHECK_INT(p.max_local, 4);
    /* copies: each expert once, plus R·(ep−1) extra copies; no double counting since a hot
     * expert's home is one of the ep ranks: 8 + 2·3 = 14 */
    CHECK_INT(p.local_off[4], 14);
    for (long tok = 0; tok < 20; tok++)
        for (int src = 0; src < 4; src++) {
            CHECK_INT(mp_placement_dest(&p, src, 5, tok), src);
            CHECK_INT(mp_placement_dest(&p, src, 2, tok), src);
            for (int e = 0; e < 8; e++)
                if (e != 2 && e != 5)
                    CHECK_INT(mp_placement_dest(&p, src, e, tok), e / 2);
        }
    check_consistent(&p);
    mp_placement_free(&p);

    /* load NULL: experts 0..R-1 are hot */
    CHECK_INT(mp_placement_build("replicate-hot:3", 12, 5, NULL, &p), MP_OK);
    for (int r = 0; r < 5; r++)
        for (int e = 0; e < 3; e++)
            CHECK(mp_placement_local_index(&p, r, e) >= 0);
    /* rank 1 holds the replicas 0 1 2 then its home run 3 4 5 */
    CHECK_INT(mp_placement_nlocal(&p, 1), 6);
    CHECK_INT(mp_placement_local_index(&p, 1, 0), 0);
    CHECK_INT(mp_placement_local_index(&p, 1, 3), 3);
    CHECK_INT(mp_placement_local_index(&p, 1, 6), -1);
    CHECK_INT(mp_placement_nlocal(&p, 0), 3); /* its home run is the hot set itself */
    /* experts 0..2 all live on rank 0 already: 12 + 3·4 = 24 copies */
    CHECK_INT(p.local_off[5], 24);
    check_consistent(&p);
    mp_placement_free(&p);

    /* R = 0 equals contiguous; R = experts puts everything everywhere */
    CHECK_INT(mp_placement_build("replicate-hot:0", 12, 5, NULL, &p), MP_OK);
    CHECK_INT(p.local_off[5], 12);
    CHECK_INT(p.max_local, 3);
    check_consistent(&p);
    mp_placement_free(&p);
    CHECK_INT(mp_placement_build("replicate-hot:6", 6, 3, NULL, &p), MP_OK);
    CHECK_INT(p.local_off[3], 18);
    CHECK_INT(p.max_local, 6);
    for (int e = 0; e < 6; e++)
        CHECK_INT(mp_placement_dest(&p, 2, e, 1), 2);
    check_consistent(&p);
    mp_placement_free(&p);
}

/* One EP rank: replicas coincide with homes, so every expert has exactly one copy. */
static void test_dest_single_rank(void)
{
    struct mp_placement p;
    CHECK_INT(mp_placement_build("replicate-hot:2", 4, 1, NULL, &p), MP_OK);
    CHECK_INT(p.local_off[1], 4);
    for (int e = 0; e < 4; e++)
        CHECK_INT(mp_placement_dest(&p, 0, e, 99), 0);
    check_consistent(&p);
    mp_placement_free(&p);
}

/* A placement from a held matrix held[e·ep + r] (the lists built as mp_placement_build does). */
static void from_held(struct mp_placement *p, const char *held, int experts, int ep)
{
    memset(p, 0, sizeof *p);
    p->experts = experts, p->ep = ep;
    p->local_off = calloc((size_t)ep + 1, sizeof(int));
    p->holder_off = calloc((size_t)experts + 1, sizeof(int));
    p->home = calloc((size_t)experts, sizeof(int));
    p->holders = calloc((size_t)experts * ep, sizeof(int));
    p->local_ids = calloc((size_t)experts * ep, sizeof(int));
    int n = 0;
    for (int r = 0; r < ep; r++) {
        for (int e = 0; e < experts; e++)
            if (held[e * ep + r])
                p->local_ids[n++] = e;
        p->local_off[r + 1] = n;
        if (n - p->local_off[r] > p->max_local)
            p->max_local = n - p->local_off[r];
    }
    n = 0;
    for (int e = 0; e < experts; e++) {
        for (int r = ep - 1; r >= 0; r--)
            if (held[e * ep + r])
                p->home[e] = r;
        for (int r = 0; r < ep; r++)
            if (held[e * ep + r])
                p->holders[n++] = r;
        p->holder_off[e + 1] = n;
    }
}

/* The replica rule: own rank, else a copy on the token's node (rotating among them by token),
 * else the rotation among all copies; without nodes, own rank then all copies. */
static void test_dest_nodes(void)
{
    enum { EPR = 6, EX = 3 };
    /* nodes {0 1 2} {3 4 5}; expert 0 on 1 2 4, expert 1 on 3 only, expert 2 on 0 3 5 */
    static const char held[EX * EPR] = {0, 1, 1, 0, 1, 0, /**/ 0, 0, 0, 1, 0, 0, /**/ 1, 0, 0, 1, 0, 1};
    static const int node[EPR] = {0, 0, 0, 1, 1, 1};
    struct mp_placement p;
    from_held(&p, held, EX, EPR);
    check_consistent(&p);
    int far = 0;
    for (long t = 0; t < 12; t++) /* no nodes: copies in turn, the other node's too */
        far += mp_placement_dest(&p, 0, 0, t) == 4;
    CHECK_INT(far, 4);
    CHECK_INT(mp_placement_set_nodes(&p, node), MP_OK);
    for (long t = 0; t < 12; t++) {
        CHECK_INT(mp_placement_dest(&p, 1, 0, t), 1);                /* own rank */
        CHECK_INT(mp_placement_dest(&p, 0, 0, t), t % 2 ? 2 : 1);    /* own node, in turn */
        CHECK_INT(mp_placement_dest(&p, 2, 0, t), 2);                /* own rank */
        CHECK_INT(mp_placement_dest(&p, 3, 0, t), 4);                /* the node's one copy */
        CHECK_INT(mp_placement_dest(&p, 5, 0, t), 4);
        CHECK_INT(mp_placement_dest(&p, 0, 1, t), 3);                /* none on the node */
        CHECK_INT(mp_placement_dest(&p, 4, 2, t), t % 2 ? 5 : 3);    /* own node, in turn */
        CHECK_INT(mp_placement_dest(&p, 1, 2, t), 0);
    }
    CHECK_INT(mp_placement_node_holders(&p, 0, 0), 2);
    CHECK_INT(mp_placement_node_holders(&p, 0, 1), 0);
    CHECK_INT(mp_placement_set_nodes(&p, NULL), MP_OK); /* forgotten: the old rotation again */
    CHECK_INT(mp_placement_dest(&p, 0, 0, 2), 4);
    mp_placement_free(&p);
}

static void test_errors(void)
{
    struct mp_placement p;
    CHECK_INT(mp_placement_build("foo", 8, 2, NULL, &p), MP_ERR_USAGE);
    CHECK_INT(mp_placement_build("", 8, 2, NULL, &p), MP_ERR_USAGE);
    CHECK_INT(mp_placement_build("contiguous:2", 8, 2, NULL, &p), MP_ERR_USAGE);
    CHECK_INT(mp_placement_build("replicate-hot", 8, 2, NULL, &p), MP_ERR_USAGE);
    CHECK_INT(mp_placement_build("replicate-hot:", 8, 2, NULL, &p), MP_ERR_USAGE);
    CHECK_INT(mp_placement_build("replicate-hot:-1", 8, 2, NULL, &p), MP_ERR_USAGE);
    CHECK_INT(mp_placement_build("replicate-hot:9", 8, 2, NULL, &p), MP_ERR_USAGE);
    CHECK_INT(mp_placement_build("replicate-hot:300", 128, 8, NULL, &p), MP_ERR_USAGE);
    CHECK_INT(mp_placement_build("replicate-hot:2x", 8, 2, NULL, &p), MP_ERR_USAGE);
    CHECK_INT(mp_placement_build("contiguous", 0, 2, NULL, &p), MP_ERR_USAGE);
    CHECK_INT(mp_placement_build("contiguous", 8, 0, NULL, &p), MP_ERR_USAGE);
    CHECK(p.home == NULL);
}

int main(void)
{
    mp_log_init("test_placement", -1);
    test_contiguous();
    test_round_robin();
    test_replicate_hot();
    test_dest_single_rank();
    test_dest_nodes();
    test_errors();
    CHECK_DONE();
}
