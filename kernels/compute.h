/* compute.h - the compute backend ops table: every kernel the layer pipeline runs, behind one small
 * static table per backend (cpu, cuda, model), with the capability data the rest of the suite
 * reads instead of a backend's name. */
#ifndef MP_COMPUTE_H
#define MP_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "registry.h"

/* A block of whole rows moved by copy_rows: rows [src, src+n) → [dst, dst+n). */
struct mp_chunk {
    long src, dst, n;
};

/* The expert FFN's GEMMs (--gemm): one cuBLAS-style GEMM pair per expert (loop), one grouped GEMM
 * per stage for all experts (grouped), skinny: every expert of at most MP_SKINNY_ROWS rows in
 * one kernel launch per stage that streams each weight once for all its rows (the decode case),
 * the larger experts as in the loop, or fused: one kernel launch per stage for every expert, the
 * shared ones included, whatever their rows (the kernel picks a tile per expert by its rows). */
enum mp_gemm { MP_GEMM_LOOP, MP_GEMM_GROUPED, MP_GEMM_SKINNY, MP_GEMM_FUSED, MP_GEMM_COUNT };
#define MP_SKINNY_ROWS 8

/* The GPU a local rank takes among `ndevices` visible ones: local_rank mod ndevices (ranks of a
 * host take the GPUs in order); -1 when ndevices < 1 or local_rank < 0. The local rank is the one
 * core/run/rankmap.h settles and hands to a backend's init. */
static inline int mp_gpu_index(int local_rank, int ndevices)
{
    if (ndevices < 1 || local_rank < 0)
        return -1;
    return local_rank % ndevices;
}

/* Per-call shapes of the expert FFN: `nexp` experts, expert i owns rows [row_off[i], row_off[i+1])
 * of `in`/`out`, with weights wgu[i] (H × 2·Dl: gate | up) and wd[i] (Dl × H). */
struct mp_ffn_args {
    const void *in;
    void *out;
    const long *row_off;
    int nexp;
    void *const *wgu;
    void *const *wd;
    int H, Dl;
    void *work; /* at least (row_off[nexp] − row_off[0]) · 2·Dl elements */
    /* enum mp_gemm; other than MP_GEMM_LOOP only on backends whose gemm_modes has it */
    int gemm;
    /* enum mp_dtype of the weights (--weight-dtype; fp8 only on backends whose weight_dtypes has
     * it). bf16: wgu[e] (H×2Dl, [Wg | Wu]) and wd[e] (Dl×H) hold elements; fp8: each holds the
     * image of base/fp8.h (mp_fp8_image_store): wgu[e] of its two H×Dl parts, wd[e] of its one
     * Dl×H part, codes with one fp32 scale per 128×128 block of each part */
    int weight_dtype;
    /* optional: called between experts, so a pipelined layer's pending exchanges make progress
     * while this FFN computes (host backends; NULL otherwise) */
    void (*progress)(void *arg);
    void *progress_arg;
    /* optional: `nshared` shared experts, shared expert s with weights wgu[nexp + s] and
     * wd[nexp + s] over the `shared_rows` rows of shared_in, into rows [s·shared_rows,
     * (s+1)·shared_rows) of shared_out. mp_compute_expert_ffn hands them to expert_ffn in the
     * same call only where the backend's shared_gemm_modes has the call's gemm mode. */
    int nshared;
    long shared_rows;
    const void *shared_in;
    void *shared_out;
};

/* The dispatch plan a backend builds itself (plan_setup/plan_build, kernels/dplan.h): this rank's
 * `ntok` tokens from global index `tok0`, top-`K` over `experts`, `ncells` = groups·ep·max_local
 * cells (chunk of a pipelined layer, destination rank, local expert there; one group unpipelined),
 * the route table of mp_route_table (host arrays), and `cap` > 0 for the padded dispatch's slots
 * of cap rows (one group only), ≤ 0 for the dynamic one. */
struct mp_dplan_shape {
    int experts, K, max_local, ncells;
    long ntok, tok0, cap;
    const int32_t *route_off, *route_cell;
};

struct mp_compute; /* a backend instance */

