"""Rehearse a campaign's declared read before its last slice is in, without reading anything it measured.

    python -m benchmarks.rehearse_read benchmarks/results/h2h_v2/Esper-CIFAR10-v0 --into runs/h2h-rehearsal \\
        --expect 0-7 esper_agent-e3 static ... --expect 0-4 static_wide ... \\
        -- --goal-learner esper_agent-e3 --goal-fixed static static:small ...

A declared read runs once, so a report that breaks on the real slices' quirks (resumed runs, several devices, a
learner past its budget) would break it half-read. This copies the campaign's folder to ``--into``, writes each
missing slice that ``--expect SEEDS FOLDER...`` declares as a clone of its arm's latest seed (its evaluation
episodes moved to the missing seed's reset seeds, as :func:`benchmarks.compare_agents.eval_env_seeds` deals them),
then scrambles what the slices measured: every evaluation episode is exchanged with one drawn at random from every
slice's episodes of that kind (keeping its own reset seed and hidden condition), every other measured float with the
same field of a random slice (configuration, ``*_config`` and ``*_kwargs``, and counts such as host epochs are
kept), and the episode records among all slices. ``compare_report`` then runs on the copy with the flags after
``--``; its output is not printed. What comes back: its exit status, the files it wrote and the table's layout with
every digit masked. Nothing under the campaign's own folder is written.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import re
import shutil
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import compare_report
from benchmarks.campaign import parse_seeds
from benchmarks.compare_agents import eval_env_seeds, records_path
from benchmarks.compare_report import slice_paths

EPISODE_LISTS = ("episodes", "sampled_episodes")
EPISODE_FACTS = ("env_seed", "condition")  # fixed by the reset seed, not measured


def clone_missing(folder: Path, expected: dict[str, list[int]]) -> list[str]:
    """Write each expected slice not in ``folder`` as a copy of its arm's latest seed; returns what it wrote."""
    written, finished = [], slice_paths(folder)
    for name, seeds in expected.items():
        have = {int(p.stem[len("seed"):]): p for p in finished if p.parent.name == name}
        if not have:
            raise SystemExit(f"--expect {name}: no finished slice under {folder / name} to clone from")
        source = have[max(have)]
        for seed in sorted(set(seeds) - set(have)):
            slice_ = json.loads(source.read_text())
            slice_["seed"] = seed
            for key in EPISODE_LISTS:
                env_seeds = eval_env_seeds(seed, len(slice_.get(key, [])), slice_["eval_seed_stride"])
                for episode, env_seed in zip(slice_.get(key, []), env_seeds, strict=True):
                    episode["env_seed"] = env_seed
            clone = source.with_name(f"seed{seed}.json")
            clone.write_text(json.dumps(slice_))
            if records_path(source).exists():
                shutil.copy(records_path(source), records_path(clone))
            written.append(f"{name} seed{seed}")
    return written


