/* dispatch_dedup_padded.c - the padded dispatch deduplicated (--dispatch padded[:F] with --dedup
 * rank or node): every source sends each of its possible targets one fixed slot of
 * mp_dedup_padded_capacity rows (rank: every EP rank; node: the ranks of its node and its relay on
 * each other node), each a token with its top-K metadata (padding: no choice), so no count
 * exchange precedes the data; node's relays forward in fixed slots too (lossless); the
 * destination expands the rows into its experts' blocks, runs them, and returns every slot
 * pre-weighted and summed; rows past a slot's capacity are dropped with their pairs (route on the
 * host | permute into slots, rows and metadata all-to-all, node: forward slots, expand | FFN | TP
 * reduce | weighted sum per row, node: forwards back and added, all-to-all back, sum into
 * tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "dispatch.h"
#include "error.h"
#include "freeall.h"
#include "layer_internal.h"
#include "nvtx.h"
#include "vlayer.h"

/* The slots' host arrays: their tokens, weights and metadata, and the forwards'. */
static void free_slot_arrays(struct mp_layer *L)
{
    MP_FREE_ALL(L->dpad.tok, L->dpad.fsrc, L->dpad.w, L->dpad.fw, L->dpad.meta, L->dpad.fmeta,
                L->dpad.imeta);
}

