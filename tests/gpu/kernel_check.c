/* kernel_check.c - every cuda kernel against the cpu backend on fresh random inputs: outputs are
 * poisoned (NaN) before each run, inputs are rounded to bf16 once and given to both, and results
 * must agree within bf16 tolerance (exactly, for the row moves); the fp8 dispatch's pack and
 * unpack against base/fp8.h's host functions byte for byte. Exits 77 without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_opts.h"
#include "bf16.h"
#include "compute.h"
#include "error.h"
#include "expert_store.h"
#include "fp8.h"
#include "padded.h"
#include "placement.h"
#include "dispatch_plan.h"
#include "reference.h"
#include "rng.h"
#include "routing.h"

#if HAVE_CUDA
static const struct mp_compute_ops *gpu = &mp_compute_cuda, *cpu = &mp_compute_cpu;
static struct mp_compute *g, *h;
static int failures;

static void fill(float *x, size_t n, uint64_t seed, float scale)
{
    struct mp_rng r;
    mp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (float)(2 * mp_rng_u01(&r) - 1);
}

/* A device copy of x, with x replaced by its bf16 rounding (what the device holds). */
static void *to_device(float *x, size_t n)
{
    void *d = gpu->alloc(g, n);
    gpu->upload(g, d, x, n);
    gpu->download(g, x, d, n);
    return d;
}

/* Fill device buffer d of n elements with NaN. */
static void poison(void *d, size_t n)
{
    float *nan = malloc(n * sizeof *nan);
    for (size_t i = 0; i < n; i++)
        nan[i] = NAN;
    gpu->upload(g, d, nan, n);
    free(nan);
}

static void *poisoned(size_t n)
{
    void *d = gpu->alloc(g, n);
    poison(d, n);
    return d;
}

static void report(const char *what, double err, double tol)
{
    int ok = err <= tol; /* NaN fails */
    printf("  %-34s relative error %.3e (bound %.0e) %s\n", what, err, tol, ok ? "ok" : "FAIL");
    failures += !ok;
}

/* The expert FFN in each --gemm mode against the cpu backend, through mp_compute_expert_ffn:
 * expert e has rows_per + e % cycle rows, but expert 1 none, and `nshared` shared experts run
 * over `shared_rows` rows of their own input. With fp8 weights (dt MP_DTYPE_FP8) both backends
 * store the same images (core/layer/expert_store.c) and compute w8a8, in each --gemm mode the cuda
 * backend runs fp8 in. On the stand-in, whose tensor cores are lanes of fibers, --gemm fused
 * skips shapes of more than 1e8 row·H·Dl products (the loop covers them there). */
