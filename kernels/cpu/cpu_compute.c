/* cpu_compute.c - the cpu compute backend: fp32 buffers in host memory, OpenBLAS sgemm on one
 * thread per rank, plain loops for gate selection, permutation and combine. */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#if HAVE_HWLOC
#include <hwloc.h>
#endif

#include "clock.h"
#include "compute.h"
#include "chunks.h"
#include "dplan_host.h"
#include "error.h"
#include "fp8.h"
#include "topk.h"

struct mp_compute {
    double marks[MP_TIMER_SLOTS];
    float *logits; /* gate scratch, grown on the first call that needs more */
    size_t logits_cap;
    /* the backend-built dispatch plan, and the last gate's routing it reads (gate with ids NULL) */
    struct mp_dplan_host plan;
    int32_t *gate_ids;
    float *gate_w;
    size_t gate_cap;
    char name[64];
    /* --flush-cache: the buffer swept between timed iterations (2 × the LLC, first flush) */
    uint64_t *flush_buf;
    size_t flush_bytes;
    uint64_t flushes, flush_sink;
    double fetch_us; /* --expert-cache: the copies since the last cache_exposed_us, all waited */
    /* --dispatch-dtype fp8: one wire row, where fp8_pack and fp8_unpack stage a row moved in
     * place (grown on the first call that needs more) */
    unsigned char *wire_row;
    size_t wire_cap;
    /* --weight-dtype fp8: one block row of a weight matrix dequantized into fp32 (128 rows of the
     * widest matrix), grown on the first call that needs more */
    float *panel;
    size_t panel_cap;
    /* and the GEMM's input rows through their fp8 round trip, then one packed row's scratch */
    float *aq;
    size_t aq_cap;
};

/* OpenBLAS exports this; declared here since not every cblas.h does. */
void openblas_set_num_threads(int num_threads);

static int cpu_init(struct mp_compute **out, int local_rank)
{
    struct mp_compute *c = calloc(1, sizeof *c);
    if (!c) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    openblas_set_num_threads(1); /* one BLAS thread per rank: ranks are the parallelism */
    strcpy(c->name, "cpu (fp32, OpenBLAS, 1 thread)");
    *out = c;
    return MP_OK;
}

static void cpu_fini(struct mp_compute *c)
{
    if (!c)
        return;
    free(c->logits);
    free(c->wire_row);
    free(c->panel);
    free(c->aq);
    mp_dplan_host_free(&c->plan);
    free(c->gate_ids);
    free(c->gate_w);
    free(c->flush_buf);
    free(c);
}

static const char *cpu_device_name(struct mp_compute *c) { return c->name; }

static void *cpu_alloc(struct mp_compute *c, size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n * sizeof(float) : 64) != 0)
        return NULL;
    return p;
}

static void cpu_free(struct mp_compute *c, void *p) { free(p); }

static int cpu_upload(struct mp_compute *c, void *dst, const float *src, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
    return MP_OK;
}

static int cpu_download(struct mp_compute *c, float *dst, const void *src, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
    return MP_OK;
}

static int cpu_copy_bytes(struct mp_compute *c, void *dst, const void *src, size_t bytes)
{
    (void)c;
    if (bytes)
        memcpy(dst, src, bytes);
    return MP_OK;
}

