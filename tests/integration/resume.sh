#!/usr/bin/env bash
# resume.sh - a sweep killed midway (SIGKILL to a rank) leaves every completed row valid, and
# --resume measures exactly the missing points, with samples only for points that have a row.
. "$(dirname "$0")/lib.sh"

OUT="$TMP/run"
ARGS="--experts 8 --topk 2 --shared 0 --hidden 512 --ffn 1024 --batch 1:256:x2 --routing uniform,hot:2:4 --iters 8 --warmup 1 --quiet --out $OUT"
POINTS=18 # 9 batches × 2 routings

mpi 2 "$BIN/moeperf-layer" $ARGS >/dev/null 2>&1 &
launcher=$!
for _ in $(seq 1 600); do # wait for 3 rows, at most 60 s
    [ -f "$OUT/layer.csv" ] && [ "$(rows "$OUT/layer.csv")" -ge 3 ] && break
    sleep 0.1
done
pkill -KILL -f "moeperf-layer.*$OUT" || true
wait "$launcher" && fail "the killed sweep exited 0"
done_rows=$(rows "$OUT/layer.csv")
echo "killed after $done_rows of $POINTS points"
[ "$done_rows" -ge 3 ] && [ "$done_rows" -lt "$POINTS" ] || fail "kill came at the wrong time ($done_rows rows)"

# every line of every file has the header's cell count (a cut last line is allowed only without
# a newline, which the resume drops)
for f in layer.csv layer_samples.csv layer_ranks.csv; do
    awk -F, 'NR == 1 { n = NF; next } NF != n { bad++ } END { exit bad > 0 }' "$OUT/$f" ||
        echo "note: $f has a cut last row"
done
awk -F, 'NR == 1 { n = NF; next } NF != n { exit 1 }' "$OUT/layer.csv" || fail "layer.csv has a broken row"

mpi 2 "$BIN/moeperf-layer" $ARGS --resume >/dev/null || fail "--resume exited $?"
[ "$(rows "$OUT/layer.csv")" -eq "$POINTS" ] || fail "$(rows "$OUT/layer.csv") rows after resume, expected $POINTS"
for f in layer.csv layer_samples.csv layer_ranks.csv; do
    awk -F, 'NR == 1 { n = NF; next } NF != n { exit 1 }' "$OUT/$f" || fail "$f has a broken row after resume"
done
# every point exactly once; samples: 8 per point; per-rank rows: 2 per point
# a point's key: the columns before tokens_per_rank (docs/CSV.md), wherever new key columns put it
nkey=$(($(head -1 "$OUT/layer.csv" | tr , '\n' | grep -nx tokens_per_rank | cut -d: -f1) - 1))
[ "$nkey" -gt 0 ] || fail "layer.csv has no tokens_per_rank column"
dups=$(cut -d, -f1-"$nkey" "$OUT/layer.csv" | sort | uniq -d | wc -l)
[ "$dups" -eq 0 ] || fail "$dups points measured twice"
[ "$(rows "$OUT/layer_samples.csv")" -eq $((POINTS * 8)) ] || fail "samples: $(rows "$OUT/layer_samples.csv") rows, expected $((POINTS * 8))"
[ "$(rows "$OUT/layer_ranks.csv")" -eq $((POINTS * 2)) ] || fail "ranks: $(rows "$OUT/layer_ranks.csv") rows"
# a second --resume has nothing left to do
mpi 2 "$BIN/moeperf-layer" $ARGS --resume >/dev/null || fail "second --resume exited $?"
[ "$(rows "$OUT/layer.csv")" -eq "$POINTS" ] || fail "second --resume added rows"
echo PASS
