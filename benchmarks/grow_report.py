"""The tables of ``benchmarks.grow_cost``: per-arm accuracy with paired gaps, and the oracle over fixed plans.

Rebuilt from the JSON-lines slices in a folder (``python -m benchmarks.grow_cost --report <folder>``):

* ``table.md`` / ``summary.json``: per arm, test accuracy over seeds (mean, Student-t 95% CI, SD), parameters,
  training FLOPs, and for a grown arm the paired (by seed) gap to its static twin (the same final architecture
  trained static with the same schedule and condition);
* the *validation noise* of a static arm: the step-to-step noise of its per-epoch validation accuracy (5k
  images, no test-time augmentation), estimated from second differences over the stable part of the schedule
  (epochs 3–13 of 20), where the trend is close to linear: for white noise of SD σ on a linear trend,
  Var(v[t+1] − 2 v[t] + v[t−1]) = 6 σ²; the median over seeds, in points;
* ``oracle.md``: the acceptance screen's criterion 3 on these arms, under two ways of pricing compute
  (:class:`Price`): *linear*, return = test % − ``flops`` × training FLOPs / the largest static net's; and
  *per doubling*, return = test % − ``flops`` × log2(training FLOPs / the static seedling's) − ``params`` ×
  log2(final parameters / the seedling's), so the static seedling pays nothing and every doubling of compute
  or size costs the same. A linear price leaves the small members almost free (the medium net trains on 11% of
  the largest's FLOPs), so it separates sizes only at the top of the family, where every condition agrees; a
  price per doubling separates them all the way down. A *plan* is an arm run under every condition of a set;
  the best single plan has the highest mean return over the set's conditions, the per-condition oracle takes
  each condition's best plan (chosen knowing the condition, on the same seeds, as the screen defines it), and
  the gap is paired by seed over the seeds every (plan, condition) pair has.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper_agent.report import mean_ci95

REFERENCE_ARM = "static-largest-wsd"  # whose training FLOPs are a linear price's unit
SEEDLING_ARM = "static-seedling-wsd"  # whose training FLOPs and parameters a price per doubling starts from


@dataclass(frozen=True)
class Price:
    """How a plan's compute is charged against its test accuracy, in points (see the module docstring)."""

    kind: str  # "linear" or "doubling"
    flops: float  # points per largest-net's training FLOPs (linear), or per doubling of training FLOPs
    params: float = 0.0  # points per doubling of the final parameters ("doubling" only)

    def label(self) -> str:
        if self.kind == "linear":
            return f"{self.flops:g} × FLOPs/largest"
        return f"{self.flops:g}/doubling FLOPs + {self.params:g}/doubling params"


