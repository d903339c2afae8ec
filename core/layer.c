/* layer.c - the MoE layer pipeline of one rank (see layer.h). */
#include "layer.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "memguard.h"
#include "nvtx.h"
#include "padded.h"
#include "plan.h"
#include "reference.h"
#include "stats.h"
#include "topo.h"
#include "watchdog.h"
#include "weights.h"

volatile int mp_in_timed_loop;

/* Routing draws made before timing and cycled through the iterations. */
#define POOL_DRAWS 8

enum {
    MARK_START, MARK_ROUTE, MARK_DISPATCH, MARK_FFN, MARK_TP, MARK_COMBINE,
    MARK_ALIGN, /* this rank's arrival at the start barrier */
    MARK_CHUNKS
};
/* the pipelined layer's marks of chunk k: FFN start, FFN end, TP reduce start (after the wait for
 * the exchanges in flight), TP reduce end */
#define MARK_CHUNK(k, i) (MARK_CHUNKS + 4 * (k) + (i))

struct mp_layer {
    const struct mp_compute_ops *ops;
    struct mp_compute *dev;
    struct mp_comm *comm;
    struct mp_model m;
    uint64_t seed;
    int tp, ep, Dl, S;
    long max_tokens, max_tok_rank;
    long max_rows; /* routed rows the buffers below hold: what this rank can receive (rows_bound) */
    long long max_memory;
    size_t row_bytes;

    /* device buffers */
    void *x;        /* [max_tok_rank × H] this rank's tokens */
    void *sendbuf;  /* [max_tok_rank·K × H] dispatch out / combine in */
    /* the routed rows: a pipelined layer's chunk k uses the rows after the earlier chunks' (its
     * slice is as large as its received counts) */
    void *recvbuf;  /* [max_rows × H] dispatch in (source-major) / combine out */
    void *expbuf;   /* [max_rows × H] dispatch in, expert-major */
    void *outbuf;   /* [(max_rows + S·max_tok_rank) × H] FFN out: routed rows, then shared rows */
    void *work;     /* [max(max_rows, max_tok_rank) × 2·Dl] */
    void *y;        /* [max_tok_rank × H] layer output */
    void *wg;       /* [H × E] router weights (gate routing), uploaded on first use */
    float *wg_host;

    /* local expert weights, cached while the set of local experts stays the same */
    int nlocal, cap_local;
    int *local_ids;
    void **wgu, **wd;       /* [nlocal + S] */
    long shared_off[2];     /* row offsets {0, ntok} for the shared experts */

    struct mp_plan plan;
    float *host_tok;        /* [max_tok_rank × H] host scratch for generated activations */

    /* the dispatch plan is built by the compute backend (plan_setup/plan_build): the routing goes
     * from the gate or the pool to the backend, which sorts the pairs where they are; the host
     * sees only the pairs per cell */
    const int32_t *dplan_totals; /* [chunks·ep·max_local of the plan in use] */
    int32_t *route_off, *route_cell; /* this rank's route table (mp_route_table) */
    /* --graph with the backend plan: the draw's routing inputs in page-locked memory, read by the
     * replay (pooled ids and weights, or the gate's noise) */
    int32_t *pin_ids;
    float *pin_rw, *pin_noise;
    size_t pin_ids_n, pin_noise_n;

    /* the pipelined mode: one plan per chunk; chunk c uses its own slice of the row buffers */
    int nchunk_plans;
    struct mp_plan *chunk_plans;
    int *chunk_cnt_send, *chunk_cnt_recv; /* [ep][chunks][max_local]: one count exchange for all */

    /* the padded dispatch: fixed slots, its own buffers (grown when a point needs more rows) */
    struct mp_padded pad;
    long pad_rows;              /* slot rows the buffers below hold */
    void *pad_send;             /* [pad_rows × H] dispatch out / combine in */
    void *pad_recv;             /* [pad_rows × H] dispatch in (source-major) / combine out */
    void *pad_exp;              /* [pad_rows × H] expert-major */
    void *pad_out;              /* [(pad_rows + S·max_tok_rank) × H] FFN out: slot rows, then shared */
    void *pad_work;             /* [max(pad_rows, max_tok_rank) × 2·Dl] */
    int *pad_cnt_recv;          /* [ep·max_local] valid rows per received slot (metrics) */
    int captured; /* --graph: the padded layer captured for the current point */
};

/* (Re)allocate the routed-row buffers for `rows` rows (recvbuf, expbuf, outbuf, work); what they
 * held is not kept. */
static int alloc_row_buffers(struct mp_layer *L, long rows)
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

/* The most token-expert rows a rank holding `nlocal` experts can receive for `tokens` tokens in
 * all: a token's top-K experts are distinct, so it sends a rank at most min(K, nlocal) pairs. */
static long rows_bound(long tokens, int K, int nlocal)
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
    double rows = (double)rows_bound(max_tokens, m->topk, max_local);
    double weights = (max_local + S) * 3.0 * H * Dl * elem;
    double bufs = (tok * 2 + tok * K) * H * elem + row_buffer_bytes(rows, tok, H, Dl, S, elem);
    return weights + bufs;
}

/* Refuse, on every rank alike, when `need` bytes exceed some rank's budget: the message names the
 * bytes, the worst rank's free memory and where it is. MP_OK when they fit everywhere. */
