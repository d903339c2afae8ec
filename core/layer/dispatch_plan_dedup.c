/* dispatch_plan_dedup.c - the host plan of the rank-deduplicated dispatch (see dispatch_plan_dedup.h). */
#include "dispatch_plan_dedup.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "freeall.h"

int mp_dedup_plan_alloc(struct mp_dedup_plan *p, int ep, int max_local, int K, long max_tok,
                        long max_rows, long max_relayed)
{
    memset(p, 0, sizeof *p);
    p->ep = ep;
    p->K = K;
    p->max_local = max_local;
    p->max_tok = max_tok > 0 ? max_tok : 1;
    /* a token's top-K experts are distinct, so it goes to at most min(K, ep) ranks */
    p->max_send = p->max_tok * (K < ep ? K : ep);
    p->max_exp = max_rows > 0 ? max_rows : 1;
    /* node: the rows relayed through this rank come first, then the forwards it receives */
    p->max_recv = p->max_exp + (max_relayed > 0 ? max_relayed : 0);
    p->max_fwd = (max_relayed > 0 ? max_relayed : 0) * (K < ep ? K : ep);
    long ones = p->max_send > p->max_fwd ? p->max_send : p->max_fwd;
    p->send_rows = calloc((size_t)ep, sizeof *p->send_rows);
    p->send_displ = calloc((size_t)ep, sizeof *p->send_displ);
    p->recv_rows = calloc((size_t)ep, sizeof *p->recv_rows);
    p->recv_displ = calloc((size_t)ep, sizeof *p->recv_displ);
    p->last_tok = calloc((size_t)ep, sizeof *p->last_tok);
    p->ep_node = calloc((size_t)ep, sizeof *p->ep_node);
    p->cursor = calloc((size_t)ep, sizeof *p->cursor);
    p->row_tok = calloc((size_t)ep, sizeof *p->row_tok);
    p->row_at = calloc((size_t)ep, sizeof *p->row_at);
    p->exp_cursor = calloc((size_t)max_local + 1, sizeof *p->exp_cursor);
    p->send_tok = malloc((size_t)p->max_send * sizeof *p->send_tok);
    p->send_meta = malloc((size_t)p->max_send * K * sizeof *p->send_meta);
    p->ones = malloc((size_t)ones * sizeof *p->ones);
    p->fwd_rows = calloc((size_t)ep, sizeof *p->fwd_rows);
    p->fwd_displ = calloc((size_t)ep, sizeof *p->fwd_displ);
    p->recv1_rows = calloc((size_t)ep, sizeof *p->recv1_rows);
    p->recv1_displ = calloc((size_t)ep, sizeof *p->recv1_displ);
    p->fwd_src = malloc((size_t)(p->max_fwd > 0 ? p->max_fwd : 1) * sizeof *p->fwd_src);
    p->fwd_meta = malloc((size_t)(p->max_fwd > 0 ? p->max_fwd : 1) * K * sizeof *p->fwd_meta);
    p->ids = malloc((size_t)p->max_tok * K * sizeof *p->ids);
    p->w = malloc((size_t)p->max_tok * K * sizeof *p->w);
    p->recv_meta = malloc((size_t)p->max_recv * K * sizeof *p->recv_meta);
    p->exp_row = malloc((size_t)p->max_exp * sizeof *p->exp_row);
    p->exp_w = malloc((size_t)p->max_exp * sizeof *p->exp_w);
    p->x_rows = calloc((size_t)ep, sizeof *p->x_rows);
    p->in_cnt = calloc((size_t)2 * ep, sizeof *p->in_cnt);
    p->d_rows = calloc((size_t)ep, sizeof *p->d_rows);
    p->d_rrows = calloc((size_t)ep, sizeof *p->d_rrows);
    p->in_rcnt = calloc((size_t)2 * ep, sizeof *p->in_rcnt);
    p->in_rows = calloc((size_t)ep, sizeof *p->in_rows);
    p->in_displ = calloc((size_t)ep, sizeof *p->in_displ);
    p->in_rrows = calloc((size_t)ep, sizeof *p->in_rrows);
    p->in_rdispl = calloc((size_t)ep, sizeof *p->in_rdispl);
    p->in_meta = malloc((size_t)(p->max_send + p->max_fwd) * K * sizeof *p->in_meta);
    p->expert_off = calloc((size_t)max_local + 1, sizeof *p->expert_off);
    if (!p->send_rows || !p->send_displ || !p->recv_rows || !p->recv_displ || !p->last_tok || !p->ep_node ||
        !p->cursor || !p->row_tok || !p->row_at || !p->exp_cursor ||
        !p->send_tok || !p->send_meta || !p->ones || !p->ids || !p->w || !p->recv_meta ||
        !p->exp_row || !p->exp_w || !p->expert_off || !p->fwd_rows || !p->fwd_displ ||
        !p->recv1_rows || !p->recv1_displ || !p->fwd_src || !p->fwd_meta || !p->x_rows ||
        !p->d_rows || !p->d_rrows || !p->in_cnt || !p->in_rcnt || !p->in_rows || !p->in_displ ||
        !p->in_rrows || !p->in_rdispl || !p->in_meta) {
        mp_dedup_plan_free(p);
        return MP_ERR_RUNTIME;
    }
    for (long i = 0; i < ones; i++)
        p->ones[i] = 1.0f;
    return MP_OK;
}

