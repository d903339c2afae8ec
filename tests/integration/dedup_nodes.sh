#!/usr/bin/env bash
# dedup_nodes.sh - --dedup rank and node measured across nodes, on emulated clusters of 2 nodes x 2
# ranks (ci/emucluster). (1) Counts: the cpu + mpi layer passes --check, and every rank's rows and
# bytes on the wire, those to the other node included, are the model's for the same sweep on the
# cpu-host profile (2 ranks per node); inter-node bytes fall from pair to rank, and from rank to
# node on some point; node's hop times are there, non-negative and within their phase, and empty
# for pair and rank; node's phases (dynamic, padded, pipelined) run on the EP group's intra- and
# inter-node groups (2 ranks each on tp1ep4), none on the whole EP group, and over the whole EP
# group where the nodes hold unequal numbers of EP ranks (2 x 3, tp2ep3); padded slots (lossless
# and a capacity that drops), rank and node, pass --check and drop, run and send what the model
# counts, node's fewer bytes between nodes. (2) A timing study (the perf tier): on a 200 Mbit/s data link, a profile
# calibrated on the pair runs only predicts the rank and node runs' layer_us within 25% (median of
# the absolute errors over the batches, per mode) of a value inside the measured medians' 95 %
# intervals (25 % plus half their median width). Skips (77) where network namespaces cannot be
# created, or when the machine is too noisy to judge.
. "$(dirname "$0")/lib.sh"
export PATH="$PATH:/usr/sbin:/sbin"
EMU=$(cd "$(dirname "$0")/../.." && pwd)/ci/emucluster
NAME=dn$$
cleanup() {
    "$EMU" down --name "$NAME" >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
command -v ip >/dev/null || { echo "SKIP: ip (iproute2) is not installed"; exit 77; }
# ---- 1. counts ----
counts() {
emu_up "$EMU" "$NAME" --nodes 2 --ranks-per-node 2 --rate 0
sweep="--hidden 64 --ffn 32 --experts 16 --topk 4 --shared 1 --layout tp1ep4,tp2ep2 --batch 24
    --routing zipf:1.2,hot:2:30 --placement contiguous,eplb:4 --dedup pair,rank,node --iters 2
    --warmup 1 --seed 3 --quiet --no-flush-cache"
# shellcheck disable=SC2086
"$EMU" run --name "$NAME" -- "$BIN/moeperf-layer" $sweep --check --timeout 120 \
    --out "$TMP/measured" >/dev/null 2>"$TMP/m.err" || fail "measured sweep exit $?: $(cat "$TMP/m.err")"
# shellcheck disable=SC2086
"$BIN/moeperf-layer" --backend model --comm model --cluster cpu-host --world 4 $sweep \
    --out "$TMP/modelled" || fail "modelled sweep exit $?"
python3 - "$TMP/measured" "$TMP/modelled" <<'PY' || fail "measured and modelled files disagree"
import csv, sys
key = ["layout", "routing", "placement", "dedup", "batch"]
def load(d, name, extra):
    return {tuple(r[k] for k in key + extra): r for r in csv.DictReader(open(f"{d}/{name}"))}
m, v = (load(d, "layer_ranks.csv", ["rank"]) for d in sys.argv[1:3])
assert m.keys() == v.keys() and m, "different points"
assert {r["node"] for r in m.values()} == {"0", "1"}, "the ranks are not on two nodes"
for k in m:
    for c in ("rows", "ffn_rows", "bytes_sent"):
        assert m[k][c] == v[k][c], (k, c, m[k][c], v[k][c])
m, v = (load(d, "layer.csv", []) for d in sys.argv[1:3])
assert m.keys() == v.keys()
inter = {}
for k in m:
    assert float(m[k]["check_error"]) <= 1e-5, (k, m[k]["check_error"])
    for c in ("bytes_internode", "bytes_rank_max"):
        assert m[k][c] == v[k][c], (k, c, m[k][c], v[k][c])
    inter.setdefault(k[:3], {})[k[3]] = float(m[k]["bytes_internode"])
saved = 0
for k, b in inter.items():
    assert 0 < b["node"] <= b["rank"] < b["pair"], (k, b)
    saved += b["node"] < b["rank"]
    print(k, "bytes_internode", b)
assert saved, "node never sent fewer inter-node bytes than rank"
# node's hop times (docs/METRICS.md, "Hop times"): present and non-negative for node, their sum
# within the phase (per iteration the slowest rank's; per rank its medians), empty for pair and rank
hops = {"dispatch_us": ("dispatch_inter_us", "dispatch_intra_us"),
        "combine_us": ("combine_inter_us", "combine_intra_us")}
for d in sys.argv[1:3]:
    for name in ("layer_samples.csv", "layer_ranks.csv", "layer.csv"):
        rows = list(csv.DictReader(open(f"{d}/{name}")))
        assert rows and all(c in rows[0] for p in hops.values() for c in p), (d, name)
        for r in rows:
            for phase, parts in hops.items():
                if r["dedup"] != "node":
                    assert all(r[c] == "" for c in parts), (d, name, r["dedup"], phase)
                    continue
                t = [float(r[c]) for c in parts]
                assert min(t) >= 0, (d, name, phase, t)
                if name != "layer.csv": # a median of sums is not the sum of medians; the
                    # files print 6 significant digits
                    assert sum(t) <= float(r[phase]) * (1 + 2e-5) + 1e-9, (d, name, phase, t, r[phase])
PY
# node's two phases run on the EP group's node groups (the test hook MOEPERF_TEST_GROUPS: each rank
# counts the exchanges of each group): on tp1ep4, dynamic, padded and pipelined, every rank runs
# its exchanges on an intra-node group of 2 ranks and an inter-node group of 2, none on the EP group
# of 4
# (and moeperf-a2a's exchange alone, whose timed hops do the same, in chunks too)
for form in "--dispatch dynamic" "--dispatch padded:0.5" "--overlap 2" a2a a2a-overlap; do
    rm -rf "$TMP/groups"
    if [ "${form%-overlap}" = a2a ]; then
        chunks=1
        [ "$form" = a2a ] || chunks=3
        "$EMU" run --name "$NAME" -- -x MOEPERF_TEST_GROUPS=1 "$BIN/moeperf-a2a" --pattern moe \
            --experts 16 --topk 4 --hidden 64 --batch 24 --routing zipf:1.2 --dedup node \
            --overlap $chunks --iters 2 --warmup 1 --quiet --timeout 120 --out "$TMP/groups" >/dev/null \
            2>"$TMP/g.err" || fail "moeperf-a2a --dedup node exit $?: $(cat "$TMP/g.err")"
    else
        # shellcheck disable=SC2086
        "$EMU" run --name "$NAME" -- -x MOEPERF_TEST_GROUPS=1 "$BIN/moeperf-layer" --hidden 64 \
            --ffn 32 --experts 16 --topk 4 --layout tp1ep4 --batch 24 --routing zipf:1.2 \
            --dedup node $form --iters 1 --warmup 0 --check --quiet --timeout 120 \
            --out "$TMP/groups" >/dev/null 2>"$TMP/g.err" ||
            fail "node's phases ($form) exit $?: $(cat "$TMP/g.err")"
    fi
    node_groups_ran "$TMP/g.err" "$form"
done

# nodes of unequal EP ranks (2 nodes x 3 ranks, tp2ep3: EP ranks on nodes 0 0 1) have no node
# groups: both phases run over the whole EP group of 3, and still pass --check
# shellcheck disable=SC2086
"$EMU" run --name "${NAME}u" --nodes 2 --ranks-per-node 3 --rate 0 -- -x MOEPERF_TEST_GROUPS=1 \
    "$BIN/moeperf-layer" --hidden 64 --ffn 32 --experts 12 --topk 4 --layout tp2ep3 --batch 24 \
    --routing zipf:1.2 --dedup node --overlap 1,2 --iters 1 --warmup 0 --check --quiet \
    --timeout 120 --out "$TMP/uneven" >/dev/null 2>"$TMP/u.err" ||
    fail "node's phases on unequal nodes exit $?: $(cat "$TMP/u.err")"
whole='exchanges on ep \(3 ranks\) [1-9][0-9]*, ep-intra-node \(0 ranks\) 0, ep-inter-node \(0 ranks\) 0$'
n=$(grep -cE "$whole" "$TMP/u.err" || true)
[ "$n" = 6 ] ||
    fail "unequal nodes: $n of 6 ranks ran node's phases over the whole EP group: $(cat "$TMP/u.err")"
col "$TMP/uneven/layer.csv" check_error | awk '{ if ($1 == "" || $1 > 1e-5) bad = 1 } END { exit bad }' ||
    fail "unequal nodes: check_error $(col "$TMP/uneven/layer.csv" check_error | tr '\n' ' ')"

# moeperf-a2a --pattern moe across the nodes, one draw: rank's and node's largest per-rank send
# (node: both phases, the inter-node rows and the intra-node ones) is the model layer's largest
# dispatch bytes of the same draw, metadata included; both below pair; node cut into 2 and 3
# chunks (--overlap) sends the same bytes, measured and modelled
a2aw="--experts 16 --topk 4 --hidden 64 --batch 24 --routing zipf:1.2 --dedup pair,rank,node
    --iters 1 --warmup 0 --quiet"
# shellcheck disable=SC2086
"$EMU" run --name "$NAME" -- "$BIN/moeperf-a2a" --pattern moe $a2aw --timeout 60 \
    --out "$TMP/a2a" >/dev/null 2>"$TMP/a.err" || fail "moeperf-a2a across nodes exit $?: $(cat "$TMP/a.err")"
# shellcheck disable=SC2086
"$BIN/moeperf-layer" --backend model --comm model --cluster cpu-host --world 4 --layout tp1ep4 \
    --shared 0 $a2aw --out "$TMP/a2am" || fail "modelled layer of the a2a points exit $?"
a2ao="--pattern moe ${a2aw/pair,rank,node/node} --overlap 2,3"
# shellcheck disable=SC2086
"$EMU" run --name "$NAME" -- "$BIN/moeperf-a2a" $a2ao --timeout 60 --out "$TMP/a2ao" >/dev/null \
    2>"$TMP/a.err" || fail "moeperf-a2a --overlap across nodes exit $?: $(cat "$TMP/a.err")"
# shellcheck disable=SC2086
"$BIN/moeperf-a2a" --backend model --comm model --cluster cpu-host --world 4 $a2ao \
    --out "$TMP/a2aom" >/dev/null || fail "modelled moeperf-a2a --overlap exit $?"
python3 - "$TMP/a2a/a2a.csv" "$TMP/a2am/layer_ranks.csv" "$TMP/a2ao/a2a.csv" \
    "$TMP/a2aom/a2a.csv" <<'PY' || fail "moeperf-a2a across nodes"
import csv, sys
a2a = {r["dedup"]: float(r["bytes_per_rank"]) for r in csv.DictReader(open(sys.argv[1]))}
for f in sys.argv[3:5]:
    chunked = {r["overlap"]: float(r["bytes_per_rank"]) for r in csv.DictReader(open(f))}
    assert chunked == {"2": a2a["node"], "3": a2a["node"]}, (f, chunked, a2a["node"])
most = {}
for r in csv.DictReader(open(sys.argv[2])):
    sent = float(r["dispatch_bytes_intranode"]) + float(r["dispatch_bytes_internode"])
    most[r["dedup"]] = max(most.get(r["dedup"], 0), sent)
assert a2a.keys() == {"pair", "rank", "node"}, a2a
for m in ("rank", "node"):
    assert a2a[m] == most[m] > 0, (m, a2a[m], most[m])
assert a2a["rank"] < a2a["pair"] and a2a["node"] != a2a["rank"], a2a
print("a2a bytes_per_rank", a2a, "= the model's largest dispatch bytes")
PY

# padded slots deduplicated per rank and per node across the nodes
psweep="--hidden 64 --ffn 32 --experts 16 --topk 4 --shared 1 --layout tp1ep4,tp2ep2 --batch 24,40
    --routing zipf:1.2 --placement contiguous,eplb:4 --dispatch padded,padded:0.25 --dedup rank,node
    --iters 2 --warmup 1 --seed 3 --quiet --no-flush-cache"
# shellcheck disable=SC2086
"$EMU" run --name "$NAME" -- "$BIN/moeperf-layer" $psweep --check --timeout 120 \
    --out "$TMP/pmeasured" >/dev/null 2>"$TMP/m.err" || fail "measured padded sweep exit $?: $(cat "$TMP/m.err")"
# shellcheck disable=SC2086
"$BIN/moeperf-layer" --backend model --comm model --cluster cpu-host --world 4 $psweep \
    --out "$TMP/pmodelled" || fail "modelled padded sweep exit $?"
python3 - "$TMP/pmeasured" "$TMP/pmodelled" <<'PY' || fail "measured and modelled padded slots disagree"
import csv, sys
key = ["layout", "routing", "placement", "dispatch", "dedup", "batch"]
def load(d, name, extra):
    return {tuple(r[k] for k in key + extra): r for r in csv.DictReader(open(f"{d}/{name}"))}
m, v = (load(d, "layer_ranks.csv", ["rank"]) for d in sys.argv[1:3])
assert m.keys() == v.keys() and len(m) == 128, len(m)
for k in m:
    for c in ("rows", "ffn_rows", "bytes_sent", "dispatch_bytes_internode", "combine_bytes_internode"):
        assert m[k][c] == v[k][c], (k, c, m[k][c], v[k][c])
m, v = (load(d, "layer.csv", []) for d in sys.argv[1:3])
inter = {}
for k in m:
    assert float(m[k]["check_error"]) <= 1e-5, (k, m[k]["check_error"])
    assert m[k]["drop_rate"] == v[k]["drop_rate"], (k, m[k]["drop_rate"], v[k]["drop_rate"])
    assert (float(m[k]["drop_rate"]) == 0) == (k[3] == "padded") or k[3] != "padded", k
    inter.setdefault(k[:4] + k[5:], {})[k[4]] = float(m[k]["bytes_internode"])
assert any(float(m[k]["drop_rate"]) > 0 for k in m if k[3] == "padded:0.25"), "no drops"
for k, b in inter.items():
    assert 0 < b["node"] <= b["rank"], (k, b)
    assert b["node"] < b["rank"] or k[0] == "tp2ep2", (k, b)  # tp2ep2: one EP rank per node
print(len(m), "padded points across nodes agree with the model")
PY
"$EMU" down --name "$NAME" >/dev/null 2>&1
}
if checks_tier; then counts; fi

# ---- 2. the model calibrated on pair predicts rank and node ----
timing_study "the dedup modes' prediction" || { echo PASS; exit 0; }
# deepseek-v3's routing scaled down (top-8 of 32 experts, 1 shared) on a link slow enough that the
# exchanges dominate from batch 64 on; the profile's inter-node rate is the link's share of a rank
# (200 Mbit/s = 25 MB/s per node, 2 ranks), a hardware fact calibration keeps
printf 'base = cpu-host\nname = emu200\ninter_bw = 12.5e6\n' >"$TMP/base.ini"
W="--model deepseek-v3 --hidden 512 --ffn 256 --experts 32 --topk 8 --shared 1 --layout tp1ep4
   --batch 8,16,32,64,128,256 --routing uniform --iters 7 --warmup 2 --no-flush-cache --quiet"
errors= widths=
for attempt in 1 2 3; do
    for mode in pair rank node; do
        rm -rf "$TMP/$mode"
        # shellcheck disable=SC2086
        "$EMU" run --name "$NAME${mode:0:1}" --nodes 2 --ranks-per-node 2 --rate 200mbit -- \
            "$BIN/moeperf-layer" $W --dedup $mode --out "$TMP/$mode" >/dev/null 2>"$TMP/run.err" ||
            fail "the $mode sweep exited $?: $(cat "$TMP/run.err")"
    done
    "$BUILD/planner/moeperf-plan" --calibrate --cluster "$TMP/base.ini" --out "$TMP/fit.ini" \
        "$TMP/pair" >"$TMP/fit.out" || fail "calibrate exit $?"
    "$BUILD/planner/moeperf-plan" --validate --cluster "$TMP/fit.ini" "$TMP/rank" "$TMP/node" \
        >"$TMP/validate.out" || fail "validate exit $?"
    cat "$TMP/validate.out"
    # the median absolute layer_us error per mode, the larger of the two
    worst=$(awk '/dedup:(rank|node) batch/ { e = $NF; sub(/%/, "", e); e += 0; m = $0
                   sub(/.*dedup:/, "", m); sub(/ .*/, "", m); err[m, ++n[m]] = e < 0 ? -e : e }
                 END { w = -1
                       for (m in n) { k = n[m]
                           for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++)
                               if (err[m, j] < err[m, i]) { t = err[m, i]; err[m, i] = err[m, j]; err[m, j] = t }
                           med = k % 2 ? err[m, (k + 1) / 2] : (err[m, k / 2] + err[m, k / 2 + 1]) / 2
                           printf "%s: median error %.1f%% over %d batches\n", m, med, k > "/dev/stderr"
                           if (k != 6) { print "bad"; exit }
                           if (med > w) w = med }
                       if (length(n) != 2) { print "bad"; exit }
                       print w }' "$TMP/validate.out")
    [ "$worst" != bad ] || fail "validate did not list 6 batches of each of rank and node"
    # how sure the measurements themselves are: the median over the three runs' points of the
    # width of each median's 95 % confidence interval, in % of the median (docs/METRICS.md); the
    # prediction is judged against the interval: within 25 % of a value inside it, 25 % plus half
    # the width of the median
    noise=$(cat "$TMP"/pair/layer.csv "$TMP"/rank/layer.csv "$TMP"/node/layer.csv | awk -F, '
        $1 == "source" { for (i = 1; i <= NF; i++) c[$i] = i; next }
        { w[++n] = 100 * ($c["layer_ci_hi_us"] - $c["layer_ci_lo_us"]) / $c["layer_us"] }
        END { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (w[j] < w[i]) { t = w[i]; w[i] = w[j]; w[j] = t }
              printf "%.0f", n % 2 ? w[(n + 1) / 2] : (w[n / 2] + w[n / 2 + 1]) / 2 }')
    if awk -v w="$worst" -v n="$noise" 'BEGIN { exit !(w <= 25 + n / 2) }'; then
        echo "median error $worst % within 25 % + half the measured medians' 95 % intervals ($noise % wide)"
        echo PASS
        exit 0
    fi
    errors="$errors $worst"
    widths="$widths $noise"
    echo "attempt $attempt missed (median error $worst %, the measured medians' 95 % intervals" \
        "$noise % wide); measuring again"
done

# three misses that moved by more than the 25 % judged: the machine's load decided, not the model
spread=$(echo "$errors" | awk '{ lo = hi = $1; for (i = 2; i <= NF; i++) { if ($i < lo) lo = $i; if ($i > hi) hi = $i }
                                 print hi - lo }')
awk -v s="$spread" 'BEGIN { exit !(s > 25) }' &&
    skip "the machine is too noisy to judge a 25 % prediction: the median error moved by" \
        "$spread points between attempts (${errors# } %)"
fail "the pair-calibrated profile missed rank or node by more than 25% (plus half the measured" \
    "medians' 95 % intervals:${widths} % wide) in three attempts (median errors ${errors# } %)"
