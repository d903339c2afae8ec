/* dispatch_dedup.c - the deduplicated dynamic dispatch (--dedup rank|node). rank: each token goes
 * once to every EP rank that serves one of its pairs, with its top-K metadata; the destination
 * expands it into its experts' rows, runs them, and returns one row per received row, pre-weighted
 * and summed over its experts. node: a token goes once to each other node serving one of its
 * pairs, to that node's relay, which forwards it to the ranks of its node serving them; pairs on
 * the token's own node go there directly; the relays' rows move in an inter-node phase, the direct
 * rows and the forwards in an intra-node phase, each on its group of the EP group
 * (mp_comm_node_groups); the combine sums inside the node first (route on the
 * host | count exchange, permute, rows and metadata all-to-all, per hop, expand | FFN | TP reduce
 * | weighted sum per row, all-to-all back per hop, sum into tokens). On a device backend the
 * routing reaches the host for the plan (the gate's download, or the pool's host draw), the kernels
 * take the plan's index arrays as host arrays (the backend copies them), and the metadata goes
 * through device copies (mp_dedup_meta_exchange). Host work is timed in the phase it serves, as on the
 * host backend: it runs while the stream is idle (after the start's drain, the gate's or the
 * metadata's download), so the mark recorded after it counts it: building the plan in route,
 * the receive side and the expansion in dispatch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "dispatch.h"
#include "error.h"
#include "layer_internal.h"
#include "nvtx.h"
#include "vlayer.h"

/* The routed-row buffers, as the dynamic dispatch grows them: the rows this rank expands are at
 * most the pairs it serves (rank mode receives no more rows than that). */
static int dedup_reserve(struct mp_layer *L, const struct mp_point *pt, long total)
{
    return mp_layer_size_rows(L, total, mp_placement_nlocal(pt->placement, L->comm->ep_rank));
}

/* Node mode's own row buffers: the first-hop rows and the forwards received after them, the
 * forwards sent, and the intra-node phase's rows out and back (grown, never shrunk, after a
 * collective memory check). */
static int node_buffers(struct mp_layer *L, long recv_rows, long fwd_rows, long intra_rows)
{
    int rc = MP_OK;
    long grow_recv = recv_rows > L->dedup_recv_rows ? recv_rows : 0;
    long grow_fwd = fwd_rows > L->dedup_fwd_rows ? fwd_rows : 0;
    double need = (double)(grow_recv + grow_fwd) * (double)L->row_bytes;
    MP_CHECK(mp_layer_memory_refusal(L->comm, L->ops, L->dev, L->max_memory, need,
                                     "the --dedup node relay buffers"));
    size_t H = (size_t)L->m.hidden;
    if (grow_recv) {
        L->ops->free(L->dev, L->dedup_recv);
        L->dedup_recv_rows = 0;
        if (!(L->dedup_recv = mp_layer_alloc_zero(L, (size_t)grow_recv * H)))
            goto oom;
        L->dedup_recv_rows = grow_recv;
    }
    if (grow_fwd) {
        L->ops->free(L->dev, L->dedup_fwd);
        L->dedup_fwd_rows = 0;
        if (!(L->dedup_fwd = mp_layer_alloc_zero(L, (size_t)grow_fwd * H)))
            goto oom;
        L->dedup_fwd_rows = grow_fwd;
    }
    MP_CHECK(mp_dedup_intra_buffers(L, intra_rows));
out:
    return rc;
oom:
    mp_error("out of memory for the --dedup node relay buffers");
    return MP_ERR_RUNTIME;
}

/* Grow one metadata buffer of backend memory to `want` rows of `row` bytes (alloc counts in
 * elements of elem_size bytes). */
static int grow_meta(struct mp_layer *L, void **buf, long *rows, long want, size_t row)
{
    if (want <= *rows)
        return MP_OK;
    size_t elem = L->ops->elem_size, n = ((size_t)want * row + elem - 1) / elem;
    L->ops->free(L->dev, *buf);
    *rows = 0;
    if (!(*buf = L->ops->alloc(L->dev, n))) {
        mp_error("out of memory for the --dedup metadata buffers");
        return MP_ERR_RUNTIME;
    }
    *rows = want;
    return MP_OK;
}

