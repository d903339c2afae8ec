#!/usr/bin/env bash
# gpu_nvtx.sh - the NVTX ranges an Nsight Systems trace shows (docs/cluster.md): on the stand-in,
# whose ranges each rank logs (CUDAEMU_NVTX_LOG), every rank opens one range per point named
# "moeperf/point" and the point's key, whose cells are its layer.csv row's, with the phases nested
# in it (route, notify, dispatch, ffn, tp-reduce, combine per iteration, warm-up included), every
# range closed. Needs -Dcudaemu=true (exits 77 on a build with the real CUDA and NCCL).
. "$(dirname "$0")/lib.sh"
"$BIN/moeperf-layer" --version >/dev/null
[ -n "${CUDAEMU_DEVICES:-}" ] || { echo "not the CPU stand-in: skipped"; exit 77; }
CUDAEMU_NVTX_LOG=$TMP/nvtx mpi 2 "$BIN/moeperf-layer" --backend cuda --comm nccl \
    --hidden 128 --ffn 64 --experts 8 --topk 2 --batch 7,16 --routing uniform,hot:2:15 \
    --dedup pair,rank --warmup 1 --iters 2 --quiet --out "$TMP/run" || fail "moeperf-layer exit $?"
python3 - "$TMP" <<'PY' || fail "the NVTX ranges do not match the points"
import csv, glob, sys
tmp = sys.argv[1]
rows = list(csv.DictReader(open(f"{tmp}/run/layer.csv", newline="")))
logs = sorted(glob.glob(f"{tmp}/nvtx.*"))
assert len(logs) == 2, logs
want = []
for r in rows:  # the key as the progress line names it: dedup only where it is not pair
    dedup = f" dedup {r['dedup']}" if r["dedup"] != "pair" else ""
    want.append(f"moeperf/point layout {r['layout']} routing {r['routing']} placement "
                f"{r['placement']} overlap {r['overlap']} dispatch {r['dispatch']}{dedup} "
                f"batch {r['batch']}")
phases = ["moeperf/route", "moeperf/dispatch", "moeperf/ffn", "moeperf/tp-reduce", "moeperf/combine"]
for log in logs:
    stack, points, inner = [], [], {}
    for line in open(log):
        kind, level, *name = line.rstrip("\n").split(" ", 2)
        if kind == "push":
            assert int(level) == len(stack), (log, line)
            stack.append(name[0])
            if len(stack) == 1:
                points.append(name[0])
                inner[name[0]] = []
            elif len(stack) == 2:
                inner[points[-1]].append(name[0])
        else:
            assert int(level) == len(stack) - 1, (log, line)
            stack.pop()
    assert not stack, f"{log}: ranges left open: {stack}"
    assert points == want, f"{log}: {points} != {want}"
    for p, names in inner.items():  # 3 iterations (1 warm-up, 2 timed), each phase once or more
        for ph in phases:
            assert names.count(ph) >= 3, (log, p, ph, names.count(ph))
print(f"{len(logs)} ranks: {len(want)} point ranges each, phases nested, every range closed")
PY
echo PASS
