"""The acceptance screen's report: ``summary.json``, ``criteria.json`` and ``table.md``, rebuilt from the slices.

Reads every ``*.jsonl`` slice :mod:`benchmarks.screen` wrote into a folder (one line per episode; a slice carries
each arm's kind, twin and plan, so the report needs no arm registry). Accuracies and returns are in points (a
return's points are 100 × the sum of the env's rewards); every gap is paired by reset seed over the seeds both
sides ran, with a Student-t 95% CI (:func:`esper_agent.report.mean_ci95`). The four criteria of GROWTH.md:

1. on condition ``full``: the best scripted growth plan (kind ``plan``, the largest mean paired gap) minus the
   static seedling, in test accuracy: holds when the gap is at least 8 points and its CI is above 0;
2. on ``full``: each growth arm with a ``twin`` minus its twin, in test accuracy. An arm's growth time is its
   plan's first GERMINATE epoch over the episode length (``max_epochs``); it counts as growth at 10%, 25% or
   50% when that epoch is within one epoch of the fraction's. Holds when at least one 25% arm ends within 1.0
   point of its twin (mean gap >= -1.0): the criterion asks whether growing at 25% *can* come that close, so
   the best way to grow at 25% decides, as the best plan decides criterion 1;
3. on the conditions of the mixture, each played by itself (every condition but ``mixture`` in the slices):
   fixed plans are the static and plan arms that ran on all of them; the per-condition oracle takes each
   condition's plan with the best mean return, the best single plan has the best mean return over the
   conditions (each weighing the same), and the gap oracle − best single is averaged over conditions per seed
   (the seeds every plan ran on every condition): holds when it is at least 1.5 points with the CI above 0.
   The mixture draws its conditions uniformly (``esper_env.conditions``), so equal weights make this the
   mixture's mean return when every catalogue condition was played (``covers_mixture``); the drawn-mixture runs
   are not used, since a few drawn episodes per condition could not pick a condition's best plan. The heuristic's
   mean return over the same conditions, its rank among the fixed plans and its paired gaps to the best single
   plan and to the oracle are reported;
4. the largest seed-to-seed SD of test accuracy of a fixed plan on ``full``: holds when at most 0.4 points.

Beside the criteria, ``criteria.json`` carries ``val_noise``: the noise of one step's validation accuracy in
WAIT-only episodes (the static arms), per condition (:func:`val_noise`), which a controller reading the curves
has to see through.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.screen_arms import SEEDLING_ARM
from esper_agent.report import mean_ci95
from esper_env.conditions import CONDITIONS

MIXTURE = "mixture"  # the condition label of runs that let the env draw the condition
FULL = "full"  # the full-data, no-noise condition
FIXED_KINDS = ("static", "plan")
GROWTH_FRACTIONS = (0.10, 0.25, 0.50)

Runs = dict[tuple[str, str], dict[int, dict[str, Any]]]
"""(arm, condition) -> seed -> slice line."""


def load(folder: Path) -> list[dict[str, Any]]:
    """Every line of every ``*.jsonl`` slice in ``folder``, checked: one env id, no (arm, condition, seed) twice,
    the same kind, twin and plan for every line of an arm."""
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path.name}:{number} is not a JSON line ({error})") from error
    envs = sorted({row["env_id"] for row in rows})
    if len(envs) > 1:
        raise ValueError(f"{folder} holds slices of several envs {envs}; expected one env per folder")
    seen: dict[tuple[str, str, int], int] = {}
    arms: dict[str, tuple] = {}
    for row in rows:
        key = (row["arm"], row["condition"], row["seed"])
        if key in seen:
            raise ValueError(f"{folder}: arm {key[0]!r} condition {key[1]!r} seed {key[2]} appears twice")
        seen[key] = 1
        facts = (row["kind"], row["twin"], row["plan"])
        if arms.setdefault(row["arm"], facts) != facts:
            raise ValueError(f"{folder}: arm {row['arm']!r} has kind/twin/plan {facts}, elsewhere {arms[row['arm']]}")
    return rows


def by_run(rows: Sequence[dict[str, Any]]) -> Runs:
    runs: Runs = {}
    for row in rows:
        runs.setdefault((row["arm"], row["condition"]), {})[row["seed"]] = row
    return runs


def points(row: dict[str, Any], key: str) -> float:
    """``row[key]`` (a fraction, or a return) in points; NaN when not measured."""
    value = row.get(key)
    return math.nan if value is None else 100 * value


def paired(a: dict[int, dict], b: dict[int, dict], key: str) -> tuple[float, float, list[int]]:
    """Mean and 95% CI of ``a - b`` in points over the seeds both ran, and those seeds."""
    seeds = sorted(set(a) & set(b))
    mean, ci = mean_ci95([points(a[s], key) - points(b[s], key) for s in seeds])
    return mean, ci, seeds


def _sd(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.stdev(finite) if len(finite) > 1 else math.nan


def _mean_or_none(values: Sequence[Any]) -> float | None:
    return None if not values or any(v is None for v in values) else statistics.fmean(values)


def summarize(runs: Runs, seedling: str = SEEDLING_ARM) -> list[dict[str, Any]]:
    """One row per (arm, condition), in :func:`ordered` order."""
    out = []
    for arm, condition in ordered(runs):
        by_seed = runs[(arm, condition)]
        rows = [by_seed[s] for s in sorted(by_seed)]
        test, ci = mean_ci95([points(r, "test_accuracy") for r in rows])
        ret, ret_ci = mean_ci95([points(r, "return") for r in rows])
        gap, gap_ci, _ = paired(by_seed, runs.get((seedling, condition), {}), "test_accuracy")
        drawn: dict[str, int] = {}
        for r in rows:
            drawn[str(r["condition_reported"])] = drawn.get(str(r["condition_reported"]), 0) + 1
        out.append({"arm": arm, "condition": condition, "kind": rows[0]["kind"], "twin": rows[0]["twin"],
                    "seeds": sorted(by_seed), "test_accuracy": test, "test_ci95": ci,
                    "test_sd": _sd([points(r, "test_accuracy") for r in rows]),
                    "val_accuracy": mean_ci95([points(r, "val_accuracy") for r in rows])[0],
                    "final_params": _mean_or_none([r["params"] for r in rows]),
                    "train_flops": _mean_or_none([r["train_flops"] for r in rows]),
                    "return": ret, "return_ci95": ret_ci,
                    "minus_static_seedling_paired": gap, "minus_static_seedling_ci95": gap_ci,
                    "conditions_reported": drawn})
    return out


KIND_ORDER = ("static", "plan", "heuristic", "random")


def ordered(runs: Runs) -> list[tuple[str, str]]:
    """(arm, condition) pairs: ``full`` first, the other conditions by name, the mixture last; within one, arms
    by kind (static, plan, heuristic, random), then name."""
    def key(pair: tuple[str, str]) -> tuple:
        arm, condition = pair
        kind = next(iter(runs[pair].values()))["kind"]
        return (condition != FULL, condition == MIXTURE, condition, KIND_ORDER.index(kind), arm)

    return sorted(runs, key=key)


def _first(runs: Runs, arm: str, condition: str) -> dict[str, Any]:
    return next(iter(runs[(arm, condition)].values()))


def _arms(runs: Runs, condition: str, kinds: Sequence[str]) -> list[str]:
    return sorted(arm for arm, c in runs if c == condition and _first(runs, arm, c)["kind"] in kinds)


def _missing(reason: str, **facts: Any) -> dict[str, Any]:
    return {"value": None, "ci95": None, "holds": False, "reason": reason, **facts}


def _holds_above(mean: float, ci: float, threshold: float) -> bool:
    """At least ``threshold`` with the 95% CI above 0 (a CI needs two seeds)."""
    return math.isfinite(ci) and mean >= threshold and mean - ci > 0


def criterion_1(runs: Runs, seedling: str = SEEDLING_ARM) -> dict[str, Any]:
    """Best scripted growth plan minus the static seedling on ``full``, test accuracy, paired."""
    facts = {"threshold": 8.0, "condition": FULL, "baseline": seedling}
    if (seedling, FULL) not in runs:
        return _missing(f"no {seedling!r} run on condition {FULL!r}", **facts)
    gaps = {arm: paired(runs[(arm, FULL)], runs[(seedling, FULL)], "test_accuracy")
            for arm in _arms(runs, FULL, ("plan",))}
    gaps = {arm: gap for arm, gap in gaps.items() if math.isfinite(gap[0])}
    if not gaps:
        return _missing(f"no plan arm paired with {seedling!r} on {FULL!r}", **facts)
    best = max(gaps, key=lambda arm: gaps[arm][0])
    mean, ci, seeds = gaps[best]
    return {"value": mean, "ci95": ci, "holds": _holds_above(mean, ci, 8.0), "best_plan": best, "seeds": seeds,
            **facts, "plans": {arm: {"gap": m, "ci95": c} for arm, (m, c, _) in gaps.items()}}


def growth_fraction(row: dict[str, Any]) -> float | None:
    """Of :data:`GROWTH_FRACTIONS`, the one whose epoch is nearest the plan's first GERMINATE and within one epoch
    of it; None for a plan that grows at none of them."""
    epochs = [step[0] for step in row["plan"] if step[1] == "germinate"]
    if not epochs:
        return None
    first, length = min(epochs), row["max_epochs"]
    nearest = min(GROWTH_FRACTIONS, key=lambda f: abs(first - f * length))
    return nearest if abs(first - nearest * length) < 1 else None


def criterion_2(runs: Runs) -> dict[str, Any]:
    """Each growth arm minus its static twin on ``full``; the best arm grown at 25% decides."""
    facts: dict[str, Any] = {"threshold": -1.0, "condition": FULL}
    arms = {}
    for arm in _arms(runs, FULL, ("plan",)):
        row = _first(runs, arm, FULL)
        if row["twin"] is None:
            continue
        mean, ci, seeds = paired(runs[(arm, FULL)], runs.get((row["twin"], FULL), {}), "test_accuracy")
        arms[arm] = {"twin": row["twin"], "fraction": growth_fraction(row), "gap": mean, "ci95": ci, "seeds": seeds}
    facts["arms"] = arms
    best = {}
    for fraction in GROWTH_FRACTIONS:
        at = [a for a, g in arms.items() if g["fraction"] == fraction and math.isfinite(g["gap"])]
        if at:
            best[fraction] = max(at, key=lambda a: arms[a]["gap"])
    facts["best_gap_at"] = {f"{round(100 * f)}%": {"arm": a, "gap": arms[a]["gap"], "ci95": arms[a]["ci95"]}
                            for f, a in best.items()}
    if 0.25 not in best:
        return _missing("no growth arm at 25% of the episode paired with its twin on 'full'", **facts)
    top = arms[best[0.25]]
    return {"value": top["gap"], "ci95": top["ci95"], "holds": top["gap"] >= -1.0, "arm": best[0.25], **facts}


def criterion_3(runs: Runs) -> dict[str, Any]:
    """Per-condition oracle minus the best single fixed plan, mean return over the conditions, paired by seed."""
    conditions = sorted({c for _, c in runs if c != MIXTURE})
    catalogue = [c.name for c in CONDITIONS]
    facts: dict[str, Any] = {"threshold": 1.5, "conditions": conditions, "rows": "per-condition runs (every "
                             f"condition but {MIXTURE!r}), each condition weighing the same; drawn-mixture runs "
                             "not used", "covers_mixture": set(catalogue) <= set(conditions),
                             "mixture_conditions": catalogue}
    plans = sorted({arm for arm, c in runs if _first(runs, arm, c)["kind"] in FIXED_KINDS
                    and all((arm, d) in runs for d in conditions)})
    if len(conditions) < 2:  # with one condition the oracle is the best single plan by definition
        return _missing("needs the fixed plans run on at least two conditions", **facts)
    if len(plans) < 2:
        return _missing("needs at least two fixed plans run on every condition", **facts)
    seeds = sorted(set.intersection(*(set(runs[(p, c)]) for p in plans for c in conditions)))
    if len(seeds) < 2:
        return _missing("needs at least two seeds every fixed plan ran on every condition", **facts)

    def ret(arm: str, condition: str, seed: int) -> float:
        return points(runs[(arm, condition)][seed], "return")

    def mean_return(arm: str, chosen: Sequence[str]) -> float:
        return statistics.fmean(ret(arm, c, s) for c in chosen for s in seeds)

    best = max(plans, key=lambda p: mean_return(p, conditions))
    oracle = {c: max(plans, key=lambda p, c=c: mean_return(p, [c])) for c in conditions}
    gap, ci = mean_ci95([statistics.fmean(ret(oracle[c], c, s) - ret(best, c, s) for c in conditions)
                         for s in seeds])
    means = {p: mean_return(p, conditions) for p in plans}
    facts |= {"seeds": seeds, "best_single": best, "oracle": oracle, "mean_return": means,
              "oracle_mean_return": statistics.fmean(mean_return(oracle[c], [c]) for c in conditions),
              "heuristic": _heuristic_place(runs, seeds, means, best, oracle)}
    return {"value": gap, "ci95": ci, "holds": _holds_above(gap, ci, 1.5), **facts}


def _heuristic_place(runs: Runs, seeds: Sequence[int], means: dict[str, float], best: str,
                     oracle: dict[str, str]) -> dict[str, Any] | None:
    """The heuristic's mean return over the oracle's conditions on ``seeds``, its rank among the fixed plans
    (1 = best) and its paired gaps to the best single plan and to the oracle; None without a heuristic run on
    every condition and seed."""
    arm = next((a for a, c in runs if _first(runs, a, c)["kind"] == "heuristic"), None)
    if arm is None or not all((arm, c) in runs and set(seeds) <= set(runs[(arm, c)]) for c in oracle):
        return None

    def gap(choice: dict[str, str]) -> tuple[float, float]:
        return mean_ci95([statistics.fmean(points(runs[(arm, c)][s], "return") - points(runs[(p, c)][s], "return")
                                           for c, p in choice.items()) for s in seeds])

    mean = statistics.fmean(points(runs[(arm, c)][s], "return") for c in oracle for s in seeds)
    (single, single_ci), (to_oracle, oracle_ci) = gap(dict.fromkeys(oracle, best)), gap(oracle)
    return {"arm": arm, "mean_return": mean, "rank": 1 + sum(m > mean for m in means.values()),
            "of": len(means) + 1, "minus_best_single": single, "minus_best_single_ci95": single_ci,
            "minus_oracle": to_oracle, "minus_oracle_ci95": oracle_ci}


def criterion_4(runs: Runs) -> dict[str, Any]:
    """The largest seed-to-seed SD of test accuracy among the fixed plans on ``full``; beside it, for reading it,
    ``pooled_sd``: the root mean variance over those plans. The largest of many SDs of a few seeds each lies
    above a typical plan's (an SD of 5 draws has a 95% interval of about 0.6 to 2.9 times the true one)."""
    sds = {arm: _sd([points(r, "test_accuracy") for r in runs[(arm, FULL)].values()])
           for arm in _arms(runs, FULL, FIXED_KINDS)}
    sds = {arm: sd for arm, sd in sds.items() if math.isfinite(sd)}
    facts = {"threshold": 0.4, "condition": FULL, "sd": sds}
    if not sds:
        return _missing("no fixed plan with two seeds on 'full'", **facts)
    worst = max(sds, key=lambda arm: sds[arm])
    pooled = math.sqrt(statistics.fmean(sd**2 for sd in sds.values()))
    return {"value": sds[worst], "ci95": None, "holds": sds[worst] <= 0.4, "arm": worst, "pooled_sd": pooled, **facts}