int mp_dedup_route(struct mp_layer *L, const struct mp_point *pt, struct mp_routing_pool *pool,
                   int d, long ntok, const int32_t **ids, const float **w)
{
    int K = L->m.topk, E = L->m.experts;
    if (!pool->noise) {
        *ids = pool->ids + (size_t)d * ntok * K;
        *w = pool->w + (size_t)d * ntok * K;
        return MP_OK;
    }
    *ids = L->dedup.ids;
    *w = L->dedup.w;
    return L->ops->gate(L->dev, L->x, L->wg, pool->noise + (size_t)d * ntok * E, ntok,
                        L->m.hidden, E, K, pt->routing->groups, pt->routing->group_pick,
                        L->dedup.ids, L->dedup.w);
}

int mp_dedup_meta_buffers(struct mp_layer *L, long send_rows, long fwd_rows, long recv_rows)
{
    if (L->ops->memory != MP_MEMORY_DEVICE)
        return MP_OK;
    size_t row = (size_t)L->m.topk * sizeof(struct mp_dedup_meta);
    long grow = (send_rows > L->dedup_meta_send_rows ? send_rows : 0) +
                (fwd_rows > L->dedup_meta_fwd_rows ? fwd_rows : 0) +
                (recv_rows > L->dedup_meta_recv_rows ? recv_rows : 0);
    int rc = MP_OK;
    MP_CHECK(mp_layer_memory_refusal(L->comm, L->ops, L->dev, L->max_memory,
                                     (double)grow * (double)row, "the --dedup metadata buffers"));
    MP_CHECK(grow_meta(L, &L->dedup_meta_send, &L->dedup_meta_send_rows, send_rows, row));
    MP_CHECK(grow_meta(L, &L->dedup_meta_fwd, &L->dedup_meta_fwd_rows, fwd_rows, row));
    MP_CHECK(grow_meta(L, &L->dedup_meta_recv, &L->dedup_meta_recv_rows, recv_rows, row));
out:
    return rc;
}

int mp_dedup_meta_exchange_on(struct mp_layer *L, enum mp_comm_group g,
                              const struct mp_dedup_meta *send, void *dsend, long n,
                              const int *scount, const int *sdispl, struct mp_dedup_meta *recv,
                              const int *rcount, const int *rdispl, long at, long nin)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_comm *c = L->comm;
    size_t row = (size_t)L->dedup.K * sizeof(struct mp_dedup_meta);
    int rc = MP_OK;
    if (o->memory != MP_MEMORY_DEVICE)
        return mp_comm_alltoallv_on(c, g, send, scount, sdispl, recv, rcount, rdispl, row);
    MP_CHECK(o->upload_bytes(L->dev, dsend, send, (size_t)n * row));
    MP_CHECK(mp_comm_alltoallv_on(c, g, dsend, scount, sdispl, L->dedup_meta_recv, rcount, rdispl,
                                  row));
    MP_CHECK(o->download_bytes(L->dev, recv + (size_t)at * L->dedup.K,
                               (const char *)L->dedup_meta_recv + (size_t)at * row,
                               (size_t)nin * row));
out:
    return rc;
}

int mp_dedup_meta_exchange(struct mp_layer *L, const struct mp_dedup_meta *send, void *dsend,
                           long n, const int *scount, const int *sdispl, struct mp_dedup_meta *recv,
                           const int *rcount, const int *rdispl, long at, long nin)
{
    return mp_dedup_meta_exchange_on(L, MP_GROUP_EP, send, dsend, n, scount, sdispl, recv, rcount,
                                     rdispl, at, nin);
}

/* The most first-hop rows node mode relays through one EP rank: each source on another node sends
 * a token at most once to its relay on the rank's node, so the rank relays at most max_tok_rank
 * tokens from each source whose relay it is. mp_dedup_relay sends source e (index i_e among the
 * ranks of its node) to the (i_e mod c_n)-th of the c_n ranks of node n, so the rank of index j
 * there relays for ⌊(c_m − 1 − j) / c_n⌋ + 1 of a node m's c_m ranks (none when j ≥ c_m); index
 * 0 relays the most, Σ over the other nodes of ⌊(c_m − 1) / c_n⌋ + 1. O(ep + nodes²); −1 out of
 * memory. */
