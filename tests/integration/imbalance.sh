#!/usr/bin/env bash
# imbalance.sh - hot-expert routing with contiguous placement shows a larger bubble_ratio (a timing
# study: the perf tier) and load_imbalance than uniform routing, and replicate-hot lowers
# load_imbalance and raises local_hit_rate (the first seed's hot-expert effect and its remedy).
. "$(dirname "$0")/lib.sh"

mpi 2 "$BIN/moeperf-layer" --experts 8 --topk 2 --shared 0 --hidden 512 --ffn 1024 --batch 256 \
    --routing uniform,hot:2:15 --placement contiguous,replicate-hot:2 --warmup 2 --iters 10 \
    --quiet --out "$TMP/run" || fail "moeperf-layer exit $?"

# value ROUTING PLACEMENT COLUMN
value() {
    awk -F, -v r="$1" -v p="$2" -v n="$3" '
        NR == 1 { for (i = 1; i <= NF; i++) { if ($i == n) c = i; if ($i == "routing") rc = i;
                  if ($i == "placement") pc = i } next }
        $rc == r && $pc == p { print $c }' "$TMP/run/layer.csv"
}
u_bub=$(value uniform contiguous bubble_ratio)
h_bub=$(value hot:2:15 contiguous bubble_ratio)
u_imb=$(value uniform contiguous load_imbalance)
h_imb=$(value hot:2:15 contiguous load_imbalance)
r_imb=$(value hot:2:15 replicate-hot:2 load_imbalance)
h_hit=$(value hot:2:15 contiguous local_hit_rate)
r_hit=$(value hot:2:15 replicate-hot:2 local_hit_rate)
echo "bubble_ratio   uniform $u_bub  hot $h_bub"
echo "load_imbalance uniform $u_imb  hot $h_imb  hot+replicate-hot:2 $r_imb"
echo "local_hit_rate hot $h_hit  hot+replicate-hot:2 $r_hit"
judge=0
timing_study "the hot experts' bubble_ratio" && judge=1
awk -v judge=$judge -v ub="$u_bub" -v hb="$h_bub" -v ui="$u_imb" -v hi="$h_imb" -v ri="$r_imb" -v hh="$h_hit" -v rh="$r_hit" 'BEGIN {
    bad = 0
    if (judge && !(hb > ub + 0.1)) { print "FAIL: hot bubble_ratio not clearly above uniform"; bad = 1 }
    if (!(hi > ui * 1.3)) { print "FAIL: hot load_imbalance not clearly above uniform"; bad = 1 }
    if (!(ri < hi - 0.3)) { print "FAIL: replicate-hot did not lower load_imbalance"; bad = 1 }
    if (!(rh > hh + 0.2)) { print "FAIL: replicate-hot did not raise local_hit_rate"; bad = 1 }
    exit bad }' || exit 1
echo PASS
