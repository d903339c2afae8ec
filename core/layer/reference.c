/* reference.c - the single-process reference MoE forward (see reference.h). */
#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "error.h"
#include "fp8.h"
#include "weights.h"

struct scored {
    double v;
    int id;
};

static int by_value_desc(const void *pa, const void *pb)
{
    const struct scored *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return a->id - b->id;
}

/* Score of the group s[e0 .. e0+size) (by expert id, unsorted): the sum of its two largest
 * exp(l − lmax), the rule of mp_group_score (kernels/topk.h) in double. */
static double group_score(const struct scored *s, int e0, int size, double lmax)
{
    double a = -INFINITY, b = -INFINITY;
    for (int e = e0; e < e0 + size; e++) {
        if (s[e].v > a) {
            b = a;
            a = s[e].v;
        } else if (s[e].v > b) {
            b = s[e].v;
        }
    }
    return exp(a - lmax) + (size > 1 ? exp(b - lmax) : 0.0);
}

/* Group limit: mask (value −∞) the experts of every group that is not among the M best by
 * group_score, ties to the lower group index. */
static void limit_groups(struct scored *s, int E, int G, int M)
{
    int size = E / G;
    double lmax = -INFINITY;
    for (int e = 0; e < E; e++)
        lmax = s[e].v > lmax ? s[e].v : lmax;
    double *score = malloc((size_t)G * sizeof *score);
    if (!score)
        abort();
    for (int g = 0; g < G; g++)
        score[g] = group_score(s, g * size, size, lmax);
    for (int g = 0; g < G; g++) {
        int better = 0;
        for (int h = 0; h < G; h++)
            better += score[h] > score[g] || (score[h] == score[g] && h < g);
        if (better >= M)
            for (int e = g * size; e < (g + 1) * size; e++)
                s[e].v = -INFINITY;
    }
    free(score);
}

void mp_reference_gate(const float *x, const float *wg, const float *noise, long ntok, int H, int E,
                       int K, int G, int M, int32_t *ids, float *w)
{
    struct scored *s = malloc((size_t)E * sizeof *s);
    if (!s)
        abort();
    for (long t = 0; t < ntok; t++) {
        for (int e = 0; e < E; e++) {
            double acc = 0.0;
            for (int i = 0; i < H; i++)
                acc += (double)x[t * H + i] * wg[(size_t)i * E + e];
            /* the backends add noise to fp32 logits; do the same rounding so choices agree */
            float l = (float)acc;
            if (noise)
                l += noise[t * E + e];
            s[e].v = l;
            s[e].id = e;
        }
        if (G > 0)
            limit_groups(s, E, G, M);
        qsort(s, (size_t)E, sizeof *s, by_value_desc);
        double sum = 0.0;
        for (int k = 0; k < K; k++)
            sum += exp(s[k].v - s[0].v);
        for (int k = 0; k < K; k++) {
            ids[t * K + k] = s[k].id;
            w[t * K + k] = (float)(exp(s[k].v - s[0].v) / sum);
        }
    }
    free(s);
}

/* How an FFN with fp8 weights computes (w8a8): its GEMMs' inputs go through the fp8 round trip of
 * their 128-value blocks (the GEMM multiplies codes and applies both scales to each block's sum,
 * so the dequantized values are not rounded again), the intermediate activation in blocks of each
 * TP shard of `shard` values (blocks restart at every shard's first value, as each rank quantizes
 * its own); with `bf16`, gate, up and activation are rounded to bf16 before, as a bf16 backend
 * stores them. shard 0: no quantization (the unquantized FFN). */
struct ffn_quant {
    int shard, bf16;
    float *act;          /* [D] scratch */
    unsigned char *wire; /* a packed row of up to `shard` values */
};