static long relay_bound(const struct mp_layer *L)
{
    int ep = L->ep, world = L->comm->size, nodes = 0;
    int *ranks = calloc((size_t)world, sizeof *ranks); /* node indices lie below the world's size */
    long most = 0;
    if (!ranks)
        return -1;
    for (int q = 0; q < ep; q++) {
        int n = L->comm->node_of[q * L->tp];
        nodes = n + 1 > nodes ? n + 1 : nodes;
        ranks[n]++;
    }
    for (int n = 0; n < nodes; n++) {
        long sources = 0;
        for (int m = 0; m < nodes && ranks[n] > 0; m++)
            if (m != n && ranks[m] > 0)
                sources += (ranks[m] - 1) / ranks[n] + 1;
        most = sources > most ? sources : most;
    }
    free(ranks);
    return most * L->max_tok_rank;
}

/* The host plan, sized for the placement, this layout's tokens and the routed-row buffers; node
 * mode also its relay buffers and the node of every EP rank: the launcher's host of its first TP
 * rank (core/layer/dedup.h's mp_dedup_node_of), the same for every TP rank, so the TP ranks of an EP
 * rank build one plan and their TP reduce sums matching rows. */
static int dedup_setup(struct mp_layer *L, const struct mp_point *pt, long tokens_per_rank)
{
    (void)tokens_per_rank;
    struct mp_dedup_plan *p = &L->dedup;
    struct mp_comm *c = L->comm;
    long relayed = 0;
    int rc = MP_OK;
    if (pt->dedup == MP_DEDUP_NODE && (relayed = relay_bound(L)) < 0) {
        mp_error("out of memory for the --dedup node relay bound");
        return MP_ERR_RUNTIME;
    }
    if (!p->send_rows || p->max_local != pt->placement->max_local || p->max_tok < L->max_tok_rank ||
        p->max_exp < L->max_rows || p->max_recv < L->max_rows + relayed) {
        mp_dedup_plan_free(p);
        if (mp_dedup_plan_alloc(p, L->ep, pt->placement->max_local, L->m.topk, L->max_tok_rank,
                                L->max_rows, relayed) != MP_OK) {
            mp_error("out of memory for the --dedup plan of %ld rows", L->max_rows);
            return MP_ERR_RUNTIME;
        }
    }
    for (int q = 0; q < L->ep; q++)
        p->ep_node[q] = c->node_of[q * L->tp];
    long intra = pt->dedup == MP_DEDUP_NODE ? p->max_send + p->max_fwd : 0;
    if (pt->dedup == MP_DEDUP_NODE)
        MP_CHECK(node_buffers(L, p->max_recv, p->max_fwd, intra));
    /* the intra-node phase's metadata goes out of dedup_meta_fwd */
    MP_CHECK(mp_dedup_meta_buffers(L, p->max_send, intra > p->max_fwd ? intra : p->max_fwd,
                                   p->max_recv));
out:
    return rc;
}

int mp_dedup_intra_moves(struct mp_layer *L, void *dbuf, const int *ddispl, const int *drows,
                         void *fbuf, const int *fdispl, const int *frows, const int *in_displ,
                         int back)
{
    struct mp_chunk *direct = L->dedup_moves, *fwd = L->dedup_moves + L->ep;
    int n = 0, rc = MP_OK;
    for (int q = 0; q < L->ep; q++) {
        if (!drows[q] && !frows[q])
            continue;
        long at = in_displ[q];
        direct[n] = (struct mp_chunk){.src = ddispl[q], .dst = at, .n = drows[q]};
        fwd[n] = (struct mp_chunk){.src = fdispl[q], .dst = at + drows[q], .n = frows[q]};
        if (back) { /* the same moves the other way */
            direct[n] = (struct mp_chunk){.src = direct[n].dst, .dst = direct[n].src,
                                          .n = direct[n].n};
            fwd[n] = (struct mp_chunk){.src = fwd[n].dst, .dst = fwd[n].src, .n = fwd[n].n};
        }
        n++;
    }
    const struct mp_compute_ops *o = L->ops;
    int H = L->m.hidden;
    if (!back) {
        MP_CHECK(o->copy_rows(L->dev, dbuf, L->dedup_intra, direct, n, H));
        MP_CHECK(o->copy_rows(L->dev, fbuf, L->dedup_intra, fwd, n, H));
    } else {
        MP_CHECK(o->copy_rows(L->dev, L->dedup_intra, dbuf, direct, n, H));
        MP_CHECK(o->copy_rows(L->dev, L->dedup_intra, fbuf, fwd, n, H));
    }
out:
    return rc;
}

