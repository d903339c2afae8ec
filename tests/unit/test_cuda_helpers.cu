/* test_cuda_helpers.cu - the kernel logic the cuda backend shares with the host (top-k selection
 * and weights, SwiGLU, permutation, the weighted combine, padded capacity, the device dispatch
 * plan's cell and row rules, the row-move runs, cuBLAS and cuBLASLt loaded when asked), compiled by
 * nvcc and run on the CPU: no GPU is needed. */
#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "compute.h" /* struct mp_chunk, as the cuda backend's files include it */
}
#include "chunks.h"
#include "cublas_entry.h"
#include "cuda_helpers.cuh"
#include "dplan.h"

static int failures;
#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);                             \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* The device plan's steps as the kernels run them, one loop iteration per thread: cells and keys
 * (plan_cells_kernel), a stable sort by key (CUB's radix sort is stable), the cells' starts (an
 * exclusive scan), then each sorted pair's row (plan_rows_kernel). */
static void device_plan_on_host(const int32_t *off, const int32_t *cellv, const int32_t *ids,
                                const float *w, long npairs, int K, long tok0, int ncells, long cap,
                                int max_local, int32_t *tok, float *row_w, int32_t *totals,
                                int32_t *row_of_pair)
{
    for (long i = 0; i < npairs; i++)
        row_of_pair[i] = -1;
    int32_t key[64], pair[64], start[16];
    for (int c = 0; c < ncells; c++)
        totals[c] = 0;
    for (long i = 0; i < npairs; i++) {
        int32_t cell = mp_dplan_cell(off, cellv, ids[i], tok0 + i / K);
        key[i] = cell < 0 ? ncells : cell;
        pair[i] = (int32_t)i;
        if (cell >= 0)
            totals[cell]++;
    }
    std::stable_sort(pair, pair + npairs, [&](int32_t a, int32_t b) { return key[a] < key[b]; });
    int32_t run = 0;
    for (int c = 0; c < ncells; c++) {
        start[c] = run;
        run += totals[c];
    }
    for (long p = 0; p < npairs; p++) {
        int32_t i = pair[p], cell = key[i];
        if (cell >= ncells)
            continue;
        long row = mp_dplan_row(cell, p, start[cell], cap, max_local);
        if (row < 0)
            continue;
        tok[row] = i / K;
        row_w[row] = w[i];
        row_of_pair[i] = (int32_t)row;
    }
}

/* The combine as combine_gather_kernel computes it for token t, element h: its K pairs whose rows
 * are in the window [row0, row0+nrows) of the plan, held at rows[row − row0]. */
static float gather_elem(const float *rows, const int32_t *row_of_pair, const float *pw, long row0,
                         long nrows, int K, int H, long t, int h, float y)
{
    for (int k = 0; k < K; k++) {
        int32_t r = mp_combine_pick(row_of_pair[t * K + k], row0, nrows);
        if (r >= 0)
            y += pw[t * K + k] * rows[(long)r * H + h];
    }
    return y;
}

/* The combine as combine_scatter_kernel computes it: every row of the window added to its token. */
static float scatter_elem(const float *rows, const int32_t *tok, const float *row_w, long row0,
                          long nrows, int H, long t, int h, float y)
{
    for (long i = 0; i < nrows; i++)
        if (tok[row0 + i] == t)
            y += row_w[row0 + i] * rows[i * H + h];
    return y;
}

/* The library `soname` is not mapped before load(e) and is loaded by it; load's message (`what`)
 * printed when it fails. */
template <class Entry>
static void expect_loads(Entry *e, int (*load)(Entry *, char *, size_t), const char *soname,
                         const char *what)
{
    char why[512] = "";
    EXPECT(!dlopen(soname, RTLD_NOW | RTLD_NOLOAD)); /* not mapped before the load */
    int rc = load(e, why, sizeof why);
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", what, why);
    EXPECT(rc == 0 && e->loaded);
}

int main(void)
{
    /* top-k: descending, ties to the lower index, exactly k distinct */
    float v[8] = {0.1f, 3.0f, -1.0f, 3.0f, 2.5f, 7.0f, 2.5f, 0.0f};
    int32_t idx[4];
    mp_topk_select(v, 8, 4, idx);
    EXPECT(idx[0] == 5 && idx[1] == 1 && idx[2] == 3 && idx[3] == 4);
    /* weights: softmax over the chosen logits, summing to 1 */
    float w[4];
    mp_topk_weights(v, 4, idx, w);
    double z = exp(0.0) + 2 * exp(3.0 - 7.0) + exp(2.5 - 7.0);
    EXPECT(fabs(w[0] - 1.0 / z) < 1e-6 && fabs(w[1] - exp(-4.0) / z) < 1e-6);
    EXPECT(fabs(w[0] + w[1] + w[2] + w[3] - 1.0f) < 1e-6);
    /* k = n keeps every element */
    int32_t all[8];
    mp_topk_select(v, 8, 8, all);
    int seen = 0;
    for (int i = 0; i < 8; i++)
        seen |= 1 << all[i];
    EXPECT(seen == 0xff);

    /* SwiGLU: silu(g)·u */
    EXPECT(fabsf(mp_swiglu(0.0f, 5.0f)) < 1e-7f);
    EXPECT(fabsf(mp_swiglu(2.0f, 3.0f) - (float)(2.0 / (1.0 + exp(-2.0)) * 3.0)) < 1e-5f);
    EXPECT(mp_swiglu(-20.0f, 1.0f) > -1e-6f && mp_swiglu(-20.0f, 1.0f) < 0.0f);

    /* permutation and combine against a naive loop */
    int32_t src[5] = {3, 0, 3, 1, 2};
    for (long i = 0; i < 5; i++)
        EXPECT(mp_permute_src(src, i) == src[i]);
    const int H = 3;
    float rows[5 * 3], cw[5] = {0.5f, 0.25f, 0.125f, 1.0f, 2.0f};
    for (int i = 0; i < 15; i++)
        rows[i] = (float)(i % 7) - 2.0f;
    int32_t tok[5] = {1, 0, 1, 2, 1};
    int32_t order[5] = {1, 0, 2, 4, 3}; /* rows sorted by token: token 0: {1}, 1: {0,2,4}, 2: {3} */
    long first[3] = {0, 1, 4}, count[3] = {1, 3, 1};
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < H; h++) {
            float naive = 10.0f * t;
            for (int i = 0; i < 5; i++)
                if (tok[i] == t)
                    naive += cw[i] * rows[i * H + h];
            EXPECT(fabsf(mp_combine_elem(rows, order, cw, first[t], count[t], H, h, 10.0f * t) -
                         naive) < 1e-5f);
        }

    /* padded capacity: ⌈tokens·K·factor/E⌉ up to a multiple of align, never above the tokens a
     * source holds (a token picks an expert once), at least one row; factor 0: lossless */
    EXPECT(mp_padded_capacity(128, 8, 128, 1.0, 1) == 8);
    EXPECT(mp_padded_capacity(128, 8, 128, 1.25, 16) == 16);
    EXPECT(mp_padded_capacity(1, 8, 128, 1.0, 4) == 1);
    EXPECT(mp_padded_capacity(0, 8, 128, 2.0, 1) == 1);
    EXPECT(mp_padded_capacity(64, 8, 16, 0.0, 1) == 64);
    EXPECT(mp_padded_capacity(64, 8, 16, 4.0, 1) == 64);
    /* slot rows: peer-contiguous blocks of max_local·cap rows; expert-major on the receiver */
    EXPECT(mp_padded_row(2, 1, 3, 4, 5) == (2 * 4 + 1) * 5 + 3);
    EXPECT(mp_padded_row(0, 0, 5, 4, 5) == -1);
    EXPECT(mp_padded_expert_row(3, 2, 1, 4, 5) == (2 * 4 + 3) * 5 + 1);

    /* the device plan: 2 ranks × 2 local experts = 4 cells; expert 0 has holders in cells 0 and 2
     * (the token picks: even → 0, odd → 2), expert 1 is in cell 1, expert 2 in cell 3; tokens
     * 10..13 (tok0 10), top-2 */
    const int32_t off[4] = {0, 2, 3, 4}, cellv[4] = {0, 2, 1, 3};
    const int32_t pids[8] = {0, 1, 0, 2, 1, 0, 2, 0};
    const float pw[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    EXPECT(mp_dplan_cell(off, cellv, 0, 10) == 0 && mp_dplan_cell(off, cellv, 0, 11) == 2);
    EXPECT(mp_dplan_cell(off, cellv, 1, 11) == 1 && mp_dplan_cell(off, cellv, 2, 12) == 3);
    /* pairs' cells 0 1 2 3 1 0 3 2: sorted stably by cell, token order inside a cell */
    int32_t dtok[8], totals[4], rop[8];
    float dw[8];
    device_plan_on_host(off, cellv, pids, pw, 8, 2, 10, 4, 0, 2, dtok, dw, totals, rop);
    const int32_t want_tok[8] = {0, 2, 0, 2, 1, 3, 1, 3};
    const float want_w[8] = {1, 6, 2, 5, 3, 8, 4, 7};
    for (int i = 0; i < 8; i++)
        EXPECT(dtok[i] == want_tok[i] && dw[i] == want_w[i]);
    EXPECT(totals[0] == 2 && totals[1] == 2 && totals[2] == 2 && totals[3] == 2);
    /* the combine gathered per token from each pair's row equals the rows scattered to their
     * tokens, whole and in two windows added up (a pipelined layer's chunks) */
    float prows[8 * 2];
    for (int i = 0; i < 16; i++)
        prows[i] = (float)(i % 5) - 1.5f;
    for (long t = 0; t < 4; t++)
        for (int h = 0; h < 2; h++) {
            float whole = scatter_elem(prows, dtok, dw, 0, 8, 2, t, h, 0.5f);
            EXPECT(fabsf(gather_elem(prows, rop, pw, 0, 8, 2, 2, t, h, 0.5f) - whole) < 1e-5f);
            float part = gather_elem(prows, rop, pw, 0, 3, 2, 2, t, h, 0.5f);
            part = gather_elem(prows + 3 * 2, rop, pw, 3, 5, 2, 2, t, h, part);
            EXPECT(fabsf(part - whole) < 1e-5f);
        }
    /* padded, one row per slot: the first pair of each cell, the second dropped */
    int32_t ptok[4] = {-1, -1, -1, -1}, prop[8];
    float prw[4];
    device_plan_on_host(off, cellv, pids, pw, 8, 2, 10, 4, 1, 2, ptok, prw, totals, prop);
    EXPECT(ptok[0] == 0 && ptok[1] == 0 && ptok[2] == 1 && ptok[3] == 1);
    EXPECT(prw[0] == 1 && prw[1] == 2 && prw[2] == 3 && prw[3] == 4);
    /* dropped pairs have no row and add nothing; the kept ones match the slot rows scattered */
    EXPECT(prop[0] == 0 && prop[1] == 1 && prop[2] == 2 && prop[3] == 3);
    EXPECT(prop[4] == -1 && prop[5] == -1 && prop[6] == -1 && prop[7] == -1);
    for (long t = 0; t < 4; t++)
        for (int h = 0; h < 2; h++)
            EXPECT(fabsf(gather_elem(prows, prop, pw, 0, 4, 2, 2, t, h, 0.0f) -
                         scatter_elem(prows, ptok, prw, 0, 4, 2, t, h, 0.0f)) < 1e-5f);
    EXPECT(mp_combine_pick(5, 3, 2) == -1 && mp_combine_pick(4, 3, 2) == 1 &&
           mp_combine_pick(-1, 0, 8) == -1);
    EXPECT(mp_dplan_key_bits(4) == 3); /* keys 0..4, 4 = unsent */

    /* copy_rows_kernel's lookup: the runs of a list with an empty chunk and a break on one side,
     * each row of the launch mapped to its source and destination row as the kernel does */
    const struct mp_chunk moves[4] = {{0, 10, 2}, {2, 12, 1}, {7, 7, 0}, {3, 0, 3}};
    int32_t rstart[5], rsrc[4], rdst[4];
    int at = 0, nrun = mp_chunks_table(moves, 4, &at, 4, rstart, rsrc, rdst);
    EXPECT(nrun == 2 && rstart[1] == 3 && rstart[2] == 6 && at == 4);
    const long want_from[6] = {0, 1, 2, 3, 4, 5}, want_to[6] = {10, 11, 12, 0, 1, 2};
    for (int32_t r = 0; r < rstart[nrun]; r++) {
        int run = mp_chunk_find(rstart, nrun, r);
        EXPECT(rsrc[run] + (r - rstart[run]) == want_from[r] && rdst[run] + (r - rstart[run]) == want_to[r]);
    }

    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    /* cuBLASLt and cuBLAS load when asked (cublas_entry.h): this program links neither, and every
     * entry point the backend calls resolves from the toolkit's libraries; no GPU is needed for that.
     * cuBLASLt first: libcublas maps it as a dependency. */
    struct mp_cublaslt_entry lt = {};
    expect_loads(&lt, mp_cublaslt_load, MP_CUBLASLT_SONAME, "mp_cublaslt_load");
#define EXPECT_LT_ENTRY(field, fn, type) EXPECT(lt.field != NULL);
    MP_CUBLASLT_ENTRIES(EXPECT_LT_ENTRY)
#undef EXPECT_LT_ENTRY
    struct mp_cublas_entry blas = {};
    expect_loads(&blas, mp_cublas_load, MP_CUBLAS_SONAME, "mp_cublas_load");
#define EXPECT_ENTRY(field, fn, type) EXPECT(blas.field != NULL);
    MP_CUBLAS_ENTRIES(EXPECT_ENTRY)
#undef EXPECT_ENTRY
    return failures ? 1 : 0;
}
