/* test_fp8.c - base/fp8.h against the OCP e4m3 definition: all 256 codes decode to a table written
 * from the spec's formula (not from moeperf's code), every non-NaN code survives encode(decode(c)),
 * rounding is to nearest with ties to even, beyond ±448 and at ±inf it saturates, NaN stays NaN,
 * and a row's 128-value blocks round-trip within the bound fp8.h derives, with the last block of a
 * row whose length is not a multiple of 128 scaled by its own values; the 128×128 blocks of a
 * weight matrix, indexed, counted and round-tripped at shapes not divisible by 128, and their K-major
 * image (codes, padding, scale layout, block-row dequantization); base/bf16.h's
 * rounding (nearest, ties to even) and the reference's fp8 inputs on a bf16 backend: the bf16
 * values packed, the unpacked values rounded to bf16. */
#include <stdint.h>
#include <stdlib.h>

#include "bf16.h"
#include "check.h"
#include "fp8.h"
#include "reference.h"

/* The 256 codes' values, s eeee mmm: (−1)^s·2^(e−7)·(1+m/8), e = 0: (−1)^s·2^−6·m/8, S.1111.111
 * NaN (OCP OFP8 rev. 1.0, section 5.3), written out once by a short Python script of that formula. */
static const double e4m3_values[256] = {
    0.0, 0.001953125, 0.00390625, 0.005859375, 0.0078125, 0.009765625, 0.01171875, 0.013671875,
    0.015625, 0.017578125, 0.01953125, 0.021484375, 0.0234375, 0.025390625, 0.02734375, 0.029296875,
    0.03125, 0.03515625, 0.0390625, 0.04296875, 0.046875, 0.05078125, 0.0546875, 0.05859375,
    0.0625, 0.0703125, 0.078125, 0.0859375, 0.09375, 0.1015625, 0.109375, 0.1171875,
    0.125, 0.140625, 0.15625, 0.171875, 0.1875, 0.203125, 0.21875, 0.234375,
    0.25, 0.28125, 0.3125, 0.34375, 0.375, 0.40625, 0.4375, 0.46875,
    0.5, 0.5625, 0.625, 0.6875, 0.75, 0.8125, 0.875, 0.9375,
    1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875,
    2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75,
    4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5,
    8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
    16.0, 18.0, 20.0, 22.0, 24.0, 26.0, 28.0, 30.0,
    32.0, 36.0, 40.0, 44.0, 48.0, 52.0, 56.0, 60.0,
    64.0, 72.0, 80.0, 88.0, 96.0, 104.0, 112.0, 120.0,
    128.0, 144.0, 160.0, 176.0, 192.0, 208.0, 224.0, 240.0,
    256.0, 288.0, 320.0, 352.0, 384.0, 416.0, 448.0, NAN,
    -0.0, -0.001953125, -0.00390625, -0.005859375, -0.0078125, -0.009765625, -0.01171875, -0.013671875,
    -0.015625, -0.017578125, -0.01953125, -0.021484375, -0.0234375, -0.025390625, -0.02734375, -0.029296875,
    -0.03125, -0.03515625, -0.0390625, -0.04296875, -0.046875, -0.05078125, -0.0546875, -0.05859375,
    -0.0625, -0.0703125, -0.078125, -0.0859375, -0.09375, -0.1015625, -0.109375, -0.1171875,
    -0.125, -0.140625, -0.15625, -0.171875, -0.1875, -0.203125, -0.21875, -0.234375,
    -0.25, -0.28125, -0.3125, -0.34375, -0.375, -0.40625, -0.4375, -0.46875,
    -0.5, -0.5625, -0.625, -0.6875, -0.75, -0.8125, -0.875, -0.9375,
    -1.0, -1.125, -1.25, -1.375, -1.5, -1.625, -1.75, -1.875,
    -2.0, -2.25, -2.5, -2.75, -3.0, -3.25, -3.5, -3.75,
    -4.0, -4.5, -5.0, -5.5, -6.0, -6.5, -7.0, -7.5,
    -8.0, -9.0, -10.0, -11.0, -12.0, -13.0, -14.0, -15.0,
    -16.0, -18.0, -20.0, -22.0, -24.0, -26.0, -28.0, -30.0,
    -32.0, -36.0, -40.0, -44.0, -48.0, -52.0, -56.0, -60.0,
    -64.0, -72.0, -80.0, -88.0, -96.0, -104.0, -112.0, -120.0,
    -128.0, -144.0, -160.0, -176.0, -192.0, -208.0, -224.0, -240.0,
    -256.0, -288.0, -320.0, -352.0, -384.0, -416.0, -448.0, NAN,
};

