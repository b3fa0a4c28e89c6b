#!/usr/bin/env bash
# GPU session: where does growing pay, and does the agent learn it?
#   screen: the growth screen (fixed policies, paired, no training) on real CIFAR-10, Esper-CIFAR10-Fast-v0,
#           one results file per config: the registered defaults and candidate hosts.
#   agent:  benchmarks.agent_vs_random on Esper-Synthetic-v0's two-block growth config with the env on the GPU
#           (the agent on one CPU thread per seed); by default the README's run: 5 seeds x 100 updates x 16
#           sub-envs of the recipe that learned; EXTRA='{"pbrs_weight": 0.05}' adds env kwargs.
#   groups: the plans at or below the heuristic's parameters on fast_d2w16_prune6, one group of arms per GPU at
#           once, each with static and the heuristic beside it so that every plan is paired with the heuristic
#           (README, "On the GPU, with 16 episodes and 24 plans"; about 5 min on 4 GPUs).
# Usage: ESPER_DATA_DIR=<shards> OUT=<folder> [ARMS="..."|per_slot] bash benchmarks/gpu_growth.sh screen [CONFIG...]
#        ESPER_DATA_DIR=<shards> OUT=<folder> bash benchmarks/gpu_growth.sh groups
#        OUT=<folder> [SEEDS="0 1 2 3 4"] [JOBS=5] [NUM_ENVS=16] [UPDATES=100] [EXTRA='{}'] [AGENT='{...}'] \
#          bash benchmarks/gpu_growth.sh agent
set -uo pipefail
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ARMS=${ARMS:-"static random heuristic grow_norm grow_attention grow_depthwise grow_conv_small grow_bottleneck
grow_conv_light grow_conv_heavy"}
declare -A CONFIGS=(
  [fast]='{"report_test_accuracy": true}'
  [fast_d2w16]='{"report_test_accuracy": true, "host_widths": [16, 32]}'
  [fast_b128]='{"report_test_accuracy": true, "batch_size": 128, "host_lr": 0.3}'
  # the head-to-head's config (compare_prune6) at the env's default price; with ARMS=per_slot: which plans of seeds
  # near the heuristic's parameters (3,206 there) beat its test accuracy, and what do they cost?
  [fast_d2w16_prune6]='{"report_test_accuracy": true, "host_widths": [16, 32], "min_prune_age": 6}'
)
# one blueprint per slot (slot 1 has 16 channels, slot 2 has 32); seed parameters in this order: 3,424 (the
# heuristic's set), 2,336, 3,712, 3,424, 1,520, 4,672, 5,760 and 23,232 (conv_heavy in both, as esper_agent grew)
PER_SLOT="static heuristic grow_conv_light+conv_small grow_conv_light+none grow_conv_light+depthwise \
grow_conv_light+bottleneck grow_depthwise+conv_small grow_conv_heavy+none grow_conv_heavy+conv_small grow_conv_heavy"
# the groups of `groups`: conv_light in slot 1 at six timings; conv_light with a small second seed; the cheap seeds
# in pairs; the cheap seeds alone (seed parameters 98-2,888; the heuristic adds about 3,300 here)
PLAN_GROUPS=(
  "grow_conv_light+none@3 grow_conv_light+none@4 grow_conv_light+none@5 grow_conv_light+none@6 grow_conv_light+none@8"
  "grow_conv_light+attention@5 grow_conv_light+norm@5 grow_conv_light+attention grow_attention+attention@5 \
grow_attention+attention grow_norm+norm@5"
  "grow_depthwise+depthwise@5 grow_bottleneck+bottleneck@5 grow_conv_small+conv_small@5 grow_depthwise+attention@5 \
grow_bottleneck+attention@5 grow_depthwise+none@5"
  "grow_none+conv_small@5 grow_none+bottleneck@5 grow_none+attention@5 grow_attention+none@5 \
grow_conv_small+attention@5 grow_depthwise+bottleneck@5 grow_conv_light+none@10"
)
D2W16='{"max_epochs": 10, "batch_size": 64, "host_widths": [16, 32], "host_lr": 0.2, "device": "cuda"}'
RECIPE=$(cat benchmarks/agent_recipe.json)  # the agent recipe that learned on Esper-Synthetic-v0 (README)
case ${1:-screen} in
  screen)
    : "${ESPER_DATA_DIR:?set ESPER_DATA_DIR to the folder with the CIFAR-10 shards}"
    [[ $ARMS == per_slot ]] && ARMS=$PER_SLOT
    shift
    for name in "${@:-fast}"; do
      [[ -n "${CONFIGS[$name]:-}" ]] || { echo "unknown config $name; expected one of ${!CONFIGS[*]}"; exit 2; }
      python3 -m benchmarks.growth_screen --env Esper-CIFAR10-Fast-v0 --device cuda --episodes 16 --arms $ARMS \
        --out "$OUT" --configs "$name=${CONFIGS[$name]}"
    done ;;
  groups)
    : "${ESPER_DATA_DIR:?set ESPER_DATA_DIR to the folder with the CIFAR-10 shards}"
    gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
    (( gpus > 0 )) || gpus=1
    for k in "${!PLAN_GROUPS[@]}"; do
      CUDA_VISIBLE_DEVICES=$((k % gpus)) OMP_NUM_THREADS=2 python3 -m benchmarks.growth_screen \
        --env Esper-CIFAR10-Fast-v0 --device cuda --episodes 16 --threads 2 --arms static heuristic ${PLAN_GROUPS[$k]} \
        --out "$OUT/group$k" --configs "fast_d2w16_prune6=${CONFIGS[fast_d2w16_prune6]}" > "$OUT/group$k.log" 2>&1 &
    done
    wait ;;
  agent)
    kwargs=$(python3 -c "import json, sys; print(json.dumps(json.loads(sys.argv[1]) | json.loads(sys.argv[2])))" \
      "$D2W16" "${EXTRA:-{\}}")
    python3 -m benchmarks.agent_vs_random --updates "${UPDATES:-100}" --seeds ${SEEDS:-0 1 2 3 4} \
      --jobs "${JOBS:-5}" --threads 1 --num-envs "${NUM_ENVS:-16}" --episodes 8 --device cpu --progress --stochastic \
      --extra-arms grow_depthwise --out "$OUT" --env-kwargs "$kwargs" --agent-config "${AGENT:-$RECIPE}" ;;
esac
