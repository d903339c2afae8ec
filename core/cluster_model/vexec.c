/* vexec.c - the model's traced ranks (vexec.h): one fiber per virtual rank runs the point's
 * draws through the layer's stages; the draws' traffic is read off their records, exchanges and
 * expert FFNs. */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "compute.h"
#include "dedup.h"
#include "dtype.h"
#include "error.h"
#include "layer.h"
#include "dispatch_plan_dedup.h"
#include "routing.h"
#include "vexec.h"

/* The rows of the traced ranks' layers: small, as a count never depends on them (a packed fp8 row
 * fits its activations from H 2 on, core/layer/layer.c). */
enum { TRACED_HIDDEN = 128, TRACED_DL = 16 };

/* One exchange of rows the traced ranks made in a draw (TP rank 0's EP group), its node groups'
 * meetings merged: the k-th exchange of every EP rank is entry k. */
struct xentry {
    int slot;         /* its request slot; −1 blocking */
    size_t row_bytes; /* on the traced ranks (small rows): tells the metadata apart */
    double *rows;     /* [ep·ep] rows from EP rank e to p at e·ep + p */
};

/* A draw's exchanges in the order every EP rank made them. */
struct xlog {
    int n, cap;
    struct xentry *e;
    int *next;          /* [ep] each EP rank's exchanges of rows so far */
    int *counted_first; /* [ep] a count exchange before its first rows */
};

struct vexec {
    const struct mp_cluster *cl;
    const struct mp_point *pt;
    struct mp_point run;       /* the point the ranks run: gate routing replayed as drawn */
    struct mp_routing replay;  /* (the model's gate routing: the draws of mp_routing_draw) */
    struct mp_model small; /* the model with small rows */
    uint64_t seed;
    int tp, ep, P, N;      /* N: the point's chunks (1 unpipelined) */
    double row_bytes, dispatch_row_bytes; /* the profile's, for the modelled bytes */
    size_t meta_row;       /* one metadata row on the traced ranks (K choices) */
    struct mp_vtraffic *t; /* [P] */
    struct xlog *logs;     /* [P] */
    struct rank_run *runs; /* [tp·ep] */
    int failed;            /* out of memory, or ranks that disagree about their exchanges */
    struct mp_rank_iter *recs; /* [tp·ep · P] each rank's record of each draw */
    struct mp_vffn_seen *ffns; /* [tp·ep · P] its expert FFNs in each draw */
    /* --expert-cache: [tp·ep · P · Lm] the rows each local expert ran in each draw (Lm: the
     * placement's max_local), for the cache's timeline; NULL without */
    double *expert_rows;
    int Lm;
};

struct rank_run {
    struct vexec *v;
    struct mp_compute *dev;
    struct mp_layer *L;
    int rank;
    int draw; /* the draw it runs: its exchanges are that draw's */
};

/* The next entry of draw log `lg`, made when the first member of an exchange reaches it. */
static struct xentry *log_entry(struct vexec *v, struct xlog *lg, int k,
                                const struct mp_vworld_exchange *x)
{
    if (k < lg->n) {
        struct xentry *e = &lg->e[k];
        if (e->slot != x->slot || e->row_bytes != x->row_bytes) {
            mp_error("internal error: traced ranks disagree about their exchange %d (slot %d or "
                     "%d, rows of %zu or %zu bytes)", k, e->slot, x->slot, e->row_bytes,
                     x->row_bytes);
            return NULL;
        }
        return e;
    }
    if (k != lg->n) {
        mp_error("internal error: a traced rank skipped an exchange (%d of %d)", k, lg->n);
        return NULL;
    }
    if (lg->n == lg->cap) {
        int cap = lg->cap ? 2 * lg->cap : 8;
        struct xentry *g = realloc(lg->e, (size_t)cap * sizeof *g);
        if (!g) {
            mp_error("out of memory tracing exchanges");
            return NULL;
        }
        lg->e = g;
        lg->cap = cap;
    }
    struct xentry *e = &lg->e[lg->n];
    *e = (struct xentry){.slot = x->slot, .row_bytes = x->row_bytes,
                         .rows = calloc((size_t)v->ep * v->ep, sizeof *e->rows)};
    if (!e->rows) {
        mp_error("out of memory tracing exchanges");
        return NULL;
    }
    lg->n++;
    return e;
}

