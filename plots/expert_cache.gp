# expert_cache.gp - layer latency (median and p99) against the expert cache's size, and below it
# the exposed fetch time, one colour per layout / routing / placement / batch / policy / source:
# what keeping fewer experts resident costs under each routing skew. Reads the layer.csv columns
# cache_slots, layer_us, layer_p99_us, fetch_us and cache_hit_rate (via plots/render; points
# without a cache, --expert-cache off, have no x and are left out).
load PLOTS."/common.gp"

set multiplot title "What does an expert-cache miss cost? Layer latency vs cache size" font TITLEFONT
LM = 0.085; RM = 0.6
set xrange [(XMIN > 1 ? XMIN - 1 : 0) : XMAX + 1]
set xtics format "%.0f"
set mxtics 1
set logscale y 10
set format y "%.0s%c"
set key at screen 0.615, screen 0.905 left top vertical Left reverse font KEYFONT

# top: the whole layer, median and p99, each point labelled with its hit rate
set lmargin at screen LM; set rmargin at screen RM
set tmargin at screen 0.90; set bmargin at screen 0.55
set xlabel ""
set format x ""
set ylabel "layer latency (µs, log scale)"
set title "whole layer: median (p50, solid) and p99 (dashed); labels: cache hit rate"
plot for [i=1:N] FILE[i] using (column("cache_slots")):(pos(column("layer_us"))) \
        lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt 1 title TITLE[i], \
     for [i=1:N] FILE[i] using (column("cache_slots")):(pos(column("layer_p99_us"))) \
        lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) ps 0.65*PS dt 2 notitle, \
     for [i=1:N] FILE[i] using (column("cache_slots")):(pos(column("layer_us"))): \
        (sprintf("%.2f", column("cache_hit_rate"))) with labels offset 0, 0.8 \
        font SMALLFONT tc rgb color(i) notitle, \
     keyentry with lines lc rgb "black" lw 2 dt 1 title "p50 (median over iterations)", \
     keyentry with lines lc rgb "black" lw 2 dt 2 title "p99"

# bottom: the fetches' exposed time, the part of the FFN phase spent waiting for weights
set tmargin at screen 0.47; set bmargin at screen 0.09
set format x "%.0f"
set xlabel "expert cache slots per rank (cache_slots: experts kept resident; the rest fetched from host memory)"
set ylabel "fetch_us median (µs, log scale)"
set title "exposed fetch time (fetch_us: the slowest rank's FFNs waiting for weights)"
unset key
plot for [i=1:N] FILE[i] using (column("cache_slots")):(pos(column("fetch_us"))) \
        lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt 1 notitle
unset multiplot
