/* routing_pool.c - a point's routing draws, made before timing and cycled through its iterations,
 * and the route step that hands a draw (or the gate's) to the compute backend's dispatch plan. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "layer_internal.h"
#include "routing.h"
#include "watchdog.h"

void mp_routing_pool_free(struct mp_routing_pool *p)
{
    free(p->ids);
    free(p->w);
    free(p->noise);
}

int mp_routing_pool_make(struct mp_routing_pool *p, const struct mp_point *pt, uint64_t seed,
                         long batch_tokens, long tok0, long ntok, int K, int E)
{
    memset(p, 0, sizeof *p);
    p->n = mp_routing_pool_size(pt->warmup, pt->iters, pt->cache.slots > 0);
    size_t pairs = (size_t)(ntok > 0 ? ntok : 1) * K;
    p->groups = pt->routing->groups;
    p->group_pick = pt->routing->group_pick;
    if (mp_routing_is_gate(pt->routing)) {
        p->noise = malloc((size_t)p->n * (ntok > 0 ? ntok : 1) * E * sizeof(float));
        if (!p->noise)
            goto oom;
        for (int d = 0; d < p->n; d++)
            mp_routing_gate_noise(pt->routing, seed, d, tok0, ntok, p->noise + (size_t)d * ntok * E);
        return MP_OK;
    }
    p->ids = malloc((size_t)p->n * pairs * sizeof(int32_t));
    p->w = malloc((size_t)p->n * pairs * sizeof(float));
    if (!p->ids || !p->w)
        goto oom;
    for (int d = 0; d < p->n; d++)
        mp_routing_draw(pt->routing, seed, d, batch_tokens, tok0, ntok, p->ids + (size_t)d * ntok * K,
                        p->w + (size_t)d * ntok * K);
    return MP_OK;
oom:
    mp_routing_pool_free(p);
    mp_error("out of memory for the routing pool");
    return MP_ERR_RUNTIME;
}

int mp_layer_route(struct mp_layer *L, struct mp_routing_pool *pool, int d, long ntok, int pinned,
                   int wait)
{
    int H = L->m.hidden, K = L->m.topk, E = L->m.experts;
    if (pool->noise) {
        const float *noise = pinned ? L->pin_noise : pool->noise + (size_t)d * ntok * E;
        int rc = L->ops->gate(L->dev, L->x, L->wg, noise, ntok, H, E, K, pool->groups,
                              pool->group_pick, NULL, NULL);
        return rc != MP_OK ? rc : L->ops->plan_build(L->dev, NULL, NULL, wait);
    }
    const int32_t *ids = pinned ? L->pin_ids : pool->ids + (size_t)d * ntok * K;
    const float *w = pinned ? L->pin_rw : pool->w + (size_t)d * ntok * K;
    return L->ops->plan_build(L->dev, ids, w, wait);
}

void mp_layer_free_pinned(struct mp_layer *L)
{
    if (L->ops->host_free) {
        L->ops->host_free(L->dev, L->pin_ids); /* pin_rw lies in the same block */
        L->ops->host_free(L->dev, L->pin_noise);
    }
    L->pin_ids = NULL;
    L->pin_rw = L->pin_noise = NULL;
    L->pin_ids_n = L->pin_noise_n = 0;
}

int mp_layer_pin_routing(struct mp_layer *L, struct mp_routing_pool *pool, int d, long ntok)
{
    const struct mp_compute_ops *o = L->ops;
    int K = L->m.topk, E = L->m.experts;
    size_t pairs = (size_t)(ntok > 0 ? ntok : 1) * K, logits = (size_t)(ntok > 0 ? ntok : 1) * E;
    if (pool->noise && L->pin_noise_n < logits) {
        o->host_free(L->dev, L->pin_noise);
        L->pin_noise = o->host_alloc(L->dev, logits * sizeof(float));
        L->pin_noise_n = L->pin_noise ? logits : 0;
        if (!L->pin_noise)
            goto oom;
    }
    if (!pool->noise && L->pin_ids_n < pairs) {
        /* ids and weights in one page-locked block, the weights right after this point's ids:
         * a backend copies both at once (plan_build) */
        o->host_free(L->dev, L->pin_ids);
        L->pin_ids = o->host_alloc(L->dev, pairs * (sizeof(int32_t) + sizeof(float)));
        L->pin_ids_n = L->pin_ids ? pairs : 0;
        if (!L->pin_ids_n)
            goto oom;
    }
    if (!pool->noise)
        L->pin_rw = (float *)(void *)(L->pin_ids + (ntok > 0 ? (size_t)ntok * K : 0));
    if (ntok <= 0)
        return MP_OK;
    if (pool->noise)
        memcpy(L->pin_noise, pool->noise + (size_t)d * ntok * E, (size_t)ntok * E * sizeof(float));
    else {
        memcpy(L->pin_ids, pool->ids + (size_t)d * ntok * K, (size_t)ntok * K * sizeof(int32_t));
        memcpy(L->pin_rw, pool->w + (size_t)d * ntok * K, (size_t)ntok * K * sizeof(float));
    }
    return MP_OK;
oom:
    mp_error("--graph: out of page-locked memory for the routing of %ld tokens", ntok);
    return MP_ERR_RUNTIME;
}

