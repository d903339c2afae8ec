# timeline.gp - one point's per-rank timeline: a bar per rank (grouped by host) of its phases in the
# median iteration (top) and the p99 iteration (bottom), each collective's wait for the last rank
# of its group grey, the critical rank (the longest busy time: the rank the others wait for)
# outlined red, each bar annotated with the rank's routed rows and experts. Reads DATA/curves.gp
# (its titles, tics and range) and the bar files plots/render writes from layer_rank_samples.csv and layer_ranks.csv.
load PLOTS."/common.gp"

unset grid
set grid xtics lc rgb "#e8e8e8" lw 1
unset mxtics
unset mytics
set style fill solid 1.0 noborder
set xrange [0:XMAX * 1.3]
set yrange [0.4:NR + 0.6]
eval "set ytics ".YTICS." font SMALLFONT"
set ytics scale 0
set xlabel "time from the iteration's aligned start (µs)"
set lmargin at screen 0.12; set rmargin at screen 0.78
set key at screen 0.795, screen 0.86 left top vertical Left reverse font KEYFONT
BH = NR > 24 ? 0.45 : 0.35

set multiplot title "Who waits for whom, and for how long?"."\n".TITLE font TITLEFONT
do for [panel=1:2] {
    wk = panel == 1 ? "med" : "p99"
    set title (panel == 1 ? MED_TITLE : P99_TITLE) font KEYFONT
    if (panel == 1) {
        set tmargin at screen 0.86; set bmargin at screen 0.50
        set format x ""; set xlabel ""
    } else {
        set tmargin at screen 0.45; set bmargin at screen 0.10
        set format x "%g"; set xlabel "time from the iteration's aligned start (µs)"
        set key off
    }
    plot DATA."/seg_".wk.".csv" using (($1 + $2) / 2):3:(($2 - $1) / 2):(BH):4 \
            with boxxyerror lc rgb variable notitle, \
         DATA."/crit_".wk.".csv" using (($1 + $2) / 2):3:(($2 - $1) / 2):(BH + 0.08) \
            with boxxyerror fs empty border lc rgb "#ff0000" lc rgb "#ff0000" lw 2.5 notitle, \
         DATA."/ann_".wk.".csv" using ($1 + XMAX * 0.01):2:3 with labels left font SMALLFONT notitle, \
         DATA."/hosts.csv" using (0):(($1 + $2) / 2):3 with labels right offset character -7, 0 \
            font SMALLFONT tc rgb "#555555" notitle, \
         DATA."/hosts.csv" using (0):($2):(XMAX * 1.3):(0) with vectors nohead dt 3 lc rgb "#888888" notitle, \
         keyentry with boxes fs solid lc rgb "#56b4e9" title "route", \
         keyentry with boxes fs solid lc rgb "#cc79a7" title "notify", \
         keyentry with boxes fs solid lc rgb "#0072b2" title "dispatch", \
         keyentry with boxes fs solid lc rgb "#009e73" title "expert FFN", \
         keyentry with boxes fs solid lc rgb "#e69f00" title "TP reduce", \
         keyentry with boxes fs solid lc rgb "#d55e00" title "combine", \
         keyentry with boxes fs solid lc rgb "#c8c8c8" title "wait for the group", \
         keyentry with boxes fs empty border lc rgb "#ff0000" lc rgb "#ff0000" lw 2.5 title "critical rank"
}
unset multiplot
