/* dispatch_dedup_pipelined.c - the deduplicated dispatch pipelined (--dedup rank|node with
 * --overlap N): each rank's tokens cut into N micro-batches, each dispatched once per serving rank
 * (or node) as --dedup says, chunk k+1's rows and chunk k−1's combine in flight while chunk k's
 * experts compute (comm backends with a non-blocking all-to-all only). Every chunk's counts and
 * metadata travel first (the notify phase, node's forward plan included), so only rows move in
 * the pipeline; node's inter-node phase is the pipelined exchange (on the EP group's inter-node
 * group), its intra-node phase (direct rows and forwards, on the intra-node group) runs in its
 * chunk's compute step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "dispatch.h"
#include "error.h"
#include "layer_internal.h"
#include "vlayer.h"

static int dp_validate(const struct mp_layer *L, const struct mp_point *pt)
{
    const struct mp_comm *c = L->comm;
    if (pt->overlap > MP_MAX_CHUNKS || !c->ops->ialltoallv) {
        char why[64] = "has no non-blocking all-to-all";
        if (c->ops->ialltoallv)
            snprintf(why, sizeof why, "supports at most %d", MP_MAX_CHUNKS);
        mp_usage("--overlap %d with --dedup %s: the comm backend %s %s", pt->overlap,
                 mp_dedup_choices[pt->dedup], c->ops->name, why);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

static void dp_free_chunks(struct mp_layer *L)
{
    for (int k = 0; k < L->ndchunk; k++)
        mp_dedup_plan_free(&L->dchunk[k]);
    free(L->dchunk);
    free(L->dchunk_cnt_send);
    free(L->dchunk_cnt_recv);
    L->dchunk = NULL;
    L->dchunk_cnt_send = L->dchunk_cnt_recv = NULL;
    L->ndchunk = 0;
}

static void dp_teardown(struct mp_layer *L)
{
    dp_free_chunks(L);
}

/* The unpipelined dedup mode's buffers hold every chunk's rows: chunks partition the tokens, so
 * their rows, forwards and expanded rows add up to the whole batch's. */
static int dp_reserve(struct mp_layer *L, const struct mp_point *pt, long total)
{
    return mp_dispatch_dedup.reserve(L, pt, total);
}

/* The whole point's plan and relay buffers (mp_dispatch_dedup's setup), then one plan per chunk of
 * the same bounds. */
static int dp_setup(struct mp_layer *L, const struct mp_point *pt, long tokens_per_rank)
{
    int rc = mp_dispatch_dedup.setup(L, pt, tokens_per_rank);
    if (rc != MP_OK)
        return rc;
    const struct mp_dedup_plan *w = &L->dedup;
    int N = pt->overlap;
    if (L->ndchunk == N && L->dchunk[0].max_local == w->max_local &&
        L->dchunk[0].max_tok >= w->max_tok && L->dchunk[0].max_exp >= w->max_exp &&
        L->dchunk[0].max_recv >= w->max_recv) {
        for (int k = 0; k < N; k++)
            memcpy(L->dchunk[k].ep_node, w->ep_node, (size_t)L->ep * sizeof *w->ep_node);
        return MP_OK;
    }
    dp_free_chunks(L);
    L->dchunk = calloc((size_t)N, sizeof *L->dchunk);
    L->dchunk_cnt_send = calloc((size_t)L->ep * 2 * N, sizeof(int)); /* node: 2 per chunk */
    L->dchunk_cnt_recv = calloc((size_t)L->ep * 2 * N, sizeof(int));
    if (!L->dchunk || !L->dchunk_cnt_send || !L->dchunk_cnt_recv)
        goto oom;
    L->ndchunk = N;
    for (int k = 0; k < N; k++) {
        if (mp_dedup_plan_alloc(&L->dchunk[k], L->ep, w->max_local, w->K, w->max_tok, w->max_exp,
                                w->max_recv - w->max_exp) != MP_OK)
            goto oom;
        memcpy(L->dchunk[k].ep_node, w->ep_node, (size_t)L->ep * sizeof *w->ep_node);
    }
    return MP_OK;
oom:
    mp_error("out of memory for %d chunks' --dedup plans", N);
    dp_free_chunks(L);
    return MP_ERR_RUNTIME;
}

