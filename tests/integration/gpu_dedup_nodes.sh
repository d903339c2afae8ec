#!/usr/bin/env bash
# gpu_dedup_nodes.sh - --dedup pair, rank and node on the GPU path (--backend cuda --comm nccl)
# across nodes: on an emulated cluster of 2 nodes x 2 ranks (ci/emucluster), the CPU stand-in with
# 2 emulated GPUs per node, tp1ep4 and tp2ep2, uniform and gate routings, contiguous and
# replicate-hot:2 placements: every point passes --check within the bf16 bound, the ranks are on
# two nodes, and inter-node bytes fall pair > rank >= node at every point, node below rank at some
# (tp1ep4, where a node holds two EP ranks to relay to); node's phases (dynamic, padded,
# pipelined) run on NCCL communicators of the EP group's intra- and inter-node groups, none on the
# EP one. Then --dispatch-dtype bf16,fp8 with
# --dedup node on tp1ep4 (H + 72: a last block of 72 values), dynamic, padded and pipelined: the
# relays unpack the packed rows they receive and pack the forwards again on the device, --check
# passes, and every rank's inter-node dispatch bytes in fp8 are its bf16 point's rows × (H +
# 4·⌈H/128⌉ + 8K) exactly. Needs -Dcudaemu=true (77 on a real CUDA
# build, whose ranks cannot be spread over namespaces this way); skips (77) where network
# namespaces cannot be created.
. "$(dirname "$0")/lib.sh"
[ -n "${CUDAEMU_DEVICES:-}" ] || { echo "not the CPU stand-in: skipped"; exit 77; }
export PATH="$PATH:/usr/sbin:/sbin"
command -v ip >/dev/null || { echo "SKIP: ip (iproute2) is not installed"; exit 77; }
EMU=$(cd "$(dirname "$0")/../.." && pwd)/ci/emucluster
NAME=gdn$$
cleanup() {
    "$EMU" down --name "$NAME" >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
emu_up "$EMU" "$NAME" --nodes 2 --ranks-per-node 2 --rate 0
H=${MOEPERF_GPU_HIDDEN:-1024} F=${MOEPERF_GPU_FFN:-512}
export CUDAEMU_DEVICES=2 # two GPUs per node
# the ranks run in the nodes' namespaces: the stand-in's and the sanitizers' settings go with them
pass=(-x CUDAEMU_DEVICES)
for v in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS CUDAEMU_SCHEDULE; do
    [ -z "${!v:-}" ] || pass+=(-x "$v")
done
"$EMU" run --name "$NAME" -- "${pass[@]}" "$BIN/moeperf-layer" --backend cuda --comm nccl \
    --model qwen3-30b-a3b --hidden "$H" --ffn "$F" --experts 16 --topk 4 --shared 1 \
    --layout tp1ep4,tp2ep2 --batch 24 --routing uniform,gate --placement contiguous,replicate-hot:2 \
    --dedup pair,rank,node --warmup 1 --iters 2 --check --timeout 300 --quiet \
    --out "$TMP/gpu" >/dev/null 2>"$TMP/err" ||
    fail "the GPU sweep across 2 nodes: exit $?: $(grep "^moeperf-layer:" "$TMP/err" | grep -v warning: |
        head -3)"
python3 - "$TMP/gpu" <<'PY' || fail "--dedup across nodes on the GPU path"
import csv, sys
key = ["layout", "routing", "placement", "dedup", "batch"]
rows = {tuple(r[k] for k in key): r for r in csv.DictReader(open(sys.argv[1] + "/layer.csv"))}
assert len(rows) == 24, sorted(rows)
nodes = {r["node"] for r in csv.DictReader(open(sys.argv[1] + "/layer_ranks.csv"))}
assert nodes == {"0", "1"}, ("the ranks are not on two nodes", nodes)
inter = {}
for k, r in rows.items():
    assert r["check_error"] != "" and float(r["check_error"]) <= 2e-2, (k, r["check_error"])
    inter.setdefault(k[:3], {})[k[3]] = float(r["bytes_internode"])
saved = 0
for k, b in inter.items():
    print(k, "bytes_internode", b)
    assert 0 < b["node"] <= b["rank"] < b["pair"], (k, b)
    saved += b["node"] < b["rank"]
assert saved, "node never sent fewer inter-node bytes than rank"
PY
# node's two phases on the NCCL communicators split from the EP one (the test hook
# MOEPERF_TEST_GROUPS counts each group's exchanges per rank): dynamic, padded and pipelined run
# every exchange on the intra-node and inter-node communicators of 2 ranks, none on the EP one of 4
for form in "--dispatch dynamic" "--dispatch padded:0.5" "--overlap 2"; do
    # shellcheck disable=SC2086
    "$EMU" run --name "$NAME" -- "${pass[@]}" -x MOEPERF_TEST_GROUPS=1 "$BIN/moeperf-layer" \
        --backend cuda --comm nccl --hidden 64 --ffn 32 --experts 16 --topk 4 --layout tp1ep4 \
        --batch 24 --routing uniform --dedup node $form --warmup 0 --iters 1 --check --timeout 300 \
        --quiet --out "$TMP/groups" --force >/dev/null 2>"$TMP/g.err" ||
        fail "node's phases on NCCL ($form): exit $?: $(grep "^moeperf-layer:" "$TMP/g.err" | head -3)"
    node_groups_ran "$TMP/g.err" "$form"
done
H8=$((H + 72))
for form in "--dispatch dynamic,padded" "--overlap 2"; do
    # shellcheck disable=SC2086 # $form is a list of arguments
    "$EMU" run --name "$NAME" -- "${pass[@]}" "$BIN/moeperf-layer" --backend cuda --comm nccl \
        --model qwen3-30b-a3b --hidden "$H8" --ffn "$F" --experts 16 --topk 4 --shared 1 \
        --layout tp1ep4 --batch 24 --routing uniform --dedup node $form \
        --dispatch-dtype bf16,fp8 --warmup 1 --iters 1 --check --timeout 300 --quiet \
        --out "$TMP/gpu-fp8-${form##* }" >/dev/null 2>"$TMP/err" ||
        fail "fp8 with --dedup node across 2 nodes ($form): exit $?: $(grep "^moeperf-layer:" \
            "$TMP/err" | grep -v warning: | head -3)"
done
python3 - "$H8" "$TMP/gpu-fp8-dynamic,padded" "$TMP/gpu-fp8-2" <<'PY' || fail "fp8 across nodes on the GPU path"
import csv, math, sys
H = int(sys.argv[1])
act, meta = 2 * H, 8 * 4                       # bf16 rows; K·(int32 id + float weight), K = 4
fp8 = H + 4 * math.ceil(H / 128)
moved = 0
for d in sys.argv[2:]:
    pts = {}
    for r in csv.DictReader(open(d + "/layer_ranks.csv")):
        k = (r["dispatch"], r["overlap"], r["rank"])
        pts.setdefault(k, {})[r["dispatch_dtype"]] = r
    for k, v in pts.items():
        x, y = v["bf16"], v["fp8"]
        rows = float(x["dispatch_bytes_internode"]) / (act + meta)
        assert rows == int(rows), (d, k, rows)
        assert float(y["dispatch_bytes_internode"]) == rows * (fp8 + meta), (d, k, rows, y)
        assert y["combine_bytes_internode"] == x["combine_bytes_internode"], (d, k)
        moved += rows > 0
assert moved, "no rank sent rows across the nodes"
print(f"fp8 across 2 nodes: {moved} ranks' inter-node rows at {fp8 + meta} bytes each")
PY
echo PASS
