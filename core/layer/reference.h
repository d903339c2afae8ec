/* reference.h - the single-process reference MoE forward, plain loops in double precision, that
 * --check compares the distributed layer against. */
#ifndef MP_REFERENCE_H
#define MP_REFERENCE_H

#include <stdint.h>

/* Reference gate: logits in double, top-k by value (ties: lower id), softmax over the chosen k.
 * With G > 0 (--group-limit G:M) only the experts of the M best of G groups of consecutive
 * experts compete, a group scored by the sum of its two largest softmax numerators (the rule of
 * kernels/topk.h). noise: [ntok·E] or NULL. Written independently of the backends' gate. */
void mp_reference_gate(const float *x, const float *wg, const float *noise, long ntok, int H, int E,
                       int K, int G, int M, int32_t *ids, float *w);

/* y[t] = Σ_k w[t,k]·FFN_{ids[t,k]}(xr_t) + Σ_s FFN_{E+s}(x_t) for ntok tokens, with the full
 * (unsharded) weights of weights.h rebuilt from `seed`. FFN is SwiGLU: (silu(x·Wg) ⊙ x·Wu)·Wd.
 * xr: the routed experts' inputs, the tokens as dispatched (x itself, or x after an fp8 round
 * trip: mp_reference_fp8_inputs); NULL: x. The shared experts read x (never dispatched).
 * blocked: the weights generated blocked (mp_weights_expert). fp8_weights_tp: 0, every
 * expert's weights as generated; tp > 0, the FFN as --weight-dtype fp8 computes it on a layer of
 * TP degree tp (w8a8, docs/METRICS.md "FP8 weights"): every expert's weights (routed and shared)
 * as stored (mp_reference_fp8_weights), each GEMM's input rows through the fp8 round trip of
 * their 128-value blocks, not rounded again (the tokens once more, the activation per TP shard of
 * D/tp values); bf16: a backend with bf16 buffers, whose tokens, gate, up and activation are bf16
 * values before they are quantized (used with fp8 weights only). Returns MP_OK or MP_ERR_RUNTIME (out of memory). */
int mp_reference_forward(uint64_t seed, int H, int D, int E, int nshared, int blocked,
                         int fp8_weights_tp, int bf16, const float *x, const float *xr, long ntok,
                         int K, const int32_t *ids, const float *w, float *y);

/* The full weights of `expert` (wgu H×2D as [Wg | Wu], wd D×H) as fp8 weights deliver them to a
 * layer of TP degree tp: each TP rank's shard (mp_weights_expert) quantized in 128×128 blocks of
 * its own, as the layer stores it (base/fp8.h: [Wg | Wu] as two H×D/tp parts, Wd as one), then
 * dequantized and put back in its place. MP_OK or MP_ERR_RUNTIME (out of memory). */
int mp_reference_fp8_weights(uint64_t seed, int expert, int H, int D, int tp, int blocked,
                             float *wgu, float *wd);

/* xq = the ntok rows of H values of x as an fp8 dispatch delivers them: each row packed into e4m3
 * codes with one scale per 128 values and unpacked (base/fp8.h). With `bf16` (a backend whose
 * activations are bf16: elem_size 2), as that backend computes it: each value of x rounded to bf16
 * first (the activation it packs), and each unpacked value too (the activation the expert reads;
 * base/bf16.h). MP_OK or MP_ERR_RUNTIME. */
int mp_reference_fp8_inputs(const float *x, long ntok, int H, int bf16, float *xq);

/* ‖a − b‖₂ / ‖b‖₂ over n elements, in double (0 when both are zero). */
double mp_rel_error(const float *a, const float *b, long n);

#endif
