/* weights.c - generation of the layer's weights and activations from the seed (see weights.h). */
#include "weights.h"

#include <math.h>

#include "fp8.h"
#include "rng.h"

/* Stream tags keep weights, router and activations independent of each other. */
enum { TAG_EXPERT = 0x6578, TAG_GATE = 0x6761, TAG_ACT = 0x6163, TAG_BLOCK = 0x626b,
       TAG_WBLOCK = 0x7762 };

static inline float sym_uniform(uint64_t h) { return (float)(2.0 * mp_u01(h) - 1.0); }

/* One hash per matrix row; elements of the row are SplitMix64 steps from it (one mix each). */
static inline uint64_t row_hash(uint64_t seed, int expert, int which, long i)
{
    return mp_hash4(seed ^ TAG_EXPERT, ((uint64_t)expert << 2) | (uint64_t)which, (uint64_t)i, 0);
}

float mp_weight_at(uint64_t seed, int expert, int which, int H, int D, long i, long j)
{
    float scale = which == 2 ? (float)(1.0 / sqrt((double)D)) : (float)(1.0 / sqrt((double)H));
    return scale * sym_uniform(mp_mix64(row_hash(seed, expert, which, i) + (uint64_t)j));
}

/* --weight-dtype's blocked weights: the factor 4^−j of the 128×128 block holding element (i, j)
 * of matrix `which` of `expert`, j drawn from the block's hash. */
static inline float block_factor(uint64_t seed, int expert, int which, long i, long j)
{
    uint64_t h = mp_hash4(seed ^ TAG_WBLOCK, ((uint64_t)expert << 2) | (uint64_t)which,
                          (uint64_t)(i / MP_FP8_BLOCK), (uint64_t)(j / MP_FP8_BLOCK));
    return ldexpf(1.0f, -2 * (int)(h & 3));
}

void mp_weights_expert(uint64_t seed, int expert, int H, int D, int tp, int tp_rank, int blocked,
                       float *wgu, float *wd)
{
    int Dl = D / tp;
    long c0 = (long)tp_rank * Dl;
    float su = (float)(1.0 / sqrt((double)H)), sd = (float)(1.0 / sqrt((double)D));
    for (long i = 0; i < H; i++) {
        float *row = wgu + i * 2L * Dl;
        uint64_t hg = row_hash(seed, expert, 0, i), hu = row_hash(seed, expert, 1, i);
        for (long j = 0; j < Dl; j++) {
            row[j] = su * sym_uniform(mp_mix64(hg + (uint64_t)(c0 + j)));
            row[Dl + j] = su * sym_uniform(mp_mix64(hu + (uint64_t)(c0 + j)));
        }
    }
    for (long i = 0; i < Dl; i++) {
        uint64_t hd = row_hash(seed, expert, 2, c0 + i);
        for (long j = 0; j < H; j++)
            wd[i * H + j] = sd * sym_uniform(mp_mix64(hd + (uint64_t)j));
    }
    if (!blocked)
        return;
    for (long i = 0; i < H; i++)
        for (long j = 0; j < Dl; j++) {
            wgu[i * 2L * Dl + j] *= block_factor(seed, expert, 0, i, c0 + j);
            wgu[i * 2L * Dl + Dl + j] *= block_factor(seed, expert, 1, i, c0 + j);
        }
    for (long i = 0; i < Dl; i++)
        for (long j = 0; j < H; j++)
            wd[i * H + j] *= block_factor(seed, expert, 2, c0 + i, j);
}

void mp_weights_gate(uint64_t seed, int H, int E, float *wg)
{
    float scale = (float)(4.0 / sqrt((double)H));
    for (long i = 0; i < (long)H * E; i++)
        wg[i] = scale * sym_uniform(mp_hash4(seed ^ TAG_GATE, (uint64_t)i, 0, 0));
}

void mp_activations(uint64_t seed, long tok0, long ntok, int H, float *x)
{
    for (long t = 0; t < ntok; t++) {
        uint64_t ht = mp_hash4(seed ^ TAG_ACT, (uint64_t)(tok0 + t), 0, 0);
        for (long h = 0; h < H; h++)
            x[t * H + h] = sym_uniform(mp_mix64(ht + (uint64_t)h));
    }
}

void mp_activations_blocked(uint64_t seed, long tok0, long ntok, int H, float *x)
{
    mp_activations(seed, tok0, ntok, H, x);
    for (long t = 0; t < ntok; t++)
        for (int b = 0; b < mp_fp8_blocks(H); b++) {
            int j = (int)(mp_hash4(seed ^ TAG_BLOCK, (uint64_t)(tok0 + t), (uint64_t)b, 0) & 3);
            float f = ldexpf(1.0f, -2 * j);
            for (int h = b * MP_FP8_BLOCK; h < H && h < (b + 1) * MP_FP8_BLOCK; h++)
                x[t * H + h] *= f;
        }
}
