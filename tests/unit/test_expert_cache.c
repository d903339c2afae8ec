/* test_expert_cache.c - the device expert cache's bookkeeping on hand-worked access sequences:
 * lru, lfu and static residency, hits and misses, the staging slot, off, and the refusals of
 * --expert-cache's words. */
#include <stdio.h>

#include "check.h"
#include "error.h"
#include "expert_cache.h"

/* Access local experts seq[0..n) in order; the slot and miss of each into slot[] and miss[]. */
static void run(struct mp_expert_cache *c, const int *seq, int n, int *slot, int *miss)
{
    for (int i = 0; i < n; i++)
        slot[i] = mp_expert_cache_access(c, seq[i], &miss[i]);
}

static void test_lru(void)
{
    struct mp_cache_spec s = {2, MP_CACHE_LRU};
    struct mp_expert_cache c;
    CHECK_INT(mp_expert_cache_init(&c, &s, 4, NULL), MP_OK);
    /* 0 and 1 fill the slots; 0 hits; 2 evicts 1 (used before 0's hit); 1 evicts 0 */
    const int seq[] = {0, 1, 0, 2, 1};
    const int want_slot[] = {0, 1, 0, 1, 0}, want_miss[] = {1, 1, 0, 1, 1};
    int slot[5], miss[5];
    run(&c, seq, 5, slot, miss);
    for (int i = 0; i < 5; i++) {
        CHECK_INT(slot[i], want_slot[i]);
        CHECK_INT(miss[i], want_miss[i]);
    }
    CHECK_INT(c.hits, 1);
    CHECK_INT(c.misses, 4);
    CHECK_INT(c.slot_of[0], -1);
    CHECK_INT(c.slot_of[2], 1);
    mp_expert_cache_free(&c);
}

static void test_lfu(void)
{
    struct mp_cache_spec s = {2, MP_CACHE_LFU};
    struct mp_expert_cache c;
    CHECK_INT(mp_expert_cache_init(&c, &s, 4, NULL), MP_OK);
    /* uses count from the first access on: 0 twice, 1 once, so 2 evicts 1; 1 (its second use)
     * evicts 2 (one use); 3 finds 0 and 1 at two uses each and evicts the less recent, 0 */
    const int seq[] = {0, 0, 1, 2, 1, 3};
    const int want_slot[] = {0, 0, 1, 1, 1, 0}, want_miss[] = {1, 0, 1, 1, 1, 1};
    int slot[6], miss[6];
    run(&c, seq, 6, slot, miss);
    for (int i = 0; i < 6; i++) {
        CHECK_INT(slot[i], want_slot[i]);
        CHECK_INT(miss[i], want_miss[i]);
    }
    CHECK_INT(c.slot_of[0], -1);
    CHECK_INT(c.slot_of[1], 1);
    CHECK_INT(c.slot_of[3], 0);
    CHECK_INT(c.hits, 1);
    CHECK_INT(c.misses, 5);
    mp_expert_cache_free(&c);
}

static void test_static(void)
{
    struct mp_cache_spec s = {2, MP_CACHE_STATIC};
    const double share[] = {0.1, 0.5, 0.3, 0.1};
    struct mp_expert_cache c;
    CHECK_INT(mp_expert_cache_init(&c, &s, 4, share), MP_OK);
    /* resident: 1 (slot 0) and 2 (slot 1), loaded at start and never evicted; 0 and 3 are
     * fetched into the staging slot 2 at every access */
    const int seq[] = {0, 1, 2, 3, 0, 1};
    const int want_slot[] = {2, 0, 1, 2, 2, 0}, want_miss[] = {1, 0, 0, 1, 1, 0};
    int slot[6], miss[6];
    run(&c, seq, 6, slot, miss);
    for (int i = 0; i < 6; i++) {
        CHECK_INT(slot[i], want_slot[i]);
        CHECK_INT(miss[i], want_miss[i]);
    }
    CHECK_INT(c.hits, 3);
    CHECK_INT(c.misses, 3);
    mp_expert_cache_free(&c);
    /* without shares: the lowest indices */
    CHECK_INT(mp_expert_cache_init(&c, &s, 4, NULL), MP_OK);
    CHECK_INT(c.held[0], 0);
    CHECK_INT(c.held[1], 1);
    mp_expert_cache_free(&c);
}

static void test_off_and_words(void)
{
    struct mp_cache_spec s;
    struct mp_expert_cache c;
    CHECK_INT(mp_cache_spec_parse("off", &s), MP_OK);
    CHECK_INT(s.slots, 0);
    CHECK_INT(mp_expert_cache_init(&c, &s, 3, NULL), MP_OK);
    for (int e = 0; e < 3; e++) {
        int m = -1;
        CHECK_INT(mp_expert_cache_access(&c, e, &m), e);
        CHECK_INT(m, 0);
    }
    mp_expert_cache_free(&c);
    CHECK_INT(mp_cache_spec_parse("4", &s), MP_OK);
    CHECK_INT(s.slots, 4);
    CHECK_INT(s.policy, MP_CACHE_LRU);
    CHECK_INT(mp_cache_spec_parse("3:lfu", &s), MP_OK);
    CHECK_INT(s.policy, MP_CACHE_LFU);
    CHECK_INT(mp_cache_spec_parse("2:static", &s), MP_OK);
    CHECK_INT(s.policy, MP_CACHE_STATIC);
    CHECK_INT(mp_cache_spec_check("2:static", &s, 2), MP_OK);
    printf("(errors naming --expert-cache are expected next)\n");
    fflush(stdout);
    const char *bad[] = {"0", "x", "-1", "4x", "4:", "4:mru", ":lru", ""};
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_INT(mp_cache_spec_parse(bad[i], &s), MP_ERR_USAGE);
    CHECK_INT(mp_cache_spec_parse("5", &s), MP_OK);
    CHECK_INT(mp_cache_spec_check("5", &s, 4), MP_ERR_USAGE);
}

int main(void)
{
    mp_log_init("test_expert_cache", -1);
    test_lru();
    test_lfu();
    test_static();
    test_off_and_words();
    CHECK_DONE();
}