PRICES = (*(Price("linear", p) for p in (0.0, 1.0, 2.0, 5.0, 8.0, 10.0)),
          *(Price("doubling", f, p) for f, p in ((1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (1, 1.5),
                                                   (3, 0.5))))


def summarize(rows: list[dict], arms: Mapping[str, Any]) -> list[dict]:
    """One row per arm: test accuracy (mean, 95% CI, SD over seeds) and the paired gap to its static twin."""
    by_arm = _accuracies(rows)
    facts = {row["name"]: row for row in rows}
    out = []
    for name, accs in sorted(by_arm.items()):
        mean, ci = mean_ci95(list(accs.values()))
        twin = by_arm.get(arms[name].static_twin, {}) if arms[name].grow_epoch is not None else {}
        gap, gap_ci = mean_ci95([accs[s] - twin[s] for s in accs if s in twin])
        sd = statistics.stdev(accs.values()) if len(accs) > 1 else math.nan
        static = arms[name].grow_epoch is None
        noise = {f"val_noise{suffix}": validation_noise([r[key] for r in rows if r["name"] == name and key in r])
                 if static else math.nan for suffix, key in READS.items()}
        out.append({"arm": name, "seeds": sorted(accs), "test_accuracy": mean, "test_ci95": ci, "test_sd": sd,
                    "params": facts[name]["params"], "train_pflops": facts[name]["train_flops"] / 1e15,
                    "minus_static_twin": gap, "minus_static_twin_ci95": gap_ci, **noise,
                    "device": facts[name]["device"]})
    return out


READS = {"": "val_curve", "_tta": "val_curve_tta", "_ema": "val_curve_ema"}
"""Validation reads a slice may hold (``benchmarks.grow_cost.Reads``): raw weights, flip TTA, EMA weights."""
STABLE = slice(3, 14)  # epochs of a 20-epoch run past warm-up and before the decay (wsd decays the last 30%)


def validation_noise(curves: Sequence[Sequence[float]]) -> float:
    """Median over runs of the SD of one epoch's validation accuracy around its local trend, in points."""
    estimates = []
    for curve in curves:
        v = [100 * a for a in curve[STABLE]]
        second = [v[t + 1] - 2 * v[t] + v[t - 1] for t in range(1, len(v) - 1)]
        if len(second) >= 2:
            estimates.append(math.sqrt(statistics.fmean(d * d for d in second) / 6))
    return statistics.median(estimates) if estimates else math.nan


def _accuracies(rows: list[dict]) -> dict[str, dict[int, float]]:
    by_arm: dict[str, dict[int, float]] = {}
    for row in rows:
        by_arm.setdefault(row["name"], {})[row["seed"]] = 100 * row["test_accuracy"]
    return by_arm


def table(summary: list[dict]) -> str:
    lines = ["| arm | seeds | test % (95% CI) | SD | params | train PFLOPs | − static twin, paired (pp) | val noise "
             "(raw / TTA / EMA) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in summary:
        gap, ci = r["minus_static_twin"], r["minus_static_twin_ci95"]
        gap = "" if math.isnan(gap) else f"{gap:+.2f} ± {ci:.2f}"
        reads = [r[f"val_noise{k}"] for k in READS]
        noise = "" if all(math.isnan(v) for v in reads) else " / ".join("–" if math.isnan(v) else f"{v:.2f}"
                                                                         for v in reads)
        lines.append(f"| {r['arm']} | {len(r['seeds'])} | {r['test_accuracy']:.2f} ± {r['test_ci95']:.2f} | "
                     f"{r['test_sd']:.2f} | {r['params']:,} | {r['train_pflops']:.3f} | {gap} | {noise} |")
    return "\n".join(lines) + "\n"


def oracle_gap(rows: list[dict], arms: Mapping[str, Any], conditions: Sequence[str], price: Price) -> dict | None:
    """Criterion 3 on ``conditions`` at ``price``: best single plan, per-condition oracle, paired gap."""
    by_arm = _accuracies(rows)
    flops = {row["name"]: row["train_flops"] for row in rows}
    params = {row["name"]: row["params"] for row in rows}
    reference = REFERENCE_ARM if price.kind == "linear" else SEEDLING_ARM
    if reference not in flops:
        return None

    def cost(name: str) -> float:
        if price.kind == "linear":
            return price.flops * flops[name] / flops[reference]
        return (price.flops * math.log2(flops[name] / flops[reference])
                + price.params * math.log2(params[name] / params[reference]))

    plans: dict[str, dict[str, str]] = {}  # plan -> condition -> arm name
    for name in by_arm:
        plans.setdefault(arms[name].plan, {})[arms[name].condition] = name
    plans = {p: by_c for p, by_c in plans.items() if all(c in by_c for c in conditions)}
    if len(plans) < 2:
        return None
    seeds = sorted(set.intersection(*(set(by_arm[n]) for by_c in plans.values() for n in by_c.values())))
    if len(seeds) < 2:
        return None

    def ret(plan: str, condition: str, seed: int) -> float:
        name = plans[plan][condition]
        return by_arm[name][seed] - cost(name)

    def mean_return(plan: str, condition_set: Sequence[str]) -> float:
        return statistics.mean(ret(plan, c, s) for c in condition_set for s in seeds)

    best = max(plans, key=lambda p: mean_return(p, conditions))
    oracle = {c: max(plans, key=lambda p, c=c: mean_return(p, [c])) for c in conditions}
    gaps = [statistics.mean(ret(oracle[c], c, s) - ret(best, c, s) for c in conditions) for s in seeds]
    gap, ci = mean_ci95(gaps)
    return {"price": price.label(), "conditions": list(conditions), "plans": sorted(plans), "seeds": seeds,
            "best_single": best, "oracle": oracle, "gap": gap, "gap_ci95": ci}


def oracle_table(results: list[dict]) -> str:
    lines = ["| conditions | price | plans | seeds | best single plan | oracle's plans | oracle − best (95% CI) |",
             "|---|---:|---:|---:|---|---|---:|"]
    for r in results:
        picks = ", ".join(f"{c}: {p}" for c, p in r["oracle"].items())
        lines.append(f"| {', '.join(r['conditions'])} | {r['price']} | {len(r['plans'])} | {len(r['seeds'])} | "
                     f"{r['best_single']} | {picks} | {r['gap']:+.2f} ± {r['gap_ci95']:.2f} |")
    return "\n".join(lines) + "\n"


def report(folder: Path, arms: Mapping[str, Any], condition_sets: Mapping[str, Sequence[str]]) -> None:
    """Rebuild ``summary.json``, ``table.md`` and ``oracle.md`` in ``folder`` from its ``*.jsonl`` slices."""
    rows = [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()]
    summary = summarize(rows, arms)
    (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (folder / "table.md").write_text(table(summary))
    results = [r for conditions in condition_sets.values() for price in PRICES
               if (r := oracle_gap(rows, arms, conditions, price)) is not None]
    (folder / "oracle.md").write_text(oracle_table(results))
