#!/usr/bin/env bash
# GPU session on real CIFAR-10: GPU and real-data tests, host-alone accuracy, agent update vs rollout timing.
# Usage: ESPER_DATA_DIR=<shards> OUT=<folder> bash benchmarks/gpu_realdata.sh
set -uo pipefail
: "${ESPER_DATA_DIR:?set ESPER_DATA_DIR to the folder with the CIFAR-10 shards}"
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pytest -q -m "gpu or realdata" tests -s -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -15
python3 -m benchmarks.host_alone --seeds 4 --lrs 0.2 0.4 0.6 --out "$OUT"
RUN=$(mktemp -d)
python3 -m esper_agent.train --env Esper-CIFAR10-Fast-v0 --num-envs 8 --device cuda --total-updates 3 \
  --run-dir "$RUN" 2>&1 | tail -5
cp "$RUN/metrics.jsonl" "$OUT/agent_timing_metrics.jsonl"
