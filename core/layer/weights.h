/* weights.h - deterministic expert weights, gate weights and token activations: element (i, j) of
 * every matrix is a pure function of the seed, so a rank builds only its shard and the reference
 * rebuilds the whole layer. */
#ifndef MP_WEIGHTS_H
#define MP_WEIGHTS_H

#include <stdint.h>

/* Shared experts are numbered after the routed ones: shared expert s has id experts + s. */

/* Shard `tp_rank` of `tp` of expert `expert` (full matrices W_gate, W_up: H×D; W_down: D×H).
 * wgu: H × 2·Dl row-major, columns [0, Dl) from W_gate and [Dl, 2·Dl) from W_up, where the shard
 * holds global columns [tp_rank·Dl, (tp_rank+1)·Dl), Dl = D / tp. wd: Dl × H, the same rows of
 * W_down. Values are uniform in [−1, 1) scaled by 1/√H (gate, up) and 1/√D (down). With
 * `blocked` (every point of a sweep with an fp8 --weight-dtype), each 128×128 block of each full
 * matrix (base/fp8.h's weight blocks at tp1) is scaled by 4^−j, j in 0..3 drawn per expert, matrix
 * and block, so blocks differ in magnitude and a scale applied to the wrong block shows in
 * --check. */
void mp_weights_expert(uint64_t seed, int expert, int H, int D, int tp, int tp_rank, int blocked,
                       float *wgu, float *wd);

/* One element of expert `expert`'s full matrices: which = 0 gate, 1 up (row i < H, col j < D),
 * 2 down (row i < D, col j < H). */
float mp_weight_at(uint64_t seed, int expert, int which, int H, int D, long i, long j);

/* Router weights Wg: H × E row-major, uniform in [−1, 1) scaled by 4/√H (logits of spread ~2). */
void mp_weights_gate(uint64_t seed, int H, int E, float *wg);

/* Activations of global tokens [tok0, tok0+ntok): x[(t−tok0)·H + h], uniform in [−1, 1). */
void mp_activations(uint64_t seed, long tok0, long ntok, int H, float *x);

/* The activations of a point whose dispatched rows travel in fp8 (--dispatch-dtype fp8): those of
 * mp_activations with each block of 128 values of a token (base/fp8.h's blocks) scaled by 4^−j,
 * j in 0..3 drawn per token and block, so the blocks of a row and the rows differ in magnitude as
 * activations with outlier channels do, and a scale applied to the wrong block or row shows in
 * --check. */
void mp_activations_blocked(uint64_t seed, long tok0, long ntok, int H, float *x);

#endif
