/* a2a_pattern.c - moeperf-a2a's MoE pattern: each routing draw's dispatch counts, per pair or
 * deduplicated, as each rank (measured, or one of the model's virtual ranks) exchanges them
 * (a2a_pattern.h). */
#include "a2a_pattern.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "dispatch_plan.h"
#include "error.h"
#include "routing.h"

/* One hop's counts of draw d from the dedup counts' rows[ep·ep] (e sends p rows[e·ep + p]) for
 * EP rank e; returns the rows e sends. */
static long hop_counts(struct mp_a2a_counts *c, int d, const double *rows, int ep, int e)
{
    int *sc = c->scount + (size_t)d * ep, *sd = c->sdispl + (size_t)d * ep;
    int *rn = c->rcount + (size_t)d * ep, *rd = c->rdispl + (size_t)d * ep;
    long sent = 0, got = 0;
    for (int p = 0; p < ep; p++) {
        sc[p] = (int)rows[(size_t)e * ep + p];
        rn[p] = (int)rows[(size_t)p * ep + e];
        sd[p] = (int)sent;
        rd[p] = (int)got;
        sent += sc[p];
        got += rn[p];
    }
    return sent;
}

/* The bytes of one dispatched row in `dt` (core/workload/dtype.h): H times the backend's element size (the
 * profile's on the model) for bf16, H + 4·⌈H/128⌉ for fp8. The exchange moves that many bytes a
 * row as they lie in the buffer: it times the wire volume of an fp8 dispatch, not the packing
 * (moeperf-layer measures that). */
double a2a_row_bytes(const struct mp_session *s, enum mp_dtype dt)
{
    return mp_dispatch_row_bytes(dt, s->model.hidden,
                                 (double)s->model.hidden * mp_session_elem_bytes(s));
}

/* EP rank e's own tokens of draw d routed and planned (mp_plan_send into `plan`), as every rank of
 * a measured run routes its share of the batch; ids and w hold the rank's token count. */
static void route_rank(struct mp_plan *plan, const struct mp_session *s,
                       const struct mp_routing *rt, const struct mp_placement *pl, long total,
                       int e, int d, int32_t *ids, float *w)
{
    long tok0, ntok = mp_token_split(total, s->comm->ep, e, &tok0);
    mp_routing_draw(rt, (uint64_t)s->o.seed, d, total, tok0, ntok, ids, w);
    mp_plan_send(plan, pl, e, tok0, ntok, ids, w);
}

/* Every rank counts the whole batch of a draw, the same counts: the whole ep × ep counts of one
 * draw (every chunk's, both hops) are worked out once per process, by the first rank to need
 * them, and read by the others (the model's virtual ranks share one process; a measured rank has
 * it to itself). Every rank leaves a draw through a collective (max_double) before any starts the
 * next, so one draw is kept at a time. */
struct shared_key {
    long point; /* the sweep's point: its routing and placement, which each rank builds alike */
    uint64_t seed;
    long total;
    int d, mode, tp, ep, gpn, nchunks;
};

static struct {
    struct shared_key key;
    int valid;
    double *rows; /* [nchunks · 2 · ep · ep] */
    size_t cap;
} shared;

static int same_key(const struct shared_key *a, const struct shared_key *b)
{
    return a->point == b->point && a->seed == b->seed && a->total == b->total &&
           a->d == b->d && a->mode == b->mode && a->tp == b->tp && a->ep == b->ep &&
           a->gpn == b->gpn && a->nchunks == b->nchunks;
}

/* Work out the counts of draw key->d of routing rt and placement pl into shared (ids, w: scratch
 * of total·K). */
static int count_shared(const struct shared_key *key, const struct mp_routing *rt,
                        const struct mp_placement *pl, int32_t *ids, float *w, int K)
{
    size_t cells = (size_t)key->ep * key->ep, need = (size_t)key->nchunks * 2 * cells;
    struct mp_dedup_counts dc = {0};
    if (need > shared.cap) {
        double *grown = realloc(shared.rows, need * sizeof *grown);
        if (!grown)
            return MP_ERR_RUNTIME;
        shared.rows = grown;
        shared.cap = need;
    }
    if (mp_dedup_alloc(&dc, key->ep) != MP_OK)
        return MP_ERR_RUNTIME;
    mp_routing_draw(rt, key->seed, key->d, key->total, 0, key->total, ids, w);
    for (int k = 0; k < key->nchunks; k++) {
        mp_dedup_count_chunk((enum mp_dedup)key->mode, pl, ids, key->total, K, key->tp,
                             key->gpn, key->nchunks, k, &dc);
        memcpy(shared.rows + (size_t)k * 2 * cells, dc.rows, 2 * cells * sizeof *dc.rows);
    }
    mp_dedup_free(&dc);
    shared.key = *key;
    shared.valid = 1;
    return MP_OK;
}

/* The counts of draw key->d, every chunk's both hops (rows + k·2·ep·ep), or NULL out of
 * memory. */
static const double *shared_draw(const struct shared_key *key, const struct mp_routing *rt,
                                 const struct mp_placement *pl, int32_t *ids, float *w, int K)
{
    int ok = shared.valid && same_key(&shared.key, key);
    if (!ok) {
        shared.valid = 0;
        ok = count_shared(key, rt, pl, ids, w, K) == MP_OK;
    }
    const double *out = ok ? shared.rows : NULL;
    if (!out)
        mp_error("out of memory counting a draw of %ld tokens", key->total);
    return out;
}

