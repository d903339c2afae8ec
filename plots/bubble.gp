# bubble.gp - bubble_ratio and wait_ratio vs batch: the share of all ranks' layer time spent idle
# while the hottest expert rank finishes its FFN (the curve), and spent waiting in any collective
# for the last rank of its group (thin and dotted, same colour), one colour per curve. Reads the layer.csv columns batch,
# bubble_ratio and wait_ratio (via plots/render; files written before wait_ratio draw bubble_ratio
# alone), and the reference table's bubble_ratio.
load PLOTS."/common.gp"

set title "How long do ranks wait for the hottest expert? Bubble and wait vs batch" font TITLEFONT
@batch_axis
set ylabel "% of all ranks' layer time (bubble: the curve; wait: thin, dotted)"
set format y "%g %%"
set yrange [0:*]
set lmargin at screen 0.085; set rmargin at screen 0.6
set key at screen 0.615, screen 0.905 left top vertical Left reverse font KEYFONT

REF_BUBBLE = (REF && strstrt(REF_COLS, " bubble_ratio ")) ? ", REF_FILE using (column('batch')):(100 * column('bubble_ratio')) lc rgb REFCOLOR lw 2.5 pt 9 ps 1.3*PS dt 4 title REF_LABEL" : ""

plot for [i=1:N] FILE[i] using (column("batch")):(100 * column("bubble_ratio")) \
        lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt dt_src(SRC[i]) title TITLE[i], \
     for [i=1:N] FILE[i] using (column("batch")):(100 * column("wait_ratio")) \
        lc rgb color(i) lw 1 pt pt_src(SRC[i]) ps 0.5*PS dt 3 notitle \
     @REF_BUBBLE
