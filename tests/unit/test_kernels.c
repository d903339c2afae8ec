/* test_kernels.c - the cpu backend's kernels against the plain-loop reference: gate choices, FFN
 * of one expert, TP shards that sum to the full FFN, and the weighted combine; and the calls
 * mp_compute_expert_ffn makes for shared experts. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute.h"
#include "error.h"
#include "reference.h"
#include "weights.h"

#define HH 64
#define DD 96
#define E 6
#define KK 2
#define T 9

/* the expert_ffn calls a recording backend received */
static struct mp_ffn_args calls[8];
static long call_rows[8][2];
static int ncalls;
static int record_ffn(struct mp_compute *c, const struct mp_ffn_args *a)
{
    (void)c;
    if (ncalls < 8) {
        calls[ncalls] = *a;
        call_rows[ncalls][0] = a->row_off[0]; /* the row offsets may live on the caller's stack */
        call_rows[ncalls][1] = a->row_off[a->nexp > 0 ? 1 : 0];
    }
    ncalls++;
    return MP_OK;
}

/* mp_compute_expert_ffn: shared experts in the same call where shared_gemm_modes has the mode,
 * else the routed call then one call per shared expert, each on its own output rows */
static void check_shared_calls(void)
{
    struct mp_compute_ops rec = mp_compute_cpu;
    rec.expert_ffn = record_ffn;
    void *w[5] = {(void *)0x10, (void *)0x20, (void *)0x30, (void *)0x40, (void *)0x50};
    long off[4] = {0, 2, 2, 5};
    float in[5], xs[3], out[5 * 4 + 2 * 3 * 4];
    struct mp_ffn_args a = {.in = in, .out = out, .row_off = off, .nexp = 3, .wgu = w, .wd = w,
                            .H = 4, .Dl = 2, .gemm = MP_GEMM_FUSED, .nshared = 2,
                            .shared_rows = 3, .shared_in = xs, .shared_out = out + 5 * 4};
    ncalls = 0;
    CHECK_INT(mp_compute_expert_ffn(&rec, NULL, &a), MP_OK);
    CHECK_INT(ncalls, 3); /* cpu has no mode with shared experts in the call */
    CHECK_INT(calls[0].nexp, 3);
    CHECK_INT(calls[0].nshared, 0);
    for (int s = 0; s < 2; s++) {
        const struct mp_ffn_args *k = &calls[1 + s];
        CHECK_INT(k->nexp, 1);
        CHECK_INT(k->nshared, 0);
        CHECK(k->in == xs);
        CHECK(k->out == out + 5 * 4 + s * 3 * 4);
        CHECK(k->wgu[0] == w[3 + s] && k->wd[0] == w[3 + s]);
        CHECK_INT(call_rows[1 + s][0], 0);
        CHECK_INT(call_rows[1 + s][1], 3);
    }
    rec.gemm_modes = 1u << MP_GEMM_FUSED;
    rec.shared_gemm_modes = 1u << MP_GEMM_FUSED;
    ncalls = 0;
    CHECK_INT(mp_compute_expert_ffn(&rec, NULL, &a), MP_OK);
    CHECK_INT(ncalls, 1);
    CHECK(memcmp(&calls[0], &a, sizeof a) == 0);
    a.gemm = MP_GEMM_LOOP; /* a mode without: split again */
    ncalls = 0;
    CHECK_INT(mp_compute_expert_ffn(&rec, NULL, &a), MP_OK);
    CHECK_INT(ncalls, 3);
    a.nexp = 0; /* no routed experts (the expert cache's way): the shared ones only */
    ncalls = 0;
    CHECK_INT(mp_compute_expert_ffn(&rec, NULL, &a), MP_OK);
    CHECK_INT(ncalls, 2);
    a.shared_rows = 0; /* no tokens: nothing */
    ncalls = 0;
    CHECK_INT(mp_compute_expert_ffn(&rec, NULL, &a), MP_OK);
    CHECK_INT(ncalls, 0);
}

