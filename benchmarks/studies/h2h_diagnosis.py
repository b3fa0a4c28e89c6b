"""Why a head-to-head learner misses the static frontier on a condition: what it grows per hidden condition,
when the conditions become visible, and whether it grows more where growth pays.

Reads a finished campaign's slices (``benchmarks.compare_report.load_slices``; argmax episodes only) and prints
markdown: per condition, the learner's episodes that grew at all, its median first GERMINATE step, germinations
per episode and training FLOPs; the static seedling's mean validation accuracy after each of the first epochs;
per learning or policy arm, the rank correlation between its mean training FLOPs and what growth pays on each
condition (the best mean return of the growth arms named, minus the seedling's); and, on one condition, the
learner's test accuracy minus the seedling's on each shared reset seed, and its validation curve against the
seedling's by epoch with the epochs after which it chose FOSSILIZE. Descriptive numbers, no CIs.

    python -m benchmarks.studies.h2h_diagnosis benchmarks/results/h2h_v2/Esper-CIFAR10-v0 \\
        --out benchmarks/results/h2h_v2/Esper-CIFAR10-v0/diagnosis.md
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from benchmarks import compare_report
from benchmarks.common import write_or_print

SEEDLING = "static"
GROWTH_ARMS = ("static_small", "static_medium", "plan_grow-x2-deep_at0", "plan_grow-x2_at0")
FIXED_PREFIXES = ("static", "plan_", "oracle")


def episodes(slices: list[dict]) -> list[dict]:
    """Every argmax episode of an arm, each with its slice's seed and, when kept, its timeline record."""
    out = []
    for slice_ in slices:
        records = slice_.get("episode_records") or [None] * len(slice_["episodes"])
        out += [{**e, "seed": slice_["seed"], "record": r} for e, r in zip(slice_["episodes"], records, strict=True)]
    return out


def by_condition(rows: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        grouped[row["condition"]].append(row)
    return dict(sorted(grouped.items()))


def germination_steps(episode: dict) -> list[int]:
    return [step for step, op, *_ in episode["ops"] if op == "germinate"]


def growth_table(rows: list[dict]) -> list[str]:
    lines = ["| condition | episodes | grew | median first germination step | germinations / episode | "
             "training FLOPs |", "|---|---:|---:|---:|---:|---:|"]
    for condition, mine in by_condition(rows).items():
        steps = [germination_steps(e) for e in mine]
        firsts = [s[0] for s in steps if s]
        lines.append(f"| {condition} | {len(mine)} | {len(firsts)} | "
                     f"{f'{statistics.median(firsts):g}' if firsts else '–'} | "
                     f"{statistics.mean(len(s) for s in steps):.2f} | "
                     f"{statistics.mean(e['train_flops'] for e in mine):.3g} |")
    return lines


def seedling_curves(rows: list[dict], epochs: int) -> list[str]:
    lines = ["| condition | " + " | ".join(f"epoch {k + 1}" for k in range(epochs)) + " |",
             "|---|" + "---:|" * epochs]
    for condition, mine in by_condition(rows).items():
        means = [100 * statistics.mean(e["record"]["val_accuracy"][k] for e in mine) for k in range(epochs)]
        lines.append(f"| {condition} | " + " | ".join(f"{m:.1f}" for m in means) + " |")
    return lines


def mean_by_condition(rows: list[dict], key: str) -> dict[str, float]:
    return {c: statistics.mean(e[key] for e in mine) for c, mine in by_condition(rows).items()}


def ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 0, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2
        i = j + 1
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation; NaN when either input is constant (an arm that never grows)."""
    if len(set(x)) < 2 or len(set(y)) < 2:
        return float("nan")
    return statistics.correlation(ranks(x), ranks(y))


def pays(arms: dict[str, list[dict]], growth_arms: Sequence[str]) -> dict[str, float]:
    """Per condition, the best growth arm's mean return minus the seedling's (points)."""
    seedling = mean_by_condition(arms[SEEDLING], "return")
    growth = [mean_by_condition(arms[a], "return") for a in growth_arms]
    return {c: 100 * (max(g[c] for g in growth) - seedling[c]) for c in seedling}


def correlation_table(rows_by_arm: dict[str, list[dict]], paying: dict[str, float]) -> list[str]:
    lines = ["| arm | Spearman (mean training FLOPs, what growth pays), over conditions |", "|---|---:|"]
    conditions = sorted(paying)
    for arm, rows in rows_by_arm.items():
        flops = mean_by_condition(rows, "train_flops")
        lines.append(f"| {arm} | {spearman([flops[c] for c in conditions], [paying[c] for c in conditions]):+.2f} |")
    return lines


def keep_window(learner: list[dict], seedling: list[dict], condition: str) -> list[str]:
    """On ``condition``, per epoch: the learner's and the seedling's mean validation accuracy over the reset
    seeds both played, how many of the learner's FOSSILIZEs it chose right after that epoch (an op at step s
    follows epochs 1..s), and the kept seeds' mean contribution at that moment. It shows whether the harm of
    keeping shows in the learner's own curve before it keeps."""
    theirs = {e["env_seed"]: e for e in seedling}
    mine = [e for e in learner if e["condition"] == condition and e["env_seed"] in theirs]
    keeps = [step for e in mine for step, op, *_ in e["ops"] if op == "fossilize"]
    # what the policy saw when it kept: the seed's contribution (pp) after the epoch the keep followed
    seen = [e["record"]["contribution"][step - 1][slot] for e in mine for step, op, slot, *_ in e["ops"]
            if op == "fossilize" and step >= 1 and e["record"]["contribution"][step - 1][slot] is not None]
    lines = ["| epoch | learner (%) | seedling (%) | learner − seedling (pp) | FOSSILIZEs chosen after it |",
             "|---:|---:|---:|---:|---:|"]
    for k in range(len(mine[0]["record"]["val_accuracy"]) if mine else 0):
        ours = 100 * statistics.mean(e["record"]["val_accuracy"][k] for e in mine)
        seed = 100 * statistics.mean(theirs[e["env_seed"]]["record"]["val_accuracy"][k] for e in mine)
        lines.append(f"| {k + 1} | {ours:.1f} | {seed:.1f} | {ours - seed:+.1f} | {keeps.count(k + 1)} |")
    if seen:
        lines += ["", f"The kept seeds' contribution when kept: {statistics.mean(seen):+.1f} pp on average "
                  f"({len(seen)} keeps)."]
    return lines


