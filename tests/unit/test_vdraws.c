/* test_vdraws.c - the model's cache of routing draws gives exactly mp_routing_draw's pairs and
 * weights on a first and a repeated request, and never another routing's: routings parsed one after
 * another into the same struct (so with the same address and, often, reused arrays), a group limit
 * on the same probabilities, another seed and another batch each get their own draws; under a small
 * budget the least recently used batches make room and the cache never holds more than it. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "error.h"
#include "routing.h"
#include "vdraws.h"

#define E 64
#define K 4
#define T 50

static int32_t ids[T * K], ref_ids[T * K];
static float w[T * K], ref_w[T * K];

/* Draws 0 .. MP_ROUTING_POOL_DRAWS − 1 of routing r through the cache, twice, each equal to
 * mp_routing_draw's to the bit. */
static void check_draws(const struct mp_routing *r, uint64_t seed, long tokens, const char *what)
{
    for (int round = 0; round < 2; round++)
        for (int d = 0; d < MP_ROUTING_POOL_DRAWS; d++) {
            mp_routing_draw(r, seed, d, tokens, 0, tokens, ref_ids, ref_w);
            memset(ids, 0xff, sizeof ids);
            memset(w, 0xff, sizeof w);
            mp_vdraws_get(r, seed, d, tokens, ids, w);
            size_t n = (size_t)tokens * K;
            if (memcmp(ids, ref_ids, n * sizeof *ids) || memcmp(w, ref_w, n * sizeof *w)) {
                fprintf(stderr, "%s: draw %d (round %d) differs from mp_routing_draw\n", what, d,
                        round);
                check_failures++;
            }
        }
}

/* Under a budget of 3 whole batches of T (their 8 draws each), batches of other seeds evict the
 * least recently used: the cache never holds more than the budget and every draw stays
 * mp_routing_draw's; a draw of more than half the budget is never kept. */
static void check_budget(void)
{
    struct mp_routing r;
    CHECK_INT(mp_routing_parse("zipf:1.1", E, K, 7, &r), MP_OK);
    size_t draw = (size_t)T * K * (sizeof(int32_t) + sizeof(float));
    size_t batch = MP_ROUTING_POOL_DRAWS * draw;
    size_t was = mp_vdraws_set_budget(3 * batch);
    CHECK(was == MP_VDRAWS_BUDGET_BYTES);
    for (uint64_t seed = 1; seed <= 6; seed++) {
        check_draws(&r, seed, T, "zipf:1.1 under a budget of 3 batches");
        check_draws(&r, 1, T, "seed 1 kept in use");
        CHECK(mp_vdraws_held() == (seed < 3 ? seed : 3) * batch);
    }
    mp_vdraws_set_budget(2 * draw - 1); /* a draw is more than half of it: drawn, not kept */
    check_draws(&r, 9, T, "zipf:1.1 under a budget below two draws");
    CHECK(mp_vdraws_held() == 0);
    mp_vdraws_set_budget(2 * draw); /* exactly half: kept, one draw at a time */
    check_draws(&r, 9, T, "zipf:1.1 under a budget of two draws");
    CHECK(mp_vdraws_held() <= 2 * draw && mp_vdraws_held() > 0);
    CHECK(mp_vdraws_set_budget(0) == 2 * draw);
    CHECK(mp_vdraws_held() == 0);
    mp_routing_free(&r);
}

int main(void)
{
    static const char *specs[] = {"zipf:1.1", "hot:4:15", "lognormal:1", "uniform", "zipf:0.5"};
    struct mp_routing r;
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) { /* the same struct each time */
        CHECK_INT(mp_routing_parse(specs[i], E, K, 7, &r), MP_OK);
        check_draws(&r, 7, T, specs[i]);
        check_draws(&r, 8, T, specs[i]);     /* another seed */
        check_draws(&r, 7, T - 3, specs[i]); /* another batch */
        if (i == 0) { /* a group limit on the same probabilities: drawn within its groups */
            struct mp_routing g = r;
            g.groups = 8;
            g.group_pick = 2;
            check_draws(&g, 7, T, "zipf:1.1 limited to 2 of 8 groups");
        }
        mp_routing_free(&r);
    }
    /* the first routing again, after the others filled the cache */
    CHECK_INT(mp_routing_parse("zipf:1.1", E, K, 7, &r), MP_OK);
    check_draws(&r, 7, T, "zipf:1.1 again");
    mp_routing_free(&r);
    mp_vdraws_forget();
    check_budget();
    CHECK_DONE();
}
