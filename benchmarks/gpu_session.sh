#!/usr/bin/env bash
# One device session: install the carried wheels, run the GPU tests, the throughput and memory benchmarks.
# Usage on the device machine: bash benchmarks/gpu_session.sh [tests] [throughput] [memory]
set -uo pipefail
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
for part in "$@"; do
  case $part in
    tests) python3 -m pytest -q -m gpu tests -s -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" ;;
    throughput) python3 -m benchmarks.throughput --num-envs 1 4 8 16 --out "$OUT" ;;
    memory) python3 -m benchmarks.memory --episodes 200 --num-envs 4 --out "$OUT" ;;
    profile) python3 -m benchmarks.profile_step --num-envs 1 8 --out "$OUT" ;;
  esac
done
