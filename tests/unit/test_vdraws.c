/* test_vdraws.c - the model's cache of routing draws gives exactly mp_routing_draw's pairs and
 * weights on a first and a repeated request, and never another routing's: routings parsed one after
 * another into the same struct (so with the same address and, often, reused arrays), a group limit
 * on the same probabilities, another seed and another batch each get their own draws. */
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
    CHECK_DONE();
}
