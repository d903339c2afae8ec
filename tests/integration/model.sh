#!/usr/bin/env bash
# model.sh - moeperf-layer on the model backends: 64 virtual ranks in one process write the same
# layer.csv columns as a measurement with source=model, --overlap pipelines the modelled layer
# (overlap 1 unchanged), bad combinations and profiles are refused with exit 2, and --backend model
# alone or --comm model alone takes the rest of the model's flags by default; moeperf-a2a's
# modelled uniform points and moeperf-ffn's modelled points take exactly the profile's exchange
# and FFN formulas (recomputed here from run.json's profile).
. "$(dirname "$0")/lib.sh"

"$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --model seed-k3 \
    --layout tp4ep16 --batch 1,16,128 --routing uniform,hot:4:15 --placement contiguous,replicate-hot:4 \
    --iters 8 --quiet --out "$TMP/model" 2>"$TMP/model.err" || fail "model run exit $?"
# seed-k3's weights (its 200B parameters as its shape gives them) fit an 80 GB GPU as tp4ep16,
# KV cache included: 9.8 to 14.9 GB, below the 72 GB usable, and nothing is refused
[ ! -s "$TMP/model.err" ] || fail "seed-k3 on tp4ep16 warned: $(cat "$TMP/model.err")"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "mem_gb_per_gpu") m = i; next }
    !($m > 5 && $m < 72) { bad = 1 } END { exit bad || !m }' "$TMP/model/layer.csv" ||
    fail "mem_gb_per_gpu is not between 5 and 72 GB in every seed-k3 point"
# deepseek-v3's do not on 16 GPUs as tp1ep16 (116 GB of weights per GPU): the first point is
# named, both counted in one line
"$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --model deepseek-v3 \
    --world 16 --layout tp1ep16 --batch 1,16 --iters 2 --quiet --out "$TMP/ds" 2>"$TMP/ds.err" ||
    fail "deepseek-v3 model run exit $?"
[ "$(grep -c 'could not be deployed' "$TMP/ds.err")" -eq 2 ] &&
    grep -q "2 of the 2 points modelled could not be deployed" "$TMP/ds.err" ||
    fail "undeployable points: $(cat "$TMP/ds.err")"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "mem_gb_per_gpu") m = i; next }
    !($m > 80) { bad = 1 } END { exit bad || !m }' "$TMP/ds/layer.csv" ||
    fail "mem_gb_per_gpu is not above 80 GB in every deepseek-v3 tp1ep16 point"
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
refused "$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --world 8 --layout tp2ep8
refused "$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --world 8 --check
refused "$BIN/moeperf-a2a" --backend model --comm model --cluster h100-ndr --world 8 --inject-delay-us 5
refused "$BIN/moeperf-ffn" --backend model --comm model --cluster h100-ndr --world 8 --max-memory 1G
printf 'base = h100-ndr\ninter_bw = -1\n' >"$TMP/neg.ini"
refused "$BIN/moeperf-layer" --backend model --comm model --cluster "$TMP/neg.ini" --world 8
printf 'flops = 1e15\n' >"$TMP/missing.ini"
refused "$BIN/moeperf-layer" --backend model --comm model --cluster "$TMP/missing.ini" --world 8
printf 'base = h100-ndr\nnic_speed = 3\n' >"$TMP/unknown.ini"
refused "$BIN/moeperf-layer" --backend model --comm model --cluster "$TMP/unknown.ini" --world 8

# moeperf-a2a's uniform pattern on 32 virtual ranks (4 nodes of 8): one exchange round whose time
# is the profile's equation (docs/planning.md) for the largest volume a rank moves on each link
# class, the inter-node part stretched by the incast of senders from other nodes; and
# moeperf-ffn's points: the FFN roofline of the critical rank's rows and active experts (a GEMM
# loop's launches and one fused call's cost). The a2a runs on a profile with congestion (the
# presets have none: a non-blocking fat tree), the first seed's "congestion tree", to see incast.
printf 'base = h100-ndr\ncongestion = 0.15\n' >"$TMP/tree.ini"
"$BIN/moeperf-a2a" --backend model --comm model --cluster "$TMP/tree.ini" --world 32 \
    --layout tp1ep32,tp2ep16,tp4ep8 --bytes 1K,1M --iters 2 --warmup 1 --quiet --out "$TMP/a2a" ||
    fail "modelled a2a exit $?"
