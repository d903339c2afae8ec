/* fp8.h - the FP8 format moeperf moves on the wire: OCP e4m3 codes, their conversion to and from
 * float, and the rows of 128-value blocks with one fp32 scale each that an fp8 dispatch sends.
 *
 * The format (OCP 8-bit Floating Point Specification (OFP8), rev. 1.0, section 5.3 "E4M3"): a code
 * is s eeee mmm with exponent bias 7. e > 0: (−1)^s · 2^(e−7) · (1 + m/8); e = 0 (subnormal):
 * (−1)^s · 2^−6 · m/8. S.1111.111 (0x7F, 0xFF) is NaN; e4m3 has no infinity, so S.1111.110 is a
 * normal value and the largest finite magnitude is 448. Both zeros (0x00, 0x80) exist.
 *
 * Conversion rules (moeperf's choice among the spec's options, section 5.4):
 *   - round to nearest, ties to even mantissa;
 *   - saturating: a finite value beyond ±448 and ±infinity become ±448 (0x7E, 0xFE), the spec's
 *     "saturation mode"; a NaN becomes the NaN code of its sign (0x7F or 0xFF);
 *   - the sign of zero is kept (−0 → 0x80), and a value that rounds to zero keeps its sign.
 *
 * Block scaling (one fp32 scale per 128 contiguous values of a row, as DeepSeek-V3's activations):
 * a block of n ≤ 128 values with amax = max|x| has scale s = amax / 448 (fp32 division), each value
 * is stored as the code of x / s, and read back as decode(code) · s. A block of zeros has scale 0
 * and codes 0. A row of H values has ⌈H/128⌉ blocks; H need not be a multiple of 128: the last
 * block holds the H mod 128 values left (it is handled, not refused), so a row's wire form is
 * H code bytes followed by ⌈H/128⌉ fp32 scales: H + 4·⌈H/128⌉ bytes (mp_fp8_row_bytes). The scales
 * are stored byte by byte (memcpy): the row's start need not be 4-byte aligned.
 *
 * Error of one block's round trip (the bound tests/unit/test_fp8.c checks and --check relies on):
 * v = x / s lies in [−448, 448]. Where |v| ≥ 2^−6 (a normal code) the spacing of codes is 2^(E−3)
 * for 2^E ≤ |v| < 2^(E+1), so rounding to nearest moves v by at most half of it, 2^(E−4) ≤ 2^−4·|v|;
 * below 2^−6 the spacing is 2^−9, so at most 2^−10. Multiplying back by s:
 *     |x − deq(q(x))| ≤ 2^−4·|x| + 2^−10·s   (plus the two fp32 roundings of x/s and code·s,
 * 2^−24 relative each), and since |x| ≤ amax = 448·s, never more than 2^−4·amax = 28·s.
 *
 * Weights (--weight-dtype fp8) use blocks of 128×128 values with one scale each: see the section
 * "weights" below.
 *
 * Every function is MP_HD: the same rules on the host and in device code. */
#ifndef MP_FP8_H
#define MP_FP8_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hostdevice.h"

#define MP_FP8_MAX 448.0f   /* the largest finite e4m3 magnitude (code 0x7E) */
#define MP_FP8_BLOCK 128    /* values per scale along a row */
#define MP_FP8_NAN 0x7F     /* the positive NaN code; 0xFF is the negative one */

/* The value of e4m3 code c (exact in float); NaN for 0x7F and 0xFF. */
static inline MP_HD float mp_fp8_decode(uint8_t c)
{
    int e = (c >> 3) & 15, m = c & 7;
    float v;
    if (e == 15 && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9); /* 2^−6 · m/8 */
    else
        v = ldexpf((float)(8 + m), e - 10); /* 2^(e−7) · (8+m)/8 */
    return (c & 0x80) ? -v : v;
}

/* The e4m3 code of x: round to nearest even, saturating at ±448 (±inf too), NaN to the NaN code
 * of x's sign. */
