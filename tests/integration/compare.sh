#!/usr/bin/env bash
# compare.sh - moeperf-compare finds a run slowed on purpose: moeperf-layer on 2 ranks against the
# same sweep with --inject-delay-us exits 3 with every point's layer_us (and comm_us) marked
# regression; compare.csv, compare.md, compare.junit.xml (and compare.svg) parse; a run compared
# with a copy of itself is unchanged, and with itself refused; too few samples are inconclusive (--strict fails them); usage errors
# exit 2; without --out the files go beside the new run (NEW_DIR-compare), not into the directory
# it runs from.
. "$(dirname "$0")/lib.sh"
CMP=$BUILD/reports/moeperf-compare
[ -x "$CMP" ] || fail "$CMP is not built"

ARGS="--experts 8 --topk 2 --shared 0 --hidden 256 --ffn 512 --batch 4,32 --warmup 3 --iters 30 --quiet"
POINTS=2
# 20 ms before each of the two all-to-alls of a layer: +40 ms on layers of 0.3-0.7 ms (9-14 ms,
# with every sample's spread near 100 %, beside a sanitizer build of the stand-in on two cores,
# where +4 ms fell within the noise rule), beyond the 2x that a busy neighbour can cost a whole run
DELAY=20000
# Waiting ranks yield the core: with spinning ranks a busy neighbour can put both ranks on one core
# and stretch every exchange to a scheduler time slice (20-40 ms layers seen here), which would
# swamp any delay. The comparison, not the MPI latency, is under test.
mpiy() {
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np "$@"
}
# ---- detection ----
# check_files: the outputs of base vs slow parse and say what they must
check_files() {
    python3 - "$TMP/cmp" "$POINTS" <<'PY'
import csv, re, sys, xml.etree.ElementTree as ET
d, points = sys.argv[1], int(sys.argv[2])
errors = []
rows = list(csv.DictReader(open(f"{d}/compare.csv")))
need = ["source", "batch", "metric", "gated", "n_base", "n_new", "unit", "base_median_us",
        "new_median_us", "change_pct", "p_value", "test", "verdict", "reason"]
missing = [c for c in need if c not in rows[0]]
if missing:
    errors.append(f"compare.csv lacks columns {missing}")
if len(rows) != 3 * points:
    errors.append(f"compare.csv has {len(rows)} rows, expected {3 * points}")
for r in rows:
    if r["verdict"] not in ("regression", "improvement", "unchanged", "inconclusive"):
        errors.append(f"verdict {r['verdict']!r}")
    if r["metric"] in ("layer_us", "comm_us"):
        # the delay adds ~4 ms to every iteration: every point, both metrics
        if r["verdict"] != "regression":
            errors.append(f"batch {r['batch']} {r['metric']}: {r['verdict']}, expected regression")
        if not (float(r["new_median_us"]) - float(r["base_median_us"]) > 2000):
            errors.append(f"batch {r['batch']} {r['metric']}: median grew by less than 2 ms")
        if not (float(r["p_value"]) < 0.01 and r["n_base"] == "30" and r["unit"] == "iteration"):
            errors.append(f"batch {r['batch']} {r['metric']}: p {r['p_value']}, n {r['n_base']}")
    if r["gated"] != ("1" if r["metric"] == "layer_us" else "0"):
        errors.append(f"{r['metric']} gated = {r['gated']}")
flagged = sum(r["verdict"] == "regression" and r["metric"] == "layer_us" for r in rows)

root = ET.parse(f"{d}/compare.junit.xml").getroot()
suite = root.find("testsuite")
cases = suite.findall("testcase")
fails = [c for c in cases if c.find("failure") is not None]
if len(cases) != 3 * points:
    errors.append(f"JUnit: {len(cases)} testcases, expected {3 * points}")
if len(fails) != flagged or int(suite.get("failures")) != flagged or int(root.get("failures")) != flagged:
    errors.append(f"JUnit: {len(fails)} failures, expected {flagged} (the layer_us regressions)")
if any(c.get("classname") != "moeperf-layer.layer_us" for c in fails):
    errors.append("JUnit: a failure outside layer_us")
if not all(c.get("name", "").startswith("batch=") for c in cases):
    errors.append("JUnit: testcase names are not the point labels")

md = open(f"{d}/compare.md").read()
for s in ("**Result: REGRESSION.**", "deliberately slowed", "| libraries.comm_version |",
          "| batch | metric |", "**regression**"):
    if s not in md:
        errors.append(f"compare.md lacks {s!r}")
md_rows = [l for l in md.splitlines() if re.match(r"\| \d+ \| \w+_us", l)]
if len(md_rows) != 3 * points:
    errors.append(f"compare.md: {len(md_rows)} result rows, expected {3 * points}")

dat = [l for l in open(f"{d}/compare_plot.dat") if l.strip() and not l.startswith("#")]
if len(dat) != 3 * points:
    errors.append(f"compare_plot.dat: {len(dat)} data lines, expected {3 * points}")
try:
    svg = ET.parse(f"{d}/compare.svg").getroot()
    if not svg.tag.endswith("svg"):
        errors.append("compare.svg is not SVG")
except FileNotFoundError:
    print("note: no compare.svg (gnuplot missing?)")
for e in errors:
    print("mismatch:", e, file=sys.stderr)
print(f"{flagged} of {points} points flagged as layer_us regressions")
sys.exit(1 if errors else 0)
PY
}
# A neighbour on this shared host can stall a whole run; such a pair is measured again (at most 3
# times). The verdict logic is deterministic given the samples, so a defect fails every attempt.
ok=0
for attempt in 1 2 3; do
    rm -rf "$TMP/base" "$TMP/slow" "$TMP/cmp"
    mpiy 2 "$BIN/moeperf-layer" $ARGS --out "$TMP/base" || fail "base run failed"
    mpiy 2 "$BIN/moeperf-layer" $ARGS --inject-delay-us $DELAY --out "$TMP/slow" || fail "slow run failed"
    grep -q '"inject_delay_us":[[:space:]]*'$DELAY "$TMP/slow/run.json" || fail "run.json does not record the delay"
    st=0
    "$CMP" "$TMP/base" "$TMP/slow" --out "$TMP/cmp" >"$TMP/out.txt" 2>"$TMP/err.txt" || st=$?
    cat "$TMP/out.txt"
    if [ "$st" = 3 ] && check_files; then
        ok=1
        break
    fi
    echo "attempt $attempt: exit $st or the files above are not as expected; measuring again" >&2