/* The dispatch modes of a layer (--dispatch, and a pipelined layer's chunks), as bits of
 * dispatch_modes: the ones a backend's kernels (or its model) carry out. */
#define MP_DISPATCH_DYNAMIC (1u << 0)
#define MP_DISPATCH_PADDED (1u << 1)
#define MP_DISPATCH_PIPELINED (1u << 2)
#define MP_DISPATCH_DEDUP (1u << 3) /* --dedup rank|node: host-built plan and metadata */
#define MP_DISPATCH_DEDUP_PADDED (1u << 4) /* --dispatch padded --dedup rank: the same, in slots */
#define MP_DISPATCH_DEDUP_PIPELINED (1u << 5) /* --dedup rank|node --overlap N: the same, chunked */
#define MP_DISPATCH_ALL                                                                            \
    (MP_DISPATCH_DYNAMIC | MP_DISPATCH_PADDED | MP_DISPATCH_PIPELINED | MP_DISPATCH_DEDUP |        \
     MP_DISPATCH_DEDUP_PADDED | MP_DISPATCH_DEDUP_PIPELINED)

/* The element types a dispatched row may travel in (--dispatch-dtype; core/workload/dtype.c has the words),
 * as bits 1 << d of dispatch_dtypes. bf16: the backend's activation type as it is (bf16 on GPUs,
 * fp32 rows on the cpu backend); fp8: OCP e4m3 codes with one fp32 scale per 128 values
 * (base/fp8.h), packed after the gate and unpacked at the expert. */
enum mp_dtype { MP_DTYPE_BF16, MP_DTYPE_FP8, MP_DTYPE_COUNT };
#define MP_DTYPE_BIT(d) (1u << (d))

/* The ops table of a compute backend. Its capability data come first and must agree with the
 * hooks it fills (mp_compute_check, run on every lookup): every backend fills every kernel hook
 * (a virtual one's hold and move no data); graph iff the capture hooks; device memory iff
 * native_stream. The fields are in declaration order because the CUDA backend (C++) initialises
 * them by designator, which C++ requires in that order. */
struct mp_compute_ops {
    const char *name;
    enum mp_memory_kind memory; /* where its buffers live (registry.h) */
    unsigned dispatch_modes; /* MP_DISPATCH_* bits this backend carries out */
    /* MP_DTYPE_BIT(d) for each enum mp_dtype its dispatch rows may travel in (bf16 always; fp8
     * on a data backend exactly when it fills fp8_pack and fp8_unpack) */
    unsigned dispatch_dtypes;
    /* MP_DTYPE_BIT(d) for each enum mp_dtype its expert weights may be stored in (--weight-dtype:
     * bf16 always; fp8: expert_ffn reads mp_ffn_args' fp8 images) */
    unsigned weight_dtypes;
    int graph;               /* graph capture and replay: capture_begin ... host_free filled */
    size_t elem_size; /* bytes per activation/weight element in buffers (4 cpu, 2 cuda) */
    /* --check's bound on ‖out − ref‖/‖ref‖ against the double-precision reference: fp32 buffers
     * 1e-5; bf16 storage rounds weights, activations and intermediates to 8 bits of mantissa */
    double check_tolerance;
    /* bit 1 << g for each enum mp_gemm g besides MP_GEMM_LOOP that expert_ffn honours */
    unsigned gemm_modes;
    /* bit 1 << g for each enum mp_gemm g (MP_GEMM_LOOP included) that expert_ffn runs with fp8
     * weights: none exactly when weight_dtypes lacks fp8, and only modes it honours */
    unsigned fp8_gemm_modes;
    /* bit 1 << g for each enum mp_gemm g whose expert_ffn also runs mp_ffn_args' shared experts
     * (nshared) in the same call; in the others it is handed none (mp_compute_expert_ffn) */
    unsigned shared_gemm_modes;

    /* lifecycle: `local_rank` picks the device where there are several */
    /* optional (device backends): make the device of launcher local rank `local_rank` current
     * before the comm backend starts MPI (an MPI built with GPU support creates a context on the
     * current device in MPI_Init, device 0 unless one was chosen). init later takes the local rank
     * settled with MPI and warns when it picks another device. */
    int (*preselect)(int local_rank);
    int (*init)(struct mp_compute **out, int local_rank);
    void (*fini)(struct mp_compute *c);
    /* one-line description of the device ("cpu: 1 BLAS thread", "NVIDIA H100 80GB HBM3 ...") */
    const char *(*device_name)(struct mp_compute *c);

