/* vtraffic.c - a routing draw's traffic on virtual ranks: its per-rank arrays, the exchange
 * rounds rows between ranks make, from their ep × ep matrices or from the per-rank sums the fast
 * path keeps (with its scratch, when it applies, and the re-pricing of its draws in another
 * dispatch dtype); see vtraffic.h. */
#include "vtraffic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "dispatch_plan.h"
#include "dtype.h"
#include "error.h"
#include "routing.h"

void mp_vtraffic_free(struct mp_vtraffic *t, int ndraws)
{
    for (int d = 0; t && d < ndraws; d++) {
        free(t[d].tokens); /* one block holds every per-rank array */
        free(t[d].active);
        free(t[d].chunk_rows);
        free(t[d].chunk_active);
        free(t[d].chunk_a2a);
        free(t[d].chunk_hop);
        free(t[d].chunk_back);
        free(t[d].used);
        free(t[d].used_rows);
    }
    free(t);
}

static int vtraffic_alloc(struct mp_vtraffic *t, int ep, int nchunks)
{
    t->ep = ep;
    double *blk = calloc((size_t)ep * 13, sizeof *blk);
    t->active = calloc((size_t)ep, sizeof *t->active);
    t->nchunks = nchunks;
    if (nchunks > 1) {
        t->chunk_rows = calloc((size_t)nchunks * ep, sizeof *t->chunk_rows);
        t->chunk_active = calloc((size_t)nchunks * ep, sizeof *t->chunk_active);
        t->chunk_a2a = calloc((size_t)nchunks, sizeof *t->chunk_a2a);
    }
    if (!blk || !t->active ||
        (nchunks > 1 && (!t->chunk_rows || !t->chunk_active || !t->chunk_a2a))) {
        free(blk);
        return MP_ERR_RUNTIME;
    }
    t->tokens = blk;
    t->rows = blk + ep;
    t->ffn_rows = blk + 2 * ep;
    t->pairs = blk + 3 * ep;
    t->local = blk + 4 * ep;
    t->bytes_sent = blk + 5 * ep;
    t->dropped = blk + 6 * ep;
    t->dispatch_intra = blk + 7 * ep;
    t->dispatch_inter = blk + 8 * ep;
    t->combine_intra = blk + 9 * ep;
    t->combine_inter = blk + 10 * ep;
    t->dispatch_rows_intra = blk + 11 * ep;
    t->dispatch_rows_inter = blk + 12 * ep;
    return MP_OK;
}


/* The exchange that `rows_to` ([ep·ep] rows from rank e to rank p at e·ep + p) makes: the largest
 * per-rank volume on each link class and the incast across nodes; per rank, when `bytes` is not
 * NULL, the bytes dispatch and combine move to other ranks in its bytes_sent and, per phase and
 * link class, its dispatch_/combine_ intra/inter (the dispatch sends what rows_to says in rows of
 * dispatch_row_bytes, the combine sends back what came in, in rows of row_bytes). */

/* The ranks [*lo, *hi) on the node of EP rank p: nodes hold consecutive EP ranks (the node of rank
 * q is ⌊q·tp / gpn⌋, rising with q, so q shares p's node np when np·gpn ≤ q·tp < (np + 1)·gpn).
 * Called with p rising from a range of [0, 0), it recomputes the range only when p leaves it. */
void mp_vnode_range(int p, int ep, int tp, int gpn, int *lo, int *hi)
{
    if (p < *hi)
        return;
    long np = (long)p * tp / gpn; /* node of EP rank p's first TP rank */
    long h = ((np + 1) * gpn + tp - 1) / tp;
    *lo = (int)((np * gpn + tp - 1) / tp);
    *hi = h < ep ? (int)h : ep;
}

/* Ranks whose per-rank sums exchange_of keeps on the stack; more take the heap. */
#define EXCHANGE_STACK_RANKS 256

/* Sender row `row`'s rows into receivers [a, b) on other nodes: their bytes, and one sender more
 * for each that gets any. */
static void add_inter(const double *restrict row, double row_bytes, double *restrict sum,
                      double *restrict senders, int a, int b)
{
    for (int p = a; p < b; p++) {
        double rin = row[p] * row_bytes;
        sum[p] += rin;
        senders[p] += rin > 0 ? 1.0 : 0.0;
    }
}

/* Sender row `row`'s rows into receivers [a, b) on its node: their bytes. */
static void add_intra(const double *restrict row, double row_bytes, double *restrict sum, int a,
                      int b)
{
    for (int p = a; p < b; p++)
        sum[p] += row[p] * row_bytes;
}

