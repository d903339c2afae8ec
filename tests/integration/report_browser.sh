#!/usr/bin/env bash
# report_browser.sh - the HTML report in headless Chromium at 1200x800: the screenshot is not blank,
# and the page asks the network for nothing (Chromium's net log lists no request made by the
# page; a page with an external image, checked the same way, is caught); beside a plan directory
# the answer's table is on the first screen (its cells painted a marker colour in a copy of the
# page, the marker counted in the screenshot; a page with the answer below the fold is caught);
# the first per-rank timeline, drawn alone, is not blank, and a model run's outlines the longest bar; every text
# of every figure of a deepseek-v3 model run beside a measured one lies inside its figure, no two
# timeline labels overlap, and no seed reference is drawn beside deepseek-v3.
# Skips (77) without a chromium binary.
. "$(dirname "$0")/lib.sh"
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || { echo "SKIP: no chromium or chromium-browser (ci/deps installs chromium)"; exit 77; }
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }

SHAPE=(--experts 8 --topk 2 --shared 0 --hidden 64 --ffn 64 --warmup 1 --iters 3 --quiet)
mpi 2 "$BIN/moeperf-layer" "${SHAPE[@]}" --batch 1,4,16 --routing uniform,hot:2:10 \
    --placement contiguous,replicate-hot:2 --out "$TMP/layer" || fail "moeperf-layer exit $?"
"$BIN/moeperf-ffn" "${SHAPE[@]}" --batch 1,4,16 --out "$TMP/ffn" || fail "moeperf-ffn exit $?"
"$BUILD/planner/moeperf-plan" --model seed-k3 --cluster h100-ndr --routing uniform,hot:4:15 \
    --batch 1:128:x2 --throughput 1416 --slo-token-ms 50 --max-gpus 64 --nonexpert-split world \
    --weight-dtype bf16,fp8 --quiet --out "$TMP/plan" >/dev/null || fail "moeperf-plan exit $?"
"$BUILD/reports/moeperf-report" "$TMP/plan" "$TMP/layer" "$TMP/ffn" --out "$TMP/report.html" \
    >/dev/null || fail "moeperf-report exit $?"

# shot PAGE PNG NETLOG: headless screenshot at 1200x800 with every name resolving nowhere and a
# dead proxy, so nothing leaves the machine even if the page asked; the net log records the asks.
shot() {
    rm -rf "$TMP/profile"
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --user-data-dir="$TMP/profile" --no-first-run --window-size=1200,800 \
        --host-resolver-rules="MAP * ~NOTFOUND" --proxy-server=127.0.0.1:9 \
        --log-net-log="$3" --screenshot="$2" "file://$1" >"$TMP/chromium.log" 2>&1
}

# page_requests NETLOG: the URLs of requests the page made (initiated by a document; the
# browser's own background requests have no initiating origin) that are not file: or data:.
page_requests() {
    python3 - "$1" <<'EOF'
import json, sys
log = json.load(open(sys.argv[1]))
names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
for e in log.get("events", []):
    if names.get(e.get("type")) != "URL_REQUEST_START_JOB":
        continue
    p = e.get("params", {})
    url = p.get("url", "")
    if p.get("initiator", "not an origin") == "not an origin":
        continue
    if not url.startswith(("file:", "data:")):
        print(url)
EOF
}

# not_blank PNG [MARKER]: decode the screenshot (tests/integration/png.py) and require real content:
# at least 2 % of the pixels not white and at least 50 distinct colours (text and plot lines); with
# MARKER, at least that many pure magenta pixels too.
not_blank() {
    PYTHONPATH="$(dirname "$0")" python3 - "$@" <<'EOF'
import sys
from png import decode
w, h, rows = decode(sys.argv[1])
colours, nonwhite, marker = set(), 0, 0
for line in rows:
    for px in line:
        marker += px == (255, 0, 255)
        colours.add(px)
        nonwhite += px != (255, 255, 255)
share = nonwhite / (w * h)
print(f"{w}x{h}: {100 * share:.1f} % non-white pixels, {len(colours)} colours")
assert (w, h) == (1200, 800), (w, h)
assert share > 0.02 and len(colours) >= 50, "the screenshot is blank"
if len(sys.argv) > 2:  # the marker's pixels (pure magenta) on this first screen
    print(f"marker pixels: {marker}")
    assert marker >= int(sys.argv[2]), f"only {marker} marker pixels on the first screen"
EOF
}

shot "$TMP/report.html" "$TMP/shot.png" "$TMP/net.json" || fail "chromium exit $?: $(tail -3 "$TMP/chromium.log")"
[ -s "$TMP/shot.png" ] || fail "chromium wrote no screenshot"
not_blank "$TMP/shot.png" || fail "the screenshot of the report is blank"
[ -s "$TMP/net.json" ] || fail "chromium wrote no net log"
reqs=$(page_requests "$TMP/net.json") || fail "cannot read the net log"
[ -z "$reqs" ] || fail "the report made network requests: $reqs"

