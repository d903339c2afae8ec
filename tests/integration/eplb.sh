#!/usr/bin/env bash
# eplb.sh - eplb:SLOTS lowers load_imbalance below replicate-hot with the same number of extra slots
# on skewed routing (replicate-hot:R on ep ranks adds R·(ep−1) slots), measured on 4 ranks, and
# --check passes with every placement.
. "$(dirname "$0")/lib.sh"

mpi 4 "$BIN/moeperf-layer" --experts 16 --topk 2 --shared 1 --hidden 128 --ffn 128 \
    --batch 64,256 --routing hot:4:15,zipf:1.2,lognormal:1 \
    --placement contiguous,round-robin,replicate-hot:2,eplb:6 --warmup 1 --iters 4 --check \
    --quiet --out "$TMP/run" || fail "moeperf-layer exit $?"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { imb[$c["routing"], $c["batch"], $c["placement"]] = $c["load_imbalance"]
      if ($c["check_error"] + 0 > 1e-5 || $c["check_error"] == "") { print "FAIL: check " $0; bad = 1 } }
    END {
      split("hot:4:15 zipf:1.2 lognormal:1", rs, " "); split("64 256", bs, " ")
      for (i in rs) for (j in bs) {
        e = imb[rs[i], bs[j], "eplb:6"]; r = imb[rs[i], bs[j], "replicate-hot:2"]
        printf "%-12s batch %3s: load_imbalance replicate-hot:2 %.3f, eplb:6 %.3f\n", rs[i], bs[j], r, e
        if (!(e < r)) { print "FAIL: eplb does not beat replicate-hot"; bad = 1 } }
      exit bad }' "$TMP/run/layer.csv" || exit 1
echo PASS
