/* dispatch_pipelined.c - the pipelined dispatch mode (--overlap N): each rank's token-expert pairs
 * cut into N chunks by expert group, chunk k+1's dispatch and chunk k−1's combine in flight while
 * chunk k's experts compute (comm backends with a non-blocking all-to-all only). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "error.h"
#include "layer_internal.h"
#include "vlayer.h"

static int pipelined_validate(const struct mp_layer *L, const struct mp_point *pt)
{
    const struct mp_comm *c = L->comm;
    int N = pt->overlap;
    if (N > L->nchunk_plans || N > MP_MAX_CHUNKS || !c->ops->ialltoallv) {
        char why[64] = "has no non-blocking all-to-all";
        if (c->ops->ialltoallv)
            snprintf(why, sizeof why, "supports at most %d", MP_MAX_CHUNKS);
        mp_usage("--overlap %d: the layout was prepared for %d chunks; the comm backend %s %s", N,
                 L->nchunk_plans, c->ops->name, why);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* One plan per chunk, for up to the layout's --overlap, and the count exchange's arrays. */
static int pipelined_create(struct mp_layer *L)
{
    int N = L->max_overlap;
    if (N <= 1)
        return MP_OK;
    L->chunk_plans = calloc((size_t)N, sizeof *L->chunk_plans);
    if (!L->chunk_plans)
        return MP_ERR_RUNTIME;
    L->nchunk_plans = N;
    for (int i = 0; i < N; i++) /* a chunk covers every token, some of its pairs */
        if (mp_plan_alloc(&L->chunk_plans[i], L->ep, L->m.experts, L->max_tok_rank, L->m.topk) !=
            MP_OK)
            return MP_ERR_RUNTIME;
    size_t cells = (size_t)L->ep * N * L->chunk_plans[0].max_local;
    L->chunk_cnt_send = calloc(cells, sizeof(int));
    L->chunk_cnt_recv = calloc(cells, sizeof(int));
    return L->chunk_cnt_send && L->chunk_cnt_recv ? MP_OK : MP_ERR_RUNTIME;
}

static void pipelined_teardown(struct mp_layer *L)
{
    for (int i = 0; i < L->nchunk_plans; i++)
        mp_plan_free(&L->chunk_plans[i]);
    free(L->chunk_plans);
    free(L->chunk_cnt_send);
    free(L->chunk_cnt_recv);
    L->chunk_plans = NULL;
    L->chunk_cnt_send = L->chunk_cnt_recv = NULL;
    L->nchunk_plans = 0;
}

/* The routed-row buffers hold every chunk's rows one after another: the dynamic mode's bound. */
static int pipelined_reserve(struct mp_layer *L, const struct mp_point *pt, long total)
{
    return mp_layer_size_rows(L, total, mp_placement_nlocal(pt->placement, L->comm->ep_rank));
}

/* The chunks' plans follow the placement, as the dynamic plan does (mp_layer_run). */
static int pipelined_setup(struct mp_layer *L, const struct mp_point *pt, long tokens_per_rank)
{
    (void)tokens_per_rank;
    for (int k = 0; k < L->nchunk_plans; k++)
        if (L->chunk_plans[k].max_local != pt->placement->max_local) {
            mp_plan_free(&L->chunk_plans[k]);
            int rc = mp_plan_alloc(&L->chunk_plans[k], L->ep, pt->placement->max_local,
                                   L->max_tok_rank, L->m.topk);
            if (rc != MP_OK)
                return rc;
        }
    return MP_OK;
}

static int pipelined_plan(struct mp_layer *L, const struct mp_point *pt, long tok0, long ntok)
{
    return mp_layer_plan_setup(L, pt, tok0, ntok, L->chunk_plans[0].max_local, pt->overlap, 0);
}

/* The pipeline's progress hook: lets the pending exchanges advance between expert GEMMs. */
static void progress_hook(void *arg)
{
    struct mp_comm *c = arg;
    c->ops->progress(c);
}

/* Route the draw, build every chunk's plan from the backend's counts (chunk k's cells after the
 * earlier chunks'), and exchange all chunks' counts at once; soff[k]: where chunk k's send rows
 * start. Marks ROUTE after the plans, before the exchange, and NOTIFY after it. */
