#!/usr/bin/env bash
# install.sh - the tools as meson installs them, away from the source tree: moeperf-report finds
# plots/render and its figures in the installed data directory (named by $MOEPERF_DATADIR, as a
# DESTDIR install cannot be found at its prefix), moeperf-plan trusts the installed
# tests/published/validation.csv, and without a data directory moeperf-report refuses with a
# message naming where it looked. Skips (77) without gnuplot.
. "$(dirname "$0")/lib.sh"
command -v gnuplot >/dev/null || skip "gnuplot is not installed"
command -v python3 >/dev/null || skip "python3 is not installed"

DEST=$TMP/dest
DESTDIR=$DEST meson install -C "$BUILD" --no-rebuild --quiet >"$TMP/install.log" 2>&1 ||
    { rc=$?; cat "$TMP/install.log"; fail "meson install exit $rc"; }
prefix=$(meson introspect "$BUILD" --buildoptions |
    python3 -c 'import json,sys; o={x["name"]: x["value"] for x in json.load(sys.stdin)}; print(o["prefix"] + "/" + o["bindir"] + " " + o["prefix"] + "/" + o["datadir"])')
bindir=$DEST${prefix%% *}
datadir=$DEST${prefix#* }/moeperf
for t in moeperf-layer moeperf-a2a moeperf-ffn moeperf-plan moeperf-report moeperf-compare; do
    [ -x "$bindir/$t" ] || fail "$t is not installed in $bindir"
done
[ -x "$datadir/plots/render" ] || fail "plots/render is not installed (executable) in $datadir"
[ -f "$datadir/tests/published/validation.csv" ] || fail "validation.csv is not installed in $datadir"

# the installed binaries, copied where no build directory or source tree lies beside them
mkdir -p "$TMP/bin/x"
cp "$bindir"/moeperf-* "$TMP/bin/x/"
X=$TMP/bin/x
"$X/moeperf-layer" --backend model --comm model --cluster h100-ndr --world 16 --model deepseek-v3 \
    --layout tp1ep16 --batch 64,256 --iters 4 --quiet --out "$TMP/layer" >/dev/null ||
    fail "installed moeperf-layer exit $?"

# with the data directory: a report whose figures were drawn
MOEPERF_DATADIR=$datadir "$X/moeperf-report" "$TMP/layer" --out "$TMP/report.html" \
    >"$TMP/report.out" 2>&1 || { rc=$?; cat "$TMP/report.out"; fail "installed moeperf-report exit $rc"; }
grep -q '<svg' "$TMP/report.html" || fail "the installed report drew no figure"
MOEPERF_DATADIR=$datadir "$X/moeperf-plan" --model deepseek-v3 --cluster h100-ndr --batch 64 \
    --max-gpus 64 --quiet --out "$TMP/plan" >/dev/null || fail "installed moeperf-plan exit $?"
python3 - "$TMP/plan/plan.json" <<'PY' || fail "the installed plan has no published trust"
import json, sys
plan = json.load(open(sys.argv[1]))
trust = [t for a in plan["answers"] for t in a["trust"] if t["basis"] == "published"]
assert trust and all("missing" not in t for t in trust), trust
PY

# without one (unless this machine has it installed at the prefix): refused, naming where it looked
if [ ! -e "${prefix#* }/moeperf/plots/render" ]; then
    rc=0
    env -u MOEPERF_DATADIR "$X/moeperf-report" "$TMP/layer" --out "$TMP/none.html" \
        >"$TMP/none.out" 2>&1 || rc=$?
    [ "$rc" = 1 ] || fail "moeperf-report without a data directory exited $rc, not 1"
    grep -q "${prefix#* }/moeperf" "$TMP/none.out" ||
        fail "the refusal does not name the installed data directory: $(cat "$TMP/none.out")"
fi
echo "installed: binaries, plots/ and validation.csv; report and plan found them"
