#!/usr/bin/env bash
# example.sh - the foundation's headline command on 4 ranks writes layer.csv with every metric
# column of docs/CSV.md (layer.csv), the per-iteration samples and per-rank files, and run.json;
# --check passes.
. "$(dirname "$0")/lib.sh"

mpi 4 "$BIN/moeperf-layer" --model mixtral-8x7b --hidden 1024 --ffn 2048 --batch 1,16,64 \
    --layout tp1ep4,tp2ep2 --routing hot:2:15 --check --out "$TMP/run" >"$TMP/stdout" ||
    fail "moeperf-layer exit $?"
cat "$TMP/stdout"
for c in source batch tokens_per_rank layout routing placement iters layer_us layer_p99_us \
    layer_mean_us layer_stdev_us layer_min_us layer_max_us layer_ci_lo_us layer_ci_hi_us ffn_us \
    ffn_mean_us comm_us comm_comp_ratio bubble_ratio load_imbalance local_hit_rate bytes_rank_max \
    bytes_internode check_error; do
    col "$TMP/run/layer.csv" "$c" >/dev/null || fail "layer.csv has no column $c"
done
[ "$(rows "$TMP/run/layer.csv")" -eq 6 ] || fail "expected 6 points"
# samples: one row per iteration and point (20 iterations by default); ranks: one per rank and point
[ "$(rows "$TMP/run/layer_samples.csv")" -eq 120 ] || fail "expected 120 samples"
[ "$(rows "$TMP/run/layer_ranks.csv")" -eq 24 ] || fail "expected 24 per-rank rows"
# the layer is the slowest rank's sum of phases, so it bounds each component
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { if ($c["layer_us"] + 1e-9 < $c["ffn_us"] || $c["layer_min_us"] > $c["layer_us"] ||
          $c["layer_us"] > $c["layer_max_us"] || $c["layer_ci_lo_us"] > $c["layer_us"] ||
          $c["layer_ci_hi_us"] < $c["layer_us"] || $c["check_error"] > 1e-5 ||
          $c["local_hit_rate"] < 0 || $c["local_hit_rate"] > 1 || $c["bubble_ratio"] < 0 ||
          $c["bubble_ratio"] >= 1 || $c["load_imbalance"] < 1) { print "FAIL: inconsistent row " NR; bad = 1 } }
    END { exit bad }' "$TMP/run/layer.csv" || exit 1
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['finished'] is True and d['world'] == 4 and len(d['ranks']) == 4 and d['argv'][0].endswith('moeperf-layer')" "$TMP/run/run.json" ||
    fail "run.json is not finished or lacks the ranks"
echo PASS
