#!/usr/bin/env bash
# who_waits.sh - who the others wait for, on 2 and 4 ranks: a straggler (--straggle 1:20000,
# uniform routing) and hot experts (hot:2:15: experts 0 and 1 of 8, on rank 0). The per-rank timeline
# (plots/render) outlines each panel's busiest rank in red, the straggler or the hot experts' rank
# in at least two thirds of the iterations, and in the image the outlined bar has the longest busy
# part (phase colours, not the wait's grey) in both panels;
# moeperf-report names the straggler as a slow rank, not routing, and the hot experts' rank as
# routing, with its experts, and includes a timeline per curve. Who is busiest is measured time:
# a failed attempt is measured again, three attempts in all.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
RENDER=$SRC/plots/render
REPORT=$BUILD/reports/moeperf-report
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }

TL=(--experts 8 --topk 2 --shared 0 --warmup 1 --iters 9 --quiet)

# timeline_critical PNG: the critical rank's bar is the longest (tests/integration/timeline_check.py)
timeline_critical() { PYTHONPATH="$(dirname "$0")" python3 "$(dirname "$0")/timeline_check.py" "$1"; }

# attempt NP: measure both runs on NP ranks and check them (a subshell: fail ends the attempt)
attempt() {
    local np=$1
    rm -rf "$TMP/st$np" "$TMP/hot$np" "$TMP/tl-st$np" "$TMP/tl-hot$np" "$TMP/r${np}"*
    mpi $np "$BIN/moeperf-layer" "${TL[@]}" --hidden 64 --ffn 64 --batch 64 --straggle 1:20000 \
        --out "$TMP/st$np" || fail "moeperf-layer --straggle ($np ranks) exit $?"
    mpi $np "$BIN/moeperf-layer" "${TL[@]}" --hidden 1024 --ffn 1024 --batch 256 --routing hot:2:15 \
        --out "$TMP/hot$np" || fail "moeperf-layer hot:2:15 ($np ranks) exit $?"
    host=$(col "$TMP/st$np/layer_rank_samples.csv" host | head -1)
    for run in st$np:1 hot$np:0; do
        d=${run%:*} want=${run#*:}
        "$RENDER" --out "$TMP/tl-$d" "$TMP/$d" >/dev/null || fail "render $d exit $?"
        timeline_critical "$TMP/tl-$d/timeline.png" >"$TMP/tl.txt" 2>&1 ||
            fail "$d timeline: $(cat "$TMP/tl.txt")"
        echo "$d: $(tr '\n' ' ' <"$TMP/tl.txt")"
        "$RENDER" --format svg --out "$TMP/tl-$d" "$TMP/$d" >/dev/null || fail "render svg $d exit $?"
        # each panel's critical rank is the busiest rank of its iteration by layer_rank_samples.csv
        # (busy: its phases less its waits), and the straggler or the hot rank is the busiest in
        # at least two thirds of the iterations: 4 ranks on shared cores beside other test suites
        # can make another rank the busiest now and then, even in the median iteration
        python3 - "$TMP/$d/layer_rank_samples.csv" "$TMP/tl-$d/timeline.svg" "$want" <<'PY' ||
import csv, re, sys
rows, svg, want = list(csv.DictReader(open(sys.argv[1]))), open(sys.argv[2]).read(), sys.argv[3]
phases = ("route", "notify", "dispatch", "ffn", "tp_reduce", "combine")
busiest = {}
for it in sorted({r["iter"] for r in rows}, key=int):
    mine = [r for r in rows if r["iter"] == it]
    busy = lambda r: sum(float(r[p + "_us"]) for p in phases) - float(r["wait_us"])
    busiest[it] = max(mine, key=busy)["rank"]
for panel in ("median", "p99"):
    m = re.search(panel + r" iteration \(iteration (\d+) of \d+[^<]*critical rank (\d+)<", svg)
    assert m, f"no {panel} panel title"
    assert m.group(2) == busiest[m.group(1)], (panel, "iteration", m.group(1), "names", m.group(2),
                                              "busiest", busiest[m.group(1)])
share = sum(b == want for b in busiest.values()) / len(busiest)
assert share >= 2 / 3, f"rank {want} is the busiest in {share:.0%} of iterations: {busiest}"
print(f"rank {want} the busiest in {share:.0%} of {len(busiest)} iterations")
PY
            fail "$d: the timeline's critical ranks are not the busiest ranks, or rank $want is not mostly critical"
    done
    held=0-$((8 / np - 1)) # rank 0's experts, contiguous: the hot ones, 0 and 1, among them
    grep -qF "experts $held ◀ critical" "$TMP/tl-hot$np/timeline.svg" ||
        fail "hot$np: the hot rank's experts are not annotated"

    # the report: the straggler is a slow rank, the hot experts' rank is routing
    "$REPORT" "$TMP/st$np" "$TMP/hot$np" --md "$TMP/r$np.md" >/dev/null || fail "moeperf-report exit $?"
    sed -n '/^### Who the others wait for/,/^#/p' "$TMP/r$np.md" >"$TMP/w.md"
    cat "$TMP/w.md"
    # a table, one row per finding: | curve | points | rank (host) | why | rows/mean | ... |
    grep -q "| rank 1 (host $host) | a slow rank or host, not routing | [0-9.]*× |" "$TMP/w.md" ||
        fail "$np ranks: the straggler is not named as a slow rank"
    grep -q "| rank 0 (host $host) | routing: holds experts $held | [0-9.]*× |" "$TMP/w.md" ||
        fail "$np ranks: the hot experts' rank is not named as routing"
    [ "$(grep -c '^| [^c-]' "$TMP/w.md")" -eq 2 ] && ! grep -q '^- ' "$TMP/w.md" ||
        fail "$np ranks: expected a table of two findings, no bullets"
    for k in 1 2; do
        [ -s "$TMP/r${np}_plots/timeline-$k.svg" ] || fail "the report has no timeline-$k.svg"
        grep -qF "(r${np}_plots/timeline-$k.svg)" "$TMP/r$np.md" || fail "the report does not show timeline-$k"
    done
}

# Who is busiest is measured time: on 2 shared cores beside other suites a rank descheduled for
# long can outlast the straggler or the hot rank in several iterations. A failed attempt is
# measured again, up to three times in all; a fault fails every attempt.
for np in 2 4; do
    for try in 1 2 3; do
        ( attempt $np ) && break
        [ $try -lt 3 ] || fail "$np ranks: every attempt failed (the last attempt's reason above)"
        echo "$np ranks: attempt $try failed; measuring again"
    done
done
echo PASS
