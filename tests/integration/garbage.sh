#!/usr/bin/env bash
# garbage.sh - garbage is never read as data: moeperf-report, moeperf-compare, moeperf-plan
# --calibrate and --resume refuse a result file with a batch of 0, a negative or infinite time, a
# bubble of 7, a non-numeric cell or a sample given twice, and moeperf-report a plan.json whose
# answer lacks a member or holds the wrong type: exit 2 and one line naming file, line and column
# (or member), no output written and every file as it was.
. "$(dirname "$0")/lib.sh"
REPORT=$BUILD/reports/moeperf-report
COMPARE=$BUILD/reports/moeperf-compare
PLAN=$BUILD/planner/moeperf-plan
hashes() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }

RUN=(--backend model --cluster h100-ndr --model qwen3-30b-a3b --layout tp1ep4 --iters 3 --quiet)
"$BIN/moeperf-layer" "${RUN[@]}" --batch 1,16,64 --out "$TMP/run" || fail "the run: exit $?"
"$PLAN" --model seed-k3 --cluster h100-ndr --throughput 2000 --slo-token-ms 50 --max-gpus 64 \
    --quiet --out "$TMP/plan" >/dev/null || fail "the plan: exit $?"
# the good run and plan are read as they are
"$REPORT" "$TMP/run" "$TMP/plan" --out "$TMP/good.html" >/dev/null || fail "the report: exit $?"
"$COMPARE" "$TMP/run" "$TMP/run" >/dev/null 2>&1 && fail "compare took one run on both sides"
cp -r "$TMP/run" "$TMP/copy"
"$COMPARE" "$TMP/run" "$TMP/copy" >/dev/null || fail "compare of the run with its copy: exit $?"

# spoil NAME FILE COLUMN VALUE: a copy of the run as NAME with COLUMN of FILE's first data row
# (line 2) set to VALUE
spoil() {
    cp -r "$TMP/run" "$TMP/$1"
    awk -F, -v OFS=, -v n="$3" -v v="$4" \
        'NR == 1 { for (i = 1; i <= NF; i++) if ($i == n) c = i; print; next }
         NR == 2 { $c = v } { print }' "$TMP/run/$2" >"$TMP/$1/$2"
    cmp -s "$TMP/run/$2" "$TMP/$1/$2" && fail "spoil: $2 has no column $3"
    return 0
}
# refuses WHAT CMD...: exit 2, one line that names WHAT, no $TMP/out.* written
refuses() {
    local what=$1 rc=0
    shift
    "$@" >/dev/null 2>"$TMP.err" || rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP.err")" -eq 1 ] && grep -qF -- "$what" "$TMP.err" ||
        fail "$*: exit $rc, expected 2 and one line naming '$what': $(cat "$TMP.err")"
    ls "$TMP"/out.* >/dev/null 2>&1 && fail "$*: refused, but wrote $(ls "$TMP"/out.*)"
    printf '%-28s -> %s\n' "$what" "$(cut -c1-150 "$TMP.err")"
}
# unchanged: every file under $TMP as it was at the last `hashes "$TMP" >"$TMP.before"`
unchanged() {
    hashes "$TMP" | cmp -s - "$TMP.before" ||
        fail "a refused command changed a file: $(hashes "$TMP" | diff - "$TMP.before")"
}

spoil batch0 layer.csv batch 0
spoil negative layer.csv layer_us -5
spoil infinite layer.csv layer_p99_us inf
spoil bubble7 layer.csv bubble_ratio 7
spoil word layer.csv ffn_us fast
spoil halfint layer.csv iters 2.5
spoil negsample layer_samples.csv layer_us -40
cp -r "$TMP/run" "$TMP/twice"
sed -n 2p "$TMP/run/layer_samples.csv" >>"$TMP/twice/layer_samples.csv"
cp -r "$TMP/run" "$TMP/twicerank"
sed -n 3p "$TMP/run/layer_rank_samples.csv" >>"$TMP/twicerank/layer_rank_samples.csv"
hashes "$TMP" >"$TMP.before"
trap 'rm -rf "$TMP" "$TMP.before" "$TMP.err"' EXIT

F=layer.csv
refuses "$TMP/batch0/$F line 2, column 23 (batch): 0 is outside [1, inf]" \
    "$REPORT" "$TMP/batch0" --out "$TMP/out.html"