void mp_dedup_plan_free(struct mp_dedup_plan *p)
{
    MP_FREE_ALL(p->send_rows, p->send_displ, p->recv_rows, p->recv_displ, p->last_tok, p->ep_node,
                p->cursor, p->row_tok, p->row_at, p->exp_cursor, p->send_tok, p->send_meta, p->ones,
                p->ids, p->w, p->recv_meta, p->exp_row, p->exp_w, p->expert_off, p->fwd_rows,
                p->fwd_displ, p->recv1_rows, p->recv1_displ, p->fwd_src, p->fwd_meta, p->x_rows,
                p->in_cnt, p->d_rows, p->d_rrows, p->in_rcnt, p->in_rows, p->in_displ, p->in_rrows,
                p->in_rdispl, p->in_meta);
    memset(p, 0, sizeof *p);
}

int mp_dedup_relay(const int *ep_node, int ep, int src, int node)
{
    int idx = 0, count = 0;
    for (int q = 0; q < ep; q++) {
        idx += q < src && ep_node[q] == ep_node[src];
        count += ep_node[q] == node;
    }
    if (!count)
        return -1;
    for (int q = 0, i = 0; q < ep; q++) /* the (idx mod count)-th rank of the node */
        if (ep_node[q] == node && i++ == idx % count)
            return q;
    return -1;
}

/* Where the row of a pair served by rank d goes first from rank `me`: d itself (rank mode, or d
 * on me's node), else the relay of d's node. */
static int target_of(const int *ep_node, int ep, int me, int d)
{
    return !ep_node || ep_node[d] == ep_node[me] ? d : mp_dedup_relay(ep_node, ep, me, ep_node[d]);
}

void mp_dedup_plan_send(struct mp_dedup_plan *p, const struct mp_placement *pl, int ep_rank,
                        long tok0, long ntok, const int32_t *ids, const float *w,
                        const int *ep_node)
{
    int ep = p->ep, K = p->K;
    p->ntok = ntok;
    p->local_pairs = 0;
    memset(p->send_rows, 0, (size_t)ep * sizeof *p->send_rows);
    /* pass 1: rows per target, a token counted once per target that one of its pairs goes to */
    for (int d = 0; d < ep; d++)
        p->last_tok[d] = -1;
    for (long t = 0; t < ntok; t++)
        for (int k = 0; k < K; k++) {
            int d = mp_placement_dest(pl, ep_rank, ids[t * K + k], tok0 + t);
            int g = target_of(ep_node, ep, ep_rank, d);
            p->local_pairs += d == ep_rank;
            if (p->last_tok[g] != t) {
                p->last_tok[g] = (int32_t)t;
                p->send_rows[g]++;
            }
        }
    int off = 0;
    for (int d = 0; d < ep; d++) {
        p->send_displ[d] = off;
        off += p->send_rows[d];
    }
    p->nsend = off;
    /* pass 2: each token's row at each of its targets, in token order within a target's block
     * (cursor: the next row of each block; row_tok/row_at: the token that has a row at each
     * target and which row) */
    for (int d = 0; d < ep; d++) {
        p->cursor[d] = p->send_displ[d];
        p->row_tok[d] = -1;
    }
    for (long t = 0; t < ntok; t++)
        for (int k = 0; k < K; k++) {
            int d = mp_placement_dest(pl, ep_rank, ids[t * K + k], tok0 + t);
            int g = target_of(ep_node, ep, ep_rank, d);
            if (p->row_tok[g] != t) { /* t's first pair bound for g: its row there */
                int r = p->cursor[g]++;
                p->row_tok[g] = (int32_t)t;
                p->row_at[g] = r;
                p->send_tok[r] = (int32_t)t;
                for (int j = 0; j < K; j++)
                    p->send_meta[(size_t)r * K + j] = (struct mp_dedup_meta){.li = -1, .w = 0};
            }
            int li = mp_placement_local_index(pl, d, ids[t * K + k]);
            p->send_meta[(size_t)p->row_at[g] * K + k] = (struct mp_dedup_meta){
                .li = ep_node ? d * p->max_local + li : li, .w = w[t * K + k]};
        }
}

