/* layer_steps.c - the steps every dispatch mode's iteration shares: the ranks' aligned start, the
 * expert FFN phase, the phase times from the backend's marks, the dispatch plan's cell layout and
 * the bytes exchanged with peers. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "layer_internal.h"
#include "nvtx.h"

int mp_layer_drain(struct mp_layer *L)
{
    return L->comm->ops->drain ? L->comm->ops->drain(L->comm) : L->ops->sync(L->dev);
}

/* Test hook: MOEPERF_START_DELAY=RANK:US makes world rank RANK wait US µs before every
 * iteration's start barrier, as a rank that arrives late (0: none). Read once per process, by
 * whichever of its ranks comes first (the model's traced ranks are threads of one process). */
static int delay_rank = -1;
static double delay_us;
static pthread_once_t delay_read = PTHREAD_ONCE_INIT;

static void read_start_delay(void)
{
    const char *v = getenv("MOEPERF_START_DELAY");
    if (v && sscanf(v, "%d:%lf", &delay_rank, &delay_us) != 2)
        delay_rank = -1;
}

static double start_delay_us(const struct mp_comm *c)
{
    pthread_once(&delay_read, read_start_delay);
    return c->rank == delay_rank && delay_us > 0 ? delay_us : 0;
}

int mp_layer_start_aligned(struct mp_layer *L)
{
    int rc = MP_OK;
    struct mp_comm *c = L->comm;
    MP_CHECK(mp_layer_drain(L));
    MP_CHECK(mp_compute_delay(L->ops, L->dev, start_delay_us(c)));
    MP_CHECK(L->ops->mark(L->dev, MARK_ALIGN));
    MP_CHECK(c->ops->barrier(c));
    if (c->ops->align)
        MP_CHECK(c->ops->align(c));
    MP_CHECK(L->ops->mark(L->dev, MARK_START));
out:
    return rc;
}

void mp_layer_phase_times(struct mp_layer *L, struct mp_rank_iter *rec, int notified)
{
    const struct mp_compute_ops *o = L->ops;
    rec->route = o->elapsed_us(L->dev, MARK_START, MARK_ROUTE);
    rec->notify = notified ? o->elapsed_us(L->dev, MARK_ROUTE, MARK_NOTIFY) : 0;
    rec->dispatch = o->elapsed_us(L->dev, notified ? MARK_NOTIFY : MARK_ROUTE, MARK_DISPATCH);
    rec->ffn = o->elapsed_us(L->dev, MARK_DISPATCH, MARK_FFN);
    rec->tp_reduce = o->elapsed_us(L->dev, MARK_FFN, MARK_TP);
    rec->combine = o->elapsed_us(L->dev, MARK_TP, MARK_COMBINE);
    rec->start_skew = o->elapsed_us(L->dev, MARK_ALIGN, MARK_START);
    rec->dispatch_inter_us = rec->dispatch_intra_us = NAN; /* --dedup node sets them after */
    rec->combine_inter_us = rec->combine_intra_us = NAN;
}

void mp_layer_dedup_record(struct mp_layer *L, struct mp_rank_iter *rec, int node, long ntok,
                           int K, long nexp, long local_pairs)
{
    const struct mp_compute_ops *o = L->ops;
    if (node) { /* the phases apart (docs/METRICS.md, "Hop times") */
        rec->dispatch_inter_us = o->elapsed_us(L->dev, MARK_HOP0_BEGIN, MARK_HOP0_END);
        rec->dispatch_intra_us = o->elapsed_us(L->dev, MARK_HOP0_END, MARK_HOP1_END);
        rec->combine_intra_us = o->elapsed_us(L->dev, MARK_BACK1_BEGIN, MARK_BACK1_END);
        rec->combine_inter_us = o->elapsed_us(L->dev, MARK_BACK1_END, MARK_BACK0_END);
    }
    rec->tokens = (double)ntok;
    rec->rows = (double)nexp;
    rec->ffn_rows = (double)nexp + (double)L->S * ntok;
    rec->pairs = (double)ntok * K;
    rec->local_pairs = (double)local_pairs;
    rec->bytes_sent = rec->dispatch_intra = rec->dispatch_inter = 0;
    rec->combine_intra = rec->combine_inter = 0;
}

