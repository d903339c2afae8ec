#!/usr/bin/env bash
# layer_check.sh - moeperf-layer --check passes (relative error ≤ 1e-5 against the single-process
# reference) for every routing, placement and layout on 1, 2 and 4 ranks, expert counts that do
# not divide the EP size included.
. "$(dirname "$0")/lib.sh"

# trace files in both documented formats
printf '# per-expert counts\nexpert,count\n0,50\n1,5\n2,20\n3,1\n4,9\n5,9\n7,3\n9,12\n' >"$TMP/counts.csv"
{
    echo "token,expert0,expert1,expert2"
    for t in $(seq 0 40); do echo "$t,$((t % 12)),$(((t * 5 + 1) % 12)),$(((t * 7 + 3) % 12 == t % 12 ? (t + 6) % 12 : (t * 7 + 3) % 12))"; done
} >"$TMP/tokens.csv"
# make every row's three experts distinct
awk -F, 'NR == 1 || ($2 != $3 && $3 != $4 && $2 != $4)' "$TMP/tokens.csv" >"$TMP/t.csv" && mv "$TMP/t.csv" "$TMP/tokens.csv"

ROUTINGS="uniform,zipf:1.2,hot:2:15,lognormal:1,gate,gate:0.5,trace:$TMP/counts.csv,trace:$TMP/tokens.csv"
PLACEMENTS="contiguous,round-robin,replicate-hot:2"
COMMON="--model qwen3-30b-a3b --experts 12 --topk 3 --shared 1 --hidden 64 --ffn 128 --batch 1,5,32 --warmup 1 --iters 2 --check --quiet"

count() { echo "$1" | tr ',' '\n' | wc -l; }

run() { # run NP LAYOUTS ROUTINGS [extra flags...]
    np=$1 layouts=$2 routings=$3
    shift 3
    nrun=$((${nrun:-0} + 1)) # a directory of its own for each run
    out="$TMP/run$nrun-np$np-$layouts"
    mpi "$np" "$BIN/moeperf-layer" $COMMON --layout "$layouts" --routing "$routings" \
        --placement "$PLACEMENTS" --out "$out" "$@" || fail "np $np $layouts $*: exit $?"
    want=$(($(count "$layouts") * $(count "$routings") * $(count "$PLACEMENTS") * 3))
    [ "$(rows "$out/layer.csv")" -eq "$want" ] || fail "np $np: $(rows "$out/layer.csv") rows, expected $want"
    col "$out/layer.csv" check_error | awk -v np="$np" '
        $1 == "" || $1 + 0 > 1e-5 { print "FAIL: np " np ": check_error " $1; bad = 1 }
        { if ($1 + 0 > max) max = $1 + 0 }
        END { printf "np %s: worst relative error %.2e\n", np, max; exit bad }'
}

run 1 tp1ep1 "$ROUTINGS"
run 2 tp1ep2,tp2ep1 "$ROUTINGS"
run 4 tp1ep4,tp2ep2,tp4ep1 "$ROUTINGS"
# 10 experts on 4 ranks hold 3,3,2,2; 3 experts on 4 ranks leave one rank without any
run 4 tp1ep4 "uniform,hot:2:15,gate" --experts 10
run 4 tp1ep4 "uniform,zipf:1" --experts 3
echo "PASS"
