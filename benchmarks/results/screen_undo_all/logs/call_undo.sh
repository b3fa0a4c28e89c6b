#!/usr/bin/env bash
# One device call of the undo screen on every condition: play until END seconds from now, then copy back.
set -u
END=$1 PROCS=${2:-6}
export ESPER_DATA_DIR=$PWD/.stage/cifar ESPER_GIT_COMMIT=$(cat .stage/sha) ESPER_GIT_DIRTY=0
DIR=runs/undo_all
mkdir -p $DIR/Esper-CIFAR10-v0
(while true; do nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader >> $DIR/gpu.log; sleep 10; done) &
MON=$!
python -m benchmarks.screen --env Esper-CIFAR10-v0 --set undo --no-mixture \
    --conditions full pool15k pool5k noise40 pool15k-noise20 classes2 classes5 res16 res8 pool2k noise60 pool5k-noise40 \
    --seeds 0 1 2 3 4 --processes $PROCS --per-gpu $PROCS --stop-at $(( $(date +%s) + END )) \
    --out $DIR/Esper-CIFAR10-v0/undo.jsonl > $DIR/screen-$(date +%s).log 2>&1
echo "screen exit $?"
kill $MON
wc -l $DIR/Esper-CIFAR10-v0/*.jsonl
sort -t, -k1 -n $DIR/gpu.log | tail -1
cp -r $DIR $OUT/
