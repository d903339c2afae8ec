#!/usr/bin/env bash
# dedup_measured.sh - --dedup rank and node on the measured path (cpu + mpi): the layer's output
# matches the reference (--check) on 2 and 4 ranks, layouts tp1ep2, tp1ep4 and tp2ep2, plain,
# replicated and EPLB placements, uniform, skewed and gate routing; the experts run the same rows
# as with --dedup pair while rank sends fewer bytes somewhere, and node on one host is rank (every
# rank on the token's node: no relay); a padded or pipelined dispatch is refused naming the flags
# (tests/integration/dedup_nodes.sh runs node's relays across emulated nodes).
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

# refused: deduplication with the padded dispatch or pipelined
# shellcheck disable=SC2086
refused mpi 2 "$LAYER" $shape --batch 8 --dedup rank --dispatch padded
grep -q -- "--dispatch padded" "$TMP/refused.err" || fail "padded refusal: $(cat "$TMP/refused.err")"
# shellcheck disable=SC2086
refused mpi 2 "$LAYER" $shape --batch 8 --dedup node --overlap 2
grep -q -- "--overlap 2" "$TMP/refused.err" || fail "overlap refusal: $(cat "$TMP/refused.err")"
echo PASS