int mp_dedup_intra_buffers(struct mp_layer *L, long rows)
{
    int rc = MP_OK;
    long grow = rows > L->dedup_intra_rows ? rows : 0;
    /* collective: every rank asks, growing or not */
    MP_CHECK(mp_layer_memory_refusal(L->comm, L->ops, L->dev, L->max_memory,
                                     (double)grow * (double)L->row_bytes,
                                     "the --dedup node intra-node phase's buffer"));
    if (grow) {
        L->ops->free(L->dev, L->dedup_intra);
        L->dedup_intra_rows = 0;
        if (!(L->dedup_intra = mp_layer_alloc_zero(L, (size_t)rows * L->m.hidden))) {
            mp_error("out of memory for the --dedup node intra-node phase's buffer");
            return MP_ERR_RUNTIME;
        }
        L->dedup_intra_rows = rows;
    }
    if (!L->dedup_moves && !(L->dedup_moves = calloc((size_t)2 * L->ep, sizeof *L->dedup_moves))) {
        mp_error("out of memory for the --dedup node row moves");
        return MP_ERR_RUNTIME;
    }
out:
    return rc;
}

/* --dedup node's dispatch after its inter-node count exchange: the rows and metadata to the
 * relays (inter-node phase), the forwards of what came in, then the intra-node phase with its
 * counts first; rbuf receives, fbuf holds the forwards. */
static int node_dispatch(struct mp_layer *L, struct mp_dedup_plan *p, void *rbuf, void *fbuf)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    int H = L->m.hidden, K = L->m.topk, rc = MP_OK;
    MP_CHECK(o->mark(dev, MARK_HOP0_BEGIN));
    MP_CHECK(mp_layer_dispatch_rows_on(L, MP_GROUP_EP_INTER, L->sendbuf, p->x_rows,
                                       p->send_displ, rbuf, p->recv_rows, p->recv_displ));
    MP_CHECK(mp_dedup_meta_exchange_on(L, MP_GROUP_EP_INTER, p->send_meta,
                                       L->dedup_meta_send, p->nsend, p->x_rows, p->send_displ,
                                       p->recv_meta, p->recv_rows, p->recv_displ, 0,
                                       p->nrecv));
    MP_CHECK(o->mark(dev, MARK_HOP0_END));
    MP_CHECK(mp_dedup_plan_forward(p, c->ep_rank));
    mp_dedup_plan_intra_counts(p, c->ep_rank);
    MP_CHECK(mp_comm_alltoall_int_on(c, MP_GROUP_EP_INTRA, p->in_cnt, p->in_rcnt, 2));
    MP_CHECK(mp_dedup_plan_intra(p, c->ep_rank));
    MP_CHECK(o->permute(dev, rbuf, p->fwd_src, 0, p->nfwd, H, fbuf));
    if (L->dispatch_dtype == MP_DTYPE_FP8) /* the relay rows' packing overwrote them */
        MP_CHECK(o->permute(dev, L->x, p->send_tok, 0, p->nsend, H, L->sendbuf));
    MP_CHECK(mp_dedup_intra_moves(L, L->sendbuf, p->send_displ, p->d_rows, fbuf,
                                   p->fwd_displ, p->fwd_rows, p->in_displ, 0));
    MP_CHECK(mp_layer_dispatch_rows_on(L, MP_GROUP_EP_INTRA, L->dedup_intra, p->in_rows,
                                       p->in_displ,
                                       (char *)rbuf + (size_t)p->nrecv * L->row_bytes,
                                       p->in_rrows, p->in_rdispl));
    MP_CHECK(mp_dedup_meta_exchange_on(L, MP_GROUP_EP_INTRA, p->in_meta, L->dedup_meta_fwd,
                                       p->nin_send, p->in_rows, p->in_displ,
                                       p->recv_meta + (size_t)p->nrecv * K, p->in_rrows,
                                       p->in_rdispl, 0, p->nrecv1));
    MP_CHECK(o->mark(dev, MARK_HOP1_END));
out:
    return rc;
}