static void check_decode_table(void)
{
    for (int c = 0; c < 256; c++) {
        float v = mp_fp8_decode((uint8_t)c);
        if (isnan(e4m3_values[c])) {
            CHECK(isnan(v));
            continue;
        }
        if ((double)v != e4m3_values[c] || !!signbit(v) != !!signbit(e4m3_values[c])) {
            fprintf(stderr, "code 0x%02x decodes to %a, expected %a\n", c, (double)v,
                    e4m3_values[c]);
            check_failures++;
        }
    }
    CHECK(mp_fp8_decode(0x7E) == MP_FP8_MAX);
}

/* encode(decode(c)) == c for every non-NaN code, both zeros included */
static void check_round_trip_codes(void)
{
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F)
            continue;
        int back = mp_fp8_encode(mp_fp8_decode((uint8_t)c));
        if (back != c) {
            fprintf(stderr, "encode(decode(0x%02x)) = 0x%02x\n", c, back);
            check_failures++;
        }
    }
}

/* Between adjacent codes c < c+1 (both finite, same sign): the midpoint goes to the even code (the
 * code's low bit is its mantissa's), a hair above it to c+1, a hair below to c. */
static void check_ties(void)
{
    for (int sign = 0; sign <= 0x80; sign += 0x80)
        for (int c = 0; c < 0x7E; c++) {
            float lo = mp_fp8_decode((uint8_t)(sign | c)), hi = mp_fp8_decode((uint8_t)(sign | (c + 1)));
            float mid = (lo + hi) / 2; /* exact: the codes have 4 significant bits */
            CHECK((double)mid == ((double)lo + (double)hi) / 2);
            int even = (c & 1) ? c + 1 : c;
            CHECK_INT(mp_fp8_encode(mid), sign | even);
            CHECK_INT(mp_fp8_encode(nextafterf(mid, hi)), sign | (c + 1));
            CHECK_INT(mp_fp8_encode(nextafterf(mid, lo)), sign | c);
        }
    /* subnormals: 2^−9·m is code m; 1.5·2^−9 ties to 2; below half the smallest subnormal: ±0 */
    for (int m = 1; m < 8; m++)
        CHECK_INT(mp_fp8_encode(ldexpf((float)m, -9)), m);
    CHECK_INT(mp_fp8_encode(1.5f * 0x1p-9f), 2);
    CHECK_INT(mp_fp8_encode(0x1p-10f), 0x00);
    CHECK_INT(mp_fp8_encode(-0x1p-10f), 0x80);
    CHECK_INT(mp_fp8_encode(1e-30f), 0x00);
    CHECK_INT(mp_fp8_encode(-1e-30f), 0x80);
    CHECK_INT(mp_fp8_encode(-0.0f), 0x80);
    CHECK_INT(mp_fp8_encode(0x1.8p-6f), 0x0C); /* normal: 2^−6·1.5 = e 1, m 4 */
}

