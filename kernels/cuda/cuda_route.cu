/* cuda_route.cu - the route phase on the device: the gate's GEMM, top-k and routing weights, and
 * the dispatch plan (every pair's cell and send row, the cells' counts and starts) in one block of
 * one launch for few pairs, else through CUB's radix sort and scan. */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "cuda_internal.h"

/* One thread per token: noise, top-k, renormalised softmax weights. */
__global__ void gate_topk_kernel(float *logits, const float *noise, long ntok, int E, int K,
                                 int G, int M, int32_t *ids, float *w)
{
    long t = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (t >= ntok)
        return;
    float *l = logits + t * E;
    if (noise)
        for (int e = 0; e < E; e++)
            l[e] += noise[t * E + e];
    mp_topk_select_grouped(l, E, K, G, M, ids + t * K);
    mp_topk_weights(l, K, ids + t * K, w + t * K);
}

/* The pending gate's top-k and weights (c->gate_pending) into d_ids/d_w, on their own. */
static int gate_flush(struct mp_compute *c)
{
    if (!c->gate_pending.on)
        return MP_OK;
    const long ntok = c->gate_pending.ntok;
    const int threads = 128;
    c->gate_pending.on = 0;
    gate_topk_kernel<<<(unsigned)((ntok + threads - 1) / threads), threads, 0, c->stream>>>(
        c->d_logits, c->gate_pending.noise ? c->d_noise : NULL, ntok, c->gate_pending.E,
        c->gate_pending.K, c->gate_pending.G, c->gate_pending.M, c->d_ids, c->d_w);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

int cuda_gate(struct mp_compute *c, const void *x, const void *wg, const float *noise,
              long ntok, int H, int E, int K, int G, int M, int32_t *ids, float *w)
{
    if (ntok <= 0)
        return MP_OK;
    size_t nl = (size_t)ntok * E, nk = (size_t)ntok * K;
    if (grow((void **)&c->d_logits, &c->logits_cap, nl * sizeof(float)) != MP_OK ||
        (noise && grow((void **)&c->d_noise, &c->noise_cap, nl * sizeof(float)) != MP_OK) ||
        grow((void **)&c->d_ids, &c->ids_cap, nk * sizeof(int32_t)) != MP_OK ||
        grow((void **)&c->d_w, &c->w_cap, nk * sizeof(float)) != MP_OK)
        return MP_ERR_RUNTIME;
    CUBLASCHECK(gemm_rm(c->blas, (int)ntok, E, H, x, H, wg, E, c->d_logits, CUDA_R_32F, E));
    if (noise)
        CUDACHECK(cudaMemcpyAsync(c->d_noise, noise, nl * sizeof(float), cudaMemcpyHostToDevice,
                                  c->stream));
    c->gate_pending.on = 1;
    c->gate_pending.noise = noise != NULL;
    c->gate_pending.ntok = ntok;
    c->gate_pending.E = E;
    c->gate_pending.K = K;
    c->gate_pending.G = G;
    c->gate_pending.M = M;
    if (!ids) /* plan_build takes the top-k with the plan */
        return MP_OK;
    if (gate_flush(c) != MP_OK)
        return MP_ERR_RUNTIME;
    /* the dispatch plan is built on the host: a host sync */
    CUDACHECK(cudaMemcpyAsync(ids, c->d_ids, nk * sizeof(int32_t), cudaMemcpyDeviceToHost, c->stream));
    CUDACHECK(cudaMemcpyAsync(w, c->d_w, nk * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
    CUDACHECK(cudaStreamSynchronize(c->stream));
    return MP_OK;
}

/* Key every pair by its cell (unsent pairs: ncells, sorted last), number it, count the cells. */
__global__ void plan_cells_kernel(const int32_t *ids, const int32_t *route_off,
                                  const int32_t *route_cell, long npairs, int K, long tok0,
                                  int ncells, int32_t *key, int32_t *pair, int32_t *totals)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= npairs)
        return;
    int32_t cell = mp_dplan_cell(route_off, route_cell, ids[i], tok0 + i / K);
    key[i] = cell < 0 ? ncells : cell;
    pair[i] = (int32_t)i;
    if (cell >= 0)
        atomicAdd(totals + cell, 1);
}

/* The send row of every sorted pair: its token and routing weight, and for the combine the row
 * each pair went to (row_of_pair, left at −1 for dropped pairs). */
__global__ void plan_rows_kernel(const int32_t *key, const int32_t *pair, const int32_t *start,
                                 const float *w, long npairs, int K, int ncells, long cap,
                                 int max_local, int32_t *tok, float *row_w, int32_t *row_of_pair)
{
    long p = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (p >= npairs)
        return;
    int32_t cell = key[p];
    if (cell >= ncells)
        return;
    long row = mp_dplan_row(cell, p, start[cell], cap, max_local);
    if (row < 0)
        return;
    int32_t i = pair[p];
    tok[row] = i / K;
    row_w[row] = w[i];
    row_of_pair[i] = (int32_t)row;
}

/* The single-block route kernel (route_plan_kernel) for a plan of few pairs: its limits, each
 * set by the shared memory it holds (cell counts and starts, and one bit per token and cell). */
#define ROUTE_THREADS 1024
#define ROUTE_CELLS ROUTE_THREADS /* cells: one per thread in the scan of their counts */
#define ROUTE_WORDS 8192          /* 32-bit words of the token bitmap: ncells·⌈ntok/32⌉ */
#define ROUTE_PAIRS 8192          /* pairs: beyond, the multi-launch sort is the faster */

/* What one route_plan_kernel launch does, passed by value: with `topk`, the pending gate's top-k
 * first (logits [ntok × E] plus noise, into ids/w); then the plan of the pairs ids/w as
 * plan_cells_kernel, the sort, the scan and plan_rows_kernel together make it. */
struct route_args {
    float *logits;
    const float *noise;
    int topk, E, K, G, M, ncells, max_local, words;
    long ntok, tok0, cap, rows;
    int32_t *ids;
    float *w;
    const int32_t *route_off, *route_cell;
    int32_t *key, *totals, *start, *tok, *row_of_pair;
    float *row_w;
};

/* The route phase's device work in one block of ROUTE_THREADS threads, for ncells ≤ ROUTE_CELLS
 * and ncells·⌈ntok/32⌉ ≤ ROUTE_WORDS: the gate's top-k and weights (thread per token, the same
 * mp_topk_select_grouped and mp_topk_weights as gate_topk_kernel), every pair's cell (its key),
 * the cells' counts and their exclusive scan (Hillis-Steele over one cell per thread), then each
 * pair's send row. A pair's position in the stable sort by cell is its cell's start plus the pairs
 * of that cell before it: a token's pairs name distinct experts, so distinct cells, and that count
 * is the number of earlier tokens with a pair in the cell, the set bits below the token's in the
 * cell's row of a token bitmap (popcounts, ⌈ntok/32⌉ words at most). Where a token has two pairs
 * in one cell (a routing handed over with a repeated expert; the bitmap sees its bit set twice),
 * each pair counts the earlier pairs of its cell one by one instead. The same rows, counts and
 * starts as the multi-launch build (kernel_check compares both with the host's). */
__global__ void __launch_bounds__(ROUTE_THREADS) route_plan_kernel(const __grid_constant__ struct route_args a)
{
    __shared__ int count[ROUTE_CELLS], first[ROUTE_CELLS], part[ROUTE_THREADS];
    __shared__ unsigned bits[ROUTE_WORDS];
    __shared__ int repeated;
    const int tid = (int)threadIdx.x, nt = (int)blockDim.x;
    const long npairs = a.ntok * a.K;
    if (a.topk)
        for (long t = tid; t < a.ntok; t += nt) {
            float *l = a.logits + t * a.E;
            if (a.noise)
                for (int e = 0; e < a.E; e++)
                    l[e] += a.noise[t * a.E + e];
            mp_topk_select_grouped(l, a.E, a.K, a.G, a.M, a.ids + t * a.K);
            mp_topk_weights(l, a.K, a.ids + t * a.K, a.w + t * a.K);
        }
    for (int i = tid; i < a.ncells; i += nt)
        count[i] = 0;
    for (int i = tid; i < a.ncells * a.words; i += nt)
        bits[i] = 0;
    if (a.cap > 0) /* slots: padding rows are token 0 with weight 0 */
        for (long r = tid; r < a.rows; r += nt) {
            a.tok[r] = 0;
            a.row_w[r] = 0.0f;
        }
    if (tid == 0)
        repeated = 0;
    __syncthreads(); /* the top-k's ids, and zeroed counts */
    for (long i = tid; i < npairs; i += nt) {
        const long t = i / a.K;
        const int32_t cell = mp_dplan_cell(a.route_off, a.route_cell, a.ids[i], a.tok0 + t);
        a.key[i] = cell < 0 ? a.ncells : cell;
        if (cell < 0)
            continue;
        atomicAdd(&count[cell], 1);
        const unsigned bit = 1u << (t % 32);
        if (atomicOr(&bits[cell * a.words + t / 32], bit) & bit)
            repeated = 1;
    }
    __syncthreads();
    /* exclusive scan of the counts: part[] holds inclusive sums after the log2(ncells) steps */
    const int mine = tid < a.ncells ? count[tid] : 0;
    part[tid] = mine;
    __syncthreads();
    for (int off = 1; off < a.ncells; off *= 2) {
        const int add = tid >= off ? part[tid - off] : 0;
        __syncthreads();
        part[tid] += add;
        __syncthreads();
    }
    if (tid < a.ncells) {
        first[tid] = part[tid] - mine;
        a.totals[tid] = mine;
        a.start[tid] = part[tid] - mine;
    }
    __syncthreads();
    for (long i = tid; i < npairs; i += nt) {
        const int32_t cell = a.key[i];
        long before = 0;
        if (cell >= a.ncells) {
            a.row_of_pair[i] = -1;
            continue;
        }
        if (!repeated) {
            const long t = i / a.K;
            const unsigned *row = bits + cell * a.words;
            for (long q = 0; q < t / 32; q++)
                before += __popc(row[q]);
            before += __popc(row[t / 32] & ((1u << (t % 32)) - 1u));
        } else {
            for (long j = 0; j < i; j++)
                before += a.key[j] == cell;
        }
        const long row = mp_dplan_row(cell, first[cell] + before, first[cell], a.cap, a.max_local);
        a.row_of_pair[i] = (int32_t)row;
        if (row >= 0) {
            a.tok[row] = (int32_t)(i / a.K);
            a.row_w[row] = a.w[i];
        }
    }
}

void plan_free(struct device_plan *p)
{
    /* d_in_w lies in d_in_ids' block */
    cuda_free_all({p->d_route_off, p->d_route_cell, p->d_key, p->d_key_sorted, p->d_pair,
                   p->d_pair_sorted, p->d_totals, p->d_start, p->d_tok, p->d_w, p->d_row_of_pair,
                   p->d_in_ids, p->d_temp});
    cudaFreeHost(p->h_totals);
    memset(p, 0, sizeof *p);
}

int cuda_plan_setup(struct mp_compute *c, const struct mp_dplan_shape *s,
                    const int32_t **totals)
{
    struct device_plan *p = &c->plan;
    plan_free(p);
    p->s = *s;
    p->s.route_off = p->s.route_cell = NULL;
    p->npairs = s->ntok > 0 ? s->ntok * s->K : 0;
    p->rows = s->cap > 0 ? (long)s->ncells * s->cap : p->npairs;
    p->bits = mp_dplan_key_bits(s->ncells);
    size_t pairs = (size_t)(p->npairs > 0 ? p->npairs : 1), rows = (size_t)(p->rows > 0 ? p->rows : 1);
    size_t ncand = (size_t)s->route_off[s->experts], cells = (size_t)s->ncells;
    CUDACHECK(cudaMalloc((void **)&p->d_route_off, ((size_t)s->experts + 1) * sizeof(int32_t)));
    CUDACHECK(cudaMalloc((void **)&p->d_route_cell, (ncand ? ncand : 1) * sizeof(int32_t)));
    CUDACHECK(cudaMalloc((void **)&p->d_key, pairs * sizeof(int32_t)));
    CUDACHECK(cudaMalloc((void **)&p->d_key_sorted, pairs * sizeof(int32_t)));
    CUDACHECK(cudaMalloc((void **)&p->d_pair, pairs * sizeof(int32_t)));
    CUDACHECK(cudaMalloc((void **)&p->d_pair_sorted, pairs * sizeof(int32_t)));
    CUDACHECK(cudaMalloc((void **)&p->d_totals, cells * sizeof(int32_t)));
    CUDACHECK(cudaMalloc((void **)&p->d_start, cells * sizeof(int32_t)));
    CUDACHECK(cudaMalloc((void **)&p->d_tok, rows * sizeof(int32_t)));
    CUDACHECK(cudaMalloc((void **)&p->d_w, rows * sizeof(float)));
    CUDACHECK(cudaMalloc((void **)&p->d_row_of_pair, pairs * sizeof(int32_t)));
    /* a handed-over routing: ids, then the weights right after them (one copy where the host's
     * arrays lie so too) */
    CUDACHECK(cudaMalloc((void **)&p->d_in_ids, pairs * (sizeof(int32_t) + sizeof(float))));
    p->d_in_w = (float *)(void *)(p->d_in_ids + pairs);
    CUDACHECK(cudaMallocHost((void **)&p->h_totals, cells * sizeof(int32_t)));
    memset(p->h_totals, 0, cells * sizeof(int32_t));
    /* padding rows (and a dynamic plan before its first build) read token 0 with weight 0 */
    CUDACHECK(cudaMemsetAsync(p->d_tok, 0, rows * sizeof(int32_t), c->stream));
    CUDACHECK(cudaMemsetAsync(p->d_w, 0, rows * sizeof(float), c->stream));
    CUDACHECK(cudaMemsetAsync(p->d_row_of_pair, 0xff, pairs * sizeof(int32_t), c->stream));
    p->pair_w = p->d_in_w;
    CUDACHECK(cudaMemcpyAsync(p->d_route_off, s->route_off, ((size_t)s->experts + 1) * sizeof(int32_t),
                              cudaMemcpyHostToDevice, c->stream));
    if (ncand)
        CUDACHECK(cudaMemcpyAsync(p->d_route_cell, s->route_cell, ncand * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, c->stream));
    /* CUB's scratch, once: the larger of the sort's and the scan's */
    size_t sort_bytes = 0, scan_bytes = 0;
    CUDACHECK(cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, p->d_key, p->d_key_sorted, p->d_pair,
                                              p->d_pair_sorted, (int)pairs, 0, p->bits, c->stream));
    CUDACHECK(cub::DeviceScan::ExclusiveSum(NULL, scan_bytes, p->d_totals, p->d_start, s->ncells,
                                            c->stream));
    p->temp_bytes = sort_bytes > scan_bytes ? sort_bytes : scan_bytes;
    CUDACHECK(cudaMalloc(&p->d_temp, p->temp_bytes ? p->temp_bytes : 1));
    CUDACHECK(cudaStreamSynchronize(c->stream));
    *totals = p->h_totals;
    return MP_OK;
}

