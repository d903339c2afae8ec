/* expert_cache.h - one rank's device expert cache (--expert-cache SLOTS[:POLICY]): which of its
 * local experts' weights sit in its SLOTS device slots, and which an expert's FFN must fetch from
 * host memory first. Bookkeeping only, shared by every backend and the model, so that a fetch
 * happens where the policy says, whoever copies (docs/METRICS.md, "Expert cache"). */
#ifndef MP_EXPERT_CACHE_H
#define MP_EXPERT_CACHE_H

/* What stays resident: lru evicts the least recently used expert, lfu the least often used (ties:
 * the least recently used), static keeps the SLOTS experts the routing makes hottest and evicts
 * nothing (another expert is fetched into a staging slot for its FFN alone). */
enum mp_cache_policy { MP_CACHE_LRU, MP_CACHE_LFU, MP_CACHE_STATIC };

/* The policy words in enum order, NULL-terminated. */
extern const char *const mp_cache_policy_choices[];

/* One --expert-cache value: `off` (slots 0: every local expert resident) or SLOTS[:POLICY]. */
struct mp_cache_spec {
    int slots;
    enum mp_cache_policy policy;
};

/* Read one --expert-cache word ("off", "4", "4:lfu") into *out: MP_OK, or MP_ERR_USAGE after one
 * line naming --expert-cache, the word and what is accepted. */
int mp_cache_spec_parse(const char *word, struct mp_cache_spec *out);

/* Whether `s` fits a rank holding `nlocal` experts: SLOTS at most nlocal (MP_OK), else
 * MP_ERR_USAGE after one line naming --expert-cache, the value and the bound. */
int mp_cache_spec_check(const char *word, const struct mp_cache_spec *s, int nlocal);

struct mp_expert_cache {
    struct mp_cache_spec spec;
    int nlocal;     /* local experts: local index 0 .. nlocal − 1 */
    int *slot_of;   /* [nlocal] the slot holding each, −1 when not resident */
    int *held;      /* [slots] the local expert in each slot, −1 when empty */
    long *last_use; /* [nlocal] the access clock at its last access, −1 never */
    long *uses;     /* [nlocal] its accesses */
    long clock;     /* accesses so far */
    long hits, misses;
};

/* Start an empty cache of spec->slots slots for `nlocal` experts; with the static policy its
 * resident set is the spec->slots experts of the largest `share` ([nlocal] expected share of the
 * rows, NULL: all alike; ties to the lower index), loaded at once and not counted as misses. A
 * spec with slots 0 (off) holds every expert. MP_OK or MP_ERR_RUNTIME (out of memory). */
int mp_expert_cache_init(struct mp_expert_cache *c, const struct mp_cache_spec *spec, int nlocal,
                         const double *share);
void mp_expert_cache_free(struct mp_expert_cache *c);

/* The access of local expert `e` before its FFN: returns the slot its weights are in (or are to be
 * fetched into) and sets *miss when they must be fetched first. lru and lfu fill an empty slot,
 * else evict the policy's victim; static fetches a non-resident expert into the staging slot
 * `slots` (one beyond the resident ones) and keeps its resident set. Off: slot e, never a miss. */
int mp_expert_cache_access(struct mp_expert_cache *c, int e, int *miss);

#endif
