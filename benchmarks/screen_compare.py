"""Two folders of screen slices compared pair by pair: what a code change did to results it should keep.

    python -m benchmarks.screen_compare NEW_FOLDER BASE_FOLDER [--out compare.md]

Every (arm, condition) that both folders played is compared on the reset seeds both ran: the mean of new − base
in points of test accuracy and of return, each with a Student-t 95% CI over the paired seeds (the screen's
pairing: a reset seed fixes the host's initialisation, data order and condition, ``benchmarks.screen``). Both
folders must hold slices of one env, as ``screen_report.load`` checks; a row's arm must have the same plan in both.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.screen_report import Runs, by_run, load, paired


def compare(new: Runs, base: Runs) -> list[dict[str, Any]]:
    """One row per (arm, condition) in both: paired seeds, and new − base in test points and return points."""
    rows = []
    for (arm, condition), seeds in sorted(new.items()):
        before = base.get((arm, condition), {})
        if not set(seeds) & set(before):
            continue
        plans = {tuple(map(tuple, r["plan"])) for r in (*seeds.values(), *before.values())}
        if len(plans) > 1:
            raise ValueError(f"arm {arm!r} has other plans in the two folders: {sorted(plans)}")
        test, test_ci, common = paired(seeds, before, "test_accuracy")
        ret, ret_ci, _ = paired(seeds, before, "return")
        rows.append({"arm": arm, "condition": condition, "seeds": common, "test_minus_base": test,
                     "test_ci95": test_ci, "return_minus_base": ret, "return_ci95": ret_ci})
    return rows


def markdown(rows: Sequence[dict[str, Any]], new: str, base: str) -> str:
    lines = [f"New: `{new}`; base: `{base}`. New − base, paired by reset seed, mean ± Student-t 95% CI (points).", "",
             "| arm | condition | pairs | test | return |", "|---|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['condition']} | {len(r['seeds'])} | {r['test_minus_base']:+.2f} ± "
                     f"{r['test_ci95']:.2f} | {r['return_minus_base']:+.2f} ± {r['return_ci95']:.2f} |")
    if not rows:
        lines.append("| (no arm and condition in both folders) | | | | |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.screen_compare", description=__doc__.split("\n\n")[0])
    p.add_argument("new", type=Path, help="folder of the changed code's *.jsonl slices")
    p.add_argument("base", type=Path, help="folder of the base code's *.jsonl slices")
    p.add_argument("--out", type=Path, help="also write the table to this markdown file")
    args = p.parse_args(argv)
    for folder in (args.new, args.base):
        if not folder.is_dir():
            raise SystemExit(f"{folder} is not a folder of screen slices")
    new, base = load(args.new), load(args.base)
    envs = {row["env_id"] for row in (*new, *base)}
    if len(envs) > 1:
        raise SystemExit(f"the folders hold slices of different envs {sorted(envs)}; expected one")
    table = markdown(compare(by_run(new), by_run(base)), str(args.new), str(args.base))
    print(table, end="")
    if args.out is not None:
        args.out.write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
