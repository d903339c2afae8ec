/* layer.c - the MoE layer pipeline of one rank (see layer.h): a layout's state created and
 * destroyed, and a point run as orchestration over its dispatch mode (core/layer/dispatch.h), the
 * buffers, weights and routing pool (core/layer_*.c, core/layer/routing_pool.c) and the shared
 * measurement harness (core/run/harness.h). */
#include "layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dedup.h"
#include "dispatch.h"
#include "dtype.h"
#include "error.h"
#include "fp8.h"
#include "harness.h"
#include "layer_internal.h"
#include "nvtx.h"
#include "weights.h"

/* Refuse a layout the layer cannot hold: a TP split that does not divide the FFN, more memory than
 * some rank has, or more rows than an MPI count holds. Collective. */
static int create_refusal(struct mp_comm *comm, const struct mp_compute_ops *ops,
                          struct mp_compute *dev, const struct mp_model *model, long max_tokens,
                          long long max_memory)
{
    int tp = comm->tp, ep = comm->ep;
    if (!ops->plan_setup || !ops->plan_build) {
        mp_error("the %s compute backend builds no dispatch plan: the layer cannot run on it",
                 ops->name);
        return MP_ERR_RUNTIME;
    }
    if (model->ffn % tp != 0) {
        mp_usage("--layout: tp%d needs --ffn (%d) divisible by %d", tp, model->ffn, tp);
        return MP_ERR_USAGE;
    }
    /* buffers for the contiguous share; a point whose placement gives a rank more grows them */
    int share = (model->experts + ep - 1) / ep;
    double need = mp_layer_bytes_estimate(model, tp, ep, share, max_tokens, ops->elem_size);
    char what[256];
    snprintf(what, sizeof what, "--model %s with --hidden %d --ffn %d, %d experts on ep%d and up "
             "to %ld tokens", model->name, model->hidden, model->ffn, model->experts, ep, max_tokens);
    int rc = mp_layer_memory_refusal(comm, ops, dev, max_memory, need, what);
    if (rc != MP_OK)
        return rc;
    /* counts and displacements travel as MPI ints: a rank's rows must fit in one */
    double rows_rank = (double)((max_tokens + ep - 1) / ep) * model->topk;
    if ((double)max_tokens * model->topk > 2147483647.0 || rows_rank > 2147483647.0) {
        mp_usage("--batch × --seq × --topk = %.0f token-expert rows exceeds the 2^31 an MPI count "
                 "holds; lower --batch or --seq", (double)max_tokens * model->topk);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* The layout's buffers, plan and route table, and every dispatch mode's lasting state. */
static int create_state(struct mp_layer *L)
{
    const struct mp_compute_ops *ops = L->ops;
    struct mp_compute *dev = L->dev;
    const struct mp_model *model = &L->m;
    int ep = L->ep, share = (model->experts + ep - 1) / ep;
    size_t H = (size_t)model->hidden, tok = (size_t)L->max_tok_rank;
    L->x = ops->alloc(dev, tok * H);
    L->sendbuf = ops->alloc(dev, tok * model->topk * H);
    L->y = ops->alloc(dev, tok * H);
    if (L->x && L->sendbuf && L->y &&
        mp_layer_alloc_rows(L, mp_layer_rows_bound(L->max_tokens, model->topk, share)) != MP_OK)
        return MP_ERR_RUNTIME;
    L->host_tok = malloc(tok * H * sizeof(float));
    L->route_off = malloc(((size_t)model->experts + 1) * sizeof(int32_t));
    L->route_cell = malloc((size_t)model->experts * ((size_t)ep + 1) * sizeof(int32_t));
    L->wire_sdispl = malloc((size_t)ep * sizeof(int));
    L->wire_rdispl = malloc((size_t)ep * sizeof(int));
    if (!L->x || !L->sendbuf || !L->y || !L->host_tok || !L->route_off || !L->route_cell ||
        !L->wire_sdispl || !L->wire_rdispl)
        return MP_ERR_RUNTIME;
    /* the most experts any rank can hold: its contiguous share plus every replica */
    if (mp_plan_alloc(&L->plan, ep, model->experts, L->max_tok_rank, model->topk) != MP_OK)
        return MP_ERR_RUNTIME;
    /* rows beyond a rank's tokens are read as padding (token 0 of an empty rank): keep them finite */
    memset(L->host_tok, 0, tok * H * sizeof(float));
    if (ops->upload(dev, L->x, L->host_tok, tok * H) != MP_OK)
        return MP_ERR_RUNTIME;
    for (int i = 0; mp_dispatch_modes[i]; i++)
        if (mp_dispatch_modes[i]->create && mp_dispatch_modes[i]->create(L) != MP_OK)
            return MP_ERR_RUNTIME;
    return MP_OK;
}

int mp_layer_create(struct mp_layer **out, const struct mp_compute_ops *ops, struct mp_compute *dev,
                    struct mp_comm *comm, const struct mp_model *model, uint64_t seed,
                    long max_tokens, long long max_memory, int max_overlap)
{
    int rc = create_refusal(comm, ops, dev, model, max_tokens, max_memory);
    if (rc != MP_OK)
        return rc;
    struct mp_layer *L = calloc(1, sizeof *L);
    if (L) {
        L->ops = ops;
        L->dev = dev;
        L->comm = comm;
        L->m = *model;
        L->seed = seed;
        L->tp = comm->tp;
        L->ep = comm->ep;
        L->Dl = model->ffn / comm->tp;
        L->S = model->shared;
        L->max_tokens = max_tokens;
        L->max_tok_rank = (max_tokens + comm->ep - 1) / comm->ep;
        L->max_memory = max_memory;
        L->max_overlap = max_overlap;
        L->row_bytes = (size_t)model->hidden * ops->elem_size;
        L->dispatch_row_bytes = L->row_bytes;
        L->count_hidden = model->hidden;
        L->count_elem_bytes = (double)ops->elem_size;
    }
    if (!L || create_state(L) != MP_OK) {
        mp_error("out of memory allocating layer buffers for up to %ld tokens", max_tokens);
        mp_layer_destroy(L);
        return MP_ERR_RUNTIME;
    }
    *out = L;
    return MP_OK;
}

void mp_layer_destroy(struct mp_layer *L)
{
    if (!L)
        return;
    mp_layer_cache_free(L);
    mp_layer_free_weights(L);
    for (int i = 0; mp_dispatch_modes[i]; i++)
        if (mp_dispatch_modes[i]->teardown)
            mp_dispatch_modes[i]->teardown(L);
    mp_layer_free_buffers(L);
    L->ops->free(L->dev, L->wg);
    free(L->wg_host);
    free(L->host_tok);
    mp_layer_free_pinned(L);
    free(L->route_off);
    free(L->route_cell);
    mp_plan_free(&L->plan);
    free(L);
}

/* Gather every rank's records of the last pass to rank 0: [rank][iter] there, then transposed
 * into res->ranks (iteration-major) with each iteration's metrics. */
static int gather_results(struct mp_layer *L, const struct mp_point *pt,
                          const struct mp_rank_iter *mine, struct mp_point_result *res)
{
    struct mp_comm *c = L->comm;
    size_t bytes = (size_t)pt->iters * sizeof *mine;
    struct mp_rank_iter *byrank = NULL;
    if (c->rank == 0) {
        byrank = malloc(bytes * c->size + 1);
        res->ranks = malloc(bytes * c->size + 1);
        res->metrics = malloc((size_t)(pt->iters > 0 ? pt->iters : 1) * sizeof *res->metrics);
        if (!byrank || !res->ranks || !res->metrics) {
            free(byrank);
            mp_error("out of memory for the results");
            return MP_ERR_RUNTIME;
        }
    }
    int rc = c->ops->gather(c, mine, bytes, byrank);
    if (rc == MP_OK && c->rank == 0)
        for (int i = 0; i < pt->iters; i++) {
            for (int r = 0; r < c->size; r++)
                res->ranks[(size_t)i * c->size + r] = byrank[(size_t)r * pt->iters + i];
            mp_metrics_iter(res->ranks + (size_t)i * c->size, c->size, c->tp, &res->metrics[i]);
            if (pt->overlap > 1)
                mp_metrics_pipelined(&res->metrics[i]);
        }
    free(byrank);
    return rc;
}

/* What one pass of a point's iterations needs: the harness's argument. */
struct pass {
    struct mp_layer *L;
    const struct mp_point *pt;
    const struct mp_dispatch_mode *mode;
    struct mp_routing_pool *pool;
    long ntok;
    struct mp_rank_iter *mine; /* [iters] the timed records */
    struct mp_rank_iter scratch;
};

/* Step `step` uses draw step mod pool size; untimed iterations record into scratch. */
static int pass_iterate(void *arg, int step, int sample, int replay)
{
    struct pass *p = arg;
    (void)replay; /* the mode replays once it has captured (L->captured) */
    struct mp_rank_iter *rec = sample >= 0 ? &p->mine[sample] : &p->scratch;
    struct mp_layer *L = p->L;
    struct mp_weight_cache *wc = &L->wcache;
    wc->hits = wc->misses = wc->fetch_bytes = 0;
    double fetch_us = 0;
    int rc = p->mode->iterate(L, p->pt, p->pool, step % p->pool->n, p->ntok, rec);
    if (rc == MP_OK) /* the iteration is done on the device: its fetches' waits are known */
        rc = mp_weight_cache_exposed(wc, &fetch_us);
    rec->cache_hits = wc->hits; /* --expert-cache: this iteration's accesses and fetches */
    rec->cache_misses = wc->misses;
    rec->fetch_bytes = L->count_expert_bytes > 0 ? wc->misses * L->count_expert_bytes
                                                 : wc->fetch_bytes;
    rec->fetch_us = fetch_us;
    return rc;
}

static int pass_capture(void *arg)
{
    struct pass *p = arg;
    return p->mode->capture(p->L, p->pt, p->pool, p->ntok);
}

/* Queued before the iteration's drain, outside its clock. */
static int pass_flush(void *arg)
{
    struct pass *p = arg;
    return p->L->ops->flush_cache(p->L->dev);
}

/* One pass of a point in `mode`: its plan, then warm-up, capture and timed iterations through the
 * harness, then every rank's records gathered into res. */
/* The point's expert cache, cold: static's resident set by the routing's expected shares of this
 * rank's local experts (alike for gate routing, which has none). */
static int cache_for_point(struct mp_layer *L, const struct mp_point *pt)
{
    double *share = NULL;
    if (pt->cache.slots > 0 && pt->routing->prob) {
        share = malloc((size_t)(L->nlocal > 0 ? L->nlocal : 1) * sizeof *share);
        if (!share) {
            mp_error("out of memory");
            return MP_ERR_RUNTIME;
        }
        for (int i = 0; i < L->nlocal; i++)
            share[i] = pt->routing->prob[L->local_ids[i]];
    }
    int rc = mp_layer_cache_setup(L, &pt->cache, share);
    free(share);
    return rc;
}

static int run_pass(struct pass *p, struct mp_point_result *res, long tok0)
{
    struct mp_layer *L = p->L;
    const struct mp_point *pt = p->pt;
    int rc = p->mode->plan ? p->mode->plan(L, pt, tok0, p->ntok) : MP_OK;
    if (rc != MP_OK)
        return rc;
    /* every pass starts from the point's cold cache: its warm-up fills it */
    if (pt->cache.slots > 0 && (rc = cache_for_point(L, pt)) != MP_OK)
        return rc;
    struct mp_harness h = {
        .warmup = pt->warmup, .iters = pt->iters, .iterate = pass_iterate, .arg = p,
        .capture = pt->graph && !L->captured ? pass_capture : NULL,
        .before_timed = pt->flush_cache && L->ops->flush_cache ? pass_flush : NULL,
    };
    rc = mp_harness_run(&h, &res->timed_us);
    return rc != MP_OK ? rc : gather_results(L, pt, p->mine, res);
}

/* Refuse what no mode can do: --overlap with a mode that has no pipelined form, --dedup the mode
 * does not carry out, a mode the compute backend does not run, --graph in a mode that cannot be
 * captured. */
static int validate_point(const struct mp_layer *L, const struct mp_point *pt,
                          const struct mp_dispatch_mode *mode)
{
    int rc = mp_dispatch_check_overlap(pt);
    if (rc != MP_OK)
        return rc;
    if ((rc = mp_dispatch_check_dedup(pt)) != MP_OK)
        return rc;
    if (!(L->ops->dispatch_modes & mode->backend_bit)) {
        if (pt->dedup != MP_DEDUP_PAIR)
            mp_usage("--dedup %s: the %s backend does not run the %s dispatch; use --dedup pair "
                     "with it", mp_dedup_choices[pt->dedup], L->ops->name, mode->name);
        else
            mp_usage("the %s backend does not run the %s dispatch", L->ops->name, mode->name);
        return MP_ERR_USAGE;
    }
    if (!(L->ops->dispatch_dtypes & MP_DTYPE_BIT(pt->dispatch_dtype))) {
        mp_usage("--dispatch-dtype %s: the %s backend does not dispatch in it",
                 mp_dtype_choices[pt->dispatch_dtype], L->ops->name);
        return MP_ERR_USAGE;
    }
    if (!(L->ops->weight_dtypes & MP_DTYPE_BIT(pt->weight_dtype))) {
        mp_usage("--weight-dtype %s: the %s backend does not store expert weights in it",
                 mp_dtype_choices[pt->weight_dtype], L->ops->name);
        return MP_ERR_USAGE;
    }
    if (pt->dispatch_dtype == MP_DTYPE_FP8 && mp_fp8_row_bytes(L->m.hidden) > L->row_bytes) {
        int least = 1; /* the least H whose packed row fits its activations: 2 fp32, 4 bf16 */
        while (least < MP_FP8_BLOCK && mp_fp8_row_bytes(least) > (size_t)least * L->ops->elem_size)
            least++;
        mp_usage("--dispatch-dtype fp8 with --hidden %d: a packed row (%zu bytes) is longer than "
                 "the activations it packs (%zu bytes on the %s backend); use --hidden %d or more",
                 L->m.hidden, mp_fp8_row_bytes(L->m.hidden), L->row_bytes, L->ops->name, least);
        return MP_ERR_USAGE;
    }
    if (mode->validate) {
        rc = mode->validate(L, pt);
        if (rc != MP_OK)
            return rc;
    }
    if (pt->graph && !mode->capture) {
        mp_usage("--graph with the %s dispatch: only a dispatch that needs no host sync "
                 "(--dispatch padded) can be captured", mode->name);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* Everything a point's iterations read, before the first: the mode's buffers, this rank's weights
 * and tokens, the routing pool (checked alike across each TP group), the plans sized for the
 * placement, the mode's own state. */
static int prepare_point(struct mp_layer *L, const struct mp_point *pt,
                         const struct mp_dispatch_mode *mode, struct mp_routing_pool *pool,
                         long total, long tok0, long ntok, long tokens_per_rank)
{
    int rc = MP_OK;
    if (mode->reserve)
        MP_CHECK(mode->reserve(L, pt, total));
    MP_CHECK(mp_layer_setup_weights(L, pt->placement, pt->weight_dtype, pt->blocked_weights));
    if (pt->cache.slots == 0)
        MP_CHECK(mp_layer_cache_setup(L, &pt->cache, NULL)); /* the previous point's, freed */
    if (mp_routing_is_gate(pt->routing))
        MP_CHECK(mp_layer_setup_gate(L));
    if (pt->blocked_activations)
        mp_activations_blocked(L->seed, tok0, ntok, L->m.hidden, L->host_tok);
    else
        mp_activations(L->seed, tok0, ntok, L->m.hidden, L->host_tok);
    mp_layer_gate_skew_hook(L, ntok);
    MP_CHECK(L->ops->upload(L->dev, L->x, L->host_tok, (size_t)ntok * L->m.hidden));
    MP_CHECK(mp_routing_pool_make(pool, pt, L->seed, total, tok0, ntok, L->m.topk, L->m.experts));
    MP_CHECK(mp_layer_check_tp_routing(L, pt, pool, ntok));
    /* the plan's cells follow the placement: the count exchange carries one count per expert a
     * peer holds (as Megatron's dispatcher exchanges num_local_experts counts), not one per expert
     * of the model */
    if (L->plan.max_local != pt->placement->max_local) {
        mp_plan_free(&L->plan);
        MP_CHECK(mp_plan_alloc(&L->plan, L->ep, pt->placement->max_local, L->max_tok_rank,
                               L->m.topk));
    }
    if (mode->reference && mode->reference->setup)
        MP_CHECK(mode->reference->setup(L, pt, tokens_per_rank));
    if (mode->setup)
        MP_CHECK(mode->setup(L, pt, tokens_per_rank));
out:
    return rc;
}

/* The point checked and made ready for its first iteration in `mode`. */
static int begin_point(struct mp_layer *L, const struct mp_point *pt,
                       const struct mp_dispatch_mode *mode, struct mp_routing_pool *pool,
                       long total, long tok0, long ntok, long tokens_per_rank)
{
    int rc = validate_point(L, pt, mode);
    if (rc != MP_OK)
        return rc;
    L->dispatch_dtype = pt->dispatch_dtype;
    L->dispatch_row_bytes = (size_t)mp_dispatch_row_bytes((enum mp_dtype)pt->dispatch_dtype,
                                                          L->m.hidden, (double)L->row_bytes);
    L->count_row_bytes = L->count_hidden * L->count_elem_bytes;
    L->count_dispatch_row_bytes = mp_dispatch_row_bytes((enum mp_dtype)pt->dispatch_dtype,
                                                        L->count_hidden, L->count_row_bytes);
    return prepare_point(L, pt, mode, pool, total, tok0, ntok, tokens_per_rank);
}

void mp_layer_count_rows_as(struct mp_layer *L, int hidden, double elem_bytes,
                            double expert_bytes)
{
    L->count_hidden = hidden;
    L->count_elem_bytes = elem_bytes;
    L->count_expert_bytes = expert_bytes;
}

int mp_layer_local_expert_of(const struct mp_layer *L, const void *weights)
{
    for (int l = 0; l < L->nlocal; l++)
        if (L->wgu[l] == weights)
            return l;
    return -1;
}

int mp_layer_run_draws(struct mp_layer *L, const struct mp_point *pt, int ndraws,
                       struct mp_rank_iter *recs, void (*before)(void *arg, int d), void *arg)
{
    struct mp_routing_pool pool = {0};
    const struct mp_dispatch_mode *mode = mp_dispatch_for(pt);
    long total = pt->batch * pt->seq, tok0;
    if (total > L->max_tokens) {
        mp_error("point of %ld tokens exceeds the %ld the layout was sized for", total, L->max_tokens);
        return MP_ERR_RUNTIME;
    }
    long ntok = mp_token_split(total, L->ep, L->comm->ep_rank, &tok0);
    int rc = begin_point(L, pt, mode, &pool, total, tok0, ntok, (total + L->ep - 1) / L->ep);
    if (rc == MP_OK && mode->plan)
        rc = mode->plan(L, pt, tok0, ntok);
    for (int d = 0; d < ndraws && rc == MP_OK; d++) {
        if (before)
            before(arg, d);
        memset(&recs[d], 0, sizeof recs[d]);
        rc = mode->iterate(L, pt, &pool, d % pool.n, ntok, &recs[d]);
    }
    mp_routing_pool_free(&pool);
    return rc;
}

int mp_layer_run(struct mp_layer *L, const struct mp_point *pt, struct mp_point_result *res)
{
    struct mp_comm *c = L->comm;
    int rc = MP_OK;
    double t_begin = mp_now_us();
    struct mp_routing_pool pool = {0};
    struct mp_iter_metrics *plain = NULL; /* the unpipelined reference of an overlapped point */
    struct pass p = {.L = L, .pt = pt, .pool = &pool, .mode = mp_dispatch_for(pt)};
    memset(res, 0, sizeof *res);
    res->check_error = NAN;
    res->check_error_unquantized = NAN;
    res->overlap_efficiency = NAN;
    res->mem_gb_per_gpu = NAN;
    long total = pt->batch * pt->seq, tok0;
    if (total > L->max_tokens) {
        mp_error("point of %ld tokens exceeds the %ld the layout was sized for", total, L->max_tokens);
        return MP_ERR_RUNTIME;
    }
    p.ntok = mp_token_split(total, L->ep, c->ep_rank, &tok0);
    res->tokens_per_rank = (total + L->ep - 1) / L->ep;
    res->iters = pt->iters;
    res->nranks = c->size;
    res->rank_period = pt->iters > 0 ? pt->iters : 1; /* every iteration its own records */
    const struct mp_dispatch_mode *mode = p.mode;
    MP_CHECK(begin_point(L, pt, mode, &pool, total, tok0, p.ntok, res->tokens_per_rank));
    p.mine = calloc((size_t)(pt->iters > 0 ? pt->iters : 1), sizeof *p.mine);
    if (!p.mine) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    MP_RANGE_PUSH(pt->label ? pt->label : "moeperf/point");
    if (mode->reference) { /* the unpipelined reference first, kept on rank 0 */
        p.mode = mode->reference;
        MP_CHECK(run_pass(&p, res, tok0));
        p.mode = mode;
        if (c->rank == 0) {
            plain = res->metrics;
            res->metrics = NULL;
            free(res->ranks);
            res->ranks = NULL;
        }
    }
    MP_CHECK(run_pass(&p, res, tok0));
    MP_RANGE_POP();
    if (plain && c->rank == 0)
        res->overlap_efficiency = mp_overlap_efficiency(plain, res->metrics, pt->iters);

    if (pt->check) { /* the output of draw 0, through the same pipeline the point measured */
        MP_CHECK(mode->iterate(L, pt, &pool, 0, p.ntok, &p.scratch));
        MP_CHECK(mp_layer_check_output(L, pt, &pool, total, p.ntok, &res->check_error,
                                       &res->check_error_unquantized));
    }
out:
    if (L->captured) {
        L->ops->graph_reset(L->dev);
        L->captured = 0;
    }
    mp_routing_pool_free(&pool);
    free(p.mine);
    free(plain);
    res->wall_us = mp_now_us() - t_begin;
    return rc;
}

void mp_point_result_free(struct mp_point_result *res)
{
    free(res->ranks);
    free(res->metrics);
    res->ranks = NULL;
    res->metrics = NULL;
}
