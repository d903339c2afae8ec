/* cuda_internal.h - what the files of the cuda compute backend share: its state (struct
 * mp_compute), the tables its kernels take by value, the error checks, and the functions one file
 * defines for another; included only by the files of kernels/cuda. */
#ifndef MP_CUDA_INTERNAL_H
#define MP_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <initializer_list>
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

/* cudaFree each device pointer of the list (NULL ones too, as cudaFree allows): a struct's device
 * arrays in its free function. */
static inline void cuda_free_all(std::initializer_list<void *> ptrs)
{
    for (void *p : ptrs)
        cudaFree(p);
}

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

/* cuBLAS and cuBLASLt, resolved when the first backend starts (cublas_entry.h; defined in
 * cuda_compute.cu) */
extern struct mp_cublas_entry cublas;
extern struct mp_cublaslt_entry cublaslt;

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

/* ---- functions one file of the backend defines for others, by file ---- */

/* cuda_compute.cu: the device buffers' growth */
int grow(void **p, size_t *cap, size_t need);

/* cuda_route.cu: the gate with its top-k, and the dispatch plan on the device */
int cuda_gate(struct mp_compute *c, const void *x, const void *wg, const float *noise, long ntok,
              int H, int E, int K, int G, int M, int32_t *ids, float *w);
void plan_free(struct device_plan *p);
int cuda_plan_setup(struct mp_compute *c, const struct mp_dplan_shape *s, const int32_t **totals);
int cuda_plan_build(struct mp_compute *c, const int32_t *ids, const float *w, int wait);

/* cuda_permute.cu: the dispatch's row moves and the fp8 dispatch's packing */
int cuda_permute(struct mp_compute *c, const void *x, const int32_t *src_row, long row0, long nrows,
                 int H, void *out);
int cuda_copy_rows(struct mp_compute *c, const void *src, void *dst, const struct mp_chunk *ch,
                   int nch, int H);
int cuda_fp8_pack(struct mp_compute *c, void *buf, long n, int H);
int cuda_fp8_unpack(struct mp_compute *c, void *buf, long n, int H);

/* cuda_ffn_gemm.cu: cuBLAS's and cuBLASLt's GEMMs, and the expert FFN's entry */
cublasStatus_t gemm_rm(cublasHandle_t h, int m, int n, int k, const void *A, int lda, const void *B,
                       int ldb, void *C, cudaDataType ctype, int ldc);
int lt_matmul(struct mp_compute *c, const void *img, int K, int N, int parts,
              const unsigned char *q, const float *qs, long mpad, bf16 *D);
int cuda_expert_ffn(struct mp_compute *c, const struct mp_ffn_args *a);

/* cuda_combine.cu: the weighted combine */
int cuda_combine(struct mp_compute *c, const void *rows, const int32_t *tok, const float *w,
                 long row0, long nrows, const void *shared, int nshared, long ntok, int H, void *y,
                 int accumulate);

/* cuda_timing.cu: timers, the roofline's peaks, graphs and the expert cache */
int cuda_mark(struct mp_compute *c, int slot);
double cuda_elapsed_us(struct mp_compute *c, int a, int b);
int cuda_sync(struct mp_compute *c);
int cuda_flush_cache(struct mp_compute *c);
int cuda_measure_peak(struct mp_compute *c, double *flops_per_s, double *fp8_flops_per_s,
                      double *bytes_per_s);
void *cuda_native_stream(struct mp_compute *c);
void cuda_graph_reset(struct mp_compute *c);
int cuda_capture_begin(struct mp_compute *c);
int cuda_capture_end(struct mp_compute *c);
int cuda_replay(struct mp_compute *c);
void cache_free(struct mp_compute *c);
int cuda_cache_setup(struct mp_compute *c, int nslots, int fetches);
int cuda_cache_fetch(struct mp_compute *c, int slot, void *const *dst, const void *const *src,
                     const size_t *bytes, int n);
int cuda_cache_release(struct mp_compute *c, int slot);
int cuda_cache_exposed_us(struct mp_compute *c, double *us);

#endif
