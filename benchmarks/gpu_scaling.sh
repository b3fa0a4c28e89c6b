#!/usr/bin/env bash
# Agent training on 1 vs 2 GPUs with torchrun (and one process over both GPUs with devices=[...]).
# Real CIFAR-10 (Esper-CIFAR10-Fast-v0) when ESPER_DATA_DIR is set, else synthetic CIFAR-shaped data with the same
# step (10k training images per sub-env epoch, 2k validation). About 3 minutes on two H100s.
# Usage: [ESPER_DATA_DIR=<shards>] OUT=<folder> bash benchmarks/gpu_scaling.sh
# Writes $OUT/scaling-<gpu>.json, $OUT/scaling-<gpu>.md and $OUT/scaling.log.
set -euo pipefail
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off (esper_agent.distributed says why)
fail() { echo "gpu_scaling.sh: $*" >&2; exit 1; }
command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: this script needs a machine with NVIDIA GPUs"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0], 'nccl', \
torch.cuda.nccl.version() if torch.cuda.is_available() else None)"
GPUS=$(python3 -c "import torch; print(torch.cuda.device_count())")
[ "$GPUS" -ge 2 ] || fail "needs 2 CUDA devices; torch sees $GPUS (check CUDA_VISIBLE_DEVICES)"
if [ -n "${ESPER_DATA_DIR:-}" ]; then
  [ -d "$ESPER_DATA_DIR" ] || fail "ESPER_DATA_DIR=$ESPER_DATA_DIR is not a folder"
  ENV=Esper-CIFAR10-Fast-v0
  KWARGS='{}'
else
  ENV=Esper-Synthetic-v0
  KWARGS='{"synthetic_train_size": 45000, "synthetic_val_size": 5000, "synthetic_test_size": 1000,
           "synthetic_image_size": 32, "train_images_per_epoch": 10000, "val_images": 2000}'
fi
echo "env $ENV"
START=$SECONDS
python3 -m benchmarks.scaling --nproc 1 2 --single-process-devices --env "$ENV" --env-kwargs "$KWARGS" \
  --num-envs 8 --device cuda --warmup 1 --updates 3 --timeout 300 --out "$OUT" 2>&1 | tee "$OUT/scaling.log"
echo "gpu_scaling.sh: done in $((SECONDS - START)) s; results in $OUT/scaling-*.md"
