#!/usr/bin/env bash
# rank_samples.sh - layer_rank_samples.csv, every rank's record of every timed iteration, agrees
# with the summaries written from the same numbers: for every point the median over iterations of
# each rank's column is its layer_ranks.csv cell, and per iteration the maximum over ranks of each
# phase (and of L_r) is layer_samples.csv's, and its waits sum to wait_us and to wait_ratio; on 2
# measured ranks and on 4 modelled ones (pipelined
# and --dedup node points among them); wait_ratio is 0 for identical work and the straggler's
# share under --straggle; --no-rank-samples leaves the file out; --resume keeps it.
. "$(dirname "$0")/lib.sh"
LAYER=$BIN/moeperf-layer
W="--experts 8 --topk 2 --shared 1 --hidden 64 --ffn 64 --batch 4,16 --iters 5 --warmup 1 --quiet"
mpi 2 "$LAYER" $W --routing uniform,hot:2:10 --placement contiguous,replicate-hot:2 \
    --out "$TMP/measured" || fail "measured run exit $?"
"$LAYER" --backend model --comm model --cluster h100-ndr --world 4 $W --layout tp1ep4,tp2ep2 \
    --routing zipf:1.2 --overlap 1,2 --dedup pair,node --out "$TMP/modelled" ||
    fail "modelled run exit $?"

check() {
    python3 - "$1" "$2" "$3" <<'PY' || fail "$1: layer_rank_samples.csv disagrees with the summaries"
import csv, math, sys
d, ranks, host = sys.argv[1], int(sys.argv[2]), sys.argv[3]
key = ["layout", "routing", "placement", "overlap", "dedup", "batch"]
def load(name):
    return list(csv.DictReader(open(f"{d}/{name}", newline="")))
samples, per_rank, per_iter = load("layer_rank_samples.csv"), load("layer_ranks.csv"), load("layer_samples.csv")
points = load("layer.csv")
iters = int(points[0]["iters"])
assert len(samples) == len(points) * iters * ranks, (len(samples), len(points), iters, ranks)
cols = ["route_us", "notify_us", "dispatch_us", "ffn_us", "tp_reduce_us", "combine_us", "layer_us",
        "start_skew_us", "tokens", "rows", "ffn_rows", "bytes_sent"]
group = {}
for r in samples:
    group.setdefault((tuple(r[k] for k in key), r["rank"]), []).append(r)
    assert r["host"] == host or (host == "*" and r["host"]), r["host"]
cells = 0
for row in per_rank:  # the nearest-rank median over iterations is layer_ranks.csv's cell
    got = group[(tuple(row[k] for k in key), row["rank"])]
    assert sorted(int(r["iter"]) for r in got) == list(range(iters))
    assert all(r["node"] == row["node"] and r["ep_rank"] == row["ep_rank"] for r in got)
    for c in cols:
        v = sorted(got, key=lambda r: float(r[c]))[math.ceil(len(got) / 2) - 1][c]
        assert v == row[c], (row["layout"], row["batch"], row["rank"], c, v, row[c])
        cells += 1
maxed = {"route_us": "route_us", "notify_us": "notify_us", "dispatch_us": "dispatch_us",
         "ffn_us": "ffn_us", "tp_reduce_us": "tp_reduce_us", "combine_us": "combine_us",
         "layer_us": "layer_us"}
by_iter = {}
for r in samples:
    by_iter.setdefault((tuple(r[k] for k in key), r["iter"]), []).append(r)
for row in per_iter:  # the maximum over ranks, per iteration, is layer_samples.csv's
    got = by_iter[(tuple(row[k] for k in key), row["iter"])]
    assert len(got) == ranks
    for c, s in maxed.items():
        assert max(float(r[c]) for r in got) == float(row[s]), (row["layout"], row["iter"], c)
        cells += 1
    # the waits: each at most its phase, wait_us their sum, Σ wait_us / (N · layer_us) the
    # iteration's wait_ratio (docs/METRICS.md, "Who waits for whom")
    for r in got:
        parts = [float(r[p + "_wait_us"]) for p in ("notify", "dispatch", "tp_reduce", "combine")]
        for p, w in zip(("notify", "dispatch", "tp_reduce", "combine"), parts):
            assert 0 <= w <= float(r[p + "_us"]) * (1 + 1e-6) + 1e-9, (p, w, r[p + "_us"])
        assert abs(sum(parts) - float(r["wait_us"])) <= 1e-4 * max(1, float(r["wait_us"])), r
    L = float(row["layer_us"])
    if L > 0:
        ratio = sum(float(r["wait_us"]) for r in got) / (ranks * L)
        assert abs(ratio - float(row["wait_ratio"])) <= 1e-5, (ratio, row["wait_ratio"])
        cells += 1
print(f"{d}: {len(samples)} rank samples, {cells} cells agree")
PY
}
check "$TMP/measured" 2 "$(hostname)"
check "$TMP/modelled" 4 ""