/* The sums of what EP ranks p .. p + n − 1 (n ≤ 4, all on the node of ranks [lo, hi)) send: each
 * rank's rows to its node and to other nodes in row_bytes (out_*) and in dispatch_row_bytes
 * (sent_*), each sum over the peers in ascending order; the n ranks' sums advance together. A
 * rank's rows to itself stay off the links (they add +0 to sums of non-negative terms). */
static void out_sums(const double *rows_to, int ep, int p, int n, int lo, int hi,
                     double row_bytes, double dispatch_row_bytes, double *out_intra,
                     double *out_inter, double *sent_intra, double *sent_inter)
{
    double oi[4] = {0, 0, 0, 0}, ox[4] = {0, 0, 0, 0}, si[4] = {0, 0, 0, 0},
           sx[4] = {0, 0, 0, 0};
    const double *r[4];
    for (int j = 0; j < 4; j++)
        r[j] = rows_to + (size_t)(p + (j < n ? j : 0)) * ep;
    for (int q = 0; q < lo; q++)
        for (int j = 0; j < 4; j++) {
            ox[j] += r[j][q] * row_bytes;
            sx[j] += r[j][q] * dispatch_row_bytes;
        }
    for (int q = lo; q < hi; q++)
        for (int j = 0; j < 4; j++) {
            double v = q == p + j ? 0 : r[j][q];
            oi[j] += v * row_bytes;
            si[j] += v * dispatch_row_bytes;
        }
    for (int q = hi; q < ep; q++)
        for (int j = 0; j < 4; j++) {
            ox[j] += r[j][q] * row_bytes;
            sx[j] += r[j][q] * dispatch_row_bytes;
        }
    for (int j = 0; j < n; j++) {
        out_intra[p + j] = oi[j];
        out_inter[p + j] = ox[j];
        sent_intra[p + j] = si[j];
        sent_inter[p + j] = sx[j];
    }
}

static void exchange_of(const double *rows_to, int ep, int tp, int gpn, double row_bytes,
                        double dispatch_row_bytes, struct mp_vexchange *x,
                        struct mp_vtraffic *bytes)
{
    *x = (struct mp_vexchange){0};
    /* per receiver: the sums over its senders, filled sender by sender (ascending, as a loop over
     * the senders of one receiver adds them) so the inner loops run over consecutive receivers;
     * per sender: the sums over its receivers */
    double stack[7 * EXCHANGE_STACK_RANKS], *heap = NULL, *in_intra = stack;
    if (ep > EXCHANGE_STACK_RANKS) {
        heap = malloc((size_t)ep * 7 * sizeof *heap);
        if (!heap) { /* no sums without memory: an exchange of nothing */
            for (int p = 0; p < ep && bytes; p++)
                bytes->bytes_sent[p] = bytes->dispatch_intra[p] = bytes->dispatch_inter[p] =
                    bytes->combine_intra[p] = bytes->combine_inter[p] = 0;
            return;
        }
        in_intra = heap;
    }
    double *in_inter = in_intra + ep, *senders = in_inter + ep, *out_intra = senders + ep;
    double *out_inter = out_intra + ep, *sent_intra = out_inter + ep, *sent_inter = sent_intra + ep;
    for (int p = 0; p < ep; p++)
        in_intra[p] = in_inter[p] = senders[p] = 0;
    int lo = 0, hi = 0;
    for (int q = 0; q < ep; q++) { /* sender q: its rows into every receiver's sums */
        mp_vnode_range(q, ep, tp, gpn, &lo, &hi);
        const double *row = rows_to + (size_t)q * ep;
        add_inter(row, row_bytes, in_inter, senders, 0, lo);
        add_intra(row, row_bytes, in_intra, lo, q);
        add_intra(row, row_bytes, in_intra, q + 1, hi);
        add_inter(row, row_bytes, in_inter, senders, hi, ep);
    }
    lo = hi = 0;
    for (int p = 0; p < ep;) { /* up to four senders of one node at a time */
        mp_vnode_range(p, ep, tp, gpn, &lo, &hi);
        int n = hi - p < 4 ? hi - p : 4;
        out_sums(rows_to, ep, p, n, lo, hi, row_bytes, dispatch_row_bytes, out_intra, out_inter,
                 sent_intra, sent_inter);
        p += n;
    }
    lo = hi = 0;
    for (int p = 0; p < ep; p++) {
        mp_vnode_range(p, ep, tp, gpn, &lo, &hi);
        x->uses_intra |= hi - lo > 1;
        x->uses_inter |= lo > 0 || hi < ep;
        x->intra_max = fmax(x->intra_max, fmax(in_intra[p], out_intra[p]));
        x->inter_max = fmax(x->inter_max, fmax(in_inter[p], out_inter[p]));
        x->incast = (int)senders[p] > x->incast ? (int)senders[p] : x->incast;
        if (bytes) {
            bytes->bytes_sent[p] = sent_intra[p] + sent_inter[p] + in_intra[p] + in_inter[p];
            bytes->dispatch_intra[p] = sent_intra[p];
            bytes->dispatch_inter[p] = sent_inter[p];
            bytes->combine_intra[p] = in_intra[p];
            bytes->combine_inter[p] = in_inter[p];
        }
    }
    free(heap);
}

