/* dispatch_plan.c - building the dispatch plan (see dispatch_plan.h): counting sort of token-expert pairs by
 * destination and expert, then prefix sums on both sides of the count exchange. */
#include "dispatch_plan.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "freeall.h"
#include "padded.h"

long mp_token_split(long total, int ep, int e, long *tok0)
{
    long base = total / ep, extra = total % ep;
    *tok0 = e * base + (e < extra ? e : extra);
    return base + (e < extra ? 1 : 0);
}

int mp_plan_alloc(struct mp_plan *p, int ep, int max_local, long max_tok, int K)
{
    memset(p, 0, sizeof *p);
    p->ep = ep;
    p->max_local = max_local > 0 ? max_local : 1;
    p->K = K;
    p->max_tok = max_tok;
    size_t cells = (size_t)ep * p->max_local, pairs = (size_t)(max_tok > 0 ? max_tok : 1) * K;
    p->send_cnt = calloc(cells, sizeof(int));
    p->recv_cnt = calloc(cells, sizeof(int));
    p->cursor = calloc(cells, sizeof(int));
    p->send_rows = calloc((size_t)ep, sizeof(int));
    p->send_displ = calloc((size_t)ep, sizeof(int));
    p->recv_rows = calloc((size_t)ep, sizeof(int));
    p->recv_displ = calloc((size_t)ep, sizeof(int));
    p->expert_off = calloc((size_t)p->max_local + 1, sizeof(long));
    p->to_expert = calloc(cells, sizeof(struct mp_chunk));
    p->to_source = calloc(cells, sizeof(struct mp_chunk));
    p->src_tok = calloc(pairs, sizeof(int32_t));
    p->row_w = calloc(pairs, sizeof(float));
    p->pair_dest = calloc(pairs, sizeof(int32_t));
    p->pair_li = calloc(pairs, sizeof(int32_t));
    if (!p->send_cnt || !p->recv_cnt || !p->cursor || !p->send_rows || !p->send_displ ||
        !p->recv_rows || !p->recv_displ || !p->expert_off || !p->to_expert || !p->to_source ||
        !p->src_tok || !p->row_w || !p->pair_dest || !p->pair_li) {
        mp_plan_free(p);
        mp_error("out of memory for the dispatch plan (%ld tokens × top-%d)", max_tok, K);
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

void mp_plan_free(struct mp_plan *p)
{
    MP_FREE_ALL(p->send_cnt, p->recv_cnt, p->cursor, p->send_rows, p->send_displ, p->recv_rows,
                p->recv_displ, p->expert_off, p->to_expert, p->to_source, p->src_tok, p->row_w,
                p->pair_dest, p->pair_li);
    memset(p, 0, sizeof *p);
}

int mp_plan_expert_group(int li, int nlocal, int ngroups)
{
    if (ngroups <= 1 || nlocal <= 0)
        return 0;
    return (int)((long)li * ngroups / nlocal);
}

void mp_plan_send(struct mp_plan *p, const struct mp_placement *pl, int ep_rank, long tok0,
                  long ntok, const int32_t *ids, const float *w)
{
    mp_plan_send_group(p, pl, ep_rank, tok0, ntok, ids, w, 0, 1);
}

void mp_plan_send_group(struct mp_plan *p, const struct mp_placement *pl, int ep_rank, long tok0,
                        long ntok, const int32_t *ids, const float *w, int group, int ngroups)
{
    int L = p->max_local, K = p->K;
    size_t cells = (size_t)p->ep * L;
    memset(p->send_cnt, 0, cells * sizeof(int));
    /* pass 1: destination and expert index of every pair; -1 marks pairs of other groups */
    for (long i = 0; i < ntok * K; i++) {
        int expert = ids[i];
        int dest = mp_placement_dest(pl, ep_rank, expert, tok0 + i / K);
        int li = mp_placement_local_index(pl, dest, expert);
        if (ngroups > 1 && mp_plan_expert_group(li, mp_placement_nlocal(pl, dest), ngroups) != group) {
            p->pair_dest[i] = -1;
            continue;
        }
        p->pair_dest[i] = dest;
        p->pair_li[i] = li;
        p->send_cnt[dest * L + li]++;
    }
    /* prefix sums: rows ordered by (peer, expert) */
    mp_plan_from_counts(p, ep_rank, ntok);
    int off = 0;
    for (size_t cell = 0; cell < cells; cell++) {
        p->cursor[cell] = off;
        off += p->send_cnt[cell];
    }
    /* pass 2: place each pair (stable: token order within a block) */
    for (long i = 0; i < ntok * K; i++) {
        if (p->pair_dest[i] < 0)
            continue;
        int pos = p->cursor[p->pair_dest[i] * L + p->pair_li[i]]++;
        p->src_tok[pos] = (int32_t)(i / K);
        p->row_w[pos] = w[i];
    }
}

void mp_plan_from_counts(struct mp_plan *p, int ep_rank, long ntok)
{
    int L = p->max_local;
    int off = 0;
    p->ntok = ntok;
    p->local_pairs = 0;
    for (int d = 0; d < p->ep; d++) {
        p->send_displ[d] = off;
        for (int l = 0; l < L; l++)
            off += p->send_cnt[d * L + l];
        p->send_rows[d] = off - p->send_displ[d];
        if (d == ep_rank)
            p->local_pairs = p->send_rows[d];
    }
    p->nsend = off;
}

int mp_route_table_size(const struct mp_placement *pl)
{
    return pl->experts + pl->holder_off[pl->experts];
}

/* The cell of local expert `li` at `dest`: its chunk's block of ep·max_local cells, then the
 * (dest, li) cell in it. */
static int32_t route_cell_of(const struct mp_placement *pl, int dest, int li, int max_local,
                             int ngroups)
{
    int group = mp_plan_expert_group(li, mp_placement_nlocal(pl, dest), ngroups);
    return (int32_t)(((long)group * pl->ep + dest) * max_local + li);
}

int mp_route_table(const struct mp_placement *pl, int ep_rank, int max_local, int ngroups,
                   int32_t *route_off, int32_t *route_cell)
{
    int n = 0;
    for (int e = 0; e < pl->experts; e++) {
        route_off[e] = n;
        int li = mp_placement_local_index(pl, ep_rank, e);
        if (li >= 0) { /* held here: served here (mp_placement_dest) */
            route_cell[n++] = route_cell_of(pl, ep_rank, li, max_local, ngroups);
            continue;
        }
        /* mp_placement_dest's candidates in its order: the holders on this rank's node when
         * there are any, else all holders; the token picks one by token mod count */
        int near = mp_placement_node_holders(pl, ep_rank, e) > 0;
        for (int h = pl->holder_off[e]; h < pl->holder_off[e + 1]; h++) {
            int dest = pl->holders[h];
            if (near && pl->node && pl->node[dest] != pl->node[ep_rank])
                continue;
            route_cell[n++] = route_cell_of(pl, dest, mp_placement_local_index(pl, dest, e),
                                            max_local, ngroups);
        }
    }
    route_off[pl->experts] = n;
    return n;
}

void mp_plan_recv(struct mp_plan *p, int nlocal)
{
    int L = p->max_local;
    int off = 0;
    for (int s = 0; s < p->ep; s++) {
        p->recv_displ[s] = off;
        for (int l = 0; l < L; l++)
            off += p->recv_cnt[s * L + l];
        p->recv_rows[s] = off - p->recv_displ[s];
    }
    p->nrecv = off;
    /* expert-major blocks: expert l holds every source's rows for l, sources in order */
    long eoff = 0;
    for (int l = 0; l < L; l++) {
        p->expert_off[l] = eoff;
        for (int s = 0; s < p->ep; s++)
            eoff += p->recv_cnt[s * L + l];
    }
    p->expert_off[L] = eoff;
    for (int l = nlocal; l < L; l++) /* ranks with fewer experts: empty trailing blocks */
        p->expert_off[l] = eoff;
    /* walk sources in order; cursor[l] is the fill point of expert l's block */
    for (int l = 0; l < L; l++)
        p->cursor[l] = (int)p->expert_off[l];
    int n = 0;
    for (int s = 0; s < p->ep; s++) {
        long src = p->recv_displ[s];
        for (int l = 0; l < L; l++) {
            long cnt = p->recv_cnt[s * L + l];
            if (cnt == 0)
                continue;
            long dst = p->cursor[l];
            p->cursor[l] += (int)cnt;
            p->to_expert[n] = (struct mp_chunk){.src = src, .dst = dst, .n = cnt};
            p->to_source[n] = (struct mp_chunk){.src = dst, .dst = src, .n = cnt};
            n++;
            src += cnt;
        }
    }
    p->nchunks = n;
}

int mp_padded_alloc(struct mp_padded *p, int ep, int max_local, long cap)
{
    memset(p, 0, sizeof *p);
    p->ep = ep;
    p->max_local = max_local > 0 ? max_local : 1;
    p->cap = cap > 0 ? cap : 1;
    p->rows = (long)ep * p->max_local * p->cap;
    size_t cells = (size_t)ep * p->max_local;
    p->src_tok = calloc((size_t)p->rows, sizeof(int32_t));
    p->w = calloc((size_t)p->rows, sizeof(float));
    p->peer_rows = calloc((size_t)ep, sizeof(int));
    p->peer_displ = calloc((size_t)ep, sizeof(int));
    p->kept = calloc(cells, sizeof(int));
    p->expert_off = calloc((size_t)p->max_local + 1, sizeof(long));
    p->to_expert = calloc(cells, sizeof(struct mp_chunk));
    p->to_source = calloc(cells, sizeof(struct mp_chunk));
    if (!p->src_tok || !p->w || !p->peer_rows || !p->peer_displ || !p->kept || !p->expert_off ||
        !p->to_expert || !p->to_source) {
        mp_padded_free(p);
        mp_error("out of memory for the padded dispatch (%d peers × %d experts × %ld rows)", ep,
                 max_local, cap);
        return MP_ERR_RUNTIME;
    }
    for (int d = 0; d < ep; d++) {
        p->peer_rows[d] = (int)(p->max_local * p->cap);
        p->peer_displ[d] = (int)((long)d * p->max_local * p->cap);
    }
    return MP_OK;
}

void mp_padded_free(struct mp_padded *p)
{
    MP_FREE_ALL(p->src_tok, p->w, p->peer_rows, p->peer_displ, p->kept, p->expert_off, p->to_expert,
                p->to_source);
    memset(p, 0, sizeof *p);
}

void mp_padded_from_counts(struct mp_padded *p, const int32_t *totals, int ep_rank)
{
    int L = p->max_local;
    p->dropped = 0;
    p->local_pairs = 0;
    for (int d = 0; d < p->ep; d++)
        for (int l = 0; l < L; l++) {
            long n = totals[d * L + l], keep = n < p->cap ? n : p->cap;
            p->kept[d * L + l] = (int)keep;
            p->dropped += n - keep;
            if (d == ep_rank)
                p->local_pairs += keep;
        }
}

void mp_padded_recv(struct mp_padded *p, int nlocal)
{
    int n = 0;
    for (int l = 0; l <= p->max_local; l++)
        p->expert_off[l] = (long)(l < nlocal ? l : nlocal) * p->ep * p->cap;
    for (int s = 0; s < p->ep; s++)
        for (int l = 0; l < nlocal && l < p->max_local; l++) {
            long src = mp_padded_row(s, l, 0, p->max_local, p->cap);
            long dst = mp_padded_expert_row(s, l, 0, p->ep, p->cap);
            p->to_expert[n] = (struct mp_chunk){.src = src, .dst = dst, .n = p->cap};
            p->to_source[n] = (struct mp_chunk){.src = dst, .dst = src, .n = p->cap};
            n++;
        }
    p->nchunks = n;
}

long mp_padded_drop(const struct mp_placement *pl, int ep, long total, int K, const int32_t *ids,
                    float *w, long cap)
{
    int L = 1;
    for (int e = 0; e < ep; e++)
        L = mp_placement_nlocal(pl, e) > L ? mp_placement_nlocal(pl, e) : L;
    long *cnt = malloc((size_t)ep * L * sizeof *cnt);
    if (!cnt)
        return -1;
    long dropped = 0;
    for (int e = 0; e < ep; e++) {
        long tok0, ntok = mp_token_split(total, ep, e, &tok0);
        memset(cnt, 0, (size_t)ep * L * sizeof *cnt);
        for (long i = tok0 * K; i < (tok0 + ntok) * K; i++) {
            int dest = mp_placement_dest(pl, e, ids[i], i / K);
            int li = mp_placement_local_index(pl, dest, ids[i]);
            if (cnt[(long)dest * L + li]++ >= cap) {
                w[i] = 0.0f;
                dropped++;
            }
        }
    }
    free(cnt);
    return dropped;
}
