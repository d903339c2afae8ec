/* vtraffic_modes.c - each dispatch mode's traffic counted straight from a routing draw (the
 * dispatch modes' model_traffic hooks, declared in vlayer.h): what its measured layer moves and
 * computes, equal to the traced ranks' to the bit (tests/unit/test_vexec.c); the dynamic forms'
 * exchanges as per-rank sums kept while routing where those are exact (the fast path), else on
 * the ep × ep matrices. */
#include "vlayer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "dispatch.h"
#include "dtype.h"
#include "error.h"
#include "padded.h"
#include "dispatch_plan.h"
#include "dispatch_plan_dedup.h"
#include "routing.h"
#include "vtraffic.h"

/* The bytes of one dispatched row of the draw's point: --dispatch-dtype's (core/workload/dtype.h). */
static double dispatch_row_bytes(const struct mp_vdraw *d)
{
    return mp_dispatch_row_bytes((enum mp_dtype)d->pt->dispatch_dtype, d->m->hidden,
                                 d->m->hidden * d->cl->elem_bytes);
}

/* The exchanges of a deduplicated dispatch (docs/METRICS.md, "Deduplicated dispatch"): each hop's
 * rows from mp_dedup_count with their metadata, the combine's return of each hop without it, and
 * every rank's bytes on the wire; the FFN rows are the plan's (every pair still runs). */
static void dedup_exchanges(struct mp_vtraffic *t, const struct mp_vdraw *d)
{
    int ep = t->ep, tp = t->tp, gpn = d->cl->gpus_per_node, K = d->m->topk;
    enum mp_dedup mode = (enum mp_dedup)d->pt->dedup;
    double row_bytes = d->m->hidden * d->cl->elem_bytes, meta = mp_dedup_meta_bytes(mode, K);
    double drow = dispatch_row_bytes(d);
    size_t cells = (size_t)ep * ep;
    struct mp_dedup_counts *c = d->dedup;
    mp_dedup_count(mode, d->pt->placement, d->ids, d->tokens, K, tp, gpn, c);
    t->dedup_hops = c->hops;
    for (int h = 0; h < c->hops; h++) {
        const double *rows = c->rows + h * cells;
        mp_vexchange_bytes_of(rows, ep, tp, gpn, drow + meta, drow + meta, &t->hop[h], NULL);
        for (int e = 0; e < ep; e++) /* the combine: p returns to e what e sent it */
            for (int p = 0; p < ep; p++)
                d->rows_to[p * ep + e] = rows[e * ep + p];
        mp_vexchange_bytes_of(d->rows_to, ep, tp, gpn, row_bytes, row_bytes, &t->back[h], NULL);
    }
    t->a2a = t->hop[0];
    /* each rank's bytes per phase and link class: in dispatch the rows it sends in every hop
     * (with their metadata), in combine the rows it returns (what it received) */
    for (int p = 0; p < ep; p++) {
        double di = 0, dx = 0, ci = 0, cx = 0;
        for (int h = 0; h < c->hops; h++)
            for (int q = 0; q < ep; q++) {
                const double *rows = c->rows + h * cells;
                int same = mp_dedup_node_of(q, tp, gpn) == mp_dedup_node_of(p, tp, gpn);
                double out = rows[p * ep + q] * (drow + meta);
                double back = rows[q * ep + p] * row_bytes;
                *(same ? &di : &dx) += q == p ? 0 : out;
                *(same ? &ci : &cx) += q == p ? 0 : back;
            }
        t->dispatch_intra[p] = di;
        t->dispatch_inter[p] = dx;
        t->combine_intra[p] = ci;
        t->combine_inter[p] = cx;
        t->bytes_sent[p] = di + dx + ci + cx;
    }
}

/* The destination of source rank `src`'s pair (token `token`, expert `x`) as mp_placement_dest
 * picks it, and in *li its local index there, from the placement's holder lists and `holder_li`
 * (struct mp_vdraw): src itself when it holds x, else the holders on src's node (all holders when
 * none is there), the token choosing one by token mod their number. The holders of an expert are
 * in ascending rank order (struct mp_placement), so an expert every rank holds has src's copy at
 * h0 + src, and one many ranks hold is searched for src by bisection before the scan. */
static int route_pair(const struct mp_placement *pl, const int *holder_li, int src, int x,
                      long token, int *li)
{
    int h0 = pl->holder_off[x], h1 = pl->holder_off[x + 1], m = 0;
    if (h1 - h0 == 1) { /* one copy: whoever asks, it serves */
        *li = holder_li[h0];
        return pl->holders[h0];
    }
    if (h1 - h0 == pl->ep) { /* a copy on every rank: src serves it */
        *li = holder_li[h0 + src];
        return src;
    }
    for (int a = h0, b = h1; h1 - h0 > 8 && a < b;) { /* src among many holders */
        int mid = a + (b - a) / 2;
        if (pl->holders[mid] == src) {
            *li = holder_li[mid];
            return src;
        }
        if (pl->holders[mid] < src)
            a = mid + 1;
        else
            b = mid;
    }
    for (int h = h0; h < h1; h++) {
        int q = pl->holders[h];
        if (q == src) {
            *li = holder_li[h];
            return src;
        }
        m += !pl->node || pl->node[q] == pl->node[src];
    }
    long n = m > 0 ? m : h1 - h0, i = token % n;
    if (i < 0)
        i += n;
    for (int h = h0; h < h1; h++)
        if ((m == 0 || !pl->node || pl->node[pl->holders[h]] == pl->node[src]) && i-- == 0) {
            *li = holder_li[h];
            return pl->holders[h];
        }
    *li = -1; /* not reached for a built placement */
    return src;
}

