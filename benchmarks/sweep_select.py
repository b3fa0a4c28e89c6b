"""The head-to-head's selection rule, one for every learner: keep each learner's configuration with the highest
mean evaluation return on the tuning seeds.

    python -m benchmarks.sweep_select benchmarks/results/<sweep>/Esper-CIFAR10-Fast-v0

A *learner* is a training arm of :mod:`benchmarks.compare_agents` (esper_agent, maskable_flat,
maskable_multidiscrete); a *configuration* is one of its folders in the sweep, ``<arm>`` or ``<arm>-<label>``
(``benchmarks.campaign --label``). A configuration's score is the better of its two evaluations: the mean over
seeds of the argmax policy's return and, when every seed also played ``--eval-sampled``, of the sampled policy's
(each seed's return is the mean over the episodes :func:`benchmarks.compare_report.counted_episodes` counts for
it). The rule is only fair if every learner had the same chance, so a sweep is refused unless every configuration
ran the same seeds, budget, env, env kwargs and horizon, and every learner ran as many configurations
(``--allow-unequal`` reports an unequal sweep anyway and says so). Ties go to the first folder name. Fixed arms in
the folder (heuristic, static, plans, ...) are ignored. Writes ``selection.json`` and ``selection.md`` into the
folder (docs/experiments/2026-11-29-head-to-head-v2-plan.md, step 3).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from benchmarks.compare_agents import LEARNING_ARMS
from benchmarks.compare_report import arm_of, load_slices, seed_means, with_alternate_evaluations

SAMPLED = " (sampled actions)"  # compare_report's row for a learner's --eval-sampled evaluation
SAME_FOR_ALL = ("budget_host_epochs", "env", "env_kwargs", "horizon")  # what a fair sweep keeps fixed


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def score_configuration(folder: str, slices: list[dict]) -> dict:
    """One configuration's argmax and sampled mean returns (points) over its seeds, and its score, the better of
    the two (the sampled one counts only when every seed played it)."""
    rows = with_alternate_evaluations({folder: slices})
    argmax = _mean(seed_means(rows[folder], "return"))
    sampled_slices = rows.get(folder + SAMPLED, [])
    complete = len(sampled_slices) == len(slices)
    sampled = _mean(seed_means(sampled_slices, "return")) if complete else None
    score = argmax if sampled is None else max(argmax, sampled)
    first = slices[0]
    return {"configuration": folder, "learner": arm_of(folder), "seeds": sorted(s["seed"] for s in slices),
            "argmax_return": 100 * argmax, "sampled_return": None if sampled is None else 100 * sampled,
            "score": 100 * score, "scored_by": "argmax" if sampled is None or argmax >= sampled else "sampled",
            "agent_kwargs": first.get("agent_kwargs", {}), "sb3_kwargs": first.get("sb3_kwargs", {}),
            **{key: first.get(key) for key in SAME_FOR_ALL}}


def unfairness(configurations: list[dict]) -> list[str]:
    """Why the sweep does not give every learner the same chance (empty when it does)."""
    problems = []
    for key in ("seeds", *SAME_FOR_ALL):
        values = {json.dumps(c[key], sort_keys=True) for c in configurations}
        if len(values) > 1:
            problems.append(f"configurations differ in {key}: "
                            + "; ".join(f"{c['configuration']} {json.dumps(c[key], sort_keys=True)}"
                                        for c in configurations))
    counts = {}
    for c in configurations:
        counts[c["learner"]] = counts.get(c["learner"], 0) + 1
    if len(set(counts.values())) > 1:
        problems.append(f"learners ran unequal numbers of configurations: {counts}")
    return problems


def select(folder: Path) -> dict:
    """Score every learner's configurations under ``folder`` and keep each learner's best."""
    arms = {name: slices for name, slices in load_slices(folder).items() if arm_of(name) in LEARNING_ARMS}
    if not arms:
        raise SystemExit(f"no learner slices (<learner>[-<label>]/seed<k>.json, learners {', '.join(LEARNING_ARMS)}) "
                         f"under {folder}")
    configurations = [score_configuration(name, slices) for name, slices in sorted(arms.items())]
    chosen = {}
    for c in configurations:  # sorted by folder name, so a tie keeps the first
        best = chosen.get(c["learner"])
        if best is None or c["score"] > best["score"]:
            chosen[c["learner"]] = c
    return {"configurations": configurations, "chosen": {learner: c["configuration"] for learner, c in chosen.items()},
            "unfair": unfairness(configurations)}


def markdown(selection: dict, title: str) -> str:
    lines = [f"# Selection on the tuning seeds: {title}", "",
             "Score: the better of the argmax and the sampled evaluation's mean return over seeds (points); the "
             "kept configuration of each learner in bold.", "",
             "| learner | configuration | seeds | argmax | sampled | score | kwargs |",
             "|---|---|---|---:|---:|---:|---|"]
    for c in selection["configurations"]:
        kept = selection["chosen"][c["learner"]] == c["configuration"]
        name = f"**{c['configuration']}**" if kept else c["configuration"]
        kwargs = json.dumps(c["agent_kwargs"] or c["sb3_kwargs"], sort_keys=True)
        sampled = "n/a" if c["sampled_return"] is None else f"{c['sampled_return']:.2f}"
        lines.append(f"| {c['learner']} | {name} | {','.join(map(str, c['seeds']))} | {c['argmax_return']:.2f} | "
                     f"{sampled} | {c['score']:.2f} | `{kwargs}` |")
    if selection["unfair"]:
        lines += ["", "**Not a fair sweep:**", *[f"- {problem}" for problem in selection["unfair"]]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a sweep's results folder, benchmarks/results/<sweep>/<env>")
    parser.add_argument("--allow-unequal", action="store_true",
                        help="write the selection of a sweep that did not give every learner the same chance, "
                             "saying why, instead of refusing it")
    args = parser.parse_args(argv)
    selection = select(args.folder)
    if selection["unfair"] and not args.allow_unequal:
        raise SystemExit("not a fair sweep (--allow-unequal to report it anyway):\n" + "\n".join(selection["unfair"]))
    (args.folder / "selection.json").write_text(json.dumps(selection, indent=1, default=float))
    text = markdown(selection, args.folder.name)
    (args.folder / "selection.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
