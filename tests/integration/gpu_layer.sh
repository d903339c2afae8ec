#!/usr/bin/env bash
# gpu_layer.sh - the whole layer on the GPU path (--backend cuda --comm nccl, one rank per GPU):
# --check against the reference for every routing and placement, in both dispatch modes, with a
# group limit, with grouped GEMMs and the two-stream pipeline, and with padded points replayed as
# CUDA Graphs (GEMM loop, and grouped, skinny or fused with two shared experts: several captured
# argument blocks); the skinny GEMMs on small and large experts; the fused kernel, pipelined too; moeperf-a2a on nccl; --dedup pair, rank
# and node with --check (tp1ep2 and tp2ep2, gate and uniform routings, contiguous and
# replicate-hot:2), their rows those of the cpu backend, and rank and node in padded slots and
# pipelined (tp1ep2), their rows and drops those of the cpu backend; --expert-cache in every
# policy, with --check, its hits and misses those of the cpu backend;
# with four GPUs, TP, EP and TP+EP layouts; the count exchange timed as notify_us by the dynamic
# and pipelined dispatches, 0 for padded. On the CPU stand-in
# (tests/cudaemu, CUDAEMU_DEVICES set) the pipeline runs in both of its stream schedules, so a
# missing event wait between the compute and comm streams fails --check in either direction.
# Exits 77 where no CUDA device is present.
. "$(dirname "$0")/lib.sh"
require_cuda_device
# MOEPERF_GPUS, MOEPERF_GPU_HIDDEN and MOEPERF_GPU_FFN override the GPU count and the layer's sizes
# (the CPU stand-in of -Dcudaemu=true runs GEMMs on one core)
ngpu=${MOEPERF_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
H=${MOEPERF_GPU_HIDDEN:-1024} F=${MOEPERF_GPU_FFN:-512}
np=1 eplb=contiguous
[ "$ngpu" -ge 2 ] && np=2 eplb=contiguous,eplb:4 # eplb needs a second rank for its extra slots
# layer NP ARGS...: moeperf-layer on the GPU path with --check, on NP ranks. One timed iteration
# after the warm-up (no time is judged): it routes draw 1 (core/run/harness.c), so the checked pass, on
# draw 0, still follows a pass on other routing, as a captured graph's replay still does.
layer() {
    n=$1
    shift
    mpi "$n" "$BIN/moeperf-layer" --backend cuda --comm nccl --model qwen3-30b-a3b --hidden $H \
        --ffn $F --experts 16 --topk 4 --warmup 1 --iters 1 --check "$@" ||
        fail "moeperf-layer $* (stand-in schedule ${CUDAEMU_SCHEDULE:-late}): exit $?"
}
# every routing in every dispatch mode, then every placement (under the skewed routing)
layer $np --shared 1 --batch 1,7,64 --routing uniform,hot:2:15,gate,gate:0.5 \
    --dispatch dynamic,padded,padded:1.0 --out "$TMP/gpu"
layer $np --shared 1 --batch 1,7,64 --routing hot:2:15,gate --placement round-robin,replicate-hot:2 \
    --dispatch dynamic,padded,padded:1.0 --out "$TMP/gpu-placement"
# the gate kernel's group limit (kernels/topk.h), against the reference's (sampled routings too)
layer $np --shared 1 --batch 1,7,64 --routing hot:2:15,gate,gate:0.5 --group-limit 4:1,2:1 \
    --out "$TMP/gpu-group-limit"
layer $np --shared 1 --batch 7,64 --routing hot:2:15 --placement "$eplb" --gemm grouped \
    --overlap 1,2,4 --out "$TMP/gpu-overlap"
if [ -n "${CUDAEMU_DEVICES:-}" ]; then # the CPU stand-in: the pipeline again in its other schedule
    CUDAEMU_SCHEDULE=others-first layer $np --shared 1 --batch 7,64 --routing hot:2:15 \
        --placement "$eplb" --gemm grouped --overlap 2,4 --out "$TMP/gpu-overlap-others-first"
fi
layer $np --shared 1 --batch 1,7,64 --routing uniform,gate --placement contiguous,replicate-hot:2 \
    --dispatch padded,padded:1.0 --graph --out "$TMP/gpu-graph"
layer $np --shared 2 --batch 1,64 --routing hot:2:15 --dispatch padded --graph --gemm grouped \
    --out "$TMP/gpu-graph-grouped"
# skinny: experts of up to 8 rows in the weight-streaming kernel, larger ones by cuBLAS (batch 64)
layer $np --shared 1 --batch 1,7,64 --routing uniform,hot:2:15 --dispatch dynamic,padded:1.0 \
    --gemm skinny --out "$TMP/gpu-skinny"
layer $np --shared 1 --batch 7,64 --routing hot:2:15 --gemm skinny --overlap 2 \
    --out "$TMP/gpu-skinny-overlap"
layer $np --shared 2 --batch 1,64 --routing hot:2:15 --dispatch padded --graph --gemm skinny \
    --out "$TMP/gpu-graph-skinny"
# fused: every expert and the two shared ones in one launch per stage (decode tiles at batch 1,
# tensor-core pieces at 64), pipelined too, and replayed
layer $np --shared 2 --batch 1,64 --routing uniform,hot:2:15 --dispatch dynamic \
    --gemm fused --overlap 1,2 --out "$TMP/gpu-fused"
layer $np --shared 2 --batch 1,64 --routing hot:2:15 --dispatch padded --graph --gemm fused \
    --out "$TMP/gpu-graph-fused"
# --expert-cache: every policy with fewer slots than local experts, a miss fetched on the copy
# stream (on the stand-in in both schedules: a fetch that does not wait for its slot's last FFN,
# or an FFN that does not wait for its fetch, fails --check in one of them); each rank's hits and
# misses those of the cpu backend on the same draws, its fetch bytes half the cpu's (bf16 weights,
# fp32 there)
cache="--shared 1 --batch 7,64 --routing uniform,hot:2:15 --expert-cache 2,3:lfu,4:static"
# shellcheck disable=SC2086
layer $np $cache --out "$TMP/gpu-cache"
if [ -n "${CUDAEMU_DEVICES:-}" ]; then
    # shellcheck disable=SC2086
    CUDAEMU_SCHEDULE=others-first layer $np $cache --out "$TMP/gpu-cache-others-first"
fi
# shellcheck disable=SC2086
mpi $np "$BIN/moeperf-layer" --backend cpu --comm mpi --model qwen3-30b-a3b --hidden $H --ffn $F \
    --experts 16 --topk 4 --warmup 1 --iters 1 $cache --quiet --out "$TMP/cpu-cache" ||
    fail "the cpu sweep of --expert-cache: exit $?"
python3 - "$TMP/gpu-cache" "$TMP/cpu-cache" <<'PY' || fail "--expert-cache: the GPU path's fetches are wrong"
import csv, sys
key = ["routing", "expert_cache", "batch", "rank"]
g, c = ({tuple(r[k] for k in key): r for r in csv.DictReader(open(f"{d}/layer_ranks.csv"))}
        for d in sys.argv[1:3])
assert g.keys() == c.keys() and len(g) >= 12, sorted(g)
misses = 0
for k in g:
    for col in ("cache_hits", "cache_misses"):
        assert g[k][col] == c[k][col], (k, col, g[k][col], c[k][col])
    assert 2 * float(g[k]["fetch_bytes"]) == float(c[k]["fetch_bytes"]), (k, g[k]["fetch_bytes"])
    misses += float(g[k]["cache_misses"])
    assert (float(g[k]["fetch_us"]) >= 0), k
assert misses > 0, "no miss anywhere: nothing was fetched"
print("--expert-cache on the GPU path: hits and misses as on the cpu backend,", misses, "misses")
PY
col "$TMP/gpu-graph/layer.csv" dispatch | grep -qx 'padded+graph' || fail "no padded+graph rows"
# the count exchange is the notify phase, timed by the cuda backend's marks: 0 in every padded
# point (none is made), and with two ranks or more (one rank's exchange can be shorter than an
# event's resolution) above 0 in every dynamic and pipelined one
notify_check() {
    awk -F, -v np="$np" 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "dispatch") d = i; if ($i == "notify_us") n = i }; next }
        $d ~ /^padded/ && $n != 0 { print "padded point with notify_us " $n; bad = 1 }
        $d == "dynamic" && np >= 2 && !($n > 0) { print "dynamic point with notify_us " $n; bad = 1 }
        END { exit bad || !n }' "$1" || fail "$1: notify_us is not what its dispatch exchanges"
}
for d in gpu gpu-overlap gpu-graph; do notify_check "$TMP/$d/layer.csv"; done
# dedup_check LAYOUT NP: --dedup pair, rank and node with --check on the GPU path, then the same
# sweep on the cpu backend (the same draws): every point within the bf16 bound; under the sampled
# routing (the gate's bf16 logits may pick other experts than the cpu's fp32 ones) every rank's
# rows are the host path's, as the plan is built from the same routing; rank and node send fewer
# bytes than pair at some point, and none more (one node: node mode sends as rank mode does)
dedup_check() {
    lay=$1 n=$2
    sweep="--layout $lay --shared 1 --batch 32 --routing uniform,gate --dedup pair,rank,node
        --placement contiguous,replicate-hot:2"
    # shellcheck disable=SC2086
    layer "$n" $sweep --out "$TMP/gpu-dedup-$lay"
    # shellcheck disable=SC2086
    mpi "$n" "$BIN/moeperf-layer" --backend cpu --comm mpi --model qwen3-30b-a3b --hidden $H \
        --ffn $F --experts 16 --topk 4 --warmup 1 --iters 1 --check $sweep --quiet \
        --out "$TMP/cpu-dedup-$lay" || fail "the cpu sweep of --dedup on $lay: exit $?"
    python3 - "$TMP/gpu-dedup-$lay" "$TMP/cpu-dedup-$lay" <<'PY' || fail "--dedup on $lay: the GPU path is wrong"
import csv, sys
key = ["layout", "routing", "placement", "dedup", "batch"]
def load(d, name, extra):
    return {tuple(r[k] for k in key + extra): r for r in csv.DictReader(open(f"{d}/{name}"))}
g, c = (load(d, "layer.csv", []) for d in sys.argv[1:3])
assert g.keys() == c.keys() and len(g) == 12, sorted(g)
fewer = {"rank": 0, "node": 0}
for k, r in g.items():
    assert r["check_error"] != "" and float(r["check_error"]) <= 2e-2, (k, r["check_error"])
    assert float(r["bytes_internode"]) == 0, (k, "one node", r["bytes_internode"])
    if k[3] != "pair":
        sent, pair = (float(g[k[:3] + (m,) + k[4:]]["bytes_intranode"]) for m in (k[3], "pair"))
        assert sent <= pair, (k, sent, pair)
        fewer[k[3]] += sent < pair
        node = float(g[k[:3] + ("node",) + k[4:]]["bytes_intranode"])
        assert node == float(g[k[:3] + ("rank",) + k[4:]]["bytes_intranode"]), (k, "node != rank")
assert all(fewer.values()), fewer
g, c = (load(d, "layer_ranks.csv", ["rank"]) for d in sys.argv[1:3])
assert g.keys() == c.keys() and g
for k in g:
    if k[1] == "uniform":
        for col in ("tokens", "rows", "ffn_rows"):
            assert g[k][col] == c[k][col], (k, col, g[k][col], c[k][col])
print(sys.argv[1], "rows as on the cpu backend; bytes rank/node below pair at", fewer)
PY
}
# dedup_forms_check: --dedup rank and node in padded slots (lossless, and a capacity that drops)
# and pipelined over 2 chunks, with --check, on tp1ep2; the same sweeps on the cpu backend: every
# rank's rows and every point's drops the host path's (the plans come from the same routing)
dedup_forms_check() {
    forms="--layout tp1ep2 --shared 1 --batch 32 --routing uniform --dedup rank,node"
    # shellcheck disable=SC2086
    layer 2 $forms --dispatch padded,padded:0.5 --out "$TMP/gpu-dedup-padded"
    # shellcheck disable=SC2086
    layer 2 $forms --overlap 2 --out "$TMP/gpu-dedup-overlap"
    for f in "--dispatch padded,padded:0.5 --out $TMP/cpu-dedup-padded" "--overlap 2 --out $TMP/cpu-dedup-overlap"; do
        # shellcheck disable=SC2086
        mpi 2 "$BIN/moeperf-layer" --backend cpu --comm mpi --model qwen3-30b-a3b --hidden $H \
            --ffn $F --experts 16 --topk 4 --warmup 1 --iters 1 --check $forms $f --quiet ||
            fail "the cpu sweep of $f: exit $?"
    done
    python3 - "$TMP" <<'PY' || fail "--dedup padded or pipelined: the GPU path is wrong"
import csv, sys
key = ["dispatch", "overlap", "dedup", "batch"]
def load(d, name, extra):
    return {tuple(r[k] for k in key + extra): r for r in csv.DictReader(open(f"{d}/{name}"))}
for form, points in (("padded", 4), ("overlap", 2)):
    g, c = (load(f"{sys.argv[1]}/{side}-dedup-{form}", "layer.csv", []) for side in ("gpu", "cpu"))
    assert g.keys() == c.keys() and len(g) == points, (form, sorted(g))
    for k, r in g.items():
        assert r["check_error"] != "" and float(r["check_error"]) <= 2e-2, (k, r["check_error"])
        assert r["drop_rate"] == c[k]["drop_rate"], (k, r["drop_rate"], c[k]["drop_rate"])
    g, c = (load(f"{sys.argv[1]}/{side}-dedup-{form}", "layer_ranks.csv", ["rank"])
            for side in ("gpu", "cpu"))
    for k in g:
        for col in ("tokens", "rows", "ffn_rows"):  # bytes: bf16 rows here, fp32 there
            assert g[k][col] == c[k][col], (k, col, g[k][col], c[k][col])
print("padded and pipelined --dedup: rows and drops as on the cpu backend")
PY
}
[ "$np" -lt 2 ] || { dedup_check tp1ep2 2; dedup_forms_check; }
# moeperf-a2a on nccl: uniform sizes and MoE counts
mpi $np "$BIN/moeperf-a2a" --backend cuda --comm nccl --bytes 1K:64K:x8 --iters 3 --warmup 1 --quiet \
    --out "$TMP/a2a" || fail "moeperf-a2a --comm nccl exit $?"
