# comm_ratio.gp - comm_comp_ratio (comm_us / ffn_us, medians) vs batch, one curve per layout /
# routing / placement / source; above the 1.0 line the layer is network-bound. Reads the layer.csv
# columns batch and comm_comp_ratio (via plots/render), and the reference table's comm_comp_ratio.
load PLOTS."/common.gp"

set title "Is the layer network-bound? comm_comp_ratio = comm_us / ffn_us (medians) vs batch" font TITLEFONT
@batch_axis
set logscale y 10
set ylabel "comm_comp_ratio (communication time / expert FFN time, log scale)"
@ratio_log_tics
set lmargin at screen 0.085; set rmargin at screen 0.6
set key at screen 0.615, screen 0.905 left top vertical Left reverse font KEYFONT

# the network-bound region above 1.0, shaded, with its line labelled
set object 1 rect from graph 0, first 1 to graph 1, graph 1 fc rgb "#fbe3dc" fs solid 0.6 noborder behind
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead lc rgb "#b2182b" lw 2 dt 1 front
set label 1 "network-bound above the 1.0 line (comm_comp_ratio > 1)" at graph 0.015, graph 0.96 left \
    tc rgb "#b2182b" front
set label 2 "compute-bound below" at graph 0.985, first 1 right offset 0, -0.9 tc rgb "#555555" front
# keep 1.0 and a decade around it in view
set yrange [YMIN < 0.3 ? YMIN / 1.5 : 0.2 : YMAX > 3 ? YMAX * 1.5 : 5]

REF_RATIO = (REF && strstrt(REF_COLS, " comm_comp_ratio ")) ? ", REF_FILE using (column('batch')):(pos(column('comm_comp_ratio'))) lc rgb REFCOLOR lw 2.5 pt 9 ps 1.3*PS dt 4 title REF_LABEL" : ""

plot for [i=1:N] FILE[i] using (column("batch")):(pos(column("comm_comp_ratio"))) \
        lc rgb color(i) lw lw_src(SRC[i]) pt pt_src(SRC[i]) dt dt_src(SRC[i]) title TITLE[i] \
     @REF_RATIO