def step_residuals(curve: Sequence[float | None]) -> list[float] | None:
    """``v[t] − (v[t−1] + v[t+1]) / 2`` in points for ``t`` over the second half of ``curve`` (from ``⌈L/2⌉`` to
    ``L − 2``), where a training curve bends slowly enough to be nearly straight over three steps; None when a
    value there is missing or fewer than two residuals remain."""
    first, end = max(1, (len(curve) + 1) // 2), len(curve) - 1
    values = curve[first - 1 :]
    if end - first < 2 or any(v is None for v in values):
        return None
    v = [100 * float(x) for x in values]  # type: ignore[arg-type]  # None ruled out above
    return [v[k] - (v[k - 1] + v[k + 1]) / 2 for k in range(1, len(v) - 1)]


def step_noise(episodes: Sequence[Sequence[float]]) -> float:
    """The SD of one step's independent noise, from episodes' :func:`step_residuals`, each around its own mean.

    With noise of SD σ on a straight curve a residual has variance 1.5 σ², its neighbours covary by −σ² and
    those two apart by σ²/4, so ``n`` residuals scatter about their mean by σ² (1.5 n − 1/n) in expectation: the
    estimate divides the pooled squares by that. Each episode's mean absorbs the steady bend of its curve."""
    squares = sum(sum((r - statistics.fmean(res)) ** 2 for r in res) for res in episodes)
    return math.sqrt(squares / sum(1.5 * len(res) - 1 / len(res) for res in episodes))


def val_noise(runs: Runs) -> dict[str, Any]:
    """One step's validation noise in points (:func:`step_noise`) per condition and pooled, over the static arms'
    episodes (WAIT only) that carry a ``val_curve`` and did not roll back."""
    found: dict[str, list[tuple[str, list[float]]]] = {}
    for arm, condition in ordered(runs):
        for row in runs[(arm, condition)].values():
            res = step_residuals(row.get("val_curve") or []) if row["kind"] == "static" else None
            if res is not None and not row.get("rollback"):
                found.setdefault(condition, []).append((arm, res))

    def block(episodes: list[tuple[str, list[float]]]) -> dict[str, Any]:
        return {"sd_points": step_noise([res for _, res in episodes]), "episodes": len(episodes),
                "arms": sorted({arm for arm, _ in episodes})}

    every = [episode for episodes in found.values() for episode in episodes]
    return {"what": "SD of one step's validation accuracy, points: second differences over each episode's second "
            "half, static arms", "by_condition": {c: block(e) for c, e in found.items()},
            "pooled": block(every) if every else None}


def criteria(runs: Runs, seedling: str = SEEDLING_ARM) -> dict[str, dict[str, Any]]:
    return {"1": criterion_1(runs, seedling), "2": criterion_2(runs), "3": criterion_3(runs),
            "4": criterion_4(runs)}


def _pm(mean: float, ci: float, signed: bool = False) -> str:
    if not math.isfinite(mean):
        return "–"
    value = f"{mean:+.2f}" if signed else f"{mean:.2f}"
    return value if not math.isfinite(ci) else f"{value} ± {ci:.2f}"


def _number(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def table(summary: Sequence[dict[str, Any]], results: dict[str, dict[str, Any]],
          noise: dict[str, Any] | None = None) -> str:
    """Markdown: one table per condition (arms as rows), the criteria, and the validation noise if given."""
    lines = ["# Acceptance screen", "", "Points: test accuracy in %, return × 100; ± = paired or per-arm Student-t "
             "95% CI over seeds.", ""]
    for condition in dict.fromkeys(row["condition"] for row in summary):
        lines += [f"## {condition}", "", "| arm | kind | seeds | test % | SD | − seedling (paired) | return | "
                  "params | train FLOPs |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in (row for row in summary if row["condition"] == condition):
            lines.append(f"| {r['arm']} | {r['kind']} | {len(r['seeds'])} | {_pm(r['test_accuracy'], r['test_ci95'])} "
                         f"| {_number(r['test_sd'] if math.isfinite(r['test_sd']) else None, '.2f')} | "
                         f"{_pm(r['minus_static_seedling_paired'], r['minus_static_seedling_ci95'], True)} | "
                         f"{_pm(r['return'], r['return_ci95'])} | {_number(r['final_params'], ',.0f')} | "
                         f"{_number(r['train_flops'], '.3g')} |")
        lines.append("")
    lines += ["## Criteria", "", "| criterion | value | 95% CI | holds | what |", "|---|---:|---:|---|---|"]
    for key, result in results.items():
        value, ci = result["value"], result["ci95"]
        lines.append(f"| {key} | {_number(value, '+.2f')} | {_number(ci, '.2f')} | "
                     f"{'yes' if result['holds'] else 'no'} | {_what(key, result)} |")
    if noise is not None:
        found = [f"{c} {b['sd_points']:.2f} ({b['episodes']} episodes)" for c, b in noise["by_condition"].items()]
        lines += ["", "Validation noise of one step (static arms, WAIT only; second differences over each episode's "
                  f"second half), points: {'; '.join(found) or 'not measured (no static run with a val_curve)'}."]
    return "\n".join(lines) + "\n"


def _what(key: str, r: dict[str, Any]) -> str:
    """One line saying what a criterion compared (or why it could not)."""
    if r["value"] is None:
        return f"not measured: {r['reason']}"
    if key == "1":
        return f"{r['best_plan']} − {r['baseline']} on {r['condition']} (≥ 8, CI above 0)"
    if key == "2":
        at = ", ".join(f"{f}: {g['arm']} {g['gap']:+.2f}" for f, g in r["best_gap_at"].items())
        return f"best growth arm − its static twin on {r['condition']} by growth time ({at}; ≥ −1.0 at 25%)"
    if key == "3":
        h = r["heuristic"]
        place = "no heuristic run" if h is None else (f"heuristic {h['mean_return']:.2f} (oracle "
                                                      f"{r['oracle_mean_return']:.2f}), rank {h['rank']} of {h['of']}")
        picks = ", ".join(f"{c}: {p}" for c, p in r["oracle"].items())
        played = f"{len(r['conditions'])} of {len(r['mixture_conditions'])} mixture conditions"
        return f"oracle ({picks}) − best single {r['best_single']} over {played} (≥ 1.5, CI above 0); {place}"
    return (f"largest seed-to-seed SD, {r['arm']} on {r['condition']} (≤ 0.4); over every fixed plan "
            f"{r['pooled_sd']:.2f}")


def report(folder: Path, seedling: str = SEEDLING_ARM) -> None:
    """Rebuild ``summary.json``, ``criteria.json`` and ``table.md`` in ``folder`` from its ``*.jsonl`` slices."""
    from benchmarks.common import write_atomic, write_json

    runs = by_run(load(folder))
    summary = summarize(runs, seedling)
    results, noise = criteria(runs, seedling), val_noise(runs)
    write_json(folder / "summary.json", summary)
    write_json(folder / "criteria.json", {**results, "val_noise": noise})
    write_atomic(folder / "table.md", table(summary, results, noise))
