#!/usr/bin/env bash
# One device call of the replay pilot (and the deferred-keep pilot) on Esper-CIFAR10-Fast-v0's tuning seeds 100 and 101: esper_agent-e3-replay8
# trained and evaluated exactly as the head-to-head's sweep trained esper_agent-e3 (benchmarks/results/h2h_v2_sweep),
# side by side, as resumable slices in .stage/replay (kept on the machine between back-to-back calls). Usage:
# [ENV_ID=Esper-CIFAR10-Fast-v0] [SEEDS="100 101"] [EVAL_RESERVE_S=150] bash .stage/call_replay.sh LIMIT_S [LABEL EXTRA_KWARGS] (EXTRA_KWARGS '' runs e3 itself; each slice pauses at the first update after which another would pass LIMIT_S).
# A paused slice's training state goes back in $OUT/paused.tgz; carried in as .stage/paused.tgz, it continues on a
# fresh machine (a later session): the slices resume across machines, not only between back-to-back calls.
# Finished slices' trained policies go back in $OUT/trained.tgz. Before committing a returned paused.tgz over the
# last one: python -m benchmarks.studies.paused_progress <it> --against <the committed one> (refuses a step back).
# ENV_ID=Esper-CIFAR10-v0 trains on the primary env (same budget and evaluation as the head-to-head); with several
# GPUs, the seeds take them in turn from GPU_OFFSET (default 0). Two configurations at once on a 4-GPU machine,
# each with its own $OUT subfolder (each call's paused.tgz then holds both configurations' paused slices):
#   OUT=$OUT/a bash .stage/call_replay.sh 585 e3-defer-v0 '"defer_keep": true' &
#   sleep 10; OUT=$OUT/b GPU_OFFSET=2 bash .stage/call_replay.sh 585 e3-v0 ''; wait   (the first unpacks paused.tgz)
# The paused.tgz written last then holds both configurations' newest state: commit that one, checked with
# paused_progress <it> --against <the other>.
set -u
[[ $1 =~ ^[0-9]+$ ]] || { echo "expected whole seconds, got '$1'"; exit 2; }
export ESPER_DATA_DIR=$PWD/.stage/cifar ESPER_GIT_COMMIT=$(cat .stage/sha) ESPER_GIT_DIRTY=0
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
E3='"learning_rate": 0.001, "wait_prior": 1.0, "prune_prior": 2.0, "seed_group_size": 4, "entropy_floor": 0.1'
if [[ $# -ge 3 && -z $3 ]]; then KW="{$E3}"  # an empty third argument: e3 itself (a same-card rerun)
else KW="{$E3, ${3:-\"replay_rollouts\": 8, \"target_kl\": 0.0}}"; fi
LABEL=${2:-e3-replay8}
mkdir -p .stage/replay/logs "$OUT"
# once per machine: a later call on the same machine carries the same tarball, older than the state it left
if [[ -f .stage/paused.tgz && ! -f .stage/replay/.unpacked ]]; then
  tar xzf .stage/paused.tgz -C .stage && touch .stage/replay/.unpacked && echo "resumed: $(tar tzf .stage/paused.tgz | tr '\n' ' ')"
fi
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -l 30 > "$OUT/gpu.log" &
mon=$!
pids=()
gpus=$(nvidia-smi -L | wc -l)
i=0
for s in ${SEEDS:-100 101}; do
  # here, not in the command's prefix: a background job expands that in its own subshell
  gpu=$(((${GPU_OFFSET:-0} + i++) % gpus))
  echo "== $(date -u +%FT%T) $KW limit $1" >> .stage/replay/logs/esper_agent-$LABEL-$s.log
  CUDA_VISIBLE_DEVICES=$gpu python -m benchmarks.compare_agents --env "${ENV_ID:-Esper-CIFAR10-Fast-v0}" --env-kwargs '{}' --budget-epochs 8000 \
      --eval-episodes 24 --eval-sampled --time-limit-s "$1" --eval-reserve-s "${EVAL_RESERVE_S:-150}" --agent-kwargs "$KW" \
      --label $LABEL --arms esper_agent --seeds $s --keep-policy --out .stage/replay \
      >> .stage/replay/logs/esper_agent-$LABEL-$s.log 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
kill $mon
tail -n 6 .stage/replay/logs/*.log
tail -n 3 "$OUT/gpu.log"
tar czf "$OUT/replay.tgz" --exclude="*.ckpt" --exclude="*.png" --exclude="*.pt" --exclude=.unpacked -C .stage replay
(cd .stage && find replay -name 'seed*.ckpt' ! -name "*-trained.ckpt" | tar czf "$OUT/paused.tgz" -T -)  # slices still training
# finished slices' policies (--keep-policy), to play again on one hidden condition (esper_agent.evaluate)
(cd .stage && find replay -name 'seed*-trained.ckpt' | tar czf "$OUT/trained.tgz" -T -)
ls -la "$OUT"