static int plan_chunks(struct mp_layer *L, struct mp_routing_pool *pool, int d, long ntok, int N,
                       long *soff)
{
    struct mp_comm *c = L->comm;
    int Lm = L->chunk_plans[0].max_local, me = c->ep_rank, rc = MP_OK;
    size_t cells = (size_t)L->ep * Lm;
    MP_CHECK(mp_layer_route(L, pool, d, ntok, 0, 1));
    for (int k = 0; k < N; k++) {
        memcpy(L->chunk_plans[k].send_cnt, L->dplan_totals + k * cells, cells * sizeof(int));
        mp_plan_from_counts(&L->chunk_plans[k], me, ntok);
    }
    soff[0] = 0;
    for (int k = 0; k < N; k++)
        soff[k + 1] = soff[k] + L->chunk_plans[k].nsend;
    MP_CHECK(L->ops->mark(L->dev, MARK_ROUTE));
    for (int p = 0; p < L->ep; p++)
        for (int k = 0; k < N; k++)
            memcpy(L->chunk_cnt_send + ((size_t)p * N + k) * Lm,
                   L->chunk_plans[k].send_cnt + (size_t)p * Lm, (size_t)Lm * sizeof(int));
    MP_CHECK(c->ops->alltoall_int(c, L->chunk_cnt_send, L->chunk_cnt_recv, N * Lm));
    for (int k = 0; k < N; k++) {
        for (int p = 0; p < L->ep; p++)
            memcpy(L->chunk_plans[k].recv_cnt + (size_t)p * Lm,
                   L->chunk_cnt_recv + ((size_t)p * N + k) * Lm, (size_t)Lm * sizeof(int));
        mp_plan_recv(&L->chunk_plans[k], L->nlocal);
    }
    MP_CHECK(L->ops->mark(L->dev, MARK_NOTIFY));
out:
    return rc;
}

/* Where the chunks' rows lie: chunk k's send rows from soff[k], received rows from roff[k], FFN
 * output rows from ooff[k] (after the earlier chunks' and chunk 0's shared rows). */
struct chunk_offsets {
    long soff[MP_MAX_CHUNKS + 1], roff[MP_MAX_CHUNKS + 1], ooff[MP_MAX_CHUNKS + 1];
};

/* What the chunks computed, summed for the record. */
struct chunk_counts {
    double rows, local;
};

/* Step s's middle: compute chunk k = s−1 (its partners advance between experts) and start its
 * combine. The shared experts ride with chunk 0. */
static int compute_chunk(struct mp_layer *L, const struct mp_point *pt,
                         const struct mp_point *plain_pt, int k, long ntok,
                         const struct chunk_offsets *of, struct chunk_counts *n,
                         struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    int H = L->m.hidden, S = k == 0 ? L->S : 0, rc = MP_OK;
    struct mp_plan *pl = &L->chunk_plans[k];
    char *recv = (char *)L->recvbuf + (size_t)of->roff[k] * L->row_bytes;
    char *exp = (char *)L->expbuf + (size_t)of->roff[k] * L->row_bytes;
    char *out = (char *)L->outbuf + (size_t)of->ooff[k] * L->row_bytes;
    MP_CHECK(c->ops->wait(c, 2 * k));
    MP_CHECK(mp_layer_dispatch_finish(L, recv, pl->recv_rows, pl->recv_displ));
    MP_CHECK(o->copy_rows(dev, recv, exp, pl->to_expert, pl->nchunks, H));
    MP_CHECK(mp_layer_chunk_ffn_reduce(L, k == 0 ? pt : plain_pt, k, exp, out, pl->expert_off,
                                       pl->nrecv, ntok, S, progress_hook, c));
    MP_CHECK(o->copy_rows(dev, out, recv, pl->to_source, pl->nchunks, H));
    char *back = (char *)L->sendbuf + (size_t)of->soff[k] * L->row_bytes;
    MP_CHECK(c->ops->ialltoallv(c, recv, pl->recv_rows, pl->recv_displ, back, pl->send_rows,
                                pl->send_displ, L->row_bytes, 2 * k + 1));
    n->rows += (double)pl->nrecv;
    n->local += (double)pl->local_pairs;
    mp_layer_add_peer_bytes(L, pl->send_rows, pl->recv_rows, 0, rec);
out:
    return rc;
}

/* The pipeline's steps: step s starts chunk s's dispatch, computes chunk s−1 and finishes chunk
 * s−2's combine into y (chunk 0 with the shared experts, the rest added to it). Request slots: 2k
 * dispatch, 2k+1 combine. */
