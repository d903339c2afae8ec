/* vlayer.c - the layer pipeline for virtual ranks (see vlayer.h and docs/planning.md). */
#include "vlayer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "plan.h"

#define POOL_DRAWS 8

/* Scratch of one point, allocated once. */
struct vstate {
    int ep, L, K;
    long T;
    int32_t *ids;      /* [P][T·K] */
    float *w;          /* [P][T·K] */
    double *rows_to;   /* [ep][ep] rows from EP rank e to EP rank p */
    double *exp_rows;  /* [ep][L] rows of each local expert of each rank */
    double *local;     /* [ep] pairs served on their own rank */
    double *f, *t;     /* [ep] FFN and TP-reduce time of each EP rank */
    struct mp_plan plan;
};

static void vstate_free(struct vstate *v)
{
    free(v->ids);
    free(v->w);
    free(v->rows_to);
    free(v->exp_rows);
    free(v->local);
    free(v->f);
    free(v->t);
    mp_plan_free(&v->plan);
}

/* Route one draw over every EP rank and total what the plan sends where. */
static void route_draw(struct vstate *v, const struct mp_placement *pl, int d)
{
    int ep = v->ep, L = v->L, K = v->K;
    memset(v->rows_to, 0, sizeof(double) * (size_t)ep * ep);
    memset(v->exp_rows, 0, sizeof(double) * (size_t)ep * L);
    for (int e = 0; e < ep; e++) {
        long tok0, n = mp_token_split(v->T, ep, e, &tok0);
        const int32_t *ids = v->ids + (size_t)d * v->T * K + (size_t)tok0 * K;
        const float *w = v->w + (size_t)d * v->T * K + (size_t)tok0 * K;
        mp_plan_send(&v->plan, pl, e, tok0, n, ids, w);
        v->local[e] = (double)v->plan.local_pairs;
        for (int p = 0; p < ep; p++) {
            v->rows_to[e * ep + p] = v->plan.send_rows[p];
            for (int l = 0; l < L; l++)
                v->exp_rows[p * L + l] += v->plan.send_cnt[p * L + l];
        }
    }
}