# the first screen shows the answer: a copy of the page whose answer table is painted magenta has
# the marker on its 1200x800 screenshot (5 rows of cells: thousands of pixels); with the answer
# moved below the findings and figures (a planted fault: what the report was before), it has not
mark='<style>table.answer td,table.answer th{background:#ff00ff !important;color:#ff00ff !important}</style>'
grep -c 'class="answer"' "$TMP/report.html" | grep -qx 1 || fail "no answer table in the report"
sed "s|</head>|$mark</head>|" "$TMP/report.html" >"$TMP/marked.html"
shot "$TMP/marked.html" "$TMP/marked.png" "$TMP/marked.json" || fail "chromium (marked page) exit $?"
not_blank "$TMP/marked.png" 5000 || fail "the answer's table is not on the report's first screen"
python3 - "$TMP/marked.html" "$TMP/late.html" <<'EOF'
import re, sys
page = open(sys.argv[1], encoding="utf-8").read()
start = page.index('<h2 id="the-answer"') if '<h2 id="the-answer"' in page else page.index("<h2>The answer</h2>")
end = page.index("<h2", start + 4)
answer, page = page[start:end], page[:start] + page[end:]
at = page.index("</main>")
open(sys.argv[2], "w", encoding="utf-8").write(page[:at] + answer + page[at:])
EOF
shot "$TMP/late.html" "$TMP/late.png" "$TMP/late.json" || fail "chromium (late page) exit $?"
not_blank "$TMP/late.png" 5000 >/dev/null 2>&1 && fail "the first-screen check passed a page with the answer at its end"

# first_timeline REPORT HTML: the report's first per-rank timeline, inlined as the report has it
first_timeline() {
    python3 - "$1" "$2" <<'EOF'
import re, sys
page = open(sys.argv[1], encoding="utf-8").read()
at = page.index(">Per-rank timelines</h3>")
svg = re.search(r"<svg.*?</svg>", page[at:], re.S).group(0)
open(sys.argv[2], "w", encoding="utf-8").write(
    '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
    '<body style="margin:0">' + svg + "</body></html>")
EOF
}
# the measured run's first per-rank timeline as Chromium draws it is not blank
first_timeline "$TMP/report.html" "$TMP/timeline.html" || fail "no per-rank timeline in the report"
shot "$TMP/timeline.html" "$TMP/timeline.png" "$TMP/timeline.json" || fail "chromium (timeline) exit $?"
not_blank "$TMP/timeline.png" || fail "the report's timeline is blank"
# and the outlined critical rank's bar is the longest (tests/integration/timeline_check.py), drawn
# from a model run: its times do not depend on how busy this machine is, where a measured rank
# descheduled for a whole iteration can leave every busy phase below a pixel
"$BIN/moeperf-layer" --backend model --world 4 "${SHAPE[@]}" --batch 1,4,16 --routing hot:2:10 \
    --out "$TMP/model4" || fail "model run exit $?"
"$BUILD/reports/moeperf-report" "$TMP/model4" --out "$TMP/model4.html" >/dev/null ||
    fail "moeperf-report (model run) exit $?"
first_timeline "$TMP/model4.html" "$TMP/timeline4.html" || fail "no timeline in the model run's report"
shot "$TMP/timeline4.html" "$TMP/timeline4.png" "$TMP/timeline4.json" || fail "chromium (timeline) exit $?"
PYTHONPATH="$(dirname "$0")" python3 "$(dirname "$0")/timeline_check.py" "$TMP/timeline4.png" ||
    fail "the report's timeline: the critical rank's bar is not the longest"

# the check catches a page that does fetch something
cat >"$TMP/leaky.html" <<'EOF'
<!DOCTYPE html><html><head><meta charset="utf-8"><title>leaky</title></head>
<body><h1>a page with an external image</h1><img src="http://moeperf.invalid/figure.png"></body></html>
EOF
shot "$TMP/leaky.html" "$TMP/leaky.png" "$TMP/leaky.json" || fail "chromium (leaky page) exit $?"
page_requests "$TMP/leaky.json" | grep -q "moeperf.invalid/figure.png" ||
    fail "the net log check missed the external image of a leaky page"
# and a blank page is caught by the screenshot check
printf '<!DOCTYPE html><html><body></body></html>\n' >"$TMP/blank.html"
shot "$TMP/blank.html" "$TMP/blank.png" "$TMP/blank.json" || fail "chromium (blank page) exit $?"
not_blank "$TMP/blank.png" >/dev/null 2>&1 && fail "the blank-screenshot check passed a blank page"
echo PASS