    /* buffers: backend memory of `n` elements; upload/download convert from/to host fp32 */
    void *(*alloc)(struct mp_compute *c, size_t n);
    void (*free)(struct mp_compute *c, void *p);
    int (*upload)(struct mp_compute *c, void *dst, const float *src, size_t n);
    int (*download)(struct mp_compute *c, float *dst, const void *src, size_t n);
    /* upload_bytes/download_bytes: `bytes` bytes as they are, no conversion (index and metadata
     * arrays a collective moves), from host memory into backend memory `dst` or from backend
     * memory `src` to host memory. Both are ordered on the backend's stream with the work queued
     * before them. upload_bytes returns once `src` may be reused (it takes pageable host memory,
     * as malloc gives; not inside a graph capture); download_bytes returns once `dst` holds the
     * bytes (a host sync). 0 bytes: nothing. */
    int (*upload_bytes)(struct mp_compute *c, void *dst, const void *src, size_t bytes);
    int (*download_bytes)(struct mp_compute *c, void *dst, const void *src, size_t bytes);

    /* gate: logits = x·wg (+ noise) over E experts, softmax, top-k, weights renormalised over the
     * chosen k. With G > 0 (--group-limit G:M) the top-k is taken among the experts of the M best
     * of G groups of consecutive experts only (mp_topk_select_grouped, kernels/topk.h); G = 0:
     * off. ids/w are host arrays [ntok·K]; noise is host [ntok·E] or NULL. With ids == NULL the
     * result stays in the backend for the next plan_build. */
    int (*gate)(struct mp_compute *c, const void *x, const void *wg, const float *noise, long ntok,
                int H, int E, int K, int G, int M, int32_t *ids, float *w);
    /* permute: out[i] = x[src_row[row0 + i]] for i < nrows (src_row: host array; NULL: the rows
     * of the backend's last plan_build, so a pipelined layer permutes its chunks' windows) */
    int (*permute)(struct mp_compute *c, const void *x, const int32_t *src_row, long row0,
                   long nrows, int H, void *out);
    /* copy_rows: move blocks of rows between two buffers of row width H */
    int (*copy_rows)(struct mp_compute *c, const void *src, void *dst, const struct mp_chunk *ch,
                     int nch, int H);
    /* optional (fp8 in dispatch_dtypes): fp8_pack rewrites the `n` rows of H activations at the
     * start of `buf` (row i at byte i·H·elem_size) in place as `n` packed wire rows of
     * mp_fp8_row_bytes(H) bytes (base/fp8.h: H e4m3 codes, then one fp32 scale per 128 values;
     * row i at byte i·mp_fp8_row_bytes(H)); fp8_unpack turns such packed rows back into
     * activations (decode · scale) in place. Both need mp_fp8_row_bytes(H) ≤ H·elem_size. */
    int (*fp8_pack)(struct mp_compute *c, void *buf, long n, int H);
    int (*fp8_unpack)(struct mp_compute *c, void *buf, long n, int H);
    /* expert FFN, SwiGLU: out = (silu(in·Wg) ⊙ (in·Wu))·Wd for every expert's rows */
    int (*expert_ffn)(struct mp_compute *c, const struct mp_ffn_args *a);
    /* combine: y[t] = Σ_s shared[s·ntok + t] + Σ_{i < nrows: tok[row0+i]=t} w[row0+i]·rows[i]
     * (shared may be NULL, nshared blocks of ntok rows); tok/w are host arrays (both NULL: the
     * rows of the backend's last plan_build). With `accumulate`, y keeps what it holds and the
     * sums are added to it (a pipelined layer combines in parts). */
    int (*combine)(struct mp_compute *c, const void *rows, const int32_t *tok, const float *w,
                   long row0, long nrows, const void *shared, int nshared, long ntok, int H,
                   void *y, int accumulate);