void mp_vexchange_of(const double *rows_to, int ep, int tp, int gpn, double row_bytes,
                     struct mp_vexchange *x)
{
    exchange_of(rows_to, ep, tp, gpn, row_bytes, row_bytes, x, NULL);
}

void mp_vsum_exchange_of(const struct mp_vsum_max *mx, const int *node, int ep, double row_bytes,
                         struct mp_vexchange *x)
{
    /* exchange_of's maxima of sums of whole numbers of bytes: a rank's largest count times
     * row_bytes, the same double */
    x->intra_rows = mx->intra;
    x->inter_rows = mx->inter;
    x->intra_max = (double)mx->intra * row_bytes;
    x->inter_max = (double)mx->inter * row_bytes;
    x->incast = mx->incast;
    /* the link classes depend on the layout alone: a node of two ranks or more, and two nodes */
    x->uses_intra = 0;
    for (int p = 1; p < ep && !x->uses_intra; p++)
        x->uses_intra = node[p] == node[p - 1];
    x->uses_inter = node[ep - 1] != node[0];
}

void mp_vsum_exchange(const struct mp_vsum *s, const int *node, int ep, double row_bytes,
                      int back, struct mp_vexchange *x)
{
    /* returning the rows swaps what each rank sends and receives, which leaves the largest of
     * the two alike and makes the receivers the incast */
    struct mp_vsum_max mx = {0, 0, 0};
    for (int p = 0; p < ep; p++)
        mp_vsum_max_add(&mx, &s[p], back);
    mp_vsum_exchange_of(&mx, node, ep, row_bytes, x);
}

void mp_vsum_clear(struct mp_vsum *s, int ep)
{
    for (int p = 0; p < ep; p++)
        s[p] = (struct mp_vsum){.mark = -1};
}

double mp_vexchange_us(const struct mp_cluster *cl, const struct mp_vexchange *x)
{
    return mp_cost_exchange_us(cl, x->intra_max, x->inter_max, x->uses_intra, x->uses_inter,
                                x->incast);
}


int mp_vtraffic_start(struct mp_vtraffic *t, const struct mp_cluster *cl,
                      const struct mp_model *m, int tp, int ep, const struct mp_point *pt)
{
    t->tp = tp;
    t->gate = mp_routing_is_gate(pt->routing);
    t->straggle_rank = pt->straggle_rank;
    t->straggle_us = pt->straggle_us > 0 ? pt->straggle_us : 0;
    t->weight_dtype = pt->weight_dtype;
    t->gemm = pt->gemm;
    t->dispatch_scale = mp_dispatch_row_bytes((enum mp_dtype)pt->dispatch_dtype, m->hidden,
                                              m->hidden * cl->elem_bytes) /
                        (m->hidden * cl->elem_bytes);
    return vtraffic_alloc(t, ep, pt->overlap > 1 ? pt->overlap : 1);
}

void mp_vexchange_bytes_of(const double *rows_to, int ep, int tp, int gpn, double row_bytes,
                           double dispatch_row_bytes, struct mp_vexchange *x,
                           struct mp_vtraffic *t)
{
    exchange_of(rows_to, ep, tp, gpn, row_bytes, dispatch_row_bytes, x, t);
}

/* Whether whole numbers of rows of `a` and of `b` bytes sum exactly in doubles, up to `rows` rows:
 * both row sizes whole numbers of bytes and rows·max(a, b) below 2^53. Then a sum of rows·bytes
 * products is the same double in any order, and equal to bytes · (the rows' whole-number sum). */
static int exact_row_sums(double a, double b, double rows)
{
    double most = a > b ? a : b;
    return a == floor(a) && b == floor(b) && a > 0 && b > 0 && rows * most < 9007199254740992.0;
}

int mp_vtraffic_fast_ok(const struct mp_cluster *cl, const struct mp_model *m,
                        const struct mp_point *pt)
{
    double rb = m->hidden * cl->elem_bytes, pairs = 2.0 * (double)pt->batch * pt->seq * m->topk;
    double drb = mp_dispatch_row_bytes((enum mp_dtype)pt->dispatch_dtype, m->hidden, rb);
    double meta = mp_dedup_meta_bytes((enum mp_dedup)pt->dedup, m->topk);
    return meta == floor(meta) && exact_row_sums(rb, drb, pairs) &&
           exact_row_sums(rb, drb + meta, pairs);
}