static int cpu_gate(struct mp_compute *c, const void *x, const void *wg, const float *noise,
                    long ntok, int H, int E, int K, int G, int M, int32_t *ids, float *w)
{
    size_t need = (size_t)ntok * E;
    if (need > c->logits_cap) {
        float *p = realloc(c->logits, need * sizeof(float));
        if (!p) {
            mp_error("out of memory for %zu gate logits", need);
            return MP_ERR_RUNTIME;
        }
        c->logits = p;
        c->logits_cap = need;
    }
    if (!ids) { /* the result stays here for plan_build */
        size_t pairs = (size_t)ntok * K;
        if (pairs > c->gate_cap) {
            int32_t *i2 = realloc(c->gate_ids, pairs * sizeof *i2);
            if (i2)
                c->gate_ids = i2;
            float *w2 = realloc(c->gate_w, pairs * sizeof *w2);
            if (w2)
                c->gate_w = w2;
            if (!i2 || !w2) {
                mp_error("out of memory for %zu gate pairs", pairs);
                return MP_ERR_RUNTIME;
            }
            c->gate_cap = pairs;
        }
        ids = c->gate_ids;
        w = c->gate_w;
    }
    if (ntok > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)ntok, E, H, 1.0f, x, H, wg, E,
                    0.0f, c->logits, E);
    for (long t = 0; t < ntok; t++) {
        float *l = c->logits + (size_t)t * E;
        if (noise)
            for (int e = 0; e < E; e++)
                l[e] += noise[(size_t)t * E + e];
        mp_topk_select_grouped(l, E, K, G, M, ids + t * K);
        mp_topk_weights(l, K, ids + t * K, w + t * K);
    }
    return MP_OK;
}

static int cpu_permute(struct mp_compute *c, const void *x, const int32_t *src_row, long row0,
                       long nrows, int H, void *out)
{
    const float *xs = x;
    float *o = out;
    if (!src_row)
        src_row = c->plan.src_tok;
    src_row += row0;
    for (long i = 0; i < nrows; i++)
        memcpy(o + i * H, xs + (size_t)src_row[i] * H, (size_t)H * sizeof(float));
    return MP_OK;
}

static int cpu_copy_rows(struct mp_compute *c, const void *src, void *dst,
                         const struct mp_chunk *ch, int nch, int H)
{
    const float *s = src;
    float *d = dst;
    struct mp_chunk run;
    int i = 0;
    while (mp_chunks_next(ch, nch, &i, &run)) /* one copy per maximal run */
        memcpy(d + run.dst * H, s + run.src * H, (size_t)run.n * H * sizeof(float));
    return MP_OK;
}

/* The staging row of fp8_pack/fp8_unpack, at least `bytes` long. */
static int wire_scratch(struct mp_compute *c, size_t bytes)
{
    if (bytes <= c->wire_cap)
        return MP_OK;
    unsigned char *p = realloc(c->wire_row, bytes);
    if (!p) {
        mp_error("out of memory for an fp8 row of %zu bytes", bytes);
        return MP_ERR_RUNTIME;
    }
    c->wire_row = p;
    c->wire_cap = bytes;
    return MP_OK;
}

/* fp32 rows of 4H bytes into packed wire rows of W = mp_fp8_row_bytes(H) ≤ 4H bytes, in place:
 * row i is read from byte 4H·i and written at W·i ≤ 4H·i, so in increasing order no row is
 * overwritten before it is read; a row staged whole covers its own overlap. */
static int cpu_fp8_pack(struct mp_compute *c, void *buf, long n, int H)
{
    size_t W = mp_fp8_row_bytes(H), R = (size_t)H * sizeof(float);
    if (W > R || wire_scratch(c, W) != MP_OK)
        return MP_ERR_RUNTIME;
    for (long i = 0; i < n; i++) {
        mp_fp8_pack_row((const float *)((char *)buf + (size_t)i * R), H, c->wire_row);
        memcpy((char *)buf + (size_t)i * W, c->wire_row, W);
    }
    return MP_OK;
}

/* The reverse in place, rows in decreasing order: row i's fp32 bytes [4H·i, 4H·(i+1)) lie past
 * every packed row j < i still to be read ([W·j, W·(j+1)), W·i ≤ 4H·i). */
static int cpu_fp8_unpack(struct mp_compute *c, void *buf, long n, int H)
{
    size_t W = mp_fp8_row_bytes(H), R = (size_t)H * sizeof(float);
    if (W > R || wire_scratch(c, W) != MP_OK)
        return MP_ERR_RUNTIME;
    for (long i = n - 1; i >= 0; i--) {
        memcpy(c->wire_row, (char *)buf + (size_t)i * W, W);
        mp_fp8_unpack_row(c->wire_row, H, (float *)((char *)buf + (size_t)i * R));
    }
    return MP_OK;
}

