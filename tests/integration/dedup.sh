#!/usr/bin/env bash
# dedup.sh - --dedup on the model: a DeepSeek-V3-shaped layer on two 8-GPU nodes moves fewer
# inter-node bytes deduplicated per rank than per pair, and fewer again per node, with the FFN rows
# unchanged; the combinations not modelled yet are refused naming the flags
# (tests/integration/dedup_measured.sh and dedup_nodes.sh check the measured modes);
# moeperf-a2a --pattern moe --dedup rank sends the rank-deduplicated rows, node on one host the
# same (no relay: tests/integration/dedup_nodes.sh times its two hops across nodes).
. "$(dirname "$0")/lib.sh"
LAYER=$BIN/moeperf-layer
model="--backend model --comm model --cluster h100-ndr --world 16 --model deepseek-v3 --layout tp1ep16"

# shellcheck disable=SC2086
"$LAYER" $model --batch 64,512 --dedup pair,rank,node --iters 4 --quiet --out "$TMP/d" ||
    fail "modelled --dedup sweep exit $?"
[ "$(col "$TMP/d/layer.csv" dedup | tr '\n' ' ')" = "pair pair rank rank node node " ] ||
    fail "dedup column: $(col "$TMP/d/layer.csv" dedup | tr '\n' ' ')"
python3 - "$TMP/d" <<'PY' || fail "bytes_internode does not fall pair > rank > node"
import csv, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(d + "/layer.csv")))
for b in ("64", "512"):
    v = {r["dedup"]: float(r["bytes_internode"]) for r in rows if r["batch"] == b}
    assert v["pair"] > v["rank"] > v["node"] > 0, (b, v)
    print("batch", b, "bytes_internode", v)
ffn = {}
for r in csv.DictReader(open(d + "/layer_ranks.csv")):
    ffn.setdefault((r["batch"], r["rank"]), set()).add(r["ffn_rows"])
assert all(len(s) == 1 for s in ffn.values()), "the FFN rows depend on --dedup"
PY

"$LAYER" --hidden 32 --ffn 16 --experts 4 --topk 2 --batch 8 --iters 1 --quiet \
    --dedup pair,rank,node --out "$TMP/m" || fail "measured --dedup pair,rank,node exit $?"
[ "$(col "$TMP/m/layer.csv" dedup | tr '\n' ' ')" = "pair rank node " ] || fail "measured dedup cells"
# padded slots and pipelined deduplication are modelled (model_parity and dedup_nodes check
# their counts); padded pipelined and an unknown word are refused
# shellcheck disable=SC2086
"$LAYER" $model --batch 64 --dedup rank --dispatch padded,padded:0.5 --quiet ||
    fail "modelled --dedup rank --dispatch padded exit $?"
# shellcheck disable=SC2086
refused "$LAYER" $model --batch 64 --dedup node --dispatch padded --overlap 2
grep -q -- "--overlap 2" "$TMP/refused.err" || fail "padded refusal names no --overlap"
# pipelined over chunks of tokens: the same rows and bytes as unpipelined, an overlap efficiency
# shellcheck disable=SC2086
"$LAYER" $model --batch 64,512 --dedup rank,node --overlap 1,2 --iters 4 --quiet --out "$TMP/o" ||
    fail "modelled --dedup rank,node --overlap 1,2 exit $?"
python3 - "$TMP/o/layer.csv" <<'PY' || fail "pipelined dedup against unpipelined"
import csv, sys
by = {}
for r in csv.DictReader(open(sys.argv[1])):
    by.setdefault((r["dedup"], r["batch"]), {})[r["overlap"]] = r
assert len(by) == 4, by.keys()
for k, v in by.items():
    for c in ("bytes_internode", "bytes_intranode", "bytes_rank_max", "load_imbalance"):
        assert v["1"][c] == v["2"][c], (k, c, v["1"][c], v["2"][c])
    assert v["1"]["overlap_efficiency"] == "" and float(v["2"]["overlap_efficiency"]) == float(v["2"]["overlap_efficiency"]), k
PY
# shellcheck disable=SC2086
refused "$LAYER" $model --batch 64 --dedup token

