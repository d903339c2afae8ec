/* dispatch_dedup_padded.c - the padded dispatch deduplicated per rank (--dispatch padded[:F]
 * --dedup rank): every source sends every EP rank one fixed slot of mp_dedup_padded_capacity rows,
 * each a token with its top-K metadata (padding: no choice), so no count exchange precedes the
 * data; the destination expands the rows into its experts' blocks, runs them, and returns the slot
 * pre-weighted and summed; rows past a slot's capacity are dropped with their pairs (route on the
 * host | permute into slots, rows and metadata all-to-all, expand | FFN | TP reduce | weighted sum
 * per row, all-to-all back, sum into tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "dispatch.h"
#include "error.h"
#include "layer_internal.h"
#include "nvtx.h"
#include "vlayer.h"

static void free_slots(struct mp_layer *L)
{
    L->ops->free(L->dev, L->dpad.send);
    L->ops->free(L->dev, L->dpad.recv);
    free(L->dpad.tok);
    free(L->dpad.w);
    free(L->dpad.meta);
    free(L->dpad.peer_rows);
    free(L->dpad.peer_displ);
    memset(&L->dpad, 0, sizeof L->dpad);
}

static void dedup_padded_teardown(struct mp_layer *L)
{
    free_slots(L);
    mp_dedup_plan_free(&L->dedup);
}

/* The expanded rows are at most the pairs the rank serves: the routed-row buffers' bound. */
static int dedup_padded_reserve(struct mp_layer *L, const struct mp_point *pt, long total)
{
    return mp_layer_size_rows(L, total, mp_placement_nlocal(pt->placement, L->comm->ep_rank));
}

/* Slots of the point's capacity (`tokens_per_rank`: the most tokens a rank holds), their buffers
 * (grown after a collective memory check, never inside timed loops), and the host plan sized for
 * them. */
static int dedup_padded_setup(struct mp_layer *L, const struct mp_point *pt, long tokens_per_rank)
{
    const struct mp_placement *pl = pt->placement;
    int ep = L->ep, K = L->m.topk;
    long cap = mp_dedup_padded_capacity(tokens_per_rank, K, L->m.experts, pl->max_local,
                                        pt->dispatch_arg);
    long rows = (long)ep * cap;
    size_t H = (size_t)L->m.hidden;
    if ((double)ep * cap > 2147483647.0) {
        mp_usage("--dispatch padded --dedup rank: %d ranks × %ld rows per slot exceed the 2^31 "
                 "rows an MPI count holds; use a capacity factor (padded:1.25)", ep, cap);
        return MP_ERR_USAGE;
    }
    struct mp_dedup_plan *p = &L->dedup;
    if (!p->send_rows || p->max_local != pl->max_local || p->max_tok < L->max_tok_rank ||
        p->max_exp < L->max_rows || p->max_recv < rows) {
        mp_dedup_plan_free(p);
        long exp = L->max_rows > rows ? L->max_rows : rows;
        if (mp_dedup_plan_alloc(p, ep, pl->max_local, K, L->max_tok_rank, exp, 0) != MP_OK) {
            mp_error("out of memory for the --dedup plan of %ld rows", exp);
            return MP_ERR_RUNTIME;
        }
    }
    if (L->dpad.cap == cap && L->dpad.tok)
        return MP_OK;
    if (rows > L->dpad.buf_rows) {
        char what[160];
        snprintf(what, sizeof what, "--dispatch padded --dedup rank with %d ranks × %ld rows per "
                 "slot", ep, cap);
        int rc = mp_layer_memory_refusal(L->comm, L->ops, L->dev, L->max_memory,
                                         2.0 * (double)rows * L->row_bytes, what);
        if (rc != MP_OK)
            return rc;
    }
    long buf = rows > L->dpad.buf_rows ? rows : L->dpad.buf_rows;
    void *send = NULL, *recv = NULL;
    if (rows > L->dpad.buf_rows) {
        L->ops->free(L->dev, L->dpad.send);
        L->ops->free(L->dev, L->dpad.recv);
        L->dpad.send = L->dpad.recv = NULL;
        L->dpad.buf_rows = 0;
        send = mp_layer_alloc_zero(L, (size_t)rows * H);
        recv = mp_layer_alloc_zero(L, (size_t)rows * H);
    } else {
        send = L->dpad.send;
        recv = L->dpad.recv;
    }
    free(L->dpad.tok);
    free(L->dpad.w);
    free(L->dpad.meta);
    free(L->dpad.peer_rows);
    free(L->dpad.peer_displ);
    L->dpad.send = send;
    L->dpad.recv = recv;
    L->dpad.buf_rows = send && recv ? buf : 0;
    L->dpad.tok = malloc((size_t)rows * sizeof *L->dpad.tok);
    L->dpad.w = malloc((size_t)rows * sizeof *L->dpad.w);
    L->dpad.meta = malloc((size_t)rows * K * sizeof *L->dpad.meta);
    L->dpad.peer_rows = malloc((size_t)ep * sizeof(int));
    L->dpad.peer_displ = malloc((size_t)ep * sizeof(int));
    if (!send || !recv || !L->dpad.tok || !L->dpad.w || !L->dpad.meta || !L->dpad.peer_rows ||
        !L->dpad.peer_displ) {
        mp_error("out of memory for the --dedup rank slots: %d ranks × %ld rows", ep, cap);
        free_slots(L);
        return MP_ERR_RUNTIME;
    }
    for (int q = 0; q < ep; q++) {
        L->dpad.peer_rows[q] = (int)cap;
        L->dpad.peer_displ[q] = (int)(q * cap);
    }
    L->dpad.cap = cap;
    L->dpad.slot_rows = rows;
    return MP_OK;
}

