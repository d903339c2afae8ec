#!/usr/bin/env bash
# sbatch-64gpu.sh - an example Slurm job: the first seed's sweep on 8 nodes × 8 GPUs (tp4ep16),
# one rank per GPU, NCCL over InfiniBand. Submit with: sbatch ci/sbatch-64gpu.sh
# Ranks are placed in blocks (ranks 0-7 on the first node, so a TP group of 4 shares a node), each
# with its --cpus-per-task cores, and the step ends as soon as any rank fails (-K1).
#SBATCH --job-name=moeperf-64gpu
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=00:30:00
#SBATCH --exclusive
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
# srun no longer inherits --cpus-per-task from the job (Slurm 22.05 and later): pass it on
export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-12}

# the NCCL settings worth recording (moeperf copies every NCCL_* variable into run.json); NCCL
# finds the InfiniBand adapters itself: set NCCL_IB_HCA only to pick some of them on your cluster
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker}

OUT=runs/seed-k3-64gpu-$(date +%Y%m%d-%H%M)
SRUN=(srun --mpi=pmix --distribution=block:block --cpu-bind=cores -K1)
"${SRUN[@]}" build/bench/moeperf-layer \
    --backend cuda --comm nccl --model seed-k3 --layout tp4ep16 \
    --batch 1,16,32,64,128 --routing uniform,hot:4:15 --placement contiguous,replicate-hot:4 \
    --warmup 10 --iters 100 --timeout 300 --out "$OUT"
"${SRUN[@]}" build/bench/moeperf-a2a --backend cuda --comm nccl --layout tp4ep16 \
    --bytes 1K:256M:x4 --iters 50 --out "$OUT-a2a"
build/reports/moeperf-report "$OUT" "$OUT-a2a" --out "$OUT/report.html"
echo "report: $OUT/report.html"
