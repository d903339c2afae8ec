/* vexec.c - the model's traced ranks (vexec.h): one thread per virtual rank runs the point's
 * draws through the layer's stages; the draws' traffic is read off their records, exchanges and
 * expert FFNs. */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "compute.h"
#include "dedup.h"
#include "dtype.h"
#include "error.h"
#include "routing.h"
#include "vexec.h"

/* The rows of the traced ranks' layers: the fewest that let every option through (a packed fp8 row
 * fits its activations from H 2 on, core/layer.c) while a count never depends on them. */
enum { TRACED_HIDDEN = 128, TRACED_DL = 16 };

struct vexec {
    const struct mp_cluster *cl;
    const struct mp_point *pt;
    struct mp_model small; /* the model with small rows */
    uint64_t seed;
    int tp, ep, P;
    double row_bytes, dispatch_row_bytes; /* the profile's, for the modelled bytes */
    struct mp_vtraffic *t;                /* [P] */
    int draw;           /* the draw world rank 0 runs (its EP group's exchanges are this draw's) */
    int *row_exchanges; /* [P] row exchanges seen on TP rank 0's EP group in each draw */
    double *rows_to;    /* [ep·ep] scratch */
    struct mp_rank_iter *recs;  /* [tp·ep · P] each rank's record of each draw */
    struct mp_vffn_seen *ffns;  /* [tp·ep · P] its expert FFNs in each draw */
};

/* An exchange of TP rank 0's EP group: the first rows of a draw are its dispatch, whose transpose
 * is the combine; a count exchange before it makes the notify phase. */
static void seen_exchange(void *arg, const struct mp_vworld_exchange *x)
{
    struct vexec *v = arg;
    if (x->tp_rank != 0 || x->group != MP_GROUP_EP)
        return;
    struct mp_vtraffic *t = &v->t[v->draw];
    int d = v->draw, ep = v->ep;
    if (x->counts) {
        if (v->row_exchanges[d] == 0)
            t->count_exchange = 1;
        return;
    }
    if (v->row_exchanges[d]++ > 0)
        return;
    for (size_t i = 0; i < (size_t)ep * ep; i++)
        v->rows_to[i] = x->rows_to[i];
    mp_vexchange_bytes_of(v->rows_to, ep, v->tp, v->cl->gpus_per_node, v->row_bytes,
                          v->dispatch_row_bytes, &t->a2a, t);
}

struct rank_run {
    struct vexec *v;
    struct mp_compute *dev;
    int rank;
};

/* Before draw d: world rank 0 names the draw; every rank files its FFNs of draw d − 1. */
static void before_draw(void *arg, int d)
{
    struct rank_run *r = arg;
    struct vexec *v = r->v;
    if (r->rank == 0)
        v->draw = d;
    if (d > 0)
        mp_compute_model_rank_take(r->dev, &v->ffns[(size_t)r->rank * v->P + d - 1]);
}

static int run_rank(struct mp_comm *c, void *arg)
{
    struct rank_run *r = arg;
    struct vexec *v = r->v;
    const struct mp_compute_ops *ops = &mp_compute_model_rank;
    struct mp_layer *L = NULL;
    int rc = ops->init(&r->dev, 0);
    if (rc != MP_OK)
        return rc;
    long total = v->pt->batch * v->pt->seq;
    if ((rc = c->ops->split(c, v->tp, v->ep)) == MP_OK)
        rc = mp_layer_create(&L, ops, r->dev, c, &v->small, v->seed, total, 0,
                             v->pt->overlap > 1 ? v->pt->overlap : 1);
    if (rc == MP_OK)
        rc = mp_layer_run_draws(L, v->pt, v->P, v->recs + (size_t)r->rank * v->P, before_draw, r);
    if (rc == MP_OK)
        mp_compute_model_rank_take(r->dev, &v->ffns[(size_t)r->rank * v->P + v->P - 1]);
    if (L)
        mp_layer_destroy(L);
    ops->fini(r->dev);
    return rc;
}