/* An exchange of TP rank 0's EP group (a node group's among them): each member's rows into its
 * next entry of the draw it runs; a count exchange before any rows makes the notify phase. */
static void seen_exchange(void *arg, const struct mp_vworld_exchange *x)
{
    struct vexec *v = arg;
    if (x->tp_rank != 0 || v->failed)
        return;
    int ep = v->ep;
    struct xlog *lg = &v->logs[v->runs[x->members[0]].draw];
    for (int i = 0; i < x->nmembers; i++) {
        int e = x->members[i] / v->tp;
        if (x->counts) {
            lg->counted_first[e] |= lg->next[e] == 0;
            continue;
        }
        struct xentry *en = log_entry(v, lg, lg->next[e]++, x);
        if (!en) {
            v->failed = 1;
            return;
        }
        for (int p = 0; p < ep; p++)
            en->rows[(size_t)e * ep + p] = x->rows_to[(size_t)e * ep + p];
    }
}

/* File rank r's FFNs of draw d: by chunk, and with a cache each local expert's rows (its index
 * found by its weights). */
static void file_ffns(struct rank_run *r, int d)
{
    struct vexec *v = r->v;
    size_t i = (size_t)r->rank * v->P + d;
    if (v->expert_rows) {
        const void *const *w;
        const double *rows;
        int n = mp_compute_model_rank_experts(r->dev, &w, &rows);
        double *mine = v->expert_rows + i * v->Lm;
        for (int j = 0; j < n; j++) {
            int l = mp_layer_local_expert_of(r->L, w[j]);
            if (l >= 0 && l < v->Lm)
                mine[l] = rows[j];
        }
    }
    mp_compute_model_rank_take(r->dev, &v->ffns[i]);
}

/* Before draw d: file the FFNs of draw d − 1. */
static void before_draw(void *arg, int d)
{
    struct rank_run *r = arg;
    r->draw = d;
    if (d > 0)
        file_ffns(r, d - 1);
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
    r->L = L;
    if (rc == MP_OK)
        rc = mp_layer_run_draws(L, &v->run, v->P, v->recs + (size_t)r->rank * v->P, before_draw,
                                r);
    if (rc == MP_OK)
        file_ffns(r, v->P - 1);
    if (L)
        mp_layer_destroy(L);
    ops->fini(r->dev);
    return rc;
}

/* Draw d's per-rank traffic from the records and FFNs of each EP rank's TP rank 0: the shared
 * experts' rows ride in chunk 0 and count in ffn_rows, not in a chunk's routed rows. */
static void fill_ranks(struct vexec *v, int d)
{
    struct mp_vtraffic *t = &v->t[d];
    for (int e = 0; e < v->ep; e++) {
        size_t i = (size_t)e * v->tp * v->P + d;
        const struct mp_rank_iter *rec = &v->recs[i];
        const struct mp_vffn_seen *f = &v->ffns[i];
        t->tokens[e] = rec->tokens;
        t->pairs[e] = rec->pairs;
        t->local[e] = rec->local_pairs;
        t->dropped[e] = rec->dropped;
        t->rows[e] = rec->rows;
        t->ffn_rows[e] = rec->ffn_rows;
        t->active[e] = f->distinct;
        for (int k = 0; k < v->N && v->N > 1; k++) {
            t->chunk_rows[k * v->ep + e] =
                f->rows[k] - (k == 0 ? (double)v->small.shared * rec->tokens : 0);
            t->chunk_active[k * v->ep + e] = f->active[k];
        }
    }
}

static void add_rows(double *sum, const double *rows, int ep)
{
    for (size_t i = 0; i < (size_t)ep * ep; i++)
        sum[i] += rows[i];
}

/* The deduplicated hops' exchanges (hop[h]: rows with their metadata; back[h]: their return) and
 * every rank's bytes per phase and link class, from the hops' rows and returns. */