/* C (m × parts·N, row stride ldc) = A (m × K, row stride lda) · W, W the K×(parts·N) matrix of the
 * fp8 image img (base/fp8.h), as an FP8 GEMM computes it (w8a8, DeepSeek-V3's recipe): each row
 * of A through the fp8 round trip of its 128-value blocks first, then one block row of W (128
 * rows, every tile of them) dequantized into fp32 at a time and multiplied in, accumulating over
 * the block rows. A reference path for correctness and byte accounting, not a fast one: every
 * tile is decoded again on every call. */
static int fp8_gemm(struct mp_compute *c, const float *A, int lda, long m, const unsigned char *img,
                    int K, int N, int parts, float *C, int ldc)
{
    size_t W = (size_t)parts * N, need = (size_t)MP_FP8_BLOCK * W;
    size_t qneed = (size_t)m * K + mp_fp8_row_bytes(K) / sizeof(float) + 1;
    if (need > c->panel_cap) {
        float *p = realloc(c->panel, need * sizeof *p);
        if (!p) {
            mp_error("out of memory for an fp8 weight panel of %zu values", need);
            return MP_ERR_RUNTIME;
        }
        c->panel = p;
        c->panel_cap = need;
    }
    if (qneed > c->aq_cap) {
        float *p = realloc(c->aq, qneed * sizeof *p);
        if (!p) {
            mp_error("out of memory for %ld fp8 GEMM input rows of %d values", m, K);
            return MP_ERR_RUNTIME;
        }
        c->aq = p;
        c->aq_cap = qneed;
    }
    unsigned char *wire = (unsigned char *)(c->aq + (size_t)m * K);
    for (long i = 0; i < m; i++)
        mp_fp8_round_trip_row(A + i * lda, K, wire, c->aq + i * K);
    A = c->aq;
    lda = K;
    for (int bk = 0; bk < mp_fp8_blocks(K); bk++) {
        int k0 = bk * MP_FP8_BLOCK, kb = K - k0 < MP_FP8_BLOCK ? K - k0 : MP_FP8_BLOCK;
        mp_fp8_image_block_row(img, K, N, parts, bk, c->panel);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)W, kb, 1.0f, A + k0,
                    lda, c->panel, (int)W, bk ? 1.0f : 0.0f, C, ldc);
    }
    return MP_OK;
}

static int cpu_expert_ffn(struct mp_compute *c, const struct mp_ffn_args *a)
{
    int fp8 = a->weight_dtype == MP_DTYPE_FP8;
    const float *in = a->in;
    float *out = a->out, *g = a->work;
    int H = a->H, Dl = a->Dl;
    for (int e = 0; e < a->nexp; e++) {
        long r0 = a->row_off[e], m = a->row_off[e + 1] - r0;
        if (m <= 0)
            continue;
        /* [gate | up] = in · [Wg | Wu]: m × 2Dl */
        if (fp8) {
            int rc = fp8_gemm(c, in + r0 * H, H, m, a->wgu[e], H, Dl, 2, g, 2 * Dl);
            if (rc != MP_OK)
                return rc;
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, 2 * Dl, H, 1.0f,
                        in + r0 * H, H, a->wgu[e], 2 * Dl, 0.0f, g, 2 * Dl);
        }
        /* SwiGLU (Shazeer 2020): silu(gate) ⊙ up, silu(z) = z / (1 + e^−z), in place */
        for (long i = 0; i < m; i++) {
            float *row = g + i * 2L * Dl;
            for (int j = 0; j < Dl; j++) {
                float z = row[j];
                row[j] = z / (1.0f + expf(-z)) * row[Dl + j];
            }
        }
        /* out = act · Wd: m × H */
        if (fp8) {
            int rc = fp8_gemm(c, g, 2 * Dl, m, a->wd[e], Dl, H, 1, out + r0 * H, H);
            if (rc != MP_OK)
                return rc;
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, H, Dl, 1.0f, g, 2 * Dl,
                        a->wd[e], H, 0.0f, out + r0 * H, H);
        }
        if (a->progress)
            a->progress(a->progress_arg);
    }
    return MP_OK;
}

