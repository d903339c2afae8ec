/* placement.c - builds the expert → EP rank map (homes, hot replicas) and picks serving ranks. */
#include "placement.h"

#include "error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ACCEPTED "contiguous, round-robin, replicate-hot:R"

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

    char *hot = calloc((size_t)experts, 1);
    int *cursor = calloc((size_t)ep, sizeof *cursor);
    struct ranked *rank = NULL;
    p->home = malloc((size_t)experts * sizeof *p->home);
    p->local_off = calloc((size_t)ep + 1, sizeof *p->local_off);
    p->holder_off = calloc((size_t)experts + 1, sizeof *p->holder_off);
    if (!hot || !cursor || !p->home || !p->local_off || !p->holder_off)
        goto oom;

    if (p->kind == MP_PLACE_ROUND_ROBIN)
        for (int e = 0; e < experts; e++)
            p->home[e] = e % ep;
    else
        contiguous_homes(experts, ep, p->home);

    if (p->kind == MP_PLACE_REPLICATE_HOT && p->replicate > 0) {
        rank = malloc((size_t)experts * sizeof *rank);
        if (!rank)
            goto oom;
        for (int e = 0; e < experts; e++)
            rank[e] = (struct ranked){load ? load[e] : 0.0, e};
        qsort(rank, (size_t)experts, sizeof *rank, by_load_desc);
        for (int i = 0; i < p->replicate; i++)
            hot[rank[i].id] = 1;
    }

    /* Holders per expert and experts per rank; walking experts in ascending order keeps both
     * lists sorted. */
    for (int e = 0; e < experts; e++) {
        int n = hot[e] ? ep : 1;
        p->holder_off[e + 1] = p->holder_off[e] + n;
        if (hot[e])
            for (int r = 0; r < ep; r++)
                p->local_off[r + 1]++;
        else
            p->local_off[p->home[e] + 1]++;
    }
    for (int r = 0; r < ep; r++) {
        int n = p->local_off[r + 1];
        if (n > p->max_local)
            p->max_local = n;
        p->local_off[r + 1] += p->local_off[r];
    }
    p->holders = malloc((size_t)p->holder_off[experts] * sizeof *p->holders);
    p->local_ids = malloc((size_t)p->local_off[ep] * sizeof *p->local_ids);
    if (!p->holders || !p->local_ids)
        goto oom;
    for (int e = 0; e < experts; e++) {
        int *h = p->holders + p->holder_off[e];
        if (hot[e]) {
            for (int r = 0; r < ep; r++) {
                h[r] = r;
                p->local_ids[p->local_off[r] + cursor[r]++] = e;
            }
        } else {
            int r = p->home[e];
            h[0] = r;
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
    free(hot);
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
    p->home = p->local_off = p->local_ids = p->holder_off = p->holders = NULL;
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

int mp_placement_dest(const struct mp_placement *p, int src, int expert, long token)
{
    if (mp_placement_local_index(p, src, expert) >= 0)
        return src;
    long n = p->holder_off[expert + 1] - p->holder_off[expert];
    long i = token % n;
    if (i < 0)
        i += n;
    return p->holders[p->holder_off[expert] + i];
}
