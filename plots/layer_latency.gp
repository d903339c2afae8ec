# layer_latency.gp - layer latency (median and p99) vs batch, and below it the expert FFN and
# communication components, one colour per layout / routing / placement / source. Reads the
# layer.csv columns batch, layer_us, layer_p99_us, ffn_us, comm_us (via plots/render).
load PLOTS."/common.gp"

set multiplot title "MoE layer latency vs batch: where the layer stops scaling" font TITLEFONT
LM = 0.085; RM = 0.6
@batch_axis
# both panels share one batch range: the runs' and, when given, the reference's
set xrange [(XMIN < REF_XMIN ? XMIN : REF_XMIN) : (XMAX > REF_XMAX ? XMAX : REF_XMAX)]
set logscale y 10
set format y "%.0s%c"
set key at screen 0.615, screen 0.905 left top vertical Left reverse font KEYFONT

# measured and model curves together: say which style is which
HAVE_MODEL = 0
do for [i=1:N] { if (SRC[i] eq "model") { HAVE_MODEL = 1 } }
SOURCE_KEY = HAVE_MODEL ? ", keyentry with points lc rgb 'black' pt 7 title 'measured: filled points', keyentry with points lc rgb 'black' pt 6 title 'model: open points, thin lines'" : ""

# top: the whole layer, median and p99
set lmargin at screen LM; set rmargin at screen RM
set tmargin at screen 0.90; set bmargin at screen 0.55
set xlabel ""
set format x ""
set ylabel "layer latency (µs, log scale)"
set title "whole layer: median (p50, solid) and p99 (dashed)"
plot for [i=1:N] FILE[i] using (column("batch")):(pos(column("layer_us"))) \
        lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt 1 title TITLE[i], \
     for [i=1:N] FILE[i] using (column("batch")):(pos(column("layer_p99_us"))) \
        lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) ps 0.65*PS dt 2 notitle, \
     keyentry with lines lc rgb "black" lw 2 dt 1 title "p50 (median over iterations)", \
     keyentry with lines lc rgb "black" lw 2 dt 2 title "p99" \
     @SOURCE_KEY

# the published components, when the reference table has them
REF_FFN = (REF && strstrt(REF_COLS, " ffn_us ")) ? ", REF_FILE using (column('batch')):(pos(column('ffn_us'))) lc rgb REFCOLOR lw 2 pt 9 ps 1.2*PS dt 1 notitle" : ""
REF_COMM = (REF && strstrt(REF_COLS, " comm_us ")) ? ", REF_FILE using (column('batch')):(pos(column('comm_us'))) lc rgb REFCOLOR lw 2 pt 9 ps 1.2*PS dt 2 notitle" : ""

REF_KEY = (REF && (strstrt(REF_COLS, " ffn_us ") || strstrt(REF_COLS, " comm_us "))) ? ", keyentry with points lc rgb REFCOLOR pt 9 ps 1.2*PS title REF_LABEL" : ""

# bottom: the components on the critical path, medians
set tmargin at screen 0.47; set bmargin at screen 0.09
set format x "%.0f"
@batch_axis
set ylabel "component median (µs, log scale)"
set title "components (medians): expert FFN ffn_us (solid), communication comm_us (dashed)"
set key at screen 0.615, screen 0.47 left top vertical Left reverse font KEYFONT
plot for [i=1:N] FILE[i] using (column("batch")):(pos(column("ffn_us"))) \
        lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt 1 notitle, \
     for [i=1:N] FILE[i] using (column("batch")):(pos(column("comm_us"))) \
        lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt 2 notitle, \
     keyentry with lines lc rgb "black" lw 2 dt 1 title "ffn_us: expert FFN, slowest rank", \
     keyentry with lines lc rgb "black" lw 2 dt 2 title "comm_us: dispatch + TP reduce + combine" \
     @REF_KEY @REF_FFN @REF_COMM
unset multiplot
