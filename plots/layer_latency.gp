# layer_latency.gp - layer latency (median and p99) vs batch, and below it the expert FFN and
# communication components, one colour per layout / routing / placement / source. Reads the
# layer.csv columns batch, layer_us, layer_p99_us, ffn_us, comm_us (via plots/render). When the
# curves fall into two groups whose scales are more than 10× apart (plots/render's SPLIT and
# PANEL: a CPU run beside a modelled GPU cluster), each group gets its own pair of panels, one
# above the other, on a taller figure.
load PLOTS."/common.gp"

NG = SPLIT ? 2 : 1
if (SPLIT) { eval sprintf(TERMINAL, 1400) }
set multiplot title "At which batch does the layer stop scaling? Layer latency vs batch" font TITLEFONT
LM = 0.085; RM = 0.6
@batch_axis
# every panel shares one batch range: the runs' and, when given, the reference's
set xrange [(XMIN < REF_XMIN ? XMIN : REF_XMIN) : (XMAX > REF_XMAX ? XMAX : REF_XMAX)]
set logscale y 10
# labelled decades, with the 2 and 5 between them where a panel spans less than two decades
set format y "%.0s%c"
set lmargin at screen LM; set rmargin at screen RM

# the curves of a panel: every one, or those of panel group g when split
G = 1
keep(i) = (!SPLIT || PANEL[i] == G)
ttl(i) = keep(i) ? TITLE[i] : ""
# the reference (a GPU cluster's published figures) goes with the faster group when split
REF_HERE = 0

# panel positions (screen fractions) of group g: whole layer top and bottom, components top and
# bottom, and where their keys stand
ltop(g) = SPLIT ? (g == 1 ? 0.94 : 0.47) : 0.90
lbot(g) = SPLIT ? (g == 1 ? 0.77 : 0.30) : 0.55
ctop(g) = SPLIT ? (g == 1 ? 0.72 : 0.25) : 0.47
cbot(g) = SPLIT ? (g == 1 ? 0.55 : 0.06) : 0.09

do for [g=1:NG] {
    G = g
    # the axes, as the legend panel of the group before left them
    set border lw 1.2; set ytics; set mytics
    set grid xtics ytics mxtics mytics lc rgb "#dddddd" lw 1
    set logscale y 10; set format y "%.0s%c"; set autoscale y
    @batch_axis
    set tics nomirror
    set xrange [(XMIN < REF_XMIN ? XMIN : REF_XMIN) : (XMAX > REF_XMAX ? XMAX : REF_XMAX)]
    set lmargin at screen LM; set rmargin at screen RM
    REF_HERE = REF && (!SPLIT || g == 2)
    HAVE_MODEL = 0; HAVE_MEAS = 0
    do for [i=1:N] { if (keep(i)) { if (SRC[i] eq "model") { HAVE_MODEL = 1 } else { HAVE_MEAS = 1 } } }
    # measured and model curves together: say which style is which
    SOURCE_KEY = HAVE_MODEL && HAVE_MEAS ? ", keyentry with points lc rgb 'black' pt 7 title 'measured: filled points', keyentry with points lc rgb 'black' pt 6 title 'model: open points, thin lines'" : ""
    WHO = SPLIT ? (g == 1 ? "slower curves: " : "faster curves (10× and more apart): ") : ""

    # the published components, when the reference table has them and goes here
    REF_FFN = (REF_HERE && strstrt(REF_COLS, " ffn_us ")) ? ", REF_FILE using (column('batch')):(pos(column('ffn_us'))) lc rgb REFCOLOR lw 2 pt 9 ps 1.2*PS dt 1 notitle" : ""
    REF_COMM = (REF_HERE && strstrt(REF_COLS, " comm_us ")) ? ", REF_FILE using (column('batch')):(pos(column('comm_us'))) lc rgb REFCOLOR lw 2 pt 9 ps 1.2*PS dt 2 notitle" : ""
    REF_KEY = (REF_HERE && (strstrt(REF_COLS, " ffn_us ") || strstrt(REF_COLS, " comm_us "))) ? ", keyentry with points lc rgb REFCOLOR pt 9 ps 1.2*PS title REF_LABEL" : ""

    # the whole layer, median and p99 (the group's legend is a panel of its own, below)
    set key off
    set tmargin at screen ltop(g); set bmargin at screen lbot(g)
    set xlabel ""
    set format x ""
    set ylabel "layer latency (µs, log)"
    set title WHO."whole layer: median (p50, solid) and p99 (dashed)"
    # (macros expand when the loop is read, before these strings are set: the plots are eval'd)
    eval 'plot for [i=1:N] FILE[i] using (column("batch")):(keep(i) ? pos(column("layer_us")) : NaN) '.\
         'lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt 1 title ttl(i), '.\
         'for [i=1:N] FILE[i] using (column("batch")):(keep(i) ? pos(column("layer_p99_us")) : NaN) '.\
         'lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) ps 0.65*PS dt 2 notitle'

    # the components on the critical path, medians (the key above names them)
    set tmargin at screen ctop(g); set bmargin at screen cbot(g)
    set format x (g == NG ? "%.0f" : "")
    @batch_axis
    set tics nomirror
    if (g < NG) { set xlabel "" }
    set ylabel "component (µs, log)"
    set title WHO."components (medians): ffn_us (solid), comm_us (dashed)"
    eval 'plot for [i=1:N] FILE[i] using (column("batch")):(keep(i) ? pos(column("ffn_us")) : NaN) '.\
         'lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt 1 notitle, '.\
         'for [i=1:N] FILE[i] using (column("batch")):(keep(i) ? pos(column("comm_us")) : NaN) '.\
         'lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt 2 notitle'.REF_FFN.REF_COMM

    # the legend of both panels, as tall as they are together: every curve of the group in one
    # column (a key inside a panel lists only what fits its height)
    set lmargin at screen 0.615; set rmargin at screen 0.995
    set tmargin at screen ltop(g) + 0.005; set bmargin at screen cbot(g)
    unset border; unset xtics; unset ytics; unset mxtics; unset mytics; unset grid
    unset logscale; unset title; unset xlabel; unset ylabel; set xrange [0:1]; set yrange [0:1]
    set key at graph 0, graph 1 left top vertical Left reverse font KEYFONT maxrows 200
    eval 'plot NaN notitle, for [i=1:N] keyentry with linespoints lc rgb color(i) lw lw_src(SRC[i]) '.\
         'pt pt_src(SRC[i]) title ttl(i), '.\
         'keyentry with lines lc rgb "black" lw 2 dt 1 title "solid: layer p50; below, ffn_us (expert FFN)", '.\
         'keyentry with lines lc rgb "black" lw 2 dt 2 title "dashed: layer p99; below, comm_us (all exchanges)"'.\
         SOURCE_KEY.REF_KEY
    set key off
}
unset multiplot