/* The plan is built on the host every iteration, from the routing: nothing for the backend. */
static int dedup_padded_plan(struct mp_layer *L, const struct mp_point *pt, long tok0, long ntok)
{
    (void)L, (void)pt, (void)tok0, (void)ntok;
    return MP_OK;
}

/* One layer forward on this rank with routing draw `d`; phase durations and counts into *rec. */
static int dedup_padded_iterate(struct mp_layer *L, const struct mp_point *pt,
                                struct mp_routing_pool *pool, int d, long ntok,
                                struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    struct mp_dedup_plan *p = &L->dedup;
    int H = L->m.hidden, K = L->m.topk, E = L->m.experts, ep = L->ep;
    long cap = L->dpad.cap, slots = L->dpad.slot_rows;
    size_t meta_bytes = (size_t)K * sizeof(struct mp_dedup_meta);
    int rc = MP_OK;
    long tok0;
    mp_token_split(pt->batch * pt->seq, ep, c->ep_rank, &tok0);

    /* route: the gate's or the pool's top-K on the host, each token's row per rank, into slots */
    MP_CHECK(mp_layer_start_aligned(L));
    MP_RANGE_PUSH("moeperf/route");
    const int32_t *ids = p->ids;
    const float *w = p->w;
    if (pool->noise)
        MP_CHECK(o->gate(dev, L->x, L->wg, pool->noise + (size_t)d * ntok * E, ntok, H, E, K,
                         pt->routing->groups, pt->routing->group_pick, p->ids, p->w));
    else {
        ids = pool->ids + (size_t)d * ntok * K;
        w = pool->w + (size_t)d * ntok * K;
    }
    mp_dedup_plan_send(p, pt->placement, c->ep_rank, tok0, ntok, ids, w, NULL);
    long dropped = mp_dedup_plan_slots(p, c->ep_rank, cap, L->dpad.tok, L->dpad.w, L->dpad.meta);
    MP_CHECK(o->mark(dev, MARK_ROUTE));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/dispatch");

    /* dispatch: whole slots and their metadata, no count exchange; expand by expert */
    MP_CHECK(o->permute(dev, L->x, L->dpad.tok, 0, slots, H, L->dpad.send));
    MP_CHECK(c->ops->alltoallv(c, L->dpad.send, L->dpad.peer_rows, L->dpad.peer_displ,
                               L->dpad.recv, L->dpad.peer_rows, L->dpad.peer_displ,
                               L->row_bytes));
    MP_CHECK(c->ops->alltoallv(c, L->dpad.meta, L->dpad.peer_rows, L->dpad.peer_displ,
                               p->recv_meta, L->dpad.peer_rows, L->dpad.peer_displ, meta_bytes));
    memcpy(p->recv_rows, L->dpad.peer_rows, (size_t)ep * sizeof(int));
    MP_CHECK(mp_dedup_plan_recv(p));
    MP_CHECK(mp_dedup_plan_expand(p, -1, L->nlocal));
    MP_CHECK(mp_layer_check_rows(L, p->nexp));
    MP_CHECK(o->permute(dev, L->dpad.recv, p->exp_row, 0, p->nexp, H, L->expbuf));
    MP_CHECK(o->mark(dev, MARK_DISPATCH));
    MP_RANGE_POP();
    MP_CHECK(mp_layer_ffn_reduce(L, pt, p->expert_off, p->nexp, ntok));
    MP_RANGE_PUSH("moeperf/combine");

    /* combine: each received slot row's expert outputs summed with their weights (padding: 0),
     * whole slots back, the returned rows (weight 1, padding 0) and the shared experts summed
     * into token order */
    MP_CHECK(o->combine(dev, L->outbuf, p->exp_row, p->exp_w, 0, p->nexp, NULL, 0, slots, H,
                        L->dpad.recv, 0));
    MP_CHECK(c->ops->alltoallv(c, L->dpad.recv, L->dpad.peer_rows, L->dpad.peer_displ,
                               L->dpad.send, L->dpad.peer_rows, L->dpad.peer_displ,
                               L->row_bytes));
    MP_CHECK(o->combine(dev, L->dpad.send, L->dpad.tok, L->dpad.w, 0, slots,
                        L->S ? (char *)L->outbuf + (size_t)p->nexp * L->row_bytes : NULL, L->S,
                        ntok, H, L->y, 0));
    MP_CHECK(o->mark(dev, MARK_COMBINE));
    MP_RANGE_POP();
    MP_CHECK(mp_layer_drain(L));

    mp_layer_phase_times(L, rec, 0); /* no count exchange: notify 0 */
    rec->tokens = (double)ntok;
    rec->rows = (double)p->nexp;
    rec->ffn_rows = (double)p->nexp + (double)L->S * ntok;
    rec->pairs = (double)ntok * K;
    rec->local_pairs = (double)p->local_pairs;
    rec->dropped = (double)dropped;
    rec->bytes_sent = rec->dispatch_intra = rec->dispatch_inter = 0; /* slots out and back */
    rec->combine_intra = rec->combine_inter = 0;
    mp_layer_add_peer_bytes(L, L->dpad.peer_rows, L->dpad.peer_rows,
                            mp_dedup_meta_bytes(MP_DEDUP_RANK, K), rec);
out:
    return rc;
}

/* --check: the slots dropped the rows past their capacity, so does the reference. */
static int dedup_padded_check_routing(const struct mp_layer *L, const struct mp_point *pt,
                                      long ntok, int K, int32_t *ids, float *w)
{
    return mp_dedup_padded_walk(pt->placement, L->ep, ntok, K, ids, w, L->dpad.cap, NULL, NULL,
                                NULL) < 0
               ? MP_ERR_RUNTIME
               : MP_OK;
}

const struct mp_dispatch_mode mp_dispatch_dedup_padded = {
    .name = "dedup_padded",
    .backend_bit = MP_DISPATCH_DEDUP_PADDED,
    .dedup_modes = 1u << MP_DEDUP_RANK,
    .reserve = dedup_padded_reserve,
    .setup = dedup_padded_setup,
    .plan = dedup_padded_plan,
    .iterate = dedup_padded_iterate,
    .teardown = dedup_padded_teardown,
    .check_routing = dedup_padded_check_routing,
    .model_traffic = mp_vtraffic_dedup_padded,
};