static void check_ffn_dt(int H, int Dl, int nexp, int rows_per, int cycle, enum mp_dtype dt,
                         int nshared, long shared_rows)
{
    const int nw = nexp + nshared;
    long *off = malloc(sizeof(long) * (size_t)(nexp + 1));
    void **dwgu = malloc(sizeof(void *) * (size_t)nw), **dwd = malloc(sizeof(void *) * (size_t)nw);
    void **hwgu = malloc(sizeof(void *) * (size_t)nw), **hwd = malloc(sizeof(void *) * (size_t)nw);
    off[0] = 0;
    for (int e = 0; e < nexp; e++)
        off[e + 1] = off[e] + (e == 1 ? 0 : rows_per + e % cycle); /* uneven, one without rows */
    const long R = off[nexp], Ro = R + nshared * shared_rows, Rw = R > shared_rows ? R : shared_rows;
    float *x = malloc(sizeof(float) * R * H), *wgu = malloc(sizeof(float) * H * 2 * Dl * nw);
    float *xs = malloc(sizeof(float) * (shared_rows + 1) * H);
    float *wd = malloc(sizeof(float) * Dl * H * nw), *yc = malloc(sizeof(float) * Ro * H);
    float *yg = malloc(sizeof(float) * Ro * H), *work = malloc(sizeof(float) * Rw * 2 * Dl);
    fill(x, (size_t)R * H, 1, 1.0f);
    fill(xs, (size_t)shared_rows * H, 6, 1.0f);
    fill(wgu, (size_t)H * 2 * Dl * nw, 2, 1.0f / sqrtf((float)H));
    fill(wd, (size_t)Dl * H * nw, 3, 1.0f / sqrtf((float)Dl));
    void *dx = to_device(x, (size_t)R * H), *dxs = to_device(xs, (size_t)shared_rows * H);
    for (int e = 0; e < nw; e++) {
        if (dt == MP_DTYPE_FP8) {
            if (mp_expert_store(gpu, g, dt, e, H, Dl, wgu + (size_t)e * H * 2 * Dl,
                                wd + (size_t)e * Dl * H, &dwgu[e], &dwd[e]) != MP_OK ||
                mp_expert_store(cpu, h, dt, e, H, Dl, wgu + (size_t)e * H * 2 * Dl,
                                wd + (size_t)e * Dl * H, &hwgu[e], &hwd[e]) != MP_OK) {
                report("expert_ffn: fp8 weights stored", NAN, 0);
                return;
            }
            continue;
        }
        dwgu[e] = to_device(wgu + (size_t)e * H * 2 * Dl, (size_t)H * 2 * Dl);
        dwd[e] = to_device(wd + (size_t)e * Dl * H, (size_t)Dl * H);
        hwgu[e] = wgu + (size_t)e * H * 2 * Dl;
        hwd[e] = wd + (size_t)e * Dl * H;
    }
    struct mp_ffn_args a = {.in = x, .out = yc, .row_off = off, .nexp = nexp, .wgu = hwgu,
                            .wd = hwd, .H = H, .Dl = Dl, .work = work, .weight_dtype = dt,
                            .nshared = nshared, .shared_rows = shared_rows, .shared_in = xs,
                            .shared_out = yc + (size_t)R * H};
    mp_compute_expert_ffn(cpu, h, &a);
    const int standin = strncmp(gpu->device_name(g), "cudaemu", 7) == 0;
    for (int gemm = MP_GEMM_LOOP; gemm < MP_GEMM_COUNT; gemm++) {
        if (dt == MP_DTYPE_FP8 && !(gpu->fp8_gemm_modes & 1u << gemm))
            continue;
        char what[128];
        snprintf(what, sizeof what, "expert_ffn (%s%s) H %d Dl %d, %d+%d experts, %ld rows",
                 mp_gemm_choices[gemm], dt == MP_DTYPE_FP8 ? ", fp8" : "", H, Dl, nexp, nshared,
                 Ro);
        if (gemm == MP_GEMM_FUSED && standin && (double)Ro * H * Dl > 1e8) {
            printf("  %-34s skipped on the stand-in\n", what);
            continue;
        }
        void *dy = poisoned((size_t)Ro * H), *dwork = poisoned((size_t)Rw * 2 * Dl);
        a.in = dx;
        a.out = dy;
        a.wgu = dwgu;
        a.wd = dwd;
        a.work = dwork;
        a.gemm = gemm;
        a.shared_in = dxs;
        a.shared_out = (char *)dy + (size_t)R * H * gpu->elem_size;
        /* twice, outputs poisoned again in between: what a call leaves behind (a count, a
         * scratch buffer) must not spoil the next */
        int rc = mp_compute_expert_ffn(gpu, g, &a);
        gpu->sync(g);
        poison(dy, (size_t)Ro * H);
        poison(dwork, (size_t)Rw * 2 * Dl);
        rc = rc == MP_OK ? mp_compute_expert_ffn(gpu, g, &a) : rc;
        gpu->sync(g);
        gpu->download(g, yg, dy, (size_t)Ro * H);
        /* fp8: the device rounds gate, up and the activation to bf16 before it quantizes the
         * activation, the cpu backend keeps fp32, so about 3% of the activation's codes land one
         * step apart (measured on the stand-in: 1.3% to 1.8% against 0.4% for bf16 weights) */
        report(what, rc == MP_OK ? mp_rel_error(yg, yc, Ro * H) : NAN,
               dt == MP_DTYPE_FP8 ? 5e-2 : 2e-2);
        gpu->free(g, dy);
        gpu->free(g, dwork);
    }
    for (int e = 0; e < nw; e++) {
        gpu->free(g, dwgu[e]);
        gpu->free(g, dwd[e]);
        if (dt == MP_DTYPE_FP8) {
            cpu->free(h, hwgu[e]);
            cpu->free(h, hwd[e]);
        }
    }
    gpu->free(g, dx);
    gpu->free(g, dxs);
    free(x); free(xs); free(wgu); free(wd); free(yc); free(yg); free(work);
    free(off); free(dwgu); free(dwd); free(hwgu); free(hwd);
}

static void check_ffn(int H, int Dl, int nexp, int rows_per, int cycle)
{
    check_ffn_dt(H, Dl, nexp, rows_per, cycle, MP_DTYPE_BF16, 0, 0);
}

