#!/usr/bin/env bash
# targets.sh - ci/ffn-targets and ci/layer-targets judge constructed runs exactly: each target met
# just inside its bound and missed just outside it (weight-load fractions 0.80 / 0.70, the
# roofline's 10 %, 0.80 of the GEMM rate; route 10 µs up to batch 128, layer 80 µs at batch 1,
# uniform routing only), and a file without the columns they read is refused with exit 2.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)

# ffn.csv rows: copy rate 1000 GB/s (1 MB moves in 1 µs), GEMM rate 1000 GFLOP/s
mkdir -p "$TMP/ffn-good" "$TMP/ffn-bad"
ffn() { # DIR then rows of: batch ffn_us weight_bytes achieved_GFLOPs
    local dir=$1
    shift
    { echo "batch,ffn_us,weight_bytes,peak_GBps,achieved_GFLOPs,peak_GFLOPs"
      while [ $# -gt 0 ]; do echo "$1,$2,$3,1000,$4,1000"; shift 4; done; } >"$dir/ffn.csv"
}
# met: 100 µs for 80 MB at batch 1 (0.80), 70 MB at 8 and 16, memory-bound 64 within 10 %,
# compute-bound 512 within 10 % (1000 GFLOP/s · 0.91 of the time), 0.80 of the GEMM rate at 4096
ffn "$TMP/ffn-good" 1 100 80000000 1  8 100 70000000 1  16 100 70000000 1 \
    64 100 91000000 1  512 100 1000 910  4096 100 1000 800
ffn "$TMP/ffn-bad" 1 100 79000000 1  8 100 69000000 1  16 100 69000000 1 \
    64 100 90000000 1  512 100 1000 900  4096 100 1000 790
"$SRC/ci/ffn-targets" "$TMP/ffn-good/ffn.csv" >"$TMP/good" || fail "ci/ffn-targets missed a met target: $(cat "$TMP/good")"
grep -q '^6 of 6 FFN targets met$' "$TMP/good" || fail "ci/ffn-targets: $(cat "$TMP/good")"
rc=0
"$SRC/ci/ffn-targets" "$TMP/ffn-bad/ffn.csv" >"$TMP/bad" || rc=$?
[ "$rc" -eq 1 ] || fail "ci/ffn-targets exited $rc on missed targets: $(cat "$TMP/bad")"
[ "$(grep -c 'MISSED$' "$TMP/bad")" -eq 6 ] || fail "ci/ffn-targets did not miss all six: $(cat "$TMP/bad")"
echo "ci/ffn-targets: six met at their bounds, six missed just past them"

mkdir -p "$TMP/layer-graph-x"
{ echo "batch,routing,dispatch,route_us,layer_us"
  echo "1,uniform,padded+graph,10,80"
  echo "128,uniform,padded+graph,10,300"
  echo "256,uniform,padded+graph,40,900"
  echo "1,hot:4:15,padded+graph,99,999"; } >"$TMP/layer-graph-x/layer.csv"
"$SRC/ci/layer-targets" "$TMP/layer-graph-x/layer.csv" >"$TMP/lgood" || fail "ci/layer-targets: $(cat "$TMP/lgood")"
grep -q '^3 of 3 layer targets met$' "$TMP/lgood" || fail "ci/layer-targets: $(cat "$TMP/lgood")"
sed -i 's/^1,uniform,padded+graph,10,80$/1,uniform,padded+graph,10.1,80.1/' "$TMP/layer-graph-x/layer.csv"
rc=0
"$SRC/ci/layer-targets" "$TMP/layer-graph-x/layer.csv" >"$TMP/lbad" || rc=$?
[ "$rc" -eq 1 ] && grep -q '^1 of 3 layer targets met$' "$TMP/lbad" ||
    fail "ci/layer-targets exited $rc past the bounds: $(cat "$TMP/lbad")"
echo "ci/layer-targets: route and layer met at their bounds, missed past them; hot routing not judged"

echo "batch,ffn_us" >"$TMP/ffn-bad/ffn.csv"
rc=0
"$SRC/ci/ffn-targets" "$TMP/ffn-bad/ffn.csv" 2>"$TMP/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q 'no column' "$TMP/err" || fail "ci/ffn-targets took a file without its columns (exit $rc)"
rc=0
"$SRC/ci/layer-targets" "$TMP/ffn-bad/ffn.csv" 2>"$TMP/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q 'no column' "$TMP/err" || fail "ci/layer-targets took a file without its columns (exit $rc)"
echo PASS
