/* roofline.c - expert FFN FLOP and byte counts and the roofline bound (see roofline.h). */
#include "roofline.h"

#include <math.h>

#include "dtype.h"

double mp_ffn_flops(int H, int D, int tp, double rows)
{
    /* docs/METRICS.md, Expert FFN alone: 6·H·(D/tp)·rows */
    return 6.0 * H * ((double)D / tp) * rows;
}

double mp_ffn_weight_bytes(int H, int D, int tp, int active_experts, double elem, int weight_dtype)
{
    /* docs/METRICS.md, Expert FFN alone: 3·H·(D/tp)·active·sizeof(w) for bf16, with fp8 codes
     * and block scales instead for fp8 (W_gate, W_up: H×Dl; W_down: Dl×H) */
    return active_experts * mp_expert_weight_bytes((enum mp_dtype)weight_dtype, H, D / tp,
                                                   elem);
}

static int positive_finite(double v) { return isfinite(v) && v > 0; }

void mp_roofline(double peak_flops, double peak_bw, double flops, double bytes,
                 double achieved_flops, struct mp_roofline *out)
{
    out->intensity = NAN;
    out->attainable = NAN;
    out->bound = "";
    out->fraction = NAN;
    if (!(flops > 0) || !(bytes >= 0))
        return;
    out->intensity = bytes > 0 ? flops / bytes : INFINITY;
    if (!positive_finite(peak_flops) || !positive_finite(peak_bw))
        return;
    /* Williams, Waterman, Patterson 2009: attainable = min(peak FLOP/s, intensity · peak bytes/s) */
    double mem_roof = out->intensity * peak_bw;
    if (mem_roof < peak_flops) {
        out->bound = "memory";
        out->attainable = mem_roof;
    } else {
        out->bound = "compute";
        out->attainable = peak_flops;
    }
    out->fraction = achieved_flops / out->attainable; /* NAN stays NAN */
}
