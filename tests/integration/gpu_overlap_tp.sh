#!/usr/bin/env bash
# gpu_overlap_tp.sh - the pipelined layer with TP books the wait for the EP exchanges in flight as
# communication, not as TP reduce: on the stand-in with every EP exchange slowed by
# CUDAEMU_NCCL_DELAY_US, tp2ep2 --overlap 2 shows the delay in dispatch_us (exposed
# communication) while tp_reduce_us stays a small part of it. Needs -Dcudaemu=true (exits 77 on a
# build with the real CUDA and NCCL).
. "$(dirname "$0")/lib.sh"
"$BIN/moeperf-layer" --version >/dev/null
[ -n "${CUDAEMU_DEVICES:-}" ] || { echo "not the CPU stand-in: skipped"; exit 77; }
# 400 ms: the reduce's own time does not grow with it, and under load (4 sanitized ranks beside
# another full build on 2 cores) it took 77 ms, more than an eighth of 100 ms exchanges' waits
DELAY=400000
# ranks that yield while waiting: the stand-in's slowed exchanges leave the others idle
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CUDAEMU_NCCL_DELAY_US=$DELAY \
    timeout 600 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 4 \
    "$BIN/moeperf-layer" --backend cuda --comm nccl --model qwen3-30b-a3b --hidden 128 --ffn 64 \
    --experts 16 --topk 4 --layout tp2ep2 --overlap 2 --batch 64 --iters 3 --warmup 1 --quiet \
    --out "$TMP/run" >"$TMP/run.log" 2>&1 ||
    fail "moeperf-layer exited $?: $(tail -5 "$TMP/run.log")"
dispatch=$(col "$TMP/run/layer.csv" dispatch_us)
tp=$(col "$TMP/run/layer.csv" tp_reduce_us)
echo "exchanges slowed by ${DELAY} µs: dispatch_us $dispatch, tp_reduce_us $tp"
# a pipelined iteration waits for at least one slowed exchange (several, in fact)
awk -v d="$dispatch" -v D=$DELAY 'BEGIN { exit !(d >= D) }' ||
    fail "dispatch_us $dispatch does not hold the ${DELAY} µs exchange delay"
# the reduce itself is quick; booked with the wait for the next chunk's dispatch it was a third of
# the exchanges' time
awk -v d="$dispatch" -v t="$tp" 'BEGIN { exit !(t < d / 8) }' ||
    fail "tp_reduce_us $tp holds the wait for the exchanges (dispatch_us $dispatch)"
echo PASS