int mp_layer_chunk_ffn_reduce(struct mp_layer *L, const struct mp_point *pt, int k, const void *in,
                              void *out, const long *expert_off, long routed, long ntok,
                              int nshared, void (*progress)(void *), void *progress_arg)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_comm *c = L->comm;
    int rc = MP_OK;
    MP_CHECK(o->mark(L->dev, MARK_CHUNK(k, CHUNK_FFN_BEGIN)));
    MP_CHECK(mp_layer_ffn(L, pt, in, out, expert_off, L->work, routed, ntok, nshared, progress,
                          progress_arg));
    MP_CHECK(o->mark(L->dev, MARK_CHUNK(k, CHUNK_FFN_END)));
    if (L->tp > 1 && c->ops->join_exchanges)
        MP_CHECK(c->ops->join_exchanges(c));
    MP_CHECK(o->mark(L->dev, MARK_CHUNK(k, CHUNK_TP_BEGIN)));
    if (L->tp > 1)
        MP_CHECK(c->ops->allreduce_sum(c, out, ((size_t)routed + (size_t)nshared * ntok) *
                                                   (size_t)L->m.hidden));
    MP_CHECK(o->mark(L->dev, MARK_CHUNK(k, CHUNK_TP_END)));
out:
    return rc;
}

int mp_layer_ffn(struct mp_layer *L, const struct mp_point *pt, const void *in, void *out,
                 const long *row_off, void *work, long routed, long ntok, int nshared,
                 void (*progress)(void *), void *progress_arg)
{
    int rc = MP_OK;
    struct mp_ffn_args a = {.in = in, .out = out, .row_off = row_off, .nexp = L->nlocal,
                            .wgu = L->wgu, .wd = L->wd, .H = L->m.hidden, .Dl = L->Dl,
                            .work = work, .gemm = pt->gemm, .weight_dtype = L->weight_dtype,
                            .progress = progress,
                            .progress_arg = progress_arg,
                            .nshared = nshared,
                            .shared_rows = ntok,
                            .shared_in = L->x,
                            .shared_out = (char *)out + (size_t)routed * L->row_bytes};
    if (!mp_weight_cache_on(&L->wcache)) {
        MP_CHECK(mp_compute_expert_ffn(L->ops, L->dev, &a));
    } else { /* each expert with rows from its slot, fetched first on a miss, in expert order */
        for (int e = 0; e < L->nlocal; e++) {
            if (row_off[e + 1] <= row_off[e])
                continue;
            void *gu, *wd;
            int slot;
            MP_CHECK(mp_layer_cache_weights(L, e, &gu, &wd, &slot));
            struct mp_ffn_args one = a;
            one.row_off = row_off + e;
            one.nexp = 1;
            one.wgu = &gu;
            one.wd = &wd;
            one.nshared = 0;
            MP_CHECK(L->ops->expert_ffn(L->dev, &one));
            MP_CHECK(mp_layer_cache_release(L, slot));
        }
        struct mp_ffn_args sa = a; /* then the shared experts, resident */
        sa.nexp = 0;
        sa.wgu = L->wgu + L->nlocal;
        sa.wd = L->wd + L->nlocal;
        MP_CHECK(mp_compute_expert_ffn(L->ops, L->dev, &sa));
    }
    if (pt->straggle_us > 0 && L->comm->rank == pt->straggle_rank) { /* debug: a slow rank */
        MP_CHECK(L->ops->sync(L->dev)); /* the device's FFN first, then the host's delay */
        MP_CHECK(mp_compute_delay(L->ops, L->dev, pt->straggle_us));
    }
out:
    return rc;
}

int mp_layer_plan_setup(struct mp_layer *L, const struct mp_point *pt, long tok0, long ntok,
                        int max_local, int chunks, long cap)
{
    mp_route_table(pt->placement, L->comm->ep_rank, max_local, chunks, L->route_off,
                   L->route_cell);
    struct mp_dplan_shape s = {.experts = L->m.experts, .K = L->m.topk, .max_local = max_local,
                               .ncells = chunks * L->ep * max_local, .ntok = ntok, .tok0 = tok0,
                               .cap = cap, .route_off = L->route_off,
                               .route_cell = L->route_cell};
    return L->ops->plan_setup(L->dev, &s, &L->dplan_totals);
}

