#!/usr/bin/env bash
# faults.sh - faults on an emulated 2-node cluster (ci/emucluster) in the middle of a sweep:
#  - a rank killed with SIGKILL: mpirun ends the job at once and exits 137 (128 + 9: Open MPI
#    returns the status of the first process that failed, the killed one) naming the killed rank
#    and its node; the surviving rank, stopped by mpirun's SIGTERM, exits 1 naming itself and the
#    point it was in;
#  - the data link between the nodes taken down: the ranks' --timeout watchdog names the rank and
#    the point, the ranks exit 1, and so does mpirun, within --timeout plus a few seconds.
# Either way every completed row is intact and --resume (link back up) finishes the sweep. Nothing
# of the cluster is left afterwards. Skips (77) only where network namespaces cannot be created.
. "$(dirname "$0")/lib.sh"
export PATH="$PATH:/usr/sbin:/sbin"
EMU=$(cd "$(dirname "$0")/../.." && pwd)/ci/emucluster
NAME=ft$$
BATCHES=(1 2 4 8 16 32 64 128 256)
POINTS=${#BATCHES[@]}
ITERS=20
MODEL="--hidden 1024 --ffn 512 --experts 16 --topk 4 --shared 0 --batch 1:256:x2 --iters $ITERS --warmup 2 --quiet"

cleanup() {
    "$EMU" down --name "$NAME" >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

emu_up "$EMU" "$NAME" --nodes 2 --rate 200mbit

# sweep OUT TIMEOUT [ARGS...]: the sweep on the cluster, stdout and stderr into OUT.out / OUT.err
sweep() {
    out=$1 timeout=$2
    shift 2
    "$EMU" run --name "$NAME" -- "$BIN/moeperf-layer" $MODEL --timeout "$timeout" --out "$out" "$@" \
        >"$out.out" 2>"$out.err"
}

# wait_rows DIR N PID: until DIR/layer.csv has N data rows (60 s at most) while PID runs
wait_rows() {
    for _ in $(seq 1 600); do
        [ -f "$1/layer.csv" ] && [ "$(rows "$1/layer.csv")" -ge "$2" ] && return 0
        kill -0 "$3" 2>/dev/null || fail "the sweep ended before $2 rows: $(cat "$1.err")"
        sleep 0.1
    done
    fail "$1/layer.csv did not reach $2 rows in 60 s"
}

# intact DIR: every completed row is whole, the rows are the first points of the sweep in order, and
# each has its two per-rank rows; prints the number of rows
intact() {
    awk -F, 'NR == 1 { n = NF; next } NF != n { exit 1 }' "$1/layer.csv" || fail "$1/layer.csv has a broken row"
    awk -F, 'NR == 1 { n = NF; next } NF != n { exit 1 }' "$1/layer_ranks.csv" ||
        fail "$1/layer_ranks.csv has a broken row"
    [ "$(col "$1/layer.csv" batch | tr '\n' ' ')" = "$(printf '%s ' "${BATCHES[@]:0:$(rows "$1/layer.csv")}")" ] ||
        fail "$1/layer.csv does not hold the first points of the sweep in order"
    [ "$(rows "$1/layer_ranks.csv")" -eq $((2 * $(rows "$1/layer.csv"))) ] ||
        fail "$1/layer_ranks.csv: $(rows "$1/layer_ranks.csv") rows for $(rows "$1/layer.csv") points"
    rows "$1/layer.csv"
}

# resumed DIR: --resume finished the sweep, every point once, every sample there
resumed() {
    sweep "$1" 60 --resume || fail "--resume exited $?: $(cat "$1.err")"
    [ "$(intact "$1")" -eq "$POINTS" ] || fail "$(rows "$1/layer.csv") rows after --resume, expected $POINTS"
    awk -F, 'NR == 1 { n = NF; next } NF != n { exit 1 }' "$1/layer_samples.csv" ||
        fail "$1/layer_samples.csv has a broken row after --resume"
    [ "$(rows "$1/layer_samples.csv")" -eq $((POINTS * ITERS)) ] ||
        fail "$(rows "$1/layer_samples.csv") samples after --resume, expected $((POINTS * ITERS))"
}

# point BATCH: the words that name the point (an extended regex; the overlap depth is optional)
point() { echo "layout tp1ep2 routing uniform placement contiguous( overlap [0-9]+)?( dispatch [a-z0-9:.+]+)? batch $1"; }

# finish PID LIMIT: the exit status of job PID, which must end within LIMIT seconds
finish() {
    for _ in $(seq 1 $((10 * $2))); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$1" 2>/dev/null && fail "the job still runs $2 s after the fault"
    wait "$1" && return 0
}

# 1. rank 1 killed with SIGKILL after 2 rows
OUT=$TMP/kill
sweep "$OUT" 20 &
job=$!
wait_rows "$OUT" 2 "$job"
pid=
for p in $(ip netns pids "$NAME-n1"); do
    case $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) in "$BIN/moeperf-layer "*) pid=$p ;; esac
