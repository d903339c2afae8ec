/* cuda_compute.cu - the cuda compute backend: bf16 activations and weights in device memory, fp32
 * accumulation, cuBLAS GEMMs for the gate and the expert FFN, kernels for top-k, permutation,
 * SwiGLU, the weighted combine and the fp8 dispatch's packing, CUDA events for the phase timers. */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "compute.h"
#include "error.h"
}
#include "chunks.h"
#include "cublas_entry.h"
#include "cuda_helpers.cuh"
#include "dplan.h"
#include "fp8.h"

typedef __nv_bfloat16 bf16;

#define CUDACHECK(call)                                                                            \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            mp_error_at(__FILE__, __LINE__, "%s: %s", #call, cudaGetErrorString(e_));              \
            return MP_ERR_RUNTIME;                                                                 \
        }                                                                                          \
    } while (0)
#define CUBLASCHECK(call)                                                                          \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            mp_error_at(__FILE__, __LINE__, "%s: cuBLAS status %d", #call, (int)s_);               \
            return MP_ERR_RUNTIME;                                                                 \
        }                                                                                          \
    } while (0)

/* cuBLAS and cuBLASLt, resolved when the first backend starts (cublas_entry.h) */
static struct mp_cublas_entry cublas;
static struct mp_cublaslt_entry cublaslt;

/* The dispatch plan built on the device (plan_setup/plan_build): pairs keyed by cell, sorted
 * stably by it, cells' starts from an exclusive scan of their counts, then every pair's send row
 * (kernels/dplan.h); in one block of one launch for few pairs (route_plan_kernel), else with
 * CUB's radix sort and scan. Sized once per point. */
struct device_plan {
    struct mp_dplan_shape s; /* route_off/route_cell: NULL (the table lives on the device) */
    long npairs, rows;       /* rows: ntok·K (dynamic) or ncells·cap (padded) */
    int bits;                /* key bits of the radix sort */
    int32_t *d_route_off, *d_route_cell;
    int32_t *d_key, *d_key_sorted, *d_pair, *d_pair_sorted; /* [npairs] */
    int32_t *d_totals, *d_start;                             /* [ncells] */
    int32_t *d_tok;                                          /* [rows] */
    float *d_w;                                              /* [rows] */
    int32_t *d_row_of_pair; /* [npairs] each pair's send row, −1 if it has none (dropped) */
    const float *pair_w;    /* [npairs] the routing weights of the last build, in pair order */
    int32_t *d_in_ids; /* [npairs] a handed-over routing, then its weights (d_in_w) */
    float *d_in_w;
    void *d_temp;
    size_t temp_bytes;
    int32_t *h_totals; /* page-locked [ncells] */
};

/* Runs of rows one copy_rows_kernel launch moves, passed by value as its parameter (12 KiB: up to
 * 32 KiB of parameters are allowed from CUDA 12.1 on sm_70 and later), so a launch needs no copy
 * from the host and a captured graph keeps the table. */
#define COPY_TABLE 1024
struct copy_table {
    int32_t n;                       /* runs */
    int32_t start[COPY_TABLE + 1];   /* first row of each run in this launch; start[n] = rows */
    int32_t src[COPY_TABLE], dst[COPY_TABLE]; /* each run's first source and destination row */
};

/* Pointers one fill_pointers_kernel launch writes, passed by value as its parameter (10 KiB): the
 * grouped GEMM's pointer arrays reach the device with no copy from host memory, so the host never
 * waits for the stream and a captured graph replays the values it was captured with. */
#define PTR_TABLE 1280
struct ptr_table {
    int n;
    const void *p[PTR_TABLE];
};

/* One stage of the skinny expert FFN (--gemm skinny) for up to SKINNY_TABLE experts of at most
 * MP_SKINNY_ROWS rows each, passed by value as the launch's parameter (7 KiB), like the tables
 * above: out_e[rows_e × N] = in_e[rows_e × K] · W_e, row-major. With `swiglu`, W_e is [gate | up]
 * (K × 2N, row stride 2N) and out_e is SwiGLU(gate, up); without, W_e is K × N. */
#define SKINNY_TABLE 256
struct skinny_table {
    int n, K, N, ldw, lda, ldc, swiglu;
    float *ws;  /* split K: each block's partial tile */
    int *count; /* split K: blocks of each tile done */
    int rows[SKINNY_TABLE];
    const void *w[SKINNY_TABLE]; /* bf16 elements, or an fp8 image (--weight-dtype fp8) */
    const void *in[SKINNY_TABLE]; /* bf16 rows, or quantized rows (fp8w_ffn: quantized_row_bytes) */
    bf16 *out[SKINNY_TABLE];
};

/* One stage of the fused expert FFN (--gemm fused) for up to SKINNY_TABLE experts of any rows,
 * passed by value: entry i's rows[i] rows (weights w[i], input rows in[i], output rows out[i])
 * are pieces first[i] .. first[i + 1] − 1 of the launch, one piece for at most MP_SKINNY_ROWS
 * rows, else one per FUSED_ROWS rows; shapes, scratch and counts as in skinny_table. */
struct fused_table {
    int n, K, N, ldw, lda, ldc, swiglu;
    float *ws;
    int *count;
    int rows[SKINNY_TABLE];
    int first[SKINNY_TABLE + 1];
    const void *w[SKINNY_TABLE];
    const void *in[SKINNY_TABLE];
    bf16 *out[SKINNY_TABLE];
};

/* Rows of up to MP_SKINNY_ROWS of each of n pieces, K bf16 values each (row stride lds), to
 * quantize into rows of quantized_row_bytes(K) (fp8w_ffn's inputs); passed by value. */
struct quantize_table {
    int n, K;
    long lds;
    int rows[SKINNY_TABLE];
    const bf16 *src[SKINNY_TABLE];
    unsigned char *dst[SKINNY_TABLE];
};

struct mp_compute {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudaEvent_t ev[MP_TIMER_SLOTS];
    char name[768]; /* device name (up to 256), bus id and versions: never truncated */
    char bus[32]; /* PCI bus id */
    /* host staging for fp32 <-> bf16, grown outside timed loops (upload/download) */
    bf16 *h_bf;
    size_t h_bf_cap;
    /* device scratch, grown on a first (warm-up) call and reused */
    int32_t *d_idx;
    size_t idx_cap;
    float *d_f;
    size_t f_cap;
    float *d_logits;
    size_t logits_cap;
    float *d_noise;
    size_t noise_cap;
    int32_t *d_ids;
    size_t ids_cap;
    float *d_w;
    size_t w_cap;
    /* a gate whose result stays on the device (ids NULL): its logits are in d_logits, and its
     * top-k runs with the next plan_build (in route_plan_kernel where the plan fits one block) */
    struct {
        int on, noise, E, K, G, M;
        long ntok;
    } gate_pending;
    float *d_acc;
    size_t acc_cap;
    /* fp8_pack/fp8_unpack's staging of packed rows (grown outside a capture, never shrunk) */
    unsigned char *d_wire;
    size_t wire_cap;
    /* the grouped GEMM's per-problem arguments: host arrays, and the device array of pointers */
    struct grouped_args *g;
    struct device_plan plan;
    struct copy_table copy; /* copy_rows' runs, filled on the host, passed by value */
    struct ptr_table ptrs;  /* the grouped GEMM's pointers, likewise */
    struct skinny_table skinny; /* the skinny FFN's experts, likewise */
    struct fused_table fused;   /* the fused FFN's experts, likewise */
    bf16 *fused_act; /* the fused FFN's activations, rows × Dl (grown outside a capture) */
    size_t fused_act_cap;
    struct fused_entry *fused_ent; /* its experts, host memory grown as needed */
    int fused_ent_cap;
    struct quantize_table quantize; /* the fp8 kernel's rows to quantize, likewise */
    float *skinny_ws; /* its split-K partials and per-tile counts (skinny_launch) */
    size_t skinny_ws_cap;
    int *skinny_count;
    size_t skinny_count_cap;
    int sms; /* multiprocessors */
    /* --graph: the captured layer (while capturing, nothing may allocate) */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    int capturing;
    void *blas_ws; /* cuBLAS workspace set once, so captured GEMMs never allocate */
    size_t blas_ws_bytes;
    /* --weight-dtype fp8: cuBLASLt (its handle shares the workspace above: one stream), the
     * activations quantized for its FP8 GEMM (codes, and their 128-value block scales) and the
     * GEMM's output rows padded to a multiple of 4; grown on a first call, never in a capture */
    cublasLtHandle_t lt;
    unsigned char *d_q;
    size_t q_cap;
    float *d_qs;
    size_t qs_cap;
    bf16 *d_lt_out;
    size_t lt_out_cap;
    unsigned char *d_xq; /* moeperf's fp8 kernel's input rows, quantized */
    size_t xq_cap;
    /* --flush-cache: the buffer a memset sweeps through L2 (2 × its size, taken at start-up) */
    void *flush_buf;
    size_t flush_bytes;
    unsigned flushes;
    /* --expert-cache: fetches run on copy_stream; each slot's last reader (slot_free, recorded
     * on the compute stream by cache_release once slot_used) gates its next fetch; each fetch
     * since cache_exposed_us has the compute stream's arrival (fetch_ready) and the copy's end
     * (fetch_done), timed */
    cudaStream_t copy_stream;
    cudaEvent_t *slot_free, *fetch_ready, *fetch_done;
    unsigned char *slot_used;
    int cache_slots, fetch_cap, nfetch;
};

/* Arguments of cublasGemmGroupedBatchedEx for up to `cap` problems, one problem per group (every
 * expert has its own row count): host arrays, plus A/B/C pointer arrays in device memory. */
struct grouped_args {
    int cap;
    cublasOperation_t *op;
    int *m, *n, *k, *lda, *ldb, *ldc, *size;
    float *alpha, *beta;
    const void **ptr; /* host: [3·cap] A, B, C */
    void **d_ptr;     /* device: the same, written by fill_pointers_kernel */
};


/* Grow a device buffer to at least `need` bytes (first calls only; the timed loop reuses it). */
static int grow(void **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return MP_OK;
    if (*p)
        cudaFree(*p);
    *p = NULL;
    *cap = 0; /* a failed allocation leaves no buffer behind */
    CUDACHECK(cudaMalloc(p, need));
    *cap = need;
    return MP_OK;
}

/* The device preselect made current before MPI started, or −1. */
static int preselected = -1;

static int cuda_preselect(int local_rank)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return MP_OK; /* init reports the missing device */
    int d = mp_gpu_index(local_rank, n);
    if (cudaSetDevice(d) != cudaSuccess) {
        mp_error("--backend cuda: cannot select GPU %d of %d for local rank %d", d, n, local_rank);
        return MP_ERR_RUNTIME;
    }
    preselected = d;
    return MP_OK;
}

static int cuda_init(struct mp_compute **out, int local_rank)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        mp_error("--backend cuda: no CUDA device is present (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return MP_ERR_RUNTIME;
    }
    struct mp_compute *c = (struct mp_compute *)calloc(1, sizeof *c);
    if (!c) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    c->device = mp_gpu_index(local_rank, n); /* one rank per GPU, in order (compute.h) */
    *out = c;
    if (preselected >= 0 && preselected != c->device)
        mp_warn("--backend cuda: the launcher's local rank chose GPU %d before MPI started, the "
                "local rank settled with MPI (%d) chooses GPU %d; using GPU %d (GPU %d may keep a "
                "context MPI made there)", preselected, local_rank, c->device, c->device,
                preselected);
    CUDACHECK(cudaSetDevice(c->device));
    CUDACHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    char why[512];
    if (mp_cublas_load(&cublas, why, sizeof why) != 0) {
        mp_error("--backend cuda: %s", why);
        return MP_ERR_RUNTIME;
    }
    CUBLASCHECK(cublas.create(&c->blas));
    CUBLASCHECK(cublas.set_stream(c->blas, c->stream));
    /* a fixed workspace: cuBLAS then allocates nothing while a graph is captured */
    const size_t ws = (size_t)32 << 20;
    CUDACHECK(cudaMalloc(&c->blas_ws, ws));
    c->blas_ws_bytes = ws;
    CUBLASCHECK(cublas.set_workspace(c->blas, c->blas_ws, ws));
    if (mp_cublaslt_load(&cublaslt, why, sizeof why) != 0) {
        mp_error("--backend cuda: %s", why);
        return MP_ERR_RUNTIME;
    }
    CUBLASCHECK(cublaslt.create(&c->lt));
    /* --flush-cache's buffer, 2 × L2, taken now: the memory checks then see it as used, and a
     * device too small for it fails here at start-up, not at a point's first flush */
    int l2 = 0;
    CUDACHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, c->device));
    c->flush_bytes = 2 * (l2 > 0 ? (size_t)l2 : (size_t)64 << 20);
    CUDACHECK(cudaMalloc(&c->flush_buf, c->flush_bytes));
    for (int i = 0; i < MP_TIMER_SLOTS; i++)
        CUDACHECK(cudaEventCreate(&c->ev[i]));
    cudaDeviceProp p;
    CUDACHECK(cudaGetDeviceProperties(&p, c->device));
    c->sms = p.multiProcessorCount > 0 ? p.multiProcessorCount : 1;
    char bus[32] = "";
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, c->device) == cudaSuccess)
        memcpy(c->bus, bus, sizeof c->bus);
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(c->name, sizeof c->name, "%s (pci %s, sm_%d%d, %.0f GiB; driver %d.%d, runtime %d.%d)",
             p.name, bus, p.major, p.minor, (double)p.totalGlobalMem / (1 << 30), drv / 1000,
             (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
    return MP_OK;
}

static void plan_free(struct device_plan *p)
{
    cudaFree(p->d_route_off);
    cudaFree(p->d_route_cell);
    cudaFree(p->d_key);
    cudaFree(p->d_key_sorted);
    cudaFree(p->d_pair);
    cudaFree(p->d_pair_sorted);
    cudaFree(p->d_totals);
    cudaFree(p->d_start);
    cudaFree(p->d_tok);
    cudaFree(p->d_w);
    cudaFree(p->d_row_of_pair);
    cudaFree(p->d_in_ids); /* d_in_w lies in the same block */
    cudaFree(p->d_temp);
    cudaFreeHost(p->h_totals);
    memset(p, 0, sizeof *p);
}

/* The expert cache's events and copy stream, after both streams are idle. */
static void cache_free(struct mp_compute *c)
{
    if (c->copy_stream)
        cudaStreamSynchronize(c->copy_stream);
    for (int i = 0; i < c->cache_slots; i++)
        cudaEventDestroy(c->slot_free[i]);
    for (int i = 0; i < c->fetch_cap; i++) {
        cudaEventDestroy(c->fetch_ready[i]);
        cudaEventDestroy(c->fetch_done[i]);
    }
    free(c->slot_free);
    free(c->fetch_ready);
    free(c->fetch_done);
    free(c->slot_used);
    c->slot_free = c->fetch_ready = c->fetch_done = NULL;
    c->slot_used = NULL;
    c->cache_slots = c->fetch_cap = c->nfetch = 0;
}

static void cuda_fini(struct mp_compute *c)
{
    if (!c)
        return;
    plan_free(&c->plan);
    cache_free(c);
    if (c->copy_stream)
        cudaStreamDestroy(c->copy_stream);
    cudaStreamSynchronize(c->stream);
    for (int i = 0; i < MP_TIMER_SLOTS; i++)
        if (c->ev[i])
            cudaEventDestroy(c->ev[i]);
    if (c->exec)
        cudaGraphExecDestroy(c->exec);
    if (c->graph)
        cudaGraphDestroy(c->graph);
    if (c->blas)
        cublas.destroy(c->blas);
    if (c->lt)
        cublaslt.destroy(c->lt);
    cudaFree(c->blas_ws);
    cudaFree(c->d_q);
    cudaFree(c->d_qs);
    cudaFree(c->d_lt_out);
    cudaFree(c->d_xq);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    cudaFree(c->d_idx);
    cudaFree(c->d_f);
    cudaFree(c->d_logits);
    cudaFree(c->d_noise);
    cudaFree(c->d_ids);
    cudaFree(c->d_w);
    cudaFree(c->d_acc);
    cudaFree(c->d_wire);
    cudaFree(c->skinny_ws);
    cudaFree(c->skinny_count);
    cudaFree(c->fused_act);
    free(c->fused_ent);
    cudaFree(c->flush_buf);
    if (c->g) {
        free(c->g->op);
        free(c->g->m);
        free(c->g->alpha);
        free(c->g->ptr);
        cudaFree(c->g->d_ptr);
        free(c->g);
    }
    cudaFreeHost(c->h_bf);
    free(c);
}

static const char *cuda_device_name(struct mp_compute *c) { return c->name; }

static void *cuda_alloc(struct mp_compute *c, size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, (n ? n : 1) * sizeof(bf16)) != cudaSuccess)
        return NULL;
    return p;
}

