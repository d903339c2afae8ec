#!/usr/bin/env bash
# sbatch-64gpu.sh - an example Slurm job: the first seed's sweep on 8 nodes × 8 GPUs (tp4ep16),
# one rank per GPU, NCCL over InfiniBand. Submit with: sbatch ci/sbatch-64gpu.sh
#SBATCH --job-name=moeperf-64gpu
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=00:30:00
#SBATCH --exclusive
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"

# the NCCL settings worth recording (moeperf copies every NCCL_* variable into run.json)
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export NCCL_IB_HCA=${NCCL_IB_HCA:-mlx5}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker}

OUT=runs/seed-k3-64gpu-$(date +%Y%m%d-%H%M)
srun --mpi=pmix --cpu-bind=cores build/bench/moeperf-layer \
    --backend cuda --comm nccl --model seed-k3 --layout tp4ep16 \
    --batch 1,16,32,64,128 --routing uniform,hot:4:15 --placement contiguous,replicate-hot:4 \
    --warmup 10 --iters 100 --timeout 300 --out "$OUT"
srun --mpi=pmix build/bench/moeperf-a2a --backend cuda --comm nccl --layout tp4ep16 \
    --bytes 1K:256M:x4 --iters 50 --out "$OUT-a2a"
build/reports/moeperf-report "$OUT" "$OUT-a2a" --out "$OUT/report.html"
echo "report: $OUT/report.html"
