/* vlayer.c - the layer pipeline for virtual ranks (see vlayer.h and docs/planning.md). */
#include "vlayer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "plan.h"
#include "topo.h"

#define POOL_DRAWS 8

void mp_vtraffic_free(struct mp_vtraffic *t, int ndraws)
{
    for (int d = 0; t && d < ndraws; d++) {
        free(t[d].tokens); /* one block holds every per-rank array */
        free(t[d].active);
    }
    free(t);
}

static int vtraffic_alloc(struct mp_vtraffic *t, int ep)
{
    double *blk = calloc((size_t)ep * 7, sizeof *blk);
    t->active = calloc((size_t)ep, sizeof *t->active);
    if (!blk || !t->active) {
        free(blk);
        return MP_ERR_RUNTIME;
    }
    t->tokens = blk;
    t->rows = blk + ep;
    t->ffn_rows = blk + 2 * ep;
    t->pairs = blk + 3 * ep;
    t->local = blk + 4 * ep;
    t->bytes_sent = blk + 5 * ep;
    t->bytes_inter = blk + 6 * ep;
    return MP_OK;
}

/* Route one draw over every EP rank and total what the plan sends where. */
static void one_draw(struct mp_vtraffic *t, const struct mp_cluster *cl, const struct mp_model *m,
                     const struct mp_placement *pl, struct mp_plan *plan, long T,
                     const int32_t *ids, const float *w, double *rows_to, double *exp_rows)
{
    int ep = t->ep, tp = t->tp, L = plan->max_local, K = m->topk, gpn = cl->gpus_per_node;
    double row_bytes = m->hidden * cl->elem_bytes;
    memset(rows_to, 0, sizeof(double) * (size_t)ep * ep);
    memset(exp_rows, 0, sizeof(double) * (size_t)ep * L);
    for (int e = 0; e < ep; e++) {
        long tok0, n = mp_token_split(T, ep, e, &tok0);
        mp_plan_send(plan, pl, e, tok0, n, ids + (size_t)tok0 * K, w + (size_t)tok0 * K);
        t->tokens[e] = (double)n;
        t->pairs[e] = (double)n * K;
        t->local[e] = (double)plan->local_pairs;
        for (int p = 0; p < ep; p++) {
            rows_to[e * ep + p] = plan->send_rows[p];
            for (int l = 0; l < L; l++)
                exp_rows[p * L + l] += plan->send_cnt[p * L + l];
        }
    }
    for (int p = 0; p < ep; p++) {
        double rows = 0;
        int active = 0;
        for (int l = 0; l < L; l++) {
            rows += exp_rows[p * L + l];
            active += exp_rows[p * L + l] > 0;
        }
        t->rows[p] = rows;
        t->ffn_rows[p] = rows + (double)m->shared * t->tokens[p];
        t->active[p] = active + (m->shared > 0 && t->tokens[p] > 0 ? m->shared : 0);
    }
    /* the all-to-all: largest per-rank volume on each link class, incast across nodes */
    t->intra_max = t->inter_max = 0;
    t->uses_intra = t->uses_inter = t->incast = 0;
    for (int p = 0; p < ep; p++) {
        double in_intra = 0, in_inter = 0, out_intra = 0, out_inter = 0;
        int senders = 0, np = p * tp / gpn; /* node of EP rank p's first TP rank */
        for (int q = 0; q < ep; q++) {
            if (q == p)
                continue;
            double rin = rows_to[q * ep + p] * row_bytes, rout = rows_to[p * ep + q] * row_bytes;
            if (q * tp / gpn == np) {
                in_intra += rin;
                out_intra += rout;
                t->uses_intra = 1;
            } else {
                in_inter += rin;
                out_inter += rout;
                t->uses_inter = 1;
                senders += rin > 0;
            }
        }
        t->intra_max = fmax(t->intra_max, fmax(in_intra, out_intra));
        t->inter_max = fmax(t->inter_max, fmax(in_inter, out_inter));
        t->incast = senders > t->incast ? senders : t->incast;
        /* dispatch sends out, combine sends back what came in */
        t->bytes_sent[p] = out_intra + out_inter + in_intra + in_inter;
        t->bytes_inter[p] = out_inter + in_inter;
    }
}