static void check_saturation_and_nan(void)
{
    const float beyond[] = {448.0f, 449.0f, 463.9f, 464.0f, 480.0f, 1e6f, 3e38f, INFINITY};
    for (size_t i = 0; i < sizeof beyond / sizeof *beyond; i++) {
        CHECK_INT(mp_fp8_encode(beyond[i]), 0x7E);
        CHECK_INT(mp_fp8_encode(-beyond[i]), 0xFE);
    }
    CHECK_INT(mp_fp8_encode(NAN), 0x7F);
    CHECK_INT(mp_fp8_encode(-NAN), 0xFF);
    CHECK(isnan(mp_fp8_decode(0x7F)) && isnan(mp_fp8_decode(0xFF)));
    CHECK_INT(mp_fp8_encode(432.0f), 0x7E); /* the tie of 416 and 448: 448's mantissa 6 is even */
    CHECK_INT(mp_fp8_encode(431.9f), 0x7D);
}

/* A row's wire form: its byte count, its scales per block, and the round-trip bound
 * |x − deq(q(x))| ≤ 2^−4·|x| + 2^−10·s (fp8.h), with slack for the two fp32 roundings. */
static void check_rows(void)
{
    CHECK_INT(mp_fp8_row_bytes(7168), 7168 + 4 * 56);
    CHECK_INT(mp_fp8_row_bytes(128), 132);
    CHECK_INT(mp_fp8_row_bytes(129), 129 + 8);
    CHECK_INT(mp_fp8_row_bytes(200), 208);
    CHECK_INT(mp_fp8_row_bytes(1), 5);
    const int shapes[] = {1, 100, 128, 129, 200, 384, 7168};
    srand(7);
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        int H = shapes[si], nb = mp_fp8_blocks(H);
        float *x = malloc(sizeof(float) * H), *y = malloc(sizeof(float) * H);
        unsigned char *w = malloc(mp_fp8_row_bytes(H)), *w2 = malloc(mp_fp8_row_bytes(H));
        for (int i = 0; i < H; i++) { /* every block its own magnitude: 10^(b−2) */
            float mag = powf(10.0f, (float)(i / MP_FP8_BLOCK % 5) - 2.0f);
            x[i] = mag * (float)((double)rand() / RAND_MAX * 2.0 - 1.0);
        }
        x[H - 1] = 3e-9f; /* the last block's values are tiny: its own scale, not block 0's */
        mp_fp8_pack_row(x, H, w);
        mp_fp8_unpack_row(w, H, y);
        double worst = 0;
        for (int b = 0; b < nb; b++) {
            int lo = b * MP_FP8_BLOCK, hi = lo + MP_FP8_BLOCK < H ? lo + MP_FP8_BLOCK : H;
            float amax = 0;
            for (int i = lo; i < hi; i++)
                amax = fmaxf(amax, fabsf(x[i]));
            float s = mp_fp8_row_scale(w, H, b);
            CHECK(s == amax / 448.0f);
            for (int i = lo; i < hi; i++) {
                double err = fabs((double)x[i] - (double)y[i]);
                double bound = (0x1p-4 * fabs(x[i]) + 0x1p-10 * s) * (1 + 0x1p-20);
                if (!(err <= bound && err <= 28.0 * s * (1 + 0x1p-20))) {
                    fprintf(stderr, "H %d value %d: %g back as %g (bound %g)\n", H, i, x[i], y[i],
                            bound);
                    check_failures++;
                }
                if (amax > 0)
                    worst = fmax(worst, err / amax);
            }
        }
        CHECK(worst <= 0x1p-4 * 1.0001); /* never more than 2^−4 of the block's amax */
        /* the codes survive a second quantization of the dequantized row; the scales within an ulp */
        mp_fp8_pack_row(y, H, w2);
        CHECK(memcmp(w, w2, (size_t)H) == 0);
        for (int b = 0; b < nb; b++) {
            float s = mp_fp8_row_scale(w, H, b), s2 = mp_fp8_row_scale(w2, H, b);
            CHECK(fabsf(s - s2) <= s * 0x1p-23f);
        }
        free(x), free(y), free(w), free(w2);
    }
    /* a block of zeros: scale 0, codes 0, read back as zeros */
    float z[130] = {0}, back[130];
    unsigned char wz[130 + 8];
    z[129] = 1.0f;
    mp_fp8_pack_row(z, 130, wz);
    mp_fp8_unpack_row(wz, 130, back);
    CHECK(mp_fp8_row_scale(wz, 130, 0) == 0.0f);
    CHECK(mp_fp8_row_scale(wz, 130, 1) == 1.0f / 448.0f);
    for (int i = 0; i < 130; i++)
        CHECK(back[i] == z[i]);
}

