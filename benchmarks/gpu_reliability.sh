#!/usr/bin/env bash
# The GPU soak of the reliability issue: the PPO agent on real CIFAR-10 (Fast env, 8 sub-envs) with faults
# injected, for MINUTES (default 21) of wall time. Its report (faults survived, rollbacks, episodes, GPU memory
# against episodes) is rewritten at every memory sample, so a run cut short still leaves its numbers.
# Usage: ESPER_DATA_DIR=<shards> OUT=<folder> [MINUTES=21] [DEVICE=cuda] bash benchmarks/gpu_reliability.sh
set -uo pipefail
: "${ESPER_DATA_DIR:?set ESPER_DATA_DIR to the folder with the CIFAR-10 shards}"
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -m benchmarks.soak --minutes "${MINUTES:-21}" --device "${DEVICE:-cuda}" --fault-rate 0.01 --num-envs 8 \
  --env Esper-CIFAR10-Fast-v0 --policy agent --seed 0 --out "$OUT"