static void check_gate(long T, int H, int E, int K)
{
    float *x = malloc(sizeof(float) * T * H), *wg = malloc(sizeof(float) * H * E);
    float *wc = malloc(sizeof(float) * T * K), *wgpu = malloc(sizeof(float) * T * K);
    int32_t *ic = malloc(sizeof(int32_t) * T * K), *ig = malloc(sizeof(int32_t) * T * K);
    fill(x, (size_t)T * H, 4, 1.0f);
    fill(wg, (size_t)H * E, 5, 4.0f / sqrtf((float)H));
    void *dx = to_device(x, (size_t)T * H), *dwg = to_device(wg, (size_t)H * E);
    cpu->gate(h, x, wg, NULL, T, H, E, K, 0, 0, ic, wc);
    memset(ig, 0xff, sizeof(int32_t) * T * K);
    gpu->gate(g, dx, dwg, NULL, T, H, E, K, 0, 0, ig, wgpu);
    long same = 0;
    double err = 0;
    for (long t = 0; t < T; t++) {
        int agree = 1;
        for (int k = 0; k < K; k++)
            agree &= ic[t * K + k] == ig[t * K + k];
        same += agree;
        for (int k = 0; agree && k < K; k++)
            err = fmax(err, fabs(wc[t * K + k] - wgpu[t * K + k]));
    }
    printf("  gate %ld tokens, E %d, top-%d: %ld of %ld tokens pick the same experts\n", T, E, K,
           same, T);
    failures += same < T * 95 / 100; /* near-ties may flip under a different summation order */
    report("gate weights (tokens that agree)", err, 1e-2);
    gpu->free(g, dx);
    gpu->free(g, dwg);
    free(x); free(wg); free(wc); free(wgpu); free(ic); free(ig);
}

static void check_moves(long N, int H)
{
    float *x = malloc(sizeof(float) * N * H), *pc = malloc(sizeof(float) * N * H);
    float *pg = malloc(sizeof(float) * N * H);
    int32_t *src = malloc(sizeof(int32_t) * N);
    fill(x, (size_t)N * H, 6, 1.0f);
    for (long i = 0; i < N; i++)
        src[i] = (int32_t)((i * 7 + 3) % N);
    void *dx = to_device(x, (size_t)N * H), *dp = poisoned((size_t)N * H);
    cpu->permute(h, x, src, 0, N, H, pc);
    gpu->permute(g, dx, src, 0, N, H, dp);
    gpu->sync(g);
    gpu->download(g, pg, dp, (size_t)N * H);
    report("permute (exact)", mp_rel_error(pg, pc, N * H), 0);
    struct mp_chunk ch[3] = {{.src = 0, .dst = N / 2, .n = N / 4}, {.src = N / 4, .dst = 0, .n = N / 2},
                             {.src = 3 * N / 4, .dst = 3 * N / 4, .n = N - 3 * N / 4}};
    memset(pc, 0, sizeof(float) * N * H);
    void *dc = poisoned((size_t)N * H);
    float *zero = calloc((size_t)N * H, sizeof(float));
    gpu->upload(g, dc, zero, (size_t)N * H);
    cpu->copy_rows(h, x, pc, ch, 3, H);
    gpu->copy_rows(g, dx, dc, ch, 3, H);
    gpu->sync(g);
    gpu->download(g, pg, dc, (size_t)N * H);
    report("copy_rows (exact)", mp_rel_error(pg, pc, N * H), 0);
    /* pairs of rows in reverse order: no two chunks form one run, so more runs than one launch's
     * table holds */
    long nc = N / 2;
    struct mp_chunk *rev = malloc(sizeof *rev * (size_t)nc);
    for (long j = 0; j < nc; j++)
        rev[j] = (struct mp_chunk){.src = 2 * j, .dst = 2 * (nc - 1 - j), .n = 2};
    memset(pc, 0, sizeof(float) * N * H);
    gpu->upload(g, dc, zero, (size_t)N * H);
    cpu->copy_rows(h, x, pc, rev, (int)nc, H);
    gpu->copy_rows(g, dx, dc, rev, (int)nc, H);
    gpu->sync(g);
    gpu->download(g, pg, dc, (size_t)N * H);
    char what[64];
    snprintf(what, sizeof what, "copy_rows, %ld runs (exact)", nc);
    report(what, mp_rel_error(pg, pc, N * H), 0);
    free(rev);
    /* combine: rows of 3 tokens with a shared block */
    long T = N / 3;
    float *sh = malloc(sizeof(float) * T * H), *w = malloc(sizeof(float) * N);
    float *yc = malloc(sizeof(float) * T * H), *yg = malloc(sizeof(float) * T * H);
    int32_t *tok = malloc(sizeof(int32_t) * N);
    fill(sh, (size_t)T * H, 7, 1.0f);
    void *dsh = to_device(sh, (size_t)T * H), *dy = poisoned((size_t)T * H);
    for (long i = 0; i < N; i++) {
        tok[i] = (int32_t)(i % T);
        w[i] = 0.25f + (float)(i % 5) * 0.1f;
    }
    cpu->combine(h, x, tok, w, 0, N, sh, 1, T, H, yc, 0);
    gpu->combine(g, dx, tok, w, 0, N, dsh, 1, T, H, dy, 0);
    gpu->sync(g);
    gpu->download(g, yg, dy, (size_t)T * H);
    report("combine (weighted, with shared)", mp_rel_error(yg, yc, T * H), 1e-2);
    gpu->free(g, dx); gpu->free(g, dp); gpu->free(g, dc); gpu->free(g, dsh); gpu->free(g, dy);
    free(x); free(pc); free(pg); free(src); free(zero); free(sh); free(w); free(yc); free(yg);
    free(tok);
}
/* upload_bytes and download_bytes move bytes as they are (no bf16 rounding): metadata rows of an
 * int32 and a float, uploaded, queued behind a permute of the same buffer seen as rows of H = 8
 * bf16 (so the download must wait for it), and downloaded exactly; on the cpu backend a round
 * trip. */
