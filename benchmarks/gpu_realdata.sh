#!/usr/bin/env bash
# Device session with real CIFAR-10 staged in /tmp/cifar10 (see README "Running on a GPU").
set -uo pipefail
OUT=${OUT:-/tmp/out}
export ESPER_DATA_DIR=${ESPER_DATA_DIR:-/tmp/cifar10} PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
(cd /tmp/cifar10 && ls -la)
python3 -m pytest -q -m "gpu or realdata" tests -s -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -15
python3 -m benchmarks.host_alone --seeds 4 --lrs 0.05 0.1 0.2 --out "$OUT"
python3 -m esper_agent.train --env Esper-CIFAR10-Fast-v0 --num-envs 8 --device cuda --total-updates 3 \
  --run-dir /tmp/agent_timing 2>&1 | tail -5
cp /tmp/agent_timing/metrics.jsonl "$OUT/agent_timing_metrics.jsonl"