# moeperf-a2a --pattern moe follows --dedup rank: the rows core/layer/dedup.c counts, each with its top-K
# ids and weights. With experts = topk = 2 on two ranks every token has one pair on each rank: per
# pair a rank sends 2 rows per own token (self included), per rank 1 row (to the other rank) of
# H·elem + 2·(4 + 4) bytes, exactly
A2A=$BIN/moeperf-a2a
mpi 2 "$A2A" --pattern moe --experts 2 --topk 2 --hidden 64 --batch 64 --dedup pair,rank \
    --iters 2 --warmup 1 --quiet --out "$TMP/a" || fail "moeperf-a2a --dedup exit $?"
[ "$(col "$TMP/a/a2a.csv" dedup | tr '\n' ' ')" = "pair rank " ] ||
    fail "a2a dedup column: $(col "$TMP/a/a2a.csv" dedup | tr '\n' ' ')"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { v[$c["dedup"]] = $c["bytes_per_rank"] }
    END { own = 64 / 2; row = v["pair"] / (own * 2); want = own * (row + 2 * 8)
          if (row != int(row) || row < 64 || v["rank"] != want) { print "FAIL: rank bytes_per_rank " v["rank"] ", expected " want " (pair " v["pair"] ")"; exit 1 }
          print "a2a bytes_per_rank: pair " v["pair"] ", rank " v["rank"] }' "$TMP/a/a2a.csv" || exit 1
# top-4 of 8 experts on two ranks: tokens with several experts on the other rank send it one row,
# so at most one row of H·elem + 4·(4 + 4) bytes per own token, and fewer bytes than per pair
row=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["dedup"] == "pair" { print $c["bytes_per_rank"] / 64 }' "$TMP/a/a2a.csv")
mpi 2 "$A2A" --pattern moe --experts 8 --topk 4 --hidden 64 --batch 16,64 --dedup pair,rank \
    --iters 2 --warmup 1 --quiet --out "$TMP/a8" || fail "moeperf-a2a --dedup top-4 exit $?"
awk -F, -v row="$row" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { v[$c["batch"], $c["dedup"]] = $c["bytes_per_rank"]; n++ }
    END { if (n != 4) { print "FAIL: " n " rows"; exit 1 }
          for (b = 16; b <= 64; b *= 4) {
              if (!(v[b, "rank"] > 0 && v[b, "rank"] < v[b, "pair"])) { print "FAIL: batch " b ": rank " v[b, "rank"] " not below pair " v[b, "pair"]; exit 1 }
              if (v[b, "rank"] > b / 2 * (row + 4 * 8)) { print "FAIL: batch " b ": rank " v[b, "rank"] " bytes, more than one row per own token"; exit 1 } } }' \
    "$TMP/a8/a2a.csv" || exit 1
mpi 2 "$A2A" --bytes 1K --iters 2 --warmup 1 --quiet --out "$TMP/u" || fail "uniform a2a exit $?"
[ -z "$(col "$TMP/u/a2a.csv" dedup)" ] || fail "the uniform pattern has a dedup cell"
# node on one host: every serving rank is on the token's node, so no relay: rank's rows exactly
mpi 2 "$A2A" --pattern moe --experts 8 --topk 4 --hidden 64 --batch 16,64 --dedup rank,node \
    --iters 2 --warmup 1 --quiet --out "$TMP/an" || fail "moeperf-a2a --dedup node exit $?"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { v[$c["batch"], $c["dedup"]] = $c["bytes_per_rank"]; n++ }
    END { if (n != 4) { print "FAIL: " n " node rows"; exit 1 }
          for (b = 16; b <= 64; b *= 4)
              if (v[b, "node"] != v[b, "rank"] || v[b, "node"] <= 0) { print "FAIL: batch " b ": node " v[b, "node"] ", rank " v[b, "rank"]; exit 1 } }' \
    "$TMP/an/a2a.csv" || exit 1
# rank needs a routing
refused "$A2A" --bytes 1K --dedup rank
grep -q -- "--dedup rank" "$TMP/refused.err" || fail "the uniform refusal does not name --dedup rank"
echo PASS