int mp_vtraffic_build(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                      uint64_t seed, const struct mp_point *pt, struct mp_vtraffic **out,
                      int *ndraws)
{
    const struct mp_placement *pl = pt->placement;
    long T = pt->batch * pt->seq;
    int K = m->topk, L = pl->max_local > 0 ? pl->max_local : 1, rc = MP_ERR_RUNTIME;
    int P = pt->iters < POOL_DRAWS ? pt->iters : POOL_DRAWS;
    if (P < 1)
        P = 1;
    size_t pairs = (size_t)T * K;
    /* refuse before allocating: the draws, the ep×ep traffic matrix and the per-rank arrays */
    double need = (double)pairs * 8 + (double)ep * ep * 8 + (double)ep * L * 8 +
                  (double)P * ep * 8 * 8 + (double)(T / ep + 1) * K * 16;
    double budget = mp_memory_budget(0, 1);
    if ((budget > 0 && need > budget) || (double)(T / ep + 1) * K > 2147483647.0) {
        mp_usage("modelling batch %ld × seq %d × top-%d on %d EP ranks needs about %.3g GB, more "
                 "than this host can give (%.3g GB); lower --batch, --seq or the EP size",
                 pt->batch, pt->seq, K, ep, need / 1e9, budget / 1e9);
        return MP_ERR_USAGE;
    }
    struct mp_plan plan = {0};
    struct mp_vtraffic *t = calloc((size_t)P, sizeof *t);
    int32_t *ids = malloc(pairs * sizeof *ids);
    float *w = malloc(pairs * sizeof *w);
    double *rows_to = malloc(sizeof(double) * (size_t)ep * ep);
    double *exp_rows = malloc(sizeof(double) * (size_t)ep * L);
    if (!t || !ids || !w || !rows_to || !exp_rows ||
        mp_plan_alloc(&plan, ep, L, (T + ep - 1) / ep, K) != MP_OK)
        goto out;
    for (int d = 0; d < P; d++) {
        t[d].tp = tp;
        t[d].ep = ep;
        t[d].gate = mp_routing_is_gate(pt->routing);
        if (vtraffic_alloc(&t[d], ep) != MP_OK)
            goto out;
        mp_routing_draw(pt->routing, seed, d, T, 0, T, ids, w);
        one_draw(&t[d], cl, m, pl, &plan, T, ids, w, rows_to, exp_rows);
    }
    rc = MP_OK;
out:
    if (rc != MP_OK) {
        mp_error("out of memory modelling %d ranks at batch %ld", tp * ep, pt->batch);
        mp_vtraffic_free(t, P);
    } else {
        *out = t;
        *ndraws = P;
    }
    mp_plan_free(&plan);
    free(ids);
    free(w);
    free(rows_to);
    free(exp_rows);
    return rc;
}

void mp_vtraffic_time(const struct mp_cluster *cl, const struct mp_model *m,
                      const struct mp_vtraffic *t, struct mp_rank_iter *ranks)
{
    int tp = t->tp, ep = t->ep, H = m->hidden;
    double Dl = (double)m->ffn / tp, row_bytes = H * cl->elem_bytes;
    double counts = mp_model_exchange_us(cl, 0, 0, t->uses_intra, t->uses_inter, 1);
    double data = mp_model_exchange_us(cl, t->intra_max, t->inter_max, t->uses_intra,
                                       t->uses_inter, t->incast);
    double dispatch = cl->launch_us + counts + data, combine = cl->launch_us + data;
    double slowest = 0;
    for (int p = 0; p < ep; p++) {
        double flops = 6.0 * H * Dl * t->ffn_rows[p]; /* DESIGN.md, moeperf-ffn */
        double bytes = 3.0 * H * Dl * t->active[p] * cl->elem_bytes;
        double f = mp_model_ffn_us(cl, flops, bytes, t->active[p]);
        double r = mp_model_allreduce_us(cl, t->ffn_rows[p] * row_bytes, tp);
        slowest = fmax(slowest, f + r);
        for (int k = 0; k < tp; k++) {
            struct mp_rank_iter *x = &ranks[p * tp + k];
            x->ffn = f;
            x->tp_reduce = r;
        }
    }
    for (int p = 0; p < ep; p++) {
        double gate = t->gate ? 2.0 * H * m->experts * t->tokens[p] /
                                    (cl->flops * cl->flops_eff) * 1e6
                              : 0;
        for (int k = 0; k < tp; k++) {
            struct mp_rank_iter *x = &ranks[p * tp + k];
            x->route = cl->launch_us + gate;
            x->dispatch = dispatch;
            x->combine = (slowest - x->ffn - x->tp_reduce) + combine; /* waits for the slowest */
            x->tokens = t->tokens[p];
            x->rows = t->rows[p];
            x->ffn_rows = t->ffn_rows[p];
            x->pairs = t->pairs[p];
            x->local_pairs = t->local[p];
            x->bytes_sent = t->bytes_sent[p];
            x->bytes_internode = t->bytes_inter[p];
        }
    }
}

int mp_vlayer_run(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                  uint64_t seed, const struct mp_point *pt, struct mp_point_result *res)
{
    double t_begin = mp_now_us();
    int N = tp * ep, P = 0;
    struct mp_vtraffic *t = NULL;
    memset(res, 0, sizeof *res);
    res->check_error = NAN;
    res->iters = pt->iters;
    res->nranks = N;
    res->tokens_per_rank = (pt->batch * pt->seq + ep - 1) / ep;
    res->ranks = calloc((size_t)pt->iters * N, sizeof *res->ranks);
    res->metrics = calloc((size_t)pt->iters, sizeof *res->metrics);
    if (!res->ranks || !res->metrics) {
        mp_point_result_free(res);
        mp_error("out of memory modelling %d ranks", N);
        return MP_ERR_RUNTIME;
    }
    int rc = mp_vtraffic_build(cl, m, tp, ep, seed, pt, &t, &P);
    if (rc != MP_OK) {
        mp_point_result_free(res);
        return rc;
    }
    for (int it = 0; it < pt->iters; it++) {
        mp_vtraffic_time(cl, m, &t[it % P], res->ranks + (size_t)it * N);
        mp_metrics_iter(res->ranks + (size_t)it * N, N, &res->metrics[it]);
    }
    mp_vtraffic_free(t, P);
    res->wall_us = mp_now_us() - t_begin;
    res->timed_us = res->wall_us; /* the model's work is the whole point */
    return MP_OK;
}