/* The rows [*lo, *hi) the EP peers' blocks of an exchange span (displacements in rows). */
static void rows_spanned(const int *count, const int *displ, int ep, long *lo, long *hi)
{
    *lo = ep > 0 ? displ[0] : 0;
    *hi = *lo;
    for (int p = 0; p < ep; p++) {
        *lo = displ[p] < *lo ? displ[p] : *lo;
        *hi = (long)displ[p] + count[p] > *hi ? (long)displ[p] + count[p] : *hi;
    }
}

/* An exchange of rows of row_bytes on group g, blocking (slot < 0) or started on request `slot`. */
static int exchange_on(struct mp_comm *c, enum mp_comm_group g, const void *send,
                       const int *scount, const int *sdispl, void *recv, const int *rcount,
                       const int *rdispl, size_t row_bytes, int slot)
{
    return slot < 0 ? mp_comm_alltoallv_on(c, g, send, scount, sdispl, recv, rcount, rdispl,
                                           row_bytes)
                    : mp_comm_ialltoallv_on(c, g, send, scount, sdispl, recv, rcount, rdispl,
                                            row_bytes, slot);
}

int mp_layer_dispatch_start_on(struct mp_layer *L, enum mp_comm_group g, void *send,
                               const int *scount, const int *sdispl, void *recv,
                               const int *rcount, const int *rdispl, int slot)
{
    struct mp_comm *c = L->comm;
    if (L->dispatch_dtype != MP_DTYPE_FP8)
        return exchange_on(c, g, send, scount, sdispl, recv, rcount, rdispl, L->row_bytes, slot);
    /* fp8: the packed rows start at each block's first row (the forwards of --dedup node arrive
     * after the rows of the first hop, which stay activations), displacements counted from it */
    long s0, s1, r0, r1;
    rows_spanned(scount, sdispl, L->ep, &s0, &s1);
    rows_spanned(rcount, rdispl, L->ep, &r0, &r1);
    if (slot >= 0 && (s0 || r0)) {
        mp_error("internal error: an fp8 exchange in flight must start at row 0 (rows %ld, %ld)",
                 s0, r0);
        return MP_ERR_RUNTIME;
    }
    for (int p = 0; p < L->ep; p++) {
        L->wire_sdispl[p] = sdispl[p] - (int)s0;
        L->wire_rdispl[p] = rdispl[p] - (int)r0;
    }
    char *sbase = (char *)send + (size_t)s0 * L->row_bytes;
    char *rbase = (char *)recv + (size_t)r0 * L->row_bytes;
    int rc = L->ops->fp8_pack(L->dev, sbase, s1 - s0, L->m.hidden);
    if (rc != MP_OK)
        return rc;
    /* in flight, the arrays must outlive the call: the caller's own (s0 = r0 = 0) */
    const int *sd = slot < 0 ? L->wire_sdispl : sdispl, *rd = slot < 0 ? L->wire_rdispl : rdispl;
    return exchange_on(c, g, sbase, scount, sd, rbase, rcount, rd, L->dispatch_row_bytes, slot);
}

int mp_layer_dispatch_start(struct mp_layer *L, void *send, const int *scount, const int *sdispl,
                            void *recv, const int *rcount, const int *rdispl, int slot)
{
    return mp_layer_dispatch_start_on(L, MP_GROUP_EP, send, scount, sdispl, recv, rcount, rdispl,
                                      slot);
}

int mp_layer_dispatch_finish(struct mp_layer *L, void *recv, const int *rcount, const int *rdispl)
{
    if (L->dispatch_dtype != MP_DTYPE_FP8)
        return MP_OK;
    long r0, r1;
    rows_spanned(rcount, rdispl, L->ep, &r0, &r1);
    return L->ops->fp8_unpack(L->dev, (char *)recv + (size_t)r0 * L->row_bytes, r1 - r0,
                              L->m.hidden);
}