"$BIN/moeperf-ffn" --backend model --comm model --cluster h100-ndr --world 8 --shared 1 \
    --layout tp1ep8,tp2ep4 --batch 1,64,512 --routing uniform,zipf:1.2 --weight-dtype bf16,fp8 \
    --iters 2 --quiet --out "$TMP/ffn" || fail "modelled ffn exit $?"
"$BIN/moeperf-ffn" --backend model --comm model --cluster h100-ndr --world 8 --shared 1 \
    --layout tp1ep8 --batch 1,512 --routing uniform --weight-dtype bf16,fp8 --gemm grouped \
    --iters 2 --quiet --out "$TMP/ffn-fused" || fail "modelled fused ffn exit $?"
python3 - "$TMP/a2a" "$TMP/ffn" "$TMP/ffn-fused" <<'PY' || fail "modelled a2a or ffn times are not the profile's formulas"
import csv, json, math, sys
def close(a, b):
    return abs(a - b) <= 1e-5 * max(abs(a), abs(b)) + 1e-9
a2a, ffn, fused = sys.argv[1:4]
cl = json.load(open(f"{a2a}/run.json"))["cluster"]
assert cl["congestion"] > 0, "a profile with congestion is needed to see the incast term"
def exchange_us(intra_max, inter_max, uses_intra, uses_inter, incast):
    intra = cl["intra_lat_us"] + intra_max / (cl["intra_bw"] * cl["intra_eff"]) * 1e6 if uses_intra else 0
    inter = 0
    if uses_inter:
        cong = 1 + cl["congestion"] * math.log2(max(incast, 1))
        inter = cl["inter_lat_us"] + inter_max / (cl["inter_bw"] * cl["inter_eff"]) * 1e6 * cong
    return max(intra, inter)