int mp_dedup_node_combine(struct mp_layer *L, const struct mp_node_rows *n)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    int rc = MP_OK;
    MP_CHECK(o->mark(dev, MARK_BACK1_BEGIN));
    MP_CHECK(mp_comm_alltoallv_on(c, MP_GROUP_EP_INTRA,
                                  (char *)n->recv + (size_t)n->relayed * L->row_bytes,
                                  n->in_rrows, n->in_rdispl, L->dedup_intra, n->in_rows,
                                  n->in_displ, L->row_bytes));
    MP_CHECK(mp_dedup_intra_moves(L, n->send, n->send_displ, n->d_rows, n->fwd, n->fwd_displ,
                                  n->fwd_rows, n->in_displ, 1));
    MP_CHECK(o->combine(dev, n->fwd, n->fwd_src, n->fwd_w, 0, n->nfwd, NULL, 0, n->relayed,
                        L->m.hidden, n->recv, 1));
    MP_CHECK(o->mark(dev, MARK_BACK1_END));
    MP_CHECK(mp_comm_alltoallv_on(c, MP_GROUP_EP_INTER, n->recv, n->x_rrows, n->x_rdispl, n->send,
                                  n->x_rows, n->send_displ, L->row_bytes));
    MP_CHECK(o->mark(dev, MARK_BACK0_END));
out:
    return rc;
}

/* One layer forward on this rank with routing draw `d`; phase durations and counts into *rec.
 * Node mode runs two phases, each with its count exchange, on the EP group's node groups
 * (mp_comm_node_groups; the whole EP group when the nodes hold different numbers of EP ranks):
 * inter-node, the rows to the relays on other nodes; intra-node, the direct rows to the ranks of
 * this node with the forwards of what came in. The combine returns the intra-node phase first. */
static int dedup_iterate(struct mp_layer *L, const struct mp_point *pt,
                         struct mp_routing_pool *pool, int d, long ntok,
                         struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    struct mp_dedup_plan *p = &L->dedup;
    int H = L->m.hidden, K = L->m.topk;
    int node = pt->dedup == MP_DEDUP_NODE;
    /* rank mode: received rows in the routed-row buffer; node: in its own, forwards beside */
    void *rbuf = node ? L->dedup_recv : L->recvbuf, *fbuf = L->dedup_fwd;
    int rc = MP_OK;
    long tok0;
    mp_token_split(pt->batch * pt->seq, L->ep, c->ep_rank, &tok0);

    /* route: the gate's or the pool's top-K on the host, and the rows each rank gets from it */
    MP_CHECK(mp_layer_start_aligned(L));
    MP_RANGE_PUSH("moeperf/route");
    const int32_t *ids;
    const float *w;
    MP_CHECK(mp_dedup_route(L, pt, pool, d, ntok, &ids, &w));
    mp_dedup_plan_send(p, pt->placement, c->ep_rank, tok0, ntok, ids, w,
                       node ? p->ep_node : NULL);
    if (node)
        mp_dedup_plan_inter(p, c->ep_rank);
    MP_CHECK(o->mark(dev, MARK_ROUTE));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/dispatch");

    /* notify: the count exchange (node: the inter-node phase's); dispatch: permute, rows and
     * metadata all-to-all (node: the inter-node phase, then the intra-node phase the same way,
     * its counts first), expand by expert */
    if (node)
        MP_CHECK(mp_comm_alltoall_int_on(c, MP_GROUP_EP_INTER, p->x_rows, p->recv_rows, 1));
    else
        MP_CHECK(c->ops->alltoall_int(c, p->send_rows, p->recv_rows, 1));
    MP_CHECK(o->mark(dev, MARK_NOTIFY)); /* node's second count exchange stays in the dispatch */
    MP_CHECK(mp_dedup_plan_recv(p));
    if (!node)
        MP_CHECK(mp_layer_check_rows(L, p->nrecv));
    MP_CHECK(o->permute(dev, L->x, p->send_tok, 0, p->nsend, H, L->sendbuf));
    if (!node) {
        MP_CHECK(mp_layer_dispatch_rows(L, L->sendbuf, p->send_rows, p->send_displ, rbuf,
                                        p->recv_rows, p->recv_displ));
        MP_CHECK(mp_dedup_meta_exchange(L, p->send_meta, L->dedup_meta_send, p->nsend,
                                        p->send_rows, p->send_displ, p->recv_meta, p->recv_rows,
                                        p->recv_displ, 0, p->nrecv));
    } else {
        MP_CHECK(node_dispatch(L, p, rbuf, fbuf));
    }
    MP_CHECK(mp_dedup_plan_expand(p, node ? c->ep_rank : -1, L->nlocal));
    MP_CHECK(mp_layer_check_rows(L, p->nexp));
    MP_CHECK(o->permute(dev, rbuf, p->exp_row, 0, p->nexp, H, L->expbuf));
    MP_CHECK(o->mark(dev, MARK_DISPATCH));
    MP_RANGE_POP();
    MP_CHECK(mp_layer_ffn_reduce(L, pt, p->expert_off, p->nexp, ntok));
    MP_RANGE_PUSH("moeperf/combine");

    /* combine: each received row's expert outputs summed with their weights, all-to-all back
     * (node: the intra-node phase first, its direct rows back into their places and the forwards'
     * sums added to the rows they came from, then the inter-node phase), the returned rows
     * (weight 1) and the shared experts summed into token order */
    long nin = p->nrecv + (node ? p->nrecv1 : 0);
    MP_CHECK(o->combine(dev, L->outbuf, p->exp_row, p->exp_w, 0, p->nexp, NULL, 0, nin, H, rbuf,
                        0));
    if (node) {
        struct mp_node_rows nr = {
            .recv = rbuf, .relayed = p->nrecv, .send = L->sendbuf, .send_displ = p->send_displ,
            .x_rows = p->x_rows, .x_rrows = p->recv_rows, .x_rdispl = p->recv_displ,
            .d_rows = p->d_rows, .fwd = fbuf, .fwd_rows = p->fwd_rows, .fwd_displ = p->fwd_displ,
            .fwd_src = p->fwd_src, .fwd_w = p->ones, .nfwd = p->nfwd, .in_rows = p->in_rows,
            .in_displ = p->in_displ, .in_rrows = p->in_rrows, .in_rdispl = p->in_rdispl};
        MP_CHECK(mp_dedup_node_combine(L, &nr));
    } else {
        MP_CHECK(c->ops->alltoallv(c, rbuf, p->recv_rows, p->recv_displ, L->sendbuf, p->send_rows,
                                   p->send_displ, L->row_bytes));
    }
    MP_CHECK(o->combine(dev, L->sendbuf, p->send_tok, p->ones, 0, p->nsend,
                        L->S ? (char *)L->outbuf + (size_t)p->nexp * L->row_bytes : NULL, L->S,
                        ntok, H, L->y, 0));
    MP_CHECK(o->mark(dev, MARK_COMBINE));
    MP_RANGE_POP();
    MP_CHECK(mp_layer_drain(L));

    mp_layer_phase_times(L, rec, 1);
    mp_layer_dedup_record(L, rec, node, ntok, K, p->nexp, p->local_pairs);
    double meta = mp_dedup_meta_bytes((enum mp_dedup)pt->dedup, K);
    if (!node) {
        mp_layer_add_peer_bytes(L, p->send_rows, p->recv_rows, meta, rec);
    } else { /* both phases' rows, by the same rule: to relays, direct, forwards */
        mp_layer_add_peer_bytes(L, p->x_rows, p->recv_rows, meta, rec);
        mp_layer_add_peer_bytes(L, p->d_rows, p->d_rrows, meta, rec);
        mp_layer_add_peer_bytes(L, p->fwd_rows, p->recv1_rows, meta, rec);
    }
    rec->dropped = 0;
out:
    return rc;
}