/* The pipeline's progress hook: lets the pending exchanges advance between expert GEMMs. */
static void progress_hook(void *arg)
{
    struct mp_comm *c = arg;
    c->ops->progress(c);
}

/* Where the chunks' rows lie: send rows from soff[k], received rows (node: the first hop's, then
 * the forwards') from roff[k], forwards sent from foff[k], expanded rows from eoff[k], FFN output
 * rows from ooff[k] (after chunk 0's shared rows). */
struct dp_offsets {
    long soff[MP_MAX_CHUNKS + 1], roff[MP_MAX_CHUNKS + 1], foff[MP_MAX_CHUNKS + 1];
    long eoff[MP_MAX_CHUNKS + 1], ooff[MP_MAX_CHUNKS + 1];
};

/* One all-to-all on group g (mp_comm_alltoall_int_on) of `n` ints per peer and chunk (`send_field`:
 * the chunk plan's count array to send, [ep·n]; `recv_field`: the one to fill), every chunk at
 * once. */
static int exchange_chunk_counts(struct mp_layer *L, enum mp_comm_group g, int N, int n,
                                 size_t send_field, size_t recv_field)
{
    struct mp_comm *c = L->comm;
    int ep = L->ep;
    for (int k = 0; k < N; k++) {
        const int *s = *(int **)((char *)&L->dchunk[k] + send_field);
        for (int q = 0; q < ep; q++)
            for (int j = 0; j < n; j++)
                L->dchunk_cnt_send[(q * N + k) * n + j] = s[q * n + j];
    }
    int rc = mp_comm_alltoall_int_on(c, g, L->dchunk_cnt_send, L->dchunk_cnt_recv, N * n);
    for (int k = 0; k < N && rc == MP_OK; k++) {
        int *r = *(int **)((char *)&L->dchunk[k] + recv_field);
        for (int q = 0; q < ep; q++)
            for (int j = 0; j < n; j++)
                r[q * n + j] = L->dchunk_cnt_recv[(q * N + k) * n + j];
    }
    return rc;
}

/* Route, build every chunk's send side (chunk k: the k-th share of this rank's tokens), then the
 * notify phase: every chunk's counts at once, each chunk's metadata, node's forward plans with
 * their counts and metadata, and each chunk's expansion. Marks ROUTE and NOTIFY; fills `of`. */