static void cuda_free(struct mp_compute *c, void *p)
{
    if (p)
        cudaFree(p);
}

static int stage(struct mp_compute *c, size_t n)
{
    if (n <= c->h_bf_cap)
        return MP_OK;
    cudaFreeHost(c->h_bf);
    c->h_bf = NULL;
    CUDACHECK(cudaMallocHost((void **)&c->h_bf, n * sizeof(bf16)));
    c->h_bf_cap = n;
    return MP_OK;
}

static int cuda_upload(struct mp_compute *c, void *dst, const float *src, size_t n)
{
    if (stage(c, n) != MP_OK)
        return MP_ERR_RUNTIME;
    for (size_t i = 0; i < n; i++)
        c->h_bf[i] = __float2bfloat16(src[i]);
    CUDACHECK(cudaMemcpyAsync(dst, c->h_bf, n * sizeof(bf16), cudaMemcpyHostToDevice, c->stream));
    CUDACHECK(cudaStreamSynchronize(c->stream));
    return MP_OK;
}

static int cuda_download(struct mp_compute *c, float *dst, const void *src, size_t n)
{
    if (stage(c, n) != MP_OK)
        return MP_ERR_RUNTIME;
    CUDACHECK(cudaMemcpyAsync(c->h_bf, src, n * sizeof(bf16), cudaMemcpyDeviceToHost, c->stream));
    CUDACHECK(cudaStreamSynchronize(c->stream));
    for (size_t i = 0; i < n; i++)
        dst[i] = __bfloat162float(c->h_bf[i]);
    return MP_OK;
}

/* Raw bytes from pageable host memory, which CUDA stages before the call returns, so the caller
 * may reuse `src` at once (as cuda_permute's and cuda_combine's index arrays); the copy itself is
 * queued on the stream. */
static int cuda_upload_bytes(struct mp_compute *c, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return MP_OK;
    CUDACHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    return MP_OK;
}

/* Raw bytes back to the host once the stream's earlier work (the collective that wrote them) is
 * done: a host sync. */
static int cuda_download_bytes(struct mp_compute *c, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return MP_OK;
    CUDACHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDACHECK(cudaStreamSynchronize(c->stream));
    return MP_OK;
}

/* C[m×n] = A[m×k]·B[k×n], row-major, bf16 inputs, fp32 compute; cuBLAS is column-major, so this
 * computes Cᵀ = Bᵀ·Aᵀ with the same memory. */