static void dedup_teardown(struct mp_layer *L)
{
    mp_dedup_plan_free(&L->dedup);
    L->ops->free(L->dev, L->dedup_recv);
    L->ops->free(L->dev, L->dedup_fwd);
    L->ops->free(L->dev, L->dedup_intra);
    free(L->dedup_moves);
    L->dedup_recv = L->dedup_fwd = L->dedup_intra = NULL;
    L->dedup_moves = NULL;
    L->dedup_recv_rows = L->dedup_fwd_rows = L->dedup_intra_rows = 0;
    L->ops->free(L->dev, L->dedup_meta_send);
    L->ops->free(L->dev, L->dedup_meta_fwd);
    L->ops->free(L->dev, L->dedup_meta_recv);
    L->dedup_meta_send = L->dedup_meta_fwd = L->dedup_meta_recv = NULL;
    L->dedup_meta_send_rows = L->dedup_meta_fwd_rows = L->dedup_meta_recv_rows = 0;
}

const struct mp_dispatch_mode mp_dispatch_dedup = {
    .name = "dedup",
    .backend_bit = MP_DISPATCH_DEDUP,
    .dedup_modes = 1u << MP_DEDUP_RANK | 1u << MP_DEDUP_NODE,
    .reserve = dedup_reserve,
    .setup = dedup_setup,
    .iterate = dedup_iterate,
    .teardown = dedup_teardown,
    .model_traffic = mp_vtraffic_dynamic,
};