/* Each EP rank's rows, FFN rows and active experts from exp_rows [ep·L] (the shared experts on
 * its own tokens), and with N > 1 chunks each chunk's (the shared experts ride with chunk 0). */
static void rank_rows(struct mp_vtraffic *t, const double *exp_rows,
                      const struct mp_placement *pl, int L, int N, int shared)
{
    int ep = t->ep;
    for (int p = 0; p < ep; p++) {
        double rows = 0;
        int active = 0, sh = shared > 0 && t->tokens[p] > 0 ? shared : 0;
        for (int l = 0; l < L; l++) {
            rows += exp_rows[p * L + l];
            active += exp_rows[p * L + l] > 0;
        }
        t->rows[p] = rows;
        t->ffn_rows[p] = rows + (double)shared * t->tokens[p];
        t->active[p] = active + sh;
        for (int g = 0; g < N && N > 1; g++) {
            t->chunk_rows[g * ep + p] = 0;
            t->chunk_active[g * ep + p] = g == 0 ? sh : 0;
        }
        for (int l = 0; l < L && l < mp_placement_nlocal(pl, p) && N > 1; l++) {
            int g = mp_plan_expert_group(l, mp_placement_nlocal(pl, p), N);
            t->chunk_rows[g * ep + p] += exp_rows[p * L + l];
            t->chunk_active[g * ep + p] += exp_rows[p * L + l] > 0;
        }
    }
}

/* The destination of source e's pair (token tok, expert x), and in *li its local index there, as
 * mp_placement_dest and mp_placement_local_index give them: from the draw's sole holders and
 * holder lists when it has them. */
static int dest_of(const struct mp_vdraw *d, int e, int x, long tok, int *li)
{
    if (d->sole && d->sole[x].dest >= 0) {
        *li = d->sole[x].li;
        return d->sole[x].dest;
    }
    if (d->holder_li)
        return route_pair(d->pt->placement, d->holder_li, e, x, tok, li);
    int p = mp_placement_dest(d->pt->placement, e, x, tok);
    *li = mp_placement_local_index(d->pt->placement, p, x);
    return p;
}

/* One draw on the fast path: the point's form and where its counts go. */
struct walk {
    const struct mp_vdraw *d;
    struct mp_vfast *f;
    long *cells;       /* [ep·L] every (destination, local expert) cell's pairs */
    int ep, L, N, K;   /* N: the point's chunks */
    enum mp_dedup mode;
    int by_token;      /* dedup pipelined: chunks cut from each rank's tokens (f->chunk_cells) */
};

/* Where a walk's deduplicated rows go: hop 0's and hop 1's sums, and the token's chunk's (NULL
 * when the point is not pipelined), with the nodes they are counted on. */
struct dedup_to {
    struct mp_vsum *h0, *h1, *c0, *c1;
    const int *node, *node_lo, *node_n;
    long *seen;
    int ep, node_mode; /* node_mode: --dedup node, else rank */
};

/* The deduplicated rows of source e's pair to rank p ≠ e of token tok, as mp_dedup_count counts
 * them, into the sums of `to`: whether a row goes (the token's first pair for p, the first for
 * p's node) taken as a count of 0 or 1 rather than a branch; the relay p's node gives e (its own
 * place on its node, modulo the ranks of p's node) without a division where that place fits. */
static inline void dedup_pair(const struct dedup_to *to, int e, int p, long tok)
{
    const int *node = to->node;
    long *seen = to->seen;
    int fresh = seen[p] != tok; /* the token's first pair bound for rank p */
    seen[p] = tok;
    if (!to->node_mode || node[p] == node[e]) { /* rank's rows; node's direct rows */
        mp_vsum_addn(to->node_mode ? to->h1 : to->h0, node, e, p, fresh);
        if (to->c0)
            mp_vsum_addn(to->node_mode ? to->c1 : to->c0, node, e, p, fresh);
        return;
    }
    int at = e - to->node_lo[e], n = to->node_n[p];
    int relay = to->node_lo[p] + (at < n ? at : at % n);
    long *sr = &seen[to->ep + relay];
    int once = *sr != tok; /* once per (token, node) over the network */
    *sr = tok;
    mp_vsum_addn(to->h0, node, e, relay, once);
    if (to->c0)
        mp_vsum_addn(to->c0, node, e, relay, once);
    int fwd = fresh & (p != relay); /* forwarded inside the node once per rank */
    mp_vsum_addn(to->h1, node, relay, p, fwd);
    if (to->c1)
        mp_vsum_addn(to->c1, node, relay, p, fwd);
}

/* Source e's pairs (its tokens tok0 .. tok0 + n) routed: each pair's destination and local index
 * there into dst and lix [n·K]. */