refuses "$TMP/negative/$F line 2, column" "$REPORT" "$TMP/negative" --out "$TMP/out.html"
refuses "(layer_us): -5 is outside [0, inf]" "$REPORT" "$TMP/negative" --out "$TMP/out.html"
refuses "(layer_p99_us): inf is not a finite number" "$REPORT" "$TMP/infinite" --out "$TMP/out.html"
refuses "(bubble_ratio): 7 is outside [0, 1]" "$REPORT" "$TMP/bubble7" --out "$TMP/out.html"
refuses "(ffn_us): \"fast\" is not a number" "$REPORT" "$TMP/word" --out "$TMP/out.html"
refuses "(iters): \"2.5\" is not an integer" "$REPORT" "$TMP/halfint" --out "$TMP/out.html"
refuses "layer_rank_samples.csv line $(($(wc -l <"$TMP/run/layer_rank_samples.csv") + 1)) repeats line 3" \
    "$REPORT" "$TMP/twicerank" --out "$TMP/out.html"
# compare counts neither a negative sample nor one given twice
refuses "layer_samples.csv line 2, column" "$COMPARE" "$TMP/run" "$TMP/negsample" --out "$TMP/out.cmp"
refuses "layer_samples.csv line $(($(wc -l <"$TMP/run/layer_samples.csv") + 1)) repeats line 2" \
    "$COMPARE" "$TMP/twice" "$TMP/run" --out "$TMP/out.cmp"
# calibrate fits nothing to garbage, and a resume adds nothing to it
refuses "(bubble_ratio): 7 is outside" "$PLAN" --calibrate --out "$TMP/out.ini" "$TMP/bubble7"
refuses "(batch): 0 is outside" "$BIN/moeperf-layer" "${RUN[@]}" --batch 1,16,64,256 --resume \
    --out "$TMP/batch0"
# a validation table (--validation) with a ratio that is not a number is refused before any plan
# (its first data row: the line after the header, below the comment lines)
row=$(grep -n -v '^#' "$(dirname "$0")/../published/validation.csv" | sed -n 2p | cut -d: -f1)
sed "${row}s/,[^,]*\$/,fast/" "$(dirname "$0")/../published/validation.csv" >"$TMP/validation.csv"
cp "$TMP/validation.csv" "$TMP/summary.csv"
hashes "$TMP" >"$TMP.before"
refuses "validation.csv line $row, column 7 (ratio): \"fast\" is not a number" "$PLAN" \
    --model seed-k3 --cluster h100-ndr --throughput 2000 --slo-token-ms 50 \
    --validation "$TMP/validation.csv" --out "$TMP/out.plan"
refuses "summary.csv line $row, column 7 (ratio)" "$PLAN" --model seed-k3 --cluster h100-ndr \
    --throughput 2000 --slo-token-ms 50 --validation "$TMP/summary.csv" --out "$TMP/out.plan"
unchanged

# plan.json: an answer that found a plan but lacks its members, a count that is a string, a
# negative count
python3 - "$TMP/plan/plan.json" "$TMP" <<'EOF'
import json, os, shutil, sys
src, tmp = sys.argv[1], sys.argv[2]
good = json.load(open(src))
def spoiled(name, fn):
    os.makedirs(f"{tmp}/{name}")
    for f in os.listdir(os.path.dirname(src)):
        shutil.copy(os.path.join(os.path.dirname(src), f), f"{tmp}/{name}/")
    j = json.loads(json.dumps(good))
    fn(j)
    json.dump(j, open(f"{tmp}/{name}/plan.json", "w"))
spoiled("bare", lambda j: j["answers"].__setitem__(0, {"routing": "uniform", "found": True}))
spoiled("strgpus", lambda j: j["answers"][0].__setitem__("gpus", "many"))
spoiled("neggpus", lambda j: j["answers"][0].__setitem__("gpus", -3))
spoiled("noquestion", lambda j: j.pop("question"))
EOF
hashes "$TMP" >"$TMP.before"
refuses "$TMP/bare/plan.json: answers[0].layout is missing" "$REPORT" "$TMP/bare" --out "$TMP/out.html"
refuses "answers[0].gpus is not a number" "$REPORT" "$TMP/strgpus" --out "$TMP/out.html"
refuses "answers[0].gpus is -3, not a number of at least 1" "$REPORT" "$TMP/neggpus" --out "$TMP/out.html"
refuses "plan.json: question is missing" "$REPORT" "$TMP/noquestion" --out "$TMP/out.html"
unchanged
echo PASS