static void check_bytes(long n)
{
    size_t bytes = (size_t)n * 8;
    unsigned char *in = malloc(bytes), *outg = malloc(bytes), *outc = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        in[i] = (unsigned char)(i * 131 + 7);
    long rows = (long)(bytes / 16); /* rows of 8 bf16 */
    int32_t *rev = malloc(sizeof(int32_t) * (size_t)rows);
    for (long i = 0; i < rows; i++)
        rev[i] = (int32_t)(rows - 1 - i);
    void *d = gpu->alloc(g, bytes / 2), *dr = gpu->alloc(g, bytes / 2);
    void *hc = cpu->alloc(h, bytes / 4);
    gpu->upload_bytes(g, d, in, bytes);
    gpu->permute(g, d, rev, 0, rows, 8, dr);
    gpu->download_bytes(g, outg, dr, bytes);
    cpu->upload_bytes(h, hc, in, bytes);
    cpu->download_bytes(h, outc, hc, bytes);
    long bad = 0;
    for (long i = 0; i < rows; i++)
        bad += memcmp(outg + (size_t)i * 16, in + (size_t)(rows - 1 - i) * 16, 16) != 0;
    bad += memcmp(outc, in, bytes) != 0;
    printf("  %-34s %ld of %ld rows differ %s\n", "upload/download_bytes (exact)", bad, rows,
           bad ? "FAIL" : "ok");
    failures += bad != 0;
    gpu->free(g, d); gpu->free(g, dr); cpu->free(h, hc);
    free(in); free(outg); free(outc); free(rev);
}