static int dp_plans(struct mp_layer *L, const struct mp_point *pt, struct mp_routing_pool *pool,
                    int d, long ntok, struct dp_offsets *of)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_comm *c = L->comm;
    int N = pt->overlap, K = L->m.topk, me = c->ep_rank;
    int node = pt->dedup == MP_DEDUP_NODE, rc = MP_OK;
    long tok0;
    mp_token_split(pt->batch * pt->seq, L->ep, me, &tok0);
    const int32_t *ids;
    const float *w;
    MP_CHECK(mp_dedup_route(L, pt, pool, d, ntok, &ids, &w));
    of->soff[0] = 0;
    for (int k = 0; k < N; k++) {
        struct mp_dedup_plan *p = &L->dchunk[k];
        long off, n = mp_token_split(ntok, N, k, &off);
        mp_dedup_plan_send(p, pt->placement, me, tok0 + off, n, ids + (size_t)off * K,
                           w + (size_t)off * K, node ? p->ep_node : NULL);
        for (long i = 0; i < p->nsend; i++) /* the chunk's token index → the rank's */
            p->send_tok[i] += (int32_t)off;
        of->soff[k + 1] = of->soff[k] + p->nsend;
    }
    MP_CHECK(o->mark(L->dev, MARK_ROUTE));

    if (!node) {
        MP_CHECK(exchange_chunk_counts(L, MP_GROUP_EP, N, 1,
                                       offsetof(struct mp_dedup_plan, send_rows),
                                       offsetof(struct mp_dedup_plan, recv_rows)));
        for (int k = 0; k < N; k++) {
            struct mp_dedup_plan *p = &L->dchunk[k];
            MP_CHECK(mp_dedup_plan_recv(p));
            MP_CHECK(mp_dedup_meta_exchange(L, p->send_meta, L->dedup_meta_send, p->nsend,
                                            p->send_rows, p->send_displ, p->recv_meta,
                                            p->recv_rows, p->recv_displ, 0, p->nrecv));
        }
    } else { /* the inter-node phase's counts and metadata, then the intra-node phase's */
        for (int k = 0; k < N; k++)
            mp_dedup_plan_inter(&L->dchunk[k], me);
        MP_CHECK(exchange_chunk_counts(L, MP_GROUP_EP_INTER, N, 1,
                                       offsetof(struct mp_dedup_plan, x_rows),
                                       offsetof(struct mp_dedup_plan, recv_rows)));
        for (int k = 0; k < N; k++) {
            struct mp_dedup_plan *p = &L->dchunk[k];
            MP_CHECK(mp_dedup_plan_recv(p));
            MP_CHECK(mp_dedup_meta_exchange_on(L, MP_GROUP_EP_INTER, p->send_meta,
                                               L->dedup_meta_send, p->nsend, p->x_rows,
                                               p->send_displ, p->recv_meta, p->recv_rows,
                                               p->recv_displ, 0, p->nrecv));
            MP_CHECK(mp_dedup_plan_forward(p, me));
            mp_dedup_plan_intra_counts(p, me);
        }
        MP_CHECK(exchange_chunk_counts(L, MP_GROUP_EP_INTRA, N, 2,
                                       offsetof(struct mp_dedup_plan, in_cnt),
                                       offsetof(struct mp_dedup_plan, in_rcnt)));
        for (int k = 0; k < N; k++) {
            struct mp_dedup_plan *p = &L->dchunk[k];
            MP_CHECK(mp_dedup_plan_intra(p, me));
            MP_CHECK(mp_dedup_meta_exchange_on(L, MP_GROUP_EP_INTRA, p->in_meta,
                                               L->dedup_meta_fwd, p->nin_send, p->in_rows,
                                               p->in_displ, p->recv_meta + (size_t)p->nrecv * K,
                                               p->in_rrows, p->in_rdispl, 0, p->nrecv1));
        }
    }
    of->roff[0] = of->foff[0] = of->eoff[0] = 0;
    for (int k = 0; k < N; k++) {
        struct mp_dedup_plan *p = &L->dchunk[k];
        MP_CHECK(mp_dedup_plan_expand(p, node ? me : -1, L->nlocal));
        of->roff[k + 1] = of->roff[k] + p->nrecv + (node ? p->nrecv1 : 0);
        of->foff[k + 1] = of->foff[k] + (node ? p->nfwd : 0);
        of->eoff[k + 1] = of->eoff[k] + p->nexp;
        of->ooff[k] = of->eoff[k] + (k > 0 ? (long)L->S * ntok : 0);
    }
    if (node && (of->roff[N] > L->dedup_recv_rows || of->foff[N] > L->dedup_fwd_rows)) {
        mp_error("the chunks' relayed rows (%ld) or forwards (%ld) exceed the relay buffers",
                 of->roff[N], of->foff[N]);
        return MP_ERR_RUNTIME;
    }
    if (!node)
        MP_CHECK(mp_layer_check_rows(L, of->roff[N]));
    MP_CHECK(mp_layer_check_rows(L, of->eoff[N]));
    MP_CHECK(o->mark(L->dev, MARK_NOTIFY));
out:
    return rc;
}

/* Step s's middle: chunk k = s−1's rows arrived (node: forwarded inside the node), expanded,
 * computed (its partners advance between experts), reduced over TP, summed per received row
 * (node: the forwards' sums returned to their relay and added), and its combine started. The
 * shared experts ride with chunk 0. */
