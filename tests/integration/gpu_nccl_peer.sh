#!/usr/bin/env bash
# gpu_nccl_peer.sh - ci/nccl-peer's plumbing on the CPU stand-in with one emulated GPU: moeperf-a2a
# runs on the ranks sharing it (one NCCL_HOSTID each) at every size, beside a stand-in for
# alltoall_perf that prints nccl-tests' table (rank 0 only, as nccl-tests does) and records its
# arguments; the script asks for -a 3 -z 3 at each size in bytes per rank, gives moeperf the
# size over the ranks per peer, prints a row per size whose ratios are moeperf's a2a.csv times over
# the table's out-of-place time, and exits 1 exactly when a ratio of means leaves [0.9, 1.1].
# Bad input exits 2. Needs -Dcudaemu=true (exits 77 on a real CUDA build).
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
[ -n "${CUDAEMU_DEVICES:-}" ] || { echo "not the CPU stand-in: skipped"; exit 77; }
grep -qE '^ *limit [0-9]+ ci/nccl-peer "\$B" ' "$SRC/ci/gpu-check" || fail "ci/gpu-check does not run ci/nccl-peer"

# the stand-in alltoall_perf: -b SIZE ... ; time = $FAKE_US (out of place), 2·that in place
cat >"$TMP/alltoall_perf" <<'FAKE'
#!/bin/sh
[ "${OMPI_COMM_WORLD_RANK:-0}" = 0 ] || exit 0
echo "$*" >>"$FAKE_ARGS"
size=0
while [ $# -gt 0 ]; do [ "$1" = -b ] && size=$2; shift; done
echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
echo "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
printf '%12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n' "$size" "$((size / 2))" uint8 none -1 \
    "$FAKE_US" 1.00 0.50 N/A "$((2 * ${FAKE_US%.*}))" 1.00 0.50 N/A
echo "# Avg bus bandwidth    : 0.5"
FAKE
chmod +x "$TMP/alltoall_perf"
run_peer() { # OUT FAKE_US: the script at 2 ranks, two sizes; its exit code in $peer_rc
    set +e
    CUDAEMU_DEVICES=1 MOEPERF_PEER_RANKS=2 MOEPERF_PEER_SIZES=64K:256K:x4 MOEPERF_PEER_ITERS=3 \
        NCCL_TESTS_BIN=$TMP/alltoall_perf FAKE_ARGS=$TMP/args-$1 FAKE_US=$2 \
        "$SRC/ci/nccl-peer" "$BUILD" "$TMP/$1" >"$TMP/$1.log" 2>&1
    peer_rc=$?
    set -e
}
# a fake time far below any stand-in exchange: every ratio is outside the band, exit 1
run_peer low 0.001
cat "$TMP/low.log"
[ "$peer_rc" -eq 1 ] || fail "ci/nccl-peer exited $peer_rc with every ratio outside 0.9..1.1"
grep -q '^0 of 2 sizes within 10%' "$TMP/low.log" || fail "no verdict line: $(tail -2 "$TMP/low.log")"
[ "$(wc -l <"$TMP/args-low")" -eq 2 ] || fail "alltoall_perf ran $(wc -l <"$TMP/args-low") times, expected 2"
for s in 65536 262144; do
    grep -qE -- "^-b $s -e $s .*-a 3 -z 3 " "$TMP/args-low" || fail "alltoall_perf was not asked for $s bytes with -a 3 -z 3: $(cat "$TMP/args-low")"
    per=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { print $c["bytes_per_peer"] }' "$TMP/low/moeperf-$s/a2a.csv")
    [ "$per" -eq $((s / 2)) ] || fail "moeperf-a2a ran $per bytes per peer at $s bytes per rank"
    want=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { printf "%.3f", $c["time_mean_us"] / 0.001 }' "$TMP/low/moeperf-$s/a2a.csv")
    got=$(awk -v s=$s '$1 == s { print $6 }' "$TMP/low.log")
    [ "$got" = "$want" ] || fail "ratio at $s: printed $got, a2a.csv gives $want"
done
mean=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { print $c["time_mean_us"] }' "$TMP/low/moeperf-65536/a2a.csv")
echo "a stand-in exchange of 64 KiB per rank took $mean us"
# bad input
for bad in "MOEPERF_PEER_RANKS=1" "MOEPERF_PEER_SIZES=12Q" "MOEPERF_PEER_SIZES=64K:1M:x1" "MOEPERF_PEER_RANKS=3"; do
    set +e
    env "$bad" CUDAEMU_DEVICES=1 NCCL_TESTS_BIN=$TMP/alltoall_perf "$SRC/ci/nccl-peer" "$BUILD" "$TMP/bad" >"$TMP/bad.log" 2>&1
    rc=$?
    set -e
    [ "$rc" -eq 2 ] || fail "ci/nccl-peer with $bad exited $rc, expected 2: $(cat "$TMP/bad.log")"
    grep -q '^ci/nccl-peer: ' "$TMP/bad.log" || fail "ci/nccl-peer with $bad: no message naming it"
done
set +e
CUDAEMU_DEVICES=1 "$SRC/ci/nccl-peer" "$BUILD" "$TMP/bad" >"$TMP/bad.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "ci/nccl-peer without nccl-tests exited $rc"
echo PASS
