#!/usr/bin/env bash
# ci_scripts.sh - the cluster scripts as shipped: the Slurm example parses, passes its cores on to
# srun (SRUN_CPUS_PER_TASK), places ranks in blocks, ends the step when a rank fails and sets no
# NCCL_IB_HCA default; ci/nccl-regress launches one rank per visible GPU on the cuda backend
# (CUDA_VISIBLE_DEVICES, else nvidia-smi -L) and 2 on the CPU path, seen through stand-in
# nvidia-smi and mpirun commands that only record what they were asked; ci/nccl-regress --out and
# ci/gpu-check's MOEPERF_GPU_OUT refuse (exit 2) a non-empty directory they did not write, and
# take an earlier output of theirs.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)

# ---- ci/sbatch-64gpu.sh ----
S=$SRC/ci/sbatch-64gpu.sh
bash -n "$S" || fail "ci/sbatch-64gpu.sh does not parse"
code=$(grep -v '^ *#' "$S")
! grep -q 'NCCL_IB_HCA' <<<"$code" ||
    fail "ci/sbatch-64gpu.sh sets NCCL_IB_HCA: $(grep NCCL_IB_HCA <<<"$code")"
grep -qE '^export SRUN_CPUS_PER_TASK=\$\{SLURM_CPUS_PER_TASK' <<<"$code" ||
    fail "ci/sbatch-64gpu.sh does not export SRUN_CPUS_PER_TASK from SLURM_CPUS_PER_TASK"
# every srun of the job (the SRUN array and any plain srun line) places in blocks and ends the
# step when a rank fails
sruns=$(grep -E '(^|[ (])srun ' <<<"$code")
[ -n "$sruns" ] || fail "ci/sbatch-64gpu.sh runs no srun"
while IFS= read -r l; do
    grep -q -- '--distribution=block:block' <<<"$l" ||
        fail "an srun without --distribution=block:block: $l"
    grep -qE -- '(-K1|--kill-on-bad-exit=1)( |\)|$)' <<<"$l" || fail "an srun without -K1: $l"
done <<<"$sruns"
echo "sbatch-64gpu.sh: parses; SRUN_CPUS_PER_TASK, block:block, -K1, no NCCL_IB_HCA"

# ---- ci/nccl-regress: how many ranks ----
mkdir -p "$TMP/bin" "$TMP/build/bench" "$TMP/build/reports" "$TMP/cpu/bench" "$TMP/cpu/reports"
for d in build cpu; do
    for b in bench/moeperf-layer bench/moeperf-a2a reports/moeperf-compare; do
        printf '#!/bin/sh\nexit 0\n' >"$TMP/$d/$b"
        chmod +x "$TMP/$d/$b"
    done
done
printf '#define HAVE_CUDA 1\n#define HAVE_NCCL 1\n' >"$TMP/build/config.h"
printf '#define HAVE_CUDA 0\n#define HAVE_NCCL 0\n' >"$TMP/cpu/config.h"
# nvidia-smi -L lists $FAKE_GPUS GPUs (none: fails, as without a driver)
cat >"$TMP/bin/nvidia-smi" <<'SH'
#!/bin/sh
[ "${FAKE_GPUS:-0}" -gt 0 ] || exit 9
i=0
while [ "$i" -lt "$FAKE_GPUS" ]; do echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)"; i=$((i + 1)); done
SH
# mpirun records its arguments and fails, so no sweep runs
cat >"$TMP/bin/mpirun" <<'SH'
#!/bin/sh
[ "$1" != --version ] || { echo "mpirun (Open MPI) 4.1.4"; exit 0; }
echo "$*" >>"$FAKE_LOG"
exit 1
SH
chmod +x "$TMP/bin/nvidia-smi" "$TMP/bin/mpirun"

