#!/usr/bin/env bash
# who_waits.sh - who the others wait for, on 2 and 4 ranks: a straggler (--straggle 1:20000,
# uniform routing) and hot experts (hot:2:15: experts 0 and 1 of 8, on rank 0). The per-rank timeline
# (plots/render) outlines the straggler and the hot experts' rank in red in the median iteration
# and the busiest rank of the p99 iteration (noise may pick another there), and in the image the
# outlined bar has the longest busy part (phase colours, not the wait's grey) in both panels;
# moeperf-report names the straggler as a slow rank, not routing, and the hot experts' rank as
# routing, with its experts, and includes a timeline per curve.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
RENDER=$SRC/plots/render
REPORT=$BUILD/reports/moeperf-report
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }

TL=(--experts 8 --topk 2 --shared 0 --warmup 1 --iters 5 --quiet)
for np in 2 4; do
    mpi $np "$BIN/moeperf-layer" "${TL[@]}" --hidden 64 --ffn 64 --batch 64 --straggle 1:20000 \
        --out "$TMP/st$np" || fail "moeperf-layer --straggle ($np ranks) exit $?"
    mpi $np "$BIN/moeperf-layer" "${TL[@]}" --hidden 512 --ffn 512 --batch 256 --routing hot:2:15 \
        --out "$TMP/hot$np" || fail "moeperf-layer hot:2:15 ($np ranks) exit $?"
done

# timeline_critical PNG: the critical rank's bar is the longest (tests/integration/timeline_check.py)
timeline_critical() { PYTHONPATH="$(dirname "$0")" python3 "$(dirname "$0")/timeline_check.py" "$1"; }

host=$(col "$TMP/st2/layer_rank_samples.csv" host | head -1)
for np in 2 4; do
    for run in st$np:1 hot$np:0; do
        d=${run%:*} want=${run#*:}
        "$RENDER" --out "$TMP/tl-$d" "$TMP/$d" >/dev/null || fail "render $d exit $?"
        timeline_critical "$TMP/tl-$d/timeline.png" >"$TMP/tl.txt" 2>&1 ||
            fail "$d timeline: $(cat "$TMP/tl.txt")"
        echo "$d: $(tr '\n' ' ' <"$TMP/tl.txt")"
        "$RENDER" --format svg --out "$TMP/tl-$d" "$TMP/$d" >/dev/null || fail "render svg $d exit $?"
        # the median iteration's critical rank is the straggler or the hot rank; the p99 iteration
        # is the one noise touched most, so its critical rank is whichever rank was busiest in it
        # by layer_rank_samples.csv (busy: its phases less its waits), which the drawing must name
        grep -q "median iteration [^<]*critical rank $want<" "$TMP/tl-$d/timeline.svg" ||
            fail "$d timeline.svg: the median panel does not name critical rank $want"
        it=$(grep -o "p99 iteration (iteration [0-9]*" "$TMP/tl-$d/timeline.svg" | grep -o "[0-9]*$")
        [ -n "$it" ] || fail "$d timeline.svg has no p99 panel title"
        busiest=$(python3 -c 'import csv, sys
it = sys.argv[2]
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["iter"] == it]
busy = lambda r: sum(float(r[p + "_us"]) for p in
                     ("route", "notify", "dispatch", "ffn", "tp_reduce", "combine")) - float(r["wait_us"])
print(max(rows, key=busy)["rank"])' "$TMP/$d/layer_rank_samples.csv" "$it")
        grep -q "p99 iteration [^<]*critical rank $busiest<" "$TMP/tl-$d/timeline.svg" ||
            fail "$d timeline.svg: the p99 panel (iteration $it) does not name rank $busiest, the busiest"
    done
    held=0-$((8 / np - 1)) # rank 0's experts, contiguous: the hot ones, 0 and 1, among them
    grep -qF "experts $held ◀ critical" "$TMP/tl-hot$np/timeline.svg" ||
        fail "hot$np: the hot rank's experts are not annotated"

    # the report: the straggler is a slow rank, the hot experts' rank is routing
    "$REPORT" "$TMP/st$np" "$TMP/hot$np" --md "$TMP/r$np.md" >/dev/null || fail "moeperf-report exit $?"
    sed -n '/^### Who the others wait for/,/^#/p' "$TMP/r$np.md" >"$TMP/w.md"
    cat "$TMP/w.md"
    grep -q "a slow rank or host, not routing: rank 1 (host $host) is the critical rank" "$TMP/w.md" ||
        fail "$np ranks: the straggler is not named as a slow rank"
    grep -q "routing: rank 0 (host $host) holds experts $held and gets [0-9.]*× the mean rows" "$TMP/w.md" ||
        fail "$np ranks: the hot experts' rank is not named as routing"
    [ "$(grep -c '^- ' "$TMP/w.md")" -eq 2 ] || fail "$np ranks: expected two findings"
    for k in 1 2; do
        [ -s "$TMP/r${np}_plots/timeline-$k.svg" ] || fail "the report has no timeline-$k.svg"
        grep -qF "(r${np}_plots/timeline-$k.svg)" "$TMP/r$np.md" || fail "the report does not show timeline-$k"
    done
done
echo PASS