static int cpu_combine(struct mp_compute *c, const void *rows, const int32_t *tok, const float *w,
                       long row0, long nrows, const void *shared, int nshared, long ntok, int H,
                       void *y, int accumulate)
{
    const float *r = rows, *sh = shared;
    float *out = y;
    if (!tok) {
        tok = c->plan.src_tok;
        w = c->plan.row_w;
    }
    tok += row0;
    w += row0;
    if (accumulate) {
        for (int s = 0; sh && s < nshared; s++)
            for (size_t i = 0; i < (size_t)ntok * H; i++)
                out[i] += sh[(size_t)s * ntok * H + i];
    } else if (sh && nshared > 0) {
        memcpy(out, sh, (size_t)ntok * H * sizeof(float));
        for (int s = 1; s < nshared; s++)
            for (size_t i = 0; i < (size_t)ntok * H; i++)
                out[i] += sh[(size_t)s * ntok * H + i];
    } else {
        memset(out, 0, (size_t)ntok * H * sizeof(float));
    }
    for (long i = 0; i < nrows; i++) {
        float *dst = out + (size_t)tok[i] * H;
        const float *src = r + (size_t)i * H;
        float wi = w[i];
        for (int h = 0; h < H; h++)
            dst[h] += wi * src[h];
    }
    return MP_OK;
}

static int cpu_plan_setup(struct mp_compute *c, const struct mp_dplan_shape *s,
                          const int32_t **totals)
{
    int rc = mp_dplan_host_setup(&c->plan, s);
    *totals = c->plan.totals;
    return rc;
}

static int cpu_plan_build(struct mp_compute *c, const int32_t *ids, const float *w, int wait)
{
    (void)wait; /* done when it returns */
    mp_dplan_host_build(&c->plan, ids ? ids : c->gate_ids, ids ? w : c->gate_w);
    return MP_OK;
}

static int cpu_mark(struct mp_compute *c, int slot)
{
    c->marks[slot] = mp_now_us();
    return MP_OK;
}

static double cpu_elapsed_us(struct mp_compute *c, int a, int b) { return c->marks[b] - c->marks[a]; }

static int cpu_sync(struct mp_compute *c) { return MP_OK; }

/* Bytes of the largest CPU cache: hwloc's caches where it is built in, else the sizes Linux
 * lists under /sys/devices/system/cpu/cpu0/cache, else sysconf's L3 or L2; 0 when none says. */
static size_t llc_bytes(void)
{
    size_t best = 0;
#if HAVE_HWLOC
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_load(topo) == 0) {
            const hwloc_obj_type_t types[] = {HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L3CACHE,
                                              HWLOC_OBJ_L4CACHE, HWLOC_OBJ_L5CACHE};
            for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
                for (hwloc_obj_t o = hwloc_get_next_obj_by_type(topo, types[t], NULL); o;
                     o = hwloc_get_next_obj_by_type(topo, types[t], o))
                    if (o->attr && o->attr->cache.size > best)
                        best = (size_t)o->attr->cache.size;
        }
        hwloc_topology_destroy(topo);
    }
    if (best > 0)
        return best;
#endif
    for (int i = 0; i < 16; i++) { /* "32768K" */
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        unsigned long long v = 0;
        char unit = 0;
        if (fscanf(f, "%llu%c", &v, &unit) >= 1) {
            v *= unit == 'K'   ? 1024ull
                 : unit == 'M' ? 1024ull * 1024
                 : unit == 'G' ? 1ull << 30
                               : 1;
            if (v > best)
                best = (size_t)v;
        }
        fclose(f);
    }
    if (best > 0)
        return best;
#ifdef _SC_LEVEL3_CACHE_SIZE
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0)
        return (size_t)l3;
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 > 0)
        return (size_t)l2;
#endif
    return 0;
}

/* The sweep's size: twice the largest cache (an LRU-like cache then holds none of what was there
 * before), 64 MiB when no size is known, at most 2 GiB; MP_QUICK_FLUSH_BYTES under the test hook
 * mp_compute_quick. */
#define FLUSH_UNKNOWN_LLC ((size_t)32 << 20)
#define FLUSH_MAX_BYTES ((size_t)2 << 30)