static void route_rank(const struct mp_vdraw *d, int e, long tok0, long n, int *dst, int *lix)
{
    int K = d->m->topk;
    const int32_t *ids = d->ids + tok0 * K;
    const struct mp_vsole *sole = d->sole;
    for (long j = 0; j < n * K; j++) {
        int x = ids[j];
        if (sole && sole[x].dest >= 0) {
            dst[j] = sole[x].dest;
            lix[j] = sole[x].li;
        } else {
            dst[j] = dest_of(d, e, x, tok0 + j / K, &lix[j]);
        }
    }
}

/* Source e's np routed pairs (dst, lix) of the undeduplicated dispatch into the layer's exchange
 * (round 0, as mp_vsum_add counts a row, e's own sums kept in locals meanwhile), with N > 1
 * chunks also into the chunk of each pair's expert group at its destination, and every
 * (destination, local expert) cell's pairs. Returns the pairs that stay on e. */
static long count_pairs(const struct walk *w, int e, const int *dst, const int *lix, long np)
{
    struct mp_vsum *sum = w->f->sum;
    const int *node = w->f->node, *group = w->f->group;
    long *cells = w->cells, local = 0, out_intra = 0, out_inter = 0;
    const int L = w->L, N = w->N, ep = w->ep, ne = node[e];
    int receivers = 0;
    for (long j = 0; j < np; j++) {
        int p = dst[j], li = lix[j];
        if (li < L) /* slots past a rank's experts stay empty */
            cells[(size_t)p * L + li]++;
        if (p == e) { /* a rank's rows to itself stay off the links */
            local++;
            continue;
        }
        struct mp_vsum *sp = &sum[p];
        int same = node[p] == ne, first = !same & (sp->mark != e);
        out_intra += same;
        out_inter += !same;
        sp->in[same]++;
        sp->senders += first;
        receivers += first;
        sp->mark = same ? sp->mark : e;
        if (N > 1 && li < L) { /* the pair's chunk: mp_vsum_add with `same` known */
            struct mp_vsum *c = sum + (size_t)(2 + 2 * group[(size_t)p * L + li]) * ep;
            int cfirst = !same & (c[p].mark != e);
            c[e].out[same]++;
            c[p].in[same]++;
            c[p].senders += cfirst;
            c[e].receivers += cfirst;
            c[p].mark = same ? c[p].mark : e;
        }
    }
    sum[e].out[MP_VINTRA] += out_intra;
    sum[e].out[MP_VINTER] += out_inter;
    sum[e].receivers += receivers;
    return local;
}

/* Source e's routed pairs (dst, lix) of tokens tok0 .. tok0 + ntok, chunk k's share of its
 * tokens, deduplicated into the hops' sums (and with by_token chunk k's sums and cells), and
 * every (destination, local expert) cell's pairs. Returns the pairs that stay on e. */
static long count_dedup(const struct walk *w, int e, int k, long tok0, const int *dst,
                        const int *lix, long ntok)
{
    struct mp_vsum *sum = w->f->sum;
    long *cells = w->cells, local = 0;
    const int ep = w->ep, L = w->L, K = w->K;
    long *cc = w->by_token ? w->f->chunk_cells + (size_t)k * ep * L : NULL;
    struct dedup_to to = {.h0 = sum, .h1 = sum + ep, .node = w->f->node,
                          .node_lo = w->f->node_lo, .node_n = w->f->node_n, .seen = w->f->seen,
                          .ep = ep, .node_mode = w->mode == MP_DEDUP_NODE};
    to.c0 = w->by_token ? sum + (size_t)(2 + 2 * k) * ep : NULL;
    to.c1 = to.c0 ? to.c0 + ep : NULL;
    for (long t = 0; t < ntok; t++)
        for (int j = 0; j < K; j++) {
            int p = dst[t * K + j], li = lix[t * K + j];
            if (li < L) {
                cells[(size_t)p * L + li]++;
                if (cc)
                    cc[(size_t)p * L + li]++;
            }
            if (p == e) {
                local++;
                continue;
            }
            dedup_pair(&to, e, p, tok0 + t);
        }
    return local;
}

/* EP rank e's pairs (its tokens tok0 .. tok0 + n) routed (into the walk's scratch, then counted:
 * two short loops instead of one with every pointer live) into the fast path's sums: the layer's
 * exchange (pair, count_pairs) or each deduplicated hop's, with by_token token chunk by chunk
 * (count_dedup). Returns the pairs that stay on e. */
static long walk_rank(const struct walk *w, int e, long tok0, long n)
{
    int *dst = w->f->dst, *lix = w->f->lix, nk = w->by_token ? w->N : 1, K = w->K;
    route_rank(w->d, e, tok0, n, dst, lix);
    if (w->mode == MP_DEDUP_PAIR)
        return count_pairs(w, e, dst, lix, n * K);
    long local = 0;
    for (int k = 0; k < nk; k++) {
        long off, m = mp_token_split(n, nk, k, &off);
        local += count_dedup(w, e, k, tok0 + off, dst + off * K, lix + off * K, m);
    }
    return local;
}

/* The layer's exchange from its sums `s` (round 0) with every rank's bytes per phase and link
 * class, as mp_vexchange_bytes_of gives them from the same rows: the dispatch sends in rows of
 * drb bytes, the combine returns what came in, in rows of rb; the round cleared. */
