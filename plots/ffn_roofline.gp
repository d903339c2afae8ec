# ffn_roofline.gp - the expert FFN against its roofline: achieved GFLOP/s vs arithmetic intensity
# (flops / weight_bytes), each point labelled with its batch, under the roofline min(peak FLOP/s,
# intensity · peak bytes/s) of the peaks measured at start-up. Reads the ffn.csv columns batch,
# flops, weight_bytes, achieved_GFLOPs, peak_GFLOPs, peak_GBps (via plots/render).
load PLOTS."/common.gp"

set title "How close is the expert FFN to its roofline? (points labelled with their batch)" font TITLEFONT
set logscale x 2
set logscale y 10
set mxtics 1
set format x "%g"
set format y "%g"
set xlabel "arithmetic intensity (FLOP per weight byte = flops / weight_bytes, log2 scale)"
set ylabel "GFLOP/s (10^9 FLOP/s, log scale)"
set lmargin at screen 0.085; set rmargin at screen 0.6
set key at screen 0.615, screen 0.905 left top vertical Left reverse font KEYFONT
set samples 400

# x range: the data and every ridge point (peak FLOP/s / peak bytes/s), with a margin
xlo = XMIN; xhi = XMAX
do for [r=1:NROOF] {
    ridge = ROOF_P[r] / ROOF_B[r]
    xlo = ridge < xlo ? ridge : xlo
    xhi = ridge > xhi ? ridge : xhi
}
set xrange [xlo / 2 : xhi * 2]
roof(x, p, b) = (x * b < p) ? x * b : p

plot for [i=1:N] FILE[i] using (column("flops") / column("weight_bytes")):(column("achieved_GFLOPs")) \
        lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt dt_src(SRC[i]) title TITLE[i], \
     for [i=1:N] FILE[i] using (column("flops") / column("weight_bytes")):(column("achieved_GFLOPs")):(sprintf("%d", column("batch"))) \
        with labels offset 0, 1.0 tc rgb color(i) font SMALLFONT notitle, \
     for [r=1:NROOF] roof(x, ROOF_P[r], ROOF_B[r]) with lines lc rgb REFCOLOR lw 2.5 dt r \
        title sprintf("roofline: peaks %.4g GFLOP/s, %.4g GB/s", ROOF_P[r], ROOF_B[r])