/* Read one word of every 64-byte line of a buffer of 2 × the LLC: every line of it passes through
 * the caches and displaces what they held (the weights of the last iteration). Reads only, so
 * the lines left behind are clean and evicting them during the timed iteration writes nothing
 * back; the first call allocates the buffer and writes it once (plain stores, not memset, whose
 * large fills may bypass the cache). */
static int cpu_flush_cache(struct mp_compute *c)
{
    if (!c->flush_buf) {
        size_t bytes = MP_QUICK_FLUSH_BYTES; /* the test hook (compute.h): no cache looked up */
        if (!mp_compute_quick()) {
            size_t llc = llc_bytes();
            bytes = 2 * (llc > 0 ? llc : FLUSH_UNKNOWN_LLC);
            if (bytes > FLUSH_MAX_BYTES)
                bytes = FLUSH_MAX_BYTES;
        }
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes) != 0) {
            mp_error("--flush-cache: out of memory for a %zu MiB buffer to sweep the cache",
                     bytes >> 20);
            return MP_ERR_RUNTIME;
        }
        c->flush_buf = p;
        c->flush_bytes = bytes;
        for (size_t i = 0; i < bytes / sizeof *c->flush_buf; i++)
            c->flush_buf[i] = i;
    }
    const volatile uint64_t *p = c->flush_buf;
    uint64_t sum = 0;
    for (size_t i = 0; i < c->flush_bytes / sizeof *p; i += 64 / sizeof *p)
        sum += p[i];
    c->flush_sink += sum; /* the loads are used: nothing to elide */
    c->flushes++;
    return MP_OK;
}

/* Microseconds of CPU time this thread has run. */
static double thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* Sizes of the peak measurement: one 2048³ sgemm takes ~0.1–0.3 s on a core, one 256 MiB copy
 * ~30 ms; with allocation and first touch the whole measurement stays under ~2 s. */
#define PEAK_GEMM_N 2048
#define PEAK_COPY_BYTES ((size_t)256 << 20)
#define PEAK_RUNS 3
#define PEAK_COPY_RUNS 8 /* cheap, and a shared machine's bandwidth comes and goes */

/* The roofline of one core: FLOP/s is the best of PEAK_RUNS single-threaded cblas_sgemm calls of
 * M = N = K = PEAK_GEMM_N (2·M·N·K FLOPs each); bytes/s is the best of PEAK_COPY_RUNS memcpy calls
 * of PEAK_COPY_BYTES, counted as read + written = 2·size (the STREAM copy convention, McCalpin
 * 1995). Every buffer is written before timing so page faults stay out of the timed calls. Each
 * call is timed by this thread's CPU time (CLOCK_THREAD_CPUTIME_ID; OpenBLAS runs one thread in
 * the caller), not the wall clock: on a core shared with other processes, time spent preempted is
 * not the core's capability, and a roofline lowered by it would put short timed iterations, which
 * fit between preemptions, above the roofline. */
