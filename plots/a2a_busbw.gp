# a2a_busbw.gp - isolated All-to-All bus bandwidth vs bytes per rank, one curve per pattern /
# layout / routing / placement / source. Reads the a2a.csv columns bytes_per_rank and busbw_GBps
# (via plots/render).
load PLOTS."/common.gp"

set title "How fast is the All-to-All alone? Bus bandwidth vs size (busbw = algbw·(n−1)/n)" font TITLEFONT
set logscale x 2
set mxtics 1
set xlabel "bytes one rank sends per all-to-all, self included (bytes_per_rank, log2 scale)"
set ylabel "busbw (GB/s = 10^9 bytes/s, median time)"
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set lmargin at screen 0.085; set rmargin at screen 0.6
set key at screen 0.615, screen 0.905 left top vertical Left reverse font KEYFONT

# one labelled tic per power of 4 within the data
set xtics () 
do for [e=0:40:2] {
    v = 2.0**e
    if (v >= XMIN / 2 && v <= XMAX * 2) { set xtics add (bytes_label(v) v) }
}
set xrange [XMIN / 1.5 : XMAX * 1.5]

plot for [i=1:N] FILE[i] using (column("bytes_per_rank")):(column("busbw_GBps")) \
        lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt dt_src(SRC[i]) title TITLE[i]
