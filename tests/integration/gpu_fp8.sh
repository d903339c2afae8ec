#!/usr/bin/env bash
# gpu_fp8.sh - --dispatch-dtype bf16,fp8 on the GPU path (--backend cuda --comm nccl, 2 ranks on 2
# GPUs), H = MOEPERF_GPU_HIDDEN + 72 (two blocks of 128 values on the CPU stand-in, the last of
# 72): --check passes (the tight bound against the reference of the quantized bf16 inputs, the
# loose one against the unquantized) in the dynamic and padded dispatches (lossless and a capacity
# that drops), with --dedup pair and rank (node across two nodes: gpu_dedup_nodes.sh), padded replayed as a CUDA Graph
# (the pack and unpack captured), pipelined over 2 chunks (in both stream schedules of the
# stand-in, so a pack not ordered before its exchange, or an unpack before its arrival, fails
# --check); every point's dispatch bytes are its rows × (H + 4·⌈H/128⌉ + metadata) exactly and its
# combine bytes rows × 2H (bf16), the fp8 point moves the bf16 point's rows; fp8's check_error
# stays within 1.3 times the bf16 point's (the reference models the device's bf16 rounding).
# Exits 77 without a CUDA device or with fewer than 2 GPUs.
. "$(dirname "$0")/lib.sh"
require_cuda_device
ngpu=${MOEPERF_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
[ "$ngpu" -ge 2 ] || { echo "SKIP: fewer than 2 GPUs"; exit 77; }
H=$((${MOEPERF_GPU_HIDDEN:-1024} + 72)) F=${MOEPERF_GPU_FFN:-512}
K=4
# layer NAME ARGS...: 2 ranks, --check, bf16 and fp8 points of the same sweep, into $TMP/NAME
layer() {
    name=$1
    shift
    mpi 2 "$BIN/moeperf-layer" --backend cuda --comm nccl --model qwen3-30b-a3b --hidden $H \
        --ffn $F --experts 16 --topk $K --shared 1 --warmup 1 --iters 1 --check --quiet \
        --dispatch-dtype bf16,fp8 "$@" --out "$TMP/$name" ||
        fail "moeperf-layer $* (stand-in schedule ${CUDAEMU_SCHEDULE:-late}): exit $?"
}
# (--dedup node's relays, which unpack and pack again, need two nodes: gpu_dedup_nodes.sh)
layer plain --batch 7,32 --routing uniform,gate --placement contiguous,replicate-hot:2 \
    --dispatch dynamic,padded:0.5 --dedup pair,rank
layer graph --batch 7,32 --routing uniform,gate --dispatch padded,padded:1.0 --graph
layer overlap --batch 32 --routing hot:2:15,gate --overlap 2 --dedup pair,rank
if [ -n "${CUDAEMU_DEVICES:-}" ]; then # the stand-in's other stream schedule
    CUDAEMU_SCHEDULE=others-first layer overlap-others-first --batch 32 --routing hot:2:15 \
        --overlap 2 --dedup pair,rank
fi
col "$TMP/graph/layer.csv" dispatch | grep -qx 'padded+graph' || fail "no padded+graph rows"
python3 - "$H" "$K" "$(dirname "$0")" "$TMP"/plain "$TMP"/graph "$TMP"/overlap <<'PY' || fail "fp8 dispatch on the GPU path"
import csv, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, sys.argv[3])
import fp8_bytes
H, K = int(sys.argv[1]), int(sys.argv[2])
act = 2 * H                              # the cuda backend's bf16 row
key = fp8_bytes.KEY
for d in sys.argv[4:]:
    errs = {}
    for p in csv.DictReader(open(d + "/layer.csv")):
        assert p["check_error"] != "" and float(p["check_error"]) <= 2e-2, (d, p["check_error"])
        errs.setdefault(tuple(p[c] for c in key), {})[p["dispatch_dtype"]] = float(p["check_error"])
    for k, e in errs.items():
        assert set(e) == {"bf16", "fp8"}, (d, k, e)
        # the tight reference quantizes the device's bf16 values and rounds the unpacked ones
        # to bf16, as the device does: what is left is the bf16 arithmetic the bf16 point has too
        # (measured on the stand-in: fp8/bf16 about 1.0; a reference of the unrounded fp32
        # inputs gives about 1.7)
        assert e["fp8"] <= 1.3 * e["bf16"] + 1e-4, (d, k, e)
checked, _, moved = fp8_bytes.check(sys.argv[4:], H, K, act)
assert checked > 0 and moved > 0, (checked, moved)
print(f"fp8 on the GPU path: {checked} points' bytes by the formula (row {fp8_bytes.fp8_row(H)} "
      f"of {act} bytes), {moved} ranks moved the bf16 point's rows")
PY
echo PASS