# text inside its figure: the report of a deepseek-v3 model run beside the measured one (scales
# 10^3 apart, so its latency figure splits them; labels that would run past the edge), every
# figure of its Markdown copy laid out by Chromium: each <text>'s box inside its <svg>, no two
# labels of a per-rank timeline on top of each other; and no seed reference beside deepseek-v3
"$BIN/moeperf-layer" --backend model --model deepseek-v3 --world 64 --layout tp1ep64 \
    --batch 1,16,64 --routing uniform,hot:8:10 --placement contiguous,replicate-hot:4 --iters 4 \
    --quiet --out "$TMP/ds" || fail "deepseek-v3 model run exit $?"
# the measured run as a slow cluster would have measured it: its times ×1000, so that the two
# sources stand 10^3 apart whatever this machine's speed
mkdir -p "$TMP/slow" && cp "$TMP/layer/run.json" "$TMP/layer/layer_rank_samples.csv" "$TMP/slow/"
awk -F, -v OFS=, 'NR == 1 { for (i = 1; i <= NF; i++) us[i] = $i ~ /_us$/; print; next }
    { for (i = 1; i <= NF; i++) if (us[i] && $i != "") $i *= 1000; print }' \
    "$TMP/layer/layer.csv" >"$TMP/slow/layer.csv"
"$BUILD/reports/moeperf-report" "$TMP/ds" "$TMP/slow" --out "$TMP/ds.html" --md "$TMP/ds.md" \
    >/dev/null || fail "moeperf-report of the deepseek-v3 run exit $?"
! grep -q "published: 64" "$TMP/ds.html" || fail "the seed's reference is drawn beside deepseek-v3"
grep -q "faster curves (10× and more apart): whole layer" "$TMP/ds_plots/layer_latency.svg" ||
    fail "measured and modelled curves 10^3 apart share the latency panels"
python3 - "$TMP/ds_plots" "$TMP/extents.html" <<'PYEOF' || fail "cannot build the extents page"
import glob, os, re, sys
figs = sorted(glob.glob(os.path.join(sys.argv[1], "*.svg")))
assert len(figs) >= 4, figs
body = []
for f in figs:
    svg = open(f, encoding="utf-8").read()
    svg = svg[svg.index("<svg"):]
    body.append(f'<div data-fig="{os.path.basename(f)}">{svg}</div>')
script = r"""
<script>
const bad = [];
document.querySelectorAll('div[data-fig]').forEach(div => {
  const name = div.dataset.fig, svg = div.querySelector('svg'), r = svg.getBoundingClientRect();
  const boxes = [];
  svg.querySelectorAll('text').forEach(t => {
    const b = t.getBoundingClientRect(), s = t.textContent.trim();
    if (!s || b.width === 0) return;
    if (b.left < r.left - 1 || b.right > r.right + 1 || b.top < r.top - 1 || b.bottom > r.bottom + 1)
      bad.push(name + ': "' + s + '" at x ' + Math.round(b.left) + '..' + Math.round(b.right) +
               ', y ' + Math.round(b.top) + '..' + Math.round(b.bottom) + ' outside ' +
               Math.round(r.width) + 'x' + Math.round(r.height));
    boxes.push([s, b]);
  });
  if (!name.startsWith('timeline')) return;
  for (let i = 0; i < boxes.length; i++)
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i][1], b = boxes[j][1];
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 2 && h > 3)
        bad.push(name + ': "' + boxes[i][0] + '" overlaps "' + boxes[j][0] + '"');
    }
});
document.getElementById('verdict').textContent = 'CHECKED ' + document.querySelectorAll('div[data-fig]').length + ' ' + (bad.length ? bad.join(' | ') : 'NONE');
</script>"""
open(sys.argv[2], "w", encoding="utf-8").write(
    '<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">' +
    "".join(body) + '<pre id="verdict">NOT RUN</pre>' + script + "</body></html>")
PYEOF
rm -rf "$TMP/profile"
timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$TMP/profile" --no-first-run --window-size=1200,800 \
    --virtual-time-budget=5000 --dump-dom "file://$TMP/extents.html" >"$TMP/extents.dom" \
    2>"$TMP/chromium.log" || fail "chromium (text extents) exit $?: $(tail -3 "$TMP/chromium.log")"
verdict=$(sed -n 's/.*<pre id="verdict">\([^<]*\)<\/pre>.*/\1/p' "$TMP/extents.dom")
echo "text extents: ${verdict:-no verdict}"
case $verdict in
"CHECKED "*" NONE") ;;
*) fail "figure text outside its figure, or timeline labels on top of each other: ${verdict:-the page did not run}" ;;
esac