static int run_pipeline(struct mp_layer *L, const struct mp_point *pt, long ntok, int N,
                        const struct chunk_offsets *of, struct chunk_counts *n,
                        struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    int H = L->m.hidden, rc = MP_OK;
    struct mp_point plain_pt = *pt; /* chunks after the first: no straggler delay */
    plain_pt.straggle_us = 0;
    for (int s = 0; s < N + 2; s++) {
        if (s < N) { /* start the dispatch of chunk s */
            struct mp_plan *pl = &L->chunk_plans[s];
            char *send = (char *)L->sendbuf + (size_t)of->soff[s] * L->row_bytes;
            char *recv = (char *)L->recvbuf + (size_t)of->roff[s] * L->row_bytes;
            MP_CHECK(o->permute(dev, L->x, NULL, of->soff[s], pl->nsend, H, send));
            MP_CHECK(mp_layer_dispatch_start(L, send, pl->send_rows, pl->send_displ, recv,
                                             pl->recv_rows, pl->recv_displ, 2 * s));
        }
        if (s >= 1 && s <= N) /* compute chunk s−1 and start its combine */
            MP_CHECK(compute_chunk(L, pt, &plain_pt, s - 1, ntok, of, n, rec));
        if (s >= 2) { /* finish the combine of chunk s−2 */
            int k = s - 2;
            struct mp_plan *pl = &L->chunk_plans[k];
            char *out = (char *)L->outbuf + (size_t)of->ooff[k] * L->row_bytes;
            MP_CHECK(c->ops->wait(c, 2 * k + 1));
            MP_CHECK(o->combine(dev, (char *)L->sendbuf + (size_t)of->soff[k] * L->row_bytes,
                                NULL, NULL, of->soff[k], pl->nsend,
                                k == 0 && L->S ? out + (size_t)pl->nrecv * L->row_bytes : NULL,
                                k == 0 ? L->S : 0, ntok, H, L->y, k > 0));
        }
    }
out:
    return rc;
}

/* One layer forward pipelined over N = pt->overlap chunks: chunk k carries the token-expert pairs
 * whose expert is in group k of its destination's local experts (mp_plan_expert_group), so every
 * expert's weights are still read once. After one count exchange for all chunks (the pipeline
 * waits for a peer only on data), the steps of run_pipeline. Times come from the compute
 * backend's marks (device events on GPUs, where the host only queues the work): route from the
 * start, notify (the count exchange) from there, per chunk its FFN and its TP reduce, and the
 * whole; the rest is dispatch (the data communication left exposed). */
static int pipelined_iterate(struct mp_layer *L, const struct mp_point *pt,
                             struct mp_routing_pool *pool, int d, long ntok,
                             struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    int N = pt->overlap, rc = MP_OK;
    struct chunk_offsets of;
    struct chunk_counts n = {0};

    rec->bytes_sent = rec->dispatch_intra = rec->dispatch_inter = 0; /* the chunks add theirs */
    rec->combine_intra = rec->combine_inter = 0;
    MP_CHECK(mp_layer_start_aligned(L));
    MP_CHECK(plan_chunks(L, pool, d, ntok, N, of.soff));
    of.roff[0] = 0;
    for (int k = 0; k < N; k++)
        of.roff[k + 1] = of.roff[k] + L->chunk_plans[k].nrecv;
    MP_CHECK(mp_layer_check_rows(L, of.roff[N]));
    for (int k = 0; k < N; k++)
        of.ooff[k] = of.roff[k] + (k > 0 ? (long)L->S * ntok : 0);
    MP_CHECK(run_pipeline(L, pt, ntok, N, &of, &n, rec));
    MP_CHECK(o->mark(dev, MARK_COMBINE));
    MP_CHECK(mp_layer_drain(L));

    mp_layer_pipelined_times(L, N, rec);
    rec->tokens = (double)ntok;
    rec->rows = n.rows;
    rec->ffn_rows = n.rows + (double)L->S * ntok;
    rec->pairs = (double)ntok * L->m.topk;
    rec->local_pairs = n.local;
    rec->dropped = 0;
out:
    return rc;
}

const struct mp_dispatch_mode mp_dispatch_pipelined = {
    .name = "pipelined",
    .backend_bit = MP_DISPATCH_PIPELINED,
    .validate = pipelined_validate,
    .create = pipelined_create,
    .reserve = pipelined_reserve,
    .setup = pipelined_setup,
    .plan = pipelined_plan,
    .iterate = pipelined_iterate,
    .teardown = pipelined_teardown,
    .reference = &mp_dispatch_dynamic,
    .deduplicated = &mp_dispatch_dedup_pipelined,
    .model_traffic = mp_vtraffic_dynamic, /* it cuts the chunks when t->nchunks > 1 */
};