static void dedup_hops(struct vexec *v, struct mp_vtraffic *t, int H, double *const *hop,
                       double *const *back)
{
    int ep = v->ep, tp = v->tp, gpn = v->cl->gpus_per_node;
    double meta = mp_dedup_meta_bytes((enum mp_dedup)v->pt->dedup, v->small.topk);
    double drow = v->dispatch_row_bytes + meta, rb = v->row_bytes;
    t->dedup_hops = H;
    for (int h = 0; h < H; h++) {
        mp_vexchange_bytes_of(hop[h], ep, tp, gpn, drow, drow, &t->hop[h], NULL);
        mp_vexchange_bytes_of(back[h], ep, tp, gpn, rb, rb, &t->back[h], NULL);
    }
    t->a2a = t->hop[0];
    for (int p = 0; p < ep; p++) {
        double di = 0, dx = 0, ci = 0, cx = 0;
        for (int h = 0; h < H; h++)
            for (int q = 0; q < ep; q++) {
                int same = mp_dedup_node_of(q, tp, gpn) == mp_dedup_node_of(p, tp, gpn);
                double out = hop[h][(size_t)p * ep + q] * drow;
                double ret = back[h][(size_t)p * ep + q] * rb;
                *(same ? &di : &dx) += q == p ? 0 : out;
                *(same ? &ci : &cx) += q == p ? 0 : ret;
            }
        t->dispatch_intra[p] = di;
        t->dispatch_inter[p] = dx;
        t->combine_intra[p] = ci;
        t->combine_inter[p] = cx;
        t->bytes_sent[p] = di + dx + ci + cx;
    }
}

/* Draw d's exchanges from its log. The dispatch's exchanges come before the combine's; a
 * pipelined mode starts chunk k's dispatch in request slot 2k and its combine in 2k + 1, and node
 * dedup's intra-node forward and its return are chunk k's blocking exchanges in the pipeline, in
 * chunk order; metadata rows (the traced ranks' meta_row bytes) travel apart. MP_OK, or
 * MP_ERR_RUNTIME (a log that fits none of these, out of memory). */
