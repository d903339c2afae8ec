#!/usr/bin/env bash
# group_limit.sh - --group-limit: moeperf-layer --check passes with tokens limited to M groups for
# sampled and gate routings on 2 ranks; the group_limit column holds the entry; "M" alone on one
# node cannot bind and routes as off; moeperf-a2a --pattern moe and the model follow it; bad
# entries are refused with exit 2.
. "$(dirname "$0")/lib.sh"

printf 'expert,count\n0,50\n1,5\n2,20\n3,1\n4,9\n5,9\n6,4\n7,3\n8,2\n9,12\n10,6\n11,8\n' >"$TMP/counts.csv"
printf 'token,expert0,expert1,expert2\n0,0,5,7\n1,3,4,11\n' >"$TMP/tokens.csv"
COMMON="--model qwen3-30b-a3b --experts 12 --topk 3 --shared 1 --hidden 64 --ffn 128 --batch 5,32
    --warmup 1 --iters 2 --quiet"

# --check: the reference applies the same limit (sampled routings and the gate)
# shellcheck disable=SC2086
mpi 2 "$BIN/moeperf-layer" $COMMON --check --routing "zipf:1.2,hot:2:15,gate,gate:0.5,trace:$TMP/counts.csv" \
    --group-limit 2:1,4:2,off --out "$TMP/check" || fail "--check with --group-limit: exit $?"
[ "$(rows "$TMP/check/layer.csv")" -eq 30 ] || fail "expected 30 points, got $(rows "$TMP/check/layer.csv")"
col "$TMP/check/layer.csv" check_error | awk '$1 == "" || $1 + 0 > 1e-5 { print "FAIL: check_error " $1; bad = 1 }
    END { exit bad }' || fail "--check error above 1e-5"
for f in layer.csv layer_ranks.csv layer_samples.csv; do
    [ "$(col "$TMP/check/$f" group_limit | sort -u | tr '\n' ' ')" = "2:1 4:2 off " ] ||
        fail "$f: group_limit column holds $(col "$TMP/check/$f" group_limit | sort -u | tr '\n' ' ')"
done

# "1" alone: 2 ranks on one node span 1 node, so the limit cannot bind: the same counts as off
# shellcheck disable=SC2086
mpi 2 "$BIN/moeperf-layer" $COMMON --routing zipf:1.2 --group-limit off,1 --out "$TMP/nodes" \
    2>"$TMP/nodes.err" || fail "--group-limit 1: exit $?"
grep -q "span 1 node(s)" "$TMP/nodes.err" || fail "no note that --group-limit 1 cannot bind: $(cat "$TMP/nodes.err")"
python3 - "$TMP/nodes/layer_ranks.csv" <<'PY' || fail "--group-limit 1 on one node changed the counts"
import csv, sys
by = {}
for r in csv.DictReader(open(sys.argv[1], newline="")):
    by.setdefault(r["group_limit"], []).append([r[c] for c in ("batch", "rank", "tokens", "rows", "bytes_sent")])
sys.exit(0 if by["off"] == by["1"] and by["off"] else 1)
PY

# moeperf-a2a --pattern moe takes it into its key
mpi 2 "$BIN/moeperf-a2a" --pattern moe --experts 12 --topk 3 --hidden 64 --batch 16 --iters 2 \
    --warmup 0 --quiet --routing zipf:1.2 --group-limit off,4:1 --out "$TMP/a2a" || fail "a2a exit $?"
[ "$(col "$TMP/a2a/a2a.csv" group_limit | tr '\n' ' ')" = "off 4:1 " ] || fail "a2a.csv group_limit column"

# the model draws the same limited routing: with one rank's experts per group (16 groups of 4 on
# ep16, K = 4) and M = 1 every token's rows go to one rank, so a step's rows are far less even
"$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --world 16 --experts 64 \
    --topk 4 --batch 16 --iters 8 --quiet --routing uniform,gate --group-limit off,16:1,1 \
    --out "$TMP/model" 2>/dev/null || fail "model exit $?"
python3 - "$TMP/model/layer.csv" <<'PY' || fail "the model does not follow --group-limit"
import csv, sys
imb = {(r["routing"], r["group_limit"]): float(r["load_imbalance"]) for r in csv.DictReader(open(sys.argv[1], newline=""))}
print(imb)
ok = all(imb[(rt, "16:1")] > 1.3 * imb[(rt, "off")] for rt in ("uniform", "gate"))
sys.exit(0 if ok else 1)
PY

# refusals: G not dividing E, M > G, M = 0, nonsense, M·E/G < K (6:1: 2 experts < top-3), a per-token
# trace
# shellcheck disable=SC2086
for bad in 5:1 2:3 4:0 x 6:1; do
    refused "$BIN/moeperf-layer" $COMMON --group-limit "$bad"
    grep -q -- "--group-limit" "$TMP/refused.err" || fail "$bad: message does not name --group-limit"
done
# shellcheck disable=SC2086
refused "$BIN/moeperf-layer" $COMMON --routing "trace:$TMP/tokens.csv" --group-limit 2:1
grep -q -- "--routing" "$TMP/refused.err" || fail "per-token trace: message does not name --routing"
refused "$BIN/moeperf-a2a" --pattern moe --experts 12 --topk 3 --group-limit 5:1
echo PASS
