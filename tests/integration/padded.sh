#!/usr/bin/env bash
# padded.sh - the padded dispatch: --check passes on 1, 2 and 4 ranks with every placement, a
# lossless padded point routes exactly the pairs the dynamic one does (same load_imbalance, no
# drops) while moving the whole slots (bytes_rank_max = 2·(ep−1)·slots·cap·H·4), a capacity
# factor drops pairs under skew, and bad combinations are refused before anything runs (--graph
# needs the padded dispatch on a backend that captures graphs), and calibration replays the
# padded rows in their mode.
. "$(dirname "$0")/lib.sh"

common="--experts 16 --topk 2 --shared 1 --hidden 128 --ffn 128 --warmup 1 --iters 3 --check --quiet"
mpi 4 "$BIN/moeperf-layer" $common --batch 8,64 --layout tp1ep4,tp2ep2 --routing hot:2:15,gate \
    --placement contiguous,round-robin,replicate-hot:2,eplb:6 --dispatch dynamic,padded,padded:0.5 \
    --out "$TMP/run4" || fail "moeperf-layer on 4 ranks exit $?"
[ "$(rows "$TMP/run4/layer.csv")" -eq 96 ] || fail "expected 96 points, got $(rows "$TMP/run4/layer.csv")"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { k = $c["layout"] SUBSEP $c["routing"] SUBSEP $c["placement"] SUBSEP $c["batch"]
      imb[k, $c["dispatch"]] = $c["load_imbalance"]; drop[k, $c["dispatch"]] = $c["drop_rate"]
      bytes[k, $c["dispatch"]] = $c["bytes_rank_max"]; keys[k] = 1
      if ($c["check_error"] == "" || $c["check_error"] + 0 > 1e-5) { print "FAIL: check " $0; bad = 1 }
      if ($c["dispatch"] == "padded" && $c["placement"] == "contiguous") {
        ep = $c["ep"]; cap = $c["tokens_per_rank"]; slots = 16 / ep
        want = 2 * (ep - 1) * slots * cap * 128 * 4
        if ($c["bytes_rank_max"] + 0 != want) {
          print "FAIL: padded bytes_rank_max " $c["bytes_rank_max"] " expected " want ": " $0; bad = 1 } } }
    END {
      for (k in keys) {
        if (imb[k, "padded"] != imb[k, "dynamic"] || drop[k, "padded"] + 0 != 0 || drop[k, "dynamic"] + 0 != 0) {
          print "FAIL: lossless padded differs from dynamic at " k ": imbalance " imb[k, "padded"] " vs " imb[k, "dynamic"]; bad = 1 }
        if (drop[k, "padded:0.5"] + 0 > 0) dropped++
        if (bytes[k, "padded"] + 0 < bytes[k, "dynamic"] + 0) { print "FAIL: padded moved fewer bytes at " k; bad = 1 }
      }
      split("tp1ep4 tp2ep2", ls, " ")
      for (i in ls) {
        k = ls[i] SUBSEP "hot:2:15" SUBSEP "contiguous" SUBSEP 64
        printf "%s hot:2:15 batch 64: bytes_rank_max dynamic %d, padded %d; drop_rate padded:0.5 %.3f\n",
               ls[i], bytes[k, "dynamic"], bytes[k, "padded"], drop[k, "padded:0.5"]
        if (!(drop[k, "padded:0.5"] > 0.1)) { print "FAIL: padded:0.5 dropped nothing under hot:2:15"; bad = 1 } }
      exit bad }' "$TMP/run4/layer.csv" || exit 1

for np in 1 2; do
    placements=contiguous
    [ $np -eq 1 ] || placements=contiguous,eplb:4
    mpi $np "$BIN/moeperf-layer" $common --batch 5,32 --routing zipf:1.2 \
        --placement $placements --dispatch dynamic,padded,padded:0.75 --out "$TMP/run$np" ||
        fail "moeperf-layer on $np ranks exit $?"
    col "$TMP/run$np/layer.csv" check_error | awk '$1 == "" || $1 > 1e-5 { print "FAIL: check " $1; b = 1 } END { exit b }' ||
        fail "--check on $np ranks"
done

# calibration replays every row in its dispatch mode: the padded rows are fitted too
"$BUILD/planner/moeperf-plan" --calibrate "$TMP/run2" --out "$TMP/cal.ini" >"$TMP/cal.out" ||
    fail "moeperf-plan --calibrate exit $?"
grep -q "on 12 points from 1 run" "$TMP/cal.out" || fail "calibration did not keep the 12 rows: $(head -1 "$TMP/cal.out")"

refused "$BIN/moeperf-layer" --dispatch padded:0 --batch 4 --quiet
refused "$BIN/moeperf-layer" --dispatch fixed --batch 4 --quiet
refused "$BIN/moeperf-layer" --dispatch padded --overlap 2 --batch 4 --quiet
# the model times the padded dispatch too (tests/integration/model_parity.sh checks its counts)
"$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --world 8 \
    --dispatch padded --batch 4 --quiet || fail "modelled --dispatch padded exit $?"
refused "$BIN/moeperf-layer" --graph --batch 4 --quiet
refused "$BIN/moeperf-layer" --graph --dispatch padded --batch 4 --quiet
echo PASS