done
[ "$ok" = 1 ] || { cat "$TMP/err.txt" >&2; fail "no attempt detected the delay at every point with exit 3"; }
grep -q "deliberately slowed" "$TMP/err.txt" || fail "no warning about the deliberately slowed run on stderr"
grep -q "REGRESSION" "$TMP/out.txt" || fail "the table shows no REGRESSION"
for f in compare.csv compare.md compare.junit.xml compare_plot.gp compare_plot.dat; do
    [ -s "$TMP/cmp/$f" ] || fail "$f missing or empty"
done
if command -v gnuplot >/dev/null; then
    [ -s "$TMP/cmp/compare.svg" ] || fail "gnuplot is installed but compare.svg was not drawn"
fi

# ---- the other way round: improvements, exit 0 ----
st=0
"$CMP" "$TMP/slow" "$TMP/base" --out "$TMP/rev" >/dev/null 2>&1 || st=$?
[ "$st" = 0 ] || fail "slow vs base: exit $st, expected 0"
[ "$(awk -F, 'NR > 1 && /,layer_us,/ && /,improvement,/' "$TMP/rev/compare.csv" | wc -l)" = "$POINTS" ] ||
    fail "slow vs base: layer_us is not an improvement at every point"

# ---- a run against a copy of itself: identical samples, p = 1, exit 0 (the same directory on
# both sides is refused, below) ----
cp -r "$TMP/base" "$TMP/base-copy"
"$CMP" "$TMP/base" "$TMP/base-copy" --out "$TMP/self" --no-svg >/dev/null 2>&1 || fail "base vs itself: exit $?"
bad=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
               $c["verdict"] != "unchanged" || $c["p_value"] != 1 || $c["change_pct"] != 0' "$TMP/self/compare.csv")
[ -z "$bad" ] || fail "base vs itself: rows not unchanged with p = 1: $bad"

