/* test_kernels.c - the cpu backend's kernels against the plain-loop reference: gate choices, FFN
 * of one expert, TP shards that sum to the full FFN, and the weighted combine. */
#include <stdlib.h>

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

int main(void)
{
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
