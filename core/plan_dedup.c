/* plan_dedup.c - the host plan of the rank-deduplicated dispatch (see plan_dedup.h). */
#include "plan_dedup.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

int mp_dedup_plan_alloc(struct mp_dedup_plan *p, int ep, int max_local, int K, long max_tok,
                        long max_rows)
{
    memset(p, 0, sizeof *p);
    p->ep = ep;
    p->K = K;
    p->max_local = max_local;
    p->max_tok = max_tok > 0 ? max_tok : 1;
    /* a token's top-K experts are distinct, so it goes to at most min(K, ep) ranks */
    p->max_send = p->max_tok * (K < ep ? K : ep);
    p->max_recv = p->max_exp = max_rows > 0 ? max_rows : 1;
    p->send_rows = calloc((size_t)ep, sizeof *p->send_rows);
    p->send_displ = calloc((size_t)ep, sizeof *p->send_displ);
    p->recv_rows = calloc((size_t)ep, sizeof *p->recv_rows);
    p->recv_displ = calloc((size_t)ep, sizeof *p->recv_displ);
    p->last_tok = calloc((size_t)ep, sizeof *p->last_tok);
    p->cursor = calloc((size_t)ep, sizeof *p->cursor);
    p->row_tok = calloc((size_t)ep, sizeof *p->row_tok);
    p->row_at = calloc((size_t)ep, sizeof *p->row_at);
    p->exp_cursor = calloc((size_t)max_local + 1, sizeof *p->exp_cursor);
    p->send_tok = malloc((size_t)p->max_send * sizeof *p->send_tok);
    p->send_meta = malloc((size_t)p->max_send * K * sizeof *p->send_meta);
    p->ones = malloc((size_t)p->max_send * sizeof *p->ones);
    p->ids = malloc((size_t)p->max_tok * K * sizeof *p->ids);
    p->w = malloc((size_t)p->max_tok * K * sizeof *p->w);
    p->recv_meta = malloc((size_t)p->max_recv * K * sizeof *p->recv_meta);
    p->exp_row = malloc((size_t)p->max_exp * sizeof *p->exp_row);
    p->exp_w = malloc((size_t)p->max_exp * sizeof *p->exp_w);
    p->expert_off = calloc((size_t)max_local + 1, sizeof *p->expert_off);
    if (!p->send_rows || !p->send_displ || !p->recv_rows || !p->recv_displ || !p->last_tok ||
        !p->cursor || !p->row_tok || !p->row_at || !p->exp_cursor ||
        !p->send_tok || !p->send_meta || !p->ones || !p->ids || !p->w || !p->recv_meta ||
        !p->exp_row || !p->exp_w || !p->expert_off) {
        mp_dedup_plan_free(p);
        return MP_ERR_RUNTIME;
    }
    for (long i = 0; i < p->max_send; i++)
        p->ones[i] = 1.0f;
    return MP_OK;
}

void mp_dedup_plan_free(struct mp_dedup_plan *p)
{
    free(p->send_rows);
    free(p->send_displ);
    free(p->recv_rows);
    free(p->recv_displ);
    free(p->last_tok);
    free(p->cursor);
    free(p->row_tok);
    free(p->row_at);
    free(p->exp_cursor);
    free(p->send_tok);
    free(p->send_meta);
    free(p->ones);
    free(p->ids);
    free(p->w);
    free(p->recv_meta);
    free(p->exp_row);
    free(p->exp_w);
    free(p->expert_off);
    memset(p, 0, sizeof *p);
}

void mp_dedup_plan_send(struct mp_dedup_plan *p, const struct mp_placement *pl, int ep_rank,
                        long tok0, long ntok, const int32_t *ids, const float *w)
{
    int ep = p->ep, K = p->K;
    p->ntok = ntok;
    p->local_pairs = 0;
    memset(p->send_rows, 0, (size_t)ep * sizeof *p->send_rows);
    /* pass 1: rows per rank, a token counted once per rank that serves one of its pairs */
    for (int d = 0; d < ep; d++)
        p->last_tok[d] = -1;
    for (long t = 0; t < ntok; t++)
        for (int k = 0; k < K; k++) {
            int d = mp_placement_dest(pl, ep_rank, ids[t * K + k], tok0 + t);
            p->local_pairs += d == ep_rank;
            if (p->last_tok[d] != t) {
                p->last_tok[d] = (int32_t)t;
                p->send_rows[d]++;
            }
        }
    int off = 0;
    for (int d = 0; d < ep; d++) {
        p->send_displ[d] = off;
        off += p->send_rows[d];
    }
    p->nsend = off;
    /* pass 2: each token's row at each of its ranks, in token order within a rank's block
     * (cursor: the next row of each block; row_tok/row_at: the token that has a row at each rank
     * and which row) */
    for (int d = 0; d < ep; d++) {
        p->cursor[d] = p->send_displ[d];
        p->row_tok[d] = -1;
    }
    for (long t = 0; t < ntok; t++)
        for (int k = 0; k < K; k++) {
            int d = mp_placement_dest(pl, ep_rank, ids[t * K + k], tok0 + t);
            if (p->row_tok[d] != t) { /* t's first pair at d: its row there */
                int r = p->cursor[d]++;
                p->row_tok[d] = (int32_t)t;
                p->row_at[d] = r;
                p->send_tok[r] = (int32_t)t;
                for (int j = 0; j < K; j++)
                    p->send_meta[(size_t)r * K + j] = (struct mp_dedup_meta){.li = -1, .w = 0};
            }
            p->send_meta[(size_t)p->row_at[d] * K + k] = (struct mp_dedup_meta){
                .li = mp_placement_local_index(pl, d, ids[t * K + k]), .w = w[t * K + k]};
        }
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

int mp_dedup_plan_expand(struct mp_dedup_plan *p, int nlocal)
{
    int K = p->K;
    long n = p->nrecv;
    memset(p->expert_off, 0, ((size_t)p->max_local + 1) * sizeof *p->expert_off);
    if (nlocal > p->max_local) {
        mp_error("dedup dispatch: %d local experts, more than the %d the plan holds", nlocal,
                 p->max_local);
        return MP_ERR_RUNTIME;
    }
    /* counts per local expert, then prefix sums, then the rows in received order per expert */
    for (long i = 0; i < n * K; i++) {
        int li = p->recv_meta[i].li;
        if (li < -1 || li >= nlocal) {
            mp_error("dedup dispatch: received row %ld names local expert %d of %d", i / K, li,
                     nlocal);
            return MP_ERR_RUNTIME;
        }
        if (li >= 0)
            p->expert_off[li + 1]++;
    }
    for (int l = 0; l < nlocal; l++)
        p->expert_off[l + 1] += p->expert_off[l];
    for (int l = nlocal; l < p->max_local; l++)
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
            int li = p->recv_meta[r * K + k].li;
            if (li < 0)
                continue;
            long j = p->exp_cursor[li]++;
            p->exp_row[j] = (int32_t)r;
            p->exp_w[j] = p->recv_meta[r * K + k].w;
        }
    return MP_OK;
}