static void pair_finish(struct mp_vtraffic *t, struct mp_vsum *s, const int *node, double rb,
                        double drb)
{
    int ep = t->ep;
    struct mp_vsum_max mx = {0, 0, 0}; /* mp_vsum_exchange, in the same pass */
    for (int p = 0; p < ep; p++) {
        mp_vsum_max_add(&mx, &s[p], 0);
        double in_intra = (double)s[p].in[MP_VINTRA] * rb;
        double in_inter = (double)s[p].in[MP_VINTER] * rb;
        double sent_intra = (double)s[p].out[MP_VINTRA] * drb;
        double sent_inter = (double)s[p].out[MP_VINTER] * drb;
        t->bytes_sent[p] = sent_intra + sent_inter + in_intra + in_inter;
        t->dispatch_rows_intra[p] = (double)s[p].out[MP_VINTRA];
        t->dispatch_rows_inter[p] = (double)s[p].out[MP_VINTER];
        t->dispatch_intra[p] = sent_intra;
        t->dispatch_inter[p] = sent_inter;
        t->combine_intra[p] = in_intra;
        t->combine_inter[p] = in_inter;
        s[p] = (struct mp_vsum){.mark = -1}; /* mp_vsum_clear */
    }
    mp_vsum_exchange_of(&mx, node, ep, rb, &t->a2a);
}

/* The deduplicated exchanges from their sums (rounds 0 and 1), as dedup_exchanges makes them
 * from mp_dedup_count's rows: each hop's rows out with their metadata, back without, and every
 * rank's bytes; the rounds cleared. */
static void dedup_finish(struct mp_vtraffic *t, const struct mp_vdraw *d, struct mp_vfast *f)
{
    int ep = t->ep;
    enum mp_dedup mode = (enum mp_dedup)d->pt->dedup;
    double rb = d->m->hidden * d->cl->elem_bytes, meta = mp_dedup_meta_bytes(mode, d->m->topk);
    double out = dispatch_row_bytes(d) + meta;
    t->dedup_hops = mode == MP_DEDUP_NODE ? 2 : 1;
    for (int h = 0; h < t->dedup_hops; h++) {
        mp_vsum_exchange(f->sum + (size_t)h * ep, f->node, ep, out, 0, &t->hop[h]);
        mp_vsum_exchange(f->sum + (size_t)h * ep, f->node, ep, rb, 1, &t->back[h]);
    }
    t->a2a = t->hop[0];
    for (int p = 0; p < ep; p++) {
        long oi = 0, ox = 0, ii = 0, ix = 0;
        for (int h = 0; h < t->dedup_hops; h++) {
            const struct mp_vsum *s = &f->sum[(size_t)h * ep + p];
            oi += s->out[MP_VINTRA];
            ox += s->out[MP_VINTER];
            ii += s->in[MP_VINTRA];
            ix += s->in[MP_VINTER];
        }
        t->dispatch_rows_intra[p] = (double)oi;
        t->dispatch_rows_inter[p] = (double)ox;
        t->dispatch_intra[p] = (double)oi * out;
        t->dispatch_inter[p] = (double)ox * out;
        t->combine_intra[p] = (double)ii * rb;
        t->combine_inter[p] = (double)ix * rb;
        t->bytes_sent[p] = t->dispatch_intra[p] + t->dispatch_inter[p] + t->combine_intra[p] +
                           t->combine_inter[p];
    }
    mp_vsum_clear(f->sum, t->dedup_hops * ep);
}

/* rank_rows from the whole-number cells [ep·L] (zeroed after; into d->exp_rows as well when an
 * expert cache reads them): each rank's rows, FFN rows and active experts, and with
 * t->nchunks > 1 each chunk's by the expert groups of the fast path's scratch. */
static void fast_rank_rows(struct mp_vtraffic *t, const struct mp_vdraw *d, long *cells, int L)
{
    const struct mp_placement *pl = d->pt->placement;
    const int *group = d->fast->group;
    int ep = t->ep, N = t->nchunks, shared = d->m->shared;
    double *exp_rows = d->pt->cache.slots > 0 ? d->exp_rows : NULL;
    for (int p = 0; p < ep; p++) {
        long rows = 0, *c = cells + (size_t)p * L;
        int active = 0, sh = shared > 0 && t->tokens[p] > 0 ? shared : 0;
        for (int g = 0; g < N && N > 1; g++) {
            t->chunk_rows[g * ep + p] = 0;
            t->chunk_active[g * ep + p] = g == 0 ? sh : 0;
        }
        for (int l = 0; l < L && l < mp_placement_nlocal(pl, p) && N > 1; l++) {
            int g = group[(size_t)p * L + l];
            t->chunk_rows[g * ep + p] += (double)c[l]; /* whole numbers: exact in any order */
            t->chunk_active[g * ep + p] += c[l] > 0;
        }
        for (int l = 0; l < L; l++) {
            rows += c[l];
            active += c[l] > 0;
            if (exp_rows)
                exp_rows[(size_t)p * L + l] = (double)c[l];
            c[l] = 0;
        }
        t->rows[p] = (double)rows;
        t->ffn_rows[p] = t->rows[p] + (double)shared * t->tokens[p];
        t->active[p] = active + sh;
    }
}