void mp_vfast_free(struct mp_vfast *f)
{
    free(f->sum);
    free(f->node);
    free(f->group);
    free(f->seen);
    free(f->chunk_cells);
    free(f->dst);
    memset(f, 0, sizeof *f);
}

int mp_vfast_alloc(struct mp_vfast *f, const struct mp_point *pt, int tp, int ep, int gpn, int K)
{
    const struct mp_placement *pl = pt->placement;
    int N = pt->overlap > 1 ? pt->overlap : 1, L = pl->max_local > 0 ? pl->max_local : 1;
    size_t rounds = 2 + 2 * (size_t)N, cells = (size_t)ep * L;
    memset(f, 0, sizeof *f);
    f->sum = malloc(rounds * ep * sizeof *f->sum);
    f->node = malloc(3 * (size_t)ep * sizeof *f->node);
    f->group = N > 1 ? malloc(cells * sizeof *f->group) : NULL;
    f->seen = malloc(2 * (size_t)ep * sizeof *f->seen);
    size_t pairs = ((size_t)(pt->batch * pt->seq) / ep + 1) * K; /* the most of one rank */
    f->dst = malloc(2 * pairs * sizeof *f->dst);
    f->lix = f->dst ? f->dst + pairs : NULL;
    if (N > 1 && pt->dedup != MP_DEDUP_PAIR)
        f->chunk_cells = calloc((size_t)N * cells, sizeof *f->chunk_cells);
    if (!f->sum || !f->node || (N > 1 && !f->group) || !f->seen || !f->dst ||
        (N > 1 && pt->dedup != MP_DEDUP_PAIR && !f->chunk_cells))
        return MP_ERR_RUNTIME;
    f->node_lo = f->node + ep;
    f->node_n = f->node_lo + ep;
    mp_vsum_clear(f->sum, (int)(rounds * ep));
    int lo = 0, hi = 0;
    for (int p = 0; p < ep; p++) {
        mp_vnode_range(p, ep, tp, gpn, &lo, &hi);
        f->node[p] = mp_dedup_node_of(p, tp, gpn);
        f->node_lo[p] = lo;
        f->node_n[p] = hi - lo;
        for (int l = 0; l < L && N > 1; l++)
            f->group[(size_t)p * L + l] = mp_plan_expert_group(l, mp_placement_nlocal(pl, p), N);
    }
    return MP_OK;
}

/* Exchange x's largest rows priced in rows of row_bytes, as mp_vsum_exchange prices them. */
static void reprice(struct mp_vexchange *x, double row_bytes)
{
    x->intra_max = (double)x->intra_rows * row_bytes;
    x->inter_max = (double)x->inter_rows * row_bytes;
}

int mp_vtraffic_retype(struct mp_vtraffic *t, int P, const struct mp_cluster *cl,
                       const struct mp_model *m, const struct mp_point *pt)
{
    for (int d = 0; d < P; d++)
        if (!t[d].counted)
            return MP_ERR_USAGE;
    if (!mp_vtraffic_fast_ok(cl, m, pt))
        return MP_ERR_USAGE;
    double rb = m->hidden * cl->elem_bytes, meta = mp_dedup_meta_bytes(pt->dedup, m->topk);
    double drb = mp_dispatch_row_bytes((enum mp_dtype)pt->dispatch_dtype, m->hidden, rb);
    for (int d = 0; d < P; d++) {
        struct mp_vtraffic *x = &t[d];
        /* as mp_vtraffic_start, pair_finish, dedup_finish and mp_vtraffic_dedup_pipelined */
        x->dispatch_scale = mp_dispatch_row_bytes((enum mp_dtype)pt->dispatch_dtype, m->hidden,
                                                  m->hidden * cl->elem_bytes) /
                            (m->hidden * cl->elem_bytes);
        double out = x->dedup_hops ? drb + meta : drb;
        for (int h = 0; h < x->dedup_hops; h++)
            reprice(&x->hop[h], out);
        if (x->dedup_hops)
            x->a2a = x->hop[0];
        for (int p = 0; p < x->ep; p++) {
            x->dispatch_intra[p] = x->dispatch_rows_intra[p] * out;
            x->dispatch_inter[p] = x->dispatch_rows_inter[p] * out;
            x->bytes_sent[p] = x->dispatch_intra[p] + x->dispatch_inter[p] + x->combine_intra[p] +
                               x->combine_inter[p];
        }
        for (int h = 0; h < x->dedup_hops && x->nchunks > 1; h++) {
            double f = meta / (drb + meta);
            x->meta[h] = x->hop[h];
            x->meta[h].intra_max *= f;
            x->meta[h].inter_max *= f;
        }
        for (int k = 0; k < 2 * x->nchunks && x->chunk_hop; k++)
            reprice(&x->chunk_hop[k], drb);
    }
    return MP_OK;
}