def _leaves(value: Any, path: tuple, visit: Callable[[Any, Any, tuple], None]) -> None:
    """Call ``visit(container, key, path)`` for every float under ``value`` (a list's items share one path); ints,
    such as host epochs and episode lengths, are counts the report's layout needs and stay."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        step = path + ((key if isinstance(value, dict) else "[]"),)
        if isinstance(item, float):
            visit(value, key, step)
        else:
            _leaves(item, step, visit)


def _measured(path: tuple) -> bool:
    return not (path and str(path[0]).endswith(("_config", "_kwargs")))


def scramble(slices: list[dict], rng: random.Random) -> None:
    """Exchange what the slices measured among them, in place (the module docstring says what is kept)."""
    for key in EPISODE_LISTS:
        pool = [dict(e) for s in slices for e in s.get(key, [])]
        rng.shuffle(pool)
        for s in slices:
            for i, episode in enumerate(s.get(key, [])):
                s[key][i] = {**pool.pop(), **{k: episode[k] for k in EPISODE_FACTS if k in episode}}
    rest = [{k: v for k, v in s.items() if k not in EPISODE_LISTS} for s in slices]
    values: dict[tuple, list[float]] = defaultdict(list)

    def take(container: Any, key: Any, path: tuple) -> None:
        if _measured(path[1:]):
            values[path[1:]].append(container[key])

    _leaves(rest, (), take)
    for pool in values.values():
        rng.shuffle(pool)

    def put(container: Any, key: Any, path: tuple) -> None:
        if _measured(path[1:]):
            container[key] = values[path[1:]].pop()

    _leaves(rest, (), put)
    for s, r in zip(slices, rest, strict=True):
        s.update(r)


def scramble_folder(folder: Path, rng: random.Random) -> int:
    """:func:`scramble` every ``<arm>/seed<k>.json`` under ``folder`` and deal the episode records among them."""
    paths = slice_paths(folder)
    slices = [json.loads(p.read_text()) for p in paths]
    scramble(slices, rng)
    for path, slice_ in zip(paths, slices, strict=True):
        path.write_text(json.dumps(slice_))
    records = [records_path(p) for p in paths if records_path(p).exists()]
    blobs = [p.read_bytes() for p in records]
    rng.shuffle(blobs)
    for path, blob in zip(records, blobs, strict=True):
        path.write_bytes(blob)
    return len(paths)


def masked(text: str) -> str:
    return re.sub(r"[0-9]", "#", text)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    cut = argv.index("--") if "--" in argv else len(argv)
    own, report_flags = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the campaign's slices: <out>/<env>")
    parser.add_argument("--into", type=Path, required=True, help="a new folder for the scrambled copy")
    parser.add_argument("--expect", nargs="+", action="append", default=[], metavar="SEEDS FOLDER",
                        help="seeds (0-7) and the arm folders declared to play them; repeat per seed span")
    parser.add_argument("--rng-seed", type=int, default=0)
    args = parser.parse_args(own)
    if not args.folder.is_dir():
        parser.error(f"folder {args.folder}: expected a campaign's folder of <arm>/seed<k>.json slices")
    if args.into.exists():
        parser.error(f"--into {args.into}: exists; expected a new folder (the rehearsal writes its report there)")
    expected: dict[str, list[int]] = {}
    with_slices = {p.parent.name for p in slice_paths(args.folder)}
    for group in args.expect:
        if len(group) < 2:
            parser.error(f"--expect {' '.join(group)}: expected seeds (like 0-7) and at least one arm folder")
        try:
            seeds = parse_seeds([group[0]])
        except ValueError as error:
            parser.error(f"--expect {' '.join(group)}: {error}")
        for name in group[1:]:
            if name not in with_slices:
                parser.error(f"--expect {name}: no slice under {args.folder / name} to clone the missing ones from")
            expected[name] = sorted(set(expected.get(name, [])) | set(seeds))
    args.expected = expected
    return args, report_flags


def main(argv: list[str] | None = None) -> int:
    args, report_flags = parse_args(sys.argv[1:] if argv is None else argv)
    copy = args.into / args.folder.name  # the report names the env after its folder
    shutil.copytree(args.folder, copy, ignore=shutil.ignore_patterns("*.png", "summary*.json", "table*.md",
                                                                     "goals*.json"))
    cloned = clone_missing(copy, args.expected)
    count = scramble_folder(copy, random.Random(args.rng_seed))
    print(f"{count} slices in {copy} ({len(cloned)} cloned: {', '.join(cloned) or 'none'}), scrambled")
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet):
            compare_report.main([str(copy), *report_flags])
        code = 0
    except SystemExit as error:  # argparse or the report refused; its message went to stderr or is the code
        code = error.code if isinstance(error.code, int) else 1
        if not isinstance(error.code, int):
            print(masked(str(error.code)), file=sys.stderr)
    print(f"compare_report exit status {code}; wrote: "
          + ", ".join(sorted(p.name for p in copy.iterdir() if p.is_file())))
    table = copy / "table.md"
    if code == 0 and table.exists():
        print(masked(table.read_text()))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
