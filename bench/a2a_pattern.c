/* a2a_pattern.c - moeperf-a2a's MoE pattern: each routing draw's dispatch counts, per pair or
 * deduplicated, as a measured rank exchanges them, and as the cluster model times them for every
 * virtual EP rank in one process (a2a_pattern.h). */
#include "a2a_pattern.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "dispatch_plan.h"
#include "error.h"
#include "routing.h"
#include "vlayer.h"

/* One hop's counts of draw d from the dedup counts' rows[ep·ep] (e sends p rows[e·ep + p]) for
 * EP rank e; returns the rows e sends. */
static long hop_counts(struct mp_a2a_counts *c, int d, const double *rows, int ep, int e)
{
    int *sc = c->scount + (size_t)d * ep, *sd = c->sdispl + (size_t)d * ep;
    int *rn = c->rcount + (size_t)d * ep, *rd = c->rdispl + (size_t)d * ep;
    long sent = 0, got = 0;
    for (int p = 0; p < ep; p++) {
        sc[p] = (int)rows[(size_t)e * ep + p];
        rn[p] = (int)rows[(size_t)p * ep + e];
        sd[p] = (int)sent;
        rd[p] = (int)got;
        sent += sc[p];
        got += rn[p];
    }
    return sent;
}

/* The bytes of one dispatched row in `dt` (core/workload/dtype.h): H times the backend's element size (the
 * profile's on the model) for bf16, H + 4·⌈H/128⌉ for fp8. The exchange moves that many bytes a
 * row as they lie in the buffer: it times the wire volume of an fp8 dispatch, not the packing
 * (moeperf-layer measures that). */
double a2a_row_bytes(const struct mp_session *s, enum mp_dtype dt)
{
    return mp_dispatch_row_bytes(dt, s->model.hidden,
                                 (double)s->model.hidden * mp_session_elem_bytes(s));
}

/* Ranks per node as --dedup node groups them: the profile's on the model, else ranks / nodes (as
 * the launcher packs them). */
static int ranks_per_node(const struct mp_session *s)
{
    const struct mp_comm *cm = s->comm;
    if (s->modelled)
        return s->cluster.gpus_per_node;
    return cm->nnodes > 0 && cm->size >= cm->nnodes ? cm->size / cm->nnodes : 1;
}

/* EP rank e's own tokens of draw d routed and planned (mp_plan_send into `plan`), as every rank of
 * a measured run routes its share of the batch; ids and w hold the rank's token count. */
static void route_rank(struct mp_plan *plan, const struct mp_session *s,
                       const struct mp_routing *rt, const struct mp_placement *pl, long total,
                       int e, int d, int32_t *ids, float *w)
{
    long tok0, ntok = mp_token_split(total, s->comm->ep, e, &tok0);
    mp_routing_draw(rt, (uint64_t)s->o.seed, d, total, tok0, ntok, ids, w);
    mp_plan_send(plan, pl, e, tok0, ntok, ids, w);
}

/* MoE deduplicated (`mode` rank or node): the dispatch counts of `ndraws` routing draws, each cut
 * into `nchunks` chunks of tokens (mp_dedup_count_chunk; 1: the whole batch), as
 * core/layer/dedup.c counts them, rows of a2a_row_bytes(dt) bytes plus the top-K ids and weights
 * (mp_dedup_meta_bytes): rank, one row per (token, destination rank ≠ own rank) in `c`; node, the
 * rows to the ranks of the token's node and to the relays in `c` and the relays' forwards inside
 * their node in `c2` (nodes of gpus_per_node = ranks / nodes ranks, as the launcher packs them).
 * Every rank counts the whole batch, so the receive counts need no exchange. bytes_per_rank: the
 * largest per-rank send over both hops, in c. */
