#!/usr/bin/env bash
# a2a_floor.sh - moeperf-a2a --min-busbw GBPS, the busbw floor for a cluster without a baseline run
# (nccl-tests' NCCL_TESTS_MIN_BW, judged per point): every point is measured and written whatever the floor; a point below it
# makes the run exit 3 after naming the lowest one, on stderr and in run.json, on every rank;
# a floor every point clears exits 0; on 2 measured ranks and on the model (deterministic: the
# h100-ndr profile's busbw at 16 ranks, 2 nodes, lies between 60 and 90 GB/s); a negative floor is
# refused.
. "$(dirname "$0")/lib.sh"
A2A=$BIN/moeperf-a2a
set +e
mpi 2 "$A2A" --bytes 1K,64K --iters 5 --warmup 1 --quiet --min-busbw 1000000 --out "$TMP/below" \
    2>"$TMP/below.err"
rc=$?
set -e
[ "$rc" -eq 3 ] || fail "a run below the floor exited $rc, expected 3: $(tail -3 "$TMP/below.err")"
[ "$(rows "$TMP/below/a2a.csv")" -eq 2 ] || fail "a run below the floor lost points"
grep -q -- "--min-busbw 1e+06: 2 point(s) below the floor, the lowest busbw [0-9.]* GB/s at layout tp1ep2 .*bytes_per_peer 1024" \
    "$TMP/below.err" || fail "the message does not name the floor and the lowest point: $(grep min-busbw "$TMP/below.err")"
python3 -c "
import csv, json
j = json.load(open('$TMP/below/run.json'))['min_busbw']
low = min(float(r['busbw_GBps']) for r in csv.DictReader(open('$TMP/below/a2a.csv')))
assert j['floor_GBps'] == 1e6 and j['below'] == 2 and abs(j['lowest_GBps'] - low) <= 1e-3 * low, (j, low)
assert j['lowest_point'].endswith('bytes_per_peer 1024'), j" || fail "run.json's min_busbw"
mpi 2 "$A2A" --bytes 1K,64K --iters 5 --warmup 1 --quiet --min-busbw 0.000001 --out "$TMP/above" ||
    fail "a run above the floor exited $?"
MODEL="--backend model --comm model --cluster h100-ndr --world 16 --bytes 1M,16M --quiet"
# shellcheck disable=SC2086
"$A2A" $MODEL --min-busbw 60 --out "$TMP/m30" || fail "the model's busbw fell below 60 GB/s"
set +e
# shellcheck disable=SC2086
"$A2A" $MODEL --min-busbw 90 --out "$TMP/m60" 2>"$TMP/m60.err"
rc=$?
set -e
[ "$rc" -eq 3 ] || fail "the model below 90 GB/s exited $rc, expected 3"
[ "$(rows "$TMP/m60/a2a.csv")" -eq 2 ] || fail "the model's run below the floor lost points"
refused "$A2A" --min-busbw -1
grep -q -- "--min-busbw" "$TMP/refused.err" || fail "the refusal does not name --min-busbw"
echo PASS