# ---- too few samples: inconclusive, exit 0; --strict: exit 3 ----
mpiy 2 "$BIN/moeperf-layer" ${ARGS/--iters 30/--iters 3} --out "$TMP/short" || fail "short run failed"
"$CMP" "$TMP/base" "$TMP/short" --out "$TMP/few" --no-svg >/dev/null 2>&1 || fail "base vs 3 samples: exit $?, expected 0"
[ "$(col "$TMP/few/compare.csv" verdict | sort -u)" = inconclusive ] || fail "3 samples: not inconclusive"
python3 -c "
import sys, xml.etree.ElementTree as ET
s = ET.parse('$TMP/few/compare.junit.xml').getroot().find('testsuite')
sys.exit(0 if int(s.get('skipped')) == 3 * $POINTS and int(s.get('failures')) == 0 else 1)" ||
    fail "3 samples: JUnit does not mark every testcase skipped"
st=0
"$CMP" --strict "$TMP/base" "$TMP/short" --out "$TMP/few" --no-svg >/dev/null 2>&1 || st=$?
[ "$st" = 3 ] || fail "--strict with inconclusive points: exit $st, expected 3"

# ---- usage errors: exit 2 with one line naming the problem ----
usage() { # EXPECTED_WORD ARGS...: exit 2 and a message containing the word
    local word=$1 st=0
    shift
    "$CMP" "$@" --out "$TMP/u" >"$TMP/u.out" 2>"$TMP/u.err" || st=$?
    [ "$st" = 2 ] || fail "moeperf-compare $*: exit $st, expected 2"
    grep -q -- "$word" "$TMP/u.err" || fail "moeperf-compare $*: message lacks '$word': $(cat "$TMP/u.err")"
}
usage "No such file" "$TMP/base" "$TMP/nowhere"
usage "No such file" "$TMP/nowhere" "$TMP/base"
mpiy 2 "$BIN/moeperf-layer" ${ARGS/--hidden 256/--hidden 128} --out "$TMP/h128" || fail "--hidden 128 run failed"
usage "different workloads" "$TMP/base" "$TMP/h128"
cp -r "$TMP/base" "$TMP/nosamples"
rm "$TMP/nosamples/layer_samples.csv"
usage "layer_samples.csv" "$TMP/base" "$TMP/nosamples"
mpiy 2 "$BIN/moeperf-a2a" --bytes 1K --iters 5 --quiet --out "$TMP/a2a" || fail "a2a run failed"
usage "different workloads" "$TMP/base" "$TMP/a2a"
usage "two run directories" "$TMP/base"
usage "--threshold" --threshold -1 "$TMP/base" "$TMP/slow"
usage "--gate" --gate some "$TMP/base" "$TMP/slow"

# ---- the default --out: NEW_DIR-compare beside the new run, whatever the working directory ----
mkdir -p "$TMP/cwd"
(cd "$TMP/cwd" && "$CMP" --quiet --no-svg "$TMP/base" "$TMP/slow/") >/dev/null 2>&1 || true
[ -z "$(ls -A "$TMP/cwd")" ] || fail "moeperf-compare without --out wrote into its working directory: $(ls -A "$TMP/cwd")"
[ -f "$TMP/slow-compare/compare.csv" ] || fail "moeperf-compare without --out: no slow-compare/compare.csv beside the new run"
# a NEW_DIR without a name of its own (".") is resolved to the directory it names
(cd "$TMP/base-copy" && "$CMP" --quiet --no-svg "$TMP/base" .) >/dev/null ||
    fail "moeperf-compare base . exited $?"
[ -f "$TMP/base-copy-compare/compare.csv" ] && [ ! -e "$TMP/base-copy/compare.csv" ] ||
    fail "moeperf-compare with NEW_DIR . did not write base-copy-compare/ beside it"
echo "default --out: slow-compare/ and base-copy-compare/ beside the new runs, nothing in the working directory"

# a run compared with itself (the same directory, by another path too) is refused, writing nothing
rc=0
"$CMP" "$TMP/base" "$TMP/base/." --out "$TMP/self-same" 2>"$TMP/self.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "BASE_DIR and NEW_DIR are the same directory" "$TMP/self.err" &&
    [ ! -e "$TMP/self-same" ] || fail "a run compared with itself: exit $rc, $(cat "$TMP/self.err")"
echo PASS
