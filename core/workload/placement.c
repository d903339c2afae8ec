/* placement.c - builds the expert → EP rank map (homes, hot replicas) and picks serving ranks. */
#include "placement.h"

#include "error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ACCEPTED "contiguous, round-robin, replicate-hot:R, eplb:SLOTS"

struct ranked {
    double load;
    int id;
};

/* Descending load, ties (and incomparable NaN loads) by ascending id. */
static int by_load_desc(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->load > y->load)
        return -1;
    if (x->load < y->load)
        return 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Parse `spec` into p->kind and p->replicate; prints the error itself. */
static int parse_spec(const char *spec, int experts, struct mp_placement *p)
{
    static const char rh[] = "replicate-hot:";
    if (!strcmp(spec, "contiguous")) {
        p->kind = MP_PLACE_CONTIGUOUS;
    } else if (!strcmp(spec, "round-robin")) {
        p->kind = MP_PLACE_ROUND_ROBIN;
    } else if (!strncmp(spec, rh, sizeof rh - 1)) {
        const char *arg = spec + sizeof rh - 1;
        char *end;
        errno = 0;
        long v = strtol(arg, &end, 10);
        if (!*arg || *end || errno || v < 0 || v > experts) {
            mp_usage("--placement: replicate-hot:R needs 0 <= R <= %d (experts), got %s", experts,
                     *arg ? arg : "nothing");
            return MP_ERR_USAGE;
        }
        p->kind = MP_PLACE_REPLICATE_HOT;
        p->replicate = (int)v;
    } else if (!strncmp(spec, "eplb:", 5)) {
        char *end;
        errno = 0;
        long v = strtol(spec + 5, &end, 10);
        if (!spec[5] || *end || errno || v < 0 || v > 1L << 24) {
            mp_usage("--placement: eplb:SLOTS needs a whole number of redundant slots >= 0, got %s",
                     spec[5] ? spec + 5 : "nothing");
            return MP_ERR_USAGE;
        }
        p->kind = MP_PLACE_EPLB;
        p->replicate = (int)v;
    } else {
        mp_usage("--placement: '%s' is not one of " ACCEPTED, spec);
        return MP_ERR_USAGE;
    }
    if (strlen(spec) >= sizeof p->spec) {
        mp_usage("--placement: '%.40s...' is longer than %zu characters", spec,
                 sizeof p->spec - 1);
        return MP_ERR_USAGE;
    }
    strcpy(p->spec, spec);
    return MP_OK;
}

/* Contiguous homes: rank r holds the run starting at r·q + min(r, m), of q + (r < m) experts,
 * with q = E / ep and m = E mod ep. */
static void contiguous_homes(int experts, int ep, int *home)
{
    int q = experts / ep, m = experts % ep, e = 0;
    for (int r = 0; r < ep; r++)
        for (int i = 0; i < q + (r < m); i++)
            home[e++] = r;
}

struct replica {
    double weight; /* the expert's load divided by its replica count */
    int id;
};

