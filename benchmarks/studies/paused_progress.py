"""What a pilot's paused state holds, and whether a newer one went back.

``call_replay.sh`` (``benchmarks/results/replay_pilot/calls/``) returns the esper_agent slices still training as
``paused.tgz`` (``replay/<env>/esper_agent-<label>/seed<k>.ckpt``); a session commits its last one and the next
carries it in. Slices span sessions and machines, so the tarball to commit must be the newest: an earlier call's
return, or one from a machine that lost the state, would silently send a slice back. This lists each paused slice
(updates and host epochs trained, and its runs: device, commit, host epochs, seconds) and, with ``--against`` the
tarball committed so far, exits 1 if any slice trained fewer host epochs in the new one::

    python -m benchmarks.studies.paused_progress NEW/paused.tgz \\
        --against benchmarks/results/defer_pilot/Esper-CIFAR10-v0/paused.tgz

A slice in the old tarball and not in the new one either finished (its results are in that call's ``replay.tgz``)
or was lost; the tarball cannot tell which, so it is listed, not refused.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from esper_agent.checkpoint import load_checkpoint


@dataclass(frozen=True)
class PausedSlice:
    name: str  # the checkpoint's path in the tarball, which names env, label and seed
    updates: int
    total_updates: int
    host_epochs: int
    runs: tuple[str, ...]  # one line per run that trained it


def _run_line(run: dict) -> str:
    return (f"{run['device']} at {str(run['git_commit'])[:7]}: host epochs {run['from_host_epochs']}–"
            f"{run['to_host_epochs']} in {run['train_seconds']:.0f} s")


def read_paused(tgz: Path) -> dict[str, PausedSlice]:
    """Every esper_agent checkpoint in ``tgz``, by its path there."""
    slices = {}
    with tarfile.open(tgz) as tar, tempfile.TemporaryDirectory() as tmp:
        members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".ckpt")]
        tar.extractall(tmp, members=members, filter="data")
        for m in members:
            payload = load_checkpoint(Path(tmp) / m.name)
            counters, runs = payload["counters"], payload.get("runs") or []
            # a state saved before runs were recorded has only its step count, one host epoch per sub-env step
            host_epochs = runs[-1]["to_host_epochs"] if runs else int(counters["env_steps"])
            slices[m.name] = PausedSlice(m.name, int(counters["update"]), int(counters["total_updates"]),
                                         int(host_epochs), tuple(_run_line(r) for r in runs))
    return slices


def went_back(new: dict[str, PausedSlice], old: dict[str, PausedSlice]) -> list[str]:
    """The slices that trained fewer host epochs in ``new`` than in ``old``, each with both counts."""
    return [f"{name}: {new[name].host_epochs} host epochs, {old[name].host_epochs} before"
            for name in sorted(old.keys() & new.keys()) if new[name].host_epochs < old[name].host_epochs]


def table(new: dict[str, PausedSlice], old: dict[str, PausedSlice] | None) -> str:
    lines = ["| slice | updates | host epochs | runs |", "|---|---:|---:|---|"]
    for name, s in sorted(new.items()):
        since = "" if old is None or name not in old else f" (was {old[name].host_epochs})"
        lines.append(f"| `{name}` | {s.updates} of {s.total_updates} | {s.host_epochs}{since} | "
                     f"{'; '.join(s.runs) or 'not recorded'} |")
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
    new = read_paused(args.paused)
    old = read_paused(args.against) if args.against else None
    print(table(new, old))
    back = went_back(new, old or {})
    if back:
        print(f"refused: {args.paused} holds an older state than {args.against}:\n  " + "\n  ".join(back),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