/* A hook's status: a failure is reported and counted. */
#define CHECK_RC(call)                                                                             \
    do {                                                                                           \
        if ((call) != MP_OK) {                                                                     \
            printf("  %s failed FAIL\n", #call);                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* A device buffer of `rows` rows of H bf16 holding x's values (x left as it was), and x rounded as
 * the device rounded it: mp_bf16_round must give the same, since the reference models the device
 * with it. */
static void *fp8_upload(const float *x, long rows, int H, float *xb)
{
    size_t n = (size_t)rows * H;
    memcpy(xb, x, n * sizeof *xb);
    void *d = to_device(xb, n);
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += xb[i] != mp_bf16_round(x[i]);
    printf("  %-34s %ld of %zu values differ %s\n", "bf16 upload = mp_bf16_round", bad, n,
           bad ? "FAIL" : "ok");
    failures += bad != 0;
    return d;
}

/* The packed rows on the device (their first n·W bytes) against the host's packing of the same
 * bf16 values byte for byte, and the guard row after the buffer's `rows` rows untouched; returns
 * the rows that differ. */
static long fp8_compare_packed(void *d, const float *xb, long n, int H, long rows, const char *what)
{
    size_t W = mp_fp8_row_bytes(H), R = (size_t)H * 2;
    unsigned char *dev = malloc((size_t)(rows + 1) * R), *host = malloc(W);
    gpu->sync(g);
    gpu->download_bytes(g, dev, d, (size_t)(rows + 1) * R);
    long bad = 0;
    for (long r = 0; r < n; r++) {
        mp_fp8_pack_row(xb + (size_t)r * H, H, host);
        bad += memcmp(dev + (size_t)r * W, host, W) != 0;
    }
    for (size_t i = 0; i < R; i++) /* the guard row: bf16 1.0 (0x3F80) in every element */
        bad += dev[(size_t)rows * R + i] != (i % 2 ? 0x3F : 0x80);
    printf("  %-34s %ld of %ld rows differ %s\n", what, bad, n, bad ? "FAIL" : "ok");
    failures += bad != 0;
    free(dev);
    free(host);
    return bad;
}

/* The unpacked rows against the host's round trip of the same bf16 values, rounded to bf16
 * (exactly), and against the input within base/fp8.h's bound |x − y| ≤ 2⁻⁴·|x| + 2⁻¹⁰·s, plus
 * the bf16 rounding of y (2⁻⁹·|y|, 2⁻⁸ allowed). */
static void fp8_compare_unpacked(void *d, const float *xb, long n, int H, const char *what)
{
    size_t W = mp_fp8_row_bytes(H);
    float *y = malloc(sizeof(float) * (size_t)n * H), *yh = malloc(sizeof(float) * H);
    unsigned char *wire = malloc(W);
    gpu->sync(g);
    gpu->download(g, y, d, (size_t)n * H);
    long exact = 0, bound = 0;
    for (long r = 0; r < n; r++) {
        const float *x = xb + (size_t)r * H, *yr = y + (size_t)r * H;
        mp_fp8_round_trip_row(x, H, wire, yh);
        for (int i = 0; i < H; i++) {
            float s = mp_fp8_row_scale(wire, H, i / MP_FP8_BLOCK);
            exact += yr[i] != mp_bf16_round(yh[i]);
            bound += !(fabsf(x[i] - yr[i]) <= ldexpf(fabsf(x[i]), -4) + ldexpf(s, -10) +
                                                   ldexpf(fabsf(yr[i]), -8));
        }
    }
    printf("  %-34s %ld values differ from the host's, %ld beyond the bound %s\n", what, exact,
           bound, exact || bound ? "FAIL" : "ok");
    failures += exact != 0 || bound != 0;
    free(y);
    free(yh);
    free(wire);
}

/* --dispatch-dtype fp8's fp8_pack and fp8_unpack on n rows of H values: every block of 128 values
 * scaled by 4^−j (j = 0..3, per row and block, as mp_activations_blocked), so a scale taken from
 * another block or row is wrong by a power of 4; one block of zeros (scale 0), one of −0, a value
 * at each block's amax. The packed bytes equal base/fp8.h's host packing of the same bf16 values
 * byte for byte, in place with a guard row after the buffer untouched; unpack(pack(x)) equals the
 * host's round trip rounded to bf16, within the documented bound of x. Then a graph capture of
 * both on 3n rows, more than the staging area the first calls sized: the capture must not
 * allocate, so both work in pieces (pack in increasing, unpack in decreasing order), and the
 * replay must give the same bytes and values. */
static void check_fp8(long n, int H)
{
    long big = 3 * n;
    int nb = mp_fp8_blocks(H);
    float *x = malloc(sizeof(float) * (size_t)(big + 1) * H);
    float *xb = malloc(sizeof(float) * (size_t)(big + 1) * H);
    fill(x, (size_t)big * H, 11, 3.0f);
    for (long r = 0; r < big; r++)
        for (int i = 0; i < H; i++)
            x[(size_t)r * H + i] *= ldexpf(1.0f, -2 * (int)((r * 7 + (i / MP_FP8_BLOCK) * 3) % 4));
    for (int i = 0; i < H && i < MP_FP8_BLOCK; i++) {
        x[(size_t)1 * H + i] = 0.0f;  /* row 1, block 0: zeros */
        x[(size_t)2 * H + i] = -0.0f; /* row 2, block 0: negative zeros */
    }
    for (long r = 3; r < big; r += 5) /* a value at amax (x/s = ±448 exactly) */
        x[(size_t)r * H + (r % nb) * MP_FP8_BLOCK] = (r % 2 ? -1 : 1) * 4.0f;
    for (int i = 0; i < H; i++)
        x[(size_t)big * H + i] = 1.0f; /* the guard row */
    void *d = fp8_upload(x, big + 1, H, xb);
    char what[80];
    snprintf(what, sizeof what, "fp8_pack H=%d, %ld rows (bytes)", H, n);
    CHECK_RC(gpu->fp8_pack(g, d, n, H));
    fp8_compare_packed(d, xb, n, H, big, what);
    snprintf(what, sizeof what, "fp8_unpack H=%d, %ld rows", H, n);
    CHECK_RC(gpu->fp8_unpack(g, d, n, H));
    fp8_compare_unpacked(d, xb, n, H, what);
    gpu->free(g, d); /* again, the guard row after 3n rows */
    d = fp8_upload(x, big + 1, H, xb);
    CHECK_RC(gpu->capture_begin(g));
    int packed = gpu->fp8_pack(g, d, big, H);
    int end = gpu->capture_end(g);
    CHECK_RC(packed);
    CHECK_RC(end);
    CHECK_RC(gpu->replay(g));
    snprintf(what, sizeof what, "fp8_pack H=%d, %ld rows captured", H, big);
    fp8_compare_packed(d, xb, big, H, big, what);
    CHECK_RC(gpu->capture_begin(g));
    int unpacked = gpu->fp8_unpack(g, d, big, H);
    end = gpu->capture_end(g);
    CHECK_RC(unpacked);
    CHECK_RC(end);
    CHECK_RC(gpu->replay(g));
    snprintf(what, sizeof what, "fp8_unpack H=%d, %ld rows captured", H, big);
    fp8_compare_unpacked(d, xb, big, H, what);
    gpu->graph_reset(g);
    gpu->free(g, d);
    free(x);
    free(xb);
}

/* The dispatch plan built on the device against the cpu backend's (the host sort, itself equal to
 * mp_plan_send: test_dplan) for EP rank 1 of `ep`: the pairs per cell exactly; the rows' tokens
 * exactly (a permute of rows holding their token index); the rows' weights through a combine of
 * rows holding their row number. Routing from host arrays (two, or one page-locked block of ids
 * then weights), and from the device gate's result.
 * With `repeat`, every third token's second choice repeats its first in the host arrays (two
 * pairs in one cell). Small plans are built in one block (route_plan_kernel), large ones (more
 * than 8192 pairs) with the sort. */
static void check_plan(const char *placement, const char *routing, int E, int ep, int K,
                       long total, double factor, int per_node, int repeat)
{
    const int H = 8, r = 1;
    struct mp_routing rt;
    struct mp_placement pl;
    int node[64]; /* per_node > 0: EP ranks on nodes of that many (replicas on rank 1's node first) */
    for (int q = 0; q < ep && q < 64; q++)
        node[q] = per_node > 0 ? q / per_node : 0;
    if (mp_routing_parse(routing, E, K, 5, &rt) != MP_OK ||
        mp_placement_build(placement, E, ep, rt.prob, &pl) != MP_OK ||
        mp_placement_set_nodes(&pl, node) != MP_OK) {
        failures++;
        return;
    }
    long tok0, ntok = mp_token_split(total, ep, r, &tok0);
    int32_t *ids = malloc(sizeof(int32_t) * ntok * K);
    float *w = malloc(sizeof(float) * ntok * K);
    mp_routing_draw(&rt, 5, 0, total, tok0, ntok, ids, w);
    for (long t = 0; repeat && K > 1 && t < ntok; t += 3)
        ids[t * K + 1] = ids[t * K];
    int32_t *off = malloc(sizeof(int32_t) * (E + 1));
    int32_t *cell = malloc(sizeof(int32_t) * mp_route_table_size(&pl));
    long cap = mp_padded_capacity((total + ep - 1) / ep, K, E, factor, 1);
    float *x = malloc(sizeof(float) * ntok * H), *xg = malloc(sizeof(float) * ntok * E);
    float *wg = malloc(sizeof(float) * E * E);
    for (long t = 0; t < ntok; t++) /* row t holds t mod 256 and t / 256: exact in bf16 */
        for (int j = 0; j < H; j++)
            x[t * H + j] = (float)(j % 2 ? t / 256 : t % 256);
    fill(xg, (size_t)ntok * E, 8, 1.0f);
    fill(wg, (size_t)E * E, 9, 2.0f / sqrtf((float)E));
    void *dx = to_device(x, (size_t)ntok * H);
    void *dxg = to_device(xg, (size_t)ntok * E), *dwg = to_device(wg, (size_t)E * E);
    /* dynamic, padded; host routing, then gate routing; then the pipelined layer's dynamic plan
     * of 3 chunks (a block of cells each) */
    for (int mode = 0; mode < 6; mode++) {
        int padded = mode < 4 && (mode & 1), gate = mode < 4 ? mode >> 1 : mode & 1;
        int chunks = mode < 4 ? 1 : 3;
        int L = padded ? pl.max_local : E;
        mp_route_table(&pl, r, L, chunks, off, cell);
        struct mp_dplan_shape s = {.experts = E, .K = K, .max_local = L, .ncells = chunks * ep * L,
                                   .ntok = ntok, .tok0 = tok0, .cap = padded ? cap : 0,
                                   .route_off = off, .route_cell = cell};
        const int32_t *tg, *tc;
        if (gpu->plan_setup(g, &s, &tg) != MP_OK || cpu->plan_setup(h, &s, &tc) != MP_OK) {
            failures++;
            break;
        }
        if (gate) { /* the device gate's own choice, handed to the host plan */
            gpu->gate(g, dxg, dwg, NULL, ntok, E, E, K, 0, 0, ids, w);
            gpu->gate(g, dxg, dwg, NULL, ntok, E, E, K, 0, 0, NULL, NULL);
            gpu->plan_build(g, NULL, NULL, 1);
        } else if (mode == 0) {
            gpu->plan_build(g, ids, w, 1);
        } else { /* ids and weights in one page-locked block, as a layer pins them: one copy */
            size_t n = (size_t)ntok * K;
            int32_t *blk = gpu->host_alloc(g, n * (sizeof(int32_t) + sizeof(float)));
            float *bw = (float *)(void *)(blk + n);
            memcpy(blk, ids, n * sizeof(int32_t));
            memcpy(bw, w, n * sizeof(float));
            gpu->plan_build(g, blk, bw, 1);
            gpu->host_free(g, blk);
        }
        cpu->plan_build(h, ids, w, 1);
        long rows = 0, diff = 0;
        for (int c = 0; c < chunks * ep * L; c++) {
            diff += tg[c] != tc[c];
            rows += tc[c];
        }
        if (padded)
            rows = (long)ep * L * cap;
        float *pc = malloc(sizeof(float) * (rows + 1) * H), *pgh = malloc(sizeof(float) * (rows + 1) * H);
        void *dp = poisoned((size_t)(rows + 1) * H);
        cpu->permute(h, x, NULL, 0, rows, H, pc);
        gpu->permute(g, dx, NULL, 0, rows, H, dp);
        gpu->sync(g);
        gpu->download(g, pgh, dp, (size_t)rows * H);
        /* combine of rows holding their row number + 1: y[t] = Σ w_i·(i+1) over t's rows */
        float *rv = malloc(sizeof(float) * (rows + 1) * H), *yc = malloc(sizeof(float) * ntok * H);
        float *yg = malloc(sizeof(float) * ntok * H);
        for (long i = 0; i < rows; i++)
            for (int j = 0; j < H; j++)
                rv[i * H + j] = (float)((i % 200) + 1);
        void *drv = to_device(rv, (size_t)(rows + 1) * H), *dy = poisoned((size_t)ntok * H);
        cpu->combine(h, rv, NULL, NULL, 0, rows, NULL, 0, ntok, H, yc, 0);
        gpu->combine(g, drv, NULL, NULL, 0, rows, NULL, 0, ntok, H, dy, 0);
        gpu->sync(g);
        gpu->download(g, yg, dy, (size_t)ntok * H);
        const char *kind = padded ? "padded" : chunks > 1 ? "3 chunks" : "dynamic";
        char what[96];
        snprintf(what, sizeof what, "plan %s %s%s, %ld pairs: counts", placement, kind,
                 gate ? " (gate)" : repeat ? " (repeats)" : "", ntok * K);
        printf("  %-34s %ld of %d cells differ, %ld rows %s\n", what, diff, chunks * ep * L, rows,
               diff ? "FAIL" : "ok");
        failures += diff != 0;
        snprintf(what, sizeof what, "plan %s: row tokens (exact)", kind);
        report(what, mp_rel_error(pgh, pc, rows * H), 0);
        snprintf(what, sizeof what, "plan %s: row weights", kind);
        report(what, mp_rel_error(yg, yc, ntok * H), 1e-2);
        /* a window of the plan's rows, as a pipelined layer permutes and combines one chunk */
        long w0 = rows / 3, wn = rows - rows / 3 - rows / 4;
        void *dq = poisoned((size_t)(rows + 1) * H), *dz = poisoned((size_t)ntok * H);
        cpu->permute(h, x, NULL, w0, wn, H, pc);
        gpu->permute(g, dx, NULL, w0, wn, H, dq);
        cpu->combine(h, rv, NULL, NULL, w0, wn, NULL, 0, ntok, H, yc, 0);
        gpu->combine(g, drv, NULL, NULL, w0, wn, NULL, 0, ntok, H, dz, 0);
        gpu->sync(g);
        gpu->download(g, pgh, dq, (size_t)wn * H);
        gpu->download(g, yg, dz, (size_t)ntok * H);
        snprintf(what, sizeof what, "plan %s: rows %ld.. tokens (exact)", kind, w0);
        report(what, mp_rel_error(pgh, pc, wn * H), 0);
        snprintf(what, sizeof what, "plan %s: rows %ld.. weights", kind, w0);
        report(what, mp_rel_error(yg, yc, ntok * H), 1e-2);
        gpu->free(g, dq);
        gpu->free(g, dz);
        gpu->free(g, dp);
        gpu->free(g, drv);
        gpu->free(g, dy);
        free(pc); free(pgh); free(rv); free(yc); free(yg);
    }
    gpu->free(g, dx); gpu->free(g, dxg); gpu->free(g, dwg);
    free(ids); free(w); free(off); free(cell); free(x); free(xg); free(wg);
    mp_placement_free(&pl);
    mp_routing_free(&rt);
}
#endif

int main(void)
{
#if HAVE_CUDA
    mp_log_init("gpu_kernel_check", -1);
    if (gpu->init(&g, 0) != MP_OK) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    cpu->init(&h, 0);
    printf("cuda kernels against the cpu backend on %s\n", gpu->device_name(g));
    check_moves(3000, 1024);
    check_bytes(1000);
    printf("fp8 dispatch: %s\n", gpu->dispatch_dtypes & MP_DTYPE_BIT(MP_DTYPE_FP8) ? "claimed" : "FAIL: not claimed");
    failures += !(gpu->dispatch_dtypes & MP_DTYPE_BIT(MP_DTYPE_FP8));
    check_fp8(300, 200);  /* two blocks, the last of 72 values */
    check_fp8(40, 7168);  /* DeepSeek-V3's hidden size: 56 blocks */
    check_fp8(9, 4);      /* the smallest H a packed row fits in (8 bytes of 8) */
    check_plan("replicate-hot:4", "hot:4:10", 64, 4, 8, 800, 1.0, 0, 0);
    check_plan("eplb:8", "zipf:1.1", 32, 2, 4, 300, 0.5, 0, 0);
    check_plan("eplb:8", "zipf:1.1", 32, 2, 4, 300, 0.5, 0, 1);
    check_plan("eplb:12", "zipf:1.1", 32, 6, 4, 300, 0.5, 3, 0);
    check_plan("replicate-hot:4", "hot:4:10", 64, 4, 8, 4800, 1.0, 0, 0); /* 9600 pairs: sorted */
    check_gate(4096, 2048, 128, 8);
    check_ffn(1024, 512, 8, 33, 8);
    check_ffn(7168, 256, 4, 129, 4);
    check_ffn(64, 32, 450, 1, 450); /* more grouped GEMM pointers than one parameter table holds */
    /* skinny: experts of 1..12 rows (the kernel takes up to 8, cuBLAS the rest); 600 experts of
     * 1..8 rows (three kernel tables); tiles the kernel does not take (the GEMM loop instead) */
    check_ffn(4096, 512, 12, 1, 12);
    check_ffn(1024, 512, 6, 1, 1); /* the kernels sized for 1, 2 and 4 rows */
    check_ffn(1024, 256, 6, 1, 2);
    check_ffn(2048, 256, 5, 3, 2);
    check_ffn(64, 32, 600, 1, 8);
    check_ffn(96, 48, 5, 1, 5);
    /* fp8 weights: cuBLASLt's FP8 GEMM (Dl a multiple of 128) and moeperf's kernel (pieces of 8
     * rows; every expert where Dl is not), edge blocks of K (H 160: 128 + 32; Dl 80) */
    check_ffn_dt(160, 128, 6, 1, 12, MP_DTYPE_FP8, 0, 0);
    check_ffn_dt(160, 80, 6, 3, 12, MP_DTYPE_FP8, 0, 0);
    /* shared experts in the call (fused) or after it: decode rows (skinny tiles, K split 4 ways
     * in the first stage and 2 in the second), one piece of 64 rows and its remainder, and pieces
     * of both kinds in one launch with K split */
    check_ffn_dt(1024, 512, 9, 1, 2, MP_DTYPE_BF16, 1, 1);
    check_ffn_dt(256, 64, 5, 60, 9, MP_DTYPE_BF16, 2, 70);
    check_ffn_dt(1024, 512, 4, 6, 5, MP_DTYPE_BF16, 1, 72);
    /* the same with fp8 weights: the fused kernel's fp8 pieces (codes streamed, or on the tensor
     * cores in 128-value k blocks: the down projection's K of 64 is one short block) */
    check_ffn_dt(1024, 512, 9, 1, 2, MP_DTYPE_FP8, 1, 1);
    check_ffn_dt(256, 64, 5, 60, 9, MP_DTYPE_FP8, 2, 70);
    check_ffn_dt(1024, 512, 4, 6, 5, MP_DTYPE_FP8, 1, 72);
    cpu->fini(h);
    gpu->fini(g);
    printf("%s\n", failures ? "FAIL" : "all kernels agree");
    return failures ? 1 : 0;
#else
    return 77;
#endif
}
