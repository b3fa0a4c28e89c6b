#!/usr/bin/env bash
# One device call of the head-to-head's final runs on Esper-CIFAR10-v0 (benchmarks/results/h2h_v2/DECLARED.md):
# the learners (.stage/h2h_learners.json, seed-major: seed 0 of every learner first) and the fixed arms
# (.stage/h2h_fixed.json) as two campaigns side by side, so fixed arms progress while learners train. State in
# .stage/h2h (carry it to a fresh machine), back as $OUT/h2h-small.tgz.part-* and $OUT/h2h-ckpt.tgz.part-*.
# How it runs there: stage.sh copies this file, plan-learners.json and plan-fixed.json to .stage/ (call_h2h.sh,
# h2h_learners.json, h2h_fixed.json) with screen/Esper-CIFAR10-v0/summary.json as .stage/screen-v0-summary.json,
# the commit to .stage/sha and the CIFAR-10 shards to .stage/d1-d3, since a call carries 64 MiB and
# benchmarks/results does not fit. The shards take three calls (two 27-MiB shards each, with the .whl wheels in the
# first), moved to .stage/cifar there; the state (.stage/h2h, the paused learners' checkpoints) goes with the first
# run call. Carry .stage/sha on every run call: the slices record it as their code. The state comes back as 15-MiB parts (a file back from $OUT may hold 16 MiB); after the session's last
# call, bash benchmarks/results/h2h_v2/collect.sh /work/.device/<call> unpacks them, copies the finished slices into
# this folder and writes paused-state.tgz; commit both.
# Usage: bash .stage/call_h2h.sh END_S LEARNERS_PER_GPU FIXED_PER_GPU EVAL_RESERVE_S [FIXED_RESERVE_S]
# (the reserves: a learner's whole evaluation, 48 episodes; a fixed arm's, 24, which defaults to the first).
# LEARNERS_PER_GPU 0 runs the fixed arms alone: for a session's last minutes, too few for a learner's reserve.
set -u
for n in "$1" "$2" "$3" "$4" "${5:-$4}"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "expected whole seconds and process counts, got '$n'"; exit 2; }
done
# A fresh machine (the last call's was given back) has neither: it must return no state, which collect.sh would
# otherwise weigh against the last good one.
if ! [ -f .stage/cifar/test.npz ] || ! [ -d .stage/h2h ]; then
  echo "no .stage/cifar/test.npz or .stage/h2h on this machine: stage it again from the last call's state" \
       "(bash .stage/unpack_state.sh <the last call's returned folder> here, then the staging calls)"; exit 2
fi
export ESPER_DATA_DIR=$PWD/.stage/cifar ESPER_GIT_COMMIT=$(cat .stage/sha) ESPER_GIT_DIRTY=0
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
stop=$(( $(date +%s) + $1 ))
common="--env Esper-CIFAR10-v0 --eval-episodes 24 --out .stage/h2h --threads 3 --stop-at $stop --stop-margin-s 60"
nvidia-smi --query-gpu=timestamp,index,memory.used,utilization.gpu --format=csv,noheader -l 60 > "$OUT/gpu.log" &
mon=$!
# The learners' campaign is killed 30 s after END_S: a step begun within its limit (END_S less the 60-s margin)
# may run longer than the last; the call's whole wall time, END_S + 30 s and the packing, must stay under 600 s.
if [ "$2" -gt 0 ]; then
  timeout $(( $1 + 30 )) python -m benchmarks.campaign --plan .stage/h2h_learners.json $common --budget-epochs 8000 \
      --eval-sampled --per-gpu "$2" --eval-reserve-s "$4" > "$OUT/learners.log" 2>&1 &
  learners=$!
fi
fixed_rc=0
if [ "$3" -gt 0 ]; then
  timeout $(( $1 + 5 )) python -m benchmarks.campaign --plan .stage/h2h_fixed.json $common --per-gpu "$3" \
      --eval-reserve-s "${5:-$4}" --oracle-from .stage/screen-v0-summary.json > "$OUT/fixed.log" 2>&1
  fixed_rc=$?
fi
learners_rc=0
if [ -n "${learners:-}" ]; then wait "$learners"; learners_rc=$?; fi
kill $mon
tail -n 12 "$OUT/learners.log" 2>/dev/null; tail -n 12 "$OUT/fixed.log" 2>/dev/null
# Each slice's progress; a finished slice's last line holds its results, masked: the read is declared for when
# every slice is in (DECLARED.md), not call by call.
for f in .stage/h2h/logs/*/*.log; do
  echo "$f: $(tail -n 1 "$f" | sed -E 's/: test accuracy .*/: done (results masked until the read)/')"
done
cat "$OUT/gpu.log"
tar cz --exclude='*.ckpt' --exclude='*.pkl' --exclude='*.zip' --exclude='*.png' -C .stage h2h \
    | split -b 15M - "$OUT/h2h-small.tgz.part-"
(cd .stage && find h2h \( -name '*.ckpt' -o -name '*.pkl' -o -name '*.zip' -o -name '*.curve.json' \) -print0 \
    | tar cz --null -T - | split -b 15M - "$OUT/h2h-ckpt.tgz.part-")
ls -la "$OUT"
# What comes back is capped (8 files, 64 MiB in all); past it the state is lost once the machine goes back.
files=$(find "$OUT" -type f | wc -l) bytes=$(du -sb "$OUT" | cut -f1)
if [ "$files" -gt 8 ] || [ "$bytes" -ge $((64 * 1048576)) ]; then
  echo "WARNING: $files files, $((bytes / 1048576)) MiB under \$OUT, over what comes back (8 files, 64 MiB):" \
       "the state is only on this machine now"
fi
echo "exit codes: learners $learners_rc, fixed $fixed_rc (124: stopped by timeout)"
[ "$learners_rc" -eq 0 ] && [ "$fixed_rc" -eq 0 ]