gpn, n = cl["gpus_per_node"], 0
for r in csv.DictReader(open(f"{a2a}/a2a.csv")):
    tp, ep, b = int(r["tp"]), int(r["ep"]), float(r["bytes_per_peer"])
    assert r["source"] == "model" and float(r["bytes_per_rank"]) == b * ep, r
    # EP rank p lives on the node of its first TP rank, p·tp; each sends b to every other EP rank
    node = [p * tp // gpn for p in range(ep)]
    same = max(sum(1 for q in range(ep) if q != p and node[q] == node[p]) for p in range(ep))
    other = max(sum(1 for q in range(ep) if node[q] != node[p]) for p in range(ep))
    want = exchange_us(same * b, other * b, same > 0, other > 0, other)
    for c in ("time_us", "time_p99_us", "time_min_us", "time_max_us"):
        assert close(float(r[c]), want), (r["layout"], b, c, r[c], want)
    assert close(float(r["algbw_GBps"]), b * ep / (want * 1e3)), r
    n += 1
assert n == 6, n
cl = json.load(open(f"{ffn}/run.json"))["cluster"]
def fp8_bytes(k, m):
    return k * m + 4 * math.ceil(k / 128) * math.ceil(m / 128)
n = 0
rows_of = [(r, "loop") for r in csv.DictReader(open(f"{ffn}/ffn.csv"))]
rows_of += [(r, "grouped") for r in csv.DictReader(open(f"{fused}/ffn.csv"))]
for r, gemm in rows_of:
    H, Dl = int(r["hidden"]), int(r["ffn"]) // int(r["tp"])
    rows, act, fp8 = int(r["rows"]), int(r["active_experts"]), r["weight_dtype"] == "fp8"
    flops = 6 * H * Dl * rows
    wbytes = act * (2 * fp8_bytes(H, Dl) + fp8_bytes(Dl, H) if fp8 else 3 * H * Dl * cl["elem_bytes"])
    # fp8: a library GEMM's rate with --gemm loop, a fused kernel's with grouped (cluster.h)
    fp8_eff = cl["flops_fp8_eff"] if gemm == "loop" else cl["fused_fp8_eff"]
    F = cl["flops_fp8"] * fp8_eff if fp8 else cl["flops"] * cl["flops_eff"]
    M = cl["hbm_bw"] * cl["hbm_eff"]
    c_us, m_us = flops / F * 1e6, wbytes / M * 1e6
    fixed = cl["launch_us"] * act if gemm == "loop" else cl["ffn_call_us"]
    want = max(c_us, m_us) + cl["ffn_blend"] * min(c_us, m_us) + fixed
    assert int(r["flops"]) == flops and int(r["weight_bytes"]) == int(wbytes), r
    for c in ("ffn_us", "ffn_p99_us", "ffn_min_us", "ffn_max_us"):
        assert close(float(r[c]), want), (r["layout"], r["batch"], r["weight_dtype"], c, r[c], want)
    # the roofline of the rates the model runs at: attainable = min(F, intensity · M)
    assert close(float(r["peak_GFLOPs"]), F / 1e9) and close(float(r["peak_GBps"]), M / 1e9), r
    attain = min(F, flops / wbytes * M)
    assert r["bound"] == ("memory" if flops / wbytes * M < F else "compute"), r
    assert close(float(r["roofline_fraction"]), flops / (want * 1e-6) / attain), r
    n += 1
assert n == 28, n
print(f"a2a and ffn model times match the profile's formulas")
PY

# --tokens-per-rank T (docs/CONVENTIONS.md) is --batch T·ep of each layout: the same rows as the
# --batch runs of each layout, tokens_per_rank T; with both flags, exit 2
TPR="--backend model --comm model --cluster h100-ndr --world 8 --hidden 256 --ffn 128 --experts 16
    --topk 4 --iters 3 --quiet"
# shellcheck disable=SC2086
"$BIN/moeperf-layer" $TPR --layout tp1ep8,tp2ep4 --tokens-per-rank 2,16 --out "$TMP/tpr" ||
    fail "--tokens-per-rank exit $?"
# shellcheck disable=SC2086
"$BIN/moeperf-layer" $TPR --layout tp1ep8 --batch 16,128 --out "$TMP/tpr-b1" || fail "exit $?"
# shellcheck disable=SC2086
"$BIN/moeperf-layer" $TPR --layout tp2ep4 --batch 8,64 --out "$TMP/tpr-b2" || fail "exit $?"
[ "$(col "$TMP/tpr/layer.csv" tokens_per_rank | tr '\n' ' ')" = "2 16 2 16 " ] ||
    fail "tokens_per_rank: $(col "$TMP/tpr/layer.csv" tokens_per_rank | tr '\n' ' ')"
cmp <(grep -v '^#' "$TMP/tpr/layer.csv") <(cat "$TMP/tpr-b1/layer.csv"; tail -n +2 "$TMP/tpr-b2/layer.csv") ||
    fail "--tokens-per-rank rows differ from the --batch rows of each layout"
"$BIN/moeperf-layer" --tokens-per-rank 2 --batch 16 --out "$TMP/both" 2>"$TMP/err" && fail "both flags taken"
grep -q -- "--tokens-per-rank and --batch" "$TMP/err" || fail "both flags: $(cat "$TMP/err")"
echo "--tokens-per-rank 2,16 on tp1ep8 and tp2ep4: the rows of --batch 16,128 and 8,64"

# --backend model alone takes the virtual comm, the default profile (said in the console) and a
# world of the layout's ranks, or one node of the profile without a layout; --comm model alone
# the virtual backend; an explicit pair that does not match is still refused
"$BIN/moeperf-layer" --backend model --layout tp1ep16 --batch 16 --iters 2 --out "$TMP/alone" \
    >"$TMP/alone.out" || fail "moeperf-layer --backend model alone exit $?"
grep -q "16 ranks on 2 node(s), backend model, comm model, cluster h100-ndr (the default" \
    "$TMP/alone.out" || fail "the console does not name the default profile: $(head -1 "$TMP/alone.out")"
[ "$(col "$TMP/alone/layer.csv" comm)" = model ] && [ "$(col "$TMP/alone/layer.csv" world)" = 16 ] ||
    fail "--backend model alone: comm $(col "$TMP/alone/layer.csv" comm), world $(col "$TMP/alone/layer.csv" world)"
"$BIN/moeperf-ffn" --comm model --model deepseek-v3 --batch 1:64:x4 --iters 2 --quiet \
    --out "$TMP/ffn_alone" || fail "moeperf-ffn --comm model alone exit $?"
[ "$(rows "$TMP/ffn_alone/ffn.csv")" -eq 4 ] && [ "$(col "$TMP/ffn_alone/ffn.csv" world | sort -u)" = 8 ] &&
    [ "$(col "$TMP/ffn_alone/ffn.csv" backend | sort -u)" = model ] ||
    fail "moeperf-ffn --comm model alone: not 4 rows of the model on one node of 8"
"$BIN/moeperf-layer" --backend model --comm mpi --batch 16 --out "$TMP/mixed" 2>"$TMP/err" &&
    fail "--backend model --comm mpi taken"
grep -q -- "--backend model needs a virtual --comm" "$TMP/err" || fail "mixed pair: $(cat "$TMP/err")"
echo "--backend model alone: comm model, cluster h100-ndr (said), world from the layout or a node"

# the console's variant column: its title says what it holds, a legend spells its parts, and each
# title starts where its values do
"$BIN/moeperf-layer" --backend model --layout tp1ep8 --batch 16 --iters 2 --dispatch-dtype fp8 \
    --weight-dtype fp8 >"$TMP/variant.out" || fail "variant run exit $?"
grep -q '^# variant: dispatch\[/dedup\]\[/dispatch dtype\]\[/w weight dtype\]' "$TMP/variant.out" ||
    fail "no legend of the variant column"
python3 - "$TMP/variant.out" <<'PY' || fail "the console's titles are not over their columns"
import sys
lines = [l.rstrip("\n") for l in open(sys.argv[1]) if not l.startswith("#")]
title, row = lines[0], lines[1]
for name, value in (("variant", "dynamic/fp8/wfp8"), ("batch", "16"), ("placement", "contiguous")):
    t, v = title.index(name), row.index(value)
    # left-aligned columns start together, right-aligned ones end together
    assert t == v or t + len(name) == v + len(value), (name, t, v, title, row)
print("console titles over their columns:", title.split()[:5])
PY
# the workload label says what ran: a preset whose shape flags changed is named with them
"$BIN/moeperf-layer" --experts 16 --topk 4 --shared 0 --hidden 64 --ffn 64 --batch 4 --iters 2 \
    --warmup 0 >"$TMP/label.out" || fail "the relabelled run exit $?"
head -n 1 "$TMP/label.out" | grep -qF "model qwen3-30b-a3b with --hidden 64 --ffn 64 --experts 16 --topk 4 (H 64" ||
    fail "the console does not name the changed fields: $(head -n 1 "$TMP/label.out")"
"$BIN/moeperf-ffn" --backend model --model deepseek-v3 --batch 4 --iters 2 >"$TMP/label.out" ||
    fail "deepseek-v3 ffn exit $?"
head -n 1 "$TMP/label.out" | grep -qF "model deepseek-v3 (H 7168" ||
    fail "the preset as it is is not named alone: $(head -n 1 "$TMP/label.out")"
echo PASS
