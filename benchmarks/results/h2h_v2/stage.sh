#!/usr/bin/env bash
# Before a session's device calls of device_call.sh, on a fresh checkout: lay out the ignored .stage as those calls
# read it. The state (.stage/h2h) is rebuilt from what is committed: the paused learners' files and the slices' logs
# from paused-state.tgz (collect.sh writes it after a session's last call, so a new checkout does not start the
# learners over) and every finished slice's seed<N>.json from this folder (the campaign skips a slice whose
# seed<N>.json exists). The shards go into .stage/d1, d2, d3, two per staging call (a call carries 64 MiB).
# Run from the repository's root on the commit the calls run, and again after any later commit: its hash goes to
# .stage/sha, which the slices record as their code.
# Usage: bash benchmarks/results/h2h_v2/stage.sh [CIFAR10_DIR]   (default ../shared/data/cifar10)
set -euo pipefail
shopt -s nullglob
data=${1:-../shared/data/cifar10} env=Esper-CIFAR10-v0 here=benchmarks/results/h2h_v2
if [ -n "$(git status --porcelain)" ]; then echo "commit first: .stage/sha names the code"; exit 1; fi
mkdir -p .stage
git rev-parse HEAD > .stage/sha
cp "$here/device_call.sh" .stage/call_h2h.sh
cp "$here/unpack_state.sh" .stage/unpack_state.sh
cp "$here/plan-learners.json" .stage/h2h_learners.json
cp "$here/plan-fixed.json" .stage/h2h_fixed.json
cp "benchmarks/results/screen/$env/summary.json" .stage/screen-v0-summary.json
rm -rf .stage/h2h
mkdir -p ".stage/h2h/$env"
if [ -e "$here/paused-state.tgz" ]; then tar xzf "$here/paused-state.tgz" -C .stage; fi
finished=0
for slice in "$here/$env"/*/seed*.json; do  # collect.sh commits no curve beside a slice
  folder=$(basename "$(dirname "$slice")")
  mkdir -p ".stage/h2h/$env/$folder"
  cp "$slice" ".stage/h2h/$env/$folder/"
  finished=$((finished + 1))
done
paused=$(find .stage/h2h \( -name '*.ckpt' -o -name '*.sb3.zip' \) | wc -l)
echo "state: $finished finished slices, $paused paused learners' checkpoints"
rm -rf .stage/d1 .stage/d2 .stage/d3
mkdir -p .stage/d1 .stage/d2 .stage/d3
cp "$data/train_0.npz" "$data/train_1.npz" .stage/d1/
cp "$data/train_2.npz" "$data/train_3.npz" .stage/d2/
cp "$data/train_4.npz" "$data/test.npz" "$data/README.md" "$data/SHA256SUMS" .stage/d3/
# What each call carries beside the tracked tree less benchmarks/results (moved aside while calling): a shard
# folder, or the state and the scripts. A call refuses more than 64 MiB.
bytes_of() {
  local total=0 path
  for path in "$@"; do total=$((total + $(du -sb "$path" | cut -f1))); done
  echo "$total"
}
tree=$(git ls-files -z | grep -zv '^benchmarks/results/' | du -cb --files0-from=- | tail -n 1 | cut -f1)
[ -d .whl ] || echo "no .whl: download the wheels before the first call"
for carried in ".stage/d1 .whl" .stage/d2 .stage/d3 ".stage/h2h .stage/*.sh .stage/*.json .stage/sha"; do
  # shellcheck disable=SC2086  # the list is split (and .stage/*.json globbed) on purpose
  bytes=$((tree + $(bytes_of $(ls -d $carried 2>/dev/null))))
  echo "a call carrying $carried: $((bytes / 1048576)) MiB"
  [ "$bytes" -lt $((64 * 1048576)) ] || { echo "over the 64-MiB carry limit"; exit 1; }
done