    /* the dispatch plan built by the backend where the routing is, so neither the routing nor the
     * send order crosses to the host (required of a backend the layer runs on). plan_setup (per point, untimed) sizes it for `s`
     * and returns in *totals a host array of s->ncells that plan_build fills with the pairs of
     * each cell. plan_build sorts this iteration's pairs stably by cell: the routing comes from
     * host arrays ids/w [ntok·K] (page-locked under a graph capture; where w starts right after
     * ids' ntok·K entries a backend may copy both at once), or with ids == NULL from the
     * last gate(). With `wait` it returns once totals hold the counts (the dynamic dispatcher's one
     * host sync); without, they are valid after the next sync. */
    int (*plan_setup)(struct mp_compute *c, const struct mp_dplan_shape *s, const int32_t **totals);
    int (*plan_build)(struct mp_compute *c, const int32_t *ids, const float *w, int wait);

    /* timing: mark(slot) records a point in the backend's stream; after sync, elapsed_us(a, b) is
     * the time from mark a to mark b. Slots 0..MP_TIMER_SLOTS-1. */
    int (*mark)(struct mp_compute *c, int slot);
    double (*elapsed_us)(struct mp_compute *c, int a, int b);
    /* sync: wait until all queued work is done */
    int (*sync)(struct mp_compute *c);

    /* roofline of this device, measured now: the best of a few runs of a large GEMM in the
     * backend's arithmetic (FLOP/s), of the GEMM fp8 weights run on (fp8_flops_per_s: an FP8 GEMM
     * where the backend has one, else the same GEMM as flops_per_s) and of a large device-memory
     * copy (bytes/s, read + written) */
    int (*measure_peak)(struct mp_compute *c, double *flops_per_s, double *fp8_flops_per_s,
                        double *bytes_per_s);
    /* (a backend's measure_peak sizes its runs by mp_compute_quick) */

    /* optional: evict this device's last-level cache (the CPU's LLC, a GPU's L2) so the next
     * timed iteration reads its weights from memory, as a layer does whose weights exceed the
     * cache (--flush-cache). Queued on the backend's stream and called only outside timed regions
     * and graph captures; the buffer it sweeps is allocated on the first call and kept. NULL where
     * there is no cache to evict (model). */
    int (*flush_cache)(struct mp_compute *c);

    /* the device stream the kernels run on (cudaStream_t), for a comm backend that must order its
     * collectives with them; NULL for host backends */
    void *(*native_stream)(struct mp_compute *c);

    /* optional (device backends): graph replay. Work queued on the stream between capture_begin
     * and capture_end (kernels, copies, collectives of a comm backend on the same stream, marks)
     * is captured, not run; replay queues the captured work again; graph_reset frees it. Inside a
     * capture nothing may allocate or synchronise, and host arrays handed to the kernels must come
     * from host_alloc (page-locked) and stay where they are: a replay reads what they hold then. */
    int (*capture_begin)(struct mp_compute *c);
    int (*capture_end)(struct mp_compute *c);
    int (*replay)(struct mp_compute *c);
    void (*graph_reset)(struct mp_compute *c);
    void *(*host_alloc)(struct mp_compute *c, size_t bytes);
    void (*host_free)(struct mp_compute *c, void *p);

    /* the PCI bus id of the device this rank drives ("0000:17:00.0"), for placement facts and
     * --cpu-bind; NULL (or an absent entry) for host backends */
    const char *(*pci_bus_id)(struct mp_compute *c);

    /* optional (device backends): this rank's device memory now, free and total bytes
     * (cudaMemGetInfo); absent for host backends, whose buffers live in the host memory its ranks
     * share (mp_mem_available) */
    int (*mem_info)(struct mp_compute *c, size_t *free_bytes, size_t *total_bytes);