static int cpu_measure_peak(struct mp_compute *c, double *flops_per_s, double *fp8_flops_per_s,
                            double *bytes_per_s)
{
    int quick = mp_compute_quick(), runs = quick ? 1 : PEAK_RUNS;
    int copy_runs = quick ? 1 : PEAK_COPY_RUNS;
    size_t n = quick ? MP_QUICK_PEAK_GEMM_N : PEAK_GEMM_N, nn = n * n;
    size_t copy = quick ? MP_QUICK_PEAK_COPY_BYTES : PEAK_COPY_BYTES;
    float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float)),
          *d = malloc(nn * sizeof(float));
    char *src = malloc(copy), *dst = malloc(copy);
    int rc = MP_OK;
    if (!a || !b || !d || !src || !dst) {
        mp_error("out of memory for the peak measurement (%zu MiB)",
                 (3 * nn * sizeof(float) + 2 * copy) >> 20);
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)(i % 7) * 0.125f; /* small exact values: no denormals or overflow */
        b[i] = (float)(i % 5) * 0.25f;
        d[i] = 0.0f;
    }
    memset(src, 1, copy);
    memset(dst, 0, copy);

    double best = 0;
    for (int r = 0; r < runs; r++) {
        double t0 = thread_cpu_us();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a,
                    (int)n, b, (int)n, 0.0f, d, (int)n);
        double us = thread_cpu_us() - t0;
        if (us > 0 && (best == 0 || us < best))
            best = us;
    }
    *flops_per_s = best > 0 ? 2.0 * (double)n * n * n / (best * 1e-6) : 0;
    *fp8_flops_per_s = *flops_per_s; /* fp8 weights are dequantized into this fp32 GEMM */

    best = 0;
    for (int r = 0; r < copy_runs; r++) {
        src[r] = (char)r; /* a changed source: nothing to elide */
        double t0 = thread_cpu_us();
        memcpy(dst, src, copy);
        double us = thread_cpu_us() - t0;
        if (us > 0 && (best == 0 || us < best))
            best = us;
    }
    *bytes_per_s = best > 0 ? 2.0 * (double)copy / (best * 1e-6) : 0;
    if (dst[0] != src[0] || d[nn - 1] < 0) { /* uses the results; never true */
        mp_error("the peak measurement's copy or GEMM produced a wrong result");
        rc = MP_ERR_RUNTIME;
    }
out:
    free(a);
    free(b);
    free(d);
    free(src);
    free(dst);
    return rc;
}

/* The expert cache's fetch: a copy from the host pool, at once, all of it on the critical path
 * (memory bandwidth, not a bus: docs/METRICS.md, "Expert cache"). Slots need no ordering here. */
static int cpu_cache_setup(struct mp_compute *c, int nslots, int fetches)
{
    (void)nslots;
    (void)fetches;
    c->fetch_us = 0;
    return MP_OK;
}

static int cpu_cache_fetch(struct mp_compute *c, int slot, void *const *dst, const void *const *src,
                           const size_t *bytes, int n)
{
    (void)slot;
    double t0 = mp_now_us();
    for (int i = 0; i < n; i++)
        memcpy(dst[i], src[i], bytes[i]);
    c->fetch_us += mp_now_us() - t0;
    return MP_OK;
}

static int cpu_cache_release(struct mp_compute *c, int slot)
{
    (void)c;
    (void)slot;
    return MP_OK;
}

static int cpu_cache_exposed_us(struct mp_compute *c, double *us)
{
    *us = c->fetch_us;
    c->fetch_us = 0;
    return MP_OK;
}

const struct mp_compute_ops mp_compute_cpu = {
    .name = "cpu",
    .memory = MP_MEMORY_HOST,
    .dispatch_modes = MP_DISPATCH_ALL,
    .dispatch_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16) | MP_DTYPE_BIT(MP_DTYPE_FP8),
    .weight_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16) | MP_DTYPE_BIT(MP_DTYPE_FP8),
    .fp8_gemm_modes = 1u << MP_GEMM_LOOP,
    .elem_size = sizeof(float),
    .check_tolerance = 1e-5,
    .init = cpu_init,
    .fini = cpu_fini,
    .device_name = cpu_device_name,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .upload_bytes = cpu_copy_bytes, /* host memory both sides */
    .download_bytes = cpu_copy_bytes,
    .gate = cpu_gate,
    .permute = cpu_permute,
    .copy_rows = cpu_copy_rows,
    .fp8_pack = cpu_fp8_pack,
    .fp8_unpack = cpu_fp8_unpack,
    .expert_ffn = cpu_expert_ffn,
    .combine = cpu_combine,
    .plan_setup = cpu_plan_setup,
    .plan_build = cpu_plan_build,
    .mark = cpu_mark,
    .elapsed_us = cpu_elapsed_us,
    .sync = cpu_sync,
    .measure_peak = cpu_measure_peak,
    .flush_cache = cpu_flush_cache,
    .cache_setup = cpu_cache_setup,
    .cache_fetch = cpu_cache_fetch,
    .cache_release = cpu_cache_release,
    .cache_exposed_us = cpu_cache_exposed_us,
};
