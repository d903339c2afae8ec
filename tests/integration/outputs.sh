#!/usr/bin/env bash
# outputs.sh - no output path may be an input: moeperf-report's --out and --md and moeperf-plan
# --calibrate's --out are refused (exit 2, one line naming the flag) when they name a file of a
# run directory the command reads, a hard link to one, a run's own file, or each other; every file
# stays byte-identical, and the profile calibrate writes appears whole or not at all.
. "$(dirname "$0")/lib.sh"
PLAN=$BUILD/planner/moeperf-plan
REPORT=$BUILD/reports/moeperf-report
hashes() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }

"$BIN/moeperf-layer" --backend model --cluster h100-ndr --model seed-k3 --layout tp2ep4 --iters 2 \
    --batch 1,16,64 --quiet --out "$TMP/run" || fail "the run: exit $?"
"$BIN/moeperf-layer" --backend model --cluster h100-ndr --model seed-k3 --layout tp2ep4 --iters 2 \
    --batch 4 --quiet --out "$TMP/other" || fail "the other run: exit $?"
ln "$TMP/run/layer.csv" "$TMP/linked.csv"
echo "# notes" >"$TMP/notes.md"
hashes "$TMP" >"$TMP.before"
trap 'rm -rf "$TMP" "$TMP.before"' EXIT

# refused CMD... -- WHAT: exit 2 and one line naming WHAT
refused() {
    local what=${*: -1} rc=0
    "${@:1:$#-2}" >"$TMP/out.txt" 2>"$TMP/err.txt" || rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/err.txt")" -eq 1 ] && grep -q -- "$what" "$TMP/err.txt" ||
        fail "${*:1:$#-2}: exit $rc, expected 2 and one line naming '$what': $(cat "$TMP/err.txt")"
    rm -f "$TMP/out.txt" "$TMP/err.txt"
}
refused "$REPORT" "$TMP/run" --out "$TMP/run/layer.csv" -- "--out '$TMP/run/layer.csv': is the input"
refused "$REPORT" "$TMP/run" --out "$TMP/run/run.json" -- "--out '$TMP/run/run.json': is the input"
refused "$REPORT" "$TMP/run" --out "$TMP/linked.csv" -- "--out '$TMP/linked.csv': is the input"
refused "$REPORT" "$TMP/run" --out "$TMP/other/layer.csv" -- "is a file of the run in its directory"
refused "$REPORT" "$TMP/run" --out "$TMP/notes.md" --md "$TMP/notes.md" -- "is also another output"
refused "$REPORT" "$TMP/run" --out "$TMP/other" -- "is a directory"
refused "$PLAN" --calibrate --out "$TMP/run/layer.csv" "$TMP/run" -- "--out '$TMP/run/layer.csv': is the input"
refused "$PLAN" --calibrate --out "$TMP/other/run.json" "$TMP/run" -- "is a file of the run"
hashes "$TMP" | cmp -s - "$TMP.before" ||
    fail "a refused command changed a file: $(hashes "$TMP" | diff - "$TMP.before")"

# what is allowed still works: the report beside the run, the profile whole, no temporary left
"$REPORT" "$TMP/run" --out "$TMP/run/report.html" >/dev/null || fail "the report into its run: exit $?"
"$PLAN" --calibrate --out "$TMP/fit.ini" "$TMP/run" >/dev/null || fail "calibrate: exit $?"
grep -q '^# fitted by moeperf-plan --calibrate' "$TMP/fit.ini" && [ ! -e "$TMP/fit.ini.tmp" ] ||
    fail "the fitted profile is not whole, or its temporary file is left"
echo PASS
