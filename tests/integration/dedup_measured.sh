#!/usr/bin/env bash
# dedup_measured.sh - --dedup rank and node on the measured path (cpu + mpi): the layer's output
# matches the reference (--check) on 2 and 4 ranks, layouts tp1ep2, tp1ep4 and tp2ep2, plain,
# replicated and EPLB placements, uniform, skewed and gate routing; the experts run the same rows
# as with --dedup pair while rank sends fewer bytes somewhere, and node on one host is rank (every
# rank on the token's node: no relay). With --dispatch padded, --dedup rank passes --check too,
# lossless and with a capacity that drops pairs, and every rank sends and gets back exactly one
# slot of rows per peer (metadata on the way out only); on one host node's slots are rank's.
# Pipelined (--overlap 2 and 3, chunks of
# tokens), rank and node pass --check and every rank runs the rows and sends the bytes of the
# unpipelined point. A padded dispatch that cannot be pipelined is refused naming the flags
# (tests/integration/dedup_nodes.sh runs node's relays, padded too, across emulated nodes).
. "$(dirname "$0")/lib.sh"
LAYER=$BIN/moeperf-layer
shape="--hidden 32 --ffn 16 --experts 8 --topk 3 --shared 1 --iters 1 --warmup 0 --quiet"
sweep="--batch 13,40 --placement contiguous,replicate-hot:2,eplb:4 --routing uniform,zipf:1.2,gate
    --dedup pair,rank,node --check --no-flush-cache"

# shellcheck disable=SC2086
mpi 2 "$LAYER" $shape $sweep --layout tp1ep2 --out "$TMP/r2" || fail "2-rank --dedup rank exit $?"
# shellcheck disable=SC2086
mpi 4 "$LAYER" $shape $sweep --layout tp1ep4,tp2ep2 --out "$TMP/r4" ||
    fail "4-rank --dedup rank exit $?"
python3 - "$TMP/r2" "$TMP/r4" <<'PY' || fail "the measured --dedup rank points"
import csv, sys
key = ["layout", "routing", "placement", "batch"]
for d in sys.argv[1:]:
    pts = list(csv.DictReader(open(d + "/layer.csv")))
    ranks = list(csv.DictReader(open(d + "/layer_ranks.csv")))
    n_rank = sum(p["dedup"] == "rank" for p in pts)
    assert n_rank == len(pts) // 3 and n_rank > 0, f"{d}: {n_rank} rank points of {len(pts)}"
    for p in pts:  # --check ran at every point and passed (the run exits 1 otherwise)
        assert float(p["check_error"]) <= 1e-5, p
    by = {}
    for r in ranks:
        by.setdefault(tuple(r[k] for k in key + ["rank"]), {})[r["dedup"]] = r
    saved = 0
    for k, v in by.items():
        pair, rank, node = v["pair"], v["rank"], v["node"]
        for c in ("tokens", "rows", "ffn_rows"):  # every pair still runs once, where it ran
            assert pair[c] == rank[c] == node[c], (k, c, pair[c], rank[c], node[c])
        assert rank["bytes_sent"] == node["bytes_sent"], (k, "one node: node is rank")
        saved += float(rank["bytes_sent"]) < float(pair["bytes_sent"])
    assert saved > 0, f"{d}: --dedup rank never sent fewer bytes than pair"
    print(d, len(pts), "points checked; rank sent fewer bytes than pair on", saved, "rank cells")
PY

# padded slots deduplicated per rank: --check with and without drops, and the slot bytes exactly
psweep="--batch 13,40 --placement contiguous,replicate-hot:2 --routing zipf:1.2,gate
    --dispatch padded,padded:0.25 --dedup rank --check --no-flush-cache"
# shellcheck disable=SC2086
mpi 4 "$LAYER" $shape $psweep --layout tp1ep4,tp2ep2 --out "$TMP/p4" ||
    fail "4-rank --dispatch padded --dedup rank exit $?"
python3 - "$TMP/p4" <<'PY' || fail "the measured padded --dedup rank points"
import csv, math, sys
d = sys.argv[1]
pts = list(csv.DictReader(open(d + "/layer.csv")))
assert len(pts) == 32, len(pts)
H, K, E = 32, 3, 8
row, meta = H * 4, K * 8  # fp32 rows on the cpu backend; an int32 id and a float weight per choice
for p in pts:
    assert float(p["check_error"]) <= 1e-5, p
assert any(float(p["drop_rate"]) > 0 for p in pts if p["dispatch"] == "padded:0.25"), "no drops"
assert all(float(p["drop_rate"]) == 0 for p in pts if p["dispatch"] == "padded"), "lossless dropped"
for r in csv.DictReader(open(d + "/layer_ranks.csv")):
    ep, batch, n = int(r["layout"].split("ep")[1]), int(r["batch"]), None
    n = -(-batch // ep)  # the most tokens a rank holds
    nl = (E + ep - 1) // ep + (2 if r["placement"] == "replicate-hot:2" else 0)
    cap = n
    if r["dispatch"] == "padded:0.25":  # max_local slots of the pair capacity, at most n
        cap = min(n, nl * max(1, math.ceil(n * K * 0.25 / E)))
    want = (ep - 1) * cap * (row + meta) + (ep - 1) * cap * row
    assert float(r["bytes_sent"]) == want, (r["layout"], r["placement"], r["dispatch"], batch,
                                            r["rank"], r["bytes_sent"], want)
print(len(pts), "padded --dedup rank points checked")
PY

# pipelined over chunks of tokens: --check, and the rows and bytes of the unpipelined point
osweep="--batch 13,40 --placement contiguous,eplb:4 --routing zipf:1.2,gate --dedup rank,node
    --overlap 1,2,3 --check --no-flush-cache"
# shellcheck disable=SC2086
mpi 4 "$LAYER" $shape $osweep --layout tp1ep4,tp2ep2 --out "$TMP/o4" ||
    fail "4-rank --dedup rank,node --overlap exit $?"
python3 - "$TMP/o4" <<'PY' || fail "the measured pipelined --dedup points"
import csv, sys
d = sys.argv[1]
pts = list(csv.DictReader(open(d + "/layer.csv")))
assert len(pts) == 96, len(pts)
for p in pts:
    assert float(p["check_error"]) <= 1e-5, p
    eff = p["overlap_efficiency"]
    assert (eff == "") == (p["overlap"] == "1"), (p["overlap"], eff)
by = {}
for r in csv.DictReader(open(d + "/layer_ranks.csv")):
    k = tuple(r[c] for c in ("layout", "routing", "placement", "dedup", "batch", "rank"))
    by.setdefault(k, {})[r["overlap"]] = r
for k, v in by.items():
    for c in ("tokens", "rows", "ffn_rows", "bytes_sent", "dispatch_bytes_intranode",
              "combine_bytes_intranode"):
        assert v["1"][c] == v["2"][c] == v["3"][c], (k, c, v["1"][c], v["2"][c], v["3"][c])
print(len(pts), "pipelined --dedup points checked")
PY

# refused: padded slots pipelined
# shellcheck disable=SC2086
refused mpi 2 "$LAYER" $shape --batch 8 --dedup node --dispatch padded --overlap 2
grep -q -- "--overlap 2" "$TMP/refused.err" || fail "padded refusal: $(cat "$TMP/refused.err")"
echo PASS