static int by_weight_desc(const void *a, const void *b)
{
    const struct replica *x = a, *y = b;
    if (x->weight != y->weight)
        return x->weight > y->weight ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* eplb: replica counts by greedy load per replica, then heaviest-first packing onto the
 * least-loaded rank with room that lacks the expert. held[e·ep + r] = 1 where r holds e. */
static int eplb_assign(int E, int ep, int slots, const double *load, char *held, int *home)
{
    int *nrep = calloc((size_t)E, sizeof *nrep), *count = calloc((size_t)ep, sizeof *count);
    double *rank_load = calloc((size_t)ep, sizeof *rank_load);
    struct replica *items = malloc(((size_t)E + (size_t)slots) * sizeof *items);
    if (!nrep || !count || !rank_load || !items) {
        free(nrep); free(count); free(rank_load); free(items);
        return MP_ERR_RUNTIME;
    }
    for (int e = 0; e < E; e++)
        nrep[e] = 1;
    for (int s = 0; s < slots; s++) { /* a slot to the expert with the most load per replica */
        int best = -1;
        for (int e = 0; e < E; e++) {
            double le = load ? load[e] : 1.0;
            if (nrep[e] < ep && (best < 0 || le / nrep[e] > (load ? load[best] : 1.0) / nrep[best]))
                best = e;
        }
        nrep[best]++;
    }
    int n = 0;
    for (int e = 0; e < E; e++)
        for (int k = 0; k < nrep[e]; k++)
            items[n++] = (struct replica){(load ? load[e] : 1.0) / nrep[e], e};
    qsort(items, (size_t)n, sizeof *items, by_weight_desc);
    int cap = (n + ep - 1) / ep;
    for (int e = 0; e < E; e++)
        home[e] = -1;
    for (int i = 0; i < n; i++) {
        int e = items[i].id, pick = -1;
        for (int pass = 0; pass < 2 && pick < 0; pass++) /* the second pass ignores the cap */
            for (int r = 0; r < ep; r++)
                if (!held[(size_t)e * ep + r] && (pass || count[r] < cap) &&
                    (pick < 0 || rank_load[r] < rank_load[pick]))
                    pick = r;
        held[(size_t)e * ep + pick] = 1;
        count[pick]++;
        rank_load[pick] += items[i].weight;
        if (home[e] < 0)
            home[e] = pick;
    }
    free(nrep); free(count); free(rank_load); free(items);
    return MP_OK;
}

int mp_placement_build(const char *spec, int experts, int ep, const double *load,
                       struct mp_placement *p)
{
    memset(p, 0, sizeof *p);
    if (!spec)
        spec = "";
    if (experts < 1 || ep < 1) {
        mp_usage("--placement: '%s' needs experts >= 1 and EP ranks >= 1, got %d and %d", spec,
                 experts, ep);
        return MP_ERR_USAGE;
    }
    int rc = parse_spec(spec, experts, p);
    if (rc != MP_OK)
        return rc;
    p->experts = experts;
    p->ep = ep;

    if (p->kind == MP_PLACE_EPLB && (long)p->replicate > (long)experts * (ep - 1)) {
        mp_usage("--placement: eplb:%d on ep%d: at most %ld redundant slots (every expert on every "
                 "rank)", p->replicate, ep, (long)experts * (ep - 1));
        return MP_ERR_USAGE;
    }
    char *held = calloc((size_t)experts * ep, 1); /* held[e·ep + r]: rank r holds expert e */
    int *cursor = calloc((size_t)ep, sizeof *cursor);
    struct ranked *rank = NULL;
    p->home = malloc((size_t)experts * sizeof *p->home);
    p->local_off = calloc((size_t)ep + 1, sizeof *p->local_off);
    p->holder_off = calloc((size_t)experts + 1, sizeof *p->holder_off);
    if (!held || !cursor || !p->home || !p->local_off || !p->holder_off)
        goto oom;

    if (p->kind == MP_PLACE_EPLB) {
        if (eplb_assign(experts, ep, p->replicate, load, held, p->home) != MP_OK)
            goto oom;
    } else {
        if (p->kind == MP_PLACE_ROUND_ROBIN)
            for (int e = 0; e < experts; e++)
                p->home[e] = e % ep;
        else
            contiguous_homes(experts, ep, p->home);
        for (int e = 0; e < experts; e++)
            held[(size_t)e * ep + p->home[e]] = 1;
    }
    if (p->kind == MP_PLACE_REPLICATE_HOT && p->replicate > 0) {
        rank = malloc((size_t)experts * sizeof *rank);
        if (!rank)
            goto oom;
        for (int e = 0; e < experts; e++)
            rank[e] = (struct ranked){load ? load[e] : 0.0, e};
        qsort(rank, (size_t)experts, sizeof *rank, by_load_desc);
        for (int i = 0; i < p->replicate; i++)
            memset(held + (size_t)rank[i].id * ep, 1, (size_t)ep);
    }

    /* Holders per expert and experts per rank; walking experts in ascending order keeps both
     * lists sorted. */
    for (int e = 0; e < experts; e++)
        for (int r = 0; r < ep; r++)
            if (held[(size_t)e * ep + r]) {
                p->holder_off[e + 1]++;
                p->local_off[r + 1]++;
            }
    for (int e = 0; e < experts; e++)
        p->holder_off[e + 1] += p->holder_off[e];
    for (int r = 0; r < ep; r++) {
        int n = p->local_off[r + 1];
        if (n > p->max_local)
            p->max_local = n;
        p->local_off[r + 1] += p->local_off[r];
    }
    p->holders = malloc(((size_t)p->holder_off[experts] + 1) * sizeof *p->holders);
    p->local_ids = malloc(((size_t)p->local_off[ep] + 1) * sizeof *p->local_ids);
    if (!p->holders || !p->local_ids)
        goto oom;
    for (int e = 0; e < experts; e++) {
        int *h = p->holders + p->holder_off[e], k = 0;
        for (int r = 0; r < ep; r++)
            if (held[(size_t)e * ep + r]) {
                h[k++] = r;
                p->local_ids[p->local_off[r] + cursor[r]++] = e;
            }
    }
    rc = MP_OK;
    goto out;
oom:
    mp_error("out of memory building placement '%s' for %d experts on %d ranks", spec, experts, ep);
    mp_placement_free(p);
    rc = MP_ERR_RUNTIME;
out:
    free(held);
    free(cursor);
    free(rank);
    return rc;
}

void mp_placement_free(struct mp_placement *p)
{
    free(p->home);
    free(p->local_off);
    free(p->local_ids);
    free(p->holder_off);
    free(p->holders);
    free(p->node);
    p->home = p->local_off = p->local_ids = p->holder_off = p->holders = p->node = NULL;
    p->max_local = 0;
}

int mp_placement_local_index(const struct mp_placement *p, int ep_rank, int expert)
{
    if (ep_rank < 0 || ep_rank >= p->ep || expert < 0 || expert >= p->experts)
        return -1;
    int lo = p->local_off[ep_rank], hi = p->local_off[ep_rank + 1]; /* search [lo, hi) */
    const int *ids = p->local_ids;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ids[mid] < expert)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->local_off[ep_rank + 1] && ids[lo] == expert ? lo - p->local_off[ep_rank] : -1;
}

