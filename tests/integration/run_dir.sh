#!/usr/bin/env bash
# run_dir.sh - the run directory (docs/CSV.md, "The run directory"): a second run into an --out
# that holds a run is refused and leaves every file byte-identical; --force leaves no file of the
# first run; --resume adds only what is missing; a directory of other files or another tool's run
# is refused, with or without --force; nothing is made, or removed, before the first point is
# measured; a run stopped by an error keeps its rows and says why in run.json; the progress line
# shows on a terminal only, and never with --quiet; a --resume whose settings change what a row
# means (cluster profile, --gemm) is refused touching nothing; one writer per directory.
. "$(dirname "$0")/lib.sh"

MODEL="--backend model --cluster h100-ndr --model seed-k3 --layout tp2ep4 --iters 2"
TINY="--experts 8 --topk 2 --shared 0 --hidden 256 --ffn 256 --iters 2 --warmup 1 --quiet"
hashes() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }

# the first run, then a second into the same --out: exit 2, one line naming the directory and
# both ways on, every file as it was
"$BIN/moeperf-layer" $MODEL --batch 1,16 --quiet --out "$TMP/run" || fail "first run exit $?"
mkdir "$TMP/run/plots" && echo '<svg/>' >"$TMP/run/plots/old.svg" # as moeperf-report leaves it
hashes "$TMP/run" >"$TMP/first.md5"
rc=0
"$BIN/moeperf-layer" $MODEL --batch 4 --quiet --out "$TMP/run" >"$TMP/again.out" 2>"$TMP/again.err" ||
    rc=$?
[ "$rc" -eq 2 ] || fail "a second run into the same --out exited $rc, not 2"
[ "$(wc -l <"$TMP/again.err")" -eq 1 ] && grep -q "'$TMP/run' already holds a run" "$TMP/again.err" &&
    grep -q -- "--resume" "$TMP/again.err" && grep -q -- "--force" "$TMP/again.err" ||
    fail "the refusal is not one line naming the directory, --resume and --force: $(cat "$TMP/again.err")"
hashes "$TMP/run" | cmp -s - "$TMP/first.md5" || fail "the refused run changed the first run's files"

# --resume of the same points measures nothing and keeps the rows; of one more point adds it alone
"$BIN/moeperf-layer" $MODEL --batch 1,16 --quiet --out "$TMP/run" --resume || fail "resume exit $?"
[ "$(rows "$TMP/run/layer.csv")" -eq 2 ] || fail "a resume with nothing missing changed layer.csv"
"$BIN/moeperf-layer" $MODEL --batch 1,16,64 --quiet --out "$TMP/run" --resume ||
    fail "resume exit $?"
[ "$(col "$TMP/run/layer.csv" batch | tr '\n' ' ')" = "1 16 64 " ] ||
    fail "--resume did not add batch 64 alone: $(col "$TMP/run/layer.csv" batch | tr '\n' ' ')"

# --force: the old run goes whole (plots/ included), the new one alone is there
"$BIN/moeperf-layer" $MODEL --batch 4 --quiet --out "$TMP/run" --force || fail "--force exit $?"
[ ! -e "$TMP/run/plots" ] || fail "--force left the first run's plots/"
[ "$(col "$TMP/run/layer.csv" batch)" = 4 ] || fail "--force kept rows of the first run"
[ "$(find "$TMP/run" -type f | wc -l)" -eq "$(find "$TMP/run" -name '*.csv' -o -name run.json \
    -o -name .moeperf.lock | wc -l)" ] || fail "--force left files that are not the new run's"

# refused with and without --force, each touching nothing: files that are no run, another tool's
# run, --resume or --force without --out, both at once
mkdir "$TMP/mine" && echo keep >"$TMP/mine/notes.txt"
for extra in "" --force; do
    rc=0
    "$BIN/moeperf-layer" $MODEL --batch 1 --quiet --out "$TMP/mine" $extra 2>"$TMP/mine.err" || rc=$?
    [ "$rc" -eq 2 ] && grep -q "holds no moeperf run" "$TMP/mine.err" ||
        fail "a directory of other files with '$extra': exit $rc, $(cat "$TMP/mine.err")"
done
[ "$(ls "$TMP/mine")" = notes.txt ] && [ "$(cat "$TMP/mine/notes.txt")" = keep ] ||
    fail "a refused --force touched a directory that holds no run"
hashes "$TMP/run" >"$TMP/second.md5"
rc=0
"$BIN/moeperf-a2a" --backend model --cluster h100-ndr --world 8 --bytes 1K --iters 2 --quiet \
    --out "$TMP/run" --force 2>"$TMP/other.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "holds a run of moeperf-layer" "$TMP/other.err" ||
    fail "another tool's run with --force: exit $rc, $(cat "$TMP/other.err")"
for flags in "--resume" "--force" "--resume --force --out $TMP/run"; do
    rc=0
    "$BIN/moeperf-layer" $MODEL --batch 1 --quiet $flags 2>"$TMP/flags.err" || rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/flags.err")" -eq 1 ] ||
        fail "'$flags': exit $rc, $(cat "$TMP/flags.err")"
done
hashes "$TMP/run" | cmp -s - "$TMP/second.md5" || fail "a refused command changed the run"