def paired_on(learner: list[dict], seedling: list[dict], condition: str) -> list[float]:
    """Learner minus seedling test accuracy (pp) on each reset seed both played under ``condition``."""
    theirs = {e["env_seed"]: e for e in seedling}
    return sorted(100 * (e["test_accuracy"] - theirs[e["env_seed"]]["test_accuracy"])
                  for e in learner if e["condition"] == condition and e["env_seed"] in theirs)


def report(folder: Path, learner: str, condition: str, epochs: int = 4,
           growth_arms: Sequence[str] = GROWTH_ARMS) -> str:
    arms = compare_report.load_slices(folder)
    rows = {arm: episodes(slices) for arm, slices in arms.items()}
    missing = sorted(set(growth_arms) - set(rows))
    if missing:
        raise SystemExit(f"growth arms {missing} have no slices in {folder}; it has {sorted(rows)}")
    paying = pays(rows, growth_arms)
    movers = {arm: r for arm, r in rows.items() if not arm.startswith(FIXED_PREFIXES)}
    diffs = paired_on(rows[learner], rows[SEEDLING], condition)
    return "\n".join([
        f"# Why {learner} misses the frontier: growth per hidden condition (`{folder.name}`, argmax episodes)", "",
        f"## What {learner} grows", "", *growth_table(rows[learner]), "",
        f"## The seedling's validation accuracy (%) after its first {epochs} epochs", "",
        *seedling_curves(rows[SEEDLING], epochs), "",
        "## Does an arm grow more where growth pays?", "",
        "What growth pays: the best mean return of " + ", ".join(growth_arms) + " minus the seedling's, points: "
        + ", ".join(f"{c} {v:+.2f}" for c, v in sorted(paying.items())) + ".", "",
        *correlation_table(movers, paying), "",
        f"## {learner} − seedling on `{condition}`, per shared reset seed (test accuracy, pp)", "",
        f"{len(diffs)} episodes, from {diffs[0]:+.1f} to {diffs[-1]:+.1f}; below the seedling on "
        f"{sum(d < 0 for d in diffs)}.", "",
        f"## {learner} and the seedling on `{condition}`: validation accuracy by epoch, and when it keeps", "",
        *keep_window(rows[learner], rows[SEEDLING], condition), ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.h2h_diagnosis",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a campaign's slices: <out>/<env>")
    parser.add_argument("--learner", default="esper_agent-e3", help="the arm folder to diagnose")
    parser.add_argument("--condition", default="pool5k-noise40", help="the condition it misses the frontier on")
    parser.add_argument("--growth-arms", nargs="+", default=list(GROWTH_ARMS),
                        help="fixed arms whose best return per condition, minus the seedling's, is what growth pays")
    parser.add_argument("--out", type=Path, help="write the markdown here (default: print it)")
    args = parser.parse_args(argv)
    write_or_print(report(args.folder, args.learner, args.condition, growth_arms=args.growth_arms), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
