/* vtraffic_modes.c - each dispatch mode's traffic counted straight from a routing draw (the
 * dispatch modes' model_traffic hooks, declared in vlayer.h): what its measured layer moves and
 * computes, equal to the traced ranks' to the bit (tests/unit/test_vexec.c). */
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
 * none is there), the token choosing one by token mod their number. */
static int route_pair(const struct mp_placement *pl, const int *holder_li, int src, int x,
                      long token, int *li)
{
    int h0 = pl->holder_off[x], h1 = pl->holder_off[x + 1], m = 0;
    if (h1 - h0 == 1) { /* one copy: whoever asks, it serves */
        *li = holder_li[h0];
        return pl->holders[h0];
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

/* Whether whole numbers of rows of `a` and of `b` bytes sum exactly in doubles, up to `rows` rows:
 * both row sizes whole numbers of bytes and rows·max(a, b) below 2^53. Then a sum of rows·bytes
 * products is the same double in any order, and equal to bytes · (the rows' whole-number sum). */
static int exact_row_sums(double a, double b, double rows)
{
    double most = a > b ? a : b;
    return a == floor(a) && b == floor(b) && a > 0 && b > 0 && rows * most < 9007199254740992.0;
}

/* Per-rank whole-number sums of one exchange round, kept while routing, for exact_row_sums: what
 * each rank sends to ranks of its node and of other nodes (out_*), receives (in_*), and the
 * senders on other nodes each receives from. */
struct xcounts {
    long *out_intra, *out_inter, *in_intra, *in_inter, *senders;
    int *node; /* [ep] each rank's node (mp_dedup_node_of) */
};

/* The sums of `c` as exchange_of computes them from the same rows, with row_bytes `rb` (combine)
 * and `drb` (dispatch); every sum zeroed for the next draw. */
static void xcounts_finish(struct xcounts *c, int ep, int tp, int gpn, double rb, double drb,
                           struct mp_vexchange *x, struct mp_vtraffic *bytes)
{
    *x = (struct mp_vexchange){0};
    int lo = 0, hi = 0;
    for (int p = 0; p < ep; p++) {
        mp_vnode_range(p, ep, tp, gpn, &lo, &hi);
        double in_intra = (double)c->in_intra[p] * rb, in_inter = (double)c->in_inter[p] * rb;
        double out_intra = (double)c->out_intra[p] * rb, out_inter = (double)c->out_inter[p] * rb;
        x->uses_intra |= hi - lo > 1;
        x->uses_inter |= lo > 0 || hi < ep;
        x->intra_max = fmax(x->intra_max, fmax(in_intra, out_intra));
        x->inter_max = fmax(x->inter_max, fmax(in_inter, out_inter));
        x->incast = c->senders[p] > x->incast ? (int)c->senders[p] : x->incast;
        double sent_intra = (double)c->out_intra[p] * drb, sent_inter = (double)c->out_inter[p] * drb;
        bytes->bytes_sent[p] = sent_intra + sent_inter + in_intra + in_inter;
        bytes->dispatch_intra[p] = sent_intra;
        bytes->dispatch_inter[p] = sent_inter;
        bytes->combine_intra[p] = in_intra;
        bytes->combine_inter[p] = in_inter;
        c->out_intra[p] = c->out_inter[p] = c->in_intra[p] = c->in_inter[p] = c->senders[p] = 0;
    }
}

/* EP rank e's pairs (its tokens tok0 .. tok0 + n) routed into the exchange's sums kept while
 * routing (xc), its rows per destination (to_cnt, cleared again) and per (destination, local
 * expert) (cell_cnt): the unchunked, undeduplicated common case, its state in locals. Returns the
 * pairs that stay on e. */
static long sum_rank_pairs(const struct mp_vdraw *d, struct xcounts *xc, long *to_cnt,
                           long *cell_cnt, int ep, int L, int e, long tok0, long n)
{
    const struct mp_placement *pl = d->pt->placement;
    const int32_t *ids = d->ids;
    const int *hli = d->holder_li;
    const struct mp_vsole *sole = d->sole;
    const int *node = xc->node, node_e = node[e];
    int K = d->m->topk;
    long out_intra = 0, out_inter = 0, local = 0;
    for (long tok = tok0; tok < tok0 + n; tok++)
        for (long i = tok * K; i < (tok + 1) * K; i++) {
            int x = ids[i], li, p;
            if (sole && sole[x].dest >= 0) {
                p = sole[x].dest;
                li = sole[x].li;
            } else if (hli) {
                p = route_pair(pl, hli, e, x, tok, &li);
            } else {
                p = mp_placement_dest(pl, e, x, tok);
                li = mp_placement_local_index(pl, p, x);
            }
            local += p == e;
            long first = to_cnt[p]++ == 0; /* e's first row to p */
            if (li < L) /* slots past a rank's experts stay empty */
                cell_cnt[(size_t)p * L + li]++;
            if (p == e) /* a rank's rows to itself stay off the links */
                continue;
            if (node[p] == node_e) {
                out_intra++;
                xc->in_intra[p]++;
            } else {
                out_inter++;
                xc->in_inter[p]++;
                xc->senders[p] += first;
            }
        }
    xc->out_intra[e] = out_intra;
    xc->out_inter[e] = out_inter;
    memset(to_cnt, 0, sizeof *to_cnt * (size_t)ep);
    return local;
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

/* The dynamic dispatch: route the draw over every EP rank and total what the plan sends where;
 * with t->nchunks > 1, also per chunk. Each pair adds one row to its (source, destination) cell
 * and its (destination, local expert) cell, as mp_plan_send's counts total them; the counts are
 * whole numbers, so their sums do not depend on the order they are added in. */
void mp_vtraffic_dynamic(struct mp_vtraffic *t, const struct mp_vdraw *d)
{
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
    /* unchunked and not deduplicated, with whole-byte rows: the exchange's sums kept while
     * routing (O(pairs)), the same doubles exchange_of gives from the ep·ep rows */
    double drb = dispatch_row_bytes(d);
    int sums = d->counts && N == 1 && !d->dedup && exact_row_sums(row_bytes, drb, (double)T * K);
    long *xs = d->counts ? d->counts + ep + (size_t)ep * L : NULL;
    struct xcounts xc = {0};
    if (sums) {
        xc.out_intra = xs;
        xc.out_inter = xs + ep;
        xc.in_intra = xs + 2 * (size_t)ep;
        xc.in_inter = xs + 3 * (size_t)ep;
        xc.senders = xs + 4 * (size_t)ep;
        xc.node = (int *)(xs + 5 * (size_t)ep);
    }
    int gpn = cl->gpus_per_node;
    for (int p = 0; p < ep && sums; p++)
        xc.node[p] = mp_dedup_node_of(p, tp, gpn);
    for (int e = 0; e < ep; e++) {
        long tok0, n = mp_token_split(T, ep, e, &tok0);
        long local = sums ? sum_rank_pairs(d, &xc, to_cnt, cell_cnt, ep, L, e, tok0, n)
                          : count_rank_pairs(d, to_cnt, cell_cnt, rows_to + (size_t)e * ep, ep,
                                             L, N, e, tok0, n);
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
    if (sums)
        xcounts_finish(&xc, ep, tp, gpn, row_bytes, drb, &t->a2a, t);
    else
        mp_vexchange_bytes_of(rows_to, ep, tp, gpn, row_bytes, drb, &t->a2a, t);
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
        return;
    }
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
