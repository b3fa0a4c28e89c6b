#!/usr/bin/env bash
# Device session for the head-to-head (real CIFAR-10 staged in /tmp/cifar10). Usage: bash benchmarks/gpu_compare.sh SLICE
set -uo pipefail
OUT=${OUT:-/tmp/out}
export ESPER_DATA_DIR=${ESPER_DATA_DIR:-/tmp/cifar10} PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=benchmarks/results/compare
case ${1:-baselines} in
  baselines)
    python3 -m benchmarks.compare_agents --env Esper-CIFAR10-Fast-v0 --arms static random heuristic --seeds 0 1 2 3 4 --out $R
    python3 -m benchmarks.compare_agents --env Esper-CIFAR10-v0 --arms static random heuristic --seeds 0 1 2 3 4 \
      --eval-episodes 4 --out $R ;;
  agent)
    python3 -m benchmarks.compare_agents --env Esper-CIFAR10-Fast-v0 --arms esper_agent --seeds ${SEEDS:-0} \
      --budget-epochs ${BUDGET:-4000} --out $R ;;
esac
tar czf "$OUT/compare.tgz" $R