# wait_ratio (docs/METRICS.md): 0 when every rank does identical work (4 experts, top-4: every
# token on every rank), and (N − 1)·D / (N·layer_us) with --straggle 1:D on the model, every other
# rank waiting the delay once; recomputed here from the per-rank samples too
SAME="--backend model --comm model --cluster h100-ndr --world 4 --hidden 1024 --ffn 512 --experts 4
    --topk 4 --shared 0 --batch 64,512 --iters 4 --quiet"
# shellcheck disable=SC2086
"$LAYER" $SAME --out "$TMP/same" || fail "identical-work run exit $?"
# shellcheck disable=SC2086
"$LAYER" $SAME --straggle 1:5000 --out "$TMP/straggle" || fail "--straggle run exit $?"
python3 - "$TMP/same" "$TMP/straggle" <<'PY' || fail "wait_ratio"
import csv, sys
for d, delay in zip(sys.argv[1:], (0, 5000)):
    for r in csv.DictReader(open(f"{d}/layer.csv")):
        want = 3 * delay / (4 * float(r["layer_us"]))
        assert abs(float(r["wait_ratio"]) - want) <= 1e-5, (d, r["batch"], r["wait_ratio"], want)
    for r in csv.DictReader(open(f"{d}/layer_samples.csv")):
        assert abs(float(r["wait_ratio"]) - 3 * delay / (4 * float(r["layer_us"]))) <= 1e-5, r["wait_ratio"]
    # from the per-rank samples: tp = 1, so every collective's group is the whole world
    rows = list(csv.DictReader(open(f"{d}/layer_rank_samples.csv")))
    by = {}
    for r in rows:
        by.setdefault((r["batch"], r["iter"]), []).append(r)
    phases = ["route_us", "notify_us", "dispatch_us", "ffn_us", "tp_reduce_us", "combine_us"]
    for (b, it), rs in by.items():
        wait = 0
        for p in ("notify_us", "dispatch_us", "combine_us"):
            start = [sum(float(r[q]) for q in phases[:phases.index(p)]) for r in rs]
            wait += sum(min(float(r[p]), max(0, max(start) - s)) for r, s in zip(rs, start))
        layer = max(float(r["layer_us"]) for r in rs)
        want = 3 * delay / (4 * layer)
        assert abs(wait / (4 * layer) - want) <= 1e-4 * max(want, 1e-3), (d, b, it, wait, want)
    print(f"{d}: wait_ratio {'0' if not delay else '(N-1)D/(N layer)'} on every point and iteration")
PY

# --no-rank-samples: the other files as before, this one left out
mpi 2 "$LAYER" $W --no-rank-samples --out "$TMP/off" || fail "--no-rank-samples exit $?"
[ -e "$TMP/off/layer_rank_samples.csv" ] && fail "--no-rank-samples still wrote layer_rank_samples.csv"
[ "$(rows "$TMP/off/layer_ranks.csv")" -eq 4 ] || fail "--no-rank-samples: layer_ranks.csv rows"
# --resume: a point already done is not written again, a new one is
mpi 2 "$LAYER" $W --batch 4,16,32 --routing uniform,hot:2:10 --placement contiguous,replicate-hot:2 \
    --resume --out "$TMP/measured" >/dev/null 2>&1 ||
    fail "--resume exit $?"
[ "$(rows "$TMP/measured/layer_rank_samples.csv")" -eq $((12 * 5 * 2)) ] ||
    fail "--resume: $(rows "$TMP/measured/layer_rank_samples.csv") rank samples, expected 120"
check "$TMP/measured" 2 "$(hostname)"
echo PASS
