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
python3 - "$H" "$K" "$TMP"/plain "$TMP"/graph "$TMP"/overlap <<'PY' || fail "fp8 dispatch on the GPU path"
import csv, math, sys
H, K = int(sys.argv[1]), int(sys.argv[2])
act = 2 * H                              # the cuda backend's bf16 row
fp8 = H + 4 * math.ceil(H / 128)         # e4m3 codes + one fp32 scale per 128 values
meta = {"pair": 0, "rank": 8 * K, "node": 8 * K}  # K·(int32 id + float weight), --dedup rank|node
key = ["layout", "routing", "placement", "dispatch", "overlap", "dedup", "batch"]
def b(r, phase, cls):
    return float(r[f"{phase}_bytes_{cls}node"])
checked = moved = 0
for d in sys.argv[3:]:
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
    pts = {}
    for r in csv.DictReader(open(d + "/layer_ranks.csv")):
        pts.setdefault(tuple(r[c] for c in key), {}).setdefault(r["dispatch_dtype"], []).append(r)
    for k, v in pts.items():
        m = meta[k[key.index("dedup")]]
        for dt, ranks in v.items():
            row = (fp8 if dt == "fp8" else act) + m
            for cls in ("intra", "inter"):
                disp = sum(b(r, "dispatch", cls) for r in ranks)
                comb = sum(b(r, "combine", cls) for r in ranks)
                assert disp * act == comb * row, (d, k, dt, cls, disp, comb)
            for r in ranks:
                tot = sum(b(r, ph, c) for ph in ("dispatch", "combine") for c in ("intra", "inter"))
                assert float(r["bytes_sent"]) == tot, (d, k, dt, r["rank"])
            checked += 1
        # the same tokens (drawn per block for both) and routes: the same rows, fewer bytes
        for x, y in zip(sorted(v["bf16"], key=lambda r: int(r["rank"])),
                        sorted(v["fp8"], key=lambda r: int(r["rank"]))):
            assert b(y, "combine", "intra") == b(x, "combine", "intra"), (d, k)
            rows = b(x, "dispatch", "intra") / (act + m)
            assert rows == int(rows) and b(y, "dispatch", "intra") == rows * (fp8 + m), \
                (d, k, b(x, "dispatch", "intra"), b(y, "dispatch", "intra"))
            moved += rows > 0
assert checked > 0 and moved > 0, (checked, moved)
print(f"fp8 on the GPU path: {checked} points' bytes by the formula (row {fp8} of {act} bytes), "
      f"{moved} ranks moved the bf16 point's rows")
PY
echo PASS
