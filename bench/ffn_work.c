/* ffn_work.c - moeperf-ffn's rows, weights and buffers of one point: the routed rows of every
 * rank's local experts, the layout's expert weights on the device and the point's device buffers
 * with their memory check (ffn_work.h). */
#include "ffn_work.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "expert_store.h"
#include "memguard.h"
#include "dispatch_plan.h"
#include "routing.h"
#include "topo.h"
#include "weights.h"

void ffn_work_free(struct ffn_work *w)
{
    free(w->act_ids);
    free(w->act_local);
    free(w->row_off);
    free(w->row_tok);
    memset(w, 0, sizeof *w);
}

/* Route the whole batch (draw 0), serve every token-expert pair where the placement says (a token
 * lives on the EP rank that holds it), and count the rows of every rank's local experts. Fills
 * the critical rank's rows and active experts and this rank's row layout. */
int ffn_work_plan(struct ffn_work *w, const struct mp_session *s, const struct mp_layout *lay,
                  const struct mp_routing *r, const struct mp_placement *pl, long batch)
{
    const struct mp_model *m = &s->model;
    int K = m->topk, S = m->shared, ep = lay->ep, ml = pl->max_local > 0 ? pl->max_local : 1;
    int me = s->comm->ep_rank, rc = MP_ERR_RUNTIME;
    memset(w, 0, sizeof *w);
    w->total = batch * s->o.seq;
    w->tokens_per_rank = (w->total + ep - 1) / ep;
    size_t pairs = (size_t)w->total * K;
    int32_t *ids = malloc(pairs * sizeof *ids);
    float *wt = malloc(pairs * sizeof *wt);
    long *cnt = calloc((size_t)ep * ml, sizeof *cnt);
    int *slot = malloc((size_t)ml * sizeof *slot);
    long *pos = NULL;
    if (!ids || !wt || !cnt || !slot)
        goto oom;
    mp_routing_draw(r, (uint64_t)s->o.seed, 0, w->total, 0, w->total, ids, wt);

    for (int e = 0; e < ep; e++) {
        long t0, n = mp_token_split(w->total, ep, e, &t0);
        for (long t = t0; t < t0 + n; t++)
            for (int k = 0; k < K; k++) {
                int x = ids[t * K + k], d = mp_placement_dest(pl, e, x, t);
                int li = mp_placement_local_index(pl, d, x);
                if (li < 0) {
                    mp_error("placement %s sent expert %d to rank %d, which holds no copy",
                             pl->spec, x, d);
                    goto out;
                }
                cnt[(size_t)d * ml + li]++;
            }
    }
    w->crit_rows = -1;
    for (int e = 0; e < ep; e++) {
        long t0, n = mp_token_split(w->total, ep, e, &t0), rows = (long)S * n;
        int active = n > 0 ? S : 0;
        for (int i = 0; i < mp_placement_nlocal(pl, e); i++) {
            rows += cnt[(size_t)e * ml + i];
            active += cnt[(size_t)e * ml + i] > 0;
        }
        /* the most rows, and of ranks alike in rows the most experts (the most weights read) */
        if (rows > w->crit_rows || (rows == w->crit_rows && active > w->crit_active)) {
            w->crit_rows = rows;
            w->crit_active = active;
        }
    }

    /* this rank: its active experts, expert-major offsets and the token of every row */
    w->ntok = mp_token_split(w->total, ep, me, &w->tok0);
    int nl = mp_placement_nlocal(pl, me);
    const int *lids = pl->local_ids + pl->local_off[me];
    w->act_ids = malloc(((size_t)nl + 1) * sizeof *w->act_ids);
    w->act_local = malloc(((size_t)nl + 1) * sizeof *w->act_local);
    w->row_off = malloc(((size_t)nl + 1) * sizeof *w->row_off);
    pos = malloc(((size_t)nl + 1) * sizeof *pos);
    if (!w->act_ids || !w->act_local || !w->row_off || !pos)
        goto oom;
    w->row_off[0] = 0;
    for (int i = 0; i < nl; i++) {
        long c = cnt[(size_t)me * ml + i];
        slot[i] = c > 0 ? w->nact : -1;
        if (c > 0) {
            w->act_ids[w->nact] = lids[i];
            w->act_local[w->nact] = i;
            w->row_off[w->nact + 1] = w->row_off[w->nact] + c;
            pos[w->nact] = w->row_off[w->nact];
            w->nact++;
        }
    }
    w->row_tok = malloc(((size_t)w->row_off[w->nact] + 1) * sizeof *w->row_tok);
    if (!w->row_tok)
        goto oom;
    for (int e = 0; e < ep; e++) {
        long t0, n = mp_token_split(w->total, ep, e, &t0);
        for (long t = t0; t < t0 + n; t++)
            for (int k = 0; k < K; k++) {
                int x = ids[t * K + k];
                if (mp_placement_dest(pl, e, x, t) == me)
                    w->row_tok[pos[slot[mp_placement_local_index(pl, me, x)]]++] = (int32_t)t;
            }
    }
    rc = MP_OK;
    goto out;
oom:
    mp_error("out of memory planning %ld tokens", w->total);
out:
    free(ids);
    free(wt);
    free(cnt);
    free(slot);
    free(pos);
    if (rc != MP_OK)
        ffn_work_free(w);
    return rc;
}

