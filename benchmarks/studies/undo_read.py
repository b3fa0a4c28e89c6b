"""What undoing growth is worth, per hidden condition: the screen arm set ``undo`` (``benchmarks/screen_arms.py``)
read as the decisions it brackets.

The arms plant the head-to-head agent's growth after one epoch and then keep it as soon as allowed (``asap``),
keep it at epoch 6 (``keep``) or prune it at epoch 6 (``prune``); the seedling never grows. Paired by reset seed
(Student-t 95% CI over the seeds both arms ran), per condition:

- ``keep - asap``: what waiting to epoch 6 before keeping costs (the option's price);
- ``prune - keep``: what the decision at epoch 6 is worth on that condition (positive: undo; negative: keep);
- ``informed - asap``: a policy that knew the condition and picked the better of ``keep`` and ``prune`` there,
  against keeping as soon as allowed (the ceiling of planting early and deciding once the curves part);
- ``informed - seedling``: whether that policy is on or above the seedling.

Then what the policy could see when it decides: the planted network's validation and training accuracy after
the last epoch before the decision (the ``prune`` arm's curves; until epoch 6 it plays the same ops as ``keep``),
per condition as the mean and the range over episodes, beside what pruning is worth there. Descriptive: the
features are not a learned rule.

    python -m benchmarks.studies.undo_read benchmarks/results/screen_undo_all/Esper-CIFAR10-v0 \\
        --out benchmarks/results/screen_undo_all/Esper-CIFAR10-v0/undo_read.md
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from benchmarks import screen_report
from benchmarks.common import write_or_print
from benchmarks.screen_arms import SEEDLING_ARM
from esper_agent.report import mean_ci95

ARMS = {"asap": "agent-plan@1", "keep": "agent-plan@1-fossilize@6", "prune": "agent-plan@1-prune@6",
        "seedling": SEEDLING_ARM}
DECISION_STEP = 6  # the step of the first keep or prune op; the policy sees the curves up to the step before


def _pm(mean: float, ci: float) -> str:
    return "–" if math.isnan(mean) else f"{mean:+.2f} ± {ci:.2f}"


def paired_by_seed(a: dict[int, dict], b: dict[int, dict], key: str) -> tuple[float, float, int]:
    mean, ci, seeds = screen_report.paired(a, b, key)
    return mean, ci, len(seeds)


def informed(keep: dict[int, dict], prune: dict[int, dict]) -> dict[int, dict]:
    """Per seed, the episode of whichever of ``keep`` and ``prune`` has the higher mean return on the condition
    (the choice of a policy that knows the condition, made once per condition, not per episode)."""
    seeds = sorted(set(keep) & set(prune))
    mean = {name: statistics.fmean(arm[s]["return"] for s in seeds) for name, arm in (("keep", keep),
                                                                                         ("prune", prune))}
    chosen = prune if mean["prune"] > mean["keep"] else keep
    return {s: chosen[s] for s in seeds}


def seen_before_decision(rows: dict[int, dict], curve: str) -> list[float]:
    """Per seed, ``curve`` after the last step before the decision, in points (seeds that did not record it left
    out)."""
    return [value for value in (_at_decision(row, curve) for row in rows.values()) if value is not None]


def _at_decision(row: dict, curve: str) -> float | None:
    values = row.get(curve)
    return None if not values or values[DECISION_STEP - 1] is None else 100 * values[DECISION_STEP - 1]


def seen_pair(row: dict) -> tuple[float | None, float | None]:
    """One episode's training and validation accuracy (points) after the last step before the decision."""
    return _at_decision(row, "train_curve"), _at_decision(row, "val_curve")


def _spread(values: Sequence[float], signed: bool = False) -> str:
    """Mean and per-episode range, or a dash when nothing was recorded."""
    if not values:
        return "–"
    sign = "+" if signed else ""
    return f"{statistics.fmean(values):{sign}.1f} ({min(values):{sign}.1f} to {max(values):{sign}.1f})"


def condition_rows(runs: screen_report.Runs) -> list[tuple[str, dict[str, dict[int, dict]]]]:
    """Conditions on which all four arms ran, in the screen's order, each with its arms' seeds and, as
    ``"informed"``, the episodes of whichever of keep and prune :func:`informed` picks there."""
    conditions = dict.fromkeys(condition for _, condition in screen_report.ordered(runs))
    out = []
    for condition in conditions:
        arms = {short: runs.get((arm, condition), {}) for short, arm in ARMS.items()}
        if all(arms.values()):
            out.append((condition, {**arms, "informed": informed(arms["keep"], arms["prune"])}))
    return out