/* FNV-1a, 64 bits (Fowler, Noll and Vo; offset basis and prime from the FNV specification). */
#define FNV1A_OFFSET_BASIS 0xcbf29ce484222325ULL
static uint64_t fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

void mp_layer_gate_skew_hook(struct mp_layer *L, long ntok)
{
    const char *v = getenv("MOEPERF_TEST_GATE_SKEW");
    if (!v || atoi(v) != L->comm->rank || ntok < 1)
        return;
    for (int i = 0; i < L->m.hidden; i++)
        L->host_tok[i] = -L->host_tok[i];
}

int mp_layer_check_tp_routing(struct mp_layer *L, const struct mp_point *pt,
                              struct mp_routing_pool *pool, long ntok)
{
    struct mp_comm *c = L->comm;
    if (!pool->noise || L->tp == 1)
        return MP_OK;
    int K = L->m.topk, E = L->m.experts, rc = MP_OK;
    size_t pairs = (size_t)(ntok > 0 ? ntok : 1) * K;
    uint64_t mine[MP_ROUTING_POOL_DRAWS] = {0}, *all = NULL;
    int32_t *ids = malloc(pairs * sizeof *ids);
    float *w = malloc(pairs * sizeof *w);
    if (c->rank == 0)
        all = calloc((size_t)c->size * MP_ROUTING_POOL_DRAWS, sizeof *all);
    if (!ids || !w || (c->rank == 0 && !all)) {
        mp_error("out of memory for the routing check");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    int checked = pool->n < MP_ROUTING_POOL_DRAWS ? pool->n : MP_ROUTING_POOL_DRAWS;
    for (int d = 0; d < checked; d++) { /* the first draws: a cached point's others are alike */
        mine[d] = FNV1A_OFFSET_BASIS;
        if (ntok > 0) {
            MP_CHECK(L->ops->gate(L->dev, L->x, L->wg, pool->noise + (size_t)d * ntok * E, ntok,
                                  L->m.hidden, E, K, pt->routing->groups,
                                  pt->routing->group_pick, ids, w));
            mine[d] = fnv1a(ids, (size_t)ntok * K * sizeof *ids, mine[d]);
        }
    }
    MP_CHECK(c->ops->gather(c, mine, sizeof mine, all));
    int bad_rank = -1, bad_draw = -1;
    for (int r = 0; c->rank == 0 && r < c->size && bad_rank < 0; r++)
        for (int d = 0; d < checked && bad_rank < 0; d++)
            if (all[(size_t)r * MP_ROUTING_POOL_DRAWS + d] !=
                all[(size_t)(r - r % L->tp) * MP_ROUTING_POOL_DRAWS + d]) {
                bad_rank = r;
                bad_draw = d;
            }
    int agreed = mp_comm_agree(c, bad_rank < 0);
    if (agreed < 0) {
        rc = -agreed;
        goto out;
    }
    if (!agreed) {
        if (c->rank == 0)
            mp_error("--routing %s: TP ranks %d and %d computed different top-%d experts for the "
                     "same tokens (routing draw %d) during %s; the TP group's ranks must route "
                     "alike, or their TP reduce would exchange different row counts",
                     pt->routing->spec, bad_rank - bad_rank % L->tp, bad_rank, K, bad_draw,
                     mp_watchdog_point());
        rc = MP_ERR_RUNTIME;
    }
out:
    free(ids);
    free(w);
    free(all);
    return rc;
}