/* Weights in 128×128 blocks at shapes not divisible by 128: the scale index of every element, the
 * count of blocks and bytes, the round trip within 2^−4 of each block's amax (base/fp8.h's bound),
 * each edge block scaled by its own amax, and two swapped blocks seen by the round trip. */
static void check_weight_blocks(void)
{
    static const int shapes[][2] = {{1, 1}, {128, 128}, {130, 77}, {257, 300}, {64, 129}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int K = shapes[si][0], N = shapes[si][1];
        int nbk = (K + 127) / 128, nbn = (N + 127) / 128;
        CHECK(mp_fp8_weight_blocks(K, N) == (long)nbk * nbn);
        CHECK(mp_fp8_weight_bytes(K, N) == (size_t)K * N + 4u * (size_t)nbk * nbn);
        float *w = malloc((size_t)K * N * sizeof *w), *y = malloc((size_t)K * N * sizeof *y);
        uint8_t *codes = malloc((size_t)K * N);
        float *sc = malloc((size_t)nbk * nbn * sizeof *sc);
        /* each block its own magnitude (2^−(bk + 2bn)), so a scale read for the wrong block shows */
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++) {
                float f = ldexpf(1.0f, -(k / 128 + 2 * (n / 128)));
                w[(size_t)k * N + n] = f * (float)sin(0.37 * k + 1.91 * n + 0.5);
            }
        mp_fp8_weight_quantize(w, K, N, N, codes, N, sc);
        for (int bk = 0; bk < nbk; bk++)
            for (int bn = 0; bn < nbn; bn++) {
                float amax = 0;
                for (int k = bk * 128; k < K && k < bk * 128 + 128; k++)
                    for (int n = bn * 128; n < N && n < bn * 128 + 128; n++) {
                        amax = fmaxf(amax, fabsf(w[(size_t)k * N + n]));
                        CHECK(mp_fp8_weight_scale_index(N, k, n) == (long)bk * nbn + bn);
                    }
                CHECK(sc[bk * nbn + bn] == amax / 448.0f);
            }
        mp_fp8_weight_round_trip(w, K, N, N, codes, sc, y);
        double worst = 0;
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++) {
                double s = sc[mp_fp8_weight_scale_index(N, k, n)];
                double e = fabs((double)w[(size_t)k * N + n] - y[(size_t)k * N + n]);
                worst = fmax(worst, e / (448.0 * s));
            }
        CHECK(worst <= 0x1p-4 * 1.0001);
        CHECK(worst > 0 || K * N == 1); /* the codes do round (one value is its amax: exact) */
        /* a swapped pair of blocks (their scales exchanged) is far off the matrix */
        if (nbk * nbn > 1) {
            float t = sc[0];
            sc[0] = sc[nbk * nbn - 1];
            sc[nbk * nbn - 1] = t;
            mp_fp8_weight_dequantize_tile(codes, N, sc, K, N, 0, 0, y, N);
            double bad = 0;
            for (int k = 0; k < K && k < 128; k++)
                for (int n = 0; n < N && n < 128; n++)
                    bad = fmax(bad, fabs((double)w[(size_t)k * N + n] - y[(size_t)k * N + n]));
            CHECK(bad > 0.1 * t * 448.0);
        }
        free(w), free(y), free(codes), free(sc);
    }
}