# a run that fails before its first row makes no directory, and with --force removes nothing; one
# that fails later keeps its rows, run.json saying why (moeperf-ffn checks memory point by point)
rc=0
"$BIN/moeperf-ffn" $TINY --batch 2000000 --max-memory 64M --out "$TMP/none" 2>/dev/null || rc=$?
[ "$rc" -ne 0 ] && [ ! -e "$TMP/none" ] || fail "a run refused at its first point: exit $rc, or --out made"
"$BIN/moeperf-ffn" $TINY --batch 1 --out "$TMP/ffn" || fail "ffn run exit $?"
hashes "$TMP/ffn" >"$TMP/ffn.md5"
rc=0
"$BIN/moeperf-ffn" $TINY --batch 2000000 --max-memory 64M --out "$TMP/ffn" --force 2>/dev/null || rc=$?
[ "$rc" -ne 0 ] || fail "the point over --max-memory was not refused"
hashes "$TMP/ffn" | cmp -s - "$TMP/ffn.md5" || fail "--force removed the old run before a row was written"
rc=0
"$BIN/moeperf-ffn" $TINY --batch 1,2000000 --max-memory 64M --out "$TMP/half" 2>/dev/null || rc=$?
[ "$rc" -ne 0 ] && [ "$(rows "$TMP/half/ffn.csv")" -eq 1 ] || fail "the stopped run: exit $rc, rows lost"
python3 - "$TMP/half/run.json" <<'PYEOF' || fail "run.json of the stopped run does not say why"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["finished"] is False, j["finished"]
assert "--max-memory" in j.get("error", ""), j.get("error")
PYEOF

# --resume with a setting that changes what a row means and is no key column: refused before any
# file is touched, naming the setting and both values (the cluster profile, --gemm)
"$BIN/moeperf-layer" $MODEL --batch 1,16 --quiet --out "$TMP/settings" || fail "settings run exit $?"
hashes "$TMP/settings" >"$TMP/settings.md5"
for change in "--cluster a100-hdr|the cluster profile h100-ndr, this command with a100-hdr" \
    "--gemm fused|--gemm loop, this command with fused"; do
    rc=0
    # shellcheck disable=SC2086
    "$BIN/moeperf-layer" $MODEL ${change%%|*} --batch 1,16,64 --quiet --out "$TMP/settings" \
        --resume 2>"$TMP/settings.err" || rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/settings.err")" -eq 1 ] &&
        grep -qF -- "${change#*|}" "$TMP/settings.err" ||
        fail "--resume with ${change%%|*}: exit $rc, $(cat "$TMP/settings.err")"
    hashes "$TMP/settings" | cmp -s - "$TMP/settings.md5" ||
        fail "the refused --resume with ${change%%|*} changed the run's files"
done

# one writer per run directory: two runs started together on one new --out, and a third while the
# winner still writes: the others exit 2 naming the writer's pid, the winner's rows complete
LONG="--backend model --cluster h100-ndr --model deepseek-v3 --world 256 --batch 1:4096:x2 --routing uniform,zipf:1.2 --iters 20 --quiet"
# shellcheck disable=SC2086
"$BIN/moeperf-layer" $LONG --out "$TMP/both" 2>"$TMP/both1.err" &
first=$!
# shellcheck disable=SC2086
"$BIN/moeperf-layer" $LONG --out "$TMP/both" 2>"$TMP/both2.err" &
second=$!
for _ in $(seq 600); do # the third once the winner has written a row
    [ -s "$TMP/both/layer.csv" ] && [ "$(rows "$TMP/both/layer.csv")" -ge 1 ] && break
    sleep 0.1
done
rc3=0
# shellcheck disable=SC2086
"$BIN/moeperf-layer" $LONG --out "$TMP/both" --resume 2>"$TMP/both3.err" || rc3=$?
rc1=0 rc2=0
wait "$first" || rc1=$?
wait "$second" || rc2=$?
case "$rc1 $rc2" in
"0 2") winner=$first loser=2 ;;
"2 0") winner=$second loser=1 ;;
*) fail "two runs on one new --out exited $rc1 and $rc2, expected one 0 and one 2" ;;
esac
grep -q "is being written by pid $winner on host " "$TMP/both$loser.err" ||
    fail "the refused run does not name the writer (pid $winner): $(cat "$TMP/both$loser.err")"
[ "$rc3" -eq 2 ] && grep -q "is being written by pid $winner on host " "$TMP/both3.err" ||
    fail "a --resume while the run writes: exit $rc3, $(cat "$TMP/both3.err")"
[ "$(rows "$TMP/both/layer.csv")" -eq 26 ] ||
    fail "the writer's rows are not complete: $(rows "$TMP/both/layer.csv") of 26"

# the progress line: on a terminal (script(1) gives the run one), counting the points; never with
# --quiet nor when stdout is not a terminal
if command -v script >/dev/null; then
    script -qc "'$BIN/moeperf-layer' $MODEL --batch 1,16,64" /dev/null >"$TMP/tty.out" 2>&1 ||
        fail "the run on a terminal exited $?"
    grep -aq '\[3/3\] [0-9]* s elapsed, about [0-9]* s left: ' "$TMP/tty.out" ||
        fail "no progress line on a terminal: $(tr '\r' '\n' <"$TMP/tty.out" | head -n 5)"
    script -qc "'$BIN/moeperf-layer' $MODEL --batch 1,16,64 --quiet" /dev/null >"$TMP/quiet.out" 2>&1
    ! grep -aq elapsed "$TMP/quiet.out" || fail "a progress line with --quiet"
fi
"$BIN/moeperf-layer" $MODEL --batch 1,16,64 >"$TMP/pipe.out" 2>&1 || fail "piped run exit $?"
! grep -q elapsed "$TMP/pipe.out" || fail "a progress line when stdout is not a terminal"
echo "run_dir: refusals leave files as they were, --force replaces whole, --resume adds, progress on a terminal only"