int main(void)
{
    check_shared_calls();
    const struct mp_compute_ops *o = &mp_compute_cpu;
    struct mp_compute *c;
    CHECK_INT(o->init(&c, 0), MP_OK);
    uint64_t seed = 42;
    float *x = malloc(sizeof(float) * T * HH), *wg = malloc(sizeof(float) * HH * E);
    mp_activations(seed, 0, T, HH, x);
    mp_weights_gate(seed, HH, E, wg);

    /* gate: same experts and weights as the reference gate */
    int32_t ids[T * KK], rids[T * KK];
    float w[T * KK], rw[T * KK];
    CHECK_INT(o->gate(c, x, wg, NULL, T, HH, E, KK, 0, 0, ids, w), MP_OK);
    mp_reference_gate(x, wg, NULL, T, HH, E, KK, 0, 0, rids, rw);
    for (int i = 0; i < T * KK; i++) {
        CHECK_INT(ids[i], rids[i]);
        CHECK_NEAR(w[i], rw[i], 1e-5);
    }

    /* FFN of expert 3 for all tokens, full (tp 1) and as two TP shards summed */
    float *wgu = malloc(sizeof(float) * HH * 2 * DD), *wd = malloc(sizeof(float) * DD * HH);
    float *work = malloc(sizeof(float) * T * 2 * DD), *out = malloc(sizeof(float) * T * HH);
    float *sum = calloc(T * HH, sizeof(float)), *ref = malloc(sizeof(float) * T * HH);
    long off[2] = {0, T};
    mp_weights_expert(seed, 3, HH, DD, 1, 0, 0, wgu, wd);
    void *pg = wgu, *pd = wd;
    struct mp_ffn_args a = {.in = x, .out = out, .row_off = off, .nexp = 1, .wgu = &pg, .wd = &pd,
                            .H = HH, .Dl = DD, .work = work};
    CHECK_INT(o->expert_ffn(c, &a), MP_OK);
    /* reference: every token routed to expert 3 alone with weight 1 */
    int32_t one_ids[T];
    float one_w[T];
    for (int t = 0; t < T; t++) {
        one_ids[t] = 3;
        one_w[t] = 1.0f;
    }
    CHECK_INT(mp_reference_forward(seed, HH, DD, E, 0, 0, 0, 0, x, NULL, T, 1, one_ids, one_w, ref), MP_OK);
    CHECK(mp_rel_error(out, ref, T * HH) < 1e-6);
    for (int s = 0; s < 2; s++) {
        mp_weights_expert(seed, 3, HH, DD, 2, s, 0, wgu, wd);
        a.Dl = DD / 2;
        CHECK_INT(o->expert_ffn(c, &a), MP_OK);
        for (int i = 0; i < T * HH; i++)
            sum[i] += out[i];
    }
    CHECK(mp_rel_error(sum, ref, T * HH) < 1e-6);
    /* a shard holds the right columns of the full matrices */
    CHECK_NEAR(wgu[5 * DD + 7], mp_weight_at(seed, 3, 0, HH, DD, 5, DD / 2 + 7), 0);
    CHECK_NEAR(wd[2 * HH + 1], mp_weight_at(seed, 3, 2, HH, DD, DD / 2 + 2, 1), 0);

    /* combine: y[t] = shared[t] + Σ w·row for rows of token t */
    float rows[3 * 2] = {1, 2, 3, 4, 5, 6}, shared[2 * 2] = {10, 20, 30, 40}, y[2 * 2];
    int32_t tok[3] = {1, 0, 1};
    float cw[3] = {0.5f, 2.0f, 1.0f};
    CHECK_INT(o->combine(c, rows, tok, cw, 0, 3, shared, 1, 2, 2, y, 0), MP_OK);
    CHECK_NEAR(y[0], 10 + 2 * 3, 1e-6);
    CHECK_NEAR(y[1], 20 + 2 * 4, 1e-6);
    CHECK_NEAR(y[2], 30 + 0.5 * 1 + 5, 1e-6);
    CHECK_NEAR(y[3], 40 + 0.5 * 2 + 6, 1e-6);
    /* a window of the index arrays: rows[i] pairs with tok[1 + i], cw[1 + i], added to y */
    CHECK_INT(o->combine(c, rows, tok, cw, 1, 2, NULL, 0, 2, 2, y, 1), MP_OK);
    CHECK_NEAR(y[0], 10 + 2 * 3 + 2 * 1, 1e-6);
    CHECK_NEAR(y[1], 20 + 2 * 4 + 2 * 2, 1e-6);
    CHECK_NEAR(y[2], 30 + 0.5 * 1 + 5 + 3, 1e-6);
    CHECK_NEAR(y[3], 40 + 0.5 * 2 + 6 + 4, 1e-6);

    /* permute and copy_rows move whole rows */
    int32_t src[3] = {2, 0, 1};
    float px[3 * 2] = {1, 2, 3, 4, 5, 6}, po[3 * 2], pc[3 * 2] = {0};
    CHECK_INT(o->permute(c, px, src, 0, 3, 2, po), MP_OK);
    CHECK_NEAR(po[0], 5, 0);
    CHECK_NEAR(po[3], 2, 0);
    CHECK_INT(o->permute(c, px, src, 1, 2, 2, po), MP_OK); /* rows of src[1], src[2] */
    CHECK_NEAR(po[0], 1, 0);
    CHECK_NEAR(po[3], 4, 0);
    struct mp_chunk ch[2] = {{.src = 0, .dst = 1, .n = 2}, {.src = 2, .dst = 0, .n = 1}};
    CHECK_INT(o->copy_rows(c, px, pc, ch, 2, 2), MP_OK);
    CHECK_NEAR(pc[0], 5, 0);
    CHECK_NEAR(pc[2], 1, 0);
    CHECK_NEAR(pc[5], 4, 0);

    free(x); free(wg); free(wgu); free(wd); free(work); free(out); free(sum); free(ref);
    o->fini(c);
    CHECK_DONE();
}
