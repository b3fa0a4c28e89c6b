"""Does training with seed groups (``AgentConfig.seed_group_size``) help esper_agent find the paying plan?

Rebuilds the table of ``docs/experiments/2026-11-29-seed-groups-synthetic.md`` from the files committed in one
folder (``benchmarks/results/synthetic_family/seed_groups/``):

- ``<run>/metrics.csv`` of each training run (``python -m esper_agent.train``), read as the mean training return
  over windows of updates;
- ``<run>.argmax.json`` and ``<run>.sampled.json``: ``python -m esper_agent.evaluate`` of the run's last
  checkpoint, one episode per sub-env, so sub-env ``i`` played reset seed ``seed + i``;
- ``fixed-arms.jsonl``: ``python -m benchmarks.screen`` rows of fixed plans on the same reset seeds.

(``<run>.<mode>.report.md`` and ``.episodes.json`` beside them are the evaluations' own reports and timelines:
what each policy grew, read in the notebook, not here.)

Every difference is paired by reset seed, Student-t 95%, in points of return (or of test accuracy).

    python -m benchmarks.studies.seed_groups benchmarks/results/synthetic_family/seed_groups
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from benchmarks.screen_report import paired
from esper_agent.report import mean_ci95

Rows = dict[int, dict[str, Any]]  # reset seed -> {"return": ..., "test_accuracy": ...} as fractions
WINDOWS = ((1, 10), (21, 30), (41, 50))  # updates, inclusive


def eval_rows(path: Path) -> Rows:
    """One evaluation's episodes by reset seed (one episode per sub-env: sub-env ``i`` played ``seed + i``)."""
    data = json.loads(path.read_text())
    envs = [e["env"] for e in data["episodes"]]
    if len(set(envs)) != len(envs):
        raise ValueError(f"{path}: a sub-env played more than one episode; evaluate with --episodes == --num-envs")
    return {data["seed"] + e["env"]: {"return": e["episode_return"], "test_accuracy": e["test_accuracy"]}
            for e in data["episodes"]}


def fixed_rows(path: Path) -> dict[str, Rows]:
    """The screen's rows by arm, then by reset seed."""
    arms: dict[str, Rows] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        arms.setdefault(row["arm"], {})[row["seed"]] = row
    return arms


def training_windows(path: Path) -> list[tuple[str, float, float]]:
    """Mean training return (points) over each window of updates the run reached, with its 95% CI."""
    with path.open() as f:
        returns = {int(r["update"]): 100 * float(r["episode/return_mean"]) for r in csv.DictReader(f)}
    out = []
    for first, last in WINDOWS:
        values = [returns[u] for u in range(first, last + 1) if u in returns]
        if len(values) == last - first + 1:
            out.append((f"{first}-{last}", *mean_ci95(values)))
    return out


def fmt(mean: float, half: float) -> str:
    return f"{mean:+.2f} ± {half:.2f}"


def report(folder: Path) -> str:
    runs = sorted(p for p in folder.iterdir() if (p / "metrics.csv").exists())
    arms = fixed_rows(folder / "fixed-arms.jsonl")
    played = {f"{run.name} ({mode})": eval_rows(folder / f"{run.name}.{mode}.json")
              for run in runs for mode in ("argmax", "sampled") if (folder / f"{run.name}.{mode}.json").exists()}
    lines = ["## Training return (points; sampled actions, 8 episodes per update)", "",
             "| run | " + " | ".join(f"updates {a}-{b}" for a, b in WINDOWS) + " |", "|---|---:|---:|---:|"]
    for run in runs:
        cells = {w: f"{m:.2f} ± {h:.2f}" for w, m, h in training_windows(run / "metrics.csv")}
        lines.append(f"| {run.name} | " + " | ".join(cells.get(f"{a}-{b}", "") for a, b in WINDOWS) + " |")
    references = sorted(arms)
    lines += ["", "## Evaluation on the same reset seeds (points)", "",
              "| policy | episodes | return | test % | " + " | ".join(f"− {r}" for r in references) + " |",
              "|---|---:|---:|---:|" + "---:|" * len(references)]
    everyone = played | arms
    for name, rows in everyone.items():
        ret, _ = mean_ci95([100 * r["return"] for r in rows.values()])
        test, _ = mean_ci95([100 * r["test_accuracy"] for r in rows.values()])
        margins = [fmt(*paired(rows, arms[r], "return")[:2]) if name != r else "" for r in references]
        lines.append(f"| {name} | {len(rows)} | {ret:.2f} | {test:.2f} | " + " | ".join(margins) + " |")
    return "\n".join(lines + between_runs(played, [run.name for run in runs])) + "\n"


def between_runs(played: dict[str, Rows], runs: list[str]) -> list[str]:
    """Paired differences between runs: same evaluation mode, then each run's better mode (pairs not already
    listed)."""
    pairs = [(a, b) for a in played for b in played if a < b and a.split(" ")[1] == b.split(" ")[1]]
    better = better_modes(played, runs)
    pairs += [(better[a], better[b]) for a in better for b in better
              if a < b and (better[a], better[b]) not in pairs]
    if not pairs:
        return []
    lines = ["", "## Between runs (points, paired by reset seed)", "",
             "Same evaluation mode, then each run's better mode by mean return (the head-to-head's selection "
             "rule, `benchmarks.sweep_select`, scores a configuration that way).", "",
             "| a − b | return | test % |", "|---|---:|---:|"]
    for a, b in pairs:
        lines.append(f"| {a} − {b} | {fmt(*paired(played[a], played[b], 'return')[:2])} | "
                     f"{fmt(*paired(played[a], played[b], 'test_accuracy')[:2])} |")
    return lines


def better_modes(played: dict[str, Rows], runs: list[str]) -> dict[str, str]:
    """Each run's evaluation (``"<run> (argmax)"`` or ``"<run> (sampled)"``) with the higher mean return."""
    out = {}
    for run in runs:
        modes = [name for name in played if name.split(" ")[0] == run]
        if modes:
            out[run] = max(modes, key=lambda name: sum(r["return"] for r in played[name].values()) / len(played[name]))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.seed_groups",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="the study's results folder")
    print(report(parser.parse_args(argv).folder), end="")


if __name__ == "__main__":
    main()
