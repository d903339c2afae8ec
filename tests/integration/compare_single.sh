#!/usr/bin/env bash
# compare_single.sh - moeperf-compare on single runs (one per side), a timing study (the perf
# tier): two runs of the same CPU command give no regression or improvement verdict in any metric,
# and a run slowed on purpose by far more than the points scatter is a regression at every point.
# Both are measured in one attempt (base, the same again, slowed), at most 3 attempts. An attempt
# whose delay does not stand well above the spread measured at every point (twice the larger
# side's) is too noisy to judge anything; a judged attempt with a verdict between equals is
# measured again once and fails the second time; with no judged attempt the test skips saying so.
. "$(dirname "$0")/lib.sh"
CMP=$BUILD/reports/moeperf-compare
[ -x "$CMP" ] || fail "$CMP is not built"
perf_tier_only "compare_single (single runs: no verdict between equals, the delay found)"

ARGS="--experts 8 --topk 2 --shared 0 --hidden 256 --ffn 512 --batch 4,32 --warmup 3 --iters 30 --quiet"
POINTS=2
DELAY=2000 # before each of the layer's two all-to-alls: +4 ms on layers of 0.3 to 2 ms
MPIRUN="mpirun --bind-to none --mca mpi_yield_when_idle 1" # as ci/nccl-regress runs the sweeps
[ 2 -le "$(nproc)" ] || MPIRUN="$MPIRUN --oversubscribe"
run() { OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 $MPIRUN -np 2 "$BIN/moeperf-layer" $ARGS "$@"; }

# verdicts FILE: "regression improvement judged" over every row of compare.csv, where judged counts
# the layer_us rows whose change is at least twice the larger side's spread
verdicts() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        { v = $c["verdict"]; r += v == "regression"; m += v == "improvement" }
        $c["metric"] == "layer_us" { ch = $c["change_pct"] / 100; ch = ch < 0 ? -ch : ch
            nb = $c["noise_base"] + 0; nn = $c["noise_new"] + 0; n = nb > nn ? nb : nn
            j += ch >= 2 * n }
        END { print r + 0, m + 0, j + 0 }' "$1"
}

judged=0
for attempt in 1 2 3; do
    rm -rf "$TMP/base" "$TMP/same" "$TMP/slow" "$TMP/c_same" "$TMP/c_slow"
    run --out "$TMP/base" && run --out "$TMP/same" &&
        run --inject-delay-us $DELAY --out "$TMP/slow" || fail "a run failed (exit $?)"
    st=0 # 3 is a regression, counted below; anything else but 0 an error
    "$CMP" "$TMP/base" "$TMP/same" --out "$TMP/c_same" --no-svg >"$TMP/same.txt" 2>&1 || st=$?
    [ "$st" -eq 0 ] || [ "$st" -eq 3 ] || fail "the same command twice: moeperf-compare exited $st"
    st=0
    "$CMP" "$TMP/base" "$TMP/slow" --out "$TMP/c_slow" --no-svg >"$TMP/slow.txt" 2>&1 || st=$?
    read -r same_reg same_imp _ < <(verdicts "$TMP/c_same/compare.csv")
    read -r slow_reg _ slow_judged < <(verdicts "$TMP/c_slow/compare.csv")
    grep -q "LOW CONFIDENCE" "$TMP/same.txt" || fail "single runs are not marked low confidence"
    echo "attempt $attempt: same command: $same_reg regression(s), $same_imp improvement(s);" \
        "slowed: exit $st, $slow_reg regression(s), delay above twice the spread at $slow_judged of $POINTS points"
    # judged only where the machine lets the delay stand well above the points' scatter
    [ "$slow_judged" -eq "$POINTS" ] || continue
    if [ "$same_reg" -ne 0 ] || [ "$same_imp" -ne 0 ]; then # one such attempt is measured again
        alarms=$((${alarms:-0} + 1))
        [ "$alarms" -lt 2 ] ||
            fail "two runs of the same command gave a verdict twice: $(grep -E 'REGRESSION|improvement' "$TMP/same.txt")"
        continue
    fi
    judged=1
    [ "$st" -eq 3 ] && [ "$(awk -F, 'NR > 1 && /,layer_us,/ && /,regression,/' "$TMP/c_slow/compare.csv" |
        wc -l)" -eq "$POINTS" ] || fail "the delay, well above the spread, is not a regression at every point: $(cat "$TMP/slow.txt")"
    break
done
[ "$judged" = 1 ] || skip "in 3 attempts the injected delay was never twice the points' spread: too noisy to judge"
echo "PASS: no verdict between equal single runs, the delay found at every point"
