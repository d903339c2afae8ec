#!/usr/bin/env bash
# model.sh - moeperf-layer on the model backends: 64 virtual ranks in one process write the same
# layer.csv columns as a measurement with source=model, --overlap pipelines the modelled layer
# (overlap 1 unchanged), and bad combinations and profiles are refused with exit 2.
. "$(dirname "$0")/lib.sh"

"$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --model seed-k3 \
    --layout tp4ep16 --batch 1,16,128 --routing uniform,hot:4:15 --placement contiguous,replicate-hot:4 \
    --iters 8 --quiet --out "$TMP/model" 2>"$TMP/model.err" || fail "model run exit $?"
# seed-k3's weights (the seed's 2.8T parameters) do not fit 80 GB: the first point is named, the
# other 11 counted in one line
[ "$(grep -c 'could not be deployed' "$TMP/model.err")" -eq 2 ] &&
    grep -q "12 of the 12 points modelled could not be deployed" "$TMP/model.err" ||
    fail "undeployable points: $(cat "$TMP/model.err")"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "mem_gb_per_gpu") m = i; next }
    !($m > 80) { bad = 1 } END { exit bad || !m }' "$TMP/model/layer.csv" ||
    fail "mem_gb_per_gpu is not above 80 GB in every seed-k3 point"
"$BIN/moeperf-layer" --hidden 64 --ffn 64 --experts 8 --topk 2 --batch 1 --iters 2 --quiet \
    --out "$TMP/measured" || fail "measured run exit $?"
[ "$(head -1 "$TMP/model/layer.csv")" = "$(head -1 "$TMP/measured/layer.csv")" ] ||
    fail "model and measured layer.csv headers differ"
[ "$(rows "$TMP/model/layer.csv")" -eq 12 ] || fail "expected 12 model points"
[ "$(col "$TMP/model/layer.csv" source | sort -u)" = model ] || fail "source is not model"
[ "$(col "$TMP/model/layer.csv" world | sort -u)" = 64 ] || fail "world is not 64"
[ "$(rows "$TMP/model/layer_ranks.csv")" -eq $((12 * 64)) ] || fail "expected 64 ranks per point"
python3 - "$TMP/model/run.json" <<'PY' || fail "run.json lacks the cluster profile"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["cluster"]["name"] == "h100-ndr" and d["cluster"]["gpus_per_node"] == 8, d.get("cluster")
assert d["nodes"] == 8 and d["world"] == 64
PY
# the layer is the slowest rank's sum of phases; replication lowers the hot-expert imbalance
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["layer_us"] < $c["ffn_us"] || $c["bubble_ratio"] < 0 || $c["bubble_ratio"] >= 1 { print "FAIL: row " NR; bad = 1 }
    $c["routing"] == "hot:4:15" && $c["batch"] == 128 { imb[$c["placement"]] = $c["load_imbalance"]; lay[$c["placement"]] = $c["layer_us"] }
    END { if (!(imb["replicate-hot:4"] < imb["contiguous"] / 2)) { print "FAIL: imbalance " imb["contiguous"] " -> " imb["replicate-hot:4"]; bad = 1 }
          if (!(lay["replicate-hot:4"] < lay["contiguous"])) { print "FAIL: layer " lay["contiguous"] " -> " lay["replicate-hot:4"]; bad = 1 }
          exit bad }' "$TMP/model/layer.csv" || exit 1

# pipelined: overlap 1 repeats the unpipelined rows; deeper points are recorded as a measured
# pipeline records them (exposed communication in dispatch_us, combine_us 0, an efficiency)
"$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --model seed-k3 \
    --layout tp4ep16 --batch 1,16,128 --routing uniform,hot:4:15 --placement contiguous \
    --overlap 1,2,4 --iters 8 --quiet --out "$TMP/overlap" || fail "model --overlap run exit $?"
[ "$(rows "$TMP/overlap/layer.csv")" -eq 18 ] || fail "expected 18 pipelined model points"
awk -F, 'FNR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    FILENAME == ARGV[1] && $c["placement"] == "contiguous" { v[$c["routing"], $c["batch"]] = $c["layer_us"] }
    FILENAME == ARGV[2] && $c["overlap"] == 1 {
      if (v[$c["routing"], $c["batch"]] != $c["layer_us"] || $c["overlap_efficiency"] != "") { print "FAIL: overlap 1 row " FNR; bad = 1 } }
    FILENAME == ARGV[2] && $c["overlap"] > 1 {
      if ($c["combine_us"] != 0 || $c["overlap_efficiency"] == "" || $c["layer_us"] < $c["ffn_us"] + $c["route_us"]) { print "FAIL: pipelined row " FNR; bad = 1 } }
    END { exit bad }' "$TMP/model/layer.csv" "$TMP/overlap/layer.csv" || exit 1

refused "$BIN/moeperf-layer" --backend model --comm mpi --cluster h100-ndr --world 8
refused "$BIN/moeperf-layer" --backend model --comm model --world 8
refused "$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr
refused "$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --world 8 --layout tp2ep8
refused "$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --world 8 --check
refused "$BIN/moeperf-a2a" --backend model --comm model
printf 'base = h100-ndr\ninter_bw = -1\n' >"$TMP/neg.ini"
refused "$BIN/moeperf-layer" --backend model --comm model --cluster "$TMP/neg.ini" --world 8
printf 'flops = 1e15\n' >"$TMP/missing.ini"
refused "$BIN/moeperf-layer" --backend model --comm model --cluster "$TMP/missing.ini" --world 8
printf 'base = h100-ndr\nnic_speed = 3\n' >"$TMP/unknown.ini"
refused "$BIN/moeperf-layer" --backend model --comm model --cluster "$TMP/unknown.ini" --world 8
echo PASS
