#!/usr/bin/env bash
# One GPU session: the GPU tests, then the throughput, memory and profile benchmarks (synthetic data).
# Usage: OUT=<folder> bash benchmarks/gpu_session.sh [tests] [throughput] [memory] [profile] [grouped]
set -uo pipefail
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
for part in "$@"; do
  case $part in
    tests) python3 -m pytest -q -m gpu tests -s -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" ;;
    throughput) python3 -m benchmarks.throughput --num-envs 1 4 8 16 --out "$OUT" ;;
    memory) python3 -m benchmarks.memory --episodes 200 --num-envs 4 --out "$OUT" ;;
    profile) python3 -m benchmarks.profile_step --num-envs 1 8 --out "$OUT" ;;
    grouped) python3 -m benchmarks.grouped --num-envs 8 16 --out "$OUT" ;;
  esac
done
