#!/usr/bin/env bash
# gpu_fp8_weights.sh - --weight-dtype fp8 on the cuda backend (1 rank, then 2 ranks tp2): --check
# passes for bf16 and fp8 weights with --gemm loop (every expert through cuBLASLt's block-scaled
# FP8 GEMM where the shapes allow it, moeperf's kernel in pieces of 8 rows where they do not),
# grouped (every expert through moeperf's kernel) and skinny (experts of at most 8 rows through
# moeperf's kernel, the rest as loop), at batches whose experts hold 1..8 rows and more; two shapes: H = MOEPERF_GPU_HIDDEN + 32 (a last 128-block
# of 32 rows) with FFN width 128 (cuBLASLt takes both stages) and width MOEPERF_GPU_FFN + 16 (not
# a multiple of 128: the gate/up stage runs moeperf's kernel); fp8's check_error stays within 1.5
# times the bf16 point's (the reference is the dequantized weights); moeperf-ffn's weight_bytes
# are the fp8 bytes by formula (3·H·Dl codes plus 4 per 128×128 block, per active expert), half
# and more below bf16's, and its roofline columns use the measured FP8 GEMM rate (run.json's
# peak_gflops_fp8). Exits 77 without a CUDA device.
. "$(dirname "$0")/lib.sh"
require_cuda_device
H=$((${MOEPERF_GPU_HIDDEN:-1024} + 32))
check_points() { # DIR: every point checked, fp8 within 1.5× its bf16 twin
    python3 - "$1" <<'PY' || fail "check errors in $1"
import csv, sys
pts = {}
for r in csv.DictReader(open(sys.argv[1] + "/layer.csv")):
    assert r["check_error"] != "" and float(r["check_error"]) <= 2e-2, (r["weight_dtype"], r["check_error"])
    pts.setdefault((r["layout"], r["batch"], r["routing"]), {})[r["weight_dtype"]] = float(r["check_error"])
for k, e in pts.items():
    assert set(e) == {"bf16", "fp8"}, (k, e)
    assert e["fp8"] <= 1.5 * e["bf16"] + 1e-4, (k, e)
print(f"{sys.argv[1]}: {len(pts)} bf16/fp8 point pairs checked")
PY
}
# width 128 in every mode; the other width's shape runs moeperf's kernel in every mode (cuBLASLt
# cannot take it), so one mode shows it
for F in 128 $((${MOEPERF_GPU_FFN:-512} + 16)); do
    gemms="loop grouped skinny"
    [ "$F" = 128 ] || gemms=loop
    for gemm in $gemms; do
        out=$TMP/l-$F-$gemm
        "$BIN/moeperf-layer" --backend cuda --comm nccl --hidden $H --ffn $F --experts 16 --topk 4 \
            --shared 1 --warmup 1 --iters 1 --check --quiet --no-flush-cache --batch 1,4,64 \
            --routing hot:2:15 --weight-dtype bf16,fp8 --gemm $gemm --out "$out" ||
            fail "moeperf-layer --ffn $F --gemm $gemm: exit $?"
        check_points "$out"
    done
done
ngpu=${MOEPERF_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
if [ "$ngpu" -ge 2 ]; then # tp2: each rank's shard quantized in blocks of its own
    mpi 2 "$BIN/moeperf-layer" --backend cuda --comm nccl --hidden $H --ffn 256 --experts 8 \
        --topk 2 --layout tp2ep1 --warmup 1 --iters 1 --check --quiet --no-flush-cache \
        --batch 3,40 --weight-dtype bf16,fp8 --gemm skinny --out "$TMP/tp2" ||
        fail "2-rank tp2 fp8 weights: exit $?"
    check_points "$TMP/tp2"
fi
"$BIN/moeperf-ffn" --backend cuda --comm nccl --hidden $H --ffn 128 --experts 16 --topk 4 --iters 2 --warmup 1 \
    --quiet --no-flush-cache --batch 1,64 --weight-dtype bf16,fp8 --gemm skinny --out "$TMP/ffn" ||
    fail "moeperf-ffn fp8 weights: exit $?"
python3 - "$TMP/ffn" "$H" <<'PY' || fail "ffn weight bytes"
import csv, math, sys
H, D = int(sys.argv[2]), 128
import json
roof = next(e for k, e in json.load(open(sys.argv[1] + "/run.json")).items() if k == "roofline")
by = {}
for r in csv.DictReader(open(sys.argv[1] + "/ffn.csv")):
    want = roof["peak_gflops_fp8"] if r["weight_dtype"] == "fp8" else roof["peak_gflops"]
    # the CSV's 6 significant digits (%.6g): within half a unit of the sixth, 5e-6 of the value
    assert abs(float(r["peak_GFLOPs"]) - want) <= 5e-6 * want, (r["weight_dtype"], r["peak_GFLOPs"], want)
    a = int(r["active_experts"])
    per = 3 * H * D * 2 if r["weight_dtype"] == "bf16" else 3 * H * D + 4 * 3 * math.ceil(H / 128) * math.ceil(D / 128)
    assert int(r["weight_bytes"]) == a * per, (r["weight_dtype"], r["weight_bytes"], a * per)
    by.setdefault(r["batch"], {})[r["weight_dtype"]] = int(r["weight_bytes"])
for b, v in by.items():
    assert 2 * v["fp8"] < v["bf16"] * 1.05, (b, v)
print(f"ffn: {len(by)} batches, fp8 weight bytes by the formula")
PY
echo PASS
