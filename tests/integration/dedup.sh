#!/usr/bin/env bash
# dedup.sh - --dedup on the model: a DeepSeek-V3-shaped layer on two 8-GPU nodes moves fewer
# inter-node bytes deduplicated per rank than per pair, and fewer again per node, with the FFN rows
# unchanged; the combinations not modelled yet are refused naming the flags
# (tests/integration/dedup_measured.sh and dedup_nodes.sh check the measured modes).
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
# not modelled yet: with the padded dispatch, pipelined, or an unknown word
# shellcheck disable=SC2086
refused "$LAYER" $model --batch 64 --dedup rank --dispatch padded
grep -q -- "--dispatch padded" "$TMP/refused.err" || fail "padded refusal names no --dispatch"
# shellcheck disable=SC2086
refused "$LAYER" $model --batch 64 --dedup node --overlap 2
grep -q -- "--overlap 2" "$TMP/refused.err" || fail "overlap refusal names no --overlap"
# shellcheck disable=SC2086
refused "$LAYER" $model --batch 64 --dedup token
echo PASS
