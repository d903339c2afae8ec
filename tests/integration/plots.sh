#!/usr/bin/env bash
# plots.sh - plots/render draws every figure, as PNG and as SVG, from run directories written by
# the real binaries (moeperf-layer on 1 rank with expert caches and on 2 ranks with 2 routings x 2
# placements, moeperf-a2a,
# moeperf-ffn) plus a model run, and each layer run's per-rank timeline, chosen as asked; a
# layer.csv without the expert_cache figure's x column leaves that figure out; a missing
# column or file exits 2 naming it and leaves no image, and a failing gnuplot leaves no partial
# image either.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
RENDER=$SRC/plots/render
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed"; exit 77; }

SHAPE=(--experts 8 --topk 2 --shared 0 --hidden 64 --ffn 64 --warmup 1 --iters 3 --quiet)
"$BIN/moeperf-layer" "${SHAPE[@]}" --batch 1,4,16 --expert-cache off,2,4 --out "$TMP/l1" ||
    fail "moeperf-layer (1 rank) exit $?"
mpi 2 "$BIN/moeperf-layer" "${SHAPE[@]}" --batch 1,4,16,64 --routing uniform,hot:2:10 \
    --placement contiguous,replicate-hot:2 --out "$TMP/l2" || fail "moeperf-layer (2 ranks) exit $?"
mpi 2 "$BIN/moeperf-a2a" --bytes 1K:64K:x4 --iters 5 --warmup 1 --quiet --out "$TMP/a2a" ||
    fail "moeperf-a2a exit $?"
"$BIN/moeperf-ffn" "${SHAPE[@]}" --batch 1,4,16,64 --out "$TMP/ffn" || fail "moeperf-ffn exit $?"
# a model run: the same rows with source=model and other latencies (what the planner writes)
mkdir -p "$TMP/model"
awk -F, -v OFS=, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; print; next }
    { $c["source"] = "model"; $c["backend"] = "model"; $c["comm"] = "model"
      $c["layer_us"] *= 1.3; $c["layer_p99_us"] *= 1.3; print }' "$TMP/l2/layer.csv" >"$TMP/model/layer.csv"

