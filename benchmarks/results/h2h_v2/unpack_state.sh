#!/usr/bin/env bash
# Lay out the state a device call of device_call.sh returned as .stage/h2h, refusing one that goes back (FORCE=1
# takes it): every log of the current .stage/h2h must still begin the same way in it, as logs are only appended to.
# So an earlier call's return, or one from a machine that lost the state, cannot overwrite the paused state.
# collect.sh runs it after a session's last call. Mid-session, when the machine went back between calls (a fresh
# one has no state), stage.sh's copy restages from the last call's returned files: bash .stage/unpack_state.sh
# <folder>, then the three staging calls again and the next run call carrying .stage/h2h.
# Run from the repository's root. Usage: bash unpack_state.sh <the folder a call's $OUT files came back to>
set -euo pipefail
shopt -s nullglob
src=$1
rm -rf .stage/h2h-new
mkdir -p .stage/h2h-new
cat "$src"/h2h-small.tgz.part-* | tar xz -C .stage/h2h-new
cat "$src"/h2h-ckpt.tgz.part-* | tar xz -C .stage/h2h-new
refuse() { rm -rf .stage/h2h-new; echo "refused: $src $1"; exit 1; }
[ -d .stage/h2h-new/h2h ] || refuse "returned no h2h state"
for old in .stage/h2h/logs/*/*.log; do
  new=.stage/h2h-new/h2h/${old#.stage/h2h/}
  if [ -z "${FORCE:-}" ] && ! { [ -f "$new" ] && cmp -s -n "$(stat -c %s "$old")" "$old" "$new"; }; then
    why="holds an older state than .stage/h2h (${old#.stage/h2h/} is shorter or differs)"
    refuse "$why; take the session's last call that ran on the state, or FORCE=1"
  fi
done
rm -rf .stage/h2h
mv .stage/h2h-new/h2h .stage/h2h
rmdir .stage/h2h-new
echo "state of $src in .stage/h2h"