/* y_t += scale · FFN(x_t) with the full weights of one expert, accumulated in double. */
static void ffn_token(const float *xt, const float *wgu, const float *wd, int H, int D, double scale,
                      const struct ffn_quant *q, double *gate, double *up, double *yt)
{
    memset(gate, 0, (size_t)D * sizeof *gate);
    memset(up, 0, (size_t)D * sizeof *up);
    for (int i = 0; i < H; i++) {
        const float *row = wgu + (size_t)i * 2 * D;
        double xi = xt[i];
        for (int j = 0; j < D; j++) {
            gate[j] += xi * row[j];
            up[j] += xi * row[D + j];
        }
    }
    if (q->shard > 0) { /* the activation as the down projection's fp8 GEMM reads it */
        for (int j = 0; j < D; j++) {
            double g = q->bf16 ? mp_bf16_round((float)gate[j]) : gate[j];
            double u = q->bf16 ? mp_bf16_round((float)up[j]) : up[j];
            double a = g / (1.0 + exp(-g)) * u;
            q->act[j] = q->bf16 ? mp_bf16_round((float)a) : (float)a;
        }
        for (int s0 = 0; s0 < D; s0 += q->shard)
            mp_fp8_round_trip_row(q->act + s0, q->shard, q->wire, q->act + s0);
    }
    for (int j = 0; j < D; j++) {
        double a = q->shard > 0 ? q->act[j] * scale : gate[j] / (1.0 + exp(-gate[j])) * up[j] * scale;
        const float *row = wd + (size_t)j * H;
        for (int h = 0; h < H; h++)
            yt[h] += a * row[h];
    }
}

int mp_reference_fp8_inputs(const float *x, long ntok, int H, int bf16, float *xq)
{
    unsigned char *wire = malloc(mp_fp8_row_bytes(H));
    if (!wire) {
        mp_error("reference: out of memory for an fp8 row of H=%d", H);
        return MP_ERR_RUNTIME;
    }
    for (long t = 0; t < ntok; t++) {
        float *row = xq + t * H;
        for (int i = 0; i < H; i++)
            row[i] = bf16 ? mp_bf16_round(x[t * H + i]) : x[t * H + i];
        mp_fp8_round_trip_row(row, H, wire, row);
        for (int i = 0; bf16 && i < H; i++)
            row[i] = mp_bf16_round(row[i]);
    }
    free(wire);
    return MP_OK;
}

int mp_reference_fp8_weights(uint64_t seed, int expert, int H, int D, int tp, int blocked,
                             float *wgu, float *wd)
{
    int Dl = D / tp, rc = MP_ERR_RUNTIME;
    size_t h = (size_t)H, dl = (size_t)Dl;
    long blocks = mp_fp8_weight_blocks(H, Dl);
    float *sgu = malloc(h * 2 * dl * sizeof *sgu), *sd = malloc(dl * h * sizeof *sd);
    float *scales = malloc((size_t)blocks * sizeof *scales);
    uint8_t *codes = malloc(h * 2 * dl);
    if (!sgu || !sd || !scales || !codes) {
        mp_error("reference: out of memory for the fp8 weights of H=%d D=%d", H, D);
        goto out;
    }
    for (int r = 0; r < tp; r++) {
        mp_weights_expert(seed, expert, H, D, tp, r, blocked, sgu, sd);
        /* each matrix of the shard through its own 128×128 blocks' round trip, in place (not
         * through the images the layer stores: only the block format is shared) */
        mp_fp8_weight_round_trip(sgu, H, Dl, 2 * Dl, codes, scales, sgu);      /* Wg */
        mp_fp8_weight_round_trip(sgu + dl, H, Dl, 2 * Dl, codes, scales, sgu + dl); /* Wu */
        mp_fp8_weight_round_trip(sd, Dl, H, H, codes, scales, sd);             /* Wd */
        /* shard r: columns [r·Dl, (r+1)·Dl) of Wg and Wu, rows [r·Dl, (r+1)·Dl) of Wd */
        for (size_t i = 0; i < h; i++)
            for (size_t j = 0; j < dl; j++) {
                wgu[i * 2 * D + (size_t)r * dl + j] = sgu[i * 2 * dl + j];
                wgu[i * 2 * D + (size_t)D + (size_t)r * dl + j] = sgu[i * 2 * dl + dl + j];
            }
        memcpy(wd + (size_t)r * dl * h, sd, dl * h * sizeof *sd);
    }
    rc = MP_OK;
out:
    free(sgu);
    free(sd);
    free(scales);
    free(codes);
    return rc;
}

