# common.gp - terminal, colours and helpers every figure script loads; plots/render sets FMT (png or
# svg), OUT (the image to write) and DATA (the folder of curve files and the figure's curves.gp).

# Font sizes: the svg terminal draws text smaller than pngcairo at the same nominal size.
# TERMINAL: the terminal at a height in pixels (sprintf), for a figure that needs more than 800.
if (FMT eq "svg") {
    TERMINAL = "set terminal svg size 1200,%d font 'sans,15' noenhanced background '#ffffff' linewidth 1"
    KEYFONT = ",12"; TITLEFONT = ",17"; SMALLFONT = ",11"; PS = 0.75
} else {
    TERMINAL = "set terminal pngcairo size 1200,%d font 'sans,12' noenhanced background '#ffffff' linewidth 1"
    KEYFONT = ",11"; TITLEFONT = ",15"; SMALLFONT = ",10"; PS = 1.1
}
eval sprintf(TERMINAL, 800)
set output OUT
set encoding utf8
set datafile separator ","
set datafile missing ""

# One colour per curve (layout / routing / placement / source), cycled past 12; the first six are
# the colour-blind safe Okabe-Ito colours; near-black is kept for reference curves.
array PALETTE[12] = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#7f3c8d", "#8c6d31", \
    "#117733", "#882255", "#44aa99", "#999933"]
color(i) = PALETTE[(i - 1) % 12 + 1]
REFCOLOR = "#222222"

# measured: filled points, thick lines; model (the planner's projection): open points, thin lines,
# dashed where dashes do not already carry a meaning.
pt_src(s) = (s eq "model") ? 6 : 7
lw_src(s) = (s eq "model") ? 1.5 : 2.5
dt_src(s) = (s eq "model") ? 2 : 1

set grid xtics ytics mxtics mytics lc rgb "#dddddd" lw 1
set border lw 1.2
set tics nomirror
set key box lc rgb "#bbbbbb" opaque samplen 2.5 spacing 1.15 width -2
set style data linespoints
set pointsize PS

# A positive value or NaN, for log axes (comm_us can be slightly negative, see docs/METRICS.md).
pos(v) = (v > 0) ? v : NaN

# Batch axis: log2, one tic per power of two.
batch_axis = "set logscale x 2; set xtics 2 format '%.0f'; set mxtics 1; set xlabel 'batch (tokens per decode step, whole EP instance; log2 scale)'"

# Byte counts as "4 KiB", "16 MiB".
bytes_label(v) = (v < 1024) ? sprintf("%d B", v) : (v < 1048576) ? sprintf("%d KiB", v / 1024) : \
    (v < 1073741824) ? sprintf("%d MiB", v / 1048576) : sprintf("%d GiB", v / 1073741824)

# Ratio axes on a log scale: 1, 2 and 5 of every decade labelled, so that a range narrower than a
# decade still shows several labels ("%g": 0.05, 0.1, 0.2, ...).
ratio_log_tics = "set format y '%g'; set ytics (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)"

SPLIT = 0 # plots/render sets it to 1 when measured and modelled curves differ in scale by over 10x
load DATA."/curves.gp"
# one x value (a single batch): a range around it, which log axes need
if (exists("XMIN") && XMIN == XMAX) { XMIN = XMIN / 2.0; XMAX = XMAX * 2.0 }
# many curves: a smaller legend so it stays beside its plot
if (N > 12) { KEYFONT = SMALLFONT }
