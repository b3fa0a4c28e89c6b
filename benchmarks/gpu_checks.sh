#!/usr/bin/env bash
# The GPU checks a change to the env's engine or hosts owes, run in one go on one CUDA machine:
#
#   ESPER_DATA_DIR=<cifar10> bash benchmarks/gpu_checks.sh OUT_DIR [tests] [throughput] [probe]
#
#   tests       the GPU and real-data tests           -> OUT_DIR/gpu_tests-<gpu>-<sha>.log
#   throughput  the env on the family host at 8 sub-envs against the bare family (the >= 0.70 goal)
#                                                      -> OUT_DIR/family_env_throughput-<gpu>-<sha>.{json,md}
#   probe       the screen's growth arms on `full`, reset seeds 0-4, to pair with the screen's rows of an
#               earlier commit (a change that should keep results within noise)
#                                                      -> OUT_DIR/screen-probe-<sha>-<i>.jsonl
#               read: python -m benchmarks.screen_compare <folder of those slices> <folder of the earlier rows>
#
# With no step named, all three run. <sha> is ESPER_GIT_COMMIT when set (a copy of the tree without its .git;
# the rows are stamped with it too), else the checkout's HEAD. Each step's exit status is written at the end of
# its log; a failing step does not stop the next.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_checks.sh OUT_DIR [tests] [throughput] [probe]}
shift
steps=${*:-tests throughput probe}
: "${ESPER_DATA_DIR:?set ESPER_DATA_DIR to the folder with the CIFAR-10 shards}"
sha=${ESPER_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
sha=${sha:0:7}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z-')
mkdir -p "$out"
gpus=$(nvidia-smi -L | wc -l)

for step in $steps; do
    case $step in
    tests)
        log="$out/gpu_tests-$gpu-$sha.log"
        python -m pytest -q -p no:cacheprovider -m "gpu or realdata" tests >"$log" 2>&1
        echo "rc $?" >>"$log"
        nvidia-smi -L >>"$log"
        ;;
    throughput)
        base="$out/family_env_throughput-$gpu-$sha"
        python -m benchmarks.family_env_throughput --num-envs 8 --epochs 12 --data-dir "$ESPER_DATA_DIR" \
            --out "$base.json" >"$base.log" 2>&1
        echo "rc $?" >>"$base.log"
        ;;
    probe)
        log="$out/screen-probe-$sha.log"
        python -m benchmarks.screen --set family --conditions full --no-mixture --seeds 0 1 2 3 4 \
            --arms grow-x2@5 grow-x4@5 grow-x2-deep@0 grow-largest@0 heuristic random \
            --processes $((3 * gpus)) --per-gpu 3 --out "$out/screen-probe-$sha.jsonl" >"$log" 2>&1
        echo "rc $?" >>"$log"
        ;;
    *)
        echo "unknown step '$step'; expected tests, throughput or probe" >&2
        exit 2
        ;;
    esac
done
