"""What a pilot's paused state holds, and whether a newer one went back.

``call_replay.sh`` (``benchmarks/results/replay_pilot/calls/``) returns the esper_agent slices still training as
``paused.tgz`` (``replay/<env>/esper_agent-<label>/seed<k>.ckpt``); a session commits its last one and the next
carries it in. Slices span sessions and machines, so the tarball to commit must be the newest: an earlier call's
return, or one from a machine that lost the state, would silently send a slice back. This lists each paused slice
(updates and host epochs trained, and its runs: device, commit, host epochs, seconds) and, with ``--against`` the
tarball committed so far, exits 1 if any slice went back: fewer host epochs, or runs that do not begin with the old
state's runs (a machine that lost the state and trained the slice again from the start)::

    python -m benchmarks.studies.paused_progress NEW/paused.tgz \\
        --against benchmarks/results/defer_pilot/Esper-CIFAR10-v0/paused.tgz

A slice in the old tarball and not in the new one either finished (its results are in that call's ``replay.tgz``)
or was lost; the tarball cannot tell which, so it is listed, not refused. Finished slices' policies
(``seed<k>-trained.ckpt``, which ``trained.tgz`` holds) are not paused state and are skipped. A file that is not a
tarball of checkpoints exits 2 with its name.
"""

from __future__ import annotations

import argparse
import posixpath
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper_agent.checkpoint import CheckpointError, load_checkpoint


class BadPausedState(ValueError):
    """A file that is not a tarball of esper_agent checkpoints; the message names it."""


@dataclass(frozen=True)
class PausedSlice:
    updates: int
    total_updates: int
    host_epochs: int  # the trainer's env steps: one host epoch per sub-env step
    runs: tuple[dict[str, Any], ...]  # the runs that trained it, oldest first (none in states saved before runs)


def _slice_name(member: tarfile.TarInfo) -> str:
    # tar -C .stage and tar -C .stage . name one file replay/... and ./replay/...: the same slice
    return posixpath.normpath(member.name).lstrip("/")


def _load_member(tar: tarfile.TarFile, member: tarfile.TarInfo, where: str) -> dict[str, Any]:
    # read into a file of our own naming: nothing in the tarball chooses where it is written
    source = tar.extractfile(member)
    if source is None:
        raise BadPausedState(f"{where}: not a regular file")
    with tempfile.NamedTemporaryFile(suffix=".ckpt") as tmp:
        tmp.write(source.read())
        tmp.flush()
        try:
            return load_checkpoint(tmp.name)
        except CheckpointError as exc:
            raise BadPausedState(f"{where}: {str(exc).removeprefix(tmp.name + ': ')}") from exc


def read_paused(tgz: Path) -> dict[str, PausedSlice]:
    """Every paused esper_agent slice in ``tgz``, by its checkpoint's path there."""
    slices = {}
    try:
        with tarfile.open(tgz) as tar:
            for member in tar.getmembers():
                name = _slice_name(member)
                if not member.isfile() or not name.endswith(".ckpt") or name.endswith("-trained.ckpt"):
                    continue
                payload = _load_member(tar, member, f"{tgz}:{member.name}")
                counters = payload["counters"]
                slices[name] = PausedSlice(int(counters["update"]), int(counters["total_updates"]),
                                           int(counters["env_steps"]), tuple(payload.get("runs") or ()))
    except (tarfile.TarError, EOFError) as exc:
        raise BadPausedState(f"{tgz}: not a readable tarball ({exc})") from exc
    return slices


def went_back(new: dict[str, PausedSlice], old: dict[str, PausedSlice]) -> list[str]:
    """The slices in both whose ``new`` state is behind ``old``'s or does not continue it, each with why."""
    back = []
    for name in sorted(old.keys() & new.keys()):
        was, now = old[name], new[name]
        if now.host_epochs < was.host_epochs:
            back.append(f"{name}: {now.host_epochs} host epochs, {was.host_epochs} before")
        elif now.runs[: len(was.runs)] != was.runs:
            back.append(f"{name}: its runs do not begin with the {len(was.runs)} it had (trained again from the "
                        f"start?)")
    return back


def _run_line(run: dict[str, Any]) -> str:
    dirty = " (dirty)" if run.get("git_dirty") else ""
    return (f"{run['device']} at {str(run['git_commit'])[:7]}{dirty}: host epochs {run['from_host_epochs']}–"
            f"{run['to_host_epochs']} in {run['train_seconds']:.0f} s")


def table(new: dict[str, PausedSlice], old: dict[str, PausedSlice] | None) -> str:
    """A markdown table of ``new``'s slices, each against ``old`` when given, and ``old``'s slices now gone."""
    lines = ["| slice | updates | host epochs | runs |", "|---|---:|---:|---|"]
    for name, s in sorted(new.items()):
        since = "" if old is None else f" (was {old[name].host_epochs})" if name in old else " (new)"
        runs = "; ".join(_run_line(r) for r in s.runs) or "not recorded"
        lines.append(f"| `{name}` | {s.updates} of {s.total_updates} | {s.host_epochs}{since} | {runs} |")
    for name in sorted((old or {}).keys() - new.keys()):
        lines.append(f"| `{name}` | gone: finished (see the call's replay.tgz) or lost | "
                     f"{old[name].host_epochs} before | |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paused", type=Path, help="a paused.tgz that call_replay.sh returned")
    parser.add_argument("--against", type=Path, help="the paused.tgz committed so far: refuse a step back")
    args = parser.parse_args(argv)
    for path in (args.paused, args.against):
        if path is not None and not path.is_file():
            parser.error(f"{path}: no such file; expected a paused.tgz")
    try:
        new = read_paused(args.paused)
        old = read_paused(args.against) if args.against else None
    except BadPausedState as exc:
        parser.error(str(exc))
    if not new:
        print(f"no paused slices in {args.paused} (every slice finished, or not a paused.tgz)")
    print(table(new, old))
    back = went_back(new, old or {})
    if back:
        print(f"refused: {args.paused} holds an older state than {args.against}:\n  " + "\n  ".join(back),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
