#!/usr/bin/env bash
# ci_scripts.sh - the cluster scripts as shipped: the Slurm example parses, passes its cores on to
# srun (SRUN_CPUS_PER_TASK), places ranks in blocks, ends the step when a rank fails and sets no
# NCCL_IB_HCA default; ci/nccl-regress launches one rank per visible GPU on the cuda backend
# (CUDA_VISIBLE_DEVICES, else nvidia-smi -L) and 2 on the CPU path, seen through stand-in
# nvidia-smi and mpirun commands that only record what they were asked.
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
echo PASS
