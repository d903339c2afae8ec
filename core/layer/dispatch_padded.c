/* dispatch_padded.c - the padded dispatch mode: every rank sends every peer fixed slots of
 * mp_padded_capacity() rows per local expert (kernels/padded.h), so no count exchange precedes the
 * data and the layer can be captured as a graph (--graph) and replayed. */
#include <stdio.h>
#include <stdlib.h>

#include "dispatch.h"
#include "error.h"
#include "layer_internal.h"
#include "vlayer.h"
#include "nvtx.h"
#include "padded.h"

/* padded:F, the capacity factor 0 < F ≤ 1024. */
static int padded_parse_arg(const char *word, const char *arg, double *factor)
{
    char *end = NULL;
    double f = strtod(arg, &end);
    if (end == arg || *end || !(f > 0) || f > 1024) {
        mp_usage("--dispatch: '%s' is not padded:F with a capacity factor 0 < F <= 1024", word);
        return MP_ERR_USAGE;
    }
    *factor = f;
    return MP_OK;
}

/* The padded dispatch's backend buffers. */
static void free_pad_buffers(struct mp_layer *L)
{
    const struct mp_compute_ops *o = L->ops;
    o->free(L->dev, L->pad_send);
    o->free(L->dev, L->pad_recv);
    o->free(L->dev, L->pad_exp);
    o->free(L->dev, L->pad_out);
    o->free(L->dev, L->pad_work);
    L->pad_send = L->pad_recv = L->pad_exp = L->pad_out = L->pad_work = NULL;
    L->pad_rows = 0;
}

static void padded_teardown(struct mp_layer *L)
{
    free_pad_buffers(L);
    free(L->pad_cnt_recv);
    L->pad_cnt_recv = NULL;
    mp_padded_free(&L->pad);
}

/* Grow the slot buffers to `rows` rows after a collective memory check (the FFN's scratch holds
 * every expert's rows at once: grouped and skinny GEMMs). */
static int grow_pad_buffers(struct mp_layer *L, long rows, int max_local, long cap)
{
    const struct mp_compute_ops *o = L->ops;
    long tok = L->max_tok_rank; /* the shared experts' rows of a rank's own tokens */
    size_t H = (size_t)L->m.hidden, wrows = (size_t)(rows > tok ? rows : tok);
    double need = ((double)rows * 4 + (double)L->S * tok) * H * o->elem_size +
                  (double)wrows * 2 * L->Dl * o->elem_size;
    free_pad_buffers(L);
    char what[160];
    snprintf(what, sizeof what, "--dispatch padded with %d ranks × %d experts × %ld rows per "
             "slot", L->ep, max_local, cap);
    int rc = mp_layer_memory_refusal(L->comm, o, L->dev, L->max_memory, need, what);
    if (rc != MP_OK)
        return rc;
    L->pad_send = mp_layer_alloc_zero(L, (size_t)rows * H);
    L->pad_recv = mp_layer_alloc_zero(L, (size_t)rows * H);
    L->pad_exp = mp_layer_alloc_zero(L, (size_t)rows * H);
    L->pad_out = mp_layer_alloc_zero(L, ((size_t)rows + (size_t)L->S * tok) * H);
    L->pad_work = o->alloc(L->dev, wrows * 2 * (size_t)L->Dl);
    if (!L->pad_send || !L->pad_recv || !L->pad_exp || !L->pad_out || !L->pad_work) {
        mp_error("out of memory for the padded dispatch: %.3g GB per rank (%d ranks × %d "
                 "experts × %ld rows per slot)", need / 1e9, L->ep, max_local, cap);
        return MP_ERR_RUNTIME;
    }
    L->pad_rows = rows;
    return MP_OK;
}

/* Size the padded dispatch for a point: slots of `cap` rows for up to `max_local` experts per peer;
 * buffers only grow, so a sweep allocates once per larger point and never inside timed loops. */