/* The K-major image of a K×(parts·N) matrix: each column's codes are mp_fp8_weight_quantize's of
 * its part, transposed, at column·ld with ld a multiple of 16 and zero padding; each block's scale
 * is the part's, at the K-major index (cuBLASLt's BLK128x128 layout: one column block after
 * another, L4 scales apart, L4 a multiple of 4); the scales start 16-byte aligned; a block row
 * dequantizes to the round trip of the part. Shapes with K and N not multiples of 128 or 16. */
static void check_image(void)
{
    const int shapes[][3] = {{200, 136, 2}, {130, 256, 1}, {7, 5, 2}, {256, 128, 2}};
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        int K = shapes[t][0], N = shapes[t][1], parts = shapes[t][2], W = parts * N;
        size_t ld = mp_fp8_image_ld(K), bytes = mp_fp8_image_bytes(K, N, parts);
        int L4 = mp_fp8_image_scale_rows(K);
        CHECK(ld % 16 == 0 && ld >= (size_t)K && ld < (size_t)K + 16);
        CHECK(L4 % 4 == 0 && L4 >= mp_fp8_blocks(K) && L4 < mp_fp8_blocks(K) + 4);
        CHECK(mp_fp8_image_scales_at(K, N, parts) % 16 == 0);
        CHECK(bytes == (size_t)W * ld + 4u * (size_t)parts * mp_fp8_blocks(N) * L4);
        float *w = malloc((size_t)K * W * sizeof *w), *part = malloc((size_t)K * N * sizeof *part);
        float *panel = malloc((size_t)MP_FP8_BLOCK * W * sizeof *panel);
        float *y = malloc((size_t)K * N * sizeof *y);
        float *sc = malloc((size_t)mp_fp8_weight_blocks(K, N) * sizeof *sc);
        uint8_t *codes = malloc((size_t)K * N);
        unsigned char *img = malloc(bytes);
        uint32_t r = 777u + (uint32_t)t;
        for (long i = 0; i < (long)K * W; i++) {
            r = r * 1664525u + 1013904223u;
            w[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * (float)(1 + (i / 97) % 5);
        }
        memset(img, 0xAB, bytes);
        mp_fp8_image_store(w, K, N, parts, img);
        const float *isc = mp_fp8_image_scales(img, K, N, parts);
        long code_bad = 0, pad_bad = 0, scale_bad = 0, deq_bad = 0;
        for (int p = 0; p < parts; p++) {
            for (int k = 0; k < K; k++)
                for (int n = 0; n < N; n++)
                    part[(size_t)k * N + n] = w[(size_t)k * W + (size_t)p * N + n];
            mp_fp8_weight_quantize(part, K, N, N, codes, N, sc);
            for (int n = 0; n < N; n++) {
                size_t c = (size_t)p * N + n;
                for (int k = 0; k < K; k++)
                    code_bad += img[c * ld + k] != codes[(size_t)k * N + n];
                for (size_t k = (size_t)K; k < ld; k++)
                    pad_bad += img[c * ld + k] != 0;
            }
            for (int bn = 0; bn < mp_fp8_blocks(N); bn++)
                for (int bk = 0; bk < L4; bk++) {
                    long at = ((long)p * mp_fp8_blocks(N) + bn) * L4 + bk;
                    float want = bk < mp_fp8_blocks(K) ? sc[(long)bk * mp_fp8_blocks(N) + bn] : 0;
                    scale_bad += isc[at] != want;
                    if (bk < mp_fp8_blocks(K))
                        scale_bad += mp_fp8_image_scale_index(K, N, p * N + bn * MP_FP8_BLOCK + 1,
                                                              bk * MP_FP8_BLOCK + 3) != at;
                }
            mp_fp8_weight_round_trip(part, K, N, N, codes, sc, y);
            for (int bk = 0; bk < mp_fp8_blocks(K); bk++) {
                mp_fp8_image_block_row(img, K, N, parts, bk, panel);
                for (int k = bk * MP_FP8_BLOCK; k < K && k < (bk + 1) * MP_FP8_BLOCK; k++)
                    for (int n = 0; n < N; n++)
                        deq_bad += panel[(size_t)(k - bk * MP_FP8_BLOCK) * W + (size_t)p * N + n] !=
                                   y[(size_t)k * N + n];
            }
        }
        if (N % MP_FP8_BLOCK == 0) /* cuBLASLt's A operand of M = parts·N rows: (c/128)·L4 + kb */
            for (int c = 0; c < W; c += 37)
                scale_bad += mp_fp8_image_scale_index(K, N, c, K - 1) !=
                             (long)(c / MP_FP8_BLOCK) * L4 + (K - 1) / MP_FP8_BLOCK;
        CHECK(code_bad == 0);
        CHECK(pad_bad == 0);
        CHECK(scale_bad == 0);
        CHECK(deq_bad == 0);
        free(w), free(part), free(panel), free(y), free(sc), free(codes), free(img);
    }
}

