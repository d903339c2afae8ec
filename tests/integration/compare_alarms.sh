#!/usr/bin/env bash
# compare_alarms.sh - no false alarms: the same configuration measured twice (base and new: 7 runs
# each, alternated, as ci/nccl-regress does), 5 times over, for a small moeperf-layer sweep and a
# moeperf-a2a sweep, never gives a regression verdict at moeperf-compare's defaults, in any metric.
# Single runs are not compared here: on a shared host two single runs of one build differ by more
# than their iterations scatter (docs/regression.md), which only repeated runs can show.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$BUILD/reports/moeperf-compare" ] || fail "$BUILD/reports/moeperf-compare is not built"

LIB=$TMP/lib # the "library directory" of both sides: the same one
mkdir -p "$LIB"
LAYER="--experts 8 --topk 2 --shared 0 --hidden 256 --ffn 512 --batch 4,32 --warmup 3 --iters 20"
A2A="--bytes 64K,1M --warmup 10 --iters 50"
REPS=5
comparisons=0
for rep in $(seq 1 $REPS); do
    out=$TMP/rep$rep
    st=0
    "$ROOT/ci/nccl-regress" --base-lib "$LIB" --new-lib "$LIB" --repeats 7 --build "$BUILD" \
        --out "$out" --layer-args "$LAYER" --a2a-args "$A2A" >"$TMP/log$rep" 2>&1 || st=$?
    if [ "$st" != 0 ]; then
        cat "$TMP/log$rep" >&2
        fail "repetition $rep: ci/nccl-regress exited $st, expected 0 (no regression)"
    fi
    for tool in layer a2a; do
        csv=$out/$tool/compare/compare.csv
        [ -f "$csv" ] || fail "repetition $rep: no $csv"
        # every comparison is a real one: 7 runs a side, a p-value, never inconclusive
        python3 - "$csv" "$rep" "$tool" <<'PY' || fail "repetition $rep, $tool: see above"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
bad = [r for r in rows if r["verdict"] == "regression"]
for r in bad:
    print(f"false alarm: {r['metric']} {r['base_median_us']} -> {r['new_median_us']} us "
          f"({float(r['change_pct']):+.1f} %), p = {r['p_value']}", file=sys.stderr)
odd = [r for r in rows if r["verdict"] == "inconclusive" or r["unit"] != "run"
       or r["units_base"] != "7" or r["units_new"] != "7" or not r["p_value"]]
for r in odd:
    print(f"not a 7-vs-7 run comparison: {r}", file=sys.stderr)
expect = 2 * 3 if sys.argv[3] == "layer" else 2
if len(rows) != expect:
    print(f"{len(rows)} rows, expected {expect}", file=sys.stderr)
worst = min(rows, key=lambda r: float(r["p_value"]))
big = max(rows, key=lambda r: abs(float(r["change_pct"])))
print(f"rep {sys.argv[2]} {sys.argv[3]:5s}: {len(rows)} comparisons, smallest p {float(worst['p_value']):.4f} "
      f"({worst['metric']}, {float(worst['change_pct']):+.1f} %), largest change "
      f"{float(big['change_pct']):+.1f} % ({big['metric']}, p {float(big['p_value']):.3f})")
sys.exit(1 if bad or odd or len(rows) != expect else 0)
PY
        comparisons=$((comparisons + $(rows "$csv")))
    done
done
echo "PASS: $comparisons comparisons in $REPS repetitions, no regression reported"