# ranks EXPECTED BUILD GPUS [VISIBLE|-] [ARGS...]: the -np and backend nccl-regress launches with
ranks() {
    want=$1 build=$2 gpus=$3 vis=$4
    shift 4
    : >"$TMP/log"
    set +e
    if [ "$vis" = - ]; then
        env -u CUDA_VISIBLE_DEVICES PATH="$TMP/bin:$PATH" FAKE_GPUS="$gpus" FAKE_LOG="$TMP/log" \
            "$SRC/ci/nccl-regress" --self-test --repeats 1 --tools a2a --build "$TMP/$build" \
            --out "$TMP/out" "$@" >/dev/null 2>"$TMP/err"
    else
        env CUDA_VISIBLE_DEVICES="$vis" PATH="$TMP/bin:$PATH" FAKE_GPUS="$gpus" \
            FAKE_LOG="$TMP/log" \
            "$SRC/ci/nccl-regress" --self-test --repeats 1 --tools a2a --build "$TMP/$build" \
            --out "$TMP/out" "$@" >/dev/null 2>"$TMP/err"
    fi
    set -e
    np=$(grep -oE -- '-np [0-9]+' "$TMP/log" | head -1 | cut -d' ' -f2)
    backend=$(grep -oE -- '--backend [a-z]+' "$TMP/log" | head -1 | cut -d' ' -f2)
    [ "$np" = "$want" ] ||
        fail "nccl-regress ($build build, $gpus GPUs, CUDA_VISIBLE_DEVICES $vis $*): -np '$np'," \
            "expected $want: $(cat "$TMP/err")"
    echo "nccl-regress: $build build, $gpus GPUs, CUDA_VISIBLE_DEVICES $vis $*: $backend, -np $np"
}
ranks 8 build 8 -              # the cuda backend: one rank per GPU nvidia-smi lists
ranks 3 build 8 0,1,5          # ... or per entry of CUDA_VISIBLE_DEVICES
ranks 1 build 8 4
ranks 5 build 8 - --np 5       # --np still decides
ranks 2 build 0 -              # no GPU: the CPU path keeps 2 ranks
ranks 2 cpu 8 -                # a build without CUDA: likewise
[ "$backend" = cpu ] || fail "a build without CUDA ran the $backend backend"
set +e
env CUDA_VISIBLE_DEVICES= PATH="$TMP/bin:$PATH" FAKE_GPUS=2 FAKE_LOG="$TMP/log" \
    "$SRC/ci/nccl-regress" \
    --self-test --build "$TMP/build" --out "$TMP/out" >/dev/null 2>"$TMP/err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q -- '--np' "$TMP/err" ||
    fail "CUDA_VISIBLE_DEVICES empty on the cuda backend: exit $rc, expected 2 naming --np:" \
        "$(cat "$TMP/err")"

# ---- output directories: each run replaces its own, and refuses to remove anything else ----
mkdir -p "$TMP/mine"
echo precious >"$TMP/mine/notes.txt"
# out_status WHAT CMD...: CMD's exit status, its stderr in $TMP/err
out_status() {
    set +e
    env PATH="$TMP/bin:$PATH" FAKE_GPUS=0 FAKE_LOG="$TMP/log" "$@" >/dev/null 2>"$TMP/err"
    echo $?
    set -e
}
rc=$(out_status "$SRC/ci/nccl-regress" --self-test --repeats 1 --tools a2a --build "$TMP/cpu" --out "$TMP/mine")
[ "$rc" -eq 2 ] && grep -q -- "--out: '$TMP/mine' is not empty" "$TMP/err" ||
    fail "nccl-regress --out on a directory it did not write: exit $rc, expected 2: $(cat "$TMP/err")"
[ "$(cat "$TMP/mine/notes.txt" 2>/dev/null)" = precious ] || fail "nccl-regress removed a directory it did not write"
echo "nccl-regress --out on someone else's directory: $(cat "$TMP/err")"
# $TMP/out is the earlier runs' output above: taken again (the fake mpirun then fails: exit 1)
rc=$(out_status "$SRC/ci/nccl-regress" --self-test --repeats 1 --tools a2a --build "$TMP/cpu" --out "$TMP/out")
[ "$rc" -eq 1 ] && [ -f "$TMP/out/.nccl-regress-out" ] ||
    fail "nccl-regress --out on its own earlier output: exit $rc, expected 1 (the fake mpirun): $(cat "$TMP/err")"
rc=$(out_status env MOEPERF_GPU_OUT="$TMP/mine" "$SRC/ci/gpu-check")
[ "$rc" -eq 2 ] && grep -q "MOEPERF_GPU_OUT='$TMP/mine' is not empty" "$TMP/err" ||
    fail "gpu-check with MOEPERF_GPU_OUT on a directory it did not write: exit $rc, expected 2: $(cat "$TMP/err")"
[ "$(cat "$TMP/mine/notes.txt" 2>/dev/null)" = precious ] || fail "gpu-check removed a directory it did not write"
echo "gpu-check MOEPERF_GPU_OUT on someone else's directory: $(cat "$TMP/err")"
# an earlier output (its marker) and an empty directory are taken: without a GPU, exit 77
mkdir -p "$TMP/gpu-old" "$TMP/gpu-empty"
echo old >"$TMP/gpu-old/.gpu-check-out"
for d in gpu-old gpu-empty; do
    rc=$(out_status env MOEPERF_GPU_OUT="$TMP/$d" "$SRC/ci/gpu-check")
    [ "$rc" -eq 77 ] || fail "gpu-check with MOEPERF_GPU_OUT=$d: exit $rc, expected 77 (no GPU): $(cat "$TMP/err")"
done
echo PASS