static int memory_refusal(struct mp_comm *comm, const struct mp_compute_ops *ops,
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

int mp_layer_create(struct mp_layer **out, const struct mp_compute_ops *ops, struct mp_compute *dev,
                    struct mp_comm *comm, const struct mp_model *model, uint64_t seed,
                    long max_tokens, long long max_memory, int max_overlap)
{
    int tp = comm->tp, ep = comm->ep;
    if (!ops->plan_setup || !ops->plan_build) {
        mp_error("the %s compute backend builds no dispatch plan: the layer cannot run on it",
                 ops->name);
        return MP_ERR_RUNTIME;
    }
    if (model->ffn % tp != 0) {
        mp_usage("--layout: tp%d needs --ffn (%d) divisible by %d", tp, model->ffn, tp);
        return MP_ERR_USAGE;
    }
    /* the most experts any rank can hold: its contiguous share plus every replica */
    int max_local = model->experts;
    /* buffers for the contiguous share; a point whose placement gives a rank more grows them */
    int share = (model->experts + ep - 1) / ep;
    double need = mp_layer_bytes_estimate(model, tp, ep, share, max_tokens, ops->elem_size);
    char what[256];
    snprintf(what, sizeof what, "--model %s with --hidden %d --ffn %d, %d experts on ep%d and up "
             "to %ld tokens", model->name, model->hidden, model->ffn, model->experts, ep, max_tokens);
    int rc = memory_refusal(comm, ops, dev, max_memory, need, what);
    if (rc != MP_OK)
        return rc;
    /* counts and displacements travel as MPI ints: a rank's rows must fit in one */
    double rows_rank = (double)((max_tokens + ep - 1) / ep) * model->topk;
    if ((double)max_tokens * model->topk > 2147483647.0 || rows_rank > 2147483647.0) {
        mp_usage("--batch × --seq × --topk = %.0f token-expert rows exceeds the 2^31 an MPI count "
                 "holds; lower --batch or --seq", (double)max_tokens * model->topk);
        return MP_ERR_USAGE;
    }
    struct mp_layer *L = calloc(1, sizeof *L);
    if (!L)
        goto oom;
    L->ops = ops;
    L->dev = dev;
    L->comm = comm;
    L->m = *model;
    L->seed = seed;
    L->tp = tp;
    L->ep = ep;
    L->Dl = model->ffn / tp;
    L->S = model->shared;
    L->max_tokens = max_tokens;
    L->max_tok_rank = (max_tokens + ep - 1) / ep;
    L->max_memory = max_memory;
    L->row_bytes = (size_t)model->hidden * ops->elem_size;
    size_t H = (size_t)model->hidden, tok = (size_t)L->max_tok_rank;
    L->x = ops->alloc(dev, tok * H);
    L->sendbuf = ops->alloc(dev, tok * model->topk * H);
    L->y = ops->alloc(dev, tok * H);
    if (L->x && L->sendbuf && L->y &&
        alloc_row_buffers(L, rows_bound(max_tokens, model->topk, share)) != MP_OK)
        goto oom;
    L->host_tok = malloc(tok * H * sizeof(float));
    L->route_off = malloc(((size_t)model->experts + 1) * sizeof(int32_t));
    L->route_cell = malloc((size_t)model->experts * ((size_t)ep + 1) * sizeof(int32_t));
    if (!L->x || !L->sendbuf || !L->y || !L->host_tok || !L->route_off || !L->route_cell)
        goto oom;
    if (mp_plan_alloc(&L->plan, ep, max_local, L->max_tok_rank, model->topk) != MP_OK)
        goto oom;
    /* rows beyond a rank's tokens are read as padding (token 0 of an empty rank): keep them finite */
    memset(L->host_tok, 0, tok * H * sizeof(float));
    if (ops->upload(dev, L->x, L->host_tok, tok * H) != MP_OK)
        goto oom;
    if (max_overlap > 1) {
        L->chunk_plans = calloc((size_t)max_overlap, sizeof *L->chunk_plans);
        if (!L->chunk_plans)
            goto oom;
        L->nchunk_plans = max_overlap;
        for (int i = 0; i < max_overlap; i++) /* a chunk covers every token, some of its pairs */
            if (mp_plan_alloc(&L->chunk_plans[i], ep, max_local, L->max_tok_rank, model->topk) != MP_OK)
                goto oom;
        size_t cells = (size_t)ep * max_overlap * L->chunk_plans[0].max_local;
        L->chunk_cnt_send = calloc(cells, sizeof(int));
        L->chunk_cnt_recv = calloc(cells, sizeof(int));
        if (!L->chunk_cnt_send || !L->chunk_cnt_recv)
            goto oom;
    }
    *out = L;
    return MP_OK;
oom:
    mp_error("out of memory allocating layer buffers for up to %ld tokens", max_tokens);
    mp_layer_destroy(L);
    return MP_ERR_RUNTIME;
}

/* Size the routed-row buffers for a point of `total` tokens on which this rank holds `nlocal`
 * experts: grown (never shrunk) to what it can receive, after a collective memory check of the
 * growth. Collective: every rank calls it for every dynamic-dispatch point. */
static int size_row_buffers(struct mp_layer *L, long total, int nlocal)
{
    long rows = rows_bound(total, L->m.topk, nlocal);
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
    int rc = memory_refusal(L->comm, L->ops, L->dev, L->max_memory, need, what);
    if (rc == MP_OK && rows > L->max_rows)
        rc = alloc_row_buffers(L, rows);
    return rc;
}

/* The padded dispatch's backend buffers. */
static void free_pad_buffers(struct mp_layer *L)
{
    const struct mp_compute_ops *o = L->ops;
    o->free(L->dev, L->pad_send);
    o->free(L->dev, L->pad_recv);
    o->free(L->dev, L->pad_exp);
    o->free(L->dev, L->pad_out);
    o->free(L->dev, L->pad_work);
    L->pad_send = L->pad_recv = L->pad_exp = L->pad_out = L->pad_work = NULL;
    L->pad_rows = 0;
}

static void free_padded(struct mp_layer *L)
{
    free_pad_buffers(L);
    free(L->pad_cnt_recv);
    L->pad_cnt_recv = NULL;
    mp_padded_free(&L->pad);
}

/* The page-locked routing inputs of a graph that routes on the device. */
static void free_pinned_routing(struct mp_layer *L)
{
    if (L->ops->host_free) {
        L->ops->host_free(L->dev, L->pin_ids);
        L->ops->host_free(L->dev, L->pin_rw);
        L->ops->host_free(L->dev, L->pin_noise);
    }
    L->pin_ids = NULL;
    L->pin_rw = L->pin_noise = NULL;
    L->pin_ids_n = L->pin_noise_n = 0;
}

/* A zero-filled backend buffer of n elements (padding rows must hold finite values). */
static void *alloc_zero(struct mp_layer *L, size_t n)
{
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

/* Size the padded dispatch for a point: slots of `cap` rows for up to `max_local` experts per peer;
 * buffers only grow, so a sweep allocates once per larger point and never inside timed loops. */
static int setup_padded(struct mp_layer *L, int max_local, long cap)
{
    int ep = L->ep;
    long rows = (long)ep * max_local * cap;
    if (L->pad.src_tok && L->pad.max_local == max_local && L->pad.cap == cap)
        return MP_OK;
    if (rows > 2147483647L) {
        mp_usage("--dispatch padded: %d ranks × %d experts × %ld rows per slot exceed the 2^31 rows "
                 "an MPI count holds; use a capacity factor (padded:1.25) or --dispatch dynamic",
                 ep, max_local, cap);
        return MP_ERR_USAGE;
    }
    mp_padded_free(&L->pad);
    free(L->pad_cnt_recv);
    L->pad_cnt_recv = calloc((size_t)ep * max_local, sizeof(int));
    if (!L->pad_cnt_recv || mp_padded_alloc(&L->pad, ep, max_local, cap) != MP_OK)
        goto oom;
    long tok = L->max_tok_rank; /* the shared experts' rows of a rank's own tokens */
    if (rows > L->pad_rows) {
        const struct mp_compute_ops *o = L->ops;
        /* the FFN's scratch holds every expert's rows at once (grouped and skinny GEMMs) */
        size_t H = (size_t)L->m.hidden, wrows = (size_t)(rows > tok ? rows : tok);
        double need = ((double)rows * 4 + (double)L->S * tok) * H * o->elem_size +
                      (double)wrows * 2 * L->Dl * o->elem_size;
        free_pad_buffers(L);
        char what[160];
        snprintf(what, sizeof what, "--dispatch padded with %d ranks × %d experts × %ld rows per "
                 "slot", ep, max_local, cap);
        int rc = memory_refusal(L->comm, o, L->dev, L->max_memory, need, what);
        if (rc != MP_OK) {
            free_padded(L);
            return rc;
        }
        L->pad_send = alloc_zero(L, (size_t)rows * H);
        L->pad_recv = alloc_zero(L, (size_t)rows * H);
        L->pad_exp = alloc_zero(L, (size_t)rows * H);
        L->pad_out = alloc_zero(L, ((size_t)rows + (size_t)L->S * tok) * H);
        L->pad_work = o->alloc(L->dev, wrows * 2 * (size_t)L->Dl);
        if (!L->pad_send || !L->pad_recv || !L->pad_exp || !L->pad_out || !L->pad_work) {
            mp_error("out of memory for the padded dispatch: %.3g GB per rank (%d ranks × %d "
                     "experts × %ld rows per slot)", need / 1e9, ep, max_local, cap);
            free_padded(L);
            return MP_ERR_RUNTIME;
        }
        L->pad_rows = rows;
    }
    return MP_OK;
oom:
    mp_error("out of memory for the padded dispatch plan");
    free_padded(L);
    return MP_ERR_RUNTIME;
}

static void free_weights(struct mp_layer *L)
{
    for (int i = 0; i < L->nlocal + L->S && L->wgu; i++) {
        L->ops->free(L->dev, L->wgu[i]);
        L->ops->free(L->dev, L->wd[i]);
    }
    free(L->wgu);
    free(L->wd);
    free(L->local_ids);
    L->wgu = L->wd = NULL;
    L->local_ids = NULL;
    L->nlocal = 0;
}

void mp_layer_destroy(struct mp_layer *L)
{
    if (!L)
        return;
    const struct mp_compute_ops *o = L->ops;
    free_weights(L);
    free_padded(L);
    o->free(L->dev, L->x);
    o->free(L->dev, L->sendbuf);
    o->free(L->dev, L->recvbuf);
    o->free(L->dev, L->expbuf);
    o->free(L->dev, L->outbuf);
    o->free(L->dev, L->work);
    o->free(L->dev, L->y);
    o->free(L->dev, L->wg);
    free(L->wg_host);
    free(L->host_tok);
    free_pinned_routing(L);
    free(L->route_off);
    free(L->route_cell);
    mp_plan_free(&L->plan);
    for (int i = 0; i < L->nchunk_plans; i++)
        mp_plan_free(&L->chunk_plans[i]);
    free(L->chunk_plans);
    free(L->chunk_cnt_send);
    free(L->chunk_cnt_recv);
    free(L);
}

/* Generate and upload one expert's weight shard. */
static int load_expert(struct mp_layer *L, int expert, void **wgu, void **wd, float *hgu, float *hd)
{
    size_t H = (size_t)L->m.hidden, Dl = (size_t)L->Dl;
    mp_weights_expert(L->seed, expert, L->m.hidden, L->m.ffn, L->tp, L->comm->tp_rank, hgu, hd);
    *wgu = L->ops->alloc(L->dev, H * 2 * Dl);
    *wd = L->ops->alloc(L->dev, Dl * H);
    if (!*wgu || !*wd) {
        mp_error("out of memory for the weights of expert %d", expert);
        return MP_ERR_RUNTIME;
    }
    int rc = L->ops->upload(L->dev, *wgu, hgu, H * 2 * Dl);
    if (rc == MP_OK)
        rc = L->ops->upload(L->dev, *wd, hd, Dl * H);
    return rc;
}

/* Make this rank's expert weights match the placement (no work when the set is unchanged). */
static int setup_weights(struct mp_layer *L, const struct mp_placement *pl)
{
    int e = L->comm->ep_rank;
    int n = mp_placement_nlocal(pl, e);
    const int *ids = pl->local_ids + pl->local_off[e];
    if (L->wgu && n == L->nlocal && memcmp(ids, L->local_ids, (size_t)n * sizeof *ids) == 0)
        return MP_OK;
    free_weights(L);
    int rc = MP_ERR_RUNTIME;
    size_t H = (size_t)L->m.hidden, Dl = (size_t)L->Dl;
    float *hgu = malloc(H * 2 * Dl * sizeof(float)), *hd = malloc(Dl * H * sizeof(float));
    L->wgu = calloc((size_t)n + L->S, sizeof(void *));
    L->wd = calloc((size_t)n + L->S, sizeof(void *));
    L->local_ids = malloc(((size_t)n + 1) * sizeof(int));
    if (!hgu || !hd || !L->wgu || !L->wd || !L->local_ids) {
        mp_error("out of memory for expert weights");
        goto out;
    }
    L->nlocal = n;
    memcpy(L->local_ids, ids, (size_t)n * sizeof *ids);
    for (int i = 0; i < n + L->S; i++) {
        int expert = i < n ? ids[i] : L->m.experts + (i - n);
        rc = load_expert(L, expert, &L->wgu[i], &L->wd[i], hgu, hd);
        if (rc != MP_OK)
            goto out;
    }
    rc = MP_OK;
out:
    free(hgu);
    free(hd);
    return rc;
}

static int setup_gate(struct mp_layer *L)
{
    if (L->wg)
        return MP_OK;
    size_t n = (size_t)L->m.hidden * L->m.experts;
    L->wg_host = malloc(n * sizeof(float));
    L->wg = L->ops->alloc(L->dev, n);
    if (!L->wg_host || !L->wg) {
        mp_error("out of memory for the router weights");
        return MP_ERR_RUNTIME;
    }
    mp_weights_gate(L->seed, L->m.hidden, L->m.experts, L->wg_host);
    return L->ops->upload(L->dev, L->wg, L->wg_host, n);
}

/* The routing pool of one point: draws for this rank's tokens (ids/w), or gate noise. */
struct pool {
    int n;
    int32_t *ids;  /* [n][ntok·K] */
    float *w;      /* [n][ntok·K] */
    float *noise;  /* [n][ntok·E], gate only */
};

static void pool_free(struct pool *p)
{
    free(p->ids);
    free(p->w);
    free(p->noise);
}

static int pool_make(struct pool *p, const struct mp_point *pt, uint64_t seed, long batch_tokens,
                     long tok0, long ntok, int K, int E)
{
    memset(p, 0, sizeof *p);
    p->n = pt->warmup + pt->iters < POOL_DRAWS ? pt->warmup + pt->iters : POOL_DRAWS;
    if (p->n < 1)
        p->n = 1;
    size_t pairs = (size_t)(ntok > 0 ? ntok : 1) * K;
    if (mp_routing_is_gate(pt->routing)) {
        p->noise = malloc((size_t)p->n * (ntok > 0 ? ntok : 1) * E * sizeof(float));
        if (!p->noise)
            goto oom;
        for (int d = 0; d < p->n; d++)
            mp_routing_gate_noise(pt->routing, seed, d, tok0, ntok, p->noise + (size_t)d * ntok * E);
        return MP_OK;
    }
    p->ids = malloc((size_t)p->n * pairs * sizeof(int32_t));
    p->w = malloc((size_t)p->n * pairs * sizeof(float));
    if (!p->ids || !p->w)
        goto oom;
    for (int d = 0; d < p->n; d++)
        mp_routing_draw(pt->routing, seed, d, batch_tokens, tok0, ntok, p->ids + (size_t)d * ntok * K,
                        p->w + (size_t)d * ntok * K);
    return MP_OK;
oom:
    pool_free(p);
    mp_error("out of memory for the routing pool");
    return MP_ERR_RUNTIME;
}

/* The routing step for draw `d`: the gate on the device (gate routing; its
 * result stays there) or the pooled draw handed over, then the backend's sort by cell. `pinned`:
 * read the draw from the page-locked copies (pin_routing) a captured graph replays from. `wait`:
 * return once the pairs per cell are on the host (the dynamic dispatch's one host sync). */
static int route_backend(struct mp_layer *L, struct pool *pool, int d, long ntok, int pinned,
                         int wait)
{
    int H = L->m.hidden, K = L->m.topk, E = L->m.experts;
    if (pool->noise) {
        const float *noise = pinned ? L->pin_noise : pool->noise + (size_t)d * ntok * E;
        int rc = L->ops->gate(L->dev, L->x, L->wg, noise, ntok, H, E, K, NULL, NULL);
        return rc != MP_OK ? rc : L->ops->plan_build(L->dev, NULL, NULL, wait);
    }
    const int32_t *ids = pinned ? L->pin_ids : pool->ids + (size_t)d * ntok * K;
    const float *w = pinned ? L->pin_rw : pool->w + (size_t)d * ntok * K;
    return L->ops->plan_build(L->dev, ids, w, wait);
}

/* FNV-1a, 64 bits (Fowler, Noll and Vo; offset basis and prime from the FNV specification). */
static uint64_t fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* Test hook: MOEPERF_TEST_GATE_SKEW=RANK negates world rank RANK's first token before the gate
 * reads it, as a TP rank whose gate came out different. */
static void gate_skew_hook(struct mp_layer *L, long ntok)
{
    const char *v = getenv("MOEPERF_TEST_GATE_SKEW");
    if (!v || atoi(v) != L->comm->rank || ntok < 1)
        return;
    for (int i = 0; i < L->m.hidden; i++)
        L->host_tok[i] = -L->host_tok[i];
}

/* Gate routing: the TP ranks of an EP rank each compute the gate on their own device, and must
 * come out alike (a difference changes the counts, and the TP reduce of unequal row counts hangs).
 * Untimed, before a point's iterations: every draw of the pool through the gate, the top-k ids
 * hashed, the hashes compared within each TP group on rank 0, the verdict agreed by every rank.
 * MP_ERR_RUNTIME on every rank, with rank 0 naming the ranks and the draw, when they differ. */
static int check_tp_routing(struct mp_layer *L, const struct mp_point *pt, struct pool *pool,
                            long ntok)
{
    struct mp_comm *c = L->comm;
    if (!pool->noise || L->tp == 1)
        return MP_OK;
    int K = L->m.topk, E = L->m.experts, rc = MP_OK;
    size_t pairs = (size_t)(ntok > 0 ? ntok : 1) * K;
    uint64_t mine[POOL_DRAWS] = {0}, *all = NULL;
    int32_t *ids = malloc(pairs * sizeof *ids);
    float *w = malloc(pairs * sizeof *w);
    if (c->rank == 0)
        all = calloc((size_t)c->size * POOL_DRAWS, sizeof *all);
    if (!ids || !w || (c->rank == 0 && !all)) {
        mp_error("out of memory for the routing check");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    for (int d = 0; d < pool->n; d++) {
        mine[d] = 0xcbf29ce484222325ULL;
        if (ntok > 0) {
            MP_CHECK(L->ops->gate(L->dev, L->x, L->wg, pool->noise + (size_t)d * ntok * E, ntok,
                                  L->m.hidden, E, K, ids, w));
            mine[d] = fnv1a(ids, (size_t)ntok * K * sizeof *ids, mine[d]);
        }
    }
    MP_CHECK(c->ops->gather(c, mine, sizeof mine, all));
    int bad_rank = -1, bad_draw = -1;
    for (int r = 0; c->rank == 0 && r < c->size && bad_rank < 0; r++)
        for (int d = 0; d < pool->n && bad_rank < 0; d++)
            if (all[(size_t)r * POOL_DRAWS + d] != all[(size_t)(r - r % L->tp) * POOL_DRAWS + d]) {
                bad_rank = r;
                bad_draw = d;
            }
    int agreed = mp_comm_agree(c, bad_rank < 0);
    if (agreed < 0) {
        rc = -agreed;
        goto out;
    }
    if (!agreed) {
        if (c->rank == 0)
            mp_error("--routing %s: TP ranks %d and %d computed different top-%d experts for the "
                     "same tokens (routing draw %d) during %s; the TP group's ranks must route "
                     "alike, or their TP reduce would exchange different row counts",
                     pt->routing->spec, bad_rank - bad_rank % L->tp, bad_rank, K, bad_draw,
                     mp_watchdog_point());
        rc = MP_ERR_RUNTIME;
    }
out:
    free(ids);
    free(w);
    free(all);
    return rc;
}

/* Copy draw `d`'s routing inputs where a captured graph reads them (allocated on first use). */
static int pin_routing(struct mp_layer *L, struct pool *pool, int d, long ntok)
{
    const struct mp_compute_ops *o = L->ops;
    int K = L->m.topk, E = L->m.experts;
    size_t pairs = (size_t)(ntok > 0 ? ntok : 1) * K, logits = (size_t)(ntok > 0 ? ntok : 1) * E;
    if (pool->noise && L->pin_noise_n < logits) {
        o->host_free(L->dev, L->pin_noise);
        L->pin_noise = o->host_alloc(L->dev, logits * sizeof(float));
        L->pin_noise_n = L->pin_noise ? logits : 0;
        if (!L->pin_noise)
            goto oom;
    }
    if (!pool->noise && L->pin_ids_n < pairs) {
        o->host_free(L->dev, L->pin_ids);
        o->host_free(L->dev, L->pin_rw);
        L->pin_ids = o->host_alloc(L->dev, pairs * sizeof(int32_t));
        L->pin_rw = o->host_alloc(L->dev, pairs * sizeof(float));
        L->pin_ids_n = L->pin_ids && L->pin_rw ? pairs : 0;
        if (!L->pin_ids_n)
            goto oom;
    }
    if (ntok <= 0)
        return MP_OK;
    if (pool->noise)
        memcpy(L->pin_noise, pool->noise + (size_t)d * ntok * E, (size_t)ntok * E * sizeof(float));
    else {
        memcpy(L->pin_ids, pool->ids + (size_t)d * ntok * K, (size_t)ntok * K * sizeof(int32_t));
        memcpy(L->pin_rw, pool->w + (size_t)d * ntok * K, (size_t)ntok * K * sizeof(float));
    }
    return MP_OK;
oom:
    mp_error("--graph: out of page-locked memory for the routing of %ld tokens", ntok);
    return MP_ERR_RUNTIME;
}

/* The backend-built plan for this point run in `chunks` chunks: this rank's route table in the
 * cell layout of the plan in use (the padded slots' max_local, or the dynamic plans'; one block of
 * cells per chunk), handed to plan_setup. */
static int setup_backend_plan(struct mp_layer *L, const struct mp_point *pt, long tok0, long ntok,
                              int chunks)
{
    int max_local = pt->padded ? L->pad.max_local
                    : chunks > 1 ? L->chunk_plans[0].max_local
                                 : L->plan.max_local;
    mp_route_table(pt->placement, L->comm->ep_rank, max_local, chunks, L->route_off,
                   L->route_cell);
    struct mp_dplan_shape s = {.experts = L->m.experts, .K = L->m.topk, .max_local = max_local,
                               .ncells = chunks * L->ep * max_local, .ntok = ntok, .tok0 = tok0,
                               .cap = pt->padded ? L->pad.cap : 0, .route_off = L->route_off,
                               .route_cell = L->route_cell};
    return L->ops->plan_setup(L->dev, &s, &L->dplan_totals);
}

/* Wait for this rank's queued device work: the comm backend's drain where it has one (it watches
 * its communicators while waiting), else the compute backend's sync. */
static int drain(struct mp_layer *L)
{
    return L->comm->ops->drain ? L->comm->ops->drain(L->comm) : L->ops->sync(L->dev);
}

/* Test hook: MOEPERF_START_DELAY=RANK:US makes world rank RANK wait US µs before every
 * iteration's start barrier, as a rank that arrives late (0: none). */
static double start_delay_us(const struct mp_comm *c)
{
    static int read;
    static int rank = -1;
    static double us;
    if (!read) {
        read = 1;
        const char *v = getenv("MOEPERF_START_DELAY");
        if (v && sscanf(v, "%d:%lf", &rank, &us) != 2)
            rank = -1;
    }
    return c->rank == rank && us > 0 ? us : 0;
}

/* The ranks' common start of an iteration: the device drained, mark ALIGN (this rank's arrival),
 * the world barrier, the comm backend's device alignment where it has one, mark START. ALIGN to
 * START is the time this rank waited for the last one (its start_skew). */
static int start_aligned(struct mp_layer *L)
{
    int rc = MP_OK;
    struct mp_comm *c = L->comm;
    MP_CHECK(drain(L));
    double delay = start_delay_us(c);
    if (delay > 0) {
        double until = mp_now_us() + delay;
        while (mp_now_us() < until)
            ;
    }
    MP_CHECK(L->ops->mark(L->dev, MARK_ALIGN));
    MP_CHECK(c->ops->barrier(c));
    if (c->ops->align)
        MP_CHECK(c->ops->align(c));
    MP_CHECK(L->ops->mark(L->dev, MARK_START));
out:
    return rc;
}

/* The start of a timed iteration: the ranks' aligned start (start_aligned), then
 * for the dynamic dispatch the route phase (gate or pooled draw `d`) up to the backend's plan and
 * its counts in L->plan; the padded layer routes itself. The caller marks ROUTE and closes the
 * "moeperf/route" range this opens. */
static int begin_iteration(struct mp_layer *L, const struct mp_point *pt, struct pool *pool, int d,
                           long ntok)
{
    int rc = MP_OK;
    MP_CHECK(start_aligned(L));
    MP_RANGE_PUSH("moeperf/route");
    if (!pt->padded) {
        MP_CHECK(route_backend(L, pool, d, ntok, 0, 1));
        size_t cells = (size_t)L->ep * L->plan.max_local;
        memcpy(L->plan.send_cnt, L->dplan_totals, cells * sizeof *L->plan.send_cnt);
        mp_plan_from_counts(&L->plan, L->comm->ep_rank, ntok);
    }
out:
    return rc;
}

/* The received rows fit the routed-row buffers (size_row_buffers bounds them; a count beyond is
 * a broken exchange, refused before it overwrites memory). */
static int check_rows(struct mp_layer *L, long nrecv)
{
    if (nrecv <= L->max_rows)
        return MP_OK;
    mp_error("the count exchange announced %ld rows to receive, the buffers hold %ld", nrecv,
             L->max_rows);
    return MP_ERR_RUNTIME;
}

/* A drained iteration's five phase durations, from the marks START … COMBINE. */
static void phase_times(struct mp_layer *L, struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    rec->route = o->elapsed_us(L->dev, MARK_START, MARK_ROUTE);
    rec->dispatch = o->elapsed_us(L->dev, MARK_ROUTE, MARK_DISPATCH);
    rec->ffn = o->elapsed_us(L->dev, MARK_DISPATCH, MARK_FFN);
    rec->tp_reduce = o->elapsed_us(L->dev, MARK_FFN, MARK_TP);
    rec->combine = o->elapsed_us(L->dev, MARK_TP, MARK_COMBINE);
    rec->start_skew = o->elapsed_us(L->dev, MARK_ALIGN, MARK_START);
}

/* The expert FFN phase of one rank: the routed rows of every local expert (`row_off` into `in`),
 * then each shared expert on the rank's own `ntok` tokens, written after the `routed` rows of
 * `out`, then the debug straggler's delay. `progress` (may be NULL) runs between experts. */
static int ffn_phase(struct mp_layer *L, const struct mp_point *pt, const void *in, void *out,
                     const long *row_off, void *work, long routed, long ntok, int nshared,
                     void (*progress)(void *), void *progress_arg)
{
    int rc = MP_OK;
    struct mp_ffn_args a = {.in = in, .out = out, .row_off = row_off, .nexp = L->nlocal,
                            .wgu = L->wgu, .wd = L->wd, .H = L->m.hidden, .Dl = L->Dl,
                            .work = work, .gemm = pt->gemm, .progress = progress,
                            .progress_arg = progress_arg};
    MP_CHECK(L->ops->expert_ffn(L->dev, &a));
    L->shared_off[0] = 0;
    L->shared_off[1] = ntok;
    for (int s = 0; s < nshared; s++) {
        struct mp_ffn_args sa = a;
        sa.in = L->x;
        sa.out = (char *)out + ((size_t)routed + (size_t)s * ntok) * L->row_bytes;
        sa.row_off = L->shared_off;
        sa.nexp = 1;
        sa.wgu = L->wgu + L->nlocal + s;
        sa.wd = L->wd + L->nlocal + s;
        MP_CHECK(L->ops->expert_ffn(L->dev, &sa));
    }
    if (pt->straggle_us > 0 && L->comm->rank == pt->straggle_rank) { /* debug: a slow rank */
        MP_CHECK(L->ops->sync(L->dev)); /* the device's FFN first, then the host's delay */
        double until = mp_now_us() + pt->straggle_us;
        while (mp_now_us() < until)
            ;
    }
out:
    return rc;
}

/* One layer forward on this rank with routing draw `d`; phase durations and counts into *rec. */
static int iteration(struct mp_layer *L, const struct mp_point *pt, struct pool *pool, int d,
                     long ntok, struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    struct mp_plan *pl = &L->plan;
    int H = L->m.hidden, me = c->ep_rank;
    int rc = MP_OK;

    MP_CHECK(begin_iteration(L, pt, pool, d, ntok));
    MP_CHECK(o->mark(dev, MARK_ROUTE));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/dispatch");

    /* dispatch: count exchange, permute, all-to-all, regroup by expert */
    MP_CHECK(c->ops->alltoall_int(c, pl->send_cnt, pl->recv_cnt, pl->max_local));
    mp_plan_recv(pl, L->nlocal);
    MP_CHECK(check_rows(L, pl->nrecv));
    MP_CHECK(o->permute(dev, L->x, NULL, 0, pl->nsend, H, L->sendbuf));
    MP_CHECK(c->ops->alltoallv(c, L->sendbuf, pl->send_rows, pl->send_displ, L->recvbuf,
                               pl->recv_rows, pl->recv_displ, L->row_bytes));
    MP_CHECK(o->copy_rows(dev, L->recvbuf, L->expbuf, pl->to_expert, pl->nchunks, H));
    MP_CHECK(o->mark(dev, MARK_DISPATCH));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/ffn");

    /* expert FFN: every local expert, then the shared experts on this rank's own tokens */
    MP_CHECK(ffn_phase(L, pt, L->expbuf, L->outbuf, pl->expert_off, L->work, pl->nrecv, ntok, L->S,
                       NULL, NULL));
    MP_CHECK(o->mark(dev, MARK_FFN));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/tp-reduce");

    /* TP reduce: sum the D-shards of every routed and shared row */
    if (L->tp > 1)
        MP_CHECK(c->ops->allreduce_sum(c, L->outbuf, ((size_t)pl->nrecv + (size_t)L->S * ntok) * H));
    MP_CHECK(o->mark(dev, MARK_TP));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/combine");

    /* combine: back to source order, all-to-all back, weighted sum into token order */
    MP_CHECK(o->copy_rows(dev, L->outbuf, L->recvbuf, pl->to_source, pl->nchunks, H));
    MP_CHECK(c->ops->alltoallv(c, L->recvbuf, pl->recv_rows, pl->recv_displ, L->sendbuf,
                               pl->send_rows, pl->send_displ, L->row_bytes));
    MP_CHECK(o->combine(dev, L->sendbuf, NULL, NULL, 0, pl->nsend,
                        L->S ? (char *)L->outbuf + (size_t)pl->nrecv * L->row_bytes : NULL, L->S,
                        ntok, H, L->y, 0));
    MP_CHECK(o->mark(dev, MARK_COMBINE));
    MP_RANGE_POP();
    MP_CHECK(drain(L));

    phase_times(L, rec);
    rec->tokens = (double)ntok;
    rec->rows = (double)pl->nrecv;
    rec->ffn_rows = (double)pl->nrecv + (double)L->S * ntok;
    rec->pairs = (double)pl->nsend;
    rec->local_pairs = (double)pl->local_pairs;
    double sent = 0, inter = 0;
    for (int p = 0; p < L->ep; p++) {
        if (p == me)
            continue;
        double b = ((double)pl->send_rows[p] + pl->recv_rows[p]) * (double)L->row_bytes;
        sent += b;
        int peer = p * L->tp + c->tp_rank;
        if (c->node_of[peer] != c->node_of[c->rank])
            inter += b;
    }
    rec->bytes_sent = sent;
    rec->bytes_internode = inter;
    rec->dropped = 0;
out:
    return rc;
}

/* The padded layer's device part, from the slot layout the backend's plan holds to the combined
 * output (marks DISPATCH to COMBINE). Fills nothing in a record. */
static int padded_device(struct mp_layer *L, const struct mp_point *pt, long ntok)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    struct mp_padded *pd = &L->pad;
    int H = L->m.hidden;
    int rc = MP_OK;

    MP_RANGE_PUSH("moeperf/dispatch");

    /* dispatch: gather every slot row (padding too), fixed-size all-to-all, regroup by expert */
    MP_CHECK(o->permute(dev, L->x, NULL, 0, pd->rows, H, L->pad_send));
    MP_CHECK(c->ops->alltoallv(c, L->pad_send, pd->peer_rows, pd->peer_displ, L->pad_recv,
                               pd->peer_rows, pd->peer_displ, L->row_bytes));
    MP_CHECK(o->copy_rows(dev, L->pad_recv, L->pad_exp, pd->to_expert, pd->nchunks, H));
    MP_CHECK(o->mark(dev, MARK_DISPATCH));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/ffn");

    long slot_rows = pd->expert_off[pd->max_local]; /* nlocal·ep·cap */
    MP_CHECK(ffn_phase(L, pt, L->pad_exp, L->pad_out, pd->expert_off, L->pad_work, slot_rows, ntok,
                       L->S, NULL, NULL));
    MP_CHECK(o->mark(dev, MARK_FFN));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/tp-reduce");
    if (L->tp > 1)
        MP_CHECK(c->ops->allreduce_sum(c, L->pad_out, ((size_t)slot_rows + (size_t)L->S * ntok) * H));
    MP_CHECK(o->mark(dev, MARK_TP));
    MP_RANGE_POP();
    MP_RANGE_PUSH("moeperf/combine");

    /* combine: slots back to source order, fixed-size all-to-all back, weighted sum (padding and
     * dropped rows have weight 0 or no row at all) */
    MP_CHECK(o->copy_rows(dev, L->pad_out, L->pad_recv, pd->to_source, pd->nchunks, H));
    MP_CHECK(c->ops->alltoallv(c, L->pad_recv, pd->peer_rows, pd->peer_displ, L->pad_send,
                               pd->peer_rows, pd->peer_displ, L->row_bytes));
    MP_CHECK(o->combine(dev, L->pad_send, NULL, NULL, 0, pd->rows,
                        L->S ? (char *)L->pad_out + (size_t)slot_rows * L->row_bytes : NULL, L->S,
                        ntok, H, L->y, 0));
    MP_CHECK(o->mark(dev, MARK_COMBINE));
    MP_RANGE_POP();
out:
    return rc;
}

/* --graph: capture this point's padded layer once, after an untimed iteration has grown every
 * scratch buffer, from the routing on (gate or the handed-over draw, then the sort by cell); later
 * iterations copy their draw's routing inputs into page-locked arrays before replaying it.
 * Collective (every rank's collectives are captured together). */
static int capture_padded(struct mp_layer *L, const struct mp_point *pt, struct pool *pool,
                          long ntok)
{
    const struct mp_compute_ops *o = L->ops;
    int rc;
    if ((rc = pin_routing(L, pool, 0, ntok)) != MP_OK || (rc = drain(L)) != MP_OK ||
        (rc = o->capture_begin(L->dev)) != MP_OK)
        return rc;
    rc = route_backend(L, pool, 0, ntok, 1, 0);
    if (rc == MP_OK)
        rc = o->mark(L->dev, MARK_ROUTE);
    if (rc == MP_OK)
        rc = padded_device(L, pt, ntok);
    int end = o->capture_end(L->dev); /* always leave the capture, even after a failure */
    if (rc == MP_OK)
        rc = end;
    L->captured = rc == MP_OK;
    return rc;
}

/* One layer forward with the padded dispatch: the same phases as iteration(), but the backend's
 * plan lays the send side out in fixed slots (kernels/padded.h) and the all-to-alls move whole
 * slots, so no count exchange precedes the data; every slot row is computed. The valid counts
 * travel after the timed phases, for the metrics. */
static int iteration_padded(struct mp_layer *L, const struct mp_point *pt, struct pool *pool,
                            int d, long ntok, struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    struct mp_padded *pd = &L->pad;
    int me = c->ep_rank;
    int rc = MP_OK;

    MP_CHECK(begin_iteration(L, pt, pool, d, ntok));
    if (L->captured) { /* the replay routes too, from the page-locked draw */
        MP_CHECK(pin_routing(L, pool, d, ntok));
        MP_RANGE_POP();
        MP_CHECK(o->replay(dev));
    } else { /* the backend lays out the slots: no host sync before the data moves */
        MP_CHECK(route_backend(L, pool, d, ntok, 0, 0));
        MP_CHECK(o->mark(dev, MARK_ROUTE));
        MP_RANGE_POP();
        MP_CHECK(padded_device(L, pt, ntok));
    }
    MP_CHECK(drain(L));
    mp_padded_from_counts(pd, L->dplan_totals, me); /* the pairs per slot came with the drain */

    phase_times(L, rec);

    /* untimed: the valid rows each slot carried, for load_imbalance and rows */
    MP_CHECK(c->ops->alltoall_int(c, pd->kept, L->pad_cnt_recv, pd->max_local));
    double valid = 0;
    for (int i = 0; i < L->ep * pd->max_local; i++)
        valid += L->pad_cnt_recv[i];
    rec->tokens = (double)ntok;
    rec->rows = valid;
    rec->ffn_rows = (double)pd->expert_off[pd->max_local] + (double)L->S * ntok;
    rec->pairs = (double)ntok * L->m.topk;
    rec->local_pairs = (double)pd->local_pairs;
    rec->dropped = (double)pd->dropped;
    double sent = 0, inter = 0;
    for (int p = 0; p < L->ep; p++) {
        if (p == me)
            continue;
        double b = 2.0 * pd->peer_rows[p] * (double)L->row_bytes; /* slots out and back */
        sent += b;
        if (c->node_of[p * L->tp + c->tp_rank] != c->node_of[c->rank])
            inter += b;
    }
    rec->bytes_sent = sent;
    rec->bytes_internode = inter;
out:
    return rc;
}

/* The pipeline's progress hook: lets the pending exchanges advance between expert GEMMs. */
static void progress_hook(void *arg)
{
    struct mp_comm *c = arg;
    c->ops->progress(c);
}

/* One layer forward pipelined over `N` chunks: chunk k carries the token-expert pairs whose expert
 * is in group k of its destination's local experts (mp_plan_expert_group), so every expert's weights
 * are still read once. After one count exchange for all chunks, step s starts chunk s's dispatch,
 * computes chunk s−1 (its partners advance between experts) and finishes chunk s−2's combine into
 * y, chunk 0 with the shared experts and the rest added to it. Request slots: 2k dispatch, 2k+1
 * combine. */
static int iteration_overlap(struct mp_layer *L, const struct mp_point *pt, struct pool *pool,
                             int d, long ntok, int N, struct mp_rank_iter *rec)
{
    const struct mp_compute_ops *o = L->ops;
    struct mp_compute *dev = L->dev;
    struct mp_comm *c = L->comm;
    int H = L->m.hidden, K = L->m.topk, me = c->ep_rank;
    int rc = MP_OK;
    double t_ffn = 0, t_tp = 0;
    long soff[33];
    struct mp_point plain_pt = *pt; /* chunks after the first: no straggler delay */
    plain_pt.straggle_us = 0;

    /* times come from the compute backend's marks (device events on GPUs, where the host only
     * queues the work): route from the start, per chunk its FFN and its TP reduce, and the whole */
    MP_CHECK(start_aligned(L));
    /* every chunk's plan, then one count exchange for all of them: the pipeline below waits for
     * a peer only on data. The backend's plan holds the chunks one after another (a block of
     * cells each), so chunk k's rows start where the earlier chunks' end: soff[k]. */
    int Lm = L->chunk_plans[0].max_local;
    size_t cells = (size_t)L->ep * Lm;
    MP_CHECK(route_backend(L, pool, d, ntok, 0, 1));
    for (int k = 0; k < N; k++) {
        memcpy(L->chunk_plans[k].send_cnt, L->dplan_totals + k * cells, cells * sizeof(int));
        mp_plan_from_counts(&L->chunk_plans[k], me, ntok);
    }
    soff[0] = 0;
    for (int k = 0; k < N; k++)
        soff[k + 1] = soff[k] + L->chunk_plans[k].nsend;
    MP_CHECK(o->mark(dev, MARK_ROUTE));
    for (int p = 0; p < L->ep; p++)
        for (int k = 0; k < N; k++)
            memcpy(L->chunk_cnt_send + ((size_t)p * N + k) * Lm,
                   L->chunk_plans[k].send_cnt + (size_t)p * Lm, (size_t)Lm * sizeof(int));
    MP_CHECK(c->ops->alltoall_int(c, L->chunk_cnt_send, L->chunk_cnt_recv, N * Lm));
    for (int k = 0; k < N; k++) {
        for (int p = 0; p < L->ep; p++)
            memcpy(L->chunk_plans[k].recv_cnt + (size_t)p * Lm,
                   L->chunk_cnt_recv + ((size_t)p * N + k) * Lm, (size_t)Lm * sizeof(int));
        mp_plan_recv(&L->chunk_plans[k], L->nlocal);
    }
    /* chunk k's slices: its received rows after the earlier chunks' (roff[k]), and in the FFN's
     * output after them and chunk 0's shared rows (ooff[k]) */
    long roff[33], ooff[33];
    roff[0] = 0;
    for (int k = 0; k < N; k++)
        roff[k + 1] = roff[k] + L->chunk_plans[k].nrecv;
    MP_CHECK(check_rows(L, roff[N]));
    for (int k = 0; k < N; k++)
        ooff[k] = roff[k] + (k > 0 ? (long)L->S * ntok : 0);
    double sent = 0, inter = 0, rows = 0, local = 0;
    for (int s = 0; s < N + 2; s++) {
        if (s < N) { /* start the dispatch of chunk s */
            struct mp_plan *pl = &L->chunk_plans[s];
            char *send = (char *)L->sendbuf + (size_t)soff[s] * L->row_bytes;
            char *recv = (char *)L->recvbuf + (size_t)roff[s] * L->row_bytes;
            MP_CHECK(o->permute(dev, L->x, NULL, soff[s], pl->nsend, H, send));
            MP_CHECK(c->ops->ialltoallv(c, send, pl->send_rows, pl->send_displ, recv,
                                        pl->recv_rows, pl->recv_displ, L->row_bytes, 2 * s));
        }
        if (s >= 1 && s <= N) { /* compute chunk s−1 and start its combine */
            int k = s - 1, S = k == 0 ? L->S : 0; /* the shared experts ride with chunk 0 */
            struct mp_plan *pl = &L->chunk_plans[k];
            char *recv = (char *)L->recvbuf + (size_t)roff[k] * L->row_bytes;
            char *exp = (char *)L->expbuf + (size_t)roff[k] * L->row_bytes;
            char *out = (char *)L->outbuf + (size_t)ooff[k] * L->row_bytes;
            MP_CHECK(c->ops->wait(c, 2 * k));
            MP_CHECK(o->copy_rows(dev, recv, exp, pl->to_expert, pl->nchunks, H));
            MP_CHECK(o->mark(dev, MARK_CHUNK(k, 0)));
            MP_CHECK(ffn_phase(L, k == 0 ? pt : &plain_pt, exp, out, pl->expert_off, L->work,
                               pl->nrecv, ntok, S, progress_hook, c));
            MP_CHECK(o->mark(dev, MARK_CHUNK(k, 1)));
            /* the reduce waits first for the exchanges in flight (where the backend orders its
             * collectives so): that wait is communication, so the reduce's mark follows it */
            if (L->tp > 1 && c->ops->join_exchanges)
                MP_CHECK(c->ops->join_exchanges(c));
            MP_CHECK(o->mark(dev, MARK_CHUNK(k, 2)));
            if (L->tp > 1)
                MP_CHECK(c->ops->allreduce_sum(c, out, ((size_t)pl->nrecv + (size_t)S * ntok) * H));
            MP_CHECK(o->mark(dev, MARK_CHUNK(k, 3)));
            MP_CHECK(o->copy_rows(dev, out, recv, pl->to_source, pl->nchunks, H));
            char *back = (char *)L->sendbuf + (size_t)soff[k] * L->row_bytes;
            MP_CHECK(c->ops->ialltoallv(c, recv, pl->recv_rows, pl->recv_displ, back,
                                        pl->send_rows, pl->send_displ, L->row_bytes, 2 * k + 1));
            rows += (double)pl->nrecv;
            local += (double)pl->local_pairs;
            for (int p = 0; p < L->ep; p++) {
                if (p == me)
                    continue;
                double b = ((double)pl->send_rows[p] + pl->recv_rows[p]) * (double)L->row_bytes;
                sent += b;
                if (c->node_of[p * L->tp + c->tp_rank] != c->node_of[c->rank])
                    inter += b;
            }
        }
        if (s >= 2) { /* finish the combine of chunk s−2 */
            int k = s - 2;
            struct mp_plan *pl = &L->chunk_plans[k];
            char *out = (char *)L->outbuf + (size_t)ooff[k] * L->row_bytes;
            MP_CHECK(c->ops->wait(c, 2 * k + 1));
            MP_CHECK(o->combine(dev, (char *)L->sendbuf + (size_t)soff[k] * L->row_bytes,
                                NULL, NULL, soff[k], pl->nsend,
                                k == 0 && L->S ? out + (size_t)pl->nrecv * L->row_bytes : NULL,
                                k == 0 ? L->S : 0, ntok, H, L->y, k > 0));
        }
    }
    MP_CHECK(o->mark(dev, MARK_COMBINE));
    MP_CHECK(drain(L));
    double total = o->elapsed_us(dev, MARK_START, MARK_COMBINE);
    double t_route = o->elapsed_us(dev, MARK_START, MARK_ROUTE);
    for (int k = 0; k < N; k++) {
        t_ffn += o->elapsed_us(dev, MARK_CHUNK(k, 0), MARK_CHUNK(k, 1));
        t_tp += o->elapsed_us(dev, MARK_CHUNK(k, 2), MARK_CHUNK(k, 3));
    }
    rec->start_skew = o->elapsed_us(dev, MARK_ALIGN, MARK_START);
    rec->route = t_route;
    rec->ffn = t_ffn;
    rec->tp_reduce = t_tp;
    rec->dispatch = total - t_route - t_ffn - t_tp; /* communication left exposed */
    rec->combine = 0;
    rec->tokens = (double)ntok;
    rec->rows = rows;
    rec->ffn_rows = rows + (double)L->S * ntok;
    rec->pairs = (double)ntok * K;
    rec->local_pairs = local;
    rec->bytes_sent = sent;
    rec->bytes_internode = inter;
    rec->dropped = 0;
out:
    return rc;
}

/* Gather every rank's output to rank 0 and compare with the reference forward of draw 0. */
static int check_output(struct mp_layer *L, const struct mp_point *pt, struct pool *pool,
                        long batch_tokens, long ntok, double *err)
{
    struct mp_comm *c = L->comm;
    int H = L->m.hidden, K = L->m.topk, E = L->m.experts;
    int rc = MP_ERR_RUNTIME;
    size_t mine = c->tp_rank == 0 ? (size_t)ntok * H * sizeof(float) : 0;
    float *y = malloc(mine ? mine : 1), *yall = NULL, *ref = NULL, *xall = NULL, *wall = NULL,
          *noise = NULL;
    int32_t *ids = NULL;
    size_t *bytes_of = NULL;
    if (!y)
        goto oom;
    if (mine)
        MP_CHECK(L->ops->download(L->dev, y, L->y, (size_t)ntok * H));
    if (c->rank == 0) {
        size_t all = (size_t)batch_tokens * H;
        yall = malloc(all * sizeof(float));
        ref = malloc(all * sizeof(float));
        xall = malloc(all * sizeof(float));
        ids = malloc((size_t)batch_tokens * K * sizeof(int32_t));
        wall = malloc((size_t)batch_tokens * K * sizeof(float));
        bytes_of = malloc((size_t)c->size * sizeof(size_t));
        if (!yall || !ref || !xall || !ids || !wall || !bytes_of)
            goto oom;
        for (int r = 0; r < c->size; r++) {
            long t0;
            long n = mp_token_split(batch_tokens, L->ep, r / L->tp, &t0);
            bytes_of[r] = r % L->tp == 0 ? (size_t)n * H * sizeof(float) : 0;
        }
    }
    MP_CHECK(c->ops->gatherv(c, y, mine, yall, bytes_of));
    if (c->rank == 0) {
        mp_activations(L->seed, 0, batch_tokens, H, xall);
        if (pool->noise) {
            noise = malloc((size_t)batch_tokens * E * sizeof(float));
            if (!noise)
                goto oom;
            mp_routing_gate_noise(pt->routing, L->seed, 0, 0, batch_tokens, noise);
            mp_reference_gate(xall, L->wg_host, noise, batch_tokens, H, E, K, ids, wall);
        } else {
            mp_routing_draw(pt->routing, L->seed, 0, batch_tokens, 0, batch_tokens, ids, wall);
        }
        /* the padded dispatch dropped the pairs over capacity: so does the reference */
        if (pt->padded && mp_padded_drop(pt->placement, L->ep, batch_tokens, K, ids, wall,
                                         L->pad.cap) < 0)
            goto oom;
        MP_CHECK(mp_reference_forward(L->seed, H, L->m.ffn, E, L->S, xall, batch_tokens, K, ids,
                                      wall, ref));
        *err = mp_rel_error(yall, ref, (long)batch_tokens * H);
    }
    MP_CHECK(c->ops->bcast(c, err, sizeof *err));
    rc = MP_OK;
    goto out;
oom:
    mp_error("out of memory for --check with %ld tokens", batch_tokens);
    rc = MP_ERR_RUNTIME;
out:
    free(y);
    free(yall);
    free(ref);
    free(xall);
    free(ids);
    free(wall);
    free(noise);
    free(bytes_of);
    return rc;
}

/* Gather every rank's records of the last pass to rank 0: [rank][iter] there, then transposed
 * into res->ranks (iteration-major) with each iteration's metrics. */
static int gather_results(struct mp_layer *L, const struct mp_point *pt,
                          const struct mp_rank_iter *mine, struct mp_point_result *res)
{
    struct mp_comm *c = L->comm;
    size_t bytes = (size_t)pt->iters * sizeof *mine;
    struct mp_rank_iter *byrank = NULL;
    if (c->rank == 0) {
        byrank = malloc(bytes * c->size + 1);
        res->ranks = malloc(bytes * c->size + 1);
        res->metrics = malloc((size_t)(pt->iters > 0 ? pt->iters : 1) * sizeof *res->metrics);
        if (!byrank || !res->ranks || !res->metrics) {
            free(byrank);
            mp_error("out of memory for the results");
            return MP_ERR_RUNTIME;
        }
    }
    int rc = c->ops->gather(c, mine, bytes, byrank);
    if (rc == MP_OK && c->rank == 0)
        for (int i = 0; i < pt->iters; i++) {
            for (int r = 0; r < c->size; r++)
                res->ranks[(size_t)i * c->size + r] = byrank[(size_t)r * pt->iters + i];
            mp_metrics_iter(res->ranks + (size_t)i * c->size, c->size, &res->metrics[i]);
        }
    free(byrank);
    return rc;
}

/* One iteration in the point's mode: pipelined over `chunks`, padded, or the plain dynamic one. */
static int one_iteration(struct mp_layer *L, const struct mp_point *pt, struct pool *pool, int d,
                         long ntok, int chunks, struct mp_rank_iter *rec)
{
    if (chunks > 1)
        return iteration_overlap(L, pt, pool, d, ntok, chunks, rec);
    if (pt->padded)
        return iteration_padded(L, pt, pool, d, ntok, rec);
    return iteration(L, pt, pool, d, ntok, rec);
}

int mp_layer_run(struct mp_layer *L, const struct mp_point *pt, struct mp_point_result *res)
{
    struct mp_comm *c = L->comm;
    int rc = MP_OK;
    double t_begin = mp_now_us();
    struct pool pool = {0};
    struct mp_rank_iter *mine = NULL;
    struct mp_iter_metrics *plain = NULL; /* the unpipelined reference of an overlapped point */
    memset(res, 0, sizeof *res);
    res->check_error = NAN;
    res->overlap_efficiency = NAN;
    long total = pt->batch * pt->seq, tok0;
    if (total > L->max_tokens) {
        mp_error("point of %ld tokens exceeds the %ld the layout was sized for", total, L->max_tokens);
        return MP_ERR_RUNTIME;
    }
    long ntok = mp_token_split(total, L->ep, c->ep_rank, &tok0);
    res->tokens_per_rank = (total + L->ep - 1) / L->ep;
    res->iters = pt->iters;
    res->nranks = c->size;

    if (!pt->padded) /* the padded dispatch has buffers of its own */
        MP_CHECK(size_row_buffers(L, total, mp_placement_nlocal(pt->placement, c->ep_rank)));
    MP_CHECK(setup_weights(L, pt->placement));
    if (mp_routing_is_gate(pt->routing))
        MP_CHECK(setup_gate(L));
    mp_activations(L->seed, tok0, ntok, L->m.hidden, L->host_tok);
    gate_skew_hook(L, ntok);
    MP_CHECK(L->ops->upload(L->dev, L->x, L->host_tok, (size_t)ntok * L->m.hidden));
    MP_CHECK(pool_make(&pool, pt, L->seed, total, tok0, ntok, L->m.topk, L->m.experts));
    MP_CHECK(check_tp_routing(L, pt, &pool, ntok));
    mine = calloc((size_t)(pt->iters > 0 ? pt->iters : 1), sizeof *mine);
    if (!mine) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
        goto out;
    }

    struct mp_rank_iter scratch;
    int N = pt->overlap > 1 ? pt->overlap : 1;
    /* the plan's cells follow the placement: the count exchange carries one count per expert a
     * peer holds (as Megatron's dispatcher exchanges num_local_experts counts), not one per expert
     * of the model */
    if (L->plan.max_local != pt->placement->max_local) {
        mp_plan_free(&L->plan);
        MP_CHECK(mp_plan_alloc(&L->plan, L->ep, pt->placement->max_local, L->max_tok_rank,
                               L->m.topk));
    }
    for (int k = 0; k < L->nchunk_plans; k++) /* and so do the pipelined layer's */
        if (L->chunk_plans[k].max_local != pt->placement->max_local) {
            mp_plan_free(&L->chunk_plans[k]);
            MP_CHECK(mp_plan_alloc(&L->chunk_plans[k], L->ep, pt->placement->max_local,
                                   L->max_tok_rank, L->m.topk));
        }
    if (pt->padded) {
        if (N > 1) {
            mp_usage("--overlap %d with --dispatch padded: the pipelined layer exchanges exact "
                     "counts; use --overlap 1 with padded, or --dispatch dynamic", N);
            rc = MP_ERR_USAGE;
            goto out;
        }
        int max_local = 1;
        for (int e = 0; e < L->ep; e++)
            if (mp_placement_nlocal(pt->placement, e) > max_local)
                max_local = mp_placement_nlocal(pt->placement, e);
        long cap = mp_padded_capacity(res->tokens_per_rank, L->m.topk, L->m.experts, pt->capacity, 1);
        MP_CHECK(setup_padded(L, max_local, cap));
        mp_padded_recv(&L->pad, L->nlocal);
    }
    if (N > 1 && (N > L->nchunk_plans || N > 32 || !c->ops->ialltoallv)) {
        mp_usage("--overlap %d: the layout was prepared for %d chunks; the comm backend %s %s", N,
                 L->nchunk_plans, c->ops->name,
                 c->ops->ialltoallv ? "supports at most 32" : "has no non-blocking all-to-all");
        rc = MP_ERR_USAGE;
        goto out;
    }
    MP_RANGE_PUSH("moeperf/point");
    for (int pass = N > 1 ? 0 : 1; pass < 2; pass++) {
        int chunks = pass == 0 ? 1 : N;
        /* the plan's cell layout is the pass's: an overlapped point's unpipelined reference first */
        MP_CHECK(setup_backend_plan(L, pt, tok0, ntok, chunks));
        for (int i = 0; i < pt->warmup; i++)
            MP_CHECK(one_iteration(L, pt, &pool, i % pool.n, ntok, chunks, &scratch));
        if (pt->graph && !L->captured) { /* grown buffers first, then the capture, then a replay */
            if (pt->warmup == 0)
                MP_CHECK(one_iteration(L, pt, &pool, 0, ntok, chunks, &scratch));
            MP_CHECK(capture_padded(L, pt, &pool, ntok));
            MP_CHECK(one_iteration(L, pt, &pool, 0, ntok, chunks, &scratch));
        }
        double t_timed = 0;
        for (int i = 0; i < pt->iters; i++) {
            int d = (pt->warmup + i) % pool.n;
            if (pt->flush_cache && L->ops->flush_cache) /* queued before the iteration's drain */
                MP_CHECK(L->ops->flush_cache(L->dev));
            double t0 = mp_now_us();
            mp_in_timed_loop = 1;
            rc = one_iteration(L, pt, &pool, d, ntok, chunks, &mine[i]);
            mp_in_timed_loop = 0;
            t_timed += mp_now_us() - t0;
            if (rc != MP_OK)
                goto out;
        }
        res->timed_us += t_timed;
        MP_CHECK(gather_results(L, pt, mine, res));
        if (pass == 0 && c->rank == 0) { /* keep the reference, measure again pipelined */
            plain = res->metrics;
            res->metrics = NULL;
            free(res->ranks);
            res->ranks = NULL;
        }
    }
    MP_RANGE_POP();
    if (plain && c->rank == 0)
        res->overlap_efficiency = mp_overlap_efficiency(plain, res->metrics, pt->iters);

    if (pt->check) { /* the output of draw 0, through the same pipeline the point measured */
        MP_CHECK(one_iteration(L, pt, &pool, 0, ntok, N, &scratch));
        MP_CHECK(check_output(L, pt, &pool, total, ntok, &res->check_error));
    }
out:
    if (L->captured) {
        L->ops->graph_reset(L->dev);
        L->captured = 0;
    }
    pool_free(&pool);
    free(mine);
    free(plain);
    res->wall_us = mp_now_us() - t_begin;
    return rc;
}

void mp_point_result_free(struct mp_point_result *res)
{
    free(res->ranks);
    free(res->metrics);
    res->ranks = NULL;
    res->metrics = NULL;
}