static cublasStatus_t gemm_rm(cublasHandle_t h, int m, int n, int k, const void *A, int lda,
                              const void *B, int ldb, void *C, cudaDataType ctype, int ldc)
{
    const float one = 1.0f, zero = 0.0f;
    return cublas.gemm_ex(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, B, CUDA_R_16BF, ldb, A,
                        CUDA_R_16BF, lda, &zero, C, ctype, ldc, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
}

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

static int cuda_gate(struct mp_compute *c, const void *x, const void *wg, const float *noise,
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

/* Gather rows: out[i] = x[src[i]], 8 bf16 (16 bytes) at a time when H allows. */
__global__ void permute_kernel(const bf16 *x, const int32_t *src, long nrows, int H, bf16 *out)
{
    long i = blockIdx.x;
    if (i >= nrows)
        return;
    const bf16 *from = x + (long)mp_permute_src(src, i) * H;
    bf16 *to = out + i * H;
    if (H % 8 == 0) {
        const int4 *f = (const int4 *)from;
        int4 *t = (int4 *)to;
        for (int h = threadIdx.x; h < H / 8; h += blockDim.x)
            t[h] = f[h];
    } else {
        for (int h = threadIdx.x; h < H; h += blockDim.x)
            to[h] = from[h];
    }
}

static int cuda_permute(struct mp_compute *c, const void *x, const int32_t *src_row, long row0,
                        long nrows, int H, void *out)
{
    if (nrows <= 0)
        return MP_OK;
    const int32_t *src = c->plan.d_tok + row0; /* src_row NULL: the device plan's rows */
    if (src_row) {
        if (grow((void **)&c->d_idx, &c->idx_cap, (size_t)nrows * sizeof(int32_t)) != MP_OK)
            return MP_ERR_RUNTIME;
        CUDACHECK(cudaMemcpyAsync(c->d_idx, src_row + row0, (size_t)nrows * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, c->stream));
        src = c->d_idx;
    }
    permute_kernel<<<(unsigned)nrows, 128, 0, c->stream>>>((const bf16 *)x, src, nrows, H,
                                                           (bf16 *)out);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* One block per row of the table: find its run (kernels/chunks.h), then copy the row, 16 bytes at
 * a time when H allows. The table stays in the constant parameter space (__grid_constant__). */
__global__ void copy_rows_kernel(const bf16 *src, bf16 *dst, const __grid_constant__ struct copy_table t,
                                 int H)
{
    __shared__ long from, to;
    int32_t r = (int32_t)blockIdx.x;
    if (threadIdx.x == 0) {
        int run = mp_chunk_find(t.start, t.n, r);
        from = (long)t.src[run] + (r - t.start[run]);
        to = (long)t.dst[run] + (r - t.start[run]);
    }
    __syncthreads();
    const bf16 *f = src + from * H;
    bf16 *d = dst + to * H;
    if (H % 8 == 0) {
        for (int h = threadIdx.x; h < H / 8; h += blockDim.x)
            ((int4 *)d)[h] = ((const int4 *)f)[h];
    } else {
        for (int h = threadIdx.x; h < H; h += blockDim.x)
            d[h] = f[h];
    }
}

static int copy_table_launch(struct mp_compute *c, const void *src, void *dst,
                             const struct copy_table *t, int H)
{
    if (t->start[t->n] == 0)
        return MP_OK;
    copy_rows_kernel<<<(unsigned)t->start[t->n], 128, 0, c->stream>>>((const bf16 *)src, (bf16 *)dst,
                                                                      *t, H);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* Block moves as maximal runs: a single run is one device copy; several go to copy_rows_kernel in
 * tables of up to COPY_TABLE runs (a launch each), not one copy call per run, whose launch costs
 * would grow with EP ranks × local experts. */
static int cuda_copy_rows(struct mp_compute *c, const void *src, void *dst,
                          const struct mp_chunk *ch, int nch, int H)
{
    size_t row = (size_t)H * sizeof(bf16);
    struct mp_chunk run, first;
    int i = 0;
    if (!mp_chunks_next(ch, nch, &i, &first))
        return MP_OK;
    int j = i;
    if (!mp_chunks_next(ch, nch, &j, &run)) { /* one run: a plain device copy */
        CUDACHECK(cudaMemcpyAsync((char *)dst + first.dst * row, (const char *)src + first.src * row,
                                  first.n * row, cudaMemcpyDeviceToDevice, c->stream));
        return MP_OK;
    }
    struct copy_table *t = &c->copy; /* 12 KiB: kept with the backend, off the stack */
    i = 0;
    while ((t->n = mp_chunks_table(ch, nch, &i, COPY_TABLE, t->start, t->src, t->dst)) > 0)
        if (copy_table_launch(c, src, dst, t, H) != MP_OK)
            return MP_ERR_RUNTIME;
    return MP_OK;
}

/* --dispatch-dtype fp8 (base/fp8.h's rules, the host's own functions): one thread block of
 * MP_FP8_BLOCK threads per block of 128 values of a row, block k of the grid on row k / nb, value
 * block k mod nb (nb = ⌈H/128⌉); thread t on value 128·(k mod nb) + t. The packed rows go to a
 * staging area (`wire`, rows of mp_fp8_row_bytes(H) bytes from row 0), since threads of other rows
 * may still read the activations a packed row overwrites in place. */
__global__ void fp8_pack_kernel(const bf16 *x, int H, unsigned char *wire)
{
    __shared__ float amax[MP_FP8_BLOCK];
    int nb = mp_fp8_blocks(H), t = (int)threadIdx.x;
    long row = (long)(blockIdx.x / (unsigned)nb);
    int b = (int)(blockIdx.x % (unsigned)nb), i = b * MP_FP8_BLOCK + t;
    float v = i < H ? __bfloat162float(x[row * H + i]) : 0.0f;
    /* max |x| over the block, NaNs ignored as the host's fmaxf loop ignores them (max is exact
     * in any order, so the scale is the host's bit for bit) */
    amax[t] = fmaxf(0.0f, fabsf(v));
    __syncthreads();
    for (int half = MP_FP8_BLOCK / 2; half > 0; half /= 2) {
        if (t < half)
            amax[t] = fmaxf(amax[t], amax[t + half]);
        __syncthreads();
    }
    float s = mp_fp8_scale(amax[0]);
    unsigned char *w = wire + (size_t)row * mp_fp8_row_bytes(H);
    if (i < H)
        w[i] = mp_fp8_code(v, s);
    if (t == 0)
        memcpy(w + H + sizeof(float) * (size_t)b, &s, sizeof s);
}

/* The reverse: packed rows in `wire` (from row 0) into bf16 activations, decode(code) · scale
 * rounded to nearest even; the same grid. */
__global__ void fp8_unpack_kernel(const unsigned char *wire, int H, bf16 *y)
{
    int nb = mp_fp8_blocks(H);
    long row = (long)(blockIdx.x / (unsigned)nb);
    int b = (int)(blockIdx.x % (unsigned)nb), i = b * MP_FP8_BLOCK + (int)threadIdx.x;
    if (i >= H)
        return;
    const unsigned char *w = wire + (size_t)row * mp_fp8_row_bytes(H);
    y[row * H + i] = __float2bfloat16(mp_fp8_decode(w[i]) * mp_fp8_row_scale(w, H, b));
}

/* Rows of packed bytes the staging area holds for one piece of n rows of H values: grown to all
 * n rows (with a quarter more, so a later larger exchange rarely grows it again) outside a graph
 * capture; inside one, the rows it already holds (at least one, or an error). */
static long fp8_piece_rows(struct mp_compute *c, long n, int H)
{
    size_t W = mp_fp8_row_bytes(H);
    if (W > (size_t)H * sizeof(bf16)) {
        mp_error("fp8 dispatch with H = %d: a packed row (%zu bytes) is longer than its bf16 "
                 "row", H, W);
        return -1;
    }
    if (!c->capturing && (size_t)n * W > c->wire_cap &&
        grow((void **)&c->d_wire, &c->wire_cap, (size_t)n * W + (size_t)n * W / 4) != MP_OK)
        return -1;
    long rows = (long)(c->wire_cap / W);
    if (rows < 1)
        mp_error("--graph: the fp8 dispatch's staging of packed rows was not reserved before the "
                 "capture");
    return rows < 1 ? -1 : rows < n ? rows : n;
}

/* Pack in place (kernels/compute.h's contract): in pieces of rows [a, a+k) in increasing order,
 * each packed into the staging area, then copied to byte W·a of buf. Its bytes [W·a, W·(a+k)) lie
 * before the activations of every later row (byte 2H·(a+k) ≥ W·(a+k)), and the piece's own rows
 * were read before the copy (stream order). Bytes past the n packed rows keep what they held. */
static int cuda_fp8_pack(struct mp_compute *c, void *buf, long n, int H)
{
    if (n <= 0)
        return MP_OK;
    long m = fp8_piece_rows(c, n, H);
    if (m < 0)
        return MP_ERR_RUNTIME;
    size_t W = mp_fp8_row_bytes(H), nb = (size_t)mp_fp8_blocks(H);
    for (long a = 0; a < n; a += m) {
        long k = n - a < m ? n - a : m;
        fp8_pack_kernel<<<(unsigned)(k * nb), MP_FP8_BLOCK, 0, c->stream>>>(
            (const bf16 *)buf + (size_t)a * H, H, c->d_wire);
        CUDACHECK(cudaGetLastError());
        CUDACHECK(cudaMemcpyAsync((char *)buf + (size_t)a * W, c->d_wire, (size_t)k * W,
                                  cudaMemcpyDeviceToDevice, c->stream));
    }
    return MP_OK;
}

/* Unpack in place: pieces in decreasing order, each one's packed bytes [W·a, W·(a+k)) copied to
 * the staging area, then unpacked into its rows' activations [2H·a, 2H·(a+k)), which lie past the
 * packed bytes of every earlier row still to be read (W·a ≤ 2H·a). */
static int cuda_fp8_unpack(struct mp_compute *c, void *buf, long n, int H)
{
    if (n <= 0)
        return MP_OK;
    long m = fp8_piece_rows(c, n, H);
    if (m < 0)
        return MP_ERR_RUNTIME;
    size_t W = mp_fp8_row_bytes(H), nb = (size_t)mp_fp8_blocks(H);
    for (long a = (n - 1) / m * m; a >= 0; a -= m) {
        long k = n - a < m ? n - a : m;
        CUDACHECK(cudaMemcpyAsync(c->d_wire, (const char *)buf + (size_t)a * W, (size_t)k * W,
                                  cudaMemcpyDeviceToDevice, c->stream));
        fp8_unpack_kernel<<<(unsigned)(k * nb), MP_FP8_BLOCK, 0, c->stream>>>(
            c->d_wire, H, (bf16 *)buf + (size_t)a * H);
        CUDACHECK(cudaGetLastError());
    }
    return MP_OK;
}

/* SwiGLU in place on rows of [gate | up]: the first half of each row becomes the activation. */
__global__ void swiglu_kernel(bf16 *g, long m, int Dl)
{
    long i = blockIdx.x;
    if (i >= m)
        return;
    bf16 *row = g + i * 2L * Dl;
    for (int j = threadIdx.x; j < Dl; j += blockDim.x)
        row[j] = __float2bfloat16(mp_swiglu(__bfloat162float(row[j]), __bfloat162float(row[Dl + j])));
}

/* Room for `n` problems in the grouped GEMM's argument arrays (grown on a first, untimed call). */
static int grouped_reserve(struct mp_compute *c, int n)
{
    struct grouped_args *g = c->g;
    if (g && g->cap >= n)
        return MP_OK;
    if (!g && !(g = c->g = (struct grouped_args *)calloc(1, sizeof *g)))
        return MP_ERR_RUNTIME;
    if (c->capturing) { /* nothing may allocate inside a capture */
        mp_error("--graph: the grouped GEMM's arguments for %d experts were not reserved before "
                 "the capture", n);
        return MP_ERR_RUNTIME;
    }
    free(g->op);
    free(g->m);
    free(g->alpha);
    free(g->ptr);
    cudaFree(g->d_ptr);
    g->d_ptr = NULL;
    g->cap = 0;
    g->op = (cublasOperation_t *)malloc((size_t)n * sizeof *g->op);
    g->m = (int *)malloc((size_t)n * 7 * sizeof(int)); /* m, n, k, lda, ldb, ldc, size */
    g->alpha = (float *)malloc((size_t)n * 2 * sizeof(float));
    g->ptr = (const void **)malloc((size_t)n * 3 * sizeof(void *));
    if (!g->op || !g->m || !g->alpha || !g->ptr)
        return MP_ERR_RUNTIME;
    CUDACHECK(cudaMalloc((void **)&g->d_ptr, (size_t)n * 3 * sizeof(void *)));
    g->n = g->m + n;
    g->k = g->m + 2 * n;
    g->lda = g->m + 3 * n;
    g->ldb = g->m + 4 * n;
    g->ldc = g->m + 5 * n;
    g->size = g->m + 6 * n;
    g->beta = g->alpha + n;
    for (int i = 0; i < n; i++) {
        g->op[i] = CUBLAS_OP_N;
        g->alpha[i] = 1.0f;
        g->beta[i] = 0.0f;
        g->size[i] = 1;
    }
    g->cap = n;
    return MP_OK;
}

/* out[i] = t.p[i] for i < t.n: pointers from the launch's parameter to device memory. */
__global__ void fill_pointers_kernel(const __grid_constant__ struct ptr_table t, const void **out)
{
    for (int i = threadIdx.x; i < t.n; i += blockDim.x)
        out[i] = t.p[i];
}

/* One stage of the expert FFN for `np` experts as one grouped GEMM: problem i computes
 * C_i[rows_i × N] = A_i[rows_i × K] · W_i[K × N], row-major, as cuBLAS's column-major
 * C_iᵀ = W_iᵀ·A_iᵀ (the same memory). The A, B, C pointer arrays reach the device as kernel
 * parameters (struct ptr_table), so the host arrays can be refilled right away. */
static int grouped_stage(struct mp_compute *c, int np, int N, int K, int lda, int ldc)
{
    struct grouped_args *g = c->g;
    for (int at = 0; at < 3 * np; at += PTR_TABLE) {
        c->ptrs.n = 3 * np - at < PTR_TABLE ? 3 * np - at : PTR_TABLE;
        memcpy(c->ptrs.p, g->ptr + at, (size_t)c->ptrs.n * sizeof(void *));
        fill_pointers_kernel<<<1, 256, 0, c->stream>>>(c->ptrs, (const void **)g->d_ptr + at);
        CUDACHECK(cudaGetLastError());
    }
    for (int i = 0; i < np; i++) {
        g->k[i] = K;
        g->n[i] = g->m[i]; /* rows of problem i (filled by the caller in m) */
        g->m[i] = N;
        g->lda[i] = N;     /* W: K × N row-major */
        g->ldb[i] = lda;   /* A: rows × K row-major */
        g->ldc[i] = ldc;
    }
    CUBLASCHECK(cublas.gemm_grouped_batched_ex(
        c->blas, g->op, g->op, g->m, g->n, g->k, g->alpha, (const void *const *)g->d_ptr,
        CUDA_R_16BF, g->lda, (const void *const *)(g->d_ptr + np), CUDA_R_16BF, g->ldb, g->beta,
        g->d_ptr + 2 * np, CUDA_R_16BF, g->ldc, np, g->size, CUBLAS_COMPUTE_32F));
    return MP_OK;
}

/* The expert FFN with grouped GEMMs: [gate | up] for every expert in one call, SwiGLU over all
 * rows at once (they are contiguous), then the down projection in one call. Work holds all rows. */
static int ffn_grouped(struct mp_compute *c, const struct mp_ffn_args *a)
{
    const bf16 *in = (const bf16 *)a->in;
    bf16 *out = (bf16 *)a->out, *g = (bf16 *)a->work;
    int H = a->H, Dl = a->Dl, np = 0;
    long base = a->row_off[0], total = a->row_off[a->nexp] - base;
    if (total <= 0)
        return MP_OK;
    if (grouped_reserve(c, a->nexp) != MP_OK) {
        mp_error("out of memory for the grouped GEMM's arguments (%d experts)", a->nexp);
        return MP_ERR_RUNTIME;
    }
    struct grouped_args *ga = c->g;
    /* stage 1: W = wgu[e] (H × 2Dl), A = in rows, C = work rows */
    for (int e = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
        if (m <= 0)
            continue;
        ga->m[np] = (int)m;
        np++;
    }
    for (int e = 0, i = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
        if (m <= 0)
            continue;
        ga->ptr[i] = a->wgu[e];
        ga->ptr[np + i] = in + r0 * H;
        ga->ptr[2 * np + i] = g + (r0 - base) * 2L * Dl;
        i++;
    }
    if (grouped_stage(c, np, 2 * Dl, H, H, 2 * Dl) != MP_OK)
        return MP_ERR_RUNTIME;
    swiglu_kernel<<<(unsigned)total, 256, 0, c->stream>>>(g, total, Dl);
    CUDACHECK(cudaGetLastError());
    /* stage 2: W = wd[e] (Dl × H), A = activation rows (stride 2Dl), C = out rows */
    for (int e = 0, i = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
        if (m <= 0)
            continue;
        ga->m[i] = (int)m;
        ga->ptr[i] = a->wd[e];
        ga->ptr[np + i] = g + (r0 - base) * 2L * Dl;
        ga->ptr[2 * np + i] = out + r0 * H;
        i++;
    }
    return grouped_stage(c, np, H, Dl, 2 * Dl, H);
}

/* Expert e of `a` as two GEMMs: [gate | up] = in · [Wg | Wu] (m × 2Dl) into `g`, SwiGLU, then
 * act · Wd (m × H). */
static int ffn_one_expert(struct mp_compute *c, const struct mp_ffn_args *a, int e, bf16 *g)
{
    const bf16 *in = (const bf16 *)a->in;
    bf16 *out = (bf16 *)a->out;
    int H = a->H, Dl = a->Dl;
    long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
    if (m <= 0)
        return MP_OK;
    CUBLASCHECK(gemm_rm(c->blas, (int)m, 2 * Dl, H, in + r0 * H, H, a->wgu[e], 2 * Dl, g,
                        CUDA_R_16BF, 2 * Dl));
    swiglu_kernel<<<(unsigned)m, 256, 0, c->stream>>>(g, m, Dl);
    CUDACHECK(cudaGetLastError());
    CUBLASCHECK(gemm_rm(c->blas, (int)m, H, Dl, g, 2 * Dl, a->wd[e], H, out + r0 * H, CUDA_R_16BF,
                        H));
    return MP_OK;
}

/* The skinny kernel's block: 256 threads = 8 lanes × 32 slices. A lane streams 8 consecutive weight
 * columns (one 16-byte load per weight row) of groups of SKINNY_GROUP consecutive rows, so the 8
 * lanes of a slice cover a 64-column tile; with SwiGLU the tile is 32 gate and the matching 32 up
 * columns. The slices take every 32nd group of rows in turn, and a split-K grid (grid.z = S) gives
 * each block every S-th run of 32 groups, so enough blocks stream at once to keep HBM busy even
 * for one expert. grid = (tiles, experts, S), tiles = N / 32 (SwiGLU) or N / 64. */
#define SKINNY_SLICES 32
#define SKINNY_GROUP 8 /* weight rows per step: 8 loads of 16 bytes in flight per thread */
#define SKINNY_TILE (MP_SKINNY_ROWS * 64) /* floats of one block's partial tile */

/* the two bf16 values packed in a 32-bit word, as floats (bf16 is the top half of an fp32) */
__device__ __forceinline__ float bf16_low(uint32_t v)
{
    uint32_t u = v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
__device__ __forceinline__ float bf16_high(uint32_t v)
{
    uint32_t u = v & 0xffff0000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
/* element i (0..7, a constant after unrolling) of 8 bf16 values loaded as one int4 */
__device__ __forceinline__ float bf16_at(const int4 &v, int i)
{
    int word = i < 2 ? v.x : i < 4 ? v.y : i < 6 ? v.z : v.w;
    return i & 1 ? bf16_high((uint32_t)word) : bf16_low((uint32_t)word);
}

/* out_e = in_e · W_e (with SwiGLU: SwiGLU of both halves) for the experts of table `t`, each of at
 * most R rows: every weight element is read once, whatever the rows. Sums run in a fixed order
 * (slices, then splits), so results repeat bit for bit. With S > 1 each block leaves its partial
 * tile in t.ws and counts itself in t.count; the tile's last block adds the S partials, writes
 * the output and resets the count for the next launch. R sizes the registers and shared memory:
 * the fewer rows, the more blocks an SM holds, and the more loads are in flight. */
template <int R> struct skinny_smem {
    float part[SKINNY_SLICES / 2][R][64]; /* 4 KiB per row */
    float sum[R][64];
    int last;
};

/* The end of one output tile of 64 image columns (with SwiGLU 32 gate then the matching 32 up
 * columns, else 64 outputs) for m rows, its sums in sum[r·ld + q] (every thread's written and
 * synchronized): with a split-K grid (grid.z = S > 1) each block leaves its partial in t.ws
 * (`stride` floats per partial) and counts itself in t.count[tile]; the tile's last block adds the
 * S partials in z order (so results repeat bit for bit), resets the count for the next launch and
 * writes the outputs, at column tile ct of out (row stride t.ldc): SwiGLU of gate and up, each
 * rounded to bf16 first as the GEMM paths store them, or the sums. */
template <class Table>
__device__ __forceinline__ void tile_finish(const Table &t, int m, float *sum, int ld, int &last,
                                            bf16 *out, int ct, int tile, size_t stride)
{
    const int S = (int)gridDim.z;
    if (S > 1) {
        float *mine = t.ws + ((size_t)tile * S + blockIdx.z) * stride;
        for (int i = threadIdx.x; i < m * 64; i += blockDim.x)
            mine[i] = sum[(i / 64) * ld + i % 64];
        __threadfence(); /* the partial is visible device-wide before the count says so */
        __syncthreads();
        if (threadIdx.x == 0)
            last = atomicAdd(&t.count[tile], 1) == S - 1;
        __syncthreads();
        if (!last)
            return;
        __threadfence();
        const volatile float *parts = t.ws + (size_t)tile * S * stride;
        for (int i = threadIdx.x; i < m * 64; i += blockDim.x) {
            float v = 0.0f;
            for (int z = 0; z < S; z++)
                v += parts[(size_t)z * stride + i];
            sum[(i / 64) * ld + i % 64] = v;
        }
        if (threadIdx.x == 0)
            t.count[tile] = 0;
        __syncthreads();
    }
    if (t.swiglu) {
        for (int i = threadIdx.x; i < m * 32; i += blockDim.x) {
            int r = i / 32, j = i % 32;
            float gate = __bfloat162float(__float2bfloat16(sum[r * ld + j]));
            float up = __bfloat162float(__float2bfloat16(sum[r * ld + 32 + j]));
            out[(size_t)r * t.ldc + ct * 32 + j] = __float2bfloat16(mp_swiglu(gate, up));
        }
    } else {
        for (int i = threadIdx.x; i < m * 64; i += blockDim.x)
            out[(size_t)(i / 64) * t.ldc + ct * 64 + i % 64] = __float2bfloat16(sum[(i / 64) * ld + i % 64]);
    }
}

/* One output tile of skinny_ffn: column tile `ct` of an expert's m ≤ R rows (weights w0, input
 * rows in, output rows out), `tile` its index among the launch's tiles for the split-K partials
 * (`stride` floats apart) and counts; the shapes, scratch and counts from table `t` (a
 * skinny_table or a fused_table). */
template <int R, class Table>
__device__ __forceinline__ void skinny_tile(const Table &t, int m, const void *w0, const void *in0,
                                            bf16 *out, int ct, int tile, size_t stride,
                                            skinny_smem<R> &sm)
{
    float(*part)[R][64] = sm.part;
    float(*sum)[64] = sm.sum;
    const int lane = threadIdx.x & 7, slice = threadIdx.x >> 3, S = (int)gridDim.z;
    /* this lane's first column in W, and its place among the block's 64 outputs */
    int col, at;
    if (t.swiglu) {
        col = (lane >= 4 ? t.N : 0) + ct * 32 + (lane & 3) * 8;
        at = (lane >= 4 ? 32 : 0) + (lane & 3) * 8;
    } else {
        col = ct * 64 + lane * 8;
        at = lane * 8;
    }
    const bf16 *w = (const bf16 *)w0 + col, *in = (const bf16 *)in0;
    float acc[R][8] = {}; /* registers: indexed by unrolled constants only */
    const int groups = t.K / SKINNY_GROUP;
    for (int gi = ((int)blockIdx.z * SKINNY_SLICES) + slice; gi < groups; gi += SKINNY_SLICES * S) {
        const int k = gi * SKINNY_GROUP;
        int4 wv[SKINNY_GROUP], xv[R] = {};
#pragma unroll
        for (int u = 0; u < SKINNY_GROUP; u++) /* all loads first: they overlap in flight */
            wv[u] = *(const int4 *)(w + (size_t)(k + u) * t.ldw);
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < m)
                xv[r] = *(const int4 *)(in + (size_t)r * t.lda + k);
#pragma unroll
        for (int u = 0; u < SKINNY_GROUP; u++) {
            float wf[8];
#pragma unroll
            for (int j = 0; j < 8; j++)
                wf[j] = bf16_at(wv[u], j);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r >= m)
                    break;
                const float x = bf16_at(xv[r], u);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[r][j] += x * wf[j];
            }
        }
    }
    /* slices 16..31 store, slices 0..15 add theirs, then each output sums the 16 in order */
    const int half = slice % (SKINNY_SLICES / 2);
    if (slice >= SKINNY_SLICES / 2) {
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < m)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    part[half][r][at + j] = acc[r][j];
    }
    __syncthreads();
    if (slice < SKINNY_SLICES / 2) {
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < m)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    part[half][r][at + j] += acc[r][j];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < m * 64; i += blockDim.x) {
        float s = 0.0f;
        for (int p = 0; p < SKINNY_SLICES / 2; p++)
            s += part[p][i / 64][i % 64];
        sum[i / 64][i % 64] = s;
    }
    __syncthreads();
    tile_finish(t, m, &sum[0][0], 64, sm.last, out, ct, tile, stride);
}

/* skinny_ffn: expert blockIdx.y of table t, column tile blockIdx.x */
template <int R> __device__ __forceinline__ void skinny_ffn(const struct skinny_table &t)
{
    __shared__ skinny_smem<R> sm;
    const int e = blockIdx.y;
    skinny_tile<R>(t, t.rows[e], t.w[e], t.in[e], t.out[e], (int)blockIdx.x,
                   e * (int)gridDim.x + (int)blockIdx.x, SKINNY_TILE, sm);
}

/* skinny_ffn for tables whose experts have at most 1, 2, 4 or 8 (MP_SKINNY_ROWS) rows */
__global__ void __launch_bounds__(256)
skinny_ffn_r1_kernel(const __grid_constant__ struct skinny_table t)
{
    skinny_ffn<1>(t);
}
__global__ void __launch_bounds__(256)
skinny_ffn_r2_kernel(const __grid_constant__ struct skinny_table t)
{
    skinny_ffn<2>(t);
}
__global__ void __launch_bounds__(256)
skinny_ffn_r4_kernel(const __grid_constant__ struct skinny_table t)
{
    skinny_ffn<4>(t);
}
__global__ void __launch_bounds__(256)
skinny_ffn_r8_kernel(const __grid_constant__ struct skinny_table t)
{
    skinny_ffn<MP_SKINNY_ROWS>(t);
}

/* Fill the table's shapes and return the most rows any of its entries has. */
static int table_shapes(struct skinny_table *t, int K, int N, int ldw, int lda, int ldc, int swiglu)
{
    t->K = K;
    t->N = N;
    t->ldw = ldw;
    t->lda = lda;
    t->ldc = ldc;
    t->swiglu = swiglu;
    int rows = 0;
    for (int i = 0; i < t->n; i++)
        rows = t->rows[i] > rows ? t->rows[i] : rows;
    return rows;
}

/* The split-K factor of a table kernel: enough blocks for `waves` blocks per SM over `tiles`
 * tiles, at most 16 and at most `limit`, at least 1; with S > 1 the partials' scratch
 * (`tile_floats` per tile and split) and the tiles' counts grow on a first (untimed) call, never
 * in a capture; the counts start at zero and every launch leaves them there. Returns S, or 0 after
 * an error naming `what`. */
static int split_k(struct mp_compute *c, int tiles, int waves, int limit, size_t tile_floats,
                   const char *what)
{
    struct skinny_table *t = &c->skinny;
    int S = (waves * c->sms + tiles - 1) / tiles;
    S = S > 16 ? 16 : S;
    S = S > limit ? limit : S;
    S = S < 1 ? 1 : S;
    if (S > 1) {
        size_t ws = (size_t)tiles * S * tile_floats * sizeof(float);
        size_t cnt = (size_t)tiles * sizeof(int);
        if (ws > c->skinny_ws_cap || cnt > c->skinny_count_cap) {
            if (c->capturing) {
                mp_error("--graph: the %s's scratch (%zu bytes) was not reserved before the "
                         "capture", what, ws);
                return 0;
            }
            if (grow((void **)&c->skinny_ws, &c->skinny_ws_cap, ws) != MP_OK ||
                grow((void **)&c->skinny_count, &c->skinny_count_cap, cnt) != MP_OK)
                return 0;
            cudaError_t e = cudaMemsetAsync(c->skinny_count, 0, c->skinny_count_cap, c->stream);
            if (e != cudaSuccess) {
                mp_error("the %s's tile counts: %s", what, cudaGetErrorString(e));
                return 0;
            }
        }
    }
    t->ws = c->skinny_ws;
    t->count = c->skinny_count;
    return S;
}

/* Whether a table kernel takes these shapes: Dl and H multiples of dl_mult and h_mult, and
 * 16-byte aligned inputs, work rows and weights. */
static int table_fits(const struct mp_ffn_args *a, int dl_mult, int h_mult)
{
    if (a->Dl % dl_mult || a->H % h_mult || (uintptr_t)a->in % 16 || (uintptr_t)a->work % 16)
        return 0;
    for (int e = 0; e < a->nexp; e++)
        if ((uintptr_t)a->wgu[e] % 16 || (uintptr_t)a->wd[e] % 16)
            return 0;
    return 1;
}

/* Launch the skinny kernel for the table's experts (c->skinny, filled but for the shapes), sized
 * for the most rows among them. K is split S ways when the tiles alone would not fill one wave of
 * resident blocks: S = ⌈SMs·resident / tiles⌉, at most 16 and at most what keeps a group of rows
 * per thread. resident: blocks of 256 threads an SM holds at the kernel's registers on sm_90
 * (ptxas: 60, 76, 99 and 150 per thread for 1, 2, 4 and 8 rows). The partials' scratch and the
 * tiles' counts grow on a first (untimed) call; the counts start at zero and every launch leaves
 * them there. */
static int skinny_launch(struct mp_compute *c, int K, int N, int ldw, int lda, int ldc, int swiglu)
{
    struct skinny_table *t = &c->skinny;
    const int rows = table_shapes(t, K, N, ldw, lda, ldc, swiglu);
    const int tiles = (swiglu ? N / 32 : N / 64) * t->n;
    const int resident = rows <= 1 ? 4 : rows <= 2 ? 3 : rows <= 4 ? 2 : 1;
    const int S = split_k(c, tiles, resident, K / SKINNY_GROUP / SKINNY_SLICES, SKINNY_TILE,
                          "skinny kernel");
    if (S < 1)
        return MP_ERR_RUNTIME;
    dim3 grid((unsigned)(swiglu ? N / 32 : N / 64), (unsigned)t->n, (unsigned)S);
    if (rows <= 1)
        skinny_ffn_r1_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else if (rows <= 2)
        skinny_ffn_r2_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else if (rows <= 4)
        skinny_ffn_r4_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else
        skinny_ffn_r8_kernel<<<grid, 256, 0, c->stream>>>(*t);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* Whether the skinny kernel takes these shapes: whole tiles and groups of rows, and 16-byte
 * aligned weight and input rows. */
static int skinny_fits(const struct mp_ffn_args *a) { return table_fits(a, 32, 64); }

/* --gemm skinny: experts of 1..MP_SKINNY_ROWS rows through the skinny kernel, SKINNY_TABLE at a
 * time ([gate | up] with SwiGLU for all of them, then the down projection for all of them), the
 * larger ones through the GEMM loop. Work holds all rows. Shapes the kernel does not take run as
 * the loop. */
static int ffn_skinny(struct mp_compute *c, const struct mp_ffn_args *a)
{
    const bf16 *in = (const bf16 *)a->in;
    bf16 *out = (bf16 *)a->out, *g = (bf16 *)a->work;
    int H = a->H, Dl = a->Dl, fits = skinny_fits(a);
    long base = a->row_off[0];
    struct skinny_table *t = &c->skinny;
    int ids[SKINNY_TABLE]; /* the table's experts */
    for (int e = 0; fits && e < a->nexp;) {
        t->n = 0;
        for (; e < a->nexp && t->n < SKINNY_TABLE; e++) {
            long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
            if (m < 1 || m > MP_SKINNY_ROWS)
                continue;
            ids[t->n] = e;
            t->rows[t->n] = (int)m;
            t->w[t->n] = a->wgu[e];
            t->in[t->n] = in + r0 * H;
            t->out[t->n] = g + (r0 - base) * 2L * Dl;
            t->n++;
        }
        if (t->n == 0)
            break;
        if (skinny_launch(c, H, Dl, 2 * Dl, H, 2 * Dl, 1) != MP_OK)
            return MP_ERR_RUNTIME;
        for (int i = 0; i < t->n; i++) { /* the same experts, down projection */
            long r0 = a->row_off[ids[i]];
            t->w[i] = a->wd[ids[i]];
            t->in[i] = g + (r0 - base) * 2L * Dl;
            t->out[i] = out + r0 * H;
        }
        if (skinny_launch(c, Dl, H, H, 2 * Dl, H, 0) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    for (int e = 0; e < a->nexp; e++) {
        long m = a->row_off[e + 1] - a->row_off[e];
        if (fits && m <= MP_SKINNY_ROWS)
            continue; /* done above, or no rows */
        if (ffn_one_expert(c, a, e, g + (a->row_off[e] - base) * 2L * Dl) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* --gemm fused: one kernel launch per stage for every expert, the shared ones included, whatever
 * their rows. Each block computes one piece's output tile of 64 columns (with SwiGLU: 32 gate and
 * the matching 32 up columns, so 32 activations): a piece of at most MP_SKINNY_ROWS rows as the
 * skinny kernel does (registers per row, every weight read once), a piece of up to FUSED_ROWS
 * rows on the tensor cores (mma_tile). grid = (pieces, column tiles, S): the pieces of one column
 * tile run side by side, so an expert's later pieces find its weight tile in L2. */
#define FUSED_ROWS 64                      /* rows of a tensor-core piece */
#define FUSED_KSTEP 32                     /* k per shared-memory stage of mma_tile */
#define FUSED_TILE (FUSED_ROWS * 64)       /* floats of one block's partial tile */

/* mma_tile's shared memory: the piece's input rows and the weight tile of one k step (bf16, rows
 * padded to keep every 16×16 fragment 256-bit aligned), and the fp32 output tile */
#define MMA_LDA (FUSED_KSTEP + 16) /* bf16 per staged input row */
#define MMA_LDW (64 + 16)         /* bf16 per staged weight row */
struct mma_smem {
    int4 a[FUSED_ROWS][MMA_LDA / 8]; /* bf16 values, 8 to an int4 */
    int4 w[FUSED_KSTEP][MMA_LDW / 8];
    float c[FUSED_ROWS][64 + 8];
    int last;
};
template <int R> union alignas(128) fused_smem {
    skinny_smem<R> skinny;
    struct mma_smem mma;
};

/* One output tile of a piece of m ≤ FUSED_ROWS rows on the tensor cores (bf16 × bf16 → fp32,
 * wmma 16×16×16): 8 warps, warp i the 16 rows of fragment row i / 2 and 32 columns of half i % 2;
 * each k step stages 64 input rows (zeros past m) and the 32 × 64 weight tile through shared
 * memory, one 16-byte load per thread each. A split-K grid gives block z the k steps z, z + S, …
 * and adds the partials as skinny_tile does (in z order), so results repeat bit for bit. */
__device__ __forceinline__ void mma_tile(const struct fused_table &t, int m, const bf16 *w,
                                         const bf16 *in, bf16 *out, int ct, int tile,
                                         struct mma_smem &sm)
{
    using namespace nvcuda;
    const int warp = threadIdx.x >> 5, fr = warp >> 1, fc = (warp & 1) * 2;
    const int S = (int)gridDim.z, steps = t.K / FUSED_KSTEP;
    /* this thread's loads: input row ar, k offset ak; weight row wr, column wc (in W) */
    const int ar = threadIdx.x >> 2, ak = (threadIdx.x & 3) * 8;
    const int wr = threadIdx.x >> 3, wl = (threadIdx.x & 7) * 8;
    const int wc = t.swiglu ? (wl >= 32 ? t.N : 0) + ct * 32 + (wl & 31) : ct * 64 + wl;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
    wmma::fill_fragment(acc[0], 0.0f);
    wmma::fill_fragment(acc[1], 0.0f);
    for (int st = (int)blockIdx.z; st < steps; st += S) {
        const int k = st * FUSED_KSTEP;
        int4 av = {0, 0, 0, 0};
        if (ar < m)
            av = *(const int4 *)(in + (size_t)ar * t.lda + k + ak);
        const int4 wv = *(const int4 *)(w + (size_t)(k + wr) * t.ldw + wc);
        __syncthreads(); /* the last step's fragments are loaded */
        sm.a[ar][ak / 8] = av;
        sm.w[wr][wl / 8] = wv;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < FUSED_KSTEP; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
            wmma::load_matrix_sync(fa, (const bf16 *)&sm.a[fr * 16][kk / 8], MMA_LDA);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
                wmma::load_matrix_sync(fb, (const bf16 *)&sm.w[kk][(fc + j) * 2], MMA_LDW);
                wmma::mma_sync(acc[j], fa, fb, acc[j]);
            }
        }
    }
    wmma::store_matrix_sync(&sm.c[fr * 16][fc * 16], acc[0], 64 + 8, wmma::mem_row_major);
    wmma::store_matrix_sync(&sm.c[fr * 16][(fc + 1) * 16], acc[1], 64 + 8, wmma::mem_row_major);
    __syncthreads();
    tile_finish(t, m, &sm.c[0][0], 64 + 8, sm.last, out, ct, tile, FUSED_TILE);
}

/* The entry whose pieces hold piece p: the i with first[i] ≤ p < first[i + 1], by bisection. */
__device__ __forceinline__ int fused_entry_of(const struct fused_table &t, int p)
{
    int lo = 0, hi = t.n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t.first[mid] <= p)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The fused kernel's block: piece blockIdx.x (its entry found by bisecting t.first), column tile
 * blockIdx.y; R: the most rows of any skinny piece in the launch. */
template <int R> __device__ __forceinline__ void fused_ffn(const struct fused_table &t)
{
    __shared__ fused_smem<R> sm;
    const int p = (int)blockIdx.x, ct = (int)blockIdx.y;
    const int tile = ct * (int)gridDim.x + p;
    const int e = fused_entry_of(t, p), rows = t.rows[e];
    if (rows <= MP_SKINNY_ROWS) {
        skinny_tile<R>(t, rows, t.w[e], t.in[e], t.out[e], ct, tile, FUSED_TILE, sm.skinny);
        return;
    }
    const int r0 = (p - t.first[e]) * FUSED_ROWS;
    const int m = rows - r0 < FUSED_ROWS ? rows - r0 : FUSED_ROWS;
    mma_tile(t, m, (const bf16 *)t.w[e], (const bf16 *)t.in[e] + (size_t)r0 * t.lda,
             t.out[e] + (size_t)r0 * t.ldc, ct, tile, sm.mma);
}

/* fused_ffn for launches whose skinny pieces have at most 1, 2, 4 or 8 (MP_SKINNY_ROWS) rows */
__global__ void __launch_bounds__(256) fused_ffn_r1_kernel(const __grid_constant__ struct fused_table t)
{
    fused_ffn<1>(t);
}
__global__ void __launch_bounds__(256) fused_ffn_r2_kernel(const __grid_constant__ struct fused_table t)
{
    fused_ffn<2>(t);
}
__global__ void __launch_bounds__(256) fused_ffn_r4_kernel(const __grid_constant__ struct fused_table t)
{
    fused_ffn<4>(t);
}
__global__ void __launch_bounds__(256) fused_ffn_r8_kernel(const __grid_constant__ struct fused_table t)
{
    fused_ffn<MP_SKINNY_ROWS>(t);
}

/* Fill c->fused's shapes and its entries' pieces (first[]); return the pieces, and in
 * *skinny_rows the most rows of a skinny piece (at least 1) and in *mma whether any entry has
 * tensor-core pieces. */
static int fused_pieces(struct fused_table *t, int K, int N, int ldw, int lda, int ldc, int swiglu,
                        int *skinny_rows, int *mma)
{
    t->K = K;
    t->N = N;
    t->ldw = ldw;
    t->lda = lda;
    t->ldc = ldc;
    t->swiglu = swiglu;
    *skinny_rows = 1;
    *mma = 0;
    t->first[0] = 0;
    for (int i = 0; i < t->n; i++) {
        int r = t->rows[i];
        if (r <= MP_SKINNY_ROWS && r > *skinny_rows)
            *skinny_rows = r;
        *mma |= r > MP_SKINNY_ROWS;
        t->first[i + 1] = t->first[i] + (r <= MP_SKINNY_ROWS ? 1 : (r + FUSED_ROWS - 1) / FUSED_ROWS);
    }
    return t->first[t->n];
}

/* Launch the fused kernel for c->fused's entries (filled but for the shapes and pieces): pieces
 * and R from the entries' rows, K split S ways as skinny_launch splits it (the same residency per
 * R, a first guess for the tensor-core pieces until measured). */
static int fused_launch(struct mp_compute *c, int K, int N, int ldw, int lda, int ldc, int swiglu)
{
    struct fused_table *t = &c->fused;
    int skinny_rows, mma;
    const int pieces = fused_pieces(t, K, N, ldw, lda, ldc, swiglu, &skinny_rows, &mma);
    const int cts = swiglu ? N / 32 : N / 64;
    int resident = skinny_rows <= 1 ? 4 : skinny_rows <= 2 ? 3 : skinny_rows <= 4 ? 2 : 1;
    resident = mma && resident > 2 ? 2 : resident;
    const int S = split_k(c, pieces * cts, resident, K / SKINNY_GROUP / SKINNY_SLICES, FUSED_TILE,
                          "fused kernel");
    if (S < 1)
        return MP_ERR_RUNTIME;
    t->ws = c->skinny_ws;
    t->count = c->skinny_count;
    dim3 grid((unsigned)pieces, (unsigned)cts, (unsigned)S);
    if (skinny_rows <= 1)
        fused_ffn_r1_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else if (skinny_rows <= 2)
        fused_ffn_r2_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else if (skinny_rows <= 4)
        fused_ffn_r4_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else
        fused_ffn_r8_kernel<<<grid, 256, 0, c->stream>>>(*t);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* Whether the fused kernel takes these shapes: whole tiles and k steps, 16-byte aligned rows. */
static int fused_fits(const struct mp_ffn_args *a)
{
    if (!table_fits(a, 32, 64))
        return 0;
    for (int s = 0; s < a->nshared; s++)
        if ((uintptr_t)a->wgu[a->nexp + s] % 16 || (uintptr_t)a->wd[a->nexp + s] % 16)
            return 0;
    return !a->nshared || ((uintptr_t)a->shared_in % 16 == 0 && (uintptr_t)a->shared_out % 16 == 0);
}

/* An FFN entry of the fused kernel: an expert's rows, weights, input and output rows, and where
 * its activations go. */
struct fused_entry {
    long rows;
    const void *wgu, *wd;
    const void *in; /* bf16 rows, or quantized rows (fp8) */
    bf16 *act, *out;
};

/* Both stages for entries [0, n) of `ent`, SKINNY_TABLE at a time. */
static int fused_stages(struct mp_compute *c, const struct fused_entry *ent, int n, int H, int Dl)
{
    struct fused_table *t = &c->fused;
    for (int i0 = 0; i0 < n; i0 += SKINNY_TABLE) {
        t->n = n - i0 < SKINNY_TABLE ? n - i0 : SKINNY_TABLE;
        for (int i = 0; i < t->n; i++) { /* [gate | up] with SwiGLU into the activations */
            t->rows[i] = (int)ent[i0 + i].rows;
            t->w[i] = ent[i0 + i].wgu;
            t->in[i] = ent[i0 + i].in;
            t->out[i] = ent[i0 + i].act;
        }
        if (fused_launch(c, H, Dl, 2 * Dl, H, Dl, 1) != MP_OK)
            return MP_ERR_RUNTIME;
        for (int i = 0; i < t->n; i++) { /* the down projection */
            t->w[i] = ent[i0 + i].wd;
            t->in[i] = ent[i0 + i].act;
            t->out[i] = ent[i0 + i].out;
        }
        if (fused_launch(c, Dl, H, H, Dl, H, 0) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* Room for n entries of the fused FFN (host memory, grown as needed). */
static int fused_reserve_entries(struct mp_compute *c, int n)
{
    if (n <= c->fused_ent_cap)
        return MP_OK;
    void *more = realloc(c->fused_ent, (size_t)n * sizeof *c->fused_ent);
    if (!more) {
        mp_error("out of memory for the fused FFN's %d experts", n);
        return MP_ERR_RUNTIME;
    }
    c->fused_ent = (struct fused_entry *)more;
    c->fused_ent_cap = n;
    return MP_OK;
}

/* --gemm fused: every expert with rows and every shared expert (a->nshared) through the fused
 * kernel, one launch per stage for up to SKINNY_TABLE of them; the activations (rows × Dl) in a
 * buffer of the backend's, grown on a first (untimed) call, never in a capture. Shapes the kernel
 * does not take run as the loop. */
static int ffn_fused(struct mp_compute *c, const struct mp_ffn_args *a)
{
    const int H = a->H, Dl = a->Dl, n = a->nexp + a->nshared;
    const long base = a->row_off[0], routed = a->row_off[a->nexp] - base;
    if (!fused_fits(a)) {
        for (int e = 0; e < a->nexp; e++)
            if (ffn_one_expert(c, a, e, (bf16 *)a->work) != MP_OK)
                return MP_ERR_RUNTIME;
        const long off[2] = {0, a->shared_rows};
        for (int s = 0; s < a->nshared; s++) {
            struct mp_ffn_args one = *a;
            one.in = a->shared_in;
            one.out = (bf16 *)a->shared_out + (size_t)s * a->shared_rows * H;
            one.row_off = off;
            one.nexp = 1;
            one.wgu = a->wgu + a->nexp + s;
            one.wd = a->wd + a->nexp + s;
            if (ffn_one_expert(c, &one, 0, (bf16 *)a->work) != MP_OK)
                return MP_ERR_RUNTIME;
        }
        return MP_OK;
    }
    const size_t act = ((size_t)routed + (size_t)a->nshared * (size_t)a->shared_rows) * Dl * sizeof(bf16);
    if (act > c->fused_act_cap) {
        if (c->capturing) {
            mp_error("--graph: the fused FFN's activations (%zu bytes) were not reserved before "
                     "the capture", act);
            return MP_ERR_RUNTIME;
        }
        if (grow((void **)&c->fused_act, &c->fused_act_cap, act) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    if (fused_reserve_entries(c, n) != MP_OK)
        return MP_ERR_RUNTIME;
    struct fused_entry *ent = c->fused_ent;
    int m = 0;
    for (int e = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], rows = a->row_off[e + 1] - r0;
        if (rows > 0)
            ent[m++] = (struct fused_entry){rows, a->wgu[e], a->wd[e], (const bf16 *)a->in + r0 * H,
                                            c->fused_act + (r0 - base) * Dl, (bf16 *)a->out + r0 * H};
    }
    for (int s = 0; s < a->nshared && a->shared_rows > 0; s++)
        ent[m++] = (struct fused_entry){a->shared_rows, a->wgu[a->nexp + s], a->wd[a->nexp + s],
                                        (const bf16 *)a->shared_in,
                                        c->fused_act + (routed + (long)s * a->shared_rows) * Dl,
                                        (bf16 *)a->shared_out + (size_t)s * a->shared_rows * H};
    return m > 0 ? fused_stages(c, ent, m, H, Dl) : MP_OK;
}

/* --weight-dtype fp8: the expert FFN on fp8 images (base/fp8.h: K-major e4m3 codes, one fp32 scale
 * per 128×128 block) with moeperf's own kernel, for pieces of at most MP_SKINNY_ROWS rows (the
 * decode case; a larger expert is cut into such pieces, each streaming the weights again). A
 * block computes FP8W_COLS outputs for every row of its piece: 8 warps of FP8W_WARP_COLS image
 * columns each (with SwiGLU, warps 0-3 take 16 gate columns and warps 4-7 the matching up
 * columns). A lane streams 16 consecutive codes of each of its warp's columns (one 16-byte load,
 * so a warp reads 512 contiguous bytes of a column per step; half the bytes of bf16 weights) and
 * the matching 16 input codes of each row (the rows quantized first, w8a8: quantize_pieces), sums
 * code·code over the 16 and scales the sum by the weight block's and the input block's scales,
 * as cuBLASLt's block-scaled GEMM does (16 codes never straddle a 128-value block). The lanes' partials are added in
 * shared memory in lane order, and a split-K grid (grid.z = S) adds its partials as the skinny
 * kernel does, so results repeat bit for bit. grid = (N / 16 with SwiGLU or N / 32, pieces, S). */
#define FP8W_COLS 32
#define FP8W_WARP_COLS 4
#define FP8W_CHUNK 16                /* codes per lane per step */
#define FP8W_STEP (32 * FP8W_CHUNK)  /* image rows (k) a warp covers per step */
#define FP8W_TILE (FP8W_COLS * MP_SKINNY_ROWS) /* floats of one block's partial tile */

/* The four e4m3 codes of a 32-bit word (lowest byte first) as floats, exactly: the sm_89+
 * conversion instruction two codes at a time, or base/fp8.h's decoding elsewhere. */
__device__ __forceinline__ void fp8x4_to_float(uint32_t v, float *f)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t lo, hi;
    unsigned short lo16 = (unsigned short)(v & 0xffffu), hi16 = (unsigned short)(v >> 16);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"(lo16));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"(hi16));
    unsigned short h0 = (unsigned short)(lo & 0xffffu), h1 = (unsigned short)(lo >> 16);
    unsigned short h2 = (unsigned short)(hi & 0xffffu), h3 = (unsigned short)(hi >> 16);
    asm("cvt.f32.f16 %0, %1;" : "=f"(f[0]) : "h"(h0));
    asm("cvt.f32.f16 %0, %1;" : "=f"(f[1]) : "h"(h1));
    asm("cvt.f32.f16 %0, %1;" : "=f"(f[2]) : "h"(h2));
    asm("cvt.f32.f16 %0, %1;" : "=f"(f[3]) : "h"(h3));
#else
    for (int i = 0; i < 4; i++)
        f[i] = mp_fp8_decode((uint8_t)(v >> (8 * i)));
#endif
}

/* word i (0..3, a constant after unrolling) of an int4 */
__device__ __forceinline__ uint32_t int4_word(const int4 &v, int i)
{
    return (uint32_t)(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w);
}

/* The lanes' partials of fp8w_cols, padded against bank conflicts; and a tile's sums. */
template <int R> struct fp8w_smem {
    float red[FP8W_COLS][R][33];
    float sum[R][FP8W_COLS];
    int last;
};

/* FP8W_COLS image columns of a piece of m ≤ R quantized input rows (in, row stride lda bytes)
 * through the K×(parts·N) image img, summed over this block's k steps (blockIdx.z, + gridDim.z,
 * …): with SwiGLU the gate columns of outputs ocol .. ocol + 15 and the matching up columns, else
 * outputs ocol .. ocol + 31. Output j of the 32 goes to dst[r·ld + q], q = qa + j, or with SwiGLU
 * qa + j for the 16 gate columns and qb + j − 16 for the up ones. Synchronize before reading dst
 * or calling again (red is reused). */
template <int R>
__device__ __forceinline__ void fp8w_cols(int K, int N, int swiglu, size_t lda,
                                          const unsigned char *img, const unsigned char *in, int m,
                                          int ocol, float (*red)[R][33], float *dst, int ld, int qa,
                                          int qb)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, S = (int)gridDim.z;
    const int parts = swiglu ? 2 : 1;
    const size_t ld_img = mp_fp8_image_ld(K);
    /* this warp's first image column */
    const int c0 = swiglu ? (warp >= 4 ? N : 0) + ocol + (warp & 3) * 4 : ocol + warp * FP8W_WARP_COLS;
    const float *scales = mp_fp8_image_scales(img, K, N, parts);
    float acc[FP8W_WARP_COLS][R] = {};
    const int steps = (K + FP8W_STEP - 1) / FP8W_STEP;
    for (int st = (int)blockIdx.z; st < steps; st += S) {
        const int k = st * FP8W_STEP + lane * FP8W_CHUNK;
        if (k >= K) /* K is a multiple of 16: a chunk lies wholly inside or outside */
            continue;
        /* xv and sx are read only for r < m, where they are loaded; zeroed so that a host
         * compiler's flow analysis of the stand-in (-Wmaybe-uninitialized) sees them set */
        int4 wv[FP8W_WARP_COLS], xv[R] = {};
        float sw[FP8W_WARP_COLS], sx[R] = {};
#pragma unroll
        for (int j = 0; j < FP8W_WARP_COLS; j++) { /* all loads first: they overlap in flight */
            wv[j] = *(const int4 *)(img + (size_t)(c0 + j) * ld_img + k);
            sw[j] = scales[mp_fp8_image_scale_index(K, N, c0 + j, k)];
        }
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < m) {
                const unsigned char *row = in + (size_t)r * lda;
                xv[r] = *(const int4 *)(row + k);
                sx[r] = ((const float *)(const void *)(row + K))[k / MP_FP8_BLOCK];
            }
        float wf[FP8W_WARP_COLS][FP8W_CHUNK];
#pragma unroll
        for (int j = 0; j < FP8W_WARP_COLS; j++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                fp8x4_to_float(int4_word(wv[j], q), wf[j] + 4 * q);
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= m)
                break;
            float xf[FP8W_CHUNK];
#pragma unroll
            for (int q = 0; q < 4; q++)
                fp8x4_to_float(int4_word(xv[r], q), xf + 4 * q);
#pragma unroll
            for (int j = 0; j < FP8W_WARP_COLS; j++) { /* codes times codes, both scales after */
                float dot = 0.0f;
#pragma unroll
                for (int i = 0; i < FP8W_CHUNK; i++)
                    dot += wf[j][i] * xf[i];
                acc[j][r] += sw[j] * sx[r] * dot;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < FP8W_WARP_COLS; j++)
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < m)
                red[warp * FP8W_WARP_COLS + j][r][lane] = acc[j][r];
    __syncthreads();
    for (int i = threadIdx.x; i < FP8W_COLS * m; i += blockDim.x) {
        const int j = i / m, r = i % m;
        float v = 0.0f;
        for (int l = 0; l < 32; l++)
            v += red[j][r][l];
        dst[r * ld + (swiglu && j >= 16 ? qb + j - 16 : qa + j)] = v;
    }
}

/* fp8w_ffn's block: piece blockIdx.y of table t, FP8W_COLS image columns blockIdx.x. */
template <int R> __device__ __forceinline__ void fp8w_ffn(const struct skinny_table &t)
{
    __shared__ fp8w_smem<R> sm;
    const int e = blockIdx.y, m = t.rows[e];
    const int S = (int)gridDim.z, tile = e * (int)gridDim.x + (int)blockIdx.x;
    fp8w_cols<R>(t.K, t.N, t.swiglu, (size_t)t.lda, (const unsigned char *)t.w[e],
                 (const unsigned char *)t.in[e], m,
                 (int)blockIdx.x * (t.swiglu ? 16 : FP8W_COLS), sm.red, &sm.sum[0][0], FP8W_COLS,
                 0, 16);
    float(*sum)[FP8W_COLS] = sm.sum;
    if (S > 1) { /* split K: the tile's last block to finish adds the partials */
        float *mine = t.ws + ((size_t)tile * S + blockIdx.z) * FP8W_TILE;
        __syncthreads();
        for (int i = threadIdx.x; i < FP8W_COLS * m; i += blockDim.x)
            mine[i] = sum[i / FP8W_COLS][i % FP8W_COLS];
        __threadfence(); /* the partial is visible device-wide before the count says so */
        __syncthreads();
        if (threadIdx.x == 0)
            sm.last = atomicAdd(&t.count[tile], 1) == S - 1;
        __syncthreads();
        if (!sm.last)
            return;
        __threadfence();
        const volatile float *ps = t.ws + (size_t)tile * S * FP8W_TILE;
        for (int i = threadIdx.x; i < FP8W_COLS * m; i += blockDim.x) {
            float v = 0.0f;
            for (int z = 0; z < S; z++)
                v += ps[(size_t)z * FP8W_TILE + i];
            sum[i / FP8W_COLS][i % FP8W_COLS] = v;
        }
        if (threadIdx.x == 0)
            t.count[tile] = 0;
    }
    __syncthreads();
    if (t.swiglu) { /* gate and up rounded to bf16 first, as the GEMM paths store them */
        for (int i = threadIdx.x; i < 16 * m; i += blockDim.x) {
            int r = i / 16, j = i % 16;
            float gate = __bfloat162float(__float2bfloat16(sum[r][j]));
            float up = __bfloat162float(__float2bfloat16(sum[r][16 + j]));
            t.out[e][(size_t)r * t.ldc + blockIdx.x * 16 + j] = __float2bfloat16(mp_swiglu(gate, up));
        }
    } else {
        for (int i = threadIdx.x; i < FP8W_COLS * m; i += blockDim.x) {
            int r = i / FP8W_COLS, j = i % FP8W_COLS;
            t.out[e][(size_t)r * t.ldc + blockIdx.x * FP8W_COLS + j] = __float2bfloat16(sum[r][j]);
        }
    }
}

/* fp8w_ffn for tables whose pieces have at most 1, 2, 4 or 8 (MP_SKINNY_ROWS) rows */
__global__ void __launch_bounds__(256) fp8w_ffn_r1_kernel(const __grid_constant__ struct skinny_table t)
{
    fp8w_ffn<1>(t);
}
__global__ void __launch_bounds__(256) fp8w_ffn_r2_kernel(const __grid_constant__ struct skinny_table t)
{
    fp8w_ffn<2>(t);
}
__global__ void __launch_bounds__(256) fp8w_ffn_r4_kernel(const __grid_constant__ struct skinny_table t)
{
    fp8w_ffn<4>(t);
}
__global__ void __launch_bounds__(256) fp8w_ffn_r8_kernel(const __grid_constant__ struct skinny_table t)
{
    fp8w_ffn<MP_SKINNY_ROWS>(t);
}

/* Launch fp8w_ffn for the table's pieces (c->skinny, filled but for the shapes): K image rows, N
 * outputs per part (SwiGLU: the gate/up image's Dl; else the down image's H), input and output
 * row strides. K is split S ways when the tiles alone would not fill one wave of resident blocks
 * (as skinny_launch), at most one step of FP8W_STEP rows per split. */
static int fp8w_launch(struct mp_compute *c, int K, int N, int lda, int ldc, int swiglu)
{
    struct skinny_table *t = &c->skinny;
    const int rows = table_shapes(t, K, N, 0, lda, ldc, swiglu);
    const int per_piece = swiglu ? N / 16 : N / FP8W_COLS, tiles = per_piece * t->n;
    const int S = split_k(c, tiles, 2, (K + FP8W_STEP - 1) / FP8W_STEP, FP8W_TILE, "fp8 kernel");
    if (S < 1)
        return MP_ERR_RUNTIME;
    dim3 grid((unsigned)per_piece, (unsigned)t->n, (unsigned)S);
    if (rows <= 1)
        fp8w_ffn_r1_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else if (rows <= 2)
        fp8w_ffn_r2_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else if (rows <= 4)
        fp8w_ffn_r4_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else
        fp8w_ffn_r8_kernel<<<grid, 256, 0, c->stream>>>(*t);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* Whether moeperf's fp8 kernel takes these shapes: whole blocks of outputs (Dl a multiple of 16, H
 * of 32), image rows in whole 16-code chunks (H and Dl multiples of 16) and 16-byte aligned
 * inputs, work rows and images. */
static int fp8w_fits(const struct mp_ffn_args *a) { return table_fits(a, 16, 32); }

/* The scale of one 128-value block of a row (its values, one per thread of a 128-thread block; 0
 * past the row's end): amax/448 (base/fp8.h), reduced in shared memory. */
__device__ float block_scale(float v)
{
    __shared__ float amax[MP_FP8_BLOCK];
    amax[threadIdx.x] = fabsf(v);
    __syncthreads();
    for (int half = MP_FP8_BLOCK / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            amax[threadIdx.x] = fmaxf(amax[threadIdx.x], amax[threadIdx.x + half]);
        __syncthreads();
    }
    return mp_fp8_scale(amax[0]);
}


/* Bytes of a quantized input row of fp8w_ffn: K codes, then its ⌈K/128⌉ fp32 scales (K a multiple
 * of 16, so they are aligned), rounded up to 16 so every row starts 16-byte aligned. */
static __host__ __device__ size_t quantized_row_bytes(int K)
{
    return ((size_t)K + 4 * (size_t)mp_fp8_blocks(K) + 15) & ~(size_t)15;
}

/* Quantize the table's rows (base/fp8.h's rules: one scale amax/448 per 128 values) into their
 * quantized rows. grid (MP_SKINNY_ROWS, pieces, ⌈K/128⌉), 128 threads. */
__global__ void quantize_pieces_kernel(const __grid_constant__ struct quantize_table t)
{
    const int r = (int)blockIdx.x, i = (int)blockIdx.y, b = (int)blockIdx.z;
    const int k = b * MP_FP8_BLOCK + (int)threadIdx.x;
    if (r >= t.rows[i]) /* the whole block leaves together: no barrier is left waiting */
        return;
    float v = k < t.K ? __bfloat162float(t.src[i][r * t.lds + k]) : 0.0f;
    const float s = block_scale(v);
    unsigned char *row = t.dst[i] + (size_t)r * quantized_row_bytes(t.K);
    if (k < t.K)
        row[k] = mp_fp8_code(v, s);
    if (threadIdx.x == 0)
        ((float *)(void *)(row + t.K))[b] = s;
}

static int quantize_launch(struct mp_compute *c, const struct quantize_table *t)
{
    dim3 grid(MP_SKINNY_ROWS, (unsigned)t->n, (unsigned)mp_fp8_blocks(t->K));
    quantize_pieces_kernel<<<grid, MP_FP8_BLOCK, 0, c->stream>>>(*t);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* The expert FFN with fp8 weights through moeperf's kernel for the experts `take` accepts (rows):
 * each cut into pieces of MP_SKINNY_ROWS rows, SKINNY_TABLE pieces at a time ([gate | up] with
 * SwiGLU for all of them, then the down projection). */
static int ffn_fp8_own(struct mp_compute *c, const struct mp_ffn_args *a, int (*take)(long rows))
{
    const bf16 *in = (const bf16 *)a->in;
    bf16 *out = (bf16 *)a->out, *g = (bf16 *)a->work;
    int H = a->H, Dl = a->Dl;
    long base = a->row_off[0], total = a->row_off[a->nexp] - base;
    if (total <= 0)
        return MP_OK;
    /* the quantized inputs of stage 1, then of stage 2 after them */
    const size_t qh = quantized_row_bytes(H), qd = quantized_row_bytes(Dl);
    size_t xq_need = (size_t)total * (qh + qd);
    if (xq_need > c->xq_cap) {
        if (c->capturing) {
            mp_error("--graph: the fp8 kernel's input scratch (%zu bytes) was not reserved before "
                     "the capture", xq_need);
            return MP_ERR_RUNTIME;
        }
        if (grow((void **)&c->d_xq, &c->xq_cap, xq_need) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    unsigned char *xq1 = c->d_xq, *xq2 = c->d_xq + (size_t)total * qh;
    struct skinny_table *t = &c->skinny;
    struct quantize_table *qt = &c->quantize;
    int ids[SKINNY_TABLE];
    long first[SKINNY_TABLE];
    int e = 0;
    long r = a->row_off[0];
    while (e < a->nexp) {
        t->n = 0;
        for (; e < a->nexp && t->n < SKINNY_TABLE;) {
            long end = a->row_off[e + 1];
            if (r >= end || !take(end - a->row_off[e])) {
                e++;
                r = e < a->nexp ? a->row_off[e] : r;
                continue;
            }
            long m = end - r < MP_SKINNY_ROWS ? end - r : MP_SKINNY_ROWS;
            ids[t->n] = e;
            first[t->n] = r;
            t->rows[t->n] = qt->rows[t->n] = (int)m;
            t->w[t->n] = a->wgu[e];
            t->in[t->n] = xq1 + (size_t)(r - base) * qh;
            t->out[t->n] = g + (r - base) * 2L * Dl;
            qt->src[t->n] = in + r * H;
            qt->dst[t->n] = xq1 + (size_t)(r - base) * qh;
            t->n++;
            r += m;
        }
        if (t->n == 0)
            break;
        /* w8a8: the pieces' input rows quantized, then [gate | up] with SwiGLU */
        qt->n = t->n;
        qt->K = H;
        qt->lds = H;
        if (quantize_launch(c, qt) != MP_OK || fp8w_launch(c, H, Dl, (int)qh, 2 * Dl, 1) != MP_OK)
            return MP_ERR_RUNTIME;
        for (int i = 0; i < t->n; i++) { /* the same pieces, down projection */
            t->w[i] = a->wd[ids[i]];
            t->in[i] = qt->dst[i] = xq2 + (size_t)(first[i] - base) * qd;
            t->out[i] = out + first[i] * H;
            qt->src[i] = g + (first[i] - base) * 2L * Dl;
        }
        qt->K = Dl; /* the activations */
        qt->lds = 2L * Dl;
        if (quantize_launch(c, qt) != MP_OK || fp8w_launch(c, Dl, H, (int)qd, H, 0) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* cuBLASLt's block-scaled FP8 GEMM (Hopper; cuBLAS documentation, cublasLtMatmul and section
 * 3.1.4.5): D = op(A)·op(B) in the "TN" format, A the K-major fp8 image of a weight matrix (M =
 * parts·N outputs, its 128×128 block scales in the BLK128x128_32F layout), B the activations'
 * codes (K × rows, K-major) with one scale per 128 values (VEC128_32F, k-block major), D bf16. */

/* Quantize rows [0, m) of x (row stride lda, K values) into c->d_q (row stride ld = K rounded up
 * to 16, base/fp8.h's rules: one scale amax/448 per 128 values) and their scales into c->d_qs at
 * k-block·mpad + row; rows [m, mpad) get zero codes and scales. grid (mpad, ⌈K/128⌉), 128 threads:
 * a block takes one row's 128-value block. */
__global__ void quantize_rows_kernel(const bf16 *x, long lda, int K, long m, long mpad, size_t ld,
                                     unsigned char *q, float *qs)
{
    const long r = blockIdx.x;
    const int b = (int)blockIdx.y, k = b * MP_FP8_BLOCK + (int)threadIdx.x;
    float v = r < m && k < K ? __bfloat162float(x[r * lda + k]) : 0.0f;
    const float s = block_scale(v);
    if (k < K)
        q[r * ld + k] = r < m ? mp_fp8_code(v, s) : 0;
    if (threadIdx.x == 0)
        qs[(long)b * mpad + r] = r < m ? s : 0.0f;
}

/* Room for the GEMM of `mpad` rows: codes, scales and output (first, untimed calls only). */
static int lt_reserve(struct mp_compute *c, long mpad, int K, long M)
{
    size_t q = (size_t)mpad * mp_fp8_image_ld(K), qs = (size_t)mpad * mp_fp8_blocks(K) * sizeof(float);
    size_t out = (size_t)mpad * (size_t)M * sizeof(bf16);
    if (q <= c->q_cap && qs <= c->qs_cap && out <= c->lt_out_cap)
        return MP_OK;
    if (c->capturing) {
        mp_error("--graph: the FP8 GEMM's scratch for %ld rows was not reserved before the capture",
                 mpad);
        return MP_ERR_RUNTIME;
    }
    if (grow((void **)&c->d_q, &c->q_cap, q) != MP_OK ||
        grow((void **)&c->d_qs, &c->qs_cap, qs) != MP_OK ||
        grow((void **)&c->d_lt_out, &c->lt_out_cap, out) != MP_OK)
        return MP_ERR_RUNTIME;
    return MP_OK;
}

/* D (mpad rows of M = parts·N bf16 values) = the quantized rows (q: mpad rows of mp_fp8_image_ld(K)
 * codes, qs: their scales k-block major) · W, W the image img of `parts` K×N matrices, through
 * cuBLASLt; mpad a multiple of 4. */
static int lt_matmul(struct mp_compute *c, const void *img, int K, int N, int parts,
                     const unsigned char *q, const float *qs, long mpad, bf16 *D)
{
    const long M = (long)parts * N;
    const size_t ld = mp_fp8_image_ld(K);
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld_ = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    const int32_t blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                  vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const float *a_scale = mp_fp8_image_scales((const unsigned char *)img, K, N, parts),
                *b_scale = qs;
    const float one = 1.0f, zero = 0.0f;
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublasStatus_t st = cublaslt.desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
#define LT_STEP(call)                                                                              \
    if (st == CUBLAS_STATUS_SUCCESS)                                                               \
        st = (call);
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &blk, sizeof blk));
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec));
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
    LT_STEP(cublaslt.desc_set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
    LT_STEP(cublaslt.layout_create(&la, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)M, (int64_t)ld));
    LT_STEP(cublaslt.layout_create(&lb, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)mpad, (int64_t)ld));
    LT_STEP(cublaslt.layout_create(&ld_, CUDA_R_16BF, (uint64_t)M, (uint64_t)mpad, (int64_t)M));
    LT_STEP(cublaslt.pref_create(&pref));
    LT_STEP(cublaslt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c->blas_ws_bytes,
                              sizeof c->blas_ws_bytes));
    LT_STEP(cublaslt.heuristic(c->lt, desc, la, lb, ld_, ld_, pref, 1, &h, &found));
    if (st == CUBLAS_STATUS_SUCCESS && found < 1)
        st = CUBLAS_STATUS_NOT_SUPPORTED;
    LT_STEP(cublaslt.matmul(c->lt, desc, &one, img, la, q, lb, &zero, D, ld_, D, ld_, &h.algo,
                            c->blas_ws, c->blas_ws_bytes, c->stream));
#undef LT_STEP
    if (pref)
        cublaslt.pref_destroy(pref);
    if (ld_)
        cublaslt.layout_destroy(ld_);
    if (lb)
        cublaslt.layout_destroy(lb);
    if (la)
        cublaslt.layout_destroy(la);
    if (desc)
        cublaslt.desc_destroy(desc);
    if (st != CUBLAS_STATUS_SUCCESS) {
        mp_error("cuBLASLt FP8 GEMM (%ld×%d by %d×%ld, block scales): status %d", mpad, K, K, M,
                 (int)st);
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* out (m rows, row stride M) = x (m rows, stride lda, K values) · W, W the image img of `parts`
 * K×N matrices (M = parts·N outputs), through cuBLASLt: x quantized, the GEMM over m rounded up to
 * 4 rows into the padded output, its first m rows copied to out. */
static int lt_gemm(struct mp_compute *c, const bf16 *x, long lda, long m, const void *img, int K,
                   int N, int parts, bf16 *out)
{
    const long M = (long)parts * N, mpad = (m + 3) & ~3L;
    if (lt_reserve(c, mpad, K, M) != MP_OK)
        return MP_ERR_RUNTIME;
    quantize_rows_kernel<<<dim3((unsigned)mpad, (unsigned)mp_fp8_blocks(K)), MP_FP8_BLOCK, 0,
                           c->stream>>>(x, lda, K, m, mpad, mp_fp8_image_ld(K), c->d_q, c->d_qs);
    CUDACHECK(cudaGetLastError());
    if (lt_matmul(c, img, K, N, parts, c->d_q, c->d_qs, mpad, c->d_lt_out) != MP_OK)
        return MP_ERR_RUNTIME;
    CUDACHECK(cudaMemcpyAsync(out, c->d_lt_out, (size_t)m * (size_t)M * sizeof(bf16),
                              cudaMemcpyDeviceToDevice, c->stream));
    return MP_OK;
}

/* The experts `take` accepts, whatever their rows, through cuBLASLt's FP8 GEMM: [gate | up],
 * SwiGLU, down projection, one expert at a time. Where the gate/up width Dl is not a multiple of
 * 128, cuBLASLt's 128×128 block layout would make blocks straddle the gate and up matrices, which
 * the image quantizes apart: such shapes run through moeperf's kernel in pieces instead. */
static int ffn_fp8_large(struct mp_compute *c, const struct mp_ffn_args *a, int (*take)(long rows))
{
    if (a->Dl % MP_FP8_BLOCK)
        return ffn_fp8_own(c, a, take);
    const bf16 *in = (const bf16 *)a->in;
    bf16 *out = (bf16 *)a->out, *g = (bf16 *)a->work;
    int H = a->H, Dl = a->Dl;
    long base = a->row_off[0];
    for (int e = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
        if (m < 1 || !take(m))
            continue;
        bf16 *ge = g + (r0 - base) * 2L * Dl;
        if (lt_gemm(c, in + r0 * H, H, m, a->wgu[e], H, Dl, 2, ge) != MP_OK)
            return MP_ERR_RUNTIME;
        swiglu_kernel<<<(unsigned)m, 256, 0, c->stream>>>(ge, m, Dl);
        CUDACHECK(cudaGetLastError());
        if (lt_gemm(c, ge, 2L * Dl, m, a->wd[e], Dl, H, 1, out + r0 * H) != MP_OK)
            return MP_ERR_RUNTIME;
        if (a->progress)
            a->progress(a->progress_arg);
    }
    return MP_OK;
}

static int rows_decode(long rows) { return rows >= 1 && rows <= MP_SKINNY_ROWS; }
static int rows_any(long rows) { return rows >= 1; }
static int rows_large(long rows) { return rows > MP_SKINNY_ROWS; }

/* --gemm fused with fp8 weights (w8a8): the fused kernel's pieces on fp8 images and quantized
 * input rows (quantized_row_bytes), one quantize launch and one GEMM launch per stage for every
 * expert with rows and every shared expert. A piece of at most MP_SKINNY_ROWS rows streams its
 * column tile's codes as fp8w_ffn does (fp8w_cols, twice: the 64 image columns of a fused tile);
 * a piece of up to FUSED_ROWS rows runs on the tensor cores: codes of both operands turned into
 * bf16 (exact: every e4m3 value is a bf16 value) and multiplied by wmma, whose fp32 products of
 * two codes are exact, each 128-value k block's sums then scaled by the weight block's and each
 * row's input block's scales, as fp8w_ffn and cuBLASLt's block-scaled GEMM scale them. */
struct fused8_mma_smem {
    int4 a[FUSED_ROWS][MMA_LDA / 8]; /* input codes as bf16, row-major */
    int4 w[64][MMA_LDA / 8];         /* weight codes as bf16, a column's k values contiguous */
    float c[FUSED_ROWS][64 + 8];
    float sx[FUSED_ROWS];            /* the rows' scales of this k block */
    int last;
};
template <int R> union alignas(128) fused8_smem {
    struct {
        float red[FP8W_COLS][R][33];
        float sum[R][64];
        int last;
    } tile;
    struct fused8_mma_smem mma;
};

/* Eight e4m3 codes (a 64-bit word, lowest byte first) as eight bf16 values in an int4. */
__device__ __forceinline__ int4 fp8x8_to_bf16(uint64_t v)
{
    float f[8];
    fp8x4_to_float((uint32_t)v, f);
    fp8x4_to_float((uint32_t)(v >> 32), f + 4);
    bf16 b[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        b[i] = __float2bfloat16(f[i]);
    int4 out;
    memcpy(&out, b, sizeof out);
    return out;
}

/* The image column of position q (0..63) of column tile ct: with SwiGLU gate columns ct·32 + q
 * for q < 32 and up columns N + ct·32 + q − 32, else ct·64 + q. */
__device__ __forceinline__ int tile_column(const struct fused_table &t, int ct, int q)
{
    return t.swiglu ? (q >= 32 ? t.N : 0) + ct * 32 + (q & 31) : ct * 64 + q;
}

/* One output tile of a piece of m ≤ FUSED_ROWS quantized rows on the tensor cores (fp8 codes as
 * bf16, wmma 16×16×16 as mma_tile: warp i the 16 rows of fragment row i / 2 and 32 columns of half
 * i % 2). Per 128-value k block (this block's: blockIdx.z, + S, …) the fragments sum codes times
 * codes over 32-value steps staged through shared memory, then each thread adds its column's 16
 * rows of them, times the weight block's scale and each row's scale, into its registers; the
 * tile ends as mma_tile's (split K in z order, SwiGLU). */
__device__ __forceinline__ void fused8_mma_tile(const struct fused_table &t, int m,
                                                const unsigned char *img, const unsigned char *in,
                                                bf16 *out, int ct, int tile,
                                                struct fused8_mma_smem &sm)
{
    using namespace nvcuda;
    const int warp = threadIdx.x >> 5, fr = warp >> 1, fc = (warp & 1) * 2;
    const int S = (int)gridDim.z, kblocks = mp_fp8_blocks(t.K);
    const size_t ld = mp_fp8_image_ld(t.K);
    const float *scales = mp_fp8_image_scales(img, t.K, t.N, t.swiglu ? 2 : 1);
    /* loads: input row / weight column tid / 4, k offset (tid % 4)·8; sums: column q, rows
     * tid / 64 + 4i */
    const int lr = threadIdx.x >> 2, lk = (threadIdx.x & 3) * 8, q = threadIdx.x & 63;
    const unsigned char *wcol = img + (size_t)tile_column(t, ct, lr) * ld;
    const int cq = tile_column(t, ct, q);
    float tot[FUSED_ROWS / 4] = {};
    for (int kb = (int)blockIdx.z; kb < kblocks; kb += S) {
        const int k0 = kb * MP_FP8_BLOCK;
        const int k1 = k0 + MP_FP8_BLOCK < t.K ? k0 + MP_FP8_BLOCK : t.K;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
        wmma::fill_fragment(acc[0], 0.0f);
        wmma::fill_fragment(acc[1], 0.0f);
        for (int k = k0; k < k1; k += FUSED_KSTEP) {
            uint64_t av = 0;
            if (lr < m)
                av = *(const uint64_t *)(in + (size_t)lr * t.lda + k + lk);
            const uint64_t wv = *(const uint64_t *)(wcol + k + lk);
            const int4 ab = fp8x8_to_bf16(av), wb = fp8x8_to_bf16(wv);
            __syncthreads(); /* the last step's fragments (and the last block's sums) are read */
            sm.a[lr][lk / 8] = ab;
            sm.w[lr][lk / 8] = wb;
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < FUSED_KSTEP; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
                wmma::load_matrix_sync(fa, (const bf16 *)&sm.a[fr * 16][kk / 8], MMA_LDA);
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
                    wmma::load_matrix_sync(fb, (const bf16 *)&sm.w[(fc + j) * 16][kk / 8], MMA_LDA);
                    wmma::mma_sync(acc[j], fa, fb, acc[j]);
                }
            }
        }
        if (threadIdx.x < FUSED_ROWS)
            sm.sx[threadIdx.x] = (int)threadIdx.x < m
                                     ? ((const float *)(const void *)(in + (size_t)threadIdx.x * t.lda + t.K))[kb]
                                     : 0.0f;
        wmma::store_matrix_sync(&sm.c[fr * 16][fc * 16], acc[0], 64 + 8, wmma::mem_row_major);
        wmma::store_matrix_sync(&sm.c[fr * 16][(fc + 1) * 16], acc[1], 64 + 8, wmma::mem_row_major);
        __syncthreads();
        const float sw = scales[mp_fp8_image_scale_index(t.K, t.N, cq, k0)];
#pragma unroll
        for (int i = 0; i < FUSED_ROWS / 4; i++) {
            const int r = (int)(threadIdx.x >> 6) + 4 * i;
            tot[i] += sw * sm.sx[r] * sm.c[r][q];
        }
    }
    __syncthreads(); /* every thread's last sums are read */
#pragma unroll
    for (int i = 0; i < FUSED_ROWS / 4; i++)
        sm.c[(threadIdx.x >> 6) + 4 * i][q] = tot[i];
    __syncthreads();
    tile_finish(t, m, &sm.c[0][0], 64 + 8, sm.last, out, ct, tile, FUSED_TILE);
}

/* The fp8 fused kernel's block: piece blockIdx.x, column tile blockIdx.y; R: the most rows of any
 * skinny piece in the launch. */
template <int R> __device__ __forceinline__ void fused8_ffn(const struct fused_table &t)
{
    __shared__ fused8_smem<R> sm;
    const int p = (int)blockIdx.x, ct = (int)blockIdx.y;
    const int tile = ct * (int)gridDim.x + p;
    const int e = fused_entry_of(t, p), rows = t.rows[e];
    const unsigned char *img = (const unsigned char *)t.w[e], *in = (const unsigned char *)t.in[e];
    if (rows <= MP_SKINNY_ROWS) {
        for (int half = 0; half < 2; half++) {
            const int ocol = t.swiglu ? ct * 32 + half * 16 : ct * 64 + half * FP8W_COLS;
            fp8w_cols<R>(t.K, t.N, t.swiglu, (size_t)t.lda, img, in, rows, ocol, sm.tile.red,
                         &sm.tile.sum[0][0], 64, t.swiglu ? half * 16 : half * FP8W_COLS,
                         32 + half * 16);
            __syncthreads();
        }
        tile_finish(t, rows, &sm.tile.sum[0][0], 64, sm.tile.last, t.out[e], ct, tile, FUSED_TILE);
        return;
    }
    const int r0 = (p - t.first[e]) * FUSED_ROWS;
    const int m = rows - r0 < FUSED_ROWS ? rows - r0 : FUSED_ROWS;
    fused8_mma_tile(t, m, img, in + (size_t)r0 * t.lda, t.out[e] + (size_t)r0 * t.ldc, ct, tile,
                    sm.mma);
}

/* fused8_ffn for launches whose skinny pieces have at most 1, 2, 4 or 8 (MP_SKINNY_ROWS) rows */
__global__ void __launch_bounds__(256) fused8_ffn_r1_kernel(const __grid_constant__ struct fused_table t)
{
    fused8_ffn<1>(t);
}
__global__ void __launch_bounds__(256) fused8_ffn_r2_kernel(const __grid_constant__ struct fused_table t)
{
    fused8_ffn<2>(t);
}
__global__ void __launch_bounds__(256) fused8_ffn_r4_kernel(const __grid_constant__ struct fused_table t)
{
    fused8_ffn<4>(t);
}
__global__ void __launch_bounds__(256) fused8_ffn_r8_kernel(const __grid_constant__ struct fused_table t)
{
    fused8_ffn<MP_SKINNY_ROWS>(t);
}

/* Rows of up to two ranges of K bf16 values (row strides lds) to quantize, range 0's rows first,
 * into consecutive rows of quantized_row_bytes(K) at dst; passed by value. */
struct quantize_ranges {
    int K;
    long rows[2], lds[2];
    const bf16 *src[2];
    unsigned char *dst;
};

/* Quantize the ranges' rows (base/fp8.h's rules: one scale amax/448 per 128 values). grid (rows,
 * ⌈K/128⌉), 128 threads: a block takes one row's 128-value block. */
__global__ void quantize_ranges_kernel(const __grid_constant__ struct quantize_ranges q)
{
    const long r = blockIdx.x;
    const int b = (int)blockIdx.y, k = b * MP_FP8_BLOCK + (int)threadIdx.x, i = r >= q.rows[0];
    const long rr = r - (i ? q.rows[0] : 0);
    const float v = k < q.K ? __bfloat162float(q.src[i][rr * q.lds[i] + k]) : 0.0f;
    const float s = block_scale(v);
    unsigned char *row = q.dst + (size_t)r * quantized_row_bytes(q.K);
    if (k < q.K)
        row[k] = mp_fp8_code(v, s);
    if (threadIdx.x == 0)
        ((float *)(void *)(row + q.K))[b] = s;
}

static int quantize_ranges_launch(struct mp_compute *c, const struct quantize_ranges *q)
{
    const long rows = q->rows[0] + q->rows[1];
    if (rows <= 0)
        return MP_OK;
    quantize_ranges_kernel<<<dim3((unsigned)rows, (unsigned)mp_fp8_blocks(q->K)), MP_FP8_BLOCK, 0,
                             c->stream>>>(*q);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* Launch the fp8 fused kernel for c->fused's entries (filled but for the shapes and pieces): K,
 * N per part, quantized input rows of lda bytes, outputs of row stride ldc; K split as the fp8
 * kernel splits it (at most one step of FP8W_STEP values per split). */
static int fused8_launch(struct mp_compute *c, int K, int N, int lda, int ldc, int swiglu)
{
    struct fused_table *t = &c->fused;
    int skinny_rows, mma;
    const int pieces = fused_pieces(t, K, N, 0, lda, ldc, swiglu, &skinny_rows, &mma);
    const int cts = swiglu ? N / 32 : N / 64;
    const int S = split_k(c, pieces * cts, 2, (K + FP8W_STEP - 1) / FP8W_STEP, FUSED_TILE,
                          "fused fp8 kernel");
    if (S < 1)
        return MP_ERR_RUNTIME;
    t->ws = c->skinny_ws;
    t->count = c->skinny_count;
    dim3 grid((unsigned)pieces, (unsigned)cts, (unsigned)S);
    if (skinny_rows <= 1)
        fused8_ffn_r1_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else if (skinny_rows <= 2)
        fused8_ffn_r2_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else if (skinny_rows <= 4)
        fused8_ffn_r4_kernel<<<grid, 256, 0, c->stream>>>(*t);
    else
        fused8_ffn_r8_kernel<<<grid, 256, 0, c->stream>>>(*t);
    CUDACHECK(cudaGetLastError());
    return MP_OK;
}

/* --gemm fused, --weight-dtype fp8: the routed rows and the shared experts' rows quantized (one
 * launch), [gate | up] with SwiGLU for every entry into the activations (a launch per
 * SKINNY_TABLE entries), the activations quantized (one launch), the down projection (likewise).
 * Shapes the kernel does not take (fused_fits) run as --gemm grouped, shared experts after. */
static int ffn_fused_fp8(struct mp_compute *c, const struct mp_ffn_args *a)
{
    const int H = a->H, Dl = a->Dl;
    const long base = a->row_off[0], routed = a->row_off[a->nexp] - base;
    const long sh = a->nshared > 0 ? a->shared_rows : 0, acts = routed + a->nshared * sh;
    if (!fused_fits(a)) {
        if (ffn_fp8_own(c, a, rows_any) != MP_OK)
            return MP_ERR_RUNTIME;
        const long off[2] = {0, sh};
        for (int s = 0; s < a->nshared && sh > 0; s++) {
            struct mp_ffn_args one = *a;
            one.in = a->shared_in;
            one.out = (bf16 *)a->shared_out + (size_t)s * sh * H;
            one.row_off = off;
            one.nexp = 1;
            one.wgu = a->wgu + a->nexp + s;
            one.wd = a->wd + a->nexp + s;
            if (ffn_fp8_own(c, &one, rows_any) != MP_OK)
                return MP_ERR_RUNTIME;
        }
        return MP_OK;
    }
    const size_t qh = quantized_row_bytes(H), qd = quantized_row_bytes(Dl);
    const size_t xq = (size_t)(routed + sh) * qh + (size_t)acts * qd;
    const size_t act = (size_t)acts * Dl * sizeof(bf16);
    if (xq > c->xq_cap || act > c->fused_act_cap) {
        if (c->capturing) {
            mp_error("--graph: the fused fp8 FFN's scratch (%zu and %zu bytes) was not reserved "
                     "before the capture", xq, act);
            return MP_ERR_RUNTIME;
        }
        if (grow((void **)&c->d_xq, &c->xq_cap, xq) != MP_OK ||
            grow((void **)&c->fused_act, &c->fused_act_cap, act) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    if (fused_reserve_entries(c, a->nexp + a->nshared) != MP_OK)
        return MP_ERR_RUNTIME;
    unsigned char *xq1 = c->d_xq, *xq2 = c->d_xq + (size_t)(routed + sh) * qh;
    struct fused_entry *ent = c->fused_ent;
    int n = 0;
    for (int e = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], rows = a->row_off[e + 1] - r0;
        if (rows > 0)
            ent[n++] = (struct fused_entry){rows, a->wgu[e], a->wd[e], xq1 + (size_t)(r0 - base) * qh,
                                            c->fused_act + (r0 - base) * Dl, (bf16 *)a->out + r0 * H};
    }
    for (int s = 0; s < a->nshared && sh > 0; s++)
        ent[n++] = (struct fused_entry){sh, a->wgu[a->nexp + s], a->wd[a->nexp + s],
                                        xq1 + (size_t)routed * qh, c->fused_act + (routed + s * sh) * Dl,
                                        (bf16 *)a->shared_out + (size_t)s * sh * H};
    if (n == 0)
        return MP_OK;
    struct quantize_ranges q = {H, {routed, sh}, {H, H},
                                {(const bf16 *)a->in + base * H, (const bf16 *)a->shared_in}, xq1};
    if (quantize_ranges_launch(c, &q) != MP_OK)
        return MP_ERR_RUNTIME;
    struct fused_table *t = &c->fused;
    for (int i0 = 0; i0 < n; i0 += SKINNY_TABLE) { /* [gate | up] with SwiGLU */
        t->n = n - i0 < SKINNY_TABLE ? n - i0 : SKINNY_TABLE;
        for (int i = 0; i < t->n; i++) {
            t->rows[i] = (int)ent[i0 + i].rows;
            t->w[i] = ent[i0 + i].wgu;
            t->in[i] = ent[i0 + i].in;
            t->out[i] = ent[i0 + i].act;
        }
        if (fused8_launch(c, H, Dl, (int)qh, Dl, 1) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    struct quantize_ranges qa = {Dl, {acts, 0}, {Dl, Dl}, {c->fused_act, c->fused_act}, xq2};
    if (quantize_ranges_launch(c, &qa) != MP_OK)
        return MP_ERR_RUNTIME;
    for (int i0 = 0; i0 < n; i0 += SKINNY_TABLE) { /* the down projection */
        t->n = n - i0 < SKINNY_TABLE ? n - i0 : SKINNY_TABLE;
        for (int i = 0; i < t->n; i++) {
            t->rows[i] = (int)ent[i0 + i].rows;
            t->w[i] = ent[i0 + i].wd;
            t->in[i] = xq2 + (size_t)((ent[i0 + i].act - c->fused_act) / Dl) * qd;
            t->out[i] = ent[i0 + i].out;
        }
        if (fused8_launch(c, Dl, H, (int)qd, H, 0) != MP_OK)
            return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

/* --weight-dtype fp8: --gemm loop runs every expert through cuBLASLt (ffn_fp8_large), grouped
 * every expert through moeperf's kernel (one launch per stage for all of them, in pieces of
 * MP_SKINNY_ROWS rows, so a larger expert streams its weights once per piece), skinny the experts
 * of at most MP_SKINNY_ROWS rows through moeperf's kernel and the larger ones as loop. */
static int ffn_fp8(struct mp_compute *c, const struct mp_ffn_args *a)
{
    if (!fp8w_fits(a)) {
        mp_error("--weight-dtype fp8 on cuda needs H a multiple of 32 and the per-rank FFN width "
                 "a multiple of 16 (H %d, width %d)", a->H, a->Dl);
        return MP_ERR_RUNTIME;
    }
    if (a->gemm == MP_GEMM_SKINNY) {
        if (ffn_fp8_own(c, a, rows_decode) != MP_OK)
            return MP_ERR_RUNTIME;
        return ffn_fp8_large(c, a, rows_large);
    }
    if (a->gemm == MP_GEMM_GROUPED)
        return ffn_fp8_own(c, a, rows_any);
    if (a->gemm == MP_GEMM_FUSED)
        return ffn_fused_fp8(c, a);
    return ffn_fp8_large(c, a, rows_any);
}

static int cuda_expert_ffn(struct mp_compute *c, const struct mp_ffn_args *a)
{
    if (a->weight_dtype == MP_DTYPE_FP8)
        return ffn_fp8(c, a);
    if (a->gemm == MP_GEMM_GROUPED)
        return ffn_grouped(c, a);
    if (a->gemm == MP_GEMM_SKINNY)
        return ffn_skinny(c, a);
    if (a->gemm == MP_GEMM_FUSED)
        return ffn_fused(c, a);
    for (int e = 0; e < a->nexp; e++)
        if (ffn_one_expert(c, a, e, (bf16 *)a->work) != MP_OK)
            return MP_ERR_RUNTIME;
    return MP_OK;
}

/* acc[tok[i]] += w[i]·rows[i] (fp32 atomics; rows of one token land from several experts). */
__global__ void combine_scatter_kernel(const bf16 *rows, const int32_t *tok, const float *w,
                                       long nrows, int H, float *acc)
{
    long i = blockIdx.x;
    if (i >= nrows)
        return;
    float wi = w[i];
    const bf16 *r = rows + i * H;
    float *a = acc + (long)tok[i] * H;
    for (int h = threadIdx.x; h < H; h += blockDim.x)
        atomicAdd(a + h, wi * __bfloat162float(r[h]));
}

/* y = acc + Σ_s shared[s] in bf16 (y + acc + ... with accumulate). */
__global__ void combine_finish_kernel(const float *acc, const bf16 *shared, int nshared, long n,
                                      bf16 *y, int accumulate)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        float v = acc[i] + (accumulate ? __bfloat162float(y[i]) : 0.0f);
        for (int s = 0; s < nshared; s++)
            v += __bfloat162float(shared[s * n + i]);
        y[i] = __float2bfloat16(v);
    }
}

/* The combine over the device plan's rows, one block per token: its K pairs' rows (those in the
 * window [row0, row0+nrows) of the plan, at rows[row − row0]) weighted by their routing weights,
 * plus the shared rows (plus y with accumulate), summed in fp32 in pair order: no atomics, the
 * same sum in every run. */
__global__ void combine_gather_kernel(const bf16 *rows, const int32_t *row_of_pair,
                                      const float *pair_w, long row0, long nrows, int K,
                                      const bf16 *shared, int nshared, long ntok, int H, bf16 *y,
                                      int accumulate)
{
    extern __shared__ int32_t pick[]; /* [K] row in the window or −1, then [K] weights */
    float *wk = (float *)(pick + K);
    long t = blockIdx.x;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        long i = t * K + k;
        pick[k] = mp_combine_pick(row_of_pair[i], row0, nrows);
        wk[k] = pair_w[i];
    }
    __syncthreads();
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        long e = t * H + h;
        float v = accumulate ? __bfloat162float(y[e]) : 0.0f;
        for (int s = 0; s < nshared; s++)
            v += __bfloat162float(shared[s * ntok * H + e]);
        for (int k = 0; k < K; k++)
            if (pick[k] >= 0)
                v += wk[k] * __bfloat162float(rows[(long)pick[k] * H + h]);
        y[e] = __float2bfloat16(v);
    }
}

static int cuda_combine(struct mp_compute *c, const void *rows, const int32_t *tok, const float *w,
                        long row0, long nrows, const void *shared, int nshared, long ntok, int H,
                        void *y, int accumulate)
{
    size_t n = (size_t)ntok * H;
    if (n == 0)
        return MP_OK;
    if (!tok) { /* the device plan's rows: gathered per token */
        const struct device_plan *p = &c->plan;
        int K = p->s.K;
        if (ntok > p->s.ntok) {
            mp_error("combine: %ld tokens, the dispatch plan was built for %ld", ntok, p->s.ntok);
            return MP_ERR_RUNTIME;
        }
        combine_gather_kernel<<<(unsigned)ntok, 128, (size_t)K * 2 * sizeof(int32_t), c->stream>>>(
            (const bf16 *)rows, p->d_row_of_pair, p->pair_w, row0, nrows, K,
            shared ? (const bf16 *)shared : NULL, shared ? nshared : 0, ntok, H, (bf16 *)y,
            accumulate);
        CUDACHECK(cudaGetLastError());
        return MP_OK;
    }
    if (grow((void **)&c->d_acc, &c->acc_cap, n * sizeof(float)) != MP_OK ||
        grow((void **)&c->d_idx, &c->idx_cap, (size_t)(nrows > 0 ? nrows : 1) * sizeof(int32_t)) != MP_OK ||
        grow((void **)&c->d_f, &c->f_cap, (size_t)(nrows > 0 ? nrows : 1) * sizeof(float)) != MP_OK)
        return MP_ERR_RUNTIME;
    CUDACHECK(cudaMemsetAsync(c->d_acc, 0, n * sizeof(float), c->stream));
    if (nrows > 0) { /* host index arrays: scattered with atomics */
        CUDACHECK(cudaMemcpyAsync(c->d_idx, tok + row0, (size_t)nrows * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, c->stream));
        CUDACHECK(cudaMemcpyAsync(c->d_f, w + row0, (size_t)nrows * sizeof(float),
                                  cudaMemcpyHostToDevice, c->stream));
        combine_scatter_kernel<<<(unsigned)nrows, 256, 0, c->stream>>>(
            (const bf16 *)rows, c->d_idx, c->d_f, nrows, H, c->d_acc);
        CUDACHECK(cudaGetLastError());
    }
    combine_finish_kernel<<<(unsigned)((n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535), 256, 0,
                            c->stream>>>(c->d_acc, shared ? (const bf16 *)shared : NULL,
                                         shared ? nshared : 0, (long)n, (bf16 *)y, accumulate);
    CUDACHECK(cudaGetLastError());
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

static int cuda_plan_setup(struct mp_compute *c, const struct mp_dplan_shape *s,
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
static int cuda_plan_build(struct mp_compute *c, const int32_t *ids, const float *w, int wait)
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

static int cuda_mark(struct mp_compute *c, int slot)
{
    /* external: inside a graph capture the record becomes a node, so replays keep the timers.
     * CUDA accepts the flag only while the stream is capturing (cudaErrorIllegalState outside). */
    if (c->capturing)
        CUDACHECK(cudaEventRecordWithFlags(c->ev[slot], c->stream, cudaEventRecordExternal));
    else
        CUDACHECK(cudaEventRecord(c->ev[slot], c->stream));
    return MP_OK;
}

static double cuda_elapsed_us(struct mp_compute *c, int a, int b)
{
    float ms = 0;
    if (cudaEventElapsedTime(&ms, c->ev[a], c->ev[b]) != cudaSuccess) {
        (void)cudaGetLastError(); /* an unrecorded or unfinished mark: no error for the next launch */
        return -1;
    }
    return ms * 1e3;
}

static int cuda_sync(struct mp_compute *c)
{
    CUDACHECK(cudaStreamSynchronize(c->stream));
    return MP_OK;
}

/* Evict L2: a memset of 2 × cudaDevAttrL2CacheSize bytes queued on the stream, whose every line
 * passes through L2 and displaces what it held (nvbench flushes L2 between measurements the same
 * way). Never inside a capture: a replay would run it between the marks. */
static int cuda_flush_cache(struct mp_compute *c)
{
    if (c->capturing) {
        mp_error("--flush-cache: a flush inside a graph capture would be replayed as timed work");
        return MP_ERR_RUNTIME;
    }
    CUDACHECK(cudaMemsetAsync(c->flush_buf, (int)(++c->flushes & 0xff), c->flush_bytes, c->stream));
    return MP_OK;
}

/* x[i] = a uniform value in [−1, 1) from a hash of (i, seed): tensor cores switch fewer bits on
 * zeros, so a rate measured on zeros would overstate what real operands reach. */
__global__ void fill_random_kernel(bf16 *x, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16;
        h *= 0x7feb352du;
        h ^= h >> 15;
        x[i] = __float2bfloat16((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

/* Best of 5: an 8192³ bf16 GEMM on random operands (2·8192³ FLOPs) and a 1 GiB device copy (read + written). */
/* The FP8 GEMM rate: the best of a few cuBLASLt block-scaled FP8 GEMMs of n×n×n (as --gemm loop
 * runs fp8 weights: the image's BLK128x128 scales, the rows' VEC128 ones), on random codes of
 * magnitude up to 2 (no NaN) with unit scales. */
__global__ void fill_codes_kernel(unsigned char *q, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        q[i] = (unsigned char)((h & 0x80u) | (h % 0x40u)); /* exponent field below 8: |v| < 2 */
    }
}
__global__ void fill_ones_kernel(float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = 1.0f;
}

static int measure_fp8_gemm(struct mp_compute *c, int n, double *flops_per_s)
{
    const size_t img = mp_fp8_image_bytes(n, n, 1), q = (size_t)n * mp_fp8_image_ld(n);
    const size_t qs = (size_t)n * mp_fp8_blocks(n);
    unsigned char *a = NULL, *b = NULL;
    float *bs = NULL;
    bf16 *d = NULL;
    int rc = MP_ERR_RUNTIME;
    *flops_per_s = 0;
    if (cudaMalloc((void **)&a, img) != cudaSuccess || cudaMalloc((void **)&b, q) != cudaSuccess ||
        cudaMalloc((void **)&bs, qs * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&d, (size_t)n * n * sizeof(bf16)) != cudaSuccess) {
        mp_error("cannot allocate the FP8 roofline GEMM buffers");
        goto out;
    }
    fill_codes_kernel<<<1024, 256, 0, c->stream>>>(a, mp_fp8_image_scales_at(n, n, 1), 3u);
    fill_ones_kernel<<<64, 256, 0, c->stream>>>((float *)(void *)(a + mp_fp8_image_scales_at(n, n, 1)),
                                               (img - mp_fp8_image_scales_at(n, n, 1)) / sizeof(float));
    fill_codes_kernel<<<1024, 256, 0, c->stream>>>(b, q, 4u);
    fill_ones_kernel<<<64, 256, 0, c->stream>>>(bs, qs);
    for (int i = 0; i < 6; i++) {
        cudaEventRecord(c->ev[0], c->stream);
        if (lt_matmul(c, a, n, n, 1, b, bs, n, d) != MP_OK)
            goto out;
        cudaEventRecord(c->ev[1], c->stream);
        cudaEventSynchronize(c->ev[1]);
        double us = cuda_elapsed_us(c, 0, 1);
        if (i > 0 && us > 0 && 2.0 * n * n * n / (us * 1e-6) > *flops_per_s)
            *flops_per_s = 2.0 * n * n * n / (us * 1e-6);
    }
    rc = MP_OK;
out:
    cudaFree(a);
    cudaFree(b);
    cudaFree(bs);
    cudaFree(d);
    return rc;
}

static int cuda_measure_peak(struct mp_compute *c, double *flops_per_s, double *fp8_flops_per_s,
                             double *bytes_per_s)
{
    const int n = 8192;
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL, *d = NULL;
    int rc = MP_ERR_RUNTIME;
    double best_f = 0, best_b = 0;
    if (measure_fp8_gemm(c, n, fp8_flops_per_s) != MP_OK)
        return MP_ERR_RUNTIME;
    if (cudaMalloc(&a, (size_t)n * n * sizeof(bf16)) != cudaSuccess ||
        cudaMalloc(&b, (size_t)n * n * sizeof(bf16)) != cudaSuccess ||
        cudaMalloc(&d, (size_t)n * n * sizeof(bf16)) != cudaSuccess) {
        mp_error("cannot allocate the roofline GEMM buffers");
        goto out;
    }
    fill_random_kernel<<<1024, 256, 0, c->stream>>>((bf16 *)a, (size_t)n * n, 1u);
    fill_random_kernel<<<1024, 256, 0, c->stream>>>((bf16 *)b, (size_t)n * n, 2u);
    for (int i = 0; i < 6; i++) {
        cudaEventRecord(c->ev[0], c->stream);
        if (gemm_rm(c->blas, n, n, n, a, n, b, n, d, CUDA_R_16BF, n) != CUBLAS_STATUS_SUCCESS)
            goto out;
        cudaEventRecord(c->ev[1], c->stream);
        cudaEventSynchronize(c->ev[1]);
        double us = cuda_elapsed_us(c, 0, 1);
        if (i > 0 && us > 0 && 2.0 * n * n * n / (us * 1e-6) > best_f)
            best_f = 2.0 * n * n * n / (us * 1e-6);
    }
    cudaFree(a);
    cudaFree(b);
    a = b = NULL;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
        mp_error("cannot allocate the roofline copy buffers");
        goto out;
    }
    cudaMemsetAsync(a, 1, bytes, c->stream);
    for (int i = 0; i < 6; i++) {
        cudaEventRecord(c->ev[0], c->stream);
        cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, c->stream);
        cudaEventRecord(c->ev[1], c->stream);
        cudaEventSynchronize(c->ev[1]);
        double us = cuda_elapsed_us(c, 0, 1);
        if (i > 0 && us > 0 && 2.0 * bytes / (us * 1e-6) > best_b)
            best_b = 2.0 * bytes / (us * 1e-6);
    }
    *flops_per_s = best_f;
    *bytes_per_s = best_b;
    rc = MP_OK;
out:
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    return rc;
}

static void *cuda_native_stream(struct mp_compute *c) { return (void *)c->stream; }

static void cuda_graph_reset(struct mp_compute *c)
{
    if (c->exec)
        cudaGraphExecDestroy(c->exec);
    if (c->graph)
        cudaGraphDestroy(c->graph);
    c->exec = NULL;
    c->graph = NULL;
}

static int cuda_capture_begin(struct mp_compute *c)
{
    cuda_graph_reset(c);
    CUDACHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = 1;
    return MP_OK;
}

static int cuda_capture_end(struct mp_compute *c)
{
    c->capturing = 0;
    cudaError_t e = cudaStreamEndCapture(c->stream, &c->graph);
    if (e != cudaSuccess) {
        mp_error("--graph: capturing the layer failed: %s (an operation in it cannot be captured)",
                 cudaGetErrorString(e));
        c->graph = NULL;
        return MP_ERR_RUNTIME;
    }
    CUDACHECK(cudaGraphInstantiate(&c->exec, c->graph, 0));
    return MP_OK;
}

static int cuda_replay(struct mp_compute *c)
{
    if (!c->exec) {
        mp_error("--graph: no captured layer to replay");
        return MP_ERR_RUNTIME;
    }
    CUDACHECK(cudaGraphLaunch(c->exec, c->stream));
    return MP_OK;
}

static void *cuda_host_alloc(struct mp_compute *c, size_t bytes)
{
    void *p = NULL;
    return cudaMallocHost(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

static void cuda_host_free(struct mp_compute *c, void *p)
{
    if (p)
        cudaFreeHost(p);
}

/* The expert cache (compute.h): fetches on a copy stream of their own, so a miss's copy overlaps
 * the FFNs queued before it; each waits for its slot's last reader, and the compute stream waits
 * for each. Outside timed iterations (a point's start). */
static int cuda_cache_setup(struct mp_compute *c, int nslots, int fetches)
{
    CUDACHECK(cudaStreamSynchronize(c->stream));
    cache_free(c);
    if (!c->copy_stream)
        CUDACHECK(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
    c->slot_free = (cudaEvent_t *)calloc((size_t)(nslots > 0 ? nslots : 1), sizeof(cudaEvent_t));
    c->slot_used = (unsigned char *)calloc((size_t)(nslots > 0 ? nslots : 1), 1);
    c->fetch_ready = (cudaEvent_t *)calloc((size_t)(fetches > 0 ? fetches : 1), sizeof(cudaEvent_t));
    c->fetch_done = (cudaEvent_t *)calloc((size_t)(fetches > 0 ? fetches : 1), sizeof(cudaEvent_t));
    if (!c->slot_free || !c->slot_used || !c->fetch_ready || !c->fetch_done) {
        mp_error("out of memory for the expert cache's events");
        return MP_ERR_RUNTIME;
    }
    for (; c->cache_slots < nslots; c->cache_slots++)
        CUDACHECK(cudaEventCreateWithFlags(&c->slot_free[c->cache_slots], cudaEventDisableTiming));
    for (; c->fetch_cap < fetches; c->fetch_cap++) {
        CUDACHECK(cudaEventCreate(&c->fetch_ready[c->fetch_cap]));
        CUDACHECK(cudaEventCreate(&c->fetch_done[c->fetch_cap]));
    }
    return MP_OK;
}

static int cuda_cache_fetch(struct mp_compute *c, int slot, void *const *dst, const void *const *src,
                            const size_t *bytes, int n)
{
    if (slot < 0 || slot >= c->cache_slots || c->nfetch >= c->fetch_cap) {
        mp_error("internal error: an expert-cache fetch into slot %d of %d, fetch %d of %d",
                 slot, c->cache_slots, c->nfetch + 1, c->fetch_cap);
        return MP_ERR_RUNTIME;
    }
    if (c->slot_used[slot])
        CUDACHECK(cudaStreamWaitEvent(c->copy_stream, c->slot_free[slot], 0));
    for (int i = 0; i < n; i++)
        CUDACHECK(cudaMemcpyAsync(dst[i], src[i], bytes[i], cudaMemcpyHostToDevice,
                                  c->copy_stream));
    int k = c->nfetch++;
    CUDACHECK(cudaEventRecord(c->fetch_done[k], c->copy_stream));
    CUDACHECK(cudaEventRecord(c->fetch_ready[k], c->stream));
    CUDACHECK(cudaStreamWaitEvent(c->stream, c->fetch_done[k], 0));
    return MP_OK;
}

static int cuda_cache_release(struct mp_compute *c, int slot)
{
    if (slot < 0 || slot >= c->cache_slots) {
        mp_error("internal error: an expert-cache release of slot %d of %d", slot, c->cache_slots);
        return MP_ERR_RUNTIME;
    }
    CUDACHECK(cudaEventRecord(c->slot_free[slot], c->stream));
    c->slot_used[slot] = 1;
    return MP_OK;
}

/* Each fetch's exposed part: from the compute stream's arrival at its wait to the copy's end, 0
 * when the copy was done first (the events are on two streams of one device). */
static int cuda_cache_exposed_us(struct mp_compute *c, double *us)
{
    *us = 0;
    for (int k = 0; k < c->nfetch; k++) {
        float ms = 0;
        CUDACHECK(cudaEventElapsedTime(&ms, c->fetch_ready[k], c->fetch_done[k]));
        if (ms > 0)
            *us += 1e3 * (double)ms;
    }
    c->nfetch = 0;
    return MP_OK;
}

static const char *cuda_pci_bus_id(struct mp_compute *c) { return c->bus[0] ? c->bus : NULL; }

static int cuda_mem_info(struct mp_compute *c, size_t *free_bytes, size_t *total_bytes)
{
    CUDACHECK(cudaSetDevice(c->device));
    CUDACHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return MP_OK;
}

extern "C" const struct mp_compute_ops mp_compute_cuda = {
    .name = "cuda",
    .memory = MP_MEMORY_DEVICE,
    .dispatch_modes = MP_DISPATCH_ALL,
    .dispatch_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16) | MP_DTYPE_BIT(MP_DTYPE_FP8),
    .weight_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16) | MP_DTYPE_BIT(MP_DTYPE_FP8),
    .graph = 1,
    .elem_size = sizeof(bf16),
    .check_tolerance = 2e-2,
    .gemm_modes = 1u << MP_GEMM_GROUPED | 1u << MP_GEMM_SKINNY | 1u << MP_GEMM_FUSED,
    .fp8_gemm_modes = 1u << MP_GEMM_LOOP | 1u << MP_GEMM_GROUPED | 1u << MP_GEMM_SKINNY |
                      1u << MP_GEMM_FUSED,
    .shared_gemm_modes = 1u << MP_GEMM_FUSED,
    .preselect = cuda_preselect,
    .init = cuda_init,
    .fini = cuda_fini,
    .device_name = cuda_device_name,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .upload_bytes = cuda_upload_bytes,
    .download_bytes = cuda_download_bytes,
    .gate = cuda_gate,
    .permute = cuda_permute,
    .copy_rows = cuda_copy_rows,
    .fp8_pack = cuda_fp8_pack,
    .fp8_unpack = cuda_fp8_unpack,
    .expert_ffn = cuda_expert_ffn,
    .combine = cuda_combine,
    .plan_setup = cuda_plan_setup,
    .plan_build = cuda_plan_build,
    .mark = cuda_mark,
    .elapsed_us = cuda_elapsed_us,
    .sync = cuda_sync,
    .measure_peak = cuda_measure_peak,
    .flush_cache = cuda_flush_cache,
    .native_stream = cuda_native_stream,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .replay = cuda_replay,
    .graph_reset = cuda_graph_reset,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .pci_bus_id = cuda_pci_bus_id,
    .mem_info = cuda_mem_info,
    .cache_setup = cuda_cache_setup,
    .cache_fetch = cuda_cache_fetch,
    .cache_release = cuda_cache_release,
    .cache_exposed_us = cuda_cache_exposed_us,
};
