#!/usr/bin/env bash
# GPU session for a slice of the head-to-head on real CIFAR-10.
# Usage: ESPER_DATA_DIR=<shards> [R=<results folder>] [SEEDS="0 1"] [BUDGET=4000] [AGENT='{...}'] [LABEL=...] \
#          bash benchmarks/gpu_compare.sh baselines|agent|maskable_flat|maskable_multidiscrete
# agent: the recipe that learned on Esper-Synthetic-v0 (benchmarks/results/agent_vs_random_gpu/summary.md) unless
# AGENT is given; LABEL names the results folder (esper_agent-<LABEL>, default esper_agent-no-bootstrap) so that
# recipes sit side by side (esper_agent/ holds the seeds trained before the truncation fix).
set -uo pipefail
: "${ESPER_DATA_DIR:?set ESPER_DATA_DIR to the folder with the CIFAR-10 shards}"
export PYTHONUNBUFFERED=1
R=${R:-benchmarks/results/compare}
RECIPE=$(cat benchmarks/agent_recipe.json)  # the agent recipe that learned on Esper-Synthetic-v0 (README)
case ${1:-baselines} in
  baselines)
    python3 -m benchmarks.compare_agents --env Esper-CIFAR10-Fast-v0 --arms static random heuristic --seeds 0 1 2 3 4 --out $R
    python3 -m benchmarks.compare_agents --env Esper-CIFAR10-v0 --arms static random heuristic --seeds 0 1 2 3 4 \
      --eval-episodes 4 --out $R ;;
  agent)
    python3 -m benchmarks.compare_agents --env Esper-CIFAR10-Fast-v0 --arms esper_agent --seeds ${SEEDS:-0} \
      --budget-epochs ${BUDGET:-4000} --out $R --label "${LABEL:-no-bootstrap}" --agent-kwargs "${AGENT:-$RECIPE}" ;;
  maskable_flat|maskable_multidiscrete)
    python3 -m benchmarks.compare_agents --env Esper-CIFAR10-Fast-v0 --arms "$1" --seeds ${SEEDS:-0} \
      --budget-epochs ${BUDGET:-4000} --out $R ;;
esac