static int fill_exchanges(struct vexec *v, int d)
{
    struct mp_vtraffic *t = &v->t[d];
    struct xlog *lg = &v->logs[d];
    int ep = v->ep, tp = v->tp, gpn = v->cl->gpus_per_node, N = v->N;
    double rb = v->row_bytes, drb = v->dispatch_row_bytes;
    for (int e = 0; e < ep; e++)
        if (lg->next[e] != lg->n) {
            mp_error("internal error: traced EP rank %d made %d exchanges of rows, rank 0 %d", e,
                     lg->next[e], lg->n);
            return MP_ERR_RUNTIME;
        }
    t->count_exchange = lg->counted_first[0];
    struct xentry *rows[4 * MP_MAX_CHUNKS + 4];
    int n = 0;
    for (int i = 0; i < lg->n; i++)
        if (lg->e[i].row_bytes != v->meta_row) {
            if (n == (int)(sizeof rows / sizeof *rows))
                goto odd;
            rows[n++] = &lg->e[i];
        }
    size_t cells = (size_t)ep * ep;
    int dedup = v->pt->dedup != MP_DEDUP_PAIR, H = v->pt->dedup == MP_DEDUP_NODE ? 2 : 1;
    if (!dedup && N == 1) {
        if (n < 1)
            goto odd;
        mp_vexchange_bytes_of(rows[0]->rows, ep, tp, gpn, rb, drb, &t->a2a, t);
        return MP_OK;
    }
    if (dedup && N == 1) {
        H = n / 2;
        if (n != 2 * H || H < 1 || H > 2)
            goto odd;
        double *hop[2], *back[2];
        for (int h = 0; h < H; h++) {
            hop[h] = rows[h]->rows;
            back[h] = rows[2 * H - 1 - h]->rows;
        }
        dedup_hops(v, t, H, hop, back);
        return MP_OK;
    }
    /* pipelined: each chunk's hops out and back */
    double *sum = calloc(4 * cells, sizeof *sum);
    if (dedup && (!(t->chunk_hop = calloc(2 * (size_t)N, sizeof *t->chunk_hop)) ||
                  !(t->chunk_back = calloc(2 * (size_t)N, sizeof *t->chunk_back))))
        free(sum), sum = NULL;
    if (!sum) {
        mp_error("out of memory tracing exchanges");
        return MP_ERR_RUNTIME;
    }
    int inner = 0, seen = 0;
    for (int i = 0; i < n; i++) {
        struct xentry *x = rows[i];
        int k = x->slot / 2, back = x->slot % 2, h = 0;
        if (x->slot < 0) { /* node's forward of chunk k, then its return */
            if (!dedup || H < 2 || inner >= 2 * N)
                goto odd_free;
            k = inner / 2;
            back = inner++ % 2;
            h = 1;
        }
        if (k >= N)
            goto odd_free;
        seen++;
        if (!dedup) {
            if (!back) {
                add_rows(sum, x->rows, ep);
                mp_vexchange_bytes_of(x->rows, ep, tp, gpn, rb, rb, &t->chunk_a2a[k], NULL);
            }
            continue;
        }
        struct mp_vexchange *cx = back ? &t->chunk_back[2 * k + h] : &t->chunk_hop[2 * k + h];
        mp_vexchange_bytes_of(x->rows, ep, tp, gpn, back ? rb : drb, back ? rb : drb, cx, NULL);
        add_rows(sum + (size_t)(2 * h + back) * cells, x->rows, ep);
    }
    if (seen != (dedup ? 2 * H * N : 2 * N))
        goto odd_free;
    if (!dedup) {
        mp_vexchange_bytes_of(sum, ep, tp, gpn, rb, drb, &t->a2a, t);
    } else {
        double *hop[2] = {sum, sum + 2 * cells}, *back[2] = {sum + cells, sum + 3 * cells};
        dedup_hops(v, t, H, hop, back);
        double meta = mp_dedup_meta_bytes((enum mp_dedup)v->pt->dedup, v->small.topk);
        for (int h = 0; h < H; h++) { /* the metadata alone, ahead of the pipeline */
            double f = meta / (drb + meta);
            t->meta[h] = t->hop[h];
            t->meta[h].intra_max *= f;
            t->meta[h].inter_max *= f;
        }
    }
    free(sum);
    return MP_OK;
odd_free:
    free(sum);
odd:
    mp_error("internal error: the traced ranks' %d exchanges of rows in draw %d fit no dispatch "
             "of %d chunks (%s)", n, d, N, mp_dedup_choices[v->pt->dedup]);
    return MP_ERR_RUNTIME;
}

/* With a cache, the experts each EP rank's FFN read in draw d and their rows (TP rank 0's). */
static int fill_used(struct vexec *v, int d)
{
    struct mp_vtraffic *t = &v->t[d];
    size_t cells = (size_t)v->ep * v->Lm;
    t->max_local = v->Lm;
    t->used = malloc(cells);
    t->used_rows = malloc(cells * sizeof *t->used_rows);
    if (!t->used || !t->used_rows) {
        mp_error("out of memory tracing %d virtual ranks", v->tp * v->ep);
        return MP_ERR_RUNTIME;
    }
    for (int p = 0; p < v->ep; p++) {
        const double *rows = v->expert_rows + ((size_t)p * v->tp * v->P + d) * v->Lm;
        for (int l = 0; l < v->Lm; l++) {
            t->used_rows[(size_t)p * v->Lm + l] = rows[l];
            t->used[(size_t)p * v->Lm + l] = rows[l] > 0;
        }
    }
    return MP_OK;
}

size_t mp_vexec_small_model(const struct mp_model *m, int tp, struct mp_model *small)
{
    *small = *m;
    small->ffn = TRACED_DL * tp;
    /* rows of H that no metadata row matches in bytes, bf16 or fp8 (a packed fp8 row of H is
     * about H bytes; the layer's rows H · 4) */
    size_t meta_row = (size_t)m->topk * sizeof(struct mp_dedup_meta);
    small->hidden = TRACED_HIDDEN;
    while ((size_t)small->hidden * 4 == meta_row ||
           mp_dispatch_row_bytes(MP_DTYPE_FP8, small->hidden, small->hidden * 4.0) ==
               (double)meta_row)
        small->hidden++;
    return meta_row;
}