/* The fast path of mp_vtraffic_dynamic (d->fast set, mp_vtraffic_fast_ok): the same traffic
 * from one walk over the draw's pairs; with by_token (the deduplicated pipelined form, t->nchunks
 * then 1 and N its chunks) each token chunk's sums and cells are kept for the caller. */
static void fast_dynamic(struct mp_vtraffic *t, const struct mp_vdraw *d, int by_token, int N)
{
    const struct mp_model *m = d->m;
    const struct mp_placement *pl = d->pt->placement;
    struct mp_vfast *f = d->fast;
    int ep = t->ep, L = pl->max_local > 0 ? pl->max_local : 1, Nt = t->nchunks;
    struct walk w = {.d = d, .f = f, .cells = d->counts + ep, .ep = ep, .L = L, .N = N,
                     .K = m->topk, .mode = (enum mp_dedup)d->pt->dedup, .by_token = by_token};
    t->count_exchange = 1;
    t->counted = 1;
    for (int p = 0; p < 2 * ep && w.mode != MP_DEDUP_PAIR; p++)
        f->seen[p] = -1;
    long base = d->tokens / ep, extra = d->tokens % ep; /* mp_token_split's shares */
    double *restrict local = t->local, *restrict tokens = t->tokens, *restrict pairs = t->pairs;
    double *restrict dropped = t->dropped;
    for (int e = 0; e < ep; e++) {
        long tok0 = e * base + (e < extra ? e : extra), n = base + (e < extra);
        local[e] = n > 0 ? (double)walk_rank(&w, e, tok0, n) : 0;
        tokens[e] = (double)n;
        pairs[e] = (double)n * m->topk;
        dropped[e] = 0; /* every routed row moves */
    }
    fast_rank_rows(t, d, w.cells, L);
    double rb = m->hidden * d->cl->elem_bytes;
    if (w.mode != MP_DEDUP_PAIR) {
        dedup_finish(t, d, f);
        return;
    }
    pair_finish(t, f->sum, f->node, rb, dispatch_row_bytes(d));
    for (int g = 0; g < Nt && Nt > 1; g++) {
        struct mp_vsum *s = f->sum + (size_t)(2 + 2 * g) * ep;
        mp_vsum_exchange(s, f->node, ep, rb, 0, &t->chunk_a2a[g]);
        mp_vsum_clear(s, ep);
    }
}

/* EP rank e's pairs (tokens tok0 .. tok0 + n) counted one by one: into to_cnt and cell_cnt when
 * given (whole numbers, copied into `to` here), else straight into `to` and exp_rows; with N > 1
 * chunks also per chunk into chunk_to. Returns the pairs that stay on e. */
static long count_rank_pairs(const struct mp_vdraw *d, long *to_cnt, long *cell_cnt, double *to,
                             int ep, int L, int N, int e, long tok0, long n)
{
    const struct mp_placement *pl = d->pt->placement;
    const int32_t *ids = d->ids;
    double *exp_rows = d->exp_rows, *chunk_to = d->chunk_to;
    size_t cells = (size_t)ep * ep;
    int K = d->m->topk;
    long local = 0;
    for (long tok = tok0; tok < tok0 + n; tok++)
        for (long i = tok * K; i < (tok + 1) * K; i++) {
            int li, p;
            if (d->holder_li) {
                p = route_pair(pl, d->holder_li, e, ids[i], tok, &li);
            } else {
                p = mp_placement_dest(pl, e, ids[i], tok);
                li = mp_placement_local_index(pl, p, ids[i]);
            }
            local += p == e;
            if (to_cnt) {
                to_cnt[p]++;
                if (li < L) /* slots past a rank's experts stay empty */
                    cell_cnt[(size_t)p * L + li]++;
            } else {
                to[p] += 1;
                if (li < L)
                    exp_rows[(size_t)p * L + li] += 1;
            }
            if (N > 1 && li < L) {
                int g = mp_plan_expert_group(li, mp_placement_nlocal(pl, p), N);
                chunk_to[g * cells + (size_t)e * ep + p] += 1;
            }
        }
    for (int p = 0; p < ep && to_cnt; p++) {
        to[p] = (double)to_cnt[p];
        to_cnt[p] = 0;
    }
    return local;
}

/* The dynamic dispatch: route the draw over every EP rank and total what the plan sends where;
 * with t->nchunks > 1, also per chunk. Each pair adds one row to its (source, destination) cell
 * and its (destination, local expert) cell, as mp_plan_send's counts total them; the counts are
 * whole numbers, so their sums do not depend on the order they are added in. With d->fast the
 * exchanges come from sums kept while routing (fast_dynamic), else from the ep × ep matrices. */