static int size_padded(struct mp_layer *L, int max_local, long cap)
{
    int ep = L->ep;
    long rows = (long)ep * max_local * cap;
    if (L->pad.src_tok && L->pad.max_local == max_local && L->pad.cap == cap)
        return MP_OK;
    if (rows > 2147483647L) {
        mp_usage("--dispatch padded: %d ranks × %d experts × %ld rows per slot exceed the 2^31 rows "
                 "an MPI count holds; use a capacity factor (padded:1.25) or --dispatch dynamic",
                 ep, max_local, cap);
        return MP_ERR_USAGE;
    }
    mp_padded_free(&L->pad);
    free(L->pad_cnt_recv);
    L->pad_cnt_recv = calloc((size_t)ep * max_local, sizeof(int));
    if (!L->pad_cnt_recv || mp_padded_alloc(&L->pad, ep, max_local, cap) != MP_OK) {
        mp_error("out of memory for the padded dispatch plan");
        padded_teardown(L);
        return MP_ERR_RUNTIME;
    }
    int rc = rows > L->pad_rows ? grow_pad_buffers(L, rows, max_local, cap) : MP_OK;
    if (rc != MP_OK)
        padded_teardown(L);
    return rc;
}

/* Slots for the most experts any rank holds, of the capacity of the point's tokens per rank. */
static int padded_setup(struct mp_layer *L, const struct mp_point *pt, long tokens_per_rank)
{
    int max_local = 1;
    for (int e = 0; e < L->ep; e++)
        if (mp_placement_nlocal(pt->placement, e) > max_local)
            max_local = mp_placement_nlocal(pt->placement, e);
    long cap = mp_padded_capacity(tokens_per_rank, L->m.topk, L->m.experts, pt->dispatch_arg, 1);
    int rc = size_padded(L, max_local, cap);
    if (rc == MP_OK)
        mp_padded_recv(&L->pad, L->nlocal);
    return rc;
}

static int padded_plan(struct mp_layer *L, const struct mp_point *pt, long tok0, long ntok)
{
    return mp_layer_plan_setup(L, pt, tok0, ntok, L->pad.max_local, 1, L->pad.cap);
}

/* The padded layer's device part, from the slot layout the backend's plan holds to the combined
 * output (marks DISPATCH to COMBINE). Fills nothing in a record. */
static int padded_device(struct mp_layer *L, const struct mp_point *pt, long ntok)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    struct mp_padded *pd = &L->pad;
    int H = L->m.hidden;
    int rc = MP_OK;

    MP_RANGE_PUSH("moeperf/dispatch");

    /* dispatch: gather every slot row (padding too), fixed-size all-to-all, regroup by expert */
    MP_CHECK(o->permute(dev, L->x, NULL, 0, pd->rows, H, L->pad_send));
    MP_CHECK(mp_layer_dispatch_rows(L, L->pad_send, pd->peer_rows, pd->peer_displ, L->pad_recv,
                                    pd->peer_rows, pd->peer_displ));
    MP_CHECK(o->copy_rows(dev, L->pad_recv, L->pad_exp, pd->to_expert, pd->nchunks, H));
    MP_CHECK(o->mark(dev, MARK_DISPATCH));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/ffn");

    long slot_rows = pd->expert_off[pd->max_local]; /* nlocal·ep·cap */
    MP_CHECK(mp_layer_ffn(L, pt, L->pad_exp, L->pad_out, pd->expert_off, L->pad_work, slot_rows,
                          ntok, L->S, NULL, NULL));
    MP_CHECK(o->mark(dev, MARK_FFN));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/tp-reduce");
    if (L->tp > 1)
        MP_CHECK(c->ops->allreduce_sum(c, L->pad_out, ((size_t)slot_rows + (size_t)L->S * ntok) * H));
    MP_CHECK(o->mark(dev, MARK_TP));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/combine");

    /* combine: slots back to source order, fixed-size all-to-all back, weighted sum (padding and
     * dropped rows have weight 0 or no row at all) */
    MP_CHECK(o->copy_rows(dev, L->pad_out, L->pad_recv, pd->to_source, pd->nchunks, H));
    MP_CHECK(c->ops->alltoallv(c, L->pad_recv, pd->peer_rows, pd->peer_displ, L->pad_send,
                               pd->peer_rows, pd->peer_displ, L->row_bytes));
    MP_CHECK(o->combine(dev, L->pad_send, NULL, NULL, 0, pd->rows,
                        L->S ? (char *)L->pad_out + (size_t)slot_rows * L->row_bytes : NULL, L->S,
                        ntok, H, L->y, 0));
    MP_CHECK(o->mark(dev, MARK_COMBINE));
    MP_RANGE_POP();
out:
    return rc;
}

/* --graph: capture this point's padded layer once, after an untimed iteration has grown every
 * scratch buffer, from the routing on (gate or the handed-over draw, then the sort by cell); later
 * iterations copy their draw's routing inputs into page-locked arrays before replaying it.
 * Collective (every rank's collectives are captured together). */
