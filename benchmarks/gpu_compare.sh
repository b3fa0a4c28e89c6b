#!/usr/bin/env bash
# GPU session for slices of the head-to-head on real CIFAR-10 (benchmarks.compare_agents; slices are resumable).
# Usage: ESPER_DATA_DIR=<shards> [R=<results folder>] [SEEDS="0 1"] [BUDGET=4000] [NUM_ENVS=8] [EVAL=8] [TIME_LIMIT=s] [EVAL_SAMPLED=1] \
#          [ENV_KWARGS='{}'] \
#          [AGENT='{...}'] [LABEL=...] bash benchmarks/gpu_compare.sh baselines|agent|maskable_flat|maskable_multidiscrete
#        ... [ARMS="esper_agent maskable_flat ..."] [GPU_OFFSET=0] bash benchmarks/gpu_compare.sh spread
# agent: the recipe that learned on Esper-Synthetic-v0 (benchmarks/results/agent_vs_random_gpu/summary.md) unless
# AGENT is given; LABEL names the results folder (esper_agent-<LABEL>, default esper_agent-no-bootstrap) so that
# recipes sit side by side (esper_agent/ holds the seeds trained before the truncation fix).
# spread: the whole campaign at once on one host: every (learning arm, seed) is its own process, dealt round-robin
# over the visible GPUs (the env steps on the GPU, the policies learn on the CPU); static/random/heuristic first,
# also one process per seed, then the learning arms. Logs go to $R/logs. The esper_agent folder is
# esper_agent[-LABEL] (no label by default). Slices are resumable: rerunning skips the (arm, seed) pairs done.
# Every process holds its own copy of the data and its sub-envs' hosts and CUDA graphs on its GPU: on
# Esper-CIFAR10-v0 with 8 sub-envs 15-26 GiB each, so 7 and 8 of them on two 140 GiB H200s ran out of memory
# (README, session 18); there, deal at most 5 per GPU (5 x 26 GiB fits; fewer SEEDS or ARMS per run, or GPUS).
# GPU_OFFSET: the GPU the first process goes to, so that a second spread beside a running one starts on the GPUs
# the first one loads least.
# GPUS: the GPU of each process in turn, in the order (arm, seed) are dealt, e.g. GPUS="0 0 1 1 2" for five seeds
# (repeated from its start if shorter): for loads that round-robin spreads badly; overrides GPU_OFFSET.
# EVAL_SAMPLED=1 (any other value: off): learning arms also play the evaluation episodes with sampled actions
# (compare_agents --eval-sampled; the report's "(sampled actions)" rows).
# TIME_LIMIT: seconds of training in this run (a continued slice gets as many again) after which each learning
# slice stops at the next update boundary, so that a budget longer than one session's device time goes on in the
# next session. Every learning slice saves its state in $R after each update anyway (compare_agents), so a run cut
# short continues too: commit $R with its saved states, copy it back to the same $R on the GPU machine, and run the
# same command again.
set -uo pipefail
: "${ESPER_DATA_DIR:?set ESPER_DATA_DIR to the folder with the CIFAR-10 shards}"
export PYTHONUNBUFFERED=1
R=${R:-benchmarks/results/compare}
ENV_ID=${ENV_ID:-Esper-CIFAR10-Fast-v0}
RECIPE=$(cat benchmarks/agent_recipe.json)  # the agent recipe that learned on Esper-Synthetic-v0 (README)

compare() {  # compare <arms> <seeds> [extra args...]: one compare_agents process on this script's settings
  local arms=$1 seeds=$2 sampled=()
  shift 2
  [[ ${EVAL_SAMPLED:-0} == 1 ]] && sampled=(--eval-sampled)
  python3 -m benchmarks.compare_agents --env "$ENV_ID" --env-kwargs "${ENV_KWARGS:-{\}}" --arms $arms \
    --seeds $seeds --num-envs "${NUM_ENVS:-8}" --budget-epochs "${BUDGET:-4000}" --eval-episodes "${EVAL:-8}" \
    ${TIME_LIMIT:+--time-limit-s "$TIME_LIMIT"} "${sampled[@]}" --out "$R" "$@"
}

deal() {  # deal <arms...>: every (arm, seed) its own process, round-robin over the visible GPUs; wait for all
  local gpus k=${GPU_OFFSET:-0} arm seed seeds_of_job order gpu
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  (( gpus > 0 )) || gpus=1
  read -ra order <<< "${GPUS:-}"
  mkdir -p "$R/logs"
  for arm in "$@"; do
    read -ra seeds_of_job <<< "${SEEDS:-0 1 2 3 4}"
    local extra=() folder=$arm
    if [[ $arm == esper_agent ]]; then
      extra=(--agent-kwargs "${AGENT:-$RECIPE}" --agent-device cpu --label "${LABEL:-}")
      folder=$arm${LABEL:+-$LABEL}
    fi
    for seed in "${seeds_of_job[@]}"; do
      gpu=$((k % gpus))
      (( ${#order[@]} == 0 )) || gpu=${order[$(( (k - ${GPU_OFFSET:-0}) % ${#order[@]} ))]}
      CUDA_VISIBLE_DEVICES=$gpu OMP_NUM_THREADS=${THREADS:-2} \
        compare "$arm" "$seed" "${extra[@]}" > "$R/logs/$folder-$seed.log" 2>&1 &
      k=$((k + 1))
    done
  done
  echo "spread: $((k - ${GPU_OFFSET:-0})) processes over $gpus GPU(s): $*"
  wait
}

spread() {  # the fixed policies first (a minute), then the learning arms: all at once ran a heuristic out of memory
  local arm fixed=() learning=()
  for arm in ${ARMS:-esper_agent maskable_flat maskable_multidiscrete static random heuristic}; do
    case $arm in static|random|heuristic) fixed+=("$arm") ;; *) learning+=("$arm") ;; esac
  done
  (( ${#fixed[@]} == 0 )) || deal "${fixed[@]}"
  (( ${#learning[@]} == 0 )) || deal "${learning[@]}"
}

case ${1:-baselines} in
  baselines)
    ENV_ID=Esper-CIFAR10-Fast-v0 compare "static random heuristic" "0 1 2 3 4"
    ENV_ID=Esper-CIFAR10-v0 compare "static random heuristic" "0 1 2 3 4" --eval-episodes 4 ;;
  agent)
    compare esper_agent "${SEEDS:-0}" --label "${LABEL:-no-bootstrap}" --agent-kwargs "${AGENT:-$RECIPE}" ;;
  maskable_flat|maskable_multidiscrete)
    compare "$1" "${SEEDS:-0}" ;;
  spread)
    spread ;;
  *)
    echo "unknown mode $1; expected baselines, agent, maskable_flat, maskable_multidiscrete or spread"; exit 2 ;;
esac