void mp_vtraffic_dynamic(struct mp_vtraffic *t, const struct mp_vdraw *d)
{
    if (d->fast) {
        fast_dynamic(t, d, 0, t->nchunks);
        return;
    }
    const struct mp_cluster *cl = d->cl;
    const struct mp_model *m = d->m;
    const struct mp_placement *pl = d->pt->placement;
    double *rows_to = d->rows_to, *exp_rows = d->exp_rows, *chunk_to = d->chunk_to;
    long T = d->tokens;
    int ep = t->ep, tp = t->tp, L = d->plan->max_local, K = m->topk, N = t->nchunks;
    t->count_exchange = 1;
    double row_bytes = m->hidden * cl->elem_bytes;
    size_t cells = (size_t)ep * ep;
    if (N > 1)
        memset(chunk_to, 0, sizeof(double) * cells * N);
    if (!d->counts) {
        memset(rows_to, 0, sizeof(double) * cells);
        memset(exp_rows, 0, sizeof(double) * (size_t)ep * L);
    }
    /* the counts in whole numbers: to_cnt [ep] one source's rows per destination, cell_cnt
     * [ep·L] every source's pairs per (destination, local expert) */
    long *to_cnt = d->counts, *cell_cnt = d->counts ? d->counts + ep : NULL;
    for (int e = 0; e < ep; e++) {
        long tok0, n = mp_token_split(T, ep, e, &tok0);
        long local = count_rank_pairs(d, to_cnt, cell_cnt, rows_to + (size_t)e * ep, ep, L, N, e,
                                      tok0, n);
        t->tokens[e] = (double)n;
        t->pairs[e] = (double)n * K;
        t->local[e] = (double)local;
        t->dropped[e] = 0; /* every routed row moves */
    }
    for (size_t c = 0; cell_cnt && c < (size_t)ep * L; c++) {
        exp_rows[c] = (double)cell_cnt[c];
        cell_cnt[c] = 0;
    }
    rank_rows(t, exp_rows, pl, L, N, m->shared);
    mp_vexchange_bytes_of(rows_to, ep, tp, cl->gpus_per_node, row_bytes, dispatch_row_bytes(d),
                          &t->a2a, t);
    if (d->dedup)
        dedup_exchanges(t, d);
    for (int g = 0; g < N && N > 1; g++)
        mp_vexchange_bytes_of(chunk_to + g * cells, ep, tp, cl->gpus_per_node, row_bytes, row_bytes,
                              &t->chunk_a2a[g], NULL);
}

/* The padded dispatch (core/layer/layer.c's padded iteration, kernels/padded.h): the same routing as
 * the dynamic plan, then each (source, destination expert) cell keeps at most cap pairs and every
 * slot moves whole, padding included. */
void mp_vtraffic_padded(struct mp_vtraffic *t, const struct mp_vdraw *d)
{
    const struct mp_placement *pl = d->pt->placement;
    struct mp_plan *plan = d->plan;
    long T = d->tokens;
    int ep = t->ep, L = plan->max_local, K = d->m->topk, S = d->m->shared;
    int slots = 1; /* max_local of the slot layout: the most experts any rank holds, at least 1 */
    for (int p = 0; p < ep; p++)
        slots = mp_placement_nlocal(pl, p) > slots ? mp_placement_nlocal(pl, p) : slots;
    long cap = mp_padded_capacity((T + ep - 1) / ep, K, d->m->experts, d->pt->dispatch_arg, 1);
    t->count_exchange = 0;
    for (int p = 0; p < ep; p++)
        t->rows[p] = 0;
    for (int e = 0; e < ep; e++) {
        long tok0, n = mp_token_split(T, ep, e, &tok0);
        mp_plan_send(plan, pl, e, tok0, n, d->ids + (size_t)tok0 * K, d->w + (size_t)tok0 * K);
        double local = 0, dropped = 0;
        for (int p = 0; p < ep; p++) {
            for (int l = 0; l < mp_placement_nlocal(pl, p) && l < L; l++) {
                long cnt = plan->send_cnt[p * L + l], keep = cnt < cap ? cnt : cap;
                t->rows[p] += (double)keep; /* the valid rows p receives */
                dropped += (double)(cnt - keep);
                if (p == e)
                    local += (double)keep;
            }
            d->rows_to[e * ep + p] = (double)slots * cap; /* whole slots, whatever they hold */
        }
        t->tokens[e] = (double)n;
        t->pairs[e] = (double)n * K;
        t->local[e] = local;
        t->dropped[e] = dropped;
    }
    for (int p = 0; p < ep; p++) {
        int nl = mp_placement_nlocal(pl, p) < slots ? mp_placement_nlocal(pl, p) : slots;
        int sh = S > 0 && t->tokens[p] > 0 ? S : 0;
        t->ffn_rows[p] = (double)nl * ep * cap + (double)S * t->tokens[p]; /* padding computed */
        t->active[p] = nl + sh;
    }
    mp_vexchange_bytes_of(d->rows_to, ep, t->tp, d->cl->gpus_per_node, d->m->hidden * d->cl->elem_bytes,
                dispatch_row_bytes(d), &t->a2a, t);
}

/* The padded dispatch deduplicated (core/layer/dispatch_dedup_padded.c): every source sends each of
 * its possible targets (mp_dedup_padded_layout) a slot of cap1 rows with their metadata, node's
 * relays every other rank of their node a slot of cap2, and the same slots come back without it;
 * the pairs kept, dropped and run are mp_dedup_padded_walk's; no count exchange. */
