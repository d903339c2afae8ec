#!/usr/bin/env bash
# valgrind.sh - memcheck finds 0 errors (invalid accesses, uninitialised use, definite leaks) in a
# small moeperf-layer run with --check, on 1 and 2 ranks (pipelined too); Open MPI's, PMIx's and hwloc's own
# allocations are suppressed by tests/valgrind.supp. Skipped (77) where valgrind is missing.
. "$(dirname "$0")/lib.sh"
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 77; }
SUPP=$(cd "$(dirname "$0")/.." && pwd)/valgrind.supp
VG="valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite --suppressions=$SUPP"
ARGS="--hidden 64 --ffn 64 --experts 8 --topk 2 --shared 1 --batch 1,8 --iters 2 --warmup 1 --check --routing uniform,gate --placement contiguous,replicate-hot:2 --quiet"

$VG --log-file="$TMP/one.%p.log" "$BIN/moeperf-layer" $ARGS --out "$TMP/one" || fail "1 rank: exit $?"
# ranks that yield while waiting: under valgrind (one thread at a time, many times slower) a
# spinning rank takes the core its partner needs
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none \
    --mca mpi_yield_when_idle 1 -np 2 $VG --log-file="$TMP/two.%p.log" "$BIN/moeperf-layer" $ARGS \
    --layout tp1ep2,tp2ep1 --overlap 1,2 --out "$TMP/two" || fail "2 ranks: exit $?"
$VG --log-file="$TMP/model.%p.log" "$BIN/moeperf-layer" --backend model --comm model \
    --cluster h100-ndr --layout tp2ep8 --batch 1,64 --routing hot:2:5 --quiet || fail "model: exit $?"
n=0
for log in "$TMP"/*.log; do
    # a singleton MPI process forks its runtime daemon: that child's log is not moeperf's
    grep -q "Command: .*moeperf-layer" "$log" && grep -q "ERROR SUMMARY" "$log" || continue
    grep -h "ERROR SUMMARY" "$log"
    grep -q "ERROR SUMMARY: 0 errors" "$log" || fail "$(basename "$log") reports errors"
    n=$((n + 1))
done
[ "$n" -eq 4 ] || fail "expected 4 valgrind logs, found $n"
echo PASS
