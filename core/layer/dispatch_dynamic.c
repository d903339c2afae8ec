/* dispatch_dynamic.c - the dynamic dispatch mode: exact counts exchanged first, then exactly the
 * routed rows move (route | notify: count exchange | permute, all-to-all | FFN | TP reduce |
 * combine). */
#include <string.h>

#include "dispatch.h"
#include "error.h"
#include "layer_internal.h"
#include "vlayer.h"
#include "nvtx.h"

/* The routed-row buffers, grown to what this rank can receive with the point's placement. */
static int dynamic_reserve(struct mp_layer *L, const struct mp_point *pt, long total)
{
    return mp_layer_size_rows(L, total, mp_placement_nlocal(pt->placement, L->comm->ep_rank));
}

static int dynamic_plan(struct mp_layer *L, const struct mp_point *pt, long tok0, long ntok)
{
    return mp_layer_plan_setup(L, pt, tok0, ntok, L->plan.max_local, 1, 0);
}

/* One layer forward on this rank with routing draw `d`; phase durations and counts into *rec. */
static int dynamic_iterate(struct mp_layer *L, const struct mp_point *pt,
                           struct mp_routing_pool *pool, int d, long ntok,
                           struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    struct mp_plan *pl = &L->plan;
    int H = L->m.hidden;
    int rc = MP_OK;

    /* route: the gate or the pooled draw up to the backend's plan, its counts in L->plan */
    MP_CHECK(mp_layer_start_aligned(L));
    MP_RANGE_PUSH("moeperf/route");
    MP_CHECK(mp_layer_route(L, pool, d, ntok, 0, 1));
    size_t cells = (size_t)L->ep * pl->max_local;
    memcpy(pl->send_cnt, L->dplan_totals, cells * sizeof *pl->send_cnt);
    mp_plan_from_counts(pl, c->ep_rank, ntok);
    MP_CHECK(o->mark(dev, MARK_ROUTE));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/notify");

    /* notify: the count exchange, then the receive side of the plan */
    MP_CHECK(c->ops->alltoall_int(c, pl->send_cnt, pl->recv_cnt, pl->max_local));
    mp_plan_recv(pl, L->nlocal);
    MP_CHECK(mp_layer_check_rows(L, pl->nrecv));
    MP_CHECK(o->mark(dev, MARK_NOTIFY));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/dispatch");

    /* dispatch: permute, all-to-all, regroup by expert */
    MP_CHECK(o->permute(dev, L->x, NULL, 0, pl->nsend, H, L->sendbuf));
    MP_CHECK(mp_layer_dispatch_rows(L, L->sendbuf, pl->send_rows, pl->send_displ, L->recvbuf,
                                    pl->recv_rows, pl->recv_displ));
    MP_CHECK(o->copy_rows(dev, L->recvbuf, L->expbuf, pl->to_expert, pl->nchunks, H));
    MP_CHECK(o->mark(dev, MARK_DISPATCH));
    MP_RANGE_POP();
    MP_CHECK(mp_layer_ffn_reduce(L, pt, pl->expert_off, pl->nrecv, ntok));
    MP_RANGE_PUSH("moeperf/combine");

    /* combine: back to source order, all-to-all back, weighted sum into token order */
    MP_CHECK(o->copy_rows(dev, L->outbuf, L->recvbuf, pl->to_source, pl->nchunks, H));
    MP_CHECK(c->ops->alltoallv(c, L->recvbuf, pl->recv_rows, pl->recv_displ, L->sendbuf,
                               pl->send_rows, pl->send_displ, L->row_bytes));
    MP_CHECK(o->combine(dev, L->sendbuf, NULL, NULL, 0, pl->nsend,
                        L->S ? (char *)L->outbuf + (size_t)pl->nrecv * L->row_bytes : NULL, L->S,
                        ntok, H, L->y, 0));
    MP_CHECK(o->mark(dev, MARK_COMBINE));
    MP_RANGE_POP();
    MP_CHECK(mp_layer_drain(L));

    mp_layer_phase_times(L, rec, 1);
    rec->tokens = (double)ntok;
    rec->rows = (double)pl->nrecv;
    rec->ffn_rows = (double)pl->nrecv + (double)L->S * ntok;
    rec->pairs = (double)pl->nsend;
    rec->local_pairs = (double)pl->local_pairs;
    rec->bytes_sent = rec->dispatch_intra = rec->dispatch_inter = 0;
    rec->combine_intra = rec->combine_inter = 0;
    mp_layer_add_peer_bytes(L, pl->send_rows, pl->recv_rows, 0, rec);
    rec->dropped = 0;
out:
    return rc;
}

const struct mp_dispatch_mode mp_dispatch_dynamic = {
    .name = "dynamic",
    .backend_bit = MP_DISPATCH_DYNAMIC,
    .pipelined = &mp_dispatch_pipelined,
    .deduplicated = &mp_dispatch_dedup,
    .reserve = dynamic_reserve,
    .plan = dynamic_plan,
    .iterate = dynamic_iterate,
    .model_traffic = mp_vtraffic_dynamic,
};