void mp_vtraffic_dedup_padded(struct mp_vtraffic *t, const struct mp_vdraw *d)
{
    const struct mp_placement *pl = d->pt->placement;
    enum mp_dedup mode = (enum mp_dedup)d->pt->dedup;
    long T = d->tokens;
    int ep = t->ep, tp = t->tp, K = d->m->topk, S = d->m->shared, Lm = pl->max_local;
    int gpn = d->cl->gpus_per_node, node = mode == MP_DEDUP_NODE;
    double row_bytes = d->m->hidden * d->cl->elem_bytes, meta = mp_dedup_meta_bytes(mode, K);
    double drow = dispatch_row_bytes(d);
    size_t cells = (size_t)ep * ep;
    int *ep_node = malloc((size_t)ep * 5 * sizeof *ep_node);
    if (!ep_node) { /* no traffic without memory: the timing of an empty layer */
        memset(t->rows, 0, (size_t)ep * sizeof *t->rows);
        return;
    }
    int *send1 = ep_node + ep, *recv1 = send1 + ep, *send2 = recv1 + ep, *recv2 = send2 + ep;
    for (int q = 0; q < ep; q++)
        ep_node[q] = mp_dedup_node_of(q, tp, gpn);
    long cap1 = mp_dedup_padded_capacity((T + ep - 1) / ep, K, d->m->experts, Lm,
                                         d->pt->dispatch_arg);
    long cap2 = node ? cap1 * mp_dedup_padded_relays(ep_node, ep) : 0;
    t->count_exchange = 0;
    /* exp_rows [ep·max_local]: the kept pairs of each (rank, local expert) */
    mp_dedup_padded_walk(pl, ep, T, K, d->ids, NULL, cap1, node ? ep_node : NULL, d->exp_rows,
                         t->dropped, t->local);
    /* rows_to in the dedup counts' rows: hop 0 the first-hop slots (node: its inter-node phase,
     * the relay slots only), hop 1 node's intra-node phase (the direct slots inside the node and
     * the forward slots), as core/layer/dispatch_dedup_padded.c runs them */
    double *hop = d->dedup->rows;
    memset(hop, 0, 2 * cells * sizeof *hop);
    for (int e = 0; e < ep; e++) {
        long tok0, n = mp_token_split(T, ep, e, &tok0);
        t->tokens[e] = (double)n;
        t->pairs[e] = (double)n * K;
        mp_dedup_padded_layout(node ? ep_node : NULL, ep, e, cap1, cap2, send1, recv1, send2,
                               recv2);
        for (int q = 0; q < ep; q++) {
            int inside = node && ep_node[q] == ep_node[e];
            hop[(size_t)e * ep + q] = q == e || inside ? 0 : send1[q];
            hop[cells + (size_t)e * ep + q] = send2[q] + (inside && q != e ? send1[q] : 0);
        }
    }
    for (int q = 0; q < ep; q++) {
        double rows = 0;
        int active = 0, sh = S > 0 && t->tokens[q] > 0 ? S : 0;
        for (int l = 0; l < Lm; l++) {
            rows += d->exp_rows[(size_t)q * Lm + l];
            active += d->exp_rows[(size_t)q * Lm + l] > 0;
        }
        t->rows[q] = rows;
        t->ffn_rows[q] = rows + (double)S * t->tokens[q];
        t->active[q] = active + sh;
    }
    /* each hop: slots with their metadata out, the same slots back without it */
    t->dedup_hops = node ? 2 : 1;
    for (int p = 0; p < ep; p++)
        t->dispatch_intra[p] = t->dispatch_inter[p] = t->combine_intra[p] =
            t->combine_inter[p] = 0;
    for (int h = 0; h < t->dedup_hops; h++) {
        const double *rows = hop + h * cells;
        mp_vexchange_bytes_of(rows, ep, tp, gpn, drow + meta, drow + meta, &t->hop[h], NULL);
        for (int e = 0; e < ep; e++)
            for (int p = 0; p < ep; p++)
                d->rows_to[p * ep + e] = rows[e * ep + p];
        mp_vexchange_bytes_of(d->rows_to, ep, tp, gpn, row_bytes, row_bytes, &t->back[h], NULL);
        for (int p = 0; p < ep; p++)
            for (int q = 0; q < ep; q++) {
                if (q == p)
                    continue;
                int same = ep_node[q] == ep_node[p];
                *(same ? &t->dispatch_intra[p] : &t->dispatch_inter[p]) +=
                    rows[(size_t)p * ep + q] * (drow + meta);
                *(same ? &t->combine_intra[p] : &t->combine_inter[p]) +=
                    rows[(size_t)q * ep + p] * row_bytes;
            }
    }
    for (int p = 0; p < ep; p++)
        t->bytes_sent[p] = t->dispatch_intra[p] + t->dispatch_inter[p] + t->combine_intra[p] +
                           t->combine_inter[p];
    t->a2a = t->hop[0];
    free(ep_node);
}

/* Chunk k's rows and active experts per rank from the fast path's chunk cells (zeroed after),
 * as mp_vtraffic_dedup_pipelined totals them: the shared experts in chunk 0. */
static void fast_chunk_rows(struct mp_vtraffic *t, const struct mp_vdraw *d, int k, int Lm)
{
    long *cc = d->fast->chunk_cells + (size_t)k * t->ep * Lm;
    int S = d->m->shared;
    for (int q = 0; q < t->ep; q++) {
        long rows = 0;
        int active = k == 0 && S > 0 && t->tokens[q] > 0 ? S : 0;
        for (int l = 0; l < Lm; l++) {
            rows += cc[(size_t)q * Lm + l];
            active += cc[(size_t)q * Lm + l] > 0;
            cc[(size_t)q * Lm + l] = 0;
        }
        if (t->chunk_hop) { /* as the matrices' path, none out of memory */
            t->chunk_rows[k * t->ep + q] = (double)rows;
            t->chunk_active[k * t->ep + q] = active;
        }
    }
}

