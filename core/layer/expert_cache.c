/* expert_cache.c - the device expert cache's bookkeeping: residency, eviction, hits and misses. */
#include "expert_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

const char *const mp_cache_policy_choices[] = {"lru", "lfu", "static", NULL};

#define ACCEPTED "off, or SLOTS[:POLICY] with SLOTS ≥ 1 and POLICY lru (the default), lfu or static"

int mp_cache_spec_parse(const char *word, struct mp_cache_spec *out)
{
    memset(out, 0, sizeof *out);
    if (!strcmp(word, "off"))
        return MP_OK;
    char *end;
    long slots = strtol(word, &end, 10);
    if (end == word || slots < 1 || slots > 1 << 20 || (*end && *end != ':')) {
        mp_usage("--expert-cache: '%s' is not a cache (accepted: %s)", word, ACCEPTED);
        return MP_ERR_USAGE;
    }
    out->slots = (int)slots;
    out->policy = MP_CACHE_LRU;
    if (*end == ':') {
        int i = 0;
        while (mp_cache_policy_choices[i] && strcmp(mp_cache_policy_choices[i], end + 1))
            i++;
        if (!mp_cache_policy_choices[i]) {
            mp_usage("--expert-cache: '%s': unknown policy '%s' (accepted: %s)", word, end + 1,
                     ACCEPTED);
            return MP_ERR_USAGE;
        }
        out->policy = (enum mp_cache_policy)i;
    }
    return MP_OK;
}

int mp_cache_spec_check(const char *word, const struct mp_cache_spec *s, int nlocal)
{
    if (s->slots > nlocal) {
        mp_usage("--expert-cache %s: %d slots, more than the %d experts a rank holds (accepted: "
                 "SLOTS from 1 to %d, or off)", word, s->slots, nlocal, nlocal);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

void mp_expert_cache_free(struct mp_expert_cache *c)
{
    free(c->slot_of);
    free(c->held);
    free(c->last_use);
    free(c->uses);
    memset(c, 0, sizeof *c);
}

int mp_expert_cache_init(struct mp_expert_cache *c, const struct mp_cache_spec *spec, int nlocal,
                         const double *share)
{
    memset(c, 0, sizeof *c);
    c->spec = *spec;
    c->nlocal = nlocal;
    int slots = spec->slots;
    c->slot_of = malloc((size_t)(nlocal > 0 ? nlocal : 1) * sizeof *c->slot_of);
    c->held = malloc((size_t)(slots > 0 ? slots : 1) * sizeof *c->held);
    c->last_use = malloc((size_t)(nlocal > 0 ? nlocal : 1) * sizeof *c->last_use);
    c->uses = calloc((size_t)(nlocal > 0 ? nlocal : 1), sizeof *c->uses);
    if (!c->slot_of || !c->held || !c->last_use || !c->uses) {
        mp_expert_cache_free(c);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (int e = 0; e < nlocal; e++) {
        c->slot_of[e] = slots == 0 ? e : -1;
        c->last_use[e] = -1;
    }
    for (int s = 0; s < slots; s++)
        c->held[s] = -1;
    if (spec->policy == MP_CACHE_STATIC && slots > 0)
        for (int s = 0; s < slots && s < nlocal; s++) { /* the hottest not yet resident */
            int best = -1;
            for (int e = 0; e < nlocal; e++)
                if (c->slot_of[e] < 0 &&
                    (best < 0 || (share ? share[e] : 0) > (share ? share[best] : 0)))
                    best = e;
            c->slot_of[best] = s;
            c->held[s] = best;
        }
    return MP_OK;
}

/* The slot lru or lfu gives up: an empty one, else the resident expert least recently used (lru)
 * or least often used, the least recently used among equals (lfu). */
static int victim(const struct mp_expert_cache *c)
{
    int v = -1;
    for (int s = 0; s < c->spec.slots; s++) {
        int e = c->held[s];
        if (e < 0)
            return s;
        if (v < 0)
            v = s;
        int w = c->held[v];
        int older = c->last_use[e] < c->last_use[w];
        if (c->spec.policy == MP_CACHE_LFU ? c->uses[e] < c->uses[w] ||
                                                 (c->uses[e] == c->uses[w] && older)
                                           : older)
            v = s;
    }
    return v;
}

int mp_expert_cache_access(struct mp_expert_cache *c, int e, int *miss)
{
    *miss = 0;
    c->uses[e]++;
    c->last_use[e] = c->clock++;
    if (c->spec.slots == 0)
        return e;
    if (c->slot_of[e] >= 0) {
        c->hits++;
        return c->slot_of[e];
    }
    *miss = 1;
    c->misses++;
    if (c->spec.policy == MP_CACHE_STATIC)
        return c->spec.slots; /* the staging slot: the resident set stays */
    int s = victim(c);
    if (c->held[s] >= 0)
        c->slot_of[c->held[s]] = -1;
    c->held[s] = e;
    c->slot_of[e] = s;
    return s;
}