/* MoE deduplicated (`mode` rank or node): the dispatch counts of `ndraws` routing draws, each cut
 * into `nchunks` chunks of tokens (mp_dedup_count_chunk; 1: the whole batch), as
 * core/layer/dedup.c counts them, rows of a2a_row_bytes(dt) bytes plus the top-K ids and weights
 * (mp_dedup_meta_bytes): rank, one row per (token, destination rank ≠ own rank) in `c`; node, the
 * rows to the ranks of the token's node and to the relays in `c` and the relays' forwards inside
 * their node in `c2` (nodes of gpus_per_node = ranks / nodes ranks, as the launcher packs them).
 * Every rank counts the whole batch, so the receive counts need no exchange. bytes_per_rank: the
 * largest per-rank send over both hops, in c. */
int a2a_counts_dedup(struct mp_a2a_counts *c, struct mp_a2a_counts *c2, enum mp_dedup mode,
                        enum mp_dtype dt, struct mp_session *s, const struct mp_routing *rt,
                        const struct mp_placement *pl, long total, int ndraws, int nchunks,
                        long point)
{
    struct mp_comm *cm = s->comm;
    int ep = cm->ep, K = s->model.topk, e = cm->ep_rank, rc = MP_OK, node = mode == MP_DEDUP_NODE;
    int32_t *ids = malloc((size_t)(total > 0 ? total : 1) * K * sizeof *ids);
    float *w = malloc((size_t)(total > 0 ? total : 1) * K * sizeof *w);
    if (!ids || !w || mp_a2a_counts_alloc(c, ndraws, nchunks, ep) != MP_OK ||
        (node && mp_a2a_counts_alloc(c2, ndraws, nchunks, ep) != MP_OK)) {
        free(ids);
        free(w);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    c->row_bytes = (size_t)a2a_row_bytes(s, dt) + (size_t)mp_dedup_meta_bytes(mode, K);
    c2->row_bytes = c->row_bytes;
    int gpn = mp_session_ranks_per_node(s);
    double sum_max = 0;
    size_t cells = (size_t)ep * ep;
    for (int d = 0; d < ndraws && rc == MP_OK; d++) {
        struct shared_key key = {.point = point, .seed = (uint64_t)s->o.seed, .total = total,
                                 .d = d, .mode = mode, .tp = cm->tp, .ep = ep, .gpn = gpn,
                                 .nchunks = nchunks};
        const double *rows = shared_draw(&key, rt, pl, ids, w, K);
        if (!rows) {
            rc = MP_ERR_RUNTIME;
            break;
        }
        long sent = 0;
        for (int k = 0; k < nchunks; k++) { /* chunks partition the tokens: their rows add up */
            int set = d * nchunks + k;
            const double *chunk = rows + (size_t)k * 2 * cells;
            sent += hop_counts(c, set, chunk, ep, e);
            if (node)
                sent += hop_counts(c2, set, chunk + cells, ep, e);
        }
        double mine = (double)sent * (double)c->row_bytes;
        rc = cm->ops->max_double(cm, &mine);
        sum_max += mine;
    }
    c->bytes_per_rank = sum_max / ndraws;
    free(ids);
    free(w);
    return rc;
}

/* MoE: the dispatch counts of `ndraws` routing draws, exchanged now (untimed), rows in `dt`. */
int a2a_counts_moe(struct mp_a2a_counts *c, enum mp_dtype dt, struct mp_session *s,
                      const struct mp_routing *rt,
                      const struct mp_placement *pl, long total, int ndraws)
{
    struct mp_comm *cm = s->comm;
    int ep = cm->ep, K = s->model.topk, rc;
    long e = cm->ep_rank, tok0, ntok = mp_token_split(total, ep, (int)e, &tok0);
    struct mp_plan plan;
    int32_t *ids = malloc((size_t)(ntok > 0 ? ntok : 1) * K * sizeof *ids);
    float *w = malloc((size_t)(ntok > 0 ? ntok : 1) * K * sizeof *w);
    if (!ids || !w || mp_a2a_counts_alloc(c, ndraws, 1, ep) != MP_OK) {
        free(ids);
        free(w);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    rc = mp_plan_alloc(&plan, ep, pl->max_local, ntok, K);
    c->row_bytes = (size_t)a2a_row_bytes(s, dt);
    double sum_max = 0;
    for (int d = 0; d < ndraws && rc == MP_OK; d++) {
        route_rank(&plan, s, rt, pl, total, (int)e, d, ids, w);
        rc = cm->ops->alltoall_int(cm, plan.send_cnt, plan.recv_cnt, plan.max_local);
        if (rc != MP_OK)
            break;
        mp_plan_recv(&plan, mp_placement_nlocal(pl, (int)e));
        memcpy(c->scount + (size_t)d * ep, plan.send_rows, (size_t)ep * sizeof(int));
        memcpy(c->sdispl + (size_t)d * ep, plan.send_displ, (size_t)ep * sizeof(int));
        memcpy(c->rcount + (size_t)d * ep, plan.recv_rows, (size_t)ep * sizeof(int));
        memcpy(c->rdispl + (size_t)d * ep, plan.recv_displ, (size_t)ep * sizeof(int));
        double mine = (double)plan.nsend * (double)c->row_bytes;
        rc = cm->ops->max_double(cm, &mine);
        sum_max += mine;
    }
    c->bytes_per_rank = sum_max / ndraws;
    mp_plan_free(&plan);
    free(ids);
    free(w);
    return rc;
}