int mp_dedup_plan_forward(struct mp_dedup_plan *p, int ep_rank)
{
    int ep = p->ep, K = p->K, L = p->max_local;
    long n = p->nrecv;
    memset(p->fwd_rows, 0, (size_t)ep * sizeof *p->fwd_rows);
    for (int d = 0; d < ep; d++)
        p->row_tok[d] = -1;
    /* pass 1: forwards per rank, once per (received row, rank of this node serving a choice) */
    for (long r = 0; r < n; r++)
        for (int k = 0; k < K; k++) {
            int code = p->recv_meta[r * K + k].li, d = code < 0 ? -1 : code / L;
            if (code < -1 || d >= ep) {
                mp_error("dedup dispatch: received row %ld names cell %d of %d", r, code, ep * L);
                return MP_ERR_RUNTIME;
            }
            if (d < 0 || d == ep_rank || p->row_tok[d] == r)
                continue;
            p->row_tok[d] = (int32_t)r;
            p->fwd_rows[d]++;
        }
    long off = 0;
    for (int d = 0; d < ep; d++) {
        p->fwd_displ[d] = (int)off;
        off += p->fwd_rows[d];
    }
    p->nfwd = off;
    if (off > p->max_fwd) {
        mp_error("dedup dispatch: %ld rows to forward, more than the %ld the plan holds", off,
                 p->max_fwd);
        return MP_ERR_RUNTIME;
    }
    /* pass 2: each forward in received order within its rank's block, with that rank's choices */
    for (int d = 0; d < ep; d++) {
        p->cursor[d] = p->fwd_displ[d];
        p->row_tok[d] = -1;
    }
    for (long r = 0; r < n; r++)
        for (int k = 0; k < K; k++) {
            int code = p->recv_meta[r * K + k].li, d = code < 0 ? -1 : code / L;
            if (d < 0 || d == ep_rank)
                continue;
            if (p->row_tok[d] != r) {
                int f = p->cursor[d]++;
                p->row_tok[d] = (int32_t)r;
                p->row_at[d] = f;
                p->fwd_src[f] = (int32_t)r;
                for (int j = 0; j < K; j++)
                    p->fwd_meta[(size_t)f * K + j] = (struct mp_dedup_meta){.li = -1, .w = 0};
            }
            p->fwd_meta[(size_t)p->row_at[d] * K + k] = p->recv_meta[r * K + k];
        }
    return MP_OK;
}

void mp_dedup_plan_inter(struct mp_dedup_plan *p, int ep_rank)
{
    for (int q = 0; q < p->ep; q++)
        p->x_rows[q] = p->ep_node[q] != p->ep_node[ep_rank] ? p->send_rows[q] : 0;
}

void mp_dedup_plan_intra_counts(struct mp_dedup_plan *p, int ep_rank)
{
    for (int q = 0; q < p->ep; q++) {
        int same = p->ep_node[q] == p->ep_node[ep_rank];
        p->in_cnt[2 * q] = p->d_rows[q] = same ? p->send_rows[q] : 0;
        p->in_cnt[2 * q + 1] = same ? p->fwd_rows[q] : 0;
    }
}