static inline MP_HD uint8_t mp_fp8_encode(float x)
{
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (a != a)
        return (uint8_t)(sign | MP_FP8_NAN);
    if (a > MP_FP8_MAX)
        return (uint8_t)(sign | 0x7E);
    if (a == 0)
        return sign;
    /* E: the binade of a (2^E ≤ a < 2^(E+1)), no lower than the subnormals' −6; the codes of that
     * binade are 2^(E−3) apart, so q = a / 2^(E−3) rounded is the code's offset in it */
    int ex;
    (void)frexpf(a, &ex); /* a = f·2^ex, f in [0.5, 1) */
    int E = ex - 1 < -6 ? -6 : ex - 1;
    int q = (int)rintf(ldexpf(a, 3 - E)); /* rintf: to nearest, ties to even (default mode) */
    /* (E+6)·8 + q: for E = −6, q is the subnormal mantissa (q = 8 is 2^−6, code 0x08); otherwise
     * q in 8..16, where 16 carries into the next binade */
    int code = (E + 6) * 8 + q;
    if (code > 0x7E) /* a in (448, 464) is caught above; kept as a guard */
        code = 0x7E;
    return (uint8_t)(sign | code);
}

/* Blocks of a row of H values: ⌈H/128⌉. */
static inline MP_HD int mp_fp8_blocks(int H) { return (H + MP_FP8_BLOCK - 1) / MP_FP8_BLOCK; }

/* Bytes of one row of H values on the wire: H codes, then ⌈H/128⌉ fp32 scales. */
static inline MP_HD size_t mp_fp8_row_bytes(int H)
{
    return (size_t)H + sizeof(float) * (size_t)mp_fp8_blocks(H);
}

/* The scale of a block whose largest magnitude is amax: amax / 448 (0 for a block of zeros). */
static inline MP_HD float mp_fp8_scale(float amax) { return amax / MP_FP8_MAX; }

/* The code of value x of a block whose scale is s: encode(x / s), or the zero of x's sign in a
 * block of zeros (s = 0). The one rule the host's rows and the cuda backend's kernels share. */
static inline MP_HD uint8_t mp_fp8_code(float x, float s)
{
    return s > 0 ? mp_fp8_encode(x / s) : (uint8_t)(signbit(x) ? 0x80 : 0);
}

/* Quantize block b of the H-value row x: its codes into codes[b·128 ...], its scale returned.
 * amax ignores NaN values (fmaxf), so a block of NaNs has scale 0. */