const char *mp_vexec_cannot(const struct mp_point *pt)
{
    return mp_routing_is_gate(pt->routing) ? "gate routing (no activations to route)"
           : pt->cache.slots > 0           ? "--expert-cache"
           : pt->dedup != MP_DEDUP_PAIR    ? "--dedup rank|node"
           : pt->overlap > 1               ? "--overlap above 1"
                                           : NULL;
}

/* What the traced ranks cannot run yet, refused by name. */
static int refused(const struct mp_point *pt)
{
    const char *what = mp_vexec_cannot(pt);
    if (what)
        mp_usage("the model's traced ranks do not run %s yet", what);
    return what ? MP_ERR_USAGE : MP_OK;
}

/* Draw d's per-rank traffic from the records and FFNs of each EP rank's TP rank 0. */
static void fill_ranks(struct vexec *v, int d)
{
    struct mp_vtraffic *t = &v->t[d];
    for (int e = 0; e < v->ep; e++) {
        size_t i = (size_t)e * v->tp * v->P + d;
        const struct mp_rank_iter *rec = &v->recs[i];
        t->tokens[e] = rec->tokens;
        t->pairs[e] = rec->pairs;
        t->local[e] = rec->local_pairs;
        t->dropped[e] = rec->dropped;
        t->rows[e] = rec->rows;
        t->ffn_rows[e] = rec->ffn_rows;
        t->active[e] = v->ffns[i].active[0];
    }
}

int mp_vexec_build(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                   uint64_t seed, const struct mp_point *pt, struct mp_vtraffic **out,
                   int *ndraws)
{
    int rc = refused(pt);
    if (rc != MP_OK)
        return rc;
    int N = tp * ep, P = mp_routing_pool_size(pt->warmup, pt->iters, 0);
    struct vexec v = {.cl = cl, .pt = pt, .small = *m, .seed = seed, .tp = tp, .ep = ep, .P = P};
    v.small.hidden = TRACED_HIDDEN;
    v.small.ffn = TRACED_DL * tp;
    v.row_bytes = m->hidden * cl->elem_bytes;
    v.dispatch_row_bytes = mp_dispatch_row_bytes((enum mp_dtype)pt->dispatch_dtype, m->hidden,
                                                 v.row_bytes);
    struct mp_vworld *w = NULL;
    struct rank_run *runs = calloc((size_t)N, sizeof *runs);
    void **args = calloc((size_t)N, sizeof *args);
    v.t = calloc((size_t)P, sizeof *v.t);
    v.row_exchanges = calloc((size_t)P, sizeof *v.row_exchanges);
    v.rows_to = malloc((size_t)ep * ep * sizeof *v.rows_to);
    v.recs = calloc((size_t)N * P, sizeof *v.recs);
    v.ffns = calloc((size_t)N * P, sizeof *v.ffns);
    rc = MP_ERR_RUNTIME;
    if (!runs || !args || !v.t || !v.row_exchanges || !v.rows_to || !v.recs || !v.ffns) {
        mp_error("out of memory tracing %d virtual ranks", N);
        goto out;
    }
    for (int d = 0; d < P; d++)
        if (mp_vtraffic_start(&v.t[d], cl, m, tp, ep, pt) != MP_OK) {
            mp_error("out of memory tracing %d virtual ranks", N);
            goto out;
        }
    if ((rc = mp_vworld_create(&w, N, cl->gpus_per_node)) != MP_OK)
        goto out;
    mp_vworld_watch(w, seen_exchange, &v);
    for (int r = 0; r < N; r++) {
        runs[r] = (struct rank_run){.v = &v, .rank = r};
        args[r] = &runs[r];
    }
    if ((rc = mp_vworld_run(w, run_rank, args)) != MP_OK)
        goto out;
    for (int d = 0; d < P; d++)
        fill_ranks(&v, d);
out:
    mp_vworld_free(w);
    if (rc == MP_OK) {
        *out = v.t;
        *ndraws = P;
    } else {
        mp_vtraffic_free(v.t, P);
    }
    free(runs);
    free(args);
    free(v.row_exchanges);
    free(v.rows_to);
    free(v.recs);
    free(v.ffns);
    return rc;
}
