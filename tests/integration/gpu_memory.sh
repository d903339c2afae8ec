#!/usr/bin/env bash
# gpu_memory.sh - the memory checks of the GPU path read each GPU's free memory (cudaMemGetInfo) and
# refuse on every rank together: with the stand-in's rank 3 given a small device
# (CUDAEMU_DEVICE_MEMORY), moeperf-layer measures the layout that fits there, then refuses the next
# one with exit 2 naming rank 3 and its free GPU memory, every rank leaving promptly and the row
# already written kept; moeperf-ffn measures its small point and refuses the larger one the same
# way. Needs -Dcudaemu=true (exits 77 on a build with the real CUDA and NCCL).
. "$(dirname "$0")/lib.sh"
"$BIN/moeperf-layer" --version >/dev/null
[ -n "${CUDAEMU_DEVICES:-}" ] || { echo "not the CPU stand-in: skipped"; exit 77; }
# 59 MB on the fourth device: what the backend allocates at start (the cuBLAS workspace, and the
# test hook's 8 MiB --flush-cache buffer, set here whatever the tier: kernels/compute.h) leaves
# about 16 MB free there; tp1ep4 needs about 8 MB per rank, tp4ep1 (every token on each rank)
# about 18 MB
export MOEPERF_TEST_QUICK=1
export CUDAEMU_DEVICE_MEMORY=141G,141G,141G,59M
MODEL="--backend cuda --comm nccl --model qwen3-30b-a3b --hidden 1024 --ffn 16 --experts 16
       --topk 8"

# refused_everywhere OUT CMD...: CMD under 4 ranks exits 2 within 300 s with the refusal naming
# rank 3's free GPU memory; prints the message. (A rank that hangs never leaves; the cap only
# has to outlast the sanitizer build's start-up beside other suites: moeperf-ffn's, with its
# roofline measured first, took more than 120 s there at a load average of 12.)
refused_everywhere() {
    out=$1
    shift
    set +e
    timeout 300 bash -c 'mpi() { OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 4 "$@"; }; mpi "$@"' \
        _ "$@" >"$out.log" 2>&1
    rc=$?
    set -e
    [ "$rc" -ne 124 ] ||
        fail "$out: the ranks did not all leave within 300 s: $(tail -5 "$out.log")"
    [ "$rc" -eq 2 ] || fail "$out: exited $rc, expected 2: $(tail -5 "$out.log")"
    msg=$(grep -m1 "rank 3 (host .*) has .* GB free on its GPU" "$out.log") ||
        fail "$out: no refusal naming rank 3's free GPU memory: $(tail -5 "$out.log")"
    echo "refused: $msg"
}

# shellcheck disable=SC2086
refused_everywhere "$TMP/layer" "$BIN/moeperf-layer" $MODEL --layout tp1ep4,tp4ep1 --batch 256 \
    --iters 2 --warmup 1 --quiet --out "$TMP/layer"
[ "$(rows "$TMP/layer/layer.csv")" -eq 1 ] ||
    fail "layer: $(rows "$TMP/layer/layer.csv") rows kept, expected 1"
[ "$(col "$TMP/layer/layer.csv" layout)" = tp1ep4 ] || fail "layer: the row kept is not tp1ep4's"

# moeperf-ffn measures the roofline first (about 2.5 GB at once), so its fourth device has 3.1 GB:
# batch 64 fits, batch 262144 (about 4.5 GB per rank) does not
# shellcheck disable=SC2086
CUDAEMU_DEVICE_MEMORY=141G,141G,141G,3.1G refused_everywhere "$TMP/ffn" "$BIN/moeperf-ffn" $MODEL \
    --layout tp1ep4 --batch 64,262144 --iters 2 --warmup 1 --quiet --out "$TMP/ffn"
[ "$(rows "$TMP/ffn/ffn.csv")" -eq 1 ] ||
    fail "ffn: $(rows "$TMP/ffn/ffn.csv") rows kept, expected 1"
echo PASS
