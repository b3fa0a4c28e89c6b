"""The head-to-head's pilot on ``Esper-CIFAR10-Fast-v0``: does esper_agent climb above always-WAIT in 8,000 host
epochs, and does it grow differently where capacity pays?

Rebuilds the tables of ``docs/experiments/2026-11-29-h2h-v2-pilot.md`` from the ``summary.json`` that
``python -m benchmarks.compare_report <folder>`` writes beside the campaign's slices
(``benchmarks/results/h2h_v2_pilot/Esper-CIFAR10-Fast-v0/``):

- every row's mean return, test accuracy and training FLOPs, and each learner row minus the static seedling
  (always WAIT), the best single plan and the oracle, paired by reset seed (the mean over a learner seed's
  evaluation episodes, then a Student-t 95% CI over learner seeds);
- the two learner configurations against each other, each mode against each mode and by the sweep's selection
  rule (each configuration by the better of its argmax and sampled evaluations, by mean return);
- per hidden condition, what each learner's better mode germinates per episode (by blueprint) beside the
  oracle's pick there and its return minus always-WAIT on that condition.

    python -m benchmarks.studies.h2h_pilot benchmarks/results/h2h_v2_pilot/Esper-CIFAR10-Fast-v0
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import h2h_arms, h2h_goals
from benchmarks.compare_report import load_slices
from benchmarks.sweep_select import SAMPLED, score_configuration

STATIC = "static"  # the static seedling: always WAIT


def learner_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("kind") == "learner"]


def configurations(rows: list[dict]) -> list[str]:
    """The learner configurations (a row's name less its evaluation mode), in the table's order."""
    return list(dict.fromkeys(r["arm"].removesuffix(SAMPLED) for r in learner_rows(rows)))


def better_modes(folder: Path, rows: list[dict]) -> dict[str, str]:
    """Each learner configuration's row under the sweep's selection rule (:mod:`benchmarks.sweep_select`): its
    argmax or its sampled evaluation, whichever has the higher mean return."""
    slices = load_slices(folder)
    out = {}
    for name in configurations(rows):
        scored_by = score_configuration(name, slices[name])["scored_by"]
        out[name] = name + (SAMPLED if scored_by == "sampled" else "")
    return out


def _pp(difference: dict[str, Any]) -> str:
    if difference["mean"] is None:
        return "n/a"
    ci = "" if difference["ci95"] is None else f" ± {100 * difference['ci95']:.2f}"
    return f"{100 * difference['mean']:+.2f}{ci}"


def arm_table(rows: list[dict], plan: str, oracle: str) -> list[str]:
    by_arm = {r["arm"]: r for r in rows}
    lines = [f"| row | seeds | return | test % | training FLOPs | − always-WAIT | − {plan} | − {oracle} |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cells = ["", "", ""]
        if r.get("kind") == "learner":
            cells = [_pp(h2h_goals.paired(r, by_arm[other], "return")) for other in (STATIC, plan, oracle)]
        lines.append(f"| {r['arm']} | {len(r['seeds'])} | {100 * r['return']:.2f} | {100 * r['test_accuracy']:.2f} | "
                     f"{r['train_flops']:.3g} | " + " | ".join(cells) + " |")
    return lines


def configuration_table(rows: list[dict], better: dict[str, str]) -> list[str]:
    """Each learner configuration against each other, mode by mode and by the selection rule."""
    names = configurations(rows)
    by_arm = {r["arm"]: r for r in rows}
    lines = ["| ours | theirs | return | test accuracy |", "|---|---|---:|---:|"]
    for i, ours in enumerate(names):
        for theirs in names[i + 1:]:
            pairs = [(ours + m, theirs + m) for m in ("", SAMPLED)]
            pairs.append((better[ours], better[theirs]))
            for a, b in dict.fromkeys(pairs):  # the selection rule's pair may be one of the same-mode pairs
                lines.append(f"| {a} | {b} | {_pp(h2h_goals.paired(by_arm[a], by_arm[b], 'return'))} | "
                             f"{_pp(h2h_goals.paired(by_arm[a], by_arm[b], 'test_accuracy'))} |")
    return lines


def germinations(row: dict, condition: str) -> str:
    """Germinations per episode on one condition, by blueprint, most frequent first."""
    plan = row["plans"].get(condition)
    if not plan:
        return "–"
    counts: Counter[str] = Counter()
    for op in plan["ops"]:
        if op["op"] == "germinate":
            counts[str(op["blueprint"])] += op["count"]
    per_episode = [f"{name} {n / plan['episodes']:.2f}" for name, n in counts.most_common()]
    return ", ".join(per_episode) or "none"


def condition_table(rows: list[dict], better: dict[str, str], oracle_choice: dict[str, str]) -> list[str]:
    by_arm = {r["arm"]: r for r in rows}
    chosen = [by_arm[row] for row in better.values()]
    conditions = sorted(by_arm[STATIC]["plans"])
    head = " | ".join(f"{r['arm']}: germinations per episode | − always-WAIT" for r in chosen)
    lines = [f"| condition | episodes | oracle's pick | {head} |", "|---|---:|---|" + "---|---:|" * len(chosen)]
    for condition in conditions:
        cells = []
        for r in chosen:
            cells += [germinations(r, condition), _pp(h2h_goals.paired(r, by_arm[STATIC], "return", condition))]
        episodes = by_arm[STATIC]["plans"][condition]["episodes"]
        lines.append(f"| {condition} | {episodes} | {oracle_choice.get(condition, '?')} | " + " | ".join(cells) + " |")
    return lines


def oracle_choice(folder: Path, oracle: str) -> dict[str, str]:
    """The oracle's pick per condition, as its slices recorded it."""
    slices = sorted((folder / oracle).glob("seed*.json"))
    return json.loads(slices[0].read_text()).get("oracle", {}).get("choice", {}) if slices else {}


def report(folder: Path, plan: str, oracle: str) -> str:
    rows = json.loads((folder / "summary.json").read_text())
    better = better_modes(folder, rows)
    return "\n".join([
        "## Every row (learner rows paired by reset seed, 95% CI over learner seeds; points)", "",
        *arm_table(rows, plan, oracle), "",
        "## Learner configurations against each other (points, paired as above)", "",
        *configuration_table(rows, better), "",
        "## Per condition: what each configuration's better mode germinates, and its return − always-WAIT there", "",
        *condition_table(rows, better, oracle_choice(folder, oracle)), ""])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a compare_report folder: <campaign>/<env> with summary.json")
    parser.add_argument("--plan", default="plan:grow-x2-deep@0", help="the best single plan's arm")
    parser.add_argument("--oracle", default="oracle", help="the oracle's arm")
    args = parser.parse_args(argv)
    if not (args.folder / "summary.json").exists():
        raise SystemExit(f"{args.folder}/summary.json not found: run python -m benchmarks.compare_report "
                         f"{args.folder} first")
    print(report(args.folder, h2h_arms.folder_name(args.plan), args.oracle))


if __name__ == "__main__":
    main()