int a2a_counts_dedup(struct mp_a2a_counts *c, struct mp_a2a_counts *c2, enum mp_dedup mode,
                        enum mp_dtype dt, struct mp_session *s, const struct mp_routing *rt,
                        const struct mp_placement *pl, long total, int ndraws, int nchunks)
{
    struct mp_comm *cm = s->comm;
    int ep = cm->ep, K = s->model.topk, e = cm->ep_rank, rc = MP_OK, node = mode == MP_DEDUP_NODE;
    struct mp_dedup_counts dc = {0};
    int32_t *ids = malloc((size_t)(total > 0 ? total : 1) * K * sizeof *ids);
    float *w = malloc((size_t)(total > 0 ? total : 1) * K * sizeof *w);
    if (!ids || !w || mp_a2a_counts_alloc(c, ndraws, nchunks, ep) != MP_OK ||
        (node && mp_a2a_counts_alloc(c2, ndraws, nchunks, ep) != MP_OK) ||
        mp_dedup_alloc(&dc, ep) != MP_OK) {
        free(ids);
        free(w);
        mp_dedup_free(&dc);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    c->row_bytes = (size_t)a2a_row_bytes(s, dt) + (size_t)mp_dedup_meta_bytes(mode, K);
    c2->row_bytes = c->row_bytes;
    int gpn = ranks_per_node(s);
    double sum_max = 0;
    for (int d = 0; d < ndraws && rc == MP_OK; d++) {
        mp_routing_draw(rt, (uint64_t)s->o.seed, d, total, 0, total, ids, w);
        long sent = 0;
        for (int k = 0; k < nchunks; k++) { /* chunks partition the tokens: their rows add up */
            int set = d * nchunks + k;
            mp_dedup_count_chunk(mode, pl, ids, total, K, cm->tp, gpn, nchunks, k, &dc);
            sent += hop_counts(c, set, dc.rows, ep, e);
            if (node)
                sent += hop_counts(c2, set, dc.rows + (size_t)ep * ep, ep, e);
        }
        double mine = (double)sent * (double)c->row_bytes;
        rc = cm->ops->max_double(cm, &mine);
        sum_max += mine;
    }
    c->bytes_per_rank = sum_max / ndraws;
    mp_dedup_free(&dc);
    free(ids);
    free(w);
    return rc;
}

/* MoE: the dispatch counts of `ndraws` routing draws, exchanged now (untimed), rows in `dt`. */
int a2a_counts_moe(struct mp_a2a_counts *c, enum mp_dtype dt, struct mp_session *s,
                      const struct mp_routing *rt,
                      const struct mp_placement *pl, long total, int ndraws)
{
    struct mp_comm *cm = s->comm;
    int ep = cm->ep, K = s->model.topk, rc;
    long e = cm->ep_rank, tok0, ntok = mp_token_split(total, ep, (int)e, &tok0);
    struct mp_plan plan;
    int32_t *ids = malloc((size_t)(ntok > 0 ? ntok : 1) * K * sizeof *ids);
    float *w = malloc((size_t)(ntok > 0 ? ntok : 1) * K * sizeof *w);
    if (!ids || !w || mp_a2a_counts_alloc(c, ndraws, 1, ep) != MP_OK) {
        free(ids);
        free(w);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    rc = mp_plan_alloc(&plan, ep, pl->max_local, ntok, K);
    c->row_bytes = (size_t)a2a_row_bytes(s, dt);
    double sum_max = 0;
    for (int d = 0; d < ndraws && rc == MP_OK; d++) {
        route_rank(&plan, s, rt, pl, total, (int)e, d, ids, w);
        rc = cm->ops->alltoall_int(cm, plan.send_cnt, plan.recv_cnt, plan.max_local);
        if (rc != MP_OK)
            break;
        mp_plan_recv(&plan, mp_placement_nlocal(pl, (int)e));
        memcpy(c->scount + (size_t)d * ep, plan.send_rows, (size_t)ep * sizeof(int));
        memcpy(c->sdispl + (size_t)d * ep, plan.send_displ, (size_t)ep * sizeof(int));
        memcpy(c->rcount + (size_t)d * ep, plan.recv_rows, (size_t)ep * sizeof(int));
        memcpy(c->rdispl + (size_t)d * ep, plan.recv_displ, (size_t)ep * sizeof(int));
        double mine = (double)plan.nsend * (double)c->row_bytes;
        rc = cm->ops->max_double(cm, &mine);
        sum_max += mine;
    }
    c->bytes_per_rank = sum_max / ndraws;
    mp_plan_free(&plan);
    free(ids);
    free(w);
    return rc;
}

/* ---- the model (--backend model): every virtual EP rank's counts in this one process ---- */

/* The model's time of one exchange round as a measured run times it: rows[e·ep + p] rows from EP
 * rank e to EP rank p, each of row_bytes bytes, timed by mp_cost_exchange_us of its traffic
 * (mp_vexchange_of, as the modelled layer's exchanges). */
static double model_round_us(const struct mp_session *s, const double *rows, double row_bytes)
{
    const struct mp_comm *cm = s->comm;
    struct mp_vexchange x;
    mp_vexchange_of(rows, cm->ep, cm->tp, s->cluster.gpus_per_node, row_bytes, &x);
    return mp_vexchange_us(&s->cluster, &x);
}

/* The model's uniform pattern: every EP rank sends what `c` (mp_a2a_counts_uniform) says, one
 * row of --bytes to each peer; its time into draw_us[0]. */
int a2a_model_uniform(const struct mp_session *s, const struct mp_a2a_counts *c,
                         double *draw_us)
{
    int ep = s->comm->ep;
    double *rows = malloc(sizeof(double) * (size_t)ep * ep);
    if (!rows) {
        mp_error("out of memory modelling %d ranks", ep);
        return MP_ERR_RUNTIME;
    }
    for (int e = 0; e < ep; e++)
        for (int p = 0; p < ep; p++)
            rows[(size_t)e * ep + p] = c->scount[p];
    draw_us[0] = model_round_us(s, rows, (double)c->row_bytes);
    free(rows);
    return MP_OK;
}

/* The model's moe pattern per pair (--dedup pair): for each of `ndraws` draws every virtual EP
 * rank's plan as counts_moe makes each measured rank's (route_rank), the largest rank's send into
 * c->bytes_per_rank's mean over draws, and the exchange's time into draw_us[d]. */
int a2a_model_moe(struct mp_a2a_counts *c, enum mp_dtype dt, const struct mp_session *s,
                     const struct mp_routing *rt, const struct mp_placement *pl, long total,
                     int ndraws, double *draw_us)
{
    int ep = s->comm->ep, K = s->model.topk, rc;
    long most = (total + ep - 1) / ep; /* the most tokens a rank holds (mp_token_split) */
    struct mp_plan plan;
    int32_t *ids = malloc((size_t)(most > 0 ? most : 1) * K * sizeof *ids);
    float *w = malloc((size_t)(most > 0 ? most : 1) * K * sizeof *w);
    double *rows = malloc(sizeof(double) * (size_t)ep * ep);
    rc = ids && w && rows ? mp_plan_alloc(&plan, ep, pl->max_local, most, K) : MP_ERR_RUNTIME;
    if (rc != MP_OK) {
        free(ids);
        free(w);
        free(rows);
        mp_error("out of memory modelling %d ranks at %ld tokens", ep, total);
        return MP_ERR_RUNTIME;
    }
    c->row_bytes = (size_t)a2a_row_bytes(s, dt);
    double sum_max = 0;
    for (int d = 0; d < ndraws; d++) {
        double most_sent = 0;
        for (int e = 0; e < ep; e++) {
            route_rank(&plan, s, rt, pl, total, e, d, ids, w);
            for (int p = 0; p < ep; p++)
                rows[(size_t)e * ep + p] = plan.send_rows[p];
            double mine = (double)plan.nsend * (double)c->row_bytes;
            most_sent = mine > most_sent ? mine : most_sent;
        }
        sum_max += most_sent;
        draw_us[d] = model_round_us(s, rows, (double)c->row_bytes);
    }
    c->bytes_per_rank = sum_max / ndraws;
    mp_plan_free(&plan);
    free(ids);
    free(w);
    free(rows);
    return MP_OK;
}

/* The model's moe pattern deduplicated (`mode` rank or node): each draw's rows as counts_dedup
 * counts them, chunk by chunk (rows of a2a_row_bytes(dt) plus the metadata), the largest rank's
 * send over its hops and chunks into c->bytes_per_rank's mean, and the draw's time into
 * draw_us[d]: the chunks as a two-stage flow shop (docs/planning.md, "Overlapped node
 * forwarding"): chunk k's inter-node phase I_k follows chunk k−1's on the network, its intra-node
 * phase F_k starts once I_k has arrived and F_{k−1} is done; one chunk: I + F. */
int a2a_model_dedup(struct mp_a2a_counts *c, enum mp_dedup mode, enum mp_dtype dt,
                       const struct mp_session *s, const struct mp_routing *rt,
                       const struct mp_placement *pl, long total, int ndraws, int nchunks,
                       double *draw_us)
{
    const struct mp_comm *cm = s->comm;
    int ep = cm->ep, K = s->model.topk, hops = mode == MP_DEDUP_NODE ? 2 : 1;
    size_t cells = (size_t)ep * ep;
    struct mp_dedup_counts dc = {0};
    int32_t *ids = malloc((size_t)(total > 0 ? total : 1) * K * sizeof *ids);
    float *w = malloc((size_t)(total > 0 ? total : 1) * K * sizeof *w);
    double *sent = malloc(sizeof(double) * (size_t)ep);
    if (!ids || !w || !sent || mp_dedup_alloc(&dc, ep) != MP_OK) {
        free(ids);
        free(w);
        free(sent);
        mp_dedup_free(&dc);
        mp_error("out of memory modelling %d ranks at %ld tokens", ep, total);
        return MP_ERR_RUNTIME;
    }
    c->row_bytes = (size_t)a2a_row_bytes(s, dt) + (size_t)mp_dedup_meta_bytes(mode, K);
    double sum_max = 0;
    for (int d = 0; d < ndraws; d++) {
        mp_routing_draw(rt, (uint64_t)s->o.seed, d, total, 0, total, ids, w);
        double inter_end = 0, intra_end = 0; /* the flow shop's two stages */
        for (int e = 0; e < ep; e++)
            sent[e] = 0;
        for (int k = 0; k < nchunks; k++) {
            mp_dedup_count_chunk(mode, pl, ids, total, K, cm->tp, ranks_per_node(s), nchunks, k,
                                 &dc);
            for (int e = 0; e < ep; e++)
                for (int h = 0; h < hops; h++)
                    for (int p = 0; p < ep; p++)
                        sent[e] += (int)dc.rows[h * cells + (size_t)e * ep + p];
            inter_end += model_round_us(s, dc.rows, (double)c->row_bytes);
            double fwd = hops > 1 ? model_round_us(s, dc.rows + cells, (double)c->row_bytes) : 0;
            intra_end = fmax(inter_end, intra_end) + fwd;
        }
        double most_sent = 0;
        for (int e = 0; e < ep; e++)
            most_sent = fmax(most_sent, sent[e] * (double)c->row_bytes);
        sum_max += most_sent;
        draw_us[d] = intra_end;
    }
    c->bytes_per_rank = sum_max / ndraws;
    mp_dedup_free(&dc);
    free(ids);
    free(w);
    free(sent);
    return MP_OK;
}
