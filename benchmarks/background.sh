#!/usr/bin/env bash
# Run a campaign longer than one device call (10 min) in the background on the GPU machine, and collect it.
# The machine stays warm only about 30 s between calls, so `start` returns at once and each `poll` call waits up
# to the given seconds (default 540), then packs the results folder into $OUT/res.tgz: the JSON and logs; images
# stay behind, because a folder with every episode's PNG is too large to come back. Poll again straight away.
# A call that comes later than that finds a fresh machine and the campaign gone. The last res.tgz that came back is
# then the only copy: its learning slices' states are those of their last update before that poll (compare_agents
# saves after each), so a lost machine costs what ran since then, plus staging the data on a new one.
# Usage: RES=<results folder> bash benchmarks/background.sh start <command...>   (the command writes under $RES)
#        RES=<results folder> OUT=<folder that comes back> bash benchmarks/background.sh poll [seconds]
set -uo pipefail
: "${RES:?set RES to the folder the campaign writes its results in}"
case ${1:-} in
  start)
    shift
    mkdir -p "$RES"
    date +%s > "$RES/started"
    # setsid: the campaign survives the end of the call that started it; DONE marks its end
    setsid nohup bash -c '"$@"; echo "exit $?" > "$0/DONE"' "$RES" "$@" > "$RES/background.log" 2>&1 < /dev/null &
    echo "started in the background: $*" ;;
  poll)
    : "${OUT:?set OUT to the folder whose files come back}"
    if [[ ! -f $RES/started ]]; then  # e.g. a fresh machine: the one that ran the campaign was handed back
      echo "no campaign was started under $RES on this machine"; exit 3
    fi
    end=$((SECONDS + ${2:-540}))
    while (( SECONDS < end )) && [[ ! -f $RES/DONE ]]; do sleep 10; done
    echo "running for $(( $(date +%s) - $(cat "$RES/started") )) s; $(cat "$RES/DONE" 2>/dev/null || echo 'not done')"
    find "$RES" -name '*.json' | sort | tail -n 60
    for log in "$RES"/background.log "$RES"/*/logs/*.log "$RES"/*/*.log; do
      [[ -f $log ]] && { echo "== $log"; tail -n 2 "$log"; }
    done 2>/dev/null | tail -c 6000
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader 2>/dev/null
    # options before the paths: tar ignores an --exclude that follows them; *.tmp*: a state being saved right now
    tar czf "$OUT/res.tgz" --exclude='*.png' --exclude='*.tmp*' -C "$(dirname "$RES")" "$(basename "$RES")" ;;
  *)
    echo "usage: background.sh start <command...> | poll [seconds]; got '${1:-}'"; exit 2 ;;
esac