/* bf16 keeps 7 fraction bits: 1 + 2^−8 is the tie between 1 and 1 + 2^−7 (to 1, the even one),
 * 1 + 3·2^−8 the tie between 1 + 2^−7 and 1 + 2^−6 (to 1 + 2^−6); past a tie it rounds up; a bf16
 * value stays; NaN stays NaN; from half an ulp past the largest bf16 on (a tie to even), inf. */
static void check_bf16(void)
{
    CHECK(mp_bf16_round(1.0f + 0x1p-8f) == 1.0f);
    CHECK(mp_bf16_round(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
    CHECK(mp_bf16_round(-(1.0f + 0x1p-8f + 0x1p-20f)) == -(1.0f + 0x1p-7f));
    CHECK(mp_bf16_round(-1.5f) == -1.5f && mp_bf16_round(0x1p-133f) == 0x1p-133f);
    CHECK(isnan(mp_bf16_round(NAN)));
    /* the largest bf16 is 0x1.fep127; 0x1.ffp127 the tie past it, to the even 2^128: inf */
    CHECK(isinf(mp_bf16_round(0x1.ffp127f)) && mp_bf16_round(0x1.fe8p127f) == 0x1.fep127f);
}

/* mp_reference_fp8_inputs on a bf16 backend: each value rounded to bf16, packed and unpacked, the
 * result rounded to bf16; on an fp32 one the plain round trip. Rows of 200 values (a last block of
 * 72) whose bf16 rounding moves some values across an e4m3 rounding boundary, so the two differ. */
static void check_reference_inputs(void)
{
    enum { T = 6, H = 200 };
    float x[T * H], q32[T * H], q16[T * H], xb[H], want[H];
    unsigned char wire[208];
    uint32_t r = 12345;
    for (int i = 0; i < T * H; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * (float)(1 + i % 7);
    }
    CHECK(mp_reference_fp8_inputs(x, T, H, 0, q32) == 0);
    CHECK(mp_reference_fp8_inputs(x, T, H, 1, q16) == 0);
    int differ = 0, bad = 0;
    for (int t = 0; t < T; t++) {
        mp_fp8_round_trip_row(x + t * H, H, wire, want);
        bad += memcmp(want, q32 + t * H, sizeof want) != 0;
        for (int i = 0; i < H; i++)
            xb[i] = mp_bf16_round(x[t * H + i]);
        mp_fp8_round_trip_row(xb, H, wire, want);
        for (int i = 0; i < H; i++) {
            bad += q16[t * H + i] != mp_bf16_round(want[i]);
            differ += q16[t * H + i] != q32[t * H + i];
        }
    }
    CHECK(bad == 0);
    CHECK(differ > 0);
}

int main(void)
{
    check_decode_table();
    check_round_trip_codes();
    check_ties();
    check_saturation_and_nan();
    check_rows();
    check_weight_blocks();
    check_image();
    check_bf16();
    check_reference_inputs();
    CHECK_DONE();
}
