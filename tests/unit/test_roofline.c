/* test_roofline.c - expert FFN FLOP and weight-byte counts and the roofline bound against values
 * computed by hand. */
#include "check.h"
#include "dtype.h"
#include "roofline.h"

#include <math.h>

static void test_counts(void)
{
    /* 6·1024·(2048/2)·10 = 6·1024·1024·10 */
    CHECK_NEAR(mp_ffn_flops(1024, 2048, 2, 10), 62914560.0, 0);
    /* deepseek-v3 shape, one row, tp1: 6·7168·2048 */
    CHECK_NEAR(mp_ffn_flops(7168, 2048, 1, 1), 88080384.0, 0);
    /* tp8 splits D: 6·4096·(1536/8)·3 = 6·4096·192·3 */
    CHECK_NEAR(mp_ffn_flops(4096, 1536, 8, 3), 14155776.0, 0);
    CHECK_NEAR(mp_ffn_flops(1024, 2048, 2, 0), 0.0, 0);
    /* 3·1024·1024·3 experts·4 bytes */
    CHECK_NEAR(mp_ffn_weight_bytes(1024, 2048, 2, 3, 4, MP_DTYPE_BF16), 37748736.0, 0);
    /* bf16: 3·256·256·8·2 */
    CHECK_NEAR(mp_ffn_weight_bytes(256, 256, 1, 8, 2, MP_DTYPE_BF16), 3145728.0, 0);
    CHECK_NEAR(mp_ffn_weight_bytes(256, 256, 1, 0, 4, MP_DTYPE_BF16), 0.0, 0);
    /* fp8: 3·256·256 codes + 4·(3 matrices · 2·2 blocks), 8 experts; elem ignored */
    CHECK_NEAR(mp_ffn_weight_bytes(256, 256, 1, 8, 4, MP_DTYPE_FP8), 8.0 * (196608 + 48), 0);
    /* fp8 at shapes not divisible by 128: H 200, Dl 300/2 = 150: 3·200·150 + 4·3·(2·2) */
    CHECK_NEAR(mp_ffn_weight_bytes(200, 300, 2, 1, 4, MP_DTYPE_FP8), 90000.0 + 48, 0);
    /* deepseek-v3's expert, tp1: 3·7168·2048 + 4·3·56·16 */
    CHECK_NEAR(mp_ffn_weight_bytes(7168, 2048, 1, 1, 2, MP_DTYPE_FP8), 44040192.0 + 10752, 0);
}

static void test_memory_bound(void)
{
    /* intensity 62914560 / 37748736 = 5/3 FLOP/B; 5/3 · 10 GB/s = 16.67 GFLOP/s < 100 GFLOP/s */
    struct mp_roofline r;
    mp_roofline(100e9, 10e9, 62914560.0, 37748736.0, 5e9, &r);
    CHECK_NEAR(r.intensity, 5.0 / 3.0, 1e-15);
    CHECK_STR(r.bound, "memory");
    CHECK_NEAR(r.attainable, 50e9 / 3.0, 1e-12);
    CHECK_NEAR(r.fraction, 0.3, 1e-12);
}

static void test_compute_bound(void)
{
    /* intensity 1000 FLOP/B; 1000 · 10 GB/s = 10 TFLOP/s > 100 GFLOP/s */
    struct mp_roofline r;
    mp_roofline(100e9, 10e9, 1e12, 1e9, 50e9, &r);
    CHECK_NEAR(r.intensity, 1000.0, 0);
    CHECK_STR(r.bound, "compute");
    CHECK_NEAR(r.attainable, 100e9, 0);
    CHECK_NEAR(r.fraction, 0.5, 1e-15);

    /* on the ridge (10 FLOP/B · 10 GB/s == 100 GFLOP/s) the memory roof is not below: compute */
    mp_roofline(100e9, 10e9, 1e10, 1e9, 100e9, &r);
    CHECK_STR(r.bound, "compute");
    CHECK_NEAR(r.fraction, 1.0, 1e-15);
    /* just left of the ridge */
    mp_roofline(100e9, 10e9, 0.99e10, 1e9, 49.5e9, &r);
    CHECK_STR(r.bound, "memory");
    CHECK_NEAR(r.attainable, 99e9, 1e-12);
    CHECK_NEAR(r.fraction, 0.5, 1e-12);

    /* no bytes: infinite intensity, the compute roof */
    mp_roofline(100e9, 10e9, 1e9, 0, 25e9, &r);
    CHECK(isinf(r.intensity));
    CHECK_STR(r.bound, "compute");
    CHECK_NEAR(r.fraction, 0.25, 1e-15);
}

static void test_undefined(void)
{
    struct mp_roofline r;
    mp_roofline(NAN, 10e9, 1e9, 1e9, 1e9, &r); /* no measured peak */
    CHECK_STR(r.bound, "");
    CHECK(isnan(r.attainable));
    CHECK(isnan(r.fraction));
    CHECK_NEAR(r.intensity, 1.0, 0);
    mp_roofline(100e9, 0, 1e9, 1e9, 1e9, &r);
    CHECK_STR(r.bound, "");
    mp_roofline(100e9, 10e9, 0, 1e9, 1e9, &r); /* no work */
    CHECK_STR(r.bound, "");
    CHECK(isnan(r.intensity));
    mp_roofline(100e9, 10e9, 1e9, 1e9, NAN, &r); /* bound known, achieved rate not */
    CHECK_STR(r.bound, "memory");
    CHECK(isnan(r.fraction));
}

int main(void)
{
    test_counts();
    test_memory_bound();
    test_compute_bound();
    test_undefined();
    CHECK_DONE();
}