static int padded_capture(struct mp_layer *L, const struct mp_point *pt,
                          struct mp_routing_pool *pool, long ntok)
{
    const struct mp_compute_ops *o = L->ops;
    int rc;
    if ((rc = mp_layer_pin_routing(L, pool, 0, ntok)) != MP_OK ||
        (rc = mp_layer_drain(L)) != MP_OK || (rc = o->capture_begin(L->dev)) != MP_OK)
        return rc;
    rc = mp_layer_route(L, pool, 0, ntok, 1, 0);
    if (rc == MP_OK)
        rc = o->mark(L->dev, MARK_ROUTE);
    if (rc == MP_OK)
        rc = padded_device(L, pt, ntok);
    int end = o->capture_end(L->dev); /* always leave the capture, even after a failure */
    if (rc == MP_OK)
        rc = end;
    L->captured = rc == MP_OK;
    return rc;
}

/* One layer forward with the padded dispatch: the same phases as the dynamic one, but the
 * backend's plan lays the send side out in fixed slots (kernels/padded.h) and the all-to-alls move
 * whole slots, so no count exchange precedes the data; every slot row is computed. The valid
 * counts travel after the timed phases, for the metrics. */
static int padded_iterate(struct mp_layer *L, const struct mp_point *pt,
                          struct mp_routing_pool *pool, int d, long ntok,
                          struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    struct mp_padded *pd = &L->pad;
    int me = c->ep_rank;
    int rc = MP_OK;

    MP_CHECK(mp_layer_start_aligned(L));
    MP_RANGE_PUSH("moeperf/route");
    if (L->captured) { /* the replay routes too, from the page-locked draw */
        MP_CHECK(mp_layer_pin_routing(L, pool, d, ntok));
        MP_RANGE_POP();
        MP_CHECK(o->replay(dev));
    } else { /* the backend lays out the slots: no host sync before the data moves */
        MP_CHECK(mp_layer_route(L, pool, d, ntok, 0, 0));
        MP_CHECK(o->mark(dev, MARK_ROUTE));
        MP_RANGE_POP();
        MP_CHECK(padded_device(L, pt, ntok));
    }
    MP_CHECK(mp_layer_drain(L));
    mp_padded_from_counts(pd, L->dplan_totals, me); /* the pairs per slot came with the drain */

    mp_layer_phase_times(L, rec, 0); /* no count exchange: notify 0 */

    /* untimed: the valid rows each slot carried, for load_imbalance and rows */
    MP_CHECK(c->ops->alltoall_int(c, pd->kept, L->pad_cnt_recv, pd->max_local));
    double valid = 0;
    for (int i = 0; i < L->ep * pd->max_local; i++)
        valid += L->pad_cnt_recv[i];
    rec->tokens = (double)ntok;
    rec->rows = valid;
    rec->ffn_rows = (double)pd->expert_off[pd->max_local] + (double)L->S * ntok;
    rec->pairs = (double)ntok * L->m.topk;
    rec->local_pairs = (double)pd->local_pairs;
    rec->dropped = (double)pd->dropped;
    rec->bytes_sent = rec->dispatch_intra = rec->dispatch_inter = 0; /* slots out and back */
    rec->combine_intra = rec->combine_inter = 0;
    mp_layer_add_peer_bytes(L, pd->peer_rows, pd->peer_rows, 0, rec);
out:
    return rc;
}

/* --check: the padded dispatch dropped the pairs over capacity, so does the reference. */
static int padded_check_routing(const struct mp_layer *L, const struct mp_point *pt, long ntok,
                                int K, int32_t *ids, float *w)
{
    return mp_padded_drop(pt->placement, L->ep, ntok, K, ids, w, L->pad.cap) < 0 ? MP_ERR_RUNTIME
                                                                                   : MP_OK;
}

const struct mp_dispatch_mode mp_dispatch_padded = {
    .name = "padded",
    .parse_arg = padded_parse_arg,
    .backend_bit = MP_DISPATCH_PADDED,
    .setup = padded_setup,
    .plan = padded_plan,
    .iterate = padded_iterate,
    .capture = padded_capture,
    .teardown = padded_teardown,
    .check_routing = padded_check_routing,
    .deduplicated = &mp_dispatch_dedup_padded,
    .model_traffic = mp_vtraffic_padded,
};
