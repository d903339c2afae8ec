#!/usr/bin/env bash
# gpu_one_gpu_ranks.sh - ci/gpu-check's multi-rank mode on one GPU (ci/gpu-one-gpu-ranks) runs on
# the CPU stand-in with one emulated GPU: 2 and 4 ranks with distinct NCCL_HOSTID values pass
# --check in every layout and mode, the a2a point runs, and the killed rank's sweep keeps its rows
# and finishes with --resume. The lines are the script's own, with the stand-in's smaller layer
# (MOEPERF_GPU_HIDDEN/FFN), batches 1,7, and --bytes 3M for the a2a point (the stand-in copies at
# most 256 MiB at once and sends at most 2^31 - 1 bytes per ncclSend; the 3G point's offsets are
# covered by the unit test a2acounts); the killed sweep's --timeout, which the survivor waits out,
# 12 s (its 7 points of 22 iterations take about 20 s in all with start-up, under load, in the
# sanitizer build). Needs -Dcudaemu=true (exits 77 on a real CUDA build).
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
[ -n "${CUDAEMU_DEVICES:-}" ] || { echo "not the CPU stand-in: skipped"; exit 77; }
grep -qE '^ *limit [0-9]+ ci/gpu-one-gpu-ranks "\$B" ' "$SRC/ci/gpu-check" ||
    fail "ci/gpu-check does not run ci/gpu-one-gpu-ranks"
set +e
CUDAEMU_DEVICES=1 MOEPERF_ONE_GPU_BATCHES=1,7 MOEPERF_ONE_GPU_A2A_BYTES=3M \
    MOEPERF_ONE_GPU_KILL_ITERS=20 MOEPERF_ONE_GPU_KILL_TIMEOUT_S=12 MOEPERF_ONE_GPU_CAP_S=400 \
    "$SRC/ci/gpu-one-gpu-ranks" "$BUILD" "$TMP/one" >"$TMP/log" 2>&1
rc=$?
set -e
grep -v '^ \{4\}#\|leak\|^$' "$TMP/log" | grep -E '^(#|layer|a2a|killed|ci/)' || true
[ "$rc" -eq 0 ] ||
    fail "ci/gpu-one-gpu-ranks exited $rc: $(grep -E '^ci/gpu-one-gpu-ranks' "$TMP/log" | head -5)"
head -2 "$TMP/log" | grep -q 'mean nothing' ||
    fail "the mode's header does not say its times mean nothing"
# every layout of the mode was checked
for lay in tp1ep2 tp2ep1 tp2ep2 tp1ep4; do
    cat "$TMP"/one/layer-*/layer.csv | grep -q ",$lay," ||
        fail "no $lay point in the mode's layer runs"
done
kept=$(rows "$TMP/one/killed/layer.csv")
[ "$kept" -eq 7 ] || fail "the killed sweep ends with $kept rows, expected 7"
echo PASS
