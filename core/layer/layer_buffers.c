/* layer_buffers.c - the layer's device buffers: their sizes, growth and the memory checks that
 * refuse a layout or point before allocating. */
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "layer_internal.h"
#include "memguard.h"

int mp_layer_alloc_rows(struct mp_layer *L, long rows)
{
    const struct mp_compute_ops *o = L->ops;
    size_t H = (size_t)L->m.hidden, tok = (size_t)L->max_tok_rank, r = (size_t)rows;
    size_t wrows = r > tok ? r : tok;
    o->free(L->dev, L->recvbuf);
    o->free(L->dev, L->expbuf);
    o->free(L->dev, L->outbuf);
    o->free(L->dev, L->work);
    L->recvbuf = o->alloc(L->dev, r * H);
    L->expbuf = o->alloc(L->dev, r * H);
    L->outbuf = o->alloc(L->dev, (r + (size_t)L->S * tok) * H);
    L->work = o->alloc(L->dev, wrows * 2 * (size_t)L->Dl);
    L->max_rows = rows;
    if (!L->recvbuf || !L->expbuf || !L->outbuf || !L->work) {
        mp_error("out of memory for the routed rows of up to %ld token-expert pairs", rows);
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

long mp_layer_rows_bound(long tokens, int K, int nlocal)
{
    return tokens * (nlocal < K ? nlocal : K);
}

/* Bytes of the routed-row buffers for `rows` rows: recvbuf, expbuf, outbuf (+ the shared rows of
 * `tok` tokens) and the FFN scratch. */
static double row_buffer_bytes(double rows, double tok, double H, double Dl, double S, size_t elem)
{
    return (rows * 3 + S * tok) * H * elem + (rows > tok ? rows : tok) * 2 * Dl * elem;
}

double mp_layer_bytes_estimate(const struct mp_model *m, int tp, int ep, int max_local,
                               long max_tokens, size_t elem)
{
    double H = m->hidden, Dl = (double)m->ffn / tp, K = m->topk, S = m->shared;
    double tok = (double)((max_tokens + ep - 1) / ep);
    double rows = (double)mp_layer_rows_bound(max_tokens, m->topk, max_local);
    double weights = (max_local + S) * 3.0 * H * Dl * elem;
    double bufs = (tok * 2 + tok * K) * H * elem + row_buffer_bytes(rows, tok, H, Dl, S, elem);
    return weights + bufs;
}

int mp_layer_memory_refusal(struct mp_comm *comm, const struct mp_compute_ops *ops,
                            struct mp_compute *dev, long long max_memory, double need,
                            const char *what)
{
    struct mp_mem_verdict v;
    int fits = mp_memory_agree(comm, ops, dev, max_memory, need, &v);
    if (fits < 0)
        return -fits;
    if (fits)
        return MP_OK;
    mp_usage("%s needs about %.3g GB per rank; rank %d (host %s) has %.3g GB free%s, its budget is "
             "%.3g GB (%s); lower --hidden/--ffn/--experts/--batch or use more ranks",
             what, v.need / 1e9, v.rank, v.host, v.free_bytes / 1e9,
             ops->mem_info ? " on its GPU" : " on its host", v.budget / 1e9, v.source);
    return MP_ERR_USAGE;
}

int mp_layer_size_rows(struct mp_layer *L, long total, int nlocal)
{
    long rows = mp_layer_rows_bound(total, L->m.topk, nlocal);
    double H = L->m.hidden, tok = (double)L->max_tok_rank;
    double extra = 0;
    if (rows > L->max_rows)
        extra = row_buffer_bytes((double)rows, tok, H, L->Dl, L->S, L->ops->elem_size) -
                row_buffer_bytes((double)L->max_rows, tok, H, L->Dl, L->S, L->ops->elem_size);
    /* --max-memory bounds the whole layer; free memory only what is still to allocate */
    double need = L->max_memory > 0 && extra > 0
                      ? mp_layer_bytes_estimate(&L->m, L->tp, L->ep, nlocal, L->max_tokens,
                                                L->ops->elem_size)
                      : extra;
    char what[160];
    snprintf(what, sizeof what, "a point of %ld tokens with up to %d experts on a rank (its "
             "placement)", total, nlocal);
    int rc = mp_layer_memory_refusal(L->comm, L->ops, L->dev, L->max_memory, need, what);
    if (rc == MP_OK && rows > L->max_rows)
        rc = mp_layer_alloc_rows(L, rows);
    return rc;
}

int mp_layer_check_rows(struct mp_layer *L, long nrecv)
{
    if (nrecv <= L->max_rows)
        return MP_OK;
    mp_error("the count exchange announced %ld rows to receive, the buffers hold %ld", nrecv,
             L->max_rows);
    return MP_ERR_RUNTIME;
}

void *mp_layer_alloc_zero(struct mp_layer *L, size_t n)
{
    if (L->ops->alloc_zeroed)
        return L->ops->alloc_zeroed(L->dev, n);
    void *p = L->ops->alloc(L->dev, n);
    float *z = p ? calloc(n, sizeof(float)) : NULL;
    int rc = z ? L->ops->upload(L->dev, p, z, n) : MP_ERR_RUNTIME;
    free(z);
    if (rc != MP_OK) {
        L->ops->free(L->dev, p);
        return NULL;
    }
    return p;
}

void mp_layer_free_buffers(struct mp_layer *L)
{
    const struct mp_compute_ops *o = L->ops;
    o->free(L->dev, L->x);
    o->free(L->dev, L->sendbuf);
    o->free(L->dev, L->recvbuf);
    o->free(L->dev, L->expbuf);
    o->free(L->dev, L->outbuf);
    o->free(L->dev, L->work);
    o->free(L->dev, L->y);
    free(L->wire_sdispl);
    free(L->wire_rdispl);
}
