#!/usr/bin/env bash
# After a device call of device_call.sh: unpack the state it returned into .stage/h2h (the previous state is
# replaced only once the new one unpacked), then copy every finished slice (seed<N>.json, its records, its log)
# into this folder, printing the ones not here before. The records move (the campaign needs only seed<N>.json to
# skip a finished slice), so the state carried to the next machine stays small. Last, the paused learners' files
# (checkpoints, curves, normalisation statistics) and the slices' logs go into paused-state.tgz, to be committed:
# an ignored .stage does not outlive the checkout, and stage.sh rebuilds it from that file and the finished slices.
# Run from the repository's root.
# Usage: bash benchmarks/results/h2h_v2/collect.sh /work/.device/<call>
set -euo pipefail
src=$1 env=Esper-CIFAR10-v0 dest=benchmarks/results/h2h_v2
rm -rf .stage/h2h-new && mkdir -p .stage/h2h-new
cat "$src"/h2h-small.tgz.part-* | tar xz -C .stage/h2h-new
cat "$src"/h2h-ckpt.tgz.part-* | tar xz -C .stage/h2h-new
rm -rf .stage/h2h && mv .stage/h2h-new/h2h .stage/h2h && rmdir .stage/h2h-new
for slice in .stage/h2h/"$env"/*/seed*.json; do
  [[ $slice == *.curve.json ]] && continue
  folder=$(basename "$(dirname "$slice")") seed=$(basename "$slice" .json) records=${slice%.json}-records.json.gz
  [ -e "$records" ] || continue  # collected before: its records were moved into this folder then
  mkdir -p "$dest/$env/$folder" "$dest/logs/$env"
  [ -e "$dest/$env/$folder/$seed.json" ] || echo "new: $folder $seed"
  cp "$slice" "$dest/$env/$folder/" && cp ".stage/h2h/logs/$env/$folder-${seed#seed}.log" "$dest/logs/$env/"
  mv "$records" "$dest/$env/$folder/"  # the state carried to the next machine stays small; seed<N>.json stays
done
(cd .stage && find h2h \( -name '*.ckpt' -o -name '*.sb3.zip' -o -name '*.vecnorm.pkl' -o -name '*.curve.json' \
    -o -path 'h2h/logs/*.log' \) -print0 | tar c --null --no-recursion -T - --sort=name --owner=0 --group=0 \
    --numeric-owner | gzip -n) > "$dest/paused-state.tgz"
echo "paused state: $(tar tzf "$dest/paused-state.tgz" | grep -c -E '\.(ckpt|sb3\.zip)$') checkpoints, \
$(du -h "$dest/paused-state.tgz" | cut -f1) in $dest/paused-state.tgz (commit it)"