int mp_vlayer_run(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                  uint64_t seed, const struct mp_point *pt, struct mp_point_result *res)
{
    double t_begin = mp_now_us();
    const struct mp_placement *pl = pt->placement;
    int N = tp * ep, K = m->topk, S = m->shared, H = m->hidden, gpn = cl->gpus_per_node;
    double Dl = (double)m->ffn / tp, row_bytes = H * cl->elem_bytes;
    struct vstate v = {.ep = ep, .L = pl->max_local > 0 ? pl->max_local : 1, .K = K,
                       .T = pt->batch * pt->seq};
    int P = pt->iters < POOL_DRAWS ? pt->iters : POOL_DRAWS, rc = MP_ERR_RUNTIME;
    memset(res, 0, sizeof *res);
    res->check_error = NAN;
    res->iters = pt->iters;
    res->nranks = N;
    res->tokens_per_rank = (v.T + ep - 1) / ep;
    size_t pairs = (size_t)v.T * K;
    v.ids = malloc((size_t)P * pairs * sizeof *v.ids);
    v.w = malloc((size_t)P * pairs * sizeof *v.w);
    v.rows_to = malloc(sizeof(double) * (size_t)ep * ep);
    v.exp_rows = malloc(sizeof(double) * (size_t)ep * v.L);
    v.local = malloc(sizeof(double) * (size_t)ep);
    v.f = malloc(sizeof(double) * (size_t)ep);
    v.t = malloc(sizeof(double) * (size_t)ep);
    res->ranks = calloc((size_t)pt->iters * N, sizeof *res->ranks);
    res->metrics = calloc((size_t)pt->iters, sizeof *res->metrics);
    if (!v.ids || !v.w || !v.rows_to || !v.exp_rows || !v.local || !v.f || !v.t || !res->ranks ||
        !res->metrics || mp_plan_alloc(&v.plan, ep, v.L, res->tokens_per_rank, K) != MP_OK) {
        mp_error("out of memory modelling %d ranks at batch %ld", N, pt->batch);
        goto out;
    }
    for (int d = 0; d < P; d++)
        mp_routing_draw(pt->routing, seed, d, v.T, 0, v.T, v.ids + (size_t)d * pairs,
                        v.w + (size_t)d * pairs);

    for (int it = 0; it < pt->iters; it++) {
        route_draw(&v, pl, it % P);
        /* the all-to-all: largest per-rank volume on each link class, incast across nodes */
        double intra_max = 0, inter_max = 0;
        int uses_intra = 0, uses_inter = 0, incast = 0;
        for (int p = 0; p < ep; p++) {
            double in_intra = 0, in_inter = 0, out_intra = 0, out_inter = 0;
            int senders = 0;
            int np = p * tp / gpn; /* node of EP rank p (its TP groups share the node pattern) */
            for (int q = 0; q < ep; q++) {
                if (q == p)
                    continue;
                int nq = q * tp / gpn;
                double rin = v.rows_to[q * ep + p] * row_bytes, rout = v.rows_to[p * ep + q] * row_bytes;
                if (nq == np) {
                    in_intra += rin;
                    out_intra += rout;
                    uses_intra = 1;
                } else {
                    in_inter += rin;
                    out_inter += rout;
                    uses_inter = 1;
                    senders += rin > 0;
                }
            }
            intra_max = fmax(intra_max, fmax(in_intra, out_intra));
            inter_max = fmax(inter_max, fmax(in_inter, out_inter));
            incast = senders > incast ? senders : incast;
        }
        double rounds = mp_model_exchange_us(cl, 0, 0, uses_intra, uses_inter, 1); /* counts */
        double data = mp_model_exchange_us(cl, intra_max, inter_max, uses_intra, uses_inter, incast);
        double dispatch = cl->launch_us + rounds + data, combine_x = cl->launch_us + data;

        /* expert FFN and TP reduce of every EP rank */
        double slowest = 0;
        for (int p = 0; p < ep; p++) {
            long tok0, ntok = mp_token_split(v.T, ep, p, &tok0);
            double rows = 0;
            int active = 0;
            for (int l = 0; l < v.L; l++) {
                rows += v.exp_rows[p * v.L + l];
                active += v.exp_rows[p * v.L + l] > 0;
            }
            double ffn_rows = rows + (double)S * ntok;
            if (S > 0 && ntok > 0)
                active += S;
            double flops = 6.0 * H * Dl * ffn_rows;          /* DESIGN.md, moeperf-ffn */
            double bytes = 3.0 * H * Dl * active * cl->elem_bytes;
            v.f[p] = mp_model_ffn_us(cl, flops, bytes, active);
            v.t[p] = mp_model_allreduce_us(cl, ffn_rows * row_bytes, tp);
            slowest = fmax(slowest, v.f[p] + v.t[p]);
        }
        for (int r = 0; r < N; r++) {
            int p = r / tp;
            long tok0, ntok = mp_token_split(v.T, ep, p, &tok0);
            struct mp_rank_iter *x = &res->ranks[(size_t)it * N + r];
            double gate = mp_routing_is_gate(pt->routing)
                              ? 2.0 * H * m->experts * ntok / (cl->flops * cl->flops_eff) * 1e6
                              : 0;
            x->route = cl->launch_us + gate;
            x->dispatch = dispatch;
            x->ffn = v.f[p];
            x->tp_reduce = v.t[p];
            x->combine = (slowest - v.f[p] - v.t[p]) + combine_x; /* waits for the slowest rank */
            x->tokens = (double)ntok;
            double rows = 0;
            for (int l = 0; l < v.L; l++)
                rows += v.exp_rows[p * v.L + l];
            x->rows = rows;
            x->ffn_rows = rows + (double)S * ntok;
            x->pairs = (double)ntok * K;
            x->local_pairs = v.local[p];
            double sent = 0, inter = 0;
            for (int q = 0; q < ep; q++) {
                if (q == p)
                    continue;
                double b = (v.rows_to[p * ep + q] + v.rows_to[q * ep + p]) * row_bytes;
                sent += b;
                if ((q * tp + r % tp) / gpn != r / gpn)
                    inter += b;
            }
            x->bytes_sent = sent;
            x->bytes_internode = inter;
        }
        mp_metrics_iter(res->ranks + (size_t)it * N, N, &res->metrics[it]);
    }
    rc = MP_OK;
out:
    vstate_free(&v);
    if (rc != MP_OK)
        mp_point_result_free(res);
    res->wall_us = mp_now_us() - t_begin;
    return rc;
}