/* Whether route_plan_kernel builds this plan (its limits above). */
static int route_block_fits(const struct device_plan *p)
{
    const long words = (p->s.ntok + 31) / 32;
    return p->npairs > 0 && p->npairs <= ROUTE_PAIRS && p->s.ncells <= ROUTE_CELLS &&
           (long)p->s.ncells * words <= ROUTE_WORDS;
}

/* The plan in one launch (route_plan_kernel), with the pending gate's top-k when `topk`. */
static int route_block(struct mp_compute *c, int32_t *ids, float *w, int topk)
{
    struct device_plan *p = &c->plan;
    struct route_args a = {};
    a.logits = c->d_logits;
    a.noise = topk && c->gate_pending.noise ? c->d_noise : NULL;
    a.topk = topk;
    a.E = c->gate_pending.E;
    a.G = c->gate_pending.G;
    a.M = c->gate_pending.M;
    a.K = p->s.K;
    a.ncells = p->s.ncells;
    a.max_local = p->s.max_local;
    a.words = (int)((p->s.ntok + 31) / 32);
    a.ntok = p->s.ntok;
    a.tok0 = p->s.tok0;
    a.cap = p->s.cap;
    a.rows = p->rows;
    a.ids = ids;
    a.w = w;
    a.route_off = p->d_route_off;
    a.route_cell = p->d_route_cell;
    a.key = p->d_key;
    a.totals = p->d_totals;
    a.start = p->d_start;
    a.tok = p->d_tok;
    a.row_of_pair = p->d_row_of_pair;
    a.row_w = p->d_w;
    if (topk)
        c->gate_pending.on = 0;
    route_plan_kernel<<<1, ROUTE_THREADS, 0, c->stream>>>(a);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* The plan in several launches, for any size: keys and counts, CUB's stable radix sort of the
 * pairs by key and exclusive scan of the counts, then the rows. */
static int route_sorted(struct mp_compute *c, const int32_t *d_ids, const float *d_w)
{
    struct device_plan *p = &c->plan;
    const struct mp_dplan_shape *s = &p->s;
    CUDACHECK(cudaMemsetAsync(p->d_totals, 0, (size_t)s->ncells * sizeof(int32_t), c->stream));
    if (p->npairs <= 0)
        return MP_OK;
    unsigned blocks = (unsigned)((p->npairs + 255) / 256);
    plan_cells_kernel<<<blocks, 256, 0, c->stream>>>(d_ids, p->d_route_off, p->d_route_cell,
                                                     p->npairs, s->K, s->tok0, s->ncells,
                                                     p->d_key, p->d_pair, p->d_totals);
    CUDACHECK(cudaGetLastError());
    size_t bytes = p->temp_bytes;
    CUDACHECK(cub::DeviceRadixSort::SortPairs(p->d_temp, bytes, p->d_key, p->d_key_sorted,
                                              p->d_pair, p->d_pair_sorted, (int)p->npairs, 0,
                                              p->bits, c->stream));
    bytes = p->temp_bytes;
    CUDACHECK(cub::DeviceScan::ExclusiveSum(p->d_temp, bytes, p->d_totals, p->d_start, s->ncells,
                                            c->stream));
    if (s->cap > 0) { /* slots: padding rows are token 0 with weight 0 */
        CUDACHECK(cudaMemsetAsync(p->d_tok, 0, (size_t)p->rows * sizeof(int32_t), c->stream));
        CUDACHECK(cudaMemsetAsync(p->d_w, 0, (size_t)p->rows * sizeof(float), c->stream));
    }
    CUDACHECK(cudaMemsetAsync(p->d_row_of_pair, 0xff, (size_t)p->npairs * sizeof(int32_t),
                              c->stream));
    plan_rows_kernel<<<blocks, 256, 0, c->stream>>>(p->d_key_sorted, p->d_pair_sorted, p->d_start,
                                                    d_w, p->npairs, s->K, s->ncells, s->cap,
                                                    s->max_local, p->d_tok, p->d_w,
                                                    p->d_row_of_pair);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* The plan of host arrays ids/w (copied in), or of the last gate's result: one launch where
 * route_plan_kernel takes it (the pending top-k with it), else the top-k and the sorted build. */
int cuda_plan_build(struct mp_compute *c, const int32_t *ids, const float *w, int wait)
{
    struct device_plan *p = &c->plan;
    const struct mp_dplan_shape *s = &p->s;
    int32_t *d_ids = c->d_ids; /* ids NULL: the last gate's result */
    float *d_w = c->d_w;
    int topk = 0;
    if (ids && p->npairs > 0) {
        const size_t n = (size_t)p->npairs;
        if ((const void *)w == (const void *)(ids + n)) { /* one block: one copy */
            CUDACHECK(cudaMemcpyAsync(p->d_in_ids, ids, n * (sizeof(int32_t) + sizeof(float)),
                                      cudaMemcpyHostToDevice, c->stream));
        } else {
            CUDACHECK(cudaMemcpyAsync(p->d_in_ids, ids, n * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, c->stream));
            CUDACHECK(cudaMemcpyAsync(p->d_in_w, w, n * sizeof(float), cudaMemcpyHostToDevice,
                                      c->stream));
        }
        d_ids = p->d_in_ids;
        d_w = p->d_in_w;
    } else if (!ids && c->gate_pending.on) {
        /* the top-k goes with the plan when the gate's pairs are the plan's */
        topk = c->gate_pending.ntok == s->ntok && c->gate_pending.K == s->K && route_block_fits(p);
        if (!topk && gate_flush(c) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    if (route_block_fits(p)) {
        if (route_block(c, d_ids, d_w, topk) != MP_OK)
            return MP_ERR_RUNTIME;
    } else if (route_sorted(c, d_ids, d_w) != MP_OK) {
        return MP_ERR_RUNTIME;
    }
    p->pair_w = d_w;
    CUDACHECK(cudaMemcpyAsync(p->h_totals, p->d_totals, (size_t)s->ncells * sizeof(int32_t),
                              cudaMemcpyDeviceToHost, c->stream));
    if (wait) /* the dynamic dispatch sizes its sends from these: its one host sync */
        CUDACHECK(cudaStreamSynchronize(c->stream));
    return MP_OK;
}
