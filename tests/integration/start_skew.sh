#!/usr/bin/env bash
# start_skew.sh - a rank that reaches an iteration's start late shows as start skew on the ranks
# that waited for it (layer_ranks.csv start_skew_us), not in their phases: with world rank 1 made
# to arrive 200 ms late before every iteration (the test hook MOEPERF_START_DELAY), rank 0's
# start_skew_us holds the delay while its layer_us (the sum of its phases) does not, and every
# start_skew_us is ≥ 0.
. "$(dirname "$0")/lib.sh"
DELAY=200000
# ranks that yield while waiting, so the late rank's wait does not also slow the waiting one
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MOEPERF_START_DELAY=1:$DELAY \
    timeout 300 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 2 \
    "$BIN/moeperf-layer" --model qwen3-30b-a3b --hidden 128 --ffn 64 --experts 16 --topk 4 \
    --batch 64 --iters 5 --warmup 1 --overlap 1,2 --quiet --out "$TMP/run" >"$TMP/run.log" 2>&1 ||
    fail "moeperf-layer exited $?: $(tail -5 "$TMP/run.log")"
[ "$(rows "$TMP/run/layer_ranks.csv")" -eq 4 ] || fail "expected 4 per-rank rows"
awk -F, -v D=$DELAY '
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { rank = $c["rank"]; skew = $c["start_skew_us"]; layer = $c["layer_us"]
      printf "overlap %s rank %s: start_skew_us %s, layer_us %s\n", $c["overlap"], rank, skew, layer
      if (skew == "" || skew < 0) { print "  negative or missing skew"; bad = 1 }
      if (rank == 0 && skew < D / 2) { print "  rank 0 did not wait for rank 1"; bad = 1 }
      if (rank == 0 && layer >= D / 2) { print "  rank 0 booked the wait in its phases"; bad = 1 } }
    END { exit bad }' "$TMP/run/layer_ranks.csv" || fail "start skew"
echo PASS
