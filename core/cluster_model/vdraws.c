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
    /* the draws */
    unsigned char drawn[MP_ROUTING_POOL_DRAWS];
    int32_t *ids; /* [MP_ROUTING_POOL_DRAWS · tokens · topk] */
    float *w;
};

static struct entry cache[ENTRIES];
static unsigned long clock_now;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER; /* the planner's threads share it */

static void entry_free(struct entry *e)
{
    free(e->prob);
    free(e->cdf);
    free(e->ids);
    free(e->w);
    memset(e, 0, sizeof *e);
}

void mp_vdraws_forget(void)
{
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < ENTRIES; i++)
        entry_free(&cache[i]);
    pthread_mutex_unlock(&cache_lock);
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
    size_t pairs = (size_t)MP_ROUTING_POOL_DRAWS * tokens * r->topk;
    int ok = 1;
    e->prob = copy_array(r->prob, (size_t)r->experts, &ok);
    e->cdf = copy_array(r->cdf, (size_t)r->experts + 1, &ok);
    e->ids = malloc(pairs * sizeof *e->ids);
    e->w = malloc(pairs * sizeof *e->w);
    if (!ok || !e->ids || !e->w) {
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

void mp_vdraws_get(const struct mp_routing *r, uint64_t seed, int draw, long tokens, int32_t *ids,
                   float *w)
{
    long pairs = tokens * r->topk;
    struct entry *e = NULL;
    int kept = r->kind != MP_ROUTE_TRACE_TOKENS && draw >= 0 && draw < MP_ROUTING_POOL_DRAWS &&
               pairs <= MP_VDRAWS_MAX_PAIRS;
    if (kept) {
        pthread_mutex_lock(&cache_lock);
        e = entry_for(r, seed, tokens);
        if (!e)
            pthread_mutex_unlock(&cache_lock);
    }
    if (!e) { /* not kept: drawn as always */
        mp_routing_draw(r, seed, draw, tokens, 0, tokens, ids, w);
        return;
    }
    e->stamp = ++clock_now;
    int32_t *eids = e->ids + (size_t)draw * pairs;
    float *ew = e->w + (size_t)draw * pairs;
    if (!e->drawn[draw]) {
        mp_routing_draw(r, seed, draw, tokens, 0, tokens, eids, ew);
        e->drawn[draw] = 1;
    }
    memcpy(ids, eids, (size_t)pairs * sizeof *ids);
    memcpy(w, ew, (size_t)pairs * sizeof *w);
    pthread_mutex_unlock(&cache_lock);
}