# is_png FILE / is_svg FILE: the image signature
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; }
is_svg() { head -c 2000 "$1" | grep -q '<svg'; }
# the figures of each file, from the figure table render draws from
figs_of() { awk -F, -v f="$1" '!/^#/ && $1 != "name" && $2 == f { printf "%s ", $1 }' "$SRC/plots/figures.csv"; }
FIGS_LAYER=$(figs_of layer.csv) FIGS_A2A=$(figs_of a2a.csv) FIGS_FFN=$(figs_of ffn.csv)
count() { echo $#; }
[ "$(count $FIGS_LAYER)" -ge 3 ] && [ -n "$FIGS_A2A" ] && [ -n "$FIGS_FFN" ] ||
    fail "plots/figures.csv: expected layer, a2a and ffn figures, got '$FIGS_LAYER' '$FIGS_A2A' '$FIGS_FFN'"
for f in $FIGS_LAYER $FIGS_A2A $FIGS_FFN; do
    "$RENDER" --help | grep -q "^  $f " || fail "render --help does not list $f"
done

# 1. each run directory on its own, PNG, into RUN_DIR/plots/
"$RENDER" "$TMP/l1" "$TMP/l2" "$TMP/a2a" "$TMP/ffn" >"$TMP/out1" || fail "render (png) exit $?"
for d in l1 l2; do
    for f in $FIGS_LAYER; do
        p=$TMP/$d/plots/$f.png
        if [ "$f" = expert_cache ] && [ "$d" = l2 ]; then # no cached point: no figure
            [ ! -e "$p" ] || fail "$p drawn from a run without --expert-cache"
            continue
        fi
        [ -s "$p" ] || fail "$p missing or empty"
        is_png "$p" || fail "$p is not a PNG"
    done
    [ ! -e "$TMP/$d/plots/a2a_busbw.png" ] || fail "$d has no a2a.csv but got a2a_busbw.png"
done
for p in $(for f in $FIGS_A2A; do echo "$TMP/a2a/plots/$f.png"; done) \
    $(for f in $FIGS_FFN; do echo "$TMP/ffn/plots/$f.png"; done); do
    [ -s "$p" ] && is_png "$p" || fail "$p missing, empty or not a PNG"
done
# and each layer run's per-rank timeline (its largest bubble)
for d in l1 l2; do
    [ -s "$TMP/$d/plots/timeline.png" ] && is_png "$TMP/$d/plots/timeline.png" || fail "$d has no timeline.png"
done
expected=$((2 * $(count $FIGS_LAYER) - 1 + 2 + $(count $FIGS_A2A) + $(count $FIGS_FFN)))
[ "$(wc -l <"$TMP/out1")" -eq $expected ] ||
    fail "render listed $(wc -l <"$TMP/out1") images, expected $expected"
if ls -a "$TMP"/*/plots | grep -q '\.tmp'; then fail "temporary files left in plots/"; fi

# a layer.csv written before cache_slots (the optional x of the expert_cache figure): the other
# figures drawn, that one left out without an error
mkdir -p "$TMP/old"
awk -F, -v OFS=, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "cache_slots" || $i == "cache_policy") drop[i] = 1 }
    { line = ""; for (i = 1; i <= NF; i++) if (!(i in drop)) line = line (line == "" ? "" : ",") $i; print line }' \
    "$TMP/l1/layer.csv" >"$TMP/old/layer.csv"
"$RENDER" --timeline none "$TMP/old" >"$TMP/out-old" || fail "render of a layer.csv without cache_slots exit $?"
[ ! -e "$TMP/old/plots/expert_cache.png" ] && [ -s "$TMP/old/plots/layer_latency.png" ] ||
    fail "a layer.csv without cache_slots: $(cat "$TMP/out-old")"

# 2. all runs on one set of figures, SVG, with the published reference
"$RENDER" --format svg --out "$TMP/svg" --reference "$SRC/plots/seed-h100-64gpu.csv" \
    "$TMP/l2" "$TMP/model" "$TMP/a2a" "$TMP/ffn" >/dev/null || fail "render (svg) exit $?"
for f in $FIGS_LAYER $FIGS_A2A $FIGS_FFN; do
    [ "$f" != expert_cache ] || continue # those runs have no cached point (part 1 draws one)
    p=$TMP/svg/$f.svg
    [ -s "$p" ] || fail "$p missing or empty"
    is_svg "$p" || fail "$p is not an SVG"
done
# legends say what sets each curve apart (docs/plots.md, "Curve labels"): the keys that differ
# between the curves (routing and placement; the shared layout is left out, and backend and comm,
# which follow the source), then (source); the reference's source
for label in "hot:2:10 replicate-hot:2 (measured)" "uniform contiguous (model)" \
    "published: 64×H100 NDR, 128 experts top-8, EP16×TP4" "network-bound above"; do
    grep -qF "$label" "$TMP/svg/comm_ratio.svg" || fail "comm_ratio.svg has no \"$label\""
done
grep -qF "tp1ep2 uniform" "$TMP/svg/comm_ratio.svg" && fail "comm_ratio.svg names the layout all curves share"
grep -qF "backend=" "$TMP/svg/comm_ratio.svg" && fail "comm_ratio.svg names the backend beside the source"
grep -qF ">uniform (measured)<" "$TMP/svg/a2a_busbw.svg" || fail "a2a_busbw.svg legend"
grep -qF "roofline:" "$TMP/svg/ffn_roofline.svg" || fail "ffn_roofline.svg has no roofline"
grep -qF "(µs, log)" "$TMP/svg/layer_latency.svg" || fail "layer_latency.svg axis unit"
grep -qF "GB/s" "$TMP/svg/a2a_busbw.svg" || fail "a2a_busbw.svg axis unit"
# the 8 curves of the 2-rank run and the model run are all there, 4 each
n=$(grep -c '(measured)</text>\|(model)</text>' "$TMP/svg/comm_ratio.svg")
[ "$n" -eq 8 ] || fail "comm_ratio.svg has $n curve legends, expected 8"

# 3. a missing column: exit 2, a message naming file and column, no image anywhere
mkdir -p "$TMP/bad"
awk -F, -v OFS=, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "bubble_ratio") drop = i }
    { out = ""; for (i = 1; i <= NF; i++) if (i != drop) out = out (out == "" ? "" : ",") $i; print out }' \
    "$TMP/l2/layer.csv" >"$TMP/bad/layer.csv"
rc=0
"$RENDER" --out "$TMP/badout" "$TMP/bad" 2>"$TMP/err" || rc=$?
[ "$rc" -eq 2 ] || fail "missing column: exit $rc, expected 2"
grep -q 'bad/layer.csv.*"bubble_ratio"' "$TMP/err" || fail "message does not name file and column: $(cat "$TMP/err")"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "expected a one-line message, got: $(cat "$TMP/err")"
[ -z "$(ls -A "$TMP/badout" 2>/dev/null)" ] || fail "images left after a missing column: $(ls -A "$TMP/badout")"
rc=0
"$RENDER" "$TMP/l1" "$TMP/bad" 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "missing column (no --out): exit $rc, expected 2"
[ ! -e "$TMP/bad/plots" ] || fail "images left in bad/plots"
# ... and the good directory given with it was not drawn either (it was rendered in step 1: remove)
rm -rf "$TMP/l1/plots"
"$RENDER" "$TMP/bad" "$TMP/l1" 2>/dev/null && fail "a bad directory among good ones was accepted"
[ ! -e "$TMP/l1/plots" ] || fail "a bad directory among good ones still drew the good one"

# 4. missing files and bad arguments
mkdir -p "$TMP/empty"
rc=0
"$RENDER" --out "$TMP/e" "$TMP/empty" 2>"$TMP/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "no layer.csv, a2a.csv or ffn.csv" "$TMP/err" || fail "empty dir: exit $rc: $(cat "$TMP/err")"
rc=0
"$RENDER" --out "$TMP/e" "$TMP/nonexistent" 2>"$TMP/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "nonexistent: no such run directory" "$TMP/err" || fail "missing dir: exit $rc"
rc=0
"$RENDER" --format jpg "$TMP/l2" 2>"$TMP/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "png and svg" "$TMP/err" || fail "--format jpg: exit $rc"
printf 'size,ratio\n1,2\n' >"$TMP/ref.csv"
rc=0
"$RENDER" --out "$TMP/e" --reference "$TMP/ref.csv" "$TMP/l2" 2>"$TMP/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q 'ref.csv: no column "batch"' "$TMP/err" || fail "reference without batch: exit $rc"
rc=0
"$RENDER" --out "$TMP/e" --reference "$TMP/none.csv" "$TMP/l2" 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "missing reference: exit $rc"
[ -z "$(ls -A "$TMP/e" 2>/dev/null)" ] || fail "images left after bad arguments"

# 5. the per-rank timeline's selection: by cells, one per curve, none; a selection that matches
# nothing exits 2 (tests/integration/who_waits.sh looks at what the timelines show)
"$RENDER" --out "$TMP/tl-sel" --timeline routing=hot:2:10,placement=contiguous "$TMP/l2" >"$TMP/out" ||
    fail "render --timeline routing=hot:2:10,placement=contiguous exit $?"
grep -q 'timeline\.png$' "$TMP/out" || fail "--timeline routing=...: no timeline.png"
"$RENDER" --format svg --out "$TMP/tl-cur" --timeline curves "$TMP/l2" >"$TMP/out" ||
    fail "render --timeline curves exit $?"
[ "$(grep -c 'timeline-[0-9]*\.svg$' "$TMP/out")" -eq 4 ] || fail "--timeline curves: $(cat "$TMP/out")"
curve=("" "uniform · placement contiguous" "uniform · placement replicate-hot:2"
    "hot:2:10 · placement contiguous" "hot:2:10 · placement replicate-hot:2")
for k in 1 2 3 4; do
    grep -qF "routing ${curve[$k]}" "$TMP/tl-cur/timeline-$k.svg" || fail "timeline-$k is not its curve's"
done
"$RENDER" --out "$TMP/tl-none" --timeline none "$TMP/l2" >/dev/null || fail "--timeline none exit $?"
[ ! -e "$TMP/tl-none/timeline.png" ] || fail "--timeline none drew a timeline"
for bad in routing=zipf:9 nosuchcolumn=1 "bad"; do
    rc=0
    "$RENDER" --out "$TMP/tl-bad" --timeline "$bad" "$TMP/l2" 2>"$TMP/err" || rc=$?
    [ "$rc" -eq 2 ] && grep -q -- "--timeline" "$TMP/err" || fail "--timeline $bad: exit $rc: $(cat "$TMP/err")"
done
[ -z "$(ls -A "$TMP/tl-bad" 2>/dev/null)" ] || fail "images left after a bad --timeline"

# 6. gnuplot failing halfway through an image: exit 1 and no partial image
mkdir -p "$TMP/shim"
cat >"$TMP/shim/gnuplot" <<'EOF'
#!/bin/sh
out=$(printf '%s\n' "$2" | sed -n "s/.*OUT='\([^']*\)'.*/\1/p")
printf 'partial' >"$out"
echo "gnuplot: simulated failure" >&2
exit 1
EOF
chmod +x "$TMP/shim/gnuplot"
rc=0
PATH="$TMP/shim:$PATH" "$RENDER" --out "$TMP/partial" "$TMP/l2" 2>/dev/null || rc=$?
[ "$rc" -eq 1 ] || fail "failing gnuplot: exit $rc, expected 1"
[ -z "$(ls -A "$TMP/partial" 2>/dev/null)" ] || fail "partial images left: $(ls -A "$TMP/partial")"
echo PASS
