#!/usr/bin/env bash
# After a session's last device call of device_call.sh: unpack the state it returned into .stage/h2h
# (unpack_state.sh, which refuses a state older than the one there), then copy every finished slice (seed<N>.json,
# its records, its log) into this folder, printing the ones not here before. The records move (the campaign needs
# only seed<N>.json to skip a finished slice), so the state carried to the next machine stays small. Last, the paused
# learners' files (checkpoints, curves, normalisation statistics) and the slices' logs go into paused-state.tgz, to be
# committed: an ignored .stage does not outlive the checkout, and stage.sh rebuilds it from that file and the
# finished slices.
# Run from the repository's root. Usage: bash benchmarks/results/h2h_v2/collect.sh <the folder the last call's $OUT files came back to>
set -euo pipefail
shopt -s nullglob
src=$1 env=Esper-CIFAR10-v0 dest=benchmarks/results/h2h_v2
bash "$(dirname "$0")/unpack_state.sh" "$src"
for slice in .stage/h2h/"$env"/*/seed*.json; do
  [[ $slice == *.curve.json ]] && continue
  # A slice retires its training state once written; one killed between the two would carry it on forever.
  rm -f "${slice%.json}.ckpt" "${slice%.json}.sb3.zip" "${slice%.json}.vecnorm.pkl" "${slice%.json}.curve.json"
  folder=$(basename "$(dirname "$slice")") seed=$(basename "$slice" .json) records=${slice%.json}-records.json.gz
  [ -e "$records" ] || continue  # collected before: its records were moved into this folder then
  mkdir -p "$dest/$env/$folder" "$dest/logs/$env"
  [ -e "$dest/$env/$folder/$seed.json" ] || echo "new: $folder $seed"
  cp "$slice" "$dest/$env/$folder/"
  cp ".stage/h2h/logs/$env/$folder-${seed#seed}.log" "$dest/logs/$env/"
  mv "$records" "$dest/$env/$folder/"
done
packed=$dest/paused-state.tgz
(cd .stage && find h2h \( -name '*.ckpt' -o -name '*.sb3.zip' -o -name '*.vecnorm.pkl' -o -name '*.curve.json' \
    -o -path 'h2h/logs/*.log' \) -print0 | sort -z \
    | tar c --null --no-recursion -T - --owner=0 --group=0 --numeric-owner | gzip -n) > "$packed.tmp"
gzip -t "$packed.tmp"
mv "$packed.tmp" "$packed"
echo "paused state: $(tar tzf "$packed" | grep -c -E '\.(ckpt|sb3\.zip)$') checkpoints, $(du -h "$packed" | cut -f1)" \
     "in $packed (commit it)"