/* Each chunk's hops out (rows of drow bytes) and back (of rb) and its rows and active experts
 * from the fast path's chunk rounds and cells, which are cleared for the next draw (also when
 * t->chunk_hop is NULL, out of memory). */
static void fast_chunks(struct mp_vtraffic *t, const struct mp_vdraw *d, int Lm, double drow,
                        double rb)
{
    int ep = t->ep;
    for (int k = 0; k < t->nchunks; k++) {
        for (int h = 0; h < t->dedup_hops; h++) {
            struct mp_vsum *s = d->fast->sum + (size_t)(2 + 2 * k + h) * ep;
            if (t->chunk_hop) {
                mp_vsum_exchange(s, d->fast->node, ep, drow, 0, &t->chunk_hop[2 * k + h]);
                mp_vsum_exchange(s, d->fast->node, ep, rb, 1, &t->chunk_back[2 * k + h]);
            }
            mp_vsum_clear(s, ep);
        }
        fast_chunk_rows(t, d, k, Lm);
    }
}

void mp_vtraffic_dedup_pipelined(struct mp_vtraffic *t, const struct mp_vdraw *d)
{
    const struct mp_placement *pl = d->pt->placement;
    enum mp_dedup mode = (enum mp_dedup)d->pt->dedup;
    int N = t->nchunks, ep = t->ep, tp = t->tp, gpn = d->cl->gpus_per_node, K = d->m->topk;
    int Lm = pl->max_local > 0 ? pl->max_local : 1, S = d->m->shared;
    long T = d->tokens;
    double row_bytes = d->m->hidden * d->cl->elem_bytes, meta = mp_dedup_meta_bytes(mode, K);
    double drow = dispatch_row_bytes(d);
    size_t cells = (size_t)ep * ep;
    t->nchunks = 1; /* the whole draw unpipelined: counts, bytes, the hops' exchanges */
    if (d->fast) /* and with the fast path each chunk's sums and cells in the same walk */
        fast_dynamic(t, d, 1, N);
    else
        mp_vtraffic_dynamic(t, d);
    t->nchunks = N;
    for (int h = 0; h < t->dedup_hops; h++) { /* the metadata alone, ahead of the pipeline */
        double f = meta / (drow + meta);
        t->meta[h] = t->hop[h];
        t->meta[h].intra_max *= f;
        t->meta[h].inter_max *= f;
    }
    if (!t->chunk_hop)
        t->chunk_hop = calloc(2 * (size_t)N, sizeof *t->chunk_hop);
    if (!t->chunk_back)
        t->chunk_back = calloc(2 * (size_t)N, sizeof *t->chunk_back);
    if (!t->chunk_hop || !t->chunk_back) { /* no chunks without memory: the timing says NAN */
        free(t->chunk_hop);
        free(t->chunk_back);
        t->chunk_hop = t->chunk_back = NULL;
    }
    if (d->fast) {
        fast_chunks(t, d, Lm, drow, row_bytes);
        return;
    }
    if (!t->chunk_hop)
        return;
    struct mp_dedup_counts *c = d->dedup;
    for (int k = 0; k < N; k++) {
        mp_dedup_count_chunk(mode, pl, d->ids, T, K, tp, gpn, N, k, c);
        for (int h = 0; h < c->hops; h++) {
            const double *rows = c->rows + h * cells;
            mp_vexchange_bytes_of(rows, ep, tp, gpn, drow, drow, &t->chunk_hop[2 * k + h], NULL);
            for (int e = 0; e < ep; e++)
                for (int p = 0; p < ep; p++)
                    d->rows_to[p * ep + e] = rows[e * ep + p];
            mp_vexchange_bytes_of(d->rows_to, ep, tp, gpn, row_bytes, row_bytes, &t->chunk_back[2 * k + h],
                        NULL);
        }
        /* the chunk's pairs per (rank, local expert): its rows and active experts per rank */
        memset(d->exp_rows, 0, sizeof(double) * (size_t)ep * Lm);
        for (int e = 0; e < ep; e++) {
            long tok0, n = mp_token_split(T, ep, e, &tok0), off;
            n = mp_token_split(n, N, k, &off);
            for (long tk = tok0 + off; tk < tok0 + off + n; tk++)
                for (int j = 0; j < K; j++) {
                    int32_t x = d->ids[tk * K + j];
                    int q = mp_placement_dest(pl, e, x, tk);
                    d->exp_rows[(size_t)q * Lm + mp_placement_local_index(pl, q, x)] += 1;
                }
        }
        for (int q = 0; q < ep; q++) {
            double rows = 0;
            int active = k == 0 && S > 0 && t->tokens[q] > 0 ? S : 0;
            for (int l = 0; l < Lm; l++) {
                rows += d->exp_rows[(size_t)q * Lm + l];
                active += d->exp_rows[(size_t)q * Lm + l] > 0;
            }
            t->chunk_rows[k * ep + q] = rows;
            t->chunk_active[k * ep + q] = active;
        }
    }
}