    /* the expert cache's fetches (--expert-cache; docs/METRICS.md, "Expert cache"), on a data
     * backend. cache_setup readies `nslots` device slots and up to `fetches` fetches between two
     * calls of cache_exposed_us. cache_fetch copies the n host blocks src[i] (from host_alloc where
     * the backend has it: page-locked) to the device blocks dst[i], bytes[i] each, once the work
     * queued before the slot's last cache_release is done; everything queued on the backend's
     * stream after the call waits for the copy. A device backend copies on a stream of its own,
     * so a fetch overlaps the FFNs queued before it. cache_release(slot): the work queued so far
     * is the last to read the slot before its next fetch. cache_exposed_us, after sync: *us is
     * the time the stream waited for fetches since the last call (all of every copy on a host
     * backend, which copies at once), and the count starts again. */
    int (*cache_setup)(struct mp_compute *c, int nslots, int fetches);
    int (*cache_fetch)(struct mp_compute *c, int slot, void *const *dst, const void *const *src,
                       const size_t *bytes, int n);
    int (*cache_release)(struct mp_compute *c, int slot);
    int (*cache_exposed_us)(struct mp_compute *c, double *us);
    /* optional: hold this rank for us µs on the backend's own clock (virtual ones); absent, the
     * host spins (mp_compute_delay) */
    int (*delay)(struct mp_compute *c, double us);
    /* optional: n elements as alloc gives them, but reading zero until written, whose pages a
     * host backend leaves untouched until then (calloc); absent, mp_layer_alloc_zero allocates
     * and uploads zeros */
    void *(*alloc_zeroed)(struct mp_compute *c, size_t n);
};

/* The timer marks of one layer iteration: its six phase boundaries (start, route, dispatch, FFN,
 * TP reduce, combine), the rank's arrival at the start barrier, the end of the count exchange, and
 * the six bounds of --dedup node's hops (three in the dispatch, three in the combine). */
#define MP_PHASE_MARKS 14
/* A pipelined layer's marks per chunk: FFN start and end, TP reduce start and end. */
#define MP_CHUNK_MARKS 4
/* The most chunks a layer pipelines (--overlap's upper bound). */
#define MP_MAX_CHUNKS 32
/* Timer slots a backend keeps: a layer's phase marks, then every chunk's. */
#define MP_TIMER_SLOTS (MP_PHASE_MARKS + MP_CHUNK_MARKS * MP_MAX_CHUNKS)

/* The model compute of one traced virtual rank (kernels/model/model_rank.c; docs/ARCHITECTURE.md,
 * "The model"): a host table that builds the dispatch plan from the routing as a data backend does
 * and computes nothing else. What its expert FFNs ran since the last take, by the pipeline chunk
 * whose FFN the mark before them began (chunk 0 unpipelined): the experts with rows and the rows
 * of the chunks [0, chunks), and the different experts (by their weights) with rows in all of
 * them. mp_compute_model_rank_take hands it over and starts again. */
struct mp_vffn_seen {
    int chunks, distinct;
    int active[MP_MAX_CHUNKS];
    double rows[MP_MAX_CHUNKS];
};
extern const struct mp_compute_ops mp_compute_model_rank;
void mp_compute_model_rank_take(struct mp_compute *c, struct mp_vffn_seen *out);
/* Before the take: the different experts with rows since the last take, by their weights
 * (weights[i], its wgu of mp_ffn_args), and the rows each ran (rows[i]); their number. */
int mp_compute_model_rank_experts(struct mp_compute *c, const void *const **weights,
                                  const double **rows);

/* A traced rank's clock (mp_compute_model_rank_clock): the compute work its ops queued since the
 * last mark, which the mark prices and adds to the rank's virtual time. */