int mp_reference_forward(uint64_t seed, int H, int D, int E, int nshared, int blocked,
                         int fp8_weights_tp, int bf16, const float *x, const float *xr, long ntok,
                         int K, const int32_t *ids, const float *w, float *y)
{
    if (!xr)
        xr = x;
    int rc = MP_ERR_RUNTIME, fp8w = fp8_weights_tp > 0;
    float *wgu = malloc((size_t)H * 2 * D * sizeof *wgu);
    float *wd = malloc((size_t)D * H * sizeof *wd);
    double *acc = calloc((size_t)ntok * H, sizeof *acc);
    double *gate = malloc((size_t)D * sizeof *gate), *up = malloc((size_t)D * sizeof *up);
    struct ffn_quant q = {fp8w ? D / fp8_weights_tp : 0, bf16, malloc((size_t)D * sizeof(float)),
                          malloc(mp_fp8_row_bytes(D) + mp_fp8_row_bytes(H))};
    /* fp8 weights: the GEMMs' inputs as they read them (the routed experts' after the dispatch) */
    float *xg = fp8w ? malloc((size_t)ntok * H * sizeof *xg) : NULL;
    float *xs = fp8w ? malloc((size_t)ntok * H * sizeof *xs) : NULL;
    if (!wgu || !wd || !acc || !gate || !up || !q.act || !q.wire || (fp8w && (!xg || !xs))) {
        mp_error("reference: out of memory for H=%d D=%d tokens=%ld", H, D, ntok);
        goto out;
    }
    for (long t = 0; fp8w && t < ntok; t++) { /* the GEMMs' inputs: bf16 values quantized */
        for (int i = 0; i < H; i++) {
            xg[t * H + i] = bf16 ? mp_bf16_round(xr[t * H + i]) : xr[t * H + i];
            xs[t * H + i] = bf16 ? mp_bf16_round(x[t * H + i]) : x[t * H + i];
        }
        mp_fp8_round_trip_row(xg + t * H, H, q.wire, xg + t * H);
        mp_fp8_round_trip_row(xs + t * H, H, q.wire, xs + t * H);
    }
    const float *routed_in = fp8w ? xg : xr, *shared_in = fp8w ? xs : x;
    for (int e = 0; e < E + nshared; e++) {
        int used = e >= E; /* shared experts serve every token */
        for (long p = 0; !used && p < ntok * K; p++)
            used = ids[p] == e;
        if (!used)
            continue;
        if (fp8w) {
            if (mp_reference_fp8_weights(seed, e, H, D, fp8_weights_tp, blocked, wgu, wd) !=
                MP_OK)
                goto out;
        } else {
            mp_weights_expert(seed, e, H, D, 1, 0, blocked, wgu, wd);
        }
        for (long t = 0; t < ntok; t++) {
            if (e >= E) {
                ffn_token(shared_in + t * H, wgu, wd, H, D, 1.0, &q, gate, up, acc + t * H);
                continue;
            }
            for (int k = 0; k < K; k++)
                if (ids[t * K + k] == e)
                    ffn_token(routed_in + t * H, wgu, wd, H, D, w[t * K + k], &q, gate, up,
                              acc + t * H);
        }
    }
    for (long i = 0; i < ntok * H; i++)
        y[i] = (float)acc[i];
    rc = MP_OK;
out:
    free(wgu);
    free(wd);
    free(acc);
    free(gate);
    free(up);
    free(q.act);
    free(q.wire);
    free(xg);
    free(xs);
    return rc;
}

double mp_rel_error(const float *a, const float *b, long n)
{
    double num = 0.0, den = 0.0;
    for (long i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den == 0.0)
        return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}