def decision_table(conditions: Sequence[tuple[str, dict[str, dict[int, dict]]]], key: str) -> list[str]:
    lines = ["| condition | seeds | seedling | asap | keep − asap | prune − keep | informed picks | informed − asap "
             "| informed − seedling |", "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for condition, arms in conditions:
        pick = "prune" if next(iter(arms["informed"].values()))["arm"] == ARMS["prune"] else "keep"
        cells = [paired_by_seed(arms[a], arms[b], key) for a, b in (("keep", "asap"), ("prune", "keep"),
                                                                      ("informed", "asap"), ("informed", "seedling"))]
        seeds = min(n for _, _, n in cells)
        level = [statistics.fmean(screen_report.points(r, key) for r in arms[a].values()) for a in ("seedling",
                                                                                                    "asap")]
        lines.append(f"| {condition} | {seeds} | {level[0]:.2f} | {level[1]:.2f} | {_pm(*cells[0][:2])} | "
                     f"{_pm(*cells[1][:2])} | {pick} | {_pm(*cells[2][:2])} | {_pm(*cells[3][:2])} |")
    return lines


def mixture_line(conditions: Sequence[tuple[str, dict[str, dict[int, dict]]]], key: str) -> str:
    """The conditions weighed alike: per seed, the mean over conditions of informed − asap, then the CI over
    seeds (the seeds every arm ran on every condition)."""
    seeds = sorted(set.intersection(*(set(arms[a]) for _, arms in conditions for a in ARMS)))
    per_seed = [statistics.fmean(screen_report.points(arms["informed"][s], key)
                                 - screen_report.points(arms["asap"][s], key) for _, arms in conditions)
                for s in seeds]
    mean, ci = mean_ci95(per_seed) if per_seed else (math.nan, math.nan)
    return (f"Over the {len(conditions)} conditions weighed alike, informed − asap: {_pm(mean, ci)} "
            f"({len(seeds)} seeds).")


def features_table(conditions: Sequence[tuple[str, dict[str, dict[int, dict]]]]) -> list[str]:
    """Mean and range over episodes, sorted by the mean gap (conditions without training curves last)."""
    lines = [f"| condition | validation % after step {DECISION_STEP - 1} | training % | training − validation | "
             f"prune − keep (test) |", "|---|---:|---:|---:|---:|"]
    rows = []
    for condition, arms in conditions:
        val = seen_before_decision(arms["prune"], "val_curve")
        train = seen_before_decision(arms["prune"], "train_curve")
        gaps = [train_at - val_at for train_at, val_at in (seen_pair(row) for row in arms["prune"].values())
                if train_at is not None and val_at is not None]
        gain = paired_by_seed(arms["prune"], arms["keep"], "test_accuracy")[0]
        rows.append((statistics.fmean(gaps) if gaps else math.inf, condition, val, train, gaps, gain))
    for _, condition, val, train, gaps, gain in sorted(rows, key=lambda r: r[0]):
        lines.append(f"| {condition} | {_spread(val)} | {_spread(train)} | {_spread(gaps, signed=True)} | "
                     f"{gain:+.2f} |")
    return lines


def report(folder: Path) -> str:
    runs = screen_report.by_run(screen_report.load(folder))
    conditions = condition_rows(runs)
    if not conditions:
        raise SystemExit(f"{folder}: no condition has all four arms {sorted(ARMS.values())}")
    lines = [f"# What undoing growth is worth, per condition (`{folder.parent.name}/{folder.name}`)", "",
             "Points; ± = paired Student-t 95% CI over reset seeds. `informed picks` the better of keep and prune "
             "by the condition's mean return.", ""]
    for key, title in (("test_accuracy", "Test accuracy"), ("return", "Return")):
        lines += [f"## {title}", "", *decision_table(conditions, key), "", mixture_line(conditions, key), ""]
    lines += ["## What the policy sees before it decides", "", *features_table(conditions), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.undo_read",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a screen folder holding the undo arm set's slices")
    parser.add_argument("--out", type=Path, help="write the markdown here (default: print it)")
    args = parser.parse_args(argv)
    write_or_print(report(args.folder), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

