/* roofline.h - FLOP and byte counts of the expert FFN and the roofline bound of a kernel, as
 * docs/METRICS.md "Expert FFN alone (moeperf-ffn)" defines them for moeperf-ffn. */
#ifndef MP_ROOFLINE_H
#define MP_ROOFLINE_H

#include <stddef.h>

/* FLOPs of `rows` token-expert rows through one SwiGLU expert shard: 6·H·(D/tp)·rows
 * (docs/METRICS.md, Expert FFN alone): three GEMMs (gate and up H → D/tp, down D/tp → H) of 2 FLOPs
 * per multiply-add. The activation's elementwise work is not counted. D/tp is the real quotient (tp
 * divides D in every layout the binaries accept). */
double mp_ffn_flops(int H, int D, int tp, double rows);

/* Weight bytes one rank reads for the FFN: active_experts · mp_expert_weight_bytes (core/workload/dtype.h)
 * of its D/tp shard (docs/METRICS.md, Expert FFN alone): 3·H·(D/tp)·elem per expert for
 * weight_dtype bf16 (enum mp_dtype), 3·H·(D/tp) codes plus 4 bytes per 128×128 block for fp8;
 * `active_experts` counting only experts with at least one row, `elem` bytes per bf16 weight. */
double mp_ffn_weight_bytes(int H, int D, int tp, int active_experts, double elem, int weight_dtype);

/* Where a kernel sits under the roofline of a device (Williams, Waterman, Patterson 2009). */
struct mp_roofline {
    double intensity;   /* flops / bytes (FLOP per byte); +inf when bytes is 0 */
    double attainable;  /* min(peak_flops, intensity·peak_bw), FLOP/s */
    const char *bound;  /* "memory" if intensity·peak_bw < peak_flops, else "compute";
                         * "" when the inputs do not define one */
    double fraction;    /* achieved_flops / attainable */
};

/* The roofline of a kernel doing `flops` FLOPs over `bytes` bytes that ran at `achieved_flops`
 * FLOP/s, on a device of `peak_flops` FLOP/s and `peak_bw` bytes/s:
 *   attainable = min(peak_flops, (flops/bytes)·peak_bw),
 *   bound = "memory" if (flops/bytes)·peak_bw < peak_flops else "compute",
 *   fraction = achieved_flops / attainable.
 * Undefined inputs (a peak that is not a positive finite number, flops <= 0, bytes < 0, or a
 * NAN achieved rate) leave bound "" and the numbers that depend on them NAN. */
void mp_roofline(double peak_flops, double peak_bw, double flops, double bytes,
                 double achieved_flops, struct mp_roofline *out);

#endif