static inline MP_HD float mp_fp8_quantize_block(const float *x, int H, int b, uint8_t *codes)
{
    int lo = b * MP_FP8_BLOCK, hi = lo + MP_FP8_BLOCK < H ? lo + MP_FP8_BLOCK : H;
    float amax = 0;
    for (int i = lo; i < hi; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    float s = mp_fp8_scale(amax);
    for (int i = lo; i < hi; i++)
        codes[i] = mp_fp8_code(x[i], s);
    return s;
}

/* Write the wire form of the H-value row x into wire[mp_fp8_row_bytes(H)]: the H codes, then the
 * ⌈H/128⌉ scales. */
static inline MP_HD void mp_fp8_pack_row(const float *x, int H, unsigned char *wire)
{
    for (int b = 0; b < mp_fp8_blocks(H); b++) {
        float s = mp_fp8_quantize_block(x, H, b, wire);
        memcpy(wire + H + sizeof(float) * (size_t)b, &s, sizeof s);
    }
}

/* The scale of block b of a row's wire form. */
static inline MP_HD float mp_fp8_row_scale(const unsigned char *wire, int H, int b)
{
    float s;
    memcpy(&s, wire + H + sizeof(float) * (size_t)b, sizeof s);
    return s;
}

/* Read a row's wire form back into the H floats y: decode(code) · its block's scale. */
static inline MP_HD void mp_fp8_unpack_row(const unsigned char *wire, int H, float *y)
{
    for (int b = 0; b < mp_fp8_blocks(H); b++) {
        float s = mp_fp8_row_scale(wire, H, b);
        int lo = b * MP_FP8_BLOCK, hi = lo + MP_FP8_BLOCK < H ? lo + MP_FP8_BLOCK : H;
        for (int i = lo; i < hi; i++)
            y[i] = mp_fp8_decode(wire[i]) * s;
    }
}

/* The row x as the expert sees it after an fp8 dispatch: packed and unpacked (x and y may be the
 * same array). `wire` is scratch of mp_fp8_row_bytes(H) bytes. */
static inline MP_HD void mp_fp8_round_trip_row(const float *x, int H, unsigned char *wire, float *y)
{
    mp_fp8_pack_row(x, H, wire);
    mp_fp8_unpack_row(wire, H, y);
}

/* ---- weights: one fp32 scale per 128×128 block ---------------------------------------------------
 *
 * A K×N weight matrix (row-major, K the input dimension) is cut into blocks of 128 rows × 128
 * columns, as DeepSeek-V3's weights are: block (bk, bn) covers rows [128·bk, 128·bk + 128) and
 * columns [128·bn, 128·bn + 128), each range cut short by the matrix's edge when K or N is not a
 * multiple of 128 (the last block row holds K mod 128 rows, the last block column N mod 128
 * columns: partial edge blocks are handled, not refused, and scaled by their own amax). Each block
 * has scale s = amax / 448 over its values (0 for a block of zeros) and its values are stored as
 * the codes of x / s, as a row block's are. The codes keep the matrix's layout (element (k, n) at
 * codes[k·ldc + n]); the scales are row-major over the blocks: block (bk, bn) at
 * scales[bk·⌈N/128⌉ + bn], ⌈K/128⌉·⌈N/128⌉ of them (mp_fp8_weight_blocks). Stored, a matrix costs
 * K·N code bytes and 4·⌈K/128⌉·⌈N/128⌉ scale bytes (mp_fp8_weight_bytes). The round-trip bound of
 * a row block above holds for each weight block, with amax the block's. */

/* Blocks of a K×N weight matrix: ⌈K/128⌉·⌈N/128⌉. */
static inline MP_HD long mp_fp8_weight_blocks(int K, int N)
{
    return (long)mp_fp8_blocks(K) * mp_fp8_blocks(N);
}

/* Bytes of a K×N weight matrix stored in fp8: K·N codes and one fp32 scale per block. */
static inline MP_HD size_t mp_fp8_weight_bytes(int K, int N)
{
    return (size_t)K * (size_t)N + sizeof(float) * (size_t)mp_fp8_weight_blocks(K, N);
}

/* Index of the scale of the block holding element (k, n) of a K×N matrix: (k/128)·⌈N/128⌉ + n/128. */
static inline MP_HD long mp_fp8_weight_scale_index(int N, int k, int n)
{
    return (long)(k / MP_FP8_BLOCK) * mp_fp8_blocks(N) + n / MP_FP8_BLOCK;
}

/* Quantize the K×N matrix w (element (k, n) at w[k·ldw + n]) into codes (at codes[k·ldc + n]) and
 * scales[mp_fp8_weight_blocks(K, N)] (block (bk, bn) at bk·⌈N/128⌉ + bn). */
static inline MP_HD void mp_fp8_weight_quantize(const float *w, int K, int N, int ldw,
                                                uint8_t *codes, int ldc, float *scales)
{
    int nbn = mp_fp8_blocks(N);
    for (int bk = 0; bk < mp_fp8_blocks(K); bk++)
        for (int bn = 0; bn < nbn; bn++) {
            int k0 = bk * MP_FP8_BLOCK, k1 = k0 + MP_FP8_BLOCK < K ? k0 + MP_FP8_BLOCK : K;
            int n0 = bn * MP_FP8_BLOCK, n1 = n0 + MP_FP8_BLOCK < N ? n0 + MP_FP8_BLOCK : N;
            float amax = 0;
            for (int k = k0; k < k1; k++)
                for (int n = n0; n < n1; n++)
                    amax = fmaxf(amax, fabsf(w[(size_t)k * ldw + n]));
            float s = mp_fp8_scale(amax);
            scales[(long)bk * nbn + bn] = s;
            for (int k = k0; k < k1; k++)
                for (int n = n0; n < n1; n++) {
                    float x = w[(size_t)k * ldw + n];
                    codes[(size_t)k * ldc + n] =
                        s > 0 ? mp_fp8_encode(x / s) : (uint8_t)(signbit(x) ? 0x80 : 0);
                }
        }
}

/* Dequantize block (bk, bn) of a K×N matrix stored by mp_fp8_weight_quantize (codes with row
 * stride ldc, its scales) into out: element (k, n) of the block at out[(k − 128·bk)·ldo +
 * (n − 128·bn)], for the block's rows and columns only (an edge block's are fewer than 128). */
static inline MP_HD void mp_fp8_weight_dequantize_tile(const uint8_t *codes, int ldc,
                                                       const float *scales, int K, int N, int bk,
                                                       int bn, float *out, int ldo)
{
    int k0 = bk * MP_FP8_BLOCK, k1 = k0 + MP_FP8_BLOCK < K ? k0 + MP_FP8_BLOCK : K;
    int n0 = bn * MP_FP8_BLOCK, n1 = n0 + MP_FP8_BLOCK < N ? n0 + MP_FP8_BLOCK : N;
    float s = scales[(long)bk * mp_fp8_blocks(N) + bn];
    for (int k = k0; k < k1; k++)
        for (int n = n0; n < n1; n++)
            out[(size_t)(k - k0) * ldo + (n - n0)] = mp_fp8_decode(codes[(size_t)k * ldc + n]) * s;
}

/* The K×N matrix w as fp8 weights deliver it: quantized in blocks and dequantized, into y (both
 * with row stride ld; they may be the same array). `codes` is scratch of K·ld bytes, `scales` of
 * mp_fp8_weight_blocks(K, N) floats. */
static inline MP_HD void mp_fp8_weight_round_trip(const float *w, int K, int N, int ld,
                                                  uint8_t *codes, float *scales, float *y)
{
    mp_fp8_weight_quantize(w, K, N, ld, codes, ld, scales);
    for (int bk = 0; bk < mp_fp8_blocks(K); bk++)
        for (int bn = 0; bn < mp_fp8_blocks(N); bn++)
            mp_fp8_weight_dequantize_tile(codes, ld, scales, K, N, bk, bn,
                                          y + (size_t)bk * MP_FP8_BLOCK * ld + bn * MP_FP8_BLOCK,
                                          ld);
}

/* An expert's matrix as the expert FFN reads it with --weight-dtype fp8 (an "image"): `parts`
 * K×N matrices side by side, W = [W_0 | W_1] a K×(parts·N) matrix (a gate/up projection [Wg | Wu]:
 * parts 2; a down projection Wd: parts 1), each part quantized in 128×128 blocks of its own (so
 * no block spans two matrices: the codes and scales of mp_fp8_weight_quantize, transposed).
 *
 * The image is K-major, the layout cuBLASLt's FP8 GEMM requires of both operands on Hopper (the
 * "TN" format; cuBLAS documentation, cublasLtMatmul and section 3.1.4.5 "128-element 1D and
 * 128x128 2D Block Scaling For FP8 Data Types"):
 *   - codes: column c = p·N + n of W (output n of part p) holds its K codes contiguously, at
 *     img[c·ld + k] with ld = K rounded up to 16 (mp_fp8_image_ld: FP8 leading dimensions are
 *     multiples of 16 bytes); the ld − K padding codes are 0;
 *   - then, from mp_fp8_image_scales_at (a multiple of 16 bytes, so the scales are 16-byte aligned
 *     when the image is), the scales K-major: block (k-block kb, column block nb of part p) at
 *     index (p·⌈N/128⌉ + nb)·L4 + kb, L4 = ⌈K/128⌉ rounded up to 4 (mp_fp8_image_scale_rows); the
 *     padding scales are 0. When N is a multiple of 128 this is exactly cuBLASLt's
 *     CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F layout for an A operand of M = parts·N rows.
 * The bytes a GEMM reads are parts · mp_fp8_weight_bytes(K, N), padding excluded. */

/* The image's leading dimension: K rounded up to a multiple of 16 codes. */
static inline MP_HD size_t mp_fp8_image_ld(int K) { return ((size_t)K + 15) & ~(size_t)15; }

/* Scales per column block in the image: ⌈K/128⌉ rounded up to a multiple of 4. */
static inline MP_HD int mp_fp8_image_scale_rows(int K) { return (mp_fp8_blocks(K) + 3) & ~3; }

/* Where the scales start: after parts·N columns of mp_fp8_image_ld(K) codes. */
static inline MP_HD size_t mp_fp8_image_scales_at(int K, int N, int parts)
{
    return (size_t)parts * (size_t)N * mp_fp8_image_ld(K);
}

/* Bytes of the image, padding included (what to allocate). */
static inline MP_HD size_t mp_fp8_image_bytes(int K, int N, int parts)
{
    return mp_fp8_image_scales_at(K, N, parts) + sizeof(float) * (size_t)parts *
                                                     (size_t)mp_fp8_blocks(N) *
                                                     (size_t)mp_fp8_image_scale_rows(K);
}

/* The scales of an image (16-byte aligned when the image is). */
static inline MP_HD const float *mp_fp8_image_scales(const unsigned char *img, int K, int N,
                                                     int parts)
{
    return (const float *)(const void *)(img + mp_fp8_image_scales_at(K, N, parts));
}

/* Index among the image's scales of the block holding row k of column c (0 ≤ c < parts·N). */
static inline MP_HD long mp_fp8_image_scale_index(int K, int N, int c, int k)
{
    int p = c / N, n = c - p * N;
    return ((long)p * mp_fp8_blocks(N) + n / MP_FP8_BLOCK) * mp_fp8_image_scale_rows(K) +
           k / MP_FP8_BLOCK;
}

/* Write the image of the K×(parts·N) row-major matrix w into img[mp_fp8_image_bytes(K, N,
 * parts)] (img 4-byte aligned). */
static inline MP_HD void mp_fp8_image_store(const float *w, int K, int N, int parts,
                                            unsigned char *img)
{
    size_t ld = mp_fp8_image_ld(K), W = (size_t)parts * N;
    float *scales = (float *)(void *)(img + mp_fp8_image_scales_at(K, N, parts));
    memset(img, 0, mp_fp8_image_bytes(K, N, parts));
    for (int p = 0; p < parts; p++)
        for (int bk = 0; bk < mp_fp8_blocks(K); bk++)
            for (int bn = 0; bn < mp_fp8_blocks(N); bn++) {
                int k0 = bk * MP_FP8_BLOCK, k1 = k0 + MP_FP8_BLOCK < K ? k0 + MP_FP8_BLOCK : K;
                int n0 = bn * MP_FP8_BLOCK, n1 = n0 + MP_FP8_BLOCK < N ? n0 + MP_FP8_BLOCK : N;
                float amax = 0;
                for (int k = k0; k < k1; k++)
                    for (int n = n0; n < n1; n++)
                        amax = fmaxf(amax, fabsf(w[(size_t)k * W + (size_t)p * N + n]));
                float s = mp_fp8_scale(amax);
                scales[mp_fp8_image_scale_index(K, N, p * N + n0, k0)] = s;
                for (int k = k0; k < k1; k++)
                    for (int n = n0; n < n1; n++) {
                        float x = w[(size_t)k * W + (size_t)p * N + n];
                        img[((size_t)p * N + n) * ld + k] =
                            s > 0 ? mp_fp8_encode(x / s) : (uint8_t)(signbit(x) ? 0x80 : 0);
                    }
            }
}

/* Dequantize block row bk of an image (rows [128·bk, min(128·bk + 128, K)) of every column) into
 * panel, row-major with row stride parts·N: element (k, c) at panel[(k − 128·bk)·parts·N + c]. */
static inline MP_HD void mp_fp8_image_block_row(const unsigned char *img, int K, int N, int parts,
                                                int bk, float *panel)
{
    size_t ld = mp_fp8_image_ld(K), W = (size_t)parts * N;
    const float *scales = mp_fp8_image_scales(img, K, N, parts);
    int k0 = bk * MP_FP8_BLOCK, k1 = k0 + MP_FP8_BLOCK < K ? k0 + MP_FP8_BLOCK : K;
    for (size_t c = 0; c < W; c++) {
        float s = scales[mp_fp8_image_scale_index(K, N, (int)c, k0)];
        for (int k = k0; k < k1; k++)
            panel[(size_t)(k - k0) * W + c] = mp_fp8_decode(img[c * ld + k]) * s;
    }
}

#endif
