#!/usr/bin/env bash
# a2a_timeout.sh - moeperf-a2a's --timeout: a point whose exchanges stall (every exchange delayed
# 3 s with --inject-delay-us) ends the run within --timeout plus a few seconds, with a message
# naming the rank and the point; the rows of the points before it stay, and --resume finishes.
. "$(dirname "$0")/lib.sh"
OUT=$TMP/a2a
mpi 2 "$BIN/moeperf-a2a" --bytes 1K --warmup 1 --iters 5 --quiet --out "$OUT" ||
    fail "the first point did not run"
start=$SECONDS
st=0
mpi 2 "$BIN/moeperf-a2a" --bytes 1K,2K --warmup 1 --iters 5 --quiet --resume --timeout 2 \
    --inject-delay-us 3000000 --out "$OUT" >"$TMP/log" 2>&1 || st=$?
dt=$((SECONDS - start))
[ "$st" -ne 0 ] || fail "a stalled point ended with exit 0"
[ "$dt" -le 20 ] || fail "the run took $dt s to end, more than --timeout 2 + 18 s"
grep -Eq 'rank [01] \(host [^)]*\) at point layout tp1ep2 .*bytes_per_peer 2048 did not complete within --timeout 2 s' \
    "$TMP/log" || { cat "$TMP/log" >&2; fail "no message naming the rank and the point"; }
[ "$(rows "$OUT/a2a.csv")" -eq 1 ] || fail "the row of the point before the stall was not kept"
mpi 2 "$BIN/moeperf-a2a" --bytes 1K,2K --warmup 1 --iters 5 --quiet --resume --out "$OUT" ||
    fail "--resume did not finish the sweep"
[ "$(col "$OUT/a2a.csv" bytes_per_peer | tr '\n' ' ')" = "1024 2048 " ] ||
    fail "after --resume: $(col "$OUT/a2a.csv" bytes_per_peer | tr '\n' ' ')"
echo "PASS: stalled point ended after $dt s (status $st), rows kept, --resume finished"