int mp_placement_pack_nodes(struct mp_placement *p, int tp, int gpus_per_node)
{
    int *node = malloc((size_t)p->ep * sizeof *node);
    if (!node) {
        mp_error("out of memory recording the nodes of %d EP ranks", p->ep);
        return MP_ERR_RUNTIME;
    }
    for (int q = 0; q < p->ep; q++)
        node[q] = (int)((long)q * tp / (gpus_per_node > 0 ? gpus_per_node : 1));
    int rc = mp_placement_set_nodes(p, node);
    free(node);
    return rc;
}

int mp_placement_set_nodes(struct mp_placement *p, const int *node)
{
    int *copy = NULL;
    if (node) {
        copy = malloc((size_t)p->ep * sizeof *copy);
        if (!copy) {
            mp_error("out of memory recording the nodes of %d EP ranks", p->ep);
            return MP_ERR_RUNTIME;
        }
        memcpy(copy, node, (size_t)p->ep * sizeof *copy);
    }
    free(p->node);
    p->node = copy;
    return MP_OK;
}

int mp_placement_node_holders(const struct mp_placement *p, int src, int expert)
{
    int m = 0;
    for (int h = p->holder_off[expert]; h < p->holder_off[expert + 1]; h++)
        m += !p->node || p->node[p->holders[h]] == p->node[src];
    return m;
}

/* The i-th (from 0) holder of `expert` on src's node, holders ascending. */
static int node_holder(const struct mp_placement *p, int src, int expert, long i)
{
    for (int h = p->holder_off[expert];; h++)
        if ((!p->node || p->node[p->holders[h]] == p->node[src]) && i-- == 0)
            return p->holders[h];
}

int mp_placement_dest(const struct mp_placement *p, int src, int expert, long token)
{
    if (mp_placement_local_index(p, src, expert) >= 0)
        return src;
    long m = mp_placement_node_holders(p, src, expert);
    long n = m > 0 ? m : p->holder_off[expert + 1] - p->holder_off[expert];
    long i = token % n;
    if (i < 0)
        i += n;
    return m > 0 ? node_holder(p, src, expert, i) : p->holders[p->holder_off[expert] + i];
}
