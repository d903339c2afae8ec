/* vdraws.c - a small cache of routing draws keyed by everything mp_routing_draw reads (vdraws.h). */
#include "vdraws.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Batches kept; the least recently used one makes room for a new one. */
#define ENTRIES 16

struct entry {
    int used; /* 0: empty */
    unsigned long stamp;
    /* the key */
    enum mp_routing_kind kind;
    int experts, topk, groups, group_pick;
    double *prob, *cdf; /* copies of the routing's, NULL where it has none */
    uint64_t seed;
    long tokens;
    /* the draws, each allocated when first drawn: [tokens · topk] */
    int32_t *ids[MP_ROUTING_POOL_DRAWS];
    float *w[MP_ROUTING_POOL_DRAWS];
    size_t bytes; /* of the draws held */
};

static struct entry cache[ENTRIES];
static unsigned long clock_now;
static size_t cache_bytes; /* the draws held by every entry, at most budget */
static size_t budget = MP_VDRAWS_BUDGET_BYTES;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER; /* the planner's threads share it */

static void entry_free(struct entry *e)
{
    free(e->prob);
    free(e->cdf);
    for (int d = 0; d < MP_ROUTING_POOL_DRAWS; d++) {
        free(e->ids[d]);
        free(e->w[d]);
    }
    cache_bytes -= e->bytes;
    memset(e, 0, sizeof *e);
}

/* Every entry emptied; the caller holds cache_lock. */
static void forget_locked(void)
{
    for (int i = 0; i < ENTRIES; i++)
        entry_free(&cache[i]);
}

void mp_vdraws_forget(void)
{
    pthread_mutex_lock(&cache_lock);
    forget_locked();
    pthread_mutex_unlock(&cache_lock);
}

size_t mp_vdraws_set_budget(size_t bytes)
{
    pthread_mutex_lock(&cache_lock);
    forget_locked();
    size_t was = budget;
    budget = bytes ? bytes : MP_VDRAWS_BUDGET_BYTES;
    pthread_mutex_unlock(&cache_lock);
    return was;
}

size_t mp_vdraws_held(void)
{
    pthread_mutex_lock(&cache_lock);
    size_t held = cache_bytes;
    pthread_mutex_unlock(&cache_lock);
    return held;
}

/* 1 when both arrays of n doubles are NULL or hold the same bytes. */
static int same_array(const double *a, const double *b, size_t n)
{
    if (!a || !b)
        return a == b;
    return memcmp(a, b, n * sizeof *a) == 0;
}

static int matches(const struct entry *e, const struct mp_routing *r, uint64_t seed, long tokens)
{
    return e->used && e->kind == r->kind && e->experts == r->experts && e->topk == r->topk &&
           e->groups == r->groups && e->group_pick == r->group_pick && e->seed == seed &&
           e->tokens == tokens && same_array(e->prob, r->prob, (size_t)r->experts) &&
           same_array(e->cdf, r->cdf, (size_t)r->experts + 1);
}

/* A copy of n doubles, or NULL for NULL; *ok cleared when out of memory. */
static double *copy_array(const double *a, size_t n, int *ok)
{
    if (!a)
        return NULL;
    double *c = malloc(n * sizeof *c);
    if (!c) {
        *ok = 0;
        return NULL;
    }
    memcpy(c, a, n * sizeof *c);
    return c;
}

/* The entry for this key: a match, else the least recently used one refilled; NULL when out of
 * memory. */
static struct entry *entry_for(const struct mp_routing *r, uint64_t seed, long tokens)
{
    struct entry *oldest = &cache[0];
    for (int i = 0; i < ENTRIES; i++) {
        if (matches(&cache[i], r, seed, tokens))
            return &cache[i];
        if (!cache[i].used || (oldest->used && cache[i].stamp < oldest->stamp))
            oldest = &cache[i];
    }
    struct entry *e = oldest;
    entry_free(e);
    int ok = 1;
    e->prob = copy_array(r->prob, (size_t)r->experts, &ok);
    e->cdf = copy_array(r->cdf, (size_t)r->experts + 1, &ok);
    if (!ok) {
        entry_free(e);
        return NULL;
    }
    e->used = 1;
    e->kind = r->kind;
    e->experts = r->experts;
    e->topk = r->topk;
    e->groups = r->groups;
    e->group_pick = r->group_pick;
    e->seed = seed;
    e->tokens = tokens;
    return e;
}

/* Room for `need` more bytes of draws beside entry `keep`: the least recently used other entries
 * emptied until the draws held and `need` fit the budget; 0 when they cannot. */
static int make_room(const struct entry *keep, size_t need)
{
    while (cache_bytes + need > budget) {
        struct entry *lru = NULL;
        for (int i = 0; i < ENTRIES; i++)
            if (&cache[i] != keep && cache[i].used && cache[i].bytes > 0 &&
                (!lru || cache[i].stamp < lru->stamp))
                lru = &cache[i];
        if (!lru)
            return 0;
        entry_free(lru);
    }
    return 1;
}

void mp_vdraws_get(const struct mp_routing *r, uint64_t seed, int draw, long tokens, int32_t *ids,
                   float *w)
{
    size_t pairs = (size_t)tokens * (size_t)r->topk;
    size_t need = pairs * (sizeof *ids + sizeof *w);
    struct entry *e = NULL;
    if (r->kind != MP_ROUTE_TRACE_TOKENS && draw >= 0 && draw < MP_ROUTING_POOL_DRAWS) {
        pthread_mutex_lock(&cache_lock);
        if (need <= budget / 2) /* a larger draw is never kept */
            e = entry_for(r, seed, tokens);
        if (e && !e->ids[draw]) { /* its first request: room for it, then drawn once */
            if (make_room(e, need)) {
                e->ids[draw] = malloc(pairs * sizeof *ids);
                e->w[draw] = malloc(pairs * sizeof *w);
            }
            if (e->ids[draw] && e->w[draw]) {
                mp_routing_draw(r, seed, draw, tokens, 0, tokens, e->ids[draw], e->w[draw]);
                e->bytes += need;
                cache_bytes += need;
            } else {
                free(e->ids[draw]);
                free(e->w[draw]);
                e->ids[draw] = NULL;
                e->w[draw] = NULL;
                e = NULL;
            }
        }
        if (!e)
            pthread_mutex_unlock(&cache_lock);
    }
    if (!e) { /* not kept: drawn as always */
        mp_routing_draw(r, seed, draw, tokens, 0, tokens, ids, w);
        return;
    }
    e->stamp = ++clock_now;
    memcpy(ids, e->ids[draw], pairs * sizeof *ids);
    memcpy(w, e->w[draw], pairs * sizeof *w);
    pthread_mutex_unlock(&cache_lock);
}