static int dp_compute(struct mp_layer *L, const struct mp_point *pt,
                      const struct mp_point *plain_pt, int k, long ntok,
                      const struct dp_offsets *of, char *rbase, char *fbase)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    struct mp_dedup_plan *p = &L->dchunk[k];
    int H = L->m.hidden, S = k == 0 ? L->S : 0, node = pt->dedup == MP_DEDUP_NODE, rc = MP_OK;
    char *rbuf = rbase + (size_t)of->roff[k] * L->row_bytes;
    char *fbuf = fbase ? fbase + (size_t)of->foff[k] * L->row_bytes : NULL;
    char *exp = (char *)L->expbuf + (size_t)of->eoff[k] * L->row_bytes;
    char *out = (char *)L->outbuf + (size_t)of->ooff[k] * L->row_bytes;
    char *back = (char *)L->sendbuf + (size_t)of->soff[k] * L->row_bytes;
    MP_CHECK(c->ops->wait(c, 2 * k));
    MP_CHECK(mp_layer_dispatch_finish(L, rbuf, p->recv_rows, p->recv_displ));
    if (node) { /* the intra-node phase: direct rows (in `back`, sent from there) and forwards */
        MP_CHECK(o->permute(dev, rbuf, p->fwd_src, 0, p->nfwd, H, fbuf));
        if (L->dispatch_dtype == MP_DTYPE_FP8) /* the relay rows' packing overwrote them */
            MP_CHECK(o->permute(dev, L->x, p->send_tok, 0, p->nsend, H, back));
        MP_CHECK(mp_dedup_intra_moves(L, back, p->send_displ, p->d_rows, fbuf, p->fwd_displ,
                                      p->fwd_rows, p->in_displ, 0));
        MP_CHECK(mp_layer_dispatch_rows_on(L, MP_GROUP_EP_INTRA, L->dedup_intra, p->in_rows,
                                           p->in_displ, rbuf + (size_t)p->nrecv * L->row_bytes,
                                           p->in_rrows, p->in_rdispl));
    }
    MP_CHECK(o->permute(dev, rbuf, p->exp_row, 0, p->nexp, H, exp));
    MP_CHECK(mp_layer_chunk_ffn_reduce(L, k == 0 ? pt : plain_pt, k, exp, out, p->expert_off,
                                       p->nexp, ntok, S, progress_hook, c));
    long nin = p->nrecv + (node ? p->nrecv1 : 0);
    MP_CHECK(o->combine(dev, out, p->exp_row, p->exp_w, 0, p->nexp, NULL, 0, nin, H, rbuf, 0));
    if (node) { /* the intra-node phase back, then the inter-node phase's in flight */
        MP_CHECK(mp_comm_alltoallv_on(c, MP_GROUP_EP_INTRA,
                                      rbuf + (size_t)p->nrecv * L->row_bytes, p->in_rrows,
                                      p->in_rdispl, L->dedup_intra, p->in_rows, p->in_displ,
                                      L->row_bytes));
        MP_CHECK(mp_dedup_intra_moves(L, back, p->send_displ, p->d_rows, fbuf, p->fwd_displ,
                                      p->fwd_rows, p->in_displ, 1));
        MP_CHECK(o->combine(dev, fbuf, p->fwd_src, p->ones, 0, p->nfwd, NULL, 0, p->nrecv, H,
                            rbuf, 1));
        MP_CHECK(mp_comm_ialltoallv_on(c, MP_GROUP_EP_INTER, rbuf, p->recv_rows, p->recv_displ,
                                       back, p->x_rows, p->send_displ, L->row_bytes, 2 * k + 1));
    } else {
        MP_CHECK(c->ops->ialltoallv(c, rbuf, p->recv_rows, p->recv_displ, back, p->send_rows,
                                    p->send_displ, L->row_bytes, 2 * k + 1));
    }
out:
    return rc;
}

/* One layer forward pipelined over N = pt->overlap chunks of tokens: after the notify phase
 * (dp_plans), step s starts chunk s's rows, computes chunk s−1 (dp_compute) and finishes chunk
 * s−2's combine into y (chunk 0 with the shared experts, the rest added to it). Request slots: 2k
 * rows out, 2k+1 rows back. Times as the pipelined dispatch records them: route, notify, the
 * chunks' FFN and TP reduce, the rest dispatch (the communication left exposed), combine 0. */
