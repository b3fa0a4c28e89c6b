#!/usr/bin/env bash
# One device call: the trained policies of finished pilot slices (call_replay.sh's trained.tgz, carried in as
# .stage/trained.tgz) and the static seedling play one hidden condition alone on Esper-CIFAR10-v0, the same reset
# seeds each (one episode per sub-env), read by benchmarks.studies.condition_read. Usage, on a machine staged as
# call_replay.sh's header says:
# [CONDITION=pool5k-noise40] [EPISODES=16] [SEED=1000003] bash .stage/call_condition.sh LABEL
# LABEL names the slices' folder (e3-defer-v0: .stage/replay/Esper-CIFAR10-v0/esper_agent-e3-defer-v0). Writes
# $OUT/<condition>/{static,seed<k>}.{md,json}, read.md and the evaluation logs.
set -u
[[ $# -eq 1 ]] || { echo "expected one label, e.g. e3-defer-v0"; exit 2; }
export ESPER_DATA_DIR=$PWD/.stage/cifar PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
[[ -f .stage/trained.tgz ]] && tar xzf .stage/trained.tgz -C .stage
cond=${CONDITION:-pool5k-noise40}; n=${EPISODES:-16}; seed=${SEED:-1000003}
dir="$OUT/$cond"; mkdir -p "$dir"
# the head-to-head's evaluation settings (benchmarks.h2h_arms): test accuracy is reported at each episode's end
kwargs="{\"condition\": \"$cond\", \"autoreset_mode\": \"SameStep\", \"report_test_accuracy\": true}"
common=(--env Esper-CIFAR10-v0 --env-kwargs "$kwargs" --num-envs "$n" --episodes "$n"
        --seed "$seed" --device cuda)
shopt -s nullglob
policies=(.stage/replay/Esper-CIFAR10-v0/esper_agent-$1/seed*-trained.ckpt)
[[ ${#policies[@]} -gt 0 ]] || { echo "no trained policies under .stage/replay/Esper-CIFAR10-v0/esper_agent-$1"; exit 2; }
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -l 30 > "$dir/gpu.log" &
mon=$!
python -m esper_agent.evaluate --policy static "${common[@]}" --output "$dir/static.md" \
    --report-dir "$dir/static.eval" > "$dir/static.log" 2>&1 &
pids=($!) runs=("$dir/static.json")
for ckpt in "${policies[@]}"; do
  name=$(basename "$ckpt" -trained.ckpt)
  python -m esper_agent.evaluate --checkpoint "$ckpt" "${common[@]}" --output "$dir/$name.md" \
      --report-dir "$dir/$name.eval" > "$dir/$name.log" 2>&1 &
  pids+=($!) runs+=("$dir/$name.json")
done
wait "${pids[@]}"
kill $mon
tail -n 3 "$dir"/*.log
python -m benchmarks.studies.condition_read "${runs[@]}" --out "$dir/read.md"
rm -f "$dir"/*.eval/*.png  # the timelines (episodes.json) and report.md stay