struct mp_vwork {
    int plan_builds; /* dispatch plans built (a routing kernel each) */
    long plan_tokens; /* the tokens they routed */
    int ffn_calls;   /* expert FFN calls, and the rows and experts with rows they ran */
    double ffn_rows, ffn_active;
    int ffn_H, ffn_Dl, ffn_weight_dtype, ffn_gemm; /* the last call's shape and kinds */
    double delay_us; /* host delays (mp_compute_delay: the debug straggler) */
};
struct mp_vwork_cost {
    void *arg;
    double (*work_us)(void *arg, const struct mp_vwork *w); /* the work's duration [µs] */
    /* an expert cache's timeline: one expert's FFN on `rows` at the shape `w` names (its ffn_H,
     * ffn_Dl, ffn_weight_dtype, ffn_gemm) [µs], one fetch of `bytes` bytes of weights as the
     * rank holds them [µs], and whether a copy engine runs fetches beside the FFNs (else each
     * fetch holds the FFNs for all of it) */
    double (*expert_us)(void *arg, const struct mp_vwork *w, double rows);
    double (*fetch_us)(void *arg, double bytes);
    int copy_engine;
};
/* Run rank c on the virtual time *t (base/vtime.h, shared with its comm rank, which moves it at
 * collectives): each mark adds the price of the work queued since the previous one to t->clock,
 * then records the time; elapsed_us is the time between two marks. Unbound (the default), marks
 * read 0. With an expert cache (cache_setup) it keeps the iteration's copy timeline from the FFN
 * phase's start (docs/METRICS.md, "Expert cache"): a fetch starts once the copy engine is free and
 * its slot's last FFN done (release), an expert's FFN once the one before it ended and its fetch
 * is done; what the fetches add to the FFN phase is queued as delay and is cache_exposed_us. */
struct mp_vtime;
void mp_compute_model_rank_clock(struct mp_compute *c, struct mp_vtime *t,
                                 const struct mp_vwork_cost *k);

/* Hold the host for `us` µs on the backend's clock (ops->delay where it has one, else a spin on
 * the host's clock): the debug straggler's and late start's delays. */
int mp_compute_delay(const struct mp_compute_ops *ops, struct mp_compute *dev, double us);

/* The backends built into this binary, NULL-terminated, in the order of meson.build's list
 * (config.h's MP_COMPUTE_BACKENDS, which declares each as mp_compute_NAME). */
extern const struct mp_compute_ops *const mp_compute_backends[];
#define MP_COMPUTE_DECLARE(n) extern const struct mp_compute_ops mp_compute_##n;
MP_COMPUTE_BACKENDS(MP_COMPUTE_DECLARE, MP_REGISTRY_SKIP_ABSENT)
#undef MP_COMPUTE_DECLARE
/* The names --backend accepts, NULL-terminated: every backend of the source tree, the ones this
 * binary was configured without included (looking one up says what builds it). */
extern const char *const mp_compute_choices[];

/* Find a backend by name and check its table (mp_compute_check). MP_OK with *out set;
 * MP_ERR_USAGE (a message naming --backend and the built ones, or what builds a known backend
 * left out of this build); MP_ERR_RUNTIME for a table that fails its check (an internal error). */
int mp_compute_find(const char *name, const struct mp_compute_ops **out);

/* Whether a table is complete and its capability data agree with its hooks: 1, or 0 with the first
 * fault described in why[len]. */
int mp_compute_check(const struct mp_compute_ops *ops, char *why, size_t len);

/* The expert FFN of `a`, its shared experts (a->nshared) included: one expert_ffn call where the
 * backend's shared_gemm_modes has a->gemm, else the routed experts (when a->nexp > 0), then each
 * shared expert, in calls of their own. Returns what expert_ffn returns. */
int mp_compute_expert_ffn(const struct mp_compute_ops *ops, struct mp_compute *dev,
                          const struct mp_ffn_args *a);

/* The names of the built backends that satisfy `has` ("cuda", "cpu|model"), or "none", for messages
 * that say which backend would accept a request. */
const char *mp_compute_names_where(int (*has)(const struct mp_compute_ops *ops), char *buf,
                                   size_t len);

/* 1 under MOEPERF_TEST_QUICK=1, a test hook for tests that check what a run writes and not its
 * figures: measure_peak then times one small GEMM (MP_QUICK_PEAK_GEMM_N³) and one small copy
 * (MP_QUICK_PEAK_COPY_BYTES), milliseconds instead of seconds per rank, and --flush-cache sweeps
 * MP_QUICK_FLUSH_BYTES instead of twice the last-level cache or L2 (a host that reports hundreds
 * of MiB of cache would sweep that much before every iteration of every rank); the roofline and
 * cold-cache figures are then not to be trusted. */
#define MP_QUICK_PEAK_GEMM_N 256
#define MP_QUICK_PEAK_COPY_BYTES ((size_t)8 << 20)
#define MP_QUICK_FLUSH_BYTES ((size_t)8 << 20)
int mp_compute_quick(void);

#endif