int mp_dedup_plan_intra(struct mp_dedup_plan *p, int ep_rank)
{
    int K = p->K;
    long out = 0, in = 0;
    for (int q = 0; q < p->ep; q++) {
        int same = p->ep_node[q] == p->ep_node[ep_rank];
        p->d_rrows[q] = same ? p->in_rcnt[2 * q] : 0;
        p->recv1_rows[q] = same ? p->in_rcnt[2 * q + 1] : 0;
        p->in_displ[q] = (int)out;
        p->in_rows[q] = p->in_cnt[2 * q] + p->in_cnt[2 * q + 1];
        p->in_rdispl[q] = (int)in;
        p->in_rrows[q] = p->d_rrows[q] + p->recv1_rows[q];
        /* the metadata in the phase's order: q's direct rows, then its forwards */
        memcpy(p->in_meta + (size_t)out * K, p->send_meta + (size_t)p->send_displ[q] * K,
               (size_t)p->in_cnt[2 * q] * K * sizeof *p->in_meta);
        memcpy(p->in_meta + (size_t)(out + p->in_cnt[2 * q]) * K,
               p->fwd_meta + (size_t)p->fwd_displ[q] * K,
               (size_t)p->in_cnt[2 * q + 1] * K * sizeof *p->in_meta);
        out += p->in_rows[q];
        in += p->in_rrows[q];
    }
    p->nin_send = out;
    p->nrecv1 = in;
    if (p->nrecv + in > p->max_recv) {
        mp_error("dedup dispatch: %ld rows received over both phases, more than the %ld the plan "
                 "holds", p->nrecv + in, p->max_recv);
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

int mp_dedup_plan_recv_forwards(struct mp_dedup_plan *p)
{
    long off = p->nrecv;
    for (int s = 0; s < p->ep; s++) {
        p->recv1_displ[s] = (int)off;
        off += p->recv1_rows[s];
    }
    p->nrecv1 = off - p->nrecv;
    if (off > p->max_recv) {
        mp_error("dedup dispatch: %ld rows received and forwarded, more than the %ld the plan "
                 "holds", off, p->max_recv);
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

int mp_dedup_plan_recv(struct mp_dedup_plan *p)
{
    long off = 0;
    for (int s = 0; s < p->ep; s++) {
        p->recv_displ[s] = (int)off;
        off += p->recv_rows[s];
    }
    p->nrecv = off;
    if (off > p->max_recv) {
        mp_error("dedup dispatch: %ld rows received, more than the %ld the plan holds", off,
                 p->max_recv);
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

int mp_dedup_plan_expand(struct mp_dedup_plan *p, int self, int nlocal)
{
    int K = p->K, L = p->max_local;
    long n = p->nrecv + (self >= 0 ? p->nrecv1 : 0);
    memset(p->expert_off, 0, ((size_t)L + 1) * sizeof *p->expert_off);
    if (nlocal > L) {
        mp_error("dedup dispatch: %d local experts, more than the %d the plan holds", nlocal, L);
        return MP_ERR_RUNTIME;
    }
    /* the local expert of choice i, or −1 when it is not this rank's (node: a cell elsewhere) */
#define LOCAL_OF(i)                                                                                \
    (self < 0 ? p->recv_meta[i].li                                                                 \
              : p->recv_meta[i].li >= 0 && p->recv_meta[i].li / L == self ? p->recv_meta[i].li % L \
                                                                           : -1)
    /* counts per local expert, then prefix sums, then the rows in received order per expert */
    for (long i = 0; i < n * K; i++) {
        int li = LOCAL_OF(i);
        if (p->recv_meta[i].li < -1 || li >= nlocal ||
            (self >= 0 && p->recv_meta[i].li >= p->ep * L)) {
            mp_error("dedup dispatch: received row %ld names expert code %d (%d local)", i / K,
                     p->recv_meta[i].li, nlocal);
            return MP_ERR_RUNTIME;
        }
        if (li >= 0)
            p->expert_off[li + 1]++;
    }
    for (int l = 0; l < nlocal; l++)
        p->expert_off[l + 1] += p->expert_off[l];
    for (int l = nlocal; l < L; l++)
        p->expert_off[l + 1] = p->expert_off[l];
    p->nexp = p->expert_off[nlocal];
    if (p->nexp > p->max_exp) {
        mp_error("dedup dispatch: %ld expert rows, more than the %ld the plan holds", p->nexp,
                 p->max_exp);
        return MP_ERR_RUNTIME;
    }
    for (int l = 0; l < nlocal; l++)
        p->exp_cursor[l] = p->expert_off[l];
    for (long r = 0; r < n; r++) /* received order within each expert's block */
        for (int k = 0; k < K; k++) {
            int li = LOCAL_OF(r * K + k);
            if (li < 0)
                continue;
            long j = p->exp_cursor[li]++;
            p->exp_row[j] = (int32_t)r;
            p->exp_w[j] = p->recv_meta[r * K + k].w;
        }
#undef LOCAL_OF
    return MP_OK;
}

void mp_dedup_padded_layout(const int *ep_node, int ep, int me, long cap1, long cap2, int *send1,
                            int *recv1, int *send2, int *recv2)
{
    for (int q = 0; q < ep; q++) {
        int same = !ep_node || ep_node[q] == ep_node[me];
        send1[q] = same || mp_dedup_relay(ep_node, ep, me, ep_node[q]) == q ? (int)cap1 : 0;
        recv1[q] = same || mp_dedup_relay(ep_node, ep, q, ep_node[me]) == me ? (int)cap1 : 0;
        send2[q] = recv2[q] = ep_node && same && q != me ? (int)cap2 : 0;
    }
}

int mp_dedup_padded_relays(const int *ep_node, int ep)
{
    int most = 0;
    for (int r = 0; r < ep; r++) {
        int n = 0;
        for (int s = 0; s < ep; s++)
            n += ep_node[s] != ep_node[r] && mp_dedup_relay(ep_node, ep, s, ep_node[r]) == r;
        most = n > most ? n : most;
    }
    return most;
}

/* One side's rows (rows[q] bound for q from displ[q], their source index and metadata) into
 * slots of slot_rows[q]; counts the pairs of rows past a slot, and of those bound for `self`. */
static long fill_slots(int ep, int K, const int *rows, const int *displ, const int32_t *src,
                       const struct mp_dedup_meta *meta, const int *slot_rows, int self,
                       int32_t *slot_src, float *slot_w, struct mp_dedup_meta *slot_meta,
                       long *self_dropped)
{
    long dropped = 0, s = 0;
    for (int q = 0; q < ep; q++)
        for (long i = 0; i < slot_rows[q] || i < rows[q]; i++) {
            long r = displ[q] + i;
            const struct mp_dedup_meta *m = meta + (size_t)r * K;
            if (i >= slot_rows[q]) { /* past the slot: dropped with its pairs */
                for (int j = 0; j < K; j++) {
                    dropped += m[j].li >= 0;
                    *self_dropped += q == self && m[j].li >= 0;
                }
                continue;
            }
            int row = i < rows[q];
            slot_src[s] = row ? src[r] : 0;
            slot_w[s] = row ? 1.0f : 0.0f;
            for (int j = 0; j < K; j++)
                slot_meta[(size_t)s * K + j] = row ? m[j] : (struct mp_dedup_meta){.li = -1, .w = 0};
            s++;
        }
    return dropped;
}

long mp_dedup_plan_slots(struct mp_dedup_plan *p, int ep_rank, const int *slot_rows,
                         int32_t *slot_tok, float *slot_w, struct mp_dedup_meta *slot_meta)
{
    long own = 0;
    long dropped = fill_slots(p->ep, p->K, p->send_rows, p->send_displ, p->send_tok, p->send_meta,
                              slot_rows, ep_rank, slot_tok, slot_w, slot_meta, &own);
    p->local_pairs -= own;
    return dropped;
}

long mp_dedup_plan_fwd_slots(const struct mp_dedup_plan *p, const int *slot_rows,
                             int32_t *slot_src, float *slot_w, struct mp_dedup_meta *slot_meta)
{
    long own = 0;
    return fill_slots(p->ep, p->K, p->fwd_rows, p->fwd_displ, p->fwd_src, p->fwd_meta, slot_rows,
                      -1, slot_src, slot_w, slot_meta, &own);
}
