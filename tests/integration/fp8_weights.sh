#!/usr/bin/env bash
# fp8_weights.sh - --weight-dtype fp8 on the measured path (cpu + mpi), H = 200 and D = 300 (edge
# blocks of 72 and 44 values; tp2 shards of Dl = 150): on 1, 2 and 4 ranks (tp1 and tp2), uniform
# and gate routing, a shared expert, with bf16 and fp8 dispatch, --check passes (the tight bound
# against the reference of the dequantized weights, the loose one against the generated ones);
# moeperf-ffn's weight_bytes are the bytes the GEMMs read (fp8: 3·H·Dl codes plus 4 bytes per
# 128×128 block of each matrix, per active expert) and its roofline columns (bound,
# roofline_fraction) follow from them; run.json lists both types with an expert's bytes; the
# weight dtype is a key (the bf16 and fp8 points run on the same blocked weights, so their routing
# and rows agree); calibration leaves fp8-weight points out; --weight-dtype int4 is refused naming the flag and the accepted words, by both
# binaries (the cuda backend's fp8 weights: gpu_fp8_weights.sh).
. "$(dirname "$0")/lib.sh"
LAYER=$BIN/moeperf-layer
FFN=$BIN/moeperf-ffn
PLAN=$BUILD/planner/moeperf-plan
shape="--hidden 200 --ffn 300 --experts 8 --topk 2 --shared 1 --iters 1 --warmup 0 --quiet
    --no-flush-cache"
sweep="--batch 16 --routing uniform,gate --check --dispatch-dtype bf16,fp8 --weight-dtype bf16,fp8"

# --check on 1, 2 and 4 ranks (tp2 shards quantized in blocks of their own)
# shellcheck disable=SC2086
"$LAYER" $shape $sweep --out "$TMP/l1" || fail "1-rank fp8 weights exit $?"
# shellcheck disable=SC2086
mpi 2 "$LAYER" $shape $sweep --out "$TMP/l2" || fail "2-rank fp8 weights exit $?"
# shellcheck disable=SC2086
mpi 4 "$LAYER" $shape $sweep --layout tp1ep4,tp2ep2 --out "$TMP/l4" ||
    fail "4-rank fp8 weights exit $?"
python3 - "$TMP/l1" "$TMP/l2" "$TMP/l4" <<'PY' || fail "layer points"
import csv, json, sys
seen = 0
for d in sys.argv[1:]:
    pts = {}
    for r in csv.DictReader(open(d + "/layer.csv")):
        # fp8 weights: the tight bound is at least 1e-3 (MP_FP8_WEIGHT_TIGHT, core/layer/layer.h)
        tol = 1e-3 if r["weight_dtype"] == "fp8" else 1e-5
        assert float(r["check_error"]) <= tol, (d, r["weight_dtype"], r["check_error"])
        k = (r["layout"], r["routing"], r["dispatch_dtype"])
        pts.setdefault(k, {})[r["weight_dtype"]] = r
    for k, v in pts.items():
        assert set(v) == {"bf16", "fp8"}, (d, k, set(v))
        # the same routing and rows: only the FFN's weights differ
        for c in ("tokens_per_rank", "bytes_rank_max", "load_imbalance"):
            assert v["bf16"][c] == v["fp8"][c], (d, k, c, v["bf16"][c], v["fp8"][c])
        seen += 1
    run = json.load(open(d + "/run.json"))
    wt = {e["dtype"]: e["expert_weight_bytes"] for e in run["weight_dtype"]}
    assert wt == {"bf16": 3 * 200 * 300 * 4, "fp8": 3 * 200 * 300 + 4 * 3 * 2 * 3}, wt
print(f"{seen} point pairs checked with bf16 and fp8 weights")
PY

# moeperf-ffn: weight bytes by the formula, the roofline columns from them (1 rank; 2 ranks tp2)
ffn="--hidden 200 --ffn 300 --experts 8 --topk 2 --shared 1 --iters 2 --warmup 0 --quiet
    --no-flush-cache --batch 1,8,64 --routing uniform --weight-dtype bf16,fp8"
# shellcheck disable=SC2086
"$FFN" $ffn --out "$TMP/f1" || fail "1-rank moeperf-ffn exit $?"
# shellcheck disable=SC2086
mpi 2 "$FFN" $ffn --layout tp2ep1 --out "$TMP/f2" || fail "2-rank moeperf-ffn exit $?"
python3 - "$TMP/f1" "$TMP/f2" <<'PY' || fail "ffn weight bytes"
import csv, math, sys
H, D = 200, 300
n = 0
for d, tp in zip(sys.argv[1:], (1, 2)):
    rows = list(csv.DictReader(open(d + "/ffn.csv")))
    assert {r["weight_dtype"] for r in rows} == {"bf16", "fp8"}, d
    for r in rows:
        Dl, a = D // tp, int(r["active_experts"])
        blocks = 3 * math.ceil(H / 128) * math.ceil(Dl / 128)
        per = 3 * H * Dl * 4 if r["weight_dtype"] == "bf16" else 3 * H * Dl + 4 * blocks
        assert int(r["weight_bytes"]) == a * per, (d, r["weight_dtype"], r["weight_bytes"], a * per)
        assert int(r["flops"]) == 6 * H * Dl * int(r["rows"]), (d, r["flops"])
        # the roofline of the bytes read: attainable = min(peak, flops/weight_bytes · peak bw)
        peak, bw = float(r["peak_GFLOPs"]), float(r["peak_GBps"])
        mem = int(r["flops"]) / int(r["weight_bytes"]) * bw
        att = min(peak, mem)
        frac = float(r["achieved_GFLOPs"]) / att
        assert abs(float(r["roofline_fraction"]) - frac) <= 1e-3 * frac, (d, r["roofline_fraction"], frac)
        assert r["bound"] == ("memory" if mem < peak else "compute"), (d, r["bound"], mem, peak)
        n += 1
print(f"{n} ffn points: weight bytes and roofline by the formula")
PY

# calibration leaves the fp8-weight points out (the cpu's dequantizing path is not fp8 GEMMs):
# the 1-rank sweep's 8 points and the 1-rank ffn sweep's 6 give 4 and 3
"$PLAN" --calibrate --out "$TMP/c.ini" "$TMP/l1" "$TMP/f1" >"$TMP/cal.out" ||
    fail "calibrate exit $?"
grep -q "on 7 points from 2 run" "$TMP/cal.out" || fail "calibration points: $(head -1 "$TMP/cal.out")"

# bad input: a type that does not exist, on both binaries
for bin in "$LAYER" "$FFN"; do
    refused "$bin" --weight-dtype int4 --batch 1 --iters 1 --quiet
    grep -q -- "--weight-dtype" "$TMP/refused.err" || fail "the int4 refusal does not name the flag"
    grep -q "bf16|fp8" "$TMP/refused.err" || fail "the int4 refusal does not say what is accepted"
done
echo "fp8_weights: ok"
