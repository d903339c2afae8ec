/* kernel_check.c - every cuda kernel against the cpu backend on fresh random inputs: outputs are
 * poisoned (NaN) before each run, inputs are rounded to bf16 once and given to both, and results
 * must agree within bf16 tolerance (exactly, for the row moves). Exits 77 without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute.h"
#include "error.h"
#include "reference.h"
#include "rng.h"

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

static void *poisoned(size_t n)
{
    float *nan = malloc(n * sizeof *nan);
    for (size_t i = 0; i < n; i++)
        nan[i] = NAN;
    void *d = gpu->alloc(g, n);
    gpu->upload(g, d, nan, n);
    free(nan);
    return d;
}

static void report(const char *what, double err, double tol)
{
    int ok = err <= tol; /* NaN fails */
    printf("  %-34s relative error %.3e (bound %.0e) %s\n", what, err, tol, ok ? "ok" : "FAIL");
    failures += !ok;
}

static void check_ffn(int H, int Dl, int nexp, int rows_per)
{
    long off[17];
    off[0] = 0;
    for (int e = 0; e < nexp; e++)
        off[e + 1] = off[e] + (e == 1 ? 0 : rows_per + e); /* uneven experts, one without rows */
    long R = off[nexp];
    float *x = malloc(sizeof(float) * R * H), *wgu = malloc(sizeof(float) * H * 2 * Dl * nexp);
    float *wd = malloc(sizeof(float) * Dl * H * nexp), *yc = malloc(sizeof(float) * R * H);
    float *yg = malloc(sizeof(float) * R * H), *work = malloc(sizeof(float) * R * 2 * Dl);
    fill(x, (size_t)R * H, 1, 1.0f);
    fill(wgu, (size_t)H * 2 * Dl * nexp, 2, 1.0f / sqrtf((float)H));
    fill(wd, (size_t)Dl * H * nexp, 3, 1.0f / sqrtf((float)Dl));
    void *dx = to_device(x, (size_t)R * H), *dwgu[16], *dwd[16], *hwgu[16], *hwd[16];
    for (int e = 0; e < nexp; e++) {
        dwgu[e] = to_device(wgu + (size_t)e * H * 2 * Dl, (size_t)H * 2 * Dl);
        dwd[e] = to_device(wd + (size_t)e * Dl * H, (size_t)Dl * H);
        hwgu[e] = wgu + (size_t)e * H * 2 * Dl;
        hwd[e] = wd + (size_t)e * Dl * H;
    }
    struct mp_ffn_args a = {.in = x, .out = yc, .row_off = off, .nexp = nexp, .wgu = hwgu,
                            .wd = hwd, .H = H, .Dl = Dl, .work = work};
    cpu->expert_ffn(h, &a);
    for (int grouped = 0; grouped < 2; grouped++) { /* per-expert GEMM loop, then grouped GEMMs */
        void *dy = poisoned((size_t)R * H), *dwork = poisoned((size_t)R * 2 * Dl);
        a.in = dx;
        a.out = dy;
        a.wgu = dwgu;
        a.wd = dwd;
        a.work = dwork;
        a.grouped = grouped;
        int rc = gpu->expert_ffn(g, &a);
        gpu->sync(g);
        gpu->download(g, yg, dy, (size_t)R * H);
        char what[96];
        snprintf(what, sizeof what, "expert_ffn (%s) H %d Dl %d, %d experts",
                 grouped ? "grouped" : "loop", H, Dl, nexp);
        report(what, rc == MP_OK ? mp_rel_error(yg, yc, R * H) : NAN, 2e-2);
        gpu->free(g, dy);
        gpu->free(g, dwork);
    }
    for (int e = 0; e < nexp; e++) {
        gpu->free(g, dwgu[e]);
        gpu->free(g, dwd[e]);
    }
    gpu->free(g, dx);
    free(x); free(wgu); free(wd); free(yc); free(yg); free(work);
}

static void check_gate(long T, int H, int E, int K)
{
    float *x = malloc(sizeof(float) * T * H), *wg = malloc(sizeof(float) * H * E);
    float *wc = malloc(sizeof(float) * T * K), *wgpu = malloc(sizeof(float) * T * K);
    int32_t *ic = malloc(sizeof(int32_t) * T * K), *ig = malloc(sizeof(int32_t) * T * K);
    fill(x, (size_t)T * H, 4, 1.0f);
    fill(wg, (size_t)H * E, 5, 4.0f / sqrtf((float)H));
    void *dx = to_device(x, (size_t)T * H), *dwg = to_device(wg, (size_t)H * E);
    cpu->gate(h, x, wg, NULL, T, H, E, K, ic, wc);
    memset(ig, 0xff, sizeof(int32_t) * T * K);
    gpu->gate(g, dx, dwg, NULL, T, H, E, K, ig, wgpu);
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
    cpu->permute(h, x, src, N, H, pc);
    gpu->permute(g, dx, src, N, H, dp);
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
    cpu->combine(h, x, tok, w, N, sh, 1, T, H, yc, 0);
    gpu->combine(g, dx, tok, w, N, dsh, 1, T, H, dy, 0);
    gpu->sync(g);
    gpu->download(g, yg, dy, (size_t)T * H);
    report("combine (weighted, with shared)", mp_rel_error(yg, yc, T * H), 1e-2);
    gpu->free(g, dx); gpu->free(g, dp); gpu->free(g, dc); gpu->free(g, dsh); gpu->free(g, dy);
    free(x); free(pc); free(pg); free(src); free(zero); free(sh); free(w); free(yc); free(yg);
    free(tok);
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
    check_gate(4096, 2048, 128, 8);
    check_ffn(1024, 512, 8, 33);
    check_ffn(7168, 256, 4, 129);
    cpu->fini(h);
    gpu->fini(g);
    printf("%s\n", failures ? "FAIL" : "all kernels agree");
    return failures ? 1 : 0;
#else
    return 77;
#endif
}
