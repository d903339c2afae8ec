#!/usr/bin/env bash
# tp_routing.sh - the TP ranks of an EP rank must route alike: with gate routing each computes the
# gate itself, so a rank whose gate comes out different (the test hook MOEPERF_TEST_GATE_SKEW
# negates one token of world rank 1, the second TP rank of EP rank 0) is caught before its point's
# iterations: every rank exits 1 promptly (no hang in the TP reduce), the message names the two
# ranks, and the rows of the earlier layout are kept. Without the hook the same run completes.
. "$(dirname "$0")/lib.sh"
ARGS="--model qwen3-30b-a3b --hidden 128 --ffn 64 --experts 16 --topk 4 --routing gate:0.3
      --batch 16 --iters 2 --warmup 1 --quiet"
# shellcheck disable=SC2086
mpi 4 "$BIN/moeperf-layer" $ARGS --layout tp1ep4,tp2ep2 --check --out "$TMP/ok" \
    >"$TMP/ok.log" 2>&1 ||
    fail "the unperturbed run exited $?: $(tail -3 "$TMP/ok.log")"
set +e
# shellcheck disable=SC2086
MOEPERF_TEST_GATE_SKEW=1 timeout 120 bash -c '. "$0"; shift; mpi 4 "$@"' "$(dirname "$0")/lib.sh" \
    "$BUILD" "$BIN/moeperf-layer" $ARGS --layout tp1ep4,tp2ep2 --out "$TMP/skew" \
    >"$TMP/skew.log" 2>&1
rc=$?
set -e
[ "$rc" -ne 124 ] || fail "the ranks hung: $(tail -3 "$TMP/skew.log")"
[ "$rc" -eq 1 ] || fail "exited $rc, expected 1: $(tail -3 "$TMP/skew.log")"
msg=$(grep -m1 "TP ranks 0 and 1 computed different top-4 experts" "$TMP/skew.log") ||
    fail "no message naming TP ranks 0 and 1: $(tail -3 "$TMP/skew.log")"
echo "refused: $msg"
[ "$(rows "$TMP/skew/layer.csv")" -eq 1 ] && [ "$(col "$TMP/skew/layer.csv" layout)" = tp1ep4 ] ||
    fail "the tp1ep4 row was not kept"
echo PASS