[ "$(rows "$TMP/a2a/a2a.csv")" -eq 3 ] || fail "moeperf-a2a wrote $(rows "$TMP/a2a/a2a.csv") rows, expected 3"
mpi $np "$BIN/moeperf-a2a" --backend cuda --comm nccl --pattern moe --hidden $H --batch 16,64 \
    --routing hot:2:15 --iters 3 --warmup 1 --quiet --out "$TMP/a2a-moe" ||
    fail "moeperf-a2a --pattern moe --comm nccl exit $?"
# four GPUs: TP groups (ncclAllReduce, ordered after the pipeline's exchanges), EP and both at once,
# pipelined (in both schedules on the stand-in) and as padded graphs
if [ "$ngpu" -ge 4 ]; then
    tp_ep="--shared 1 --batch 7,64 --routing hot:2:15 --layout tp2ep2,tp4ep1,tp1ep4"
    layer 4 $tp_ep --overlap 1,2 --gemm grouped --out "$TMP/gpu4"
    [ -z "${CUDAEMU_DEVICES:-}" ] ||
        CUDAEMU_SCHEDULE=others-first layer 4 $tp_ep --overlap 2 --gemm grouped --out "$TMP/gpu4-others-first"
    layer 4 $tp_ep --dispatch padded --graph --out "$TMP/gpu4-graph"
    dedup_check tp2ep2 4
    [ "$(rows "$TMP/gpu4/layer.csv")" -eq 12 ] || fail "4 GPUs: $(rows "$TMP/gpu4/layer.csv") rows, expected 12"
fi
echo PASS