int mp_vexec_build(const struct mp_cluster *cl, const struct mp_model *m, int tp, int ep,
                   uint64_t seed, const struct mp_point *pt, struct mp_vtraffic **out,
                   int *ndraws)
{
    int rc;
    char why[256];
    if (!mp_compute_check(&mp_compute_model_rank, why, sizeof why) ||
        !mp_comm_check(&mp_comm_model_rank, why, sizeof why)) {
        mp_error("internal error: a traced rank's backend table %s", why);
        return MP_ERR_RUNTIME;
    }
    int caching = pt->cache.slots > 0;
    int N = tp * ep, P = mp_routing_pool_size(pt->warmup, pt->iters, caching);
    struct vexec v = {.cl = cl, .pt = pt, .run = *pt, .replay = *pt->routing, .small = *m,
                      .seed = seed, .tp = tp, .ep = ep, .P = P,
                      .N = pt->overlap > 1 ? pt->overlap : 1,
                      .Lm = pt->placement->max_local > 0 ? pt->placement->max_local : 1};
    /* gate routing has no activations to route on the model: the model's draws replace the gate
     * (mp_routing_draw gives a gate routing uniform ones, group-limited alike), as the traffic
     * builders' draws do (core/cluster_model/vdraws.c) */
    if (mp_routing_is_gate(pt->routing)) {
        v.replay.kind = MP_ROUTE_UNIFORM;
        v.run.routing = &v.replay;
    }
    v.meta_row = mp_vexec_small_model(m, tp, &v.small);
    v.row_bytes = m->hidden * cl->elem_bytes;
    v.dispatch_row_bytes = mp_dispatch_row_bytes((enum mp_dtype)pt->dispatch_dtype, m->hidden,
                                                 v.row_bytes);
    struct mp_vworld *w = NULL;
    struct rank_run *runs = calloc((size_t)N, sizeof *runs);
    void **args = calloc((size_t)N, sizeof *args);
    v.runs = runs;
    v.t = calloc((size_t)P, sizeof *v.t);
    v.logs = calloc((size_t)P, sizeof *v.logs);
    v.recs = calloc((size_t)N * P, sizeof *v.recs);
    v.ffns = calloc((size_t)N * P, sizeof *v.ffns);
    if (caching)
        v.expert_rows = calloc((size_t)N * P * v.Lm, sizeof *v.expert_rows);
    rc = MP_ERR_RUNTIME;
    if (!runs || !args || !v.t || !v.logs || !v.recs || !v.ffns || (caching && !v.expert_rows)) {
        mp_error("out of memory tracing %d virtual ranks", N);
        goto out;
    }
    for (int d = 0; d < P; d++)
        if (mp_vtraffic_start(&v.t[d], cl, m, tp, ep, pt) != MP_OK ||
            !(v.logs[d].next = calloc((size_t)ep, sizeof *v.logs[d].next)) ||
            !(v.logs[d].counted_first = calloc((size_t)ep, sizeof *v.logs[d].counted_first))) {
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
    rc = v.failed ? MP_ERR_RUNTIME : MP_OK;
    for (int d = 0; d < P && rc == MP_OK; d++) {
        fill_ranks(&v, d);
        rc = fill_exchanges(&v, d);
        if (rc == MP_OK && caching)
            rc = fill_used(&v, d);
    }
out:
    mp_vworld_free(w);
    if (rc == MP_OK) {
        *out = v.t;
        *ndraws = P;
    } else {
        mp_vtraffic_free(v.t, P);
    }
    for (int d = 0; d < P && v.logs; d++) {
        for (int i = 0; i < v.logs[d].n; i++)
            free(v.logs[d].e[i].rows);
        free(v.logs[d].e);
        free(v.logs[d].next);
        free(v.logs[d].counted_first);
    }
    free(v.logs);
    free(runs);
    free(args);
    free(v.recs);
    free(v.ffns);
    free(v.expert_rows);
    return rc;
}