static void free_slots(struct mp_layer *L)
{
    L->ops->free(L->dev, L->dpad.send);
    L->ops->free(L->dev, L->dpad.recv);
    L->ops->free(L->dev, L->dpad.fwd);
    free_slot_arrays(L);
    free(L->dpad.send1);
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

static long sum_of(const int *v, int n)
{
    long s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return s;
}

static void displ_of(const int *rows, int n, long from, int *displ)
{
    for (int i = 0; i < n; i++) {
        displ[i] = (int)from;
        from += rows[i];
    }
}

/* A backend buffer of at least `rows` rows in *buf (holding *have), grown zero-filled. */
static int grow(struct mp_layer *L, void **buf, long *have, long rows)
{
    if (rows <= *have && *buf)
        return MP_OK;
    L->ops->free(L->dev, *buf);
    *have = 0;
    if (!(*buf = mp_layer_alloc_zero(L, (size_t)(rows > 0 ? rows : 1) * L->m.hidden)))
        return MP_ERR_RUNTIME;
    *have = rows;
    return MP_OK;
}

/* The layout of this rank's slots for capacities cap1 (and cap2, node's forwards): the sixteen
 * per-peer arrays in one block, their sums and displacements, and node's two phases (the relay
 * slots between nodes, then the direct and forward slots inside). MP_OK or MP_ERR_RUNTIME. */
static int slot_layout(struct mp_layer *L, const int *ep_node, int node, long cap1, long cap2)
{
    int ep = L->ep, me = L->comm->ep_rank;
    free(L->dpad.send1);
    L->dpad.send1 = malloc(16 * (size_t)ep * sizeof(int));
    if (!L->dpad.send1)
        return MP_ERR_RUNTIME;
    int *a = L->dpad.send1; /* one block: the sixteen per-peer arrays */
    L->dpad.sdispl1 = a + ep;
    L->dpad.recv1 = a + 2 * ep;
    L->dpad.rdispl1 = a + 3 * ep;
    L->dpad.send2 = a + 4 * ep;
    L->dpad.sdispl2 = a + 5 * ep;
    L->dpad.recv2 = a + 6 * ep;
    L->dpad.xsend = a + 7 * ep;
    L->dpad.xrecv = a + 8 * ep;
    L->dpad.xrdispl = a + 9 * ep;
    L->dpad.dsend = a + 10 * ep;
    L->dpad.drecv = a + 11 * ep;
    L->dpad.isend = a + 12 * ep;
    L->dpad.isdispl = a + 13 * ep;
    L->dpad.irecv = a + 14 * ep;
    L->dpad.irdispl = a + 15 * ep;
    mp_dedup_padded_layout(node ? ep_node : NULL, ep, me, cap1, cap2, L->dpad.send1,
                           L->dpad.recv1, L->dpad.send2, L->dpad.recv2);
    L->dpad.cap1 = cap1;
    L->dpad.cap2 = cap2;
    L->dpad.node = node;
    L->dpad.nsend1 = sum_of(L->dpad.send1, ep);
    L->dpad.nrecv1 = sum_of(L->dpad.recv1, ep);
    L->dpad.nsend2 = sum_of(L->dpad.send2, ep);
    L->dpad.nrecv2 = sum_of(L->dpad.recv2, ep);
    displ_of(L->dpad.send1, ep, 0, L->dpad.sdispl1);
    displ_of(L->dpad.recv1, ep, 0, L->dpad.rdispl1);
    displ_of(L->dpad.send2, ep, 0, L->dpad.sdispl2);
    /* node's phases: the relay slots between nodes, then the direct and forward slots inside */
    for (int q = 0; q < ep; q++) {
        int same = ep_node[q] == ep_node[me];
        L->dpad.xsend[q] = node && !same ? L->dpad.send1[q] : 0;
        L->dpad.xrecv[q] = node && !same ? L->dpad.recv1[q] : 0;
        L->dpad.dsend[q] = node && same ? L->dpad.send1[q] : 0;
        L->dpad.drecv[q] = node && same ? L->dpad.recv1[q] : 0;
        L->dpad.isend[q] = L->dpad.dsend[q] + L->dpad.send2[q];
        L->dpad.irecv[q] = L->dpad.drecv[q] + L->dpad.recv2[q];
    }
    L->dpad.nrecvx = sum_of(L->dpad.xrecv, ep);
    L->dpad.nisend = sum_of(L->dpad.isend, ep);
    displ_of(L->dpad.xrecv, ep, 0, L->dpad.xrdispl);
    displ_of(L->dpad.isend, ep, 0, L->dpad.isdispl);
    displ_of(L->dpad.irecv, ep, 0, L->dpad.irdispl);
    return MP_OK;
}

/* The slot buffers of a point (--dedup `pt->dedup`, capacity cap1), grown after a collective
 * memory check, and the host arrays of the slots' tokens, weights and metadata. MP_OK,
 * MP_ERR_USAGE (the memory check) or MP_ERR_RUNTIME. */
static int slot_buffers(struct mp_layer *L, const struct mp_point *pt, long cap1)
{
    struct mp_comm *c = L->comm;
    int ep = L->ep, K = L->m.topk, node = L->dpad.node, rc = MP_OK;
    /* the slot buffers, grown after a collective memory check */
    long need = (L->dpad.nsend1 > L->dpad.send_cap ? L->dpad.nsend1 : 0) +
                (L->dpad.nrecv1 + L->dpad.nrecv2 > L->dpad.recv_cap
                     ? L->dpad.nrecv1 + L->dpad.nrecv2
                     : 0) +
                (L->dpad.nsend2 > L->dpad.fwd_cap ? L->dpad.nsend2 : 0);
    if (need > 0) {
        char what[160];
        snprintf(what, sizeof what, "--dispatch padded --dedup %s with %d ranks × %ld rows per "
                 "slot", mp_dedup_choices[pt->dedup], ep, cap1);
        rc = mp_layer_memory_refusal(c, L->ops, L->dev, L->max_memory,
                                     (double)need * L->row_bytes, what);
        if (rc != MP_OK)
            return rc;
    }
    free_slot_arrays(L);
    long n1 = L->dpad.nsend1 > 0 ? L->dpad.nsend1 : 1, n2 = L->dpad.nsend2 > 0 ? L->dpad.nsend2 : 1;
    long ni = L->dpad.nisend > 0 ? L->dpad.nisend : 1;
    L->dpad.imeta = malloc((size_t)ni * K * sizeof *L->dpad.imeta);
    L->dpad.tok = malloc((size_t)n1 * sizeof *L->dpad.tok);
    L->dpad.w = malloc((size_t)n1 * sizeof *L->dpad.w);
    L->dpad.meta = malloc((size_t)n1 * K * sizeof *L->dpad.meta);
    L->dpad.fsrc = malloc((size_t)n2 * sizeof *L->dpad.fsrc);
    L->dpad.fw = malloc((size_t)n2 * sizeof *L->dpad.fw);
    L->dpad.fmeta = malloc((size_t)n2 * K * sizeof *L->dpad.fmeta);
    if (!L->dpad.tok || !L->dpad.w || !L->dpad.meta || !L->dpad.fsrc || !L->dpad.fw ||
        !L->dpad.fmeta || !L->dpad.imeta ||
        grow(L, &L->dpad.send, &L->dpad.send_cap, L->dpad.nsend1) != MP_OK ||
        grow(L, &L->dpad.recv, &L->dpad.recv_cap, L->dpad.nrecv1 + L->dpad.nrecv2) != MP_OK ||
        grow(L, &L->dpad.fwd, &L->dpad.fwd_cap, L->dpad.nsend2) != MP_OK) {
        mp_error("out of memory for the --dedup %s slots: %d ranks × %ld rows",
                 mp_dedup_choices[pt->dedup], ep, cap1);
        free_slots(L);
        rc = MP_ERR_RUNTIME;
    }
    if (rc == MP_OK && node) /* the intra-node phase's buffer: every node-mode rank asks */
        rc = mp_dedup_intra_buffers(L, L->dpad.nisend);
    return rc;
}

/* The point's slots: capacities, the layout of this rank's slots (every EP rank's node: the
 * launcher's host of its first TP rank, as --dedup node's relays use), their buffers (grown after
 * a collective memory check, never inside timed loops), and the host plan sized for them. */
static int dedup_padded_setup(struct mp_layer *L, const struct mp_point *pt, long tokens_per_rank)
{
    const struct mp_placement *pl = pt->placement;
    struct mp_comm *c = L->comm;
    int ep = L->ep, K = L->m.topk, node = pt->dedup == MP_DEDUP_NODE;
    int *ep_node = malloc((size_t)ep * sizeof *ep_node);
    if (!ep_node)
        return MP_ERR_RUNTIME;
    for (int q = 0; q < ep; q++)
        ep_node[q] = c->node_of[q * L->tp];
    long cap1 = mp_dedup_padded_capacity(tokens_per_rank, K, L->m.experts, pl->max_local,
                                         pt->dispatch_arg);
    long cap2 = node ? cap1 * mp_dedup_padded_relays(ep_node, ep) : 0;
    if ((double)ep * (cap1 + cap2) * (node ? 2 : 1) > 2147483647.0) {
        free(ep_node);
        mp_usage("--dispatch padded --dedup %s: %d ranks × %ld rows per slot exceed the 2^31 rows "
                 "an MPI count holds; use a capacity factor (padded:1.25)",
                 mp_dedup_choices[pt->dedup], ep, cap1);
        return MP_ERR_USAGE;
    }
    if (slot_layout(L, ep_node, node, cap1, cap2) != MP_OK) {
        free(ep_node);
        return MP_ERR_RUNTIME;
    }

    /* the host plan: node mode relays the first hop's slot rows */
    struct mp_dedup_plan *p = &L->dedup;
    long exp = L->max_rows > L->dpad.nrecv1 + L->dpad.nrecv2 ? L->max_rows
                                                              : L->dpad.nrecv1 + L->dpad.nrecv2;
    long relayed = node ? L->dpad.nrecv1 : 0;
    int rc = MP_OK;
    if (!p->send_rows || p->max_local != pl->max_local || p->max_tok < L->max_tok_rank ||
        p->max_exp < exp || p->max_recv < exp + relayed || p->max_fwd < relayed * (K < ep ? K : ep)) {
        mp_dedup_plan_free(p);
        if (mp_dedup_plan_alloc(p, ep, pl->max_local, K, L->max_tok_rank, exp, relayed) != MP_OK) {
            mp_error("out of memory for the --dedup plan of %ld rows", exp);
            rc = MP_ERR_RUNTIME;
            goto out;
        }
    }
    memcpy(p->ep_node, ep_node, (size_t)ep * sizeof *ep_node);
    /* the intra-node phase's metadata goes out of dedup_meta_fwd */
    rc = mp_dedup_meta_buffers(L, L->dpad.nsend1,
                               L->dpad.nisend > L->dpad.nsend2 ? L->dpad.nisend : L->dpad.nsend2,
                               L->dpad.nrecv1 + L->dpad.nrecv2);
    if (rc != MP_OK)
        goto out;

    rc = slot_buffers(L, pt, cap1);
out:
    free(ep_node);
    return rc;
}

/* --dedup node's slot dispatch: the inter-node phase's relay slots and metadata, the forwards
 * of what came in into their slots (rows over capacity added to *dropped), then the intra-node
 * phase's direct and forward slots with their metadata. */
static int node_slots_dispatch(struct mp_layer *L, struct mp_dedup_plan *p, long *dropped)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    int H = L->m.hidden, K = L->m.topk, ep = L->ep, me = L->comm->ep_rank, rc = MP_OK;
    long n1 = L->dpad.nsend1, n2 = L->dpad.nsend2;
    long nx = L->dpad.nrecvx;
    MP_CHECK(o->mark(dev, MARK_HOP0_BEGIN));
    MP_CHECK(mp_layer_dispatch_rows_on(L, MP_GROUP_EP_INTER, L->dpad.send, L->dpad.xsend,
                                       L->dpad.sdispl1, L->dpad.recv, L->dpad.xrecv,
                                       L->dpad.xrdispl));
    MP_CHECK(mp_dedup_meta_exchange_on(L, MP_GROUP_EP_INTER, L->dpad.meta, L->dedup_meta_send,
                                       n1, L->dpad.xsend, L->dpad.sdispl1, p->recv_meta,
                                       L->dpad.xrecv, L->dpad.xrdispl, 0, nx));
    memcpy(p->recv_rows, L->dpad.xrecv, (size_t)ep * sizeof(int));
    MP_CHECK(mp_dedup_plan_recv(p));
    MP_CHECK(o->mark(dev, MARK_HOP0_END));
    MP_CHECK(mp_dedup_plan_forward(p, me));
    *dropped += mp_dedup_plan_fwd_slots(p, L->dpad.send2, L->dpad.fsrc, L->dpad.fw,
                                       L->dpad.fmeta);
    for (int q = 0; q < ep; q++) { /* the phase's metadata: q's direct slot, its forwards */
        struct mp_dedup_meta *at = L->dpad.imeta + (size_t)L->dpad.isdispl[q] * K;
        memcpy(at, L->dpad.meta + (size_t)L->dpad.sdispl1[q] * K,
               (size_t)L->dpad.dsend[q] * K * sizeof *at);
        memcpy(at + (size_t)L->dpad.dsend[q] * K,
               L->dpad.fmeta + (size_t)L->dpad.sdispl2[q] * K,
               (size_t)L->dpad.send2[q] * K * sizeof *at);
    }
    p->nrecv1 = L->dpad.nrecv1 + L->dpad.nrecv2 - nx; /* expanded after the nx rows */
    MP_CHECK(o->permute(dev, L->dpad.recv, L->dpad.fsrc, 0, n2, H, L->dpad.fwd));
    if (L->dispatch_dtype == MP_DTYPE_FP8) /* the relay slots' packing overwrote them */
        MP_CHECK(o->permute(dev, L->x, L->dpad.tok, 0, n1, H, L->dpad.send));
    MP_CHECK(mp_dedup_intra_moves(L, L->dpad.send, L->dpad.sdispl1, L->dpad.dsend,
                                  L->dpad.fwd, L->dpad.sdispl2, L->dpad.send2,
                                  L->dpad.isdispl, 0));
    MP_CHECK(mp_layer_dispatch_rows_on(L, MP_GROUP_EP_INTRA, L->dedup_intra, L->dpad.isend,
                                       L->dpad.isdispl,
                                       (char *)L->dpad.recv + (size_t)nx * L->row_bytes,
                                       L->dpad.irecv, L->dpad.irdispl));
    MP_CHECK(mp_dedup_meta_exchange_on(L, MP_GROUP_EP_INTRA, L->dpad.imeta,
                                       L->dedup_meta_fwd, L->dpad.nisend, L->dpad.isend,
                                       L->dpad.isdispl, p->recv_meta + (size_t)nx * K,
                                       L->dpad.irecv, L->dpad.irdispl, 0, p->nrecv1));
    MP_CHECK(o->mark(dev, MARK_HOP1_END));
out:
    return rc;
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
    int H = L->m.hidden, K = L->m.topk, ep = L->ep, me = c->ep_rank;
    int node = L->dpad.node;
    long n1 = L->dpad.nsend1, n2 = L->dpad.nsend2;
    int rc = MP_OK;
    long tok0;
    mp_token_split(pt->batch * pt->seq, ep, me, &tok0);

    /* route: the gate's or the pool's top-K on the host, each token's row per target, into slots */
    MP_CHECK(mp_layer_start_aligned(L));
    MP_RANGE_PUSH("moeperf/route");
    const int32_t *ids;
    const float *w;
    MP_CHECK(mp_dedup_route(L, pt, pool, d, ntok, &ids, &w));
    mp_dedup_plan_send(p, pt->placement, me, tok0, ntok, ids, w, node ? p->ep_node : NULL);
    long dropped = mp_dedup_plan_slots(p, me, L->dpad.send1, L->dpad.tok, L->dpad.w, L->dpad.meta);
    MP_CHECK(o->mark(dev, MARK_ROUTE));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/dispatch");

    /* dispatch: whole slots and their metadata, no count exchange (node: the inter-node phase's
     * relay slots, then the intra-node phase's direct and forward slots); expand by expert */
    MP_CHECK(o->permute(dev, L->x, L->dpad.tok, 0, n1, H, L->dpad.send));
    if (!node) {
        MP_CHECK(mp_layer_dispatch_rows(L, L->dpad.send, L->dpad.send1, L->dpad.sdispl1,
                                        L->dpad.recv, L->dpad.recv1, L->dpad.rdispl1));
        MP_CHECK(mp_dedup_meta_exchange(L, L->dpad.meta, L->dedup_meta_send, n1, L->dpad.send1,
                                        L->dpad.sdispl1, p->recv_meta, L->dpad.recv1,
                                        L->dpad.rdispl1, 0, L->dpad.nrecv1));
        memcpy(p->recv_rows, L->dpad.recv1, (size_t)ep * sizeof(int));
        MP_CHECK(mp_dedup_plan_recv(p));
    } else {
        MP_CHECK(node_slots_dispatch(L, p, &dropped));
    }
    MP_CHECK(mp_dedup_plan_expand(p, node ? me : -1, L->nlocal));
    MP_CHECK(mp_layer_check_rows(L, p->nexp));
    MP_CHECK(o->permute(dev, L->dpad.recv, p->exp_row, 0, p->nexp, H, L->expbuf));
    MP_CHECK(o->mark(dev, MARK_DISPATCH));
    MP_RANGE_POP();
    MP_CHECK(mp_layer_ffn_reduce(L, pt, p->expert_off, p->nexp, ntok));
    MP_RANGE_PUSH("moeperf/combine");

    /* combine: each received slot row's expert outputs summed with their weights (padding: 0),
     * node: the intra-node phase's slots back (the direct ones to their place, the forwards'
     * added to the relay rows they came from), then the inter-node phase's; whole slots back, the
     * returned rows (weight 1, padding 0) and the shared experts summed into token order */
    long nin = L->dpad.nrecv1 + (node ? L->dpad.nrecv2 : 0);
    MP_CHECK(o->combine(dev, L->outbuf, p->exp_row, p->exp_w, 0, p->nexp, NULL, 0, nin, H,
                        L->dpad.recv, 0));
    if (node) {
        struct mp_node_rows nr = {
            .recv = L->dpad.recv, .relayed = L->dpad.nrecvx, .send = L->dpad.send,
            .send_displ = L->dpad.sdispl1, .x_rows = L->dpad.xsend, .x_rrows = L->dpad.xrecv,
            .x_rdispl = L->dpad.xrdispl, .d_rows = L->dpad.dsend, .fwd = L->dpad.fwd,
            .fwd_rows = L->dpad.send2, .fwd_displ = L->dpad.sdispl2, .fwd_src = L->dpad.fsrc,
            .fwd_w = L->dpad.fw, .nfwd = n2, .in_rows = L->dpad.isend,
            .in_displ = L->dpad.isdispl, .in_rrows = L->dpad.irecv, .in_rdispl = L->dpad.irdispl};
        MP_CHECK(mp_dedup_node_combine(L, &nr));
    } else {
        MP_CHECK(c->ops->alltoallv(c, L->dpad.recv, L->dpad.recv1, L->dpad.rdispl1, L->dpad.send,
                                   L->dpad.send1, L->dpad.sdispl1, L->row_bytes));
    }
    MP_CHECK(o->combine(dev, L->dpad.send, L->dpad.tok, L->dpad.w, 0, n1,
                        L->S ? (char *)L->outbuf + (size_t)p->nexp * L->row_bytes : NULL, L->S,
                        ntok, H, L->y, 0));
    MP_CHECK(o->mark(dev, MARK_COMBINE));
    MP_RANGE_POP();
    MP_CHECK(mp_layer_drain(L));

    mp_layer_phase_times(L, rec, 0); /* no count exchange: notify 0 */
    mp_layer_dedup_record(L, rec, node, ntok, K, p->nexp, p->local_pairs);
    rec->dropped = (double)dropped; /* the slots out and back: their bytes added below */
    double meta = mp_dedup_meta_bytes((enum mp_dedup)pt->dedup, K);
    mp_layer_add_peer_bytes(L, L->dpad.send1, L->dpad.recv1, meta, rec);
    if (node)
        mp_layer_add_peer_bytes(L, L->dpad.send2, L->dpad.recv2, meta, rec);
out:
    return rc;
}

/* --check: the slots dropped the rows past their capacity, so does the reference. */
static int dedup_padded_check_routing(const struct mp_layer *L, const struct mp_point *pt,
                                      long ntok, int K, int32_t *ids, float *w)
{
    int node = pt->dedup == MP_DEDUP_NODE;
    return mp_dedup_padded_walk(pt->placement, L->ep, ntok, K, ids, w, L->dpad.cap1,
                                node ? L->dedup.ep_node : NULL, NULL, NULL, NULL) < 0
               ? MP_ERR_RUNTIME
               : MP_OK;
}

const struct mp_dispatch_mode mp_dispatch_dedup_padded = {
    .name = "dedup_padded",
    .backend_bit = MP_DISPATCH_DEDUP_PADDED,
    .dedup_modes = 1u << MP_DEDUP_RANK | 1u << MP_DEDUP_NODE,
    .reserve = dedup_padded_reserve,
    .setup = dedup_padded_setup,
    .iterate = dedup_padded_iterate,
    .teardown = dedup_padded_teardown,
    .check_routing = dedup_padded_check_routing,
    .model_traffic = mp_vtraffic_dedup_padded,
};