int mp_layer_dispatch_rows_on(struct mp_layer *L, enum mp_comm_group g, void *send,
                              const int *scount, const int *sdispl, void *recv, const int *rcount,
                              const int *rdispl)
{
    int rc = mp_layer_dispatch_start_on(L, g, send, scount, sdispl, recv, rcount, rdispl, -1);
    return rc != MP_OK ? rc : mp_layer_dispatch_finish(L, recv, rcount, rdispl);
}

int mp_layer_dispatch_rows(struct mp_layer *L, void *send, const int *scount, const int *sdispl,
                           void *recv, const int *rcount, const int *rdispl)
{
    return mp_layer_dispatch_rows_on(L, MP_GROUP_EP, send, scount, sdispl, recv, rcount, rdispl);
}

void mp_layer_add_peer_bytes(const struct mp_layer *L, const int *send, const int *recv,
                             double meta_bytes, struct mp_rank_iter *rec)
{
    const struct mp_comm *c = L->comm;
    for (int p = 0; p < L->ep; p++) {
        if (p == c->ep_rank)
            continue;
        /* dispatch: rows to p with their metadata; combine: p's rows returned */
        double out = (double)send[p] * (L->count_dispatch_row_bytes + meta_bytes);
        double back = (double)recv[p] * L->count_row_bytes;
        rec->bytes_sent += out + back;
        if (c->node_of[p * L->tp + c->tp_rank] != c->node_of[c->rank]) {
            rec->dispatch_inter += out;
            rec->combine_inter += back;
        } else {
            rec->dispatch_intra += out;
            rec->combine_intra += back;
        }
    }
}

int mp_layer_ffn_reduce(struct mp_layer *L, const struct mp_point *pt, const long *expert_off,
                        long routed, long ntok)
{
    int rc = MP_OK;
    MP_RANGE_PUSH("moeperf/ffn");
    /* expert FFN: every local expert, then the shared experts on this rank's own tokens */
    MP_CHECK(mp_layer_ffn(L, pt, L->expbuf, L->outbuf, expert_off, L->work, routed, ntok, L->S,
                          NULL, NULL));
    MP_CHECK(L->ops->mark(L->dev, MARK_FFN));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/tp-reduce");
    /* TP reduce: sum the D-shards of every routed and shared row */
    if (L->tp > 1)
        MP_CHECK(L->comm->ops->allreduce_sum(L->comm, L->outbuf,
                                             ((size_t)routed + (size_t)L->S * ntok) *
                                                 (size_t)L->m.hidden));
    MP_CHECK(L->ops->mark(L->dev, MARK_TP));
    MP_RANGE_POP();
out:
    return rc;
}

void mp_layer_pipelined_times(struct mp_layer *L, int N, struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    double total = o->elapsed_us(dev, MARK_START, MARK_COMBINE);
    double t_route = o->elapsed_us(dev, MARK_START, MARK_ROUTE), t_ffn = 0, t_tp = 0;
    double t_notify = o->elapsed_us(dev, MARK_ROUTE, MARK_NOTIFY);
    for (int k = 0; k < N; k++) {
        t_ffn += o->elapsed_us(dev, MARK_CHUNK(k, CHUNK_FFN_BEGIN), MARK_CHUNK(k, CHUNK_FFN_END));
        t_tp += o->elapsed_us(dev, MARK_CHUNK(k, CHUNK_TP_BEGIN), MARK_CHUNK(k, CHUNK_TP_END));
    }
    rec->start_skew = o->elapsed_us(dev, MARK_ALIGN, MARK_START);
    rec->dispatch_inter_us = rec->dispatch_intra_us = NAN; /* the chunks' hops overlap compute */
    rec->combine_inter_us = rec->combine_intra_us = NAN;
    rec->route = t_route;
    rec->notify = t_notify;
    rec->ffn = t_ffn;
    rec->tp_reduce = t_tp;
    rec->dispatch = total - t_route - t_notify - t_ffn - t_tp; /* data communication exposed */
    rec->combine = 0;
}