void ffn_wcache_free(struct ffn_wcache *wc, const struct mp_session *s)
{
    for (int i = 0; i < wc->n && wc->wgu; i++) {
        if (wc->wgu[i])
            s->cops->free(s->dev, wc->wgu[i]);
        if (wc->wd[i])
            s->cops->free(s->dev, wc->wd[i]);
    }
    free(wc->wgu);
    free(wc->wd);
    free(wc->hgu);
    free(wc->hd);
    memset(wc, 0, sizeof *wc);
}

int ffn_wcache_init(struct ffn_wcache *wc, const struct mp_session *s, int tp, enum mp_dtype dt)
{
    size_t H = (size_t)s->model.hidden, Dl = (size_t)(s->model.ffn / tp);
    memset(wc, 0, sizeof *wc);
    wc->dt = dt;
    for (int i = 0; i < s->o.weight_dtype.n; i++) /* bf16 and fp8 points on the same weights */
        wc->blocked |= strcmp(s->o.weight_dtype.v[i], "fp8") == 0;
    wc->n = s->model.experts + s->model.shared;
    wc->wgu = calloc((size_t)wc->n, sizeof(void *));
    wc->wd = calloc((size_t)wc->n, sizeof(void *));
    if (s->cops->memory == MP_MEMORY_VIRTUAL) /* no weights to generate: they hold nothing */
        return wc->wgu && wc->wd ? MP_OK : (ffn_wcache_free(wc, s), MP_ERR_RUNTIME);
    wc->hgu = malloc(H * 2 * Dl * sizeof(float));
    wc->hd = malloc(Dl * H * sizeof(float));
    if (!wc->wgu || !wc->wd || !wc->hgu || !wc->hd) {
        mp_error("out of memory for expert weights");
        ffn_wcache_free(wc, s);
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* Generate and store this rank's TP shard of `expert` in the cache's weight dtype unless it is
 * already on the device. */
int ffn_wcache_load(struct ffn_wcache *wc, const struct mp_session *s, int expert)
{
    const struct mp_comm *c = s->comm;
    size_t H = (size_t)s->model.hidden, Dl = (size_t)(s->model.ffn / c->tp);
    if (wc->wgu[expert])
        return MP_OK;
    if (s->cops->memory == MP_MEMORY_VIRTUAL) { /* a name per expert, holding nothing */
        wc->wgu[expert] = &wc->wgu[expert];
        wc->wd[expert] = &wc->wd[expert];
        return MP_OK;
    }
    mp_weights_expert((uint64_t)s->o.seed, expert, s->model.hidden, s->model.ffn, c->tp,
                      c->tp_rank, wc->blocked, wc->hgu, wc->hd);
    return mp_expert_store(s->cops, s->dev, wc->dt, expert, (int)H, (int)Dl, wc->hgu, wc->hd,
                           &wc->wgu[expert], &wc->wd[expert]);
}

void ffn_bufs_free(struct ffn_bufs *b, const struct mp_session *s)
{
    const struct mp_compute_ops *o = s->cops;
    if (b->in)
        o->free(s->dev, b->in);
    if (b->xs)
        o->free(s->dev, b->xs);
    if (b->out)
        o->free(s->dev, b->out);
    if (b->work)
        o->free(s->dev, b->work);
    free(b->wgu);
    free(b->wd);
    memset(b, 0, sizeof *b);
}

/* Refuse (on every rank alike) a point whose new weights and buffers would not fit in some rank's
 * budget: its GPU's free memory, or its share of the host's (mp_memory_agree). */
int ffn_memory_guard(const struct mp_session *s, const struct ffn_wcache *wc, const struct ffn_work *w,
                     long batch)
{
    const struct mp_model *m = &s->model;
    struct mp_comm *c = s->comm;
    double H = m->hidden, Dl = (double)m->ffn / c->tp, elem = (double)s->cops->elem_size;
    int fresh = 0;
    if (s->cops->memory == MP_MEMORY_VIRTUAL) /* holds nothing */
        return MP_OK;
    for (int i = 0; i < w->nact; i++)
        fresh += !wc->wgu[w->act_ids[i]];
    for (int i = 0; i < m->shared; i++)
        fresh += w->ntok > 0 && !wc->wgu[m->experts + i];
    double routed = (double)w->row_off[w->nact], tok = (double)w->ntok;
    double need = fresh * mp_expert_weight_bytes(wc->dt, (int)H, (int)Dl, elem) +
                  (routed * 2 + tok * (1 + m->shared)) * H * elem +
                  (routed > tok ? routed : tok) * (2 * Dl * elem + H * sizeof(float));
    struct mp_mem_verdict v;
    int fits = mp_memory_agree(c, s->cops, s->dev, s->o.max_memory, need, &v);
    if (fits < 0)
        return -fits;
    if (!fits) {
        mp_usage("--batch %ld with --hidden %d --ffn %d and %d experts on ep%d needs about %.3g GB "
                 "per rank; rank %d (host %s) has %.3g GB free%s, its budget is %.3g GB (%s); "
                 "lower --hidden/--ffn/--batch or use more ranks",
                 batch, m->hidden, m->ffn, m->experts, c->ep, v.need / 1e9, v.rank, v.host,
                 v.free_bytes / 1e9, s->cops->mem_info ? " on its GPU" : " on its host",
                 v.budget / 1e9, v.source);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* Weights, inputs and buffers of this rank for point `w`, all before timing. */
int ffn_bufs_make(struct ffn_bufs *b, const struct mp_session *s, struct ffn_wcache *wc,
                  const struct ffn_work *w, struct mp_weight_cache *cache)
{
    const struct mp_compute_ops *o = s->cops;
    const struct mp_model *m = &s->model;
    size_t H = (size_t)m->hidden, Dl = (size_t)(m->ffn / s->comm->tp), S = (size_t)m->shared;
    size_t routed = (size_t)w->row_off[w->nact], tok = (size_t)w->ntok;
    size_t maxrows = S && tok ? tok : 0;
    int rc = MP_OK;
    float *host = NULL;
    memset(b, 0, sizeof *b);
    for (int i = 0; i < w->nact; i++) {
        size_t n = (size_t)(w->row_off[i + 1] - w->row_off[i]);
        maxrows = n > maxrows ? n : maxrows;
    }
    b->wgu = calloc((size_t)w->nact + S + 1, sizeof(void *));
    b->wd = calloc((size_t)w->nact + S + 1, sizeof(void *));
    b->in = o->alloc(s->dev, (routed ? routed : 1) * H);
    b->xs = o->alloc(s->dev, (tok ? tok : 1) * H);
    b->out = o->alloc(s->dev, (routed + S * tok + 1) * H);
    if (routed > maxrows) /* grouped and skinny GEMMs hold every expert's rows at once */
        maxrows = routed;
    b->work = o->alloc(s->dev, (maxrows ? maxrows : 1) * 2 * Dl);
    int virtual = o->memory == MP_MEMORY_VIRTUAL; /* buffers that hold nothing: no inputs */
    if (!virtual)
        host = malloc(((routed > tok ? routed : tok) + 1) * H * sizeof(float));
    if (!b->wgu || !b->wd || !b->in || !b->xs || !b->out || !b->work || (!virtual && !host)) {
        mp_error("out of memory for the buffers of %zu rows", routed + S * tok);
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    for (int i = 0; i < w->nact && !(cache && mp_weight_cache_on(cache)); i++) {
        MP_CHECK(ffn_wcache_load(wc, s, w->act_ids[i]));
        b->wgu[i] = wc->wgu[w->act_ids[i]];
        b->wd[i] = wc->wd[w->act_ids[i]];
    }
    b->wc = cache && mp_weight_cache_on(cache) ? cache : NULL;
    for (size_t i = 0; i < S && tok > 0; i++) {
        MP_CHECK(ffn_wcache_load(wc, s, m->experts + (int)i));
        b->wgu[w->nact + i] = wc->wgu[m->experts + i];
        b->wd[w->nact + i] = wc->wd[m->experts + i];
    }
    /* routed rows hold their tokens' activations; the shared experts read the rank's own tokens */
    for (size_t i = 0; i < routed && !virtual; i++)
        mp_activations((uint64_t)s->o.seed, w->row_tok[i], 1, (int)H, host + i * H);
    if (routed && !virtual)
        MP_CHECK(o->upload(s->dev, b->in, host, routed * H));
    if (tok && !virtual) {
        mp_activations((uint64_t)s->o.seed, w->tok0, (long)tok, (int)H, host);
        MP_CHECK(o->upload(s->dev, b->xs, host, tok * H));
    }
out:
    free(host);
    return rc;
}