static int dp_iterate(struct mp_layer *L, const struct mp_point *pt,
                      struct mp_routing_pool *pool, int d, long ntok, struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    int N = pt->overlap, H = L->m.hidden, K = L->m.topk, node = pt->dedup == MP_DEDUP_NODE;
    int rc = MP_OK;
    struct dp_offsets of;
    struct mp_point plain_pt = *pt; /* chunks after the first: no straggler delay */
    plain_pt.straggle_us = 0;
    char *rbase = node ? L->dedup_recv : L->recvbuf, *fbase = node ? L->dedup_fwd : NULL;

    MP_CHECK(mp_layer_start_aligned(L));
    MP_CHECK(dp_plans(L, pt, pool, d, ntok, &of));
    for (int s = 0; s < N + 2; s++) {
        if (s < N) { /* start chunk s's rows */
            struct mp_dedup_plan *p = &L->dchunk[s];
            char *send = (char *)L->sendbuf + (size_t)of.soff[s] * L->row_bytes;
            char *recv = rbase + (size_t)of.roff[s] * L->row_bytes;
            MP_CHECK(o->permute(dev, L->x, p->send_tok, 0, p->nsend, H, send));
            /* node: the inter-node phase's rows; the intra-node phase's in dp_compute */
            MP_CHECK(mp_layer_dispatch_start_on(L, node ? MP_GROUP_EP_INTER : MP_GROUP_EP, send,
                                                node ? p->x_rows : p->send_rows, p->send_displ,
                                                recv, p->recv_rows, p->recv_displ, 2 * s));
        }
        if (s >= 1 && s <= N)
            MP_CHECK(dp_compute(L, pt, &plain_pt, s - 1, ntok, &of, rbase, fbase));
        if (s >= 2) { /* finish chunk s−2's combine */
            int k = s - 2;
            struct mp_dedup_plan *p = &L->dchunk[k];
            char *shared = (char *)L->outbuf + (size_t)(of.ooff[0] + L->dchunk[0].nexp) *
                                                   L->row_bytes;
            MP_CHECK(c->ops->wait(c, 2 * k + 1));
            MP_CHECK(o->combine(dev, (char *)L->sendbuf + (size_t)of.soff[k] * L->row_bytes,
                                p->send_tok, p->ones, 0, p->nsend, k == 0 && L->S ? shared : NULL,
                                k == 0 ? L->S : 0, ntok, H, L->y, k > 0));
        }
    }
    MP_CHECK(o->mark(dev, MARK_COMBINE));
    MP_CHECK(mp_layer_drain(L));

    mp_layer_pipelined_times(L, N, rec);
    double meta = mp_dedup_meta_bytes((enum mp_dedup)pt->dedup, K), rows = 0, local = 0;
    rec->bytes_sent = rec->dispatch_intra = rec->dispatch_inter = 0;
    rec->combine_intra = rec->combine_inter = 0;
    for (int k = 0; k < N; k++) {
        struct mp_dedup_plan *p = &L->dchunk[k];
        rows += (double)p->nexp;
        local += (double)p->local_pairs;
        if (!node) {
            mp_layer_add_peer_bytes(L, p->send_rows, p->recv_rows, meta, rec);
            continue;
        }
        mp_layer_add_peer_bytes(L, p->x_rows, p->recv_rows, meta, rec); /* both phases */
        mp_layer_add_peer_bytes(L, p->d_rows, p->d_rrows, meta, rec);
        mp_layer_add_peer_bytes(L, p->fwd_rows, p->recv1_rows, meta, rec);
    }
    rec->tokens = (double)ntok;
    rec->rows = rows;
    rec->ffn_rows = rows + (double)L->S * ntok;
    rec->pairs = (double)ntok * K;
    rec->local_pairs = local;
    rec->dropped = 0;
out:
    return rc;
}

const struct mp_dispatch_mode mp_dispatch_dedup_pipelined = {
    .name = "dedup_pipelined",
    .backend_bit = MP_DISPATCH_DEDUP_PIPELINED,
    .dedup_modes = 1u << MP_DEDUP_RANK | 1u << MP_DEDUP_NODE,
    .validate = dp_validate,
    .reserve = dp_reserve,
    .setup = dp_setup,
    .iterate = dp_iterate,
    .teardown = dp_teardown,
    .reference = &mp_dispatch_dedup,
    .model_traffic = mp_vtraffic_dedup_pipelined,
};