done
[ -n "$pid" ] || fail "no rank process in node1"
kill -KILL "$pid"
t0=$(date +%s)
rc=0
finish "$job" 40 || rc=$?
dt=$(($(date +%s) - t0))
done_rows=$(intact "$OUT")
echo "killed rank: exit $rc after $dt s, $done_rows of $POINTS rows kept"
grep -E 'mpirun noticed|stopped by a signal' "$OUT.err" || true
[ "$rc" -eq 137 ] || fail "mpirun exited $rc after a rank was killed, expected 137: $(cat "$OUT.err")"
[ "$dt" -lt 20 ] || fail "the job took $dt s to end, more than --timeout 20"
[ "$done_rows" -ge 2 ] && [ "$done_rows" -lt "$POINTS" ] || fail "the kill came at the wrong time ($done_rows rows)"
grep -Eq "mpirun noticed that process rank 1 with PID $pid on node node1 exited on signal 9" "$OUT.err" ||
    fail "mpirun did not name the killed rank: $(cat "$OUT.err")"
grep -Eq "stopped by a signal during rank 0 \(host node0\) at point $(point "${BATCHES[$done_rows]}");" "$OUT.err" ||
    fail "the surviving rank did not name point $(point "${BATCHES[$done_rows]}"): $(cat "$OUT.err")"
resumed "$OUT"

# 2. the data link of node1 down after 2 rows
OUT=$TMP/link
sweep "$OUT" 15 &
job=$!
wait_rows "$OUT" 2 "$job"
"$EMU" link --name "$NAME" node1 down 2>/dev/null
t0=$(date +%s)
rc=0
finish "$job" 45 || rc=$?
dt=$(($(date +%s) - t0))
"$EMU" link --name "$NAME" node1 up 2>/dev/null
done_rows=$(intact "$OUT")
echo "dead link: exit $rc after $dt s, $done_rows of $POINTS rows kept"
grep -E 'did not complete|stopped by a signal' "$OUT.err" || true
[ "$rc" -eq 1 ] || fail "mpirun exited $rc after the link went down, expected 1: $(cat "$OUT.err")"
[ "$dt" -le 25 ] || fail "the job took $dt s to end, more than --timeout 15 + 10 s"
[ "$done_rows" -ge 2 ] && [ "$done_rows" -lt "$POINTS" ] || fail "the link went down at the wrong time ($done_rows rows)"
# rank 0 writes the rows, so it waits in the point after the last row; rank 1 may have finished
# that point's part of its own and be one point further
named=$(grep -Eo 'rank [01] \(host node[01]\) at point [a-z0-9: -]+ did not complete within --timeout 15 s' "$OUT.err" || true)
[ -n "$named" ] || fail "no watchdog message naming a rank and a point: $(cat "$OUT.err")"
this=$(point "${BATCHES[$done_rows]}")
next=$(point "${BATCHES[$((done_rows + 1))]:-none}")
while read -r line; do
    [[ $line =~ ^rank\ 0\ \(host\ node0\)\ at\ point\ $this\ did ]] ||
        [[ $line =~ ^rank\ 1\ \(host\ node1\)\ at\ point\ ($this|$next)\ did ]] ||
        fail "the watchdog named the wrong point after $done_rows rows: $line"
done <<<"$named"
resumed "$OUT"

# 3. nothing left
"$EMU" down --name "$NAME" || fail "down exited $?"
[ -z "$(ip netns list | grep "^$NAME-")" ] || fail "namespaces left: $(ip netns list | grep "^$NAME-")"
pgrep -af "$TMP" && fail "processes left"
echo PASS
