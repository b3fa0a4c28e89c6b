#!/usr/bin/env bash
# One device call: the trained policies of a pilot's finished Esper-CIFAR10-v0 slices and the static seedling play
# one hidden condition alone, the same reset seeds each (one episode per sub-env), read by
# benchmarks.studies.condition_read. Staging as for call_replay.sh (benchmarks/results/replay_pilot/calls/): data in
# .stage/cifar, the commit in .stage/sha, this script in .stage/; the policies are where call_replay.sh left them
# (.stage/replay/Esper-CIFAR10-v0/esper_agent-LABEL/seed<k>-trained.ckpt) or in its trained.tgz, carried in as
# .stage/trained.tgz on a fresh machine. Usage:
# [CONDITION=pool5k-noise40] [EPISODES=12] [RESET_SEED=1000003] [RUN_LIMIT_S=540] bash .stage/call_condition.sh LABEL
# Writes .stage/condition/LABEL/CONDITION/: static.{md,json,log}, seed<k>.{md,json,log}, the reports (report.md,
# episodes.json), read.md, provenance.txt and gpu.log, and hands them back packed as $OUT/condition.tgz (unpacks to
# LABEL/CONDITION/), with read.md beside it: the device returns at most 8 files from $OUT. The runs play side by
# side; each is cut at RUN_LIMIT_S (its results are written only at its end). Exits non-zero if any run failed; the
# read then covers the runs that finished.
set -u
[[ $# -eq 1 ]] || { echo "expected one label, e.g. e3-defer-v0"; exit 2; }
export ESPER_DATA_DIR=$PWD/.stage/cifar PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
[[ -f .stage/trained.tgz ]] && tar xzf .stage/trained.tgz -C .stage
cond=${CONDITION:-pool5k-noise40} n=${EPISODES:-12} reset_seed=${RESET_SEED:-1000003} limit=${RUN_LIMIT_S:-540}
dir=.stage/condition/$1/$cond
rm -rf "$dir"  # .stage outlives a call: an earlier read must not pass for this one
mkdir -p "$dir" "$OUT"
# on every exit, the results go back in one tarball (a run that failed leaves its log)
pack() {
  tar czf "$OUT/condition.tgz" -C .stage/condition "$1/$cond"
  [[ ! -f "$dir/read.md" ]] || cp "$dir/read.md" "$OUT/"
}
trap 'pack "$1"' EXIT
shopt -s nullglob
policies=(.stage/replay/Esper-CIFAR10-v0/"esper_agent-$1"/seed*-trained.ckpt)
[[ ${#policies[@]} -gt 0 ]] || { echo "no trained policies in .stage/replay/Esper-CIFAR10-v0/esper_agent-$1"; exit 2; }
{ echo "label $1, condition $cond, $n episodes from reset seed $reset_seed"; echo "code $(cat .stage/sha)"
  nvidia-smi -L; } > "$dir/provenance.txt"
# the head-to-head's evaluation settings (benchmarks.h2h_arms): test accuracy is reported at each episode's end
kwargs="{\"condition\": \"$cond\", \"autoreset_mode\": \"SameStep\", \"report_test_accuracy\": true}"
common=(--env Esper-CIFAR10-v0 --env-kwargs "$kwargs" --num-envs "$n" --episodes "$n" --seed "$reset_seed"
        --device cuda)
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -l 30 > "$dir/gpu.log" &
mon=$!
play() {  # NAME ARGS...: one evaluation run, its results beside its log
  local name=$1; shift
  timeout "$limit" python -m esper_agent.evaluate "$@" "${common[@]}" --output "$dir/$name.md" \
      --report-dir "$dir/$name.eval" > "$dir/$name.log" 2>&1
}
play static --policy static &
names=(static) pids=($!)
for ckpt in "${policies[@]}"; do
  name=$(basename "$ckpt" -trained.ckpt)
  play "$name" --checkpoint "$ckpt" &
  names+=("$name") pids+=($!)
done
wait "${pids[@]}"
kill $mon
tail -n 3 "$dir"/*.log
rm -f "$dir"/*.eval/*.png  # the timelines (episodes.json) and report.md stay
runs=() failed=()
for name in "${names[@]}"; do
  if [[ -f "$dir/$name.json" ]]; then runs+=("$dir/$name.json"); else failed+=("$name"); fi
done
[[ ${#failed[@]} -eq 0 ]] || echo "no results from: ${failed[*]} (see their .log in $dir)"
[[ -f "$dir/static.json" && ${#runs[@]} -ge 2 ]] || { echo "nothing to read: needs the seedling and a policy"; exit 1; }
python -m benchmarks.studies.condition_read "${runs[@]}" --out "$dir/read.md" && cat "$dir/read.md" &&
  [[ ${#failed[@]} -eq 0 ]]
