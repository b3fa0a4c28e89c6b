"""Whether the head-to-head's primary learner meets its four goals, read from the rows of
``benchmarks.compare_report`` whose slices record each evaluation episode's condition and costs
(``benchmarks.h2h_report.by_episode``):

1. it beats the best single fixed plan on the env's return (paired 95% CI above 0) and closes at least half of
   the gap between that plan and the per-condition oracle;
2. it beats the heuristic on return (paired CI above 0) and by at least 1 pp of test accuracy, spending no more
   training FLOPs;
3. on every hidden condition it sits on or above the static frontier: no static arm whose mean training FLOPs on
   that condition are at most the learner's scores a higher mean test accuracy there;
4. it beats the best MaskablePPO arm on return (paired CI above 0).

Pairing: every arm plays the same reset seeds (host initialisation, data order and the hidden condition follow
from the reset seed alone), so each learner seed's counted episodes are matched with the other arm's episodes of
the same reset seeds (the mean where the other arm played one reset seed more than once); the learner seed's
difference is the mean over its matched episodes, and the CI is Student t over learner seeds (the episodes of one
seed share one trained policy, so they are not independent). "Best" fixed plan and MaskablePPO arm are chosen by
mean return on these same episodes, which favours the rival, not the learner. Which rows play which part is
:class:`Roles`, chosen on the command line (:func:`add_arguments`).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import h2h_arms
from esper_agent.evaluate import mean_ci95

FIXED_KINDS = ("plan", "static")  # what "a single fixed plan" may be: a growth plan, or never growing
GAP_SHARE = 0.5  # of the (oracle - best fixed plan) return gap, that the learner must close
ACCURACY_MARGIN = 0.01  # test accuracy over the heuristic (1 pp)


@dataclass(frozen=True)
class Roles:
    """Which rows of the report play which part in the goals, by the names the table gives them."""

    learner: str = "esper_agent"
    """The primary learning arm's row (esper_agent from scratch), read by that row's evaluation alone."""
    maskable: tuple[str, ...] = ("maskable_flat", "maskable_multidiscrete")
    """MaskablePPO arms: each row of one of these names, labelled (``<name>-<label>``) or an alternate evaluation
    (``<name> (<evaluation>)``, e.g. sampled actions) is a candidate for the best."""
    heuristic: str = "heuristic"
    """The heuristic's row."""
    oracle: str = "oracle"
    """The per-condition oracle's row (a ceiling: it knows the hidden condition)."""
    fixed: tuple[str, ...] = ()
    """The fixed-plan rows to take the best of; empty: every row of kind ``plan`` or ``static``."""


DEFAULT_ROLES = Roles()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags naming :class:`Roles` (defaults: :class:`Roles`'s)."""
    group = parser.add_argument_group("goals", "which rows play which part in the head-to-head's goals")
    default = DEFAULT_ROLES
    group.add_argument("--goal-learner", default=default.learner, help="the primary learner's row")
    group.add_argument("--goal-maskable", nargs="+", default=list(default.maskable),
                       help="MaskablePPO arms to take the best of (with their labels and alternate evaluations)")
    group.add_argument("--goal-heuristic", default=default.heuristic, help="the heuristic's row")
    group.add_argument("--goal-oracle", default=default.oracle, help="the per-condition oracle's row")
    group.add_argument("--goal-fixed", nargs="+", default=list(default.fixed),
                       help="fixed-plan rows to take the best of (default: every plan and static row)")


def roles_from(args: argparse.Namespace) -> Roles:
    """The :class:`Roles` that :func:`add_arguments`'s flags name, each spelled as ``--arms`` takes it
    (``plan:grow-x2@0``) or as the table's row (``plan_grow-x2_at0``)."""
    row = h2h_arms.folder_name
    return Roles(learner=row(args.goal_learner), maskable=tuple(map(row, args.goal_maskable)),
                 heuristic=row(args.goal_heuristic), oracle=row(args.goal_oracle),
                 fixed=tuple(map(row, args.goal_fixed)))


# --- Pairing by reset seed --------------------------------------------------------------------------------------
def _finite(value: Any) -> bool:
    return value is not None and math.isfinite(float(value))


def _learner_seeds(row: dict, condition: str | None = None) -> dict[int, dict[int, dict]]:
    """The row's counted episodes (optionally of one condition), by training seed, then by reset seed."""
    out: dict[int, dict[int, dict]] = {}
    for e in row["by_episode"]:
        if e["counted"] and (condition is None or e["condition"] == condition):
            out.setdefault(e["seed"], {})[e["env_seed"]] = e
    return out


def _by_reset_seed(row: dict, key: str) -> dict[int, float]:
    """Per reset seed, the mean of ``key`` over every episode of the row on it (counted or not)."""
    values: dict[int, list[float]] = {}
    for e in row["by_episode"]:
        if _finite(e[key]):
            values.setdefault(e["env_seed"], []).append(float(e[key]))
    return {seed: float(np.mean(v)) for seed, v in values.items()}


def seed_differences(ours: dict, theirs: Sequence[dict], key: str, condition: str | None = None,
                     ) -> list[list[float]]:
    """Per learner seed (in seed order) with a reset seed every row of ``theirs`` played, the mean over those
    reset seeds of (ours - each of ``theirs``) in ``key``: one list per seed, one value per row of ``theirs``."""
    pools = [_by_reset_seed(row, key) for row in theirs]
    out = []
    for _, episodes in sorted(_learner_seeds(ours, condition).items()):
        shared = [r for r, e in sorted(episodes.items()) if _finite(e[key]) and all(r in p for p in pools)]
        if shared:
            out.append([float(np.mean([episodes[r][key] - p[r] for r in shared])) for p in pools])
    return out


def paired(ours: dict, theirs: dict, key: str, condition: str | None = None) -> dict[str, Any]:
    """``ours - theirs`` in ``key``, paired by reset seed: mean, 95% CI half-width (Student t over learner seeds;
    None for fewer than 2) and the number of learner seeds paired."""
    return _with_ci([d[0] for d in seed_differences(ours, [theirs], key, condition)])


def _with_ci(values: Sequence[float]) -> dict[str, Any]:
    """Mean, 95% CI half-width (None for fewer than 2 values) and count of per-seed values."""
    mean, half = mean_ci95(values)
    return {"mean": mean if values else None, "ci95": half if math.isfinite(half) else None, "seeds": len(values)}


def _above_zero(difference: dict[str, Any]) -> bool:
    """Whether a paired difference's 95% CI lies wholly above 0 (never with an unknown CI)."""
    return difference["ci95"] is not None and difference["mean"] - difference["ci95"] > 0


def fieller(numerators: Sequence[float], denominators: Sequence[float]) -> tuple[float, float] | None:
    """The 95% CI of mean(numerators) / mean(denominators) over paired samples (Fieller's): every ratio f for
    which the Student-t CI of (numerator - f denominator) holds 0. The squared half-width of that CI is a
    quadratic in f, built from :func:`mean_ci95` of the numerators, the denominators and their difference. None
    when the denominators' own CI holds 0 (the interval is then unbounded) or with fewer than two samples."""
    n_mean, n_half = mean_ci95(numerators)
    g_mean, g_half = mean_ci95(denominators)
    _, d_half = mean_ci95([n - g for n, g in zip(numerators, denominators, strict=True)])
    if not math.isfinite(g_half) or g_mean ** 2 <= g_half ** 2:
        return None
    cross = (n_half ** 2 + g_half ** 2 - d_half ** 2) / 2  # t^2 cov(n, g) / m
    a, b, c = g_mean ** 2 - g_half ** 2, n_mean * g_mean - cross, n_mean ** 2 - n_half ** 2
    root = math.sqrt(max(b * b - a * c, 0.0))  # >= 0: the point estimate n/g lies inside
    return (b - root) / a, (b + root) / a


def gap_closed(learner: dict, plan: dict, oracle: dict) -> dict[str, Any]:
    """The share of the return gap (oracle - best fixed plan) that the learner closes, (L - P) / (O - P), on the
    learner seeds' reset seeds that all three played: the ratio of the means over learner seeds, with Fieller's
    95% CI (:func:`fieller`), or a reason why there is none."""
    seeds = seed_differences(learner, [plan, oracle], "return")
    closed = [d[0] for d in seeds]  # L - P
    gap = [d[0] - d[1] for d in seeds]  # (L - P) - (L - O) = O - P
    out: dict[str, Any] = {"value": None, "ci95": None, "gap": _with_ci(gap), "seeds": len(seeds), "why": None}
    if not seeds or np.mean(gap) <= 0:
        out["why"] = "the oracle does not beat the best fixed plan on these episodes: no gap to close"
        return out
    out["value"] = float(np.mean(closed) / np.mean(gap))
    interval = fieller(closed, gap)
    if interval is None:
        out["why"] = ("no CI: fewer than 2 seeds" if len(seeds) < 2
                      else "no CI: the gap's own 95% CI holds 0, so the ratio's is unbounded")
    out["ci95"] = None if interval is None else list(interval)
    return out



# --- Who plays which part --------------------------------------------------------------------------------------
def _is_named(row: str, names: Iterable[str]) -> bool:
    """Whether ``row`` is one of ``names``, a labelled run of one (``<name>-<label>``) or an alternate
    evaluation of either (``<name> (<evaluation>)``)."""
    return any(row == n or row.startswith((f"{n}-", f"{n} (")) for n in names)


def fixed_rows(rows: Sequence[dict], roles: Roles) -> list[dict]:
    """The fixed-plan rows to take the best of: those :attr:`Roles.fixed` names, else every plan or static row."""
    return [r for r in rows if (r["arm"] in roles.fixed if roles.fixed else r.get("kind") in FIXED_KINDS)]


def maskable_rows(rows: Sequence[dict], roles: Roles) -> list[dict]:
    """The MaskablePPO rows to take the best of (:attr:`Roles.maskable`)."""
    return [r for r in rows if _is_named(r["arm"], roles.maskable)]


def best_by_return(rows: Sequence[dict]) -> dict | None:
    """The row with the highest mean return (the first in table order on a tie); None if none has one."""
    scored = [r for r in rows if _finite(r.get("return"))]
    return max(scored, key=lambda r: r["return"]) if scored else None


# --- The static frontier per condition -------------------------------------------------------------------------
def _means_on(row: dict, condition: str) -> tuple[float, float]:
    """Mean test accuracy and mean training FLOPs over the row's counted episodes of one condition."""
    episodes = [e for e in row["by_episode"] if e["counted"] and e["condition"] == condition]

    def mean(key: str) -> float:
        values = [float(e[key]) for e in episodes if _finite(e[key])]
        return float(np.mean(values)) if values else math.nan

    return mean("test_accuracy"), mean("train_flops")


def frontier(learner: dict, statics: Sequence[dict]) -> list[dict[str, Any]]:
    """Per condition of the learner's counted episodes: its mean test accuracy and training FLOPs there, the static
    arm with the highest mean test accuracy among those whose mean training FLOPs there are at most the learner's,
    the margin to it (and its paired difference on that condition), and whether none of them scores higher."""
    conditions = sorted({e["condition"] for e in learner["by_episode"] if e["counted"] and e["condition"]})
    out = []
    for condition in conditions:
        accuracy, flops = _means_on(learner, condition)
        entry: dict[str, Any] = {"condition": condition, "test_accuracy": accuracy, "train_flops": flops,
                                 "static": None, "margin": None, "paired": None, "holds": None}
        if not math.isfinite(flops) or not math.isfinite(accuracy):
            out.append(entry | {"why": "no training FLOPs or test accuracy recorded"})
            continue
        points = [(s, *_means_on(s, condition)) for s in statics]
        cheaper = [(s, a, f) for s, a, f in points if math.isfinite(a) and math.isfinite(f) and f <= flops]
        if cheaper:
            static, static_accuracy, static_flops = max(cheaper, key=lambda p: p[1])
            entry |= {"static": static["arm"], "static_test_accuracy": static_accuracy,
                      "static_train_flops": static_flops, "margin": accuracy - static_accuracy,
                      "paired": paired(learner, static, "test_accuracy", condition)}
        entry["holds"] = not cheaper or entry["margin"] >= 0
        out.append(entry)
    return out


# --- The goals -------------------------------------------------------------------------------------------------
GOALS = {  # each goal's key -> how it reads in the table
    "fixed_plan": "beats the best fixed plan on return (CI above 0) and closes ≥ half the gap to the oracle",
    "heuristic": "beats the heuristic on return (CI above 0), by ≥ 1 pp test accuracy (mean), at no more "
                 "training FLOPs (mean paired difference ≤ 0)",
    "static_frontier": "on or above the static frontier on every condition (no static arm of at most its mean "
                       "training FLOPs there has a higher mean test accuracy)",
    "maskable": "beats the best MaskablePPO arm on return (CI above 0)",
}


def _all(checks: Sequence[bool | None]) -> bool | None:
    """False if any check fails, else None if any could not be read, else True."""
    return False if any(c is False for c in checks) else (None if None in checks else True)


def _fixed_plan_goal(learner: dict, plan: dict, oracle: dict) -> dict[str, Any]:
    difference, gap = paired(learner, plan, "return"), gap_closed(learner, plan, oracle)
    closes = None if gap["value"] is None else gap["value"] >= GAP_SHARE
    return {"return": difference, "gap_closed": gap, "holds": _all([_above_zero(difference), closes])}


def _heuristic_goal(learner: dict, heuristic: dict) -> dict[str, Any]:
    ret, accuracy, flops = (paired(learner, heuristic, key) for key in ("return", "test_accuracy", "train_flops"))
    checks = [_above_zero(ret), accuracy["mean"] is not None and accuracy["mean"] >= ACCURACY_MARGIN,
              None if flops["mean"] is None else flops["mean"] <= 0]
    return {"return": ret, "test_accuracy": accuracy, "train_flops": flops, "holds": _all(checks)}


def _frontier_goal(learner: dict, statics: Sequence[dict]) -> dict[str, Any]:
    entries = frontier(learner, statics)
    margins = [e for e in entries if e["margin"] is not None]
    worst = min(margins, key=lambda e: e["margin"]) if margins else None
    return {"worst": None if worst is None else {k: worst[k] for k in ("condition", "static", "margin", "paired")},
            "fails_on": [e["condition"] for e in entries if e["holds"] is False], "conditions": entries,
            "holds": _all([e["holds"] for e in entries]) if entries else None}


NEEDS = {"fixed_plan": ("learner", "plan", "oracle"), "heuristic": ("learner", "heuristic"),
         "static_frontier": ("learner", "statics"), "maskable": ("learner", "maskable")}  # goal -> the parts it reads


def _read_goal(key: str, found: dict[str, Any]) -> dict[str, Any]:
    learner = found["learner"]
    if key == "fixed_plan":
        return _fixed_plan_goal(learner, found["plan"], found["oracle"])
    if key == "heuristic":
        return _heuristic_goal(learner, found["heuristic"])
    if key == "static_frontier":
        return _frontier_goal(learner, found["statics"])
    difference = paired(learner, found["maskable"], "return")
    return {"return": difference, "holds": _above_zero(difference)}


def goals(rows: Sequence[dict], roles: Roles = DEFAULT_ROLES) -> dict[str, Any]:
    """The goals block of the rows that record their episodes (``h2h_report.by_episode``); empty without any: the
    roles, which fixed plan and MaskablePPO row were chosen (and among which), the learner's paired differences
    to them and to the heuristic, and per goal whether it ``holds`` (None where it cannot be read) and what it
    needs that did not run (``missing``)."""
    shown = [r for r in rows if "by_episode" in r]
    if not shown:
        return {}
    by_arm = {r["arm"]: r for r in shown}
    fixed, maskable = fixed_rows(shown, roles), maskable_rows(shown, roles)
    found = {"learner": by_arm.get(roles.learner), "plan": best_by_return(fixed),
             "oracle": by_arm.get(roles.oracle), "heuristic": by_arm.get(roles.heuristic),
             "statics": [r for r in shown if r["kind"] == "static"] or None, "maskable": best_by_return(maskable)}
    labels = {"learner": f"{roles.learner} (learner)", "oracle": f"{roles.oracle} (oracle)",
              "plan": "a fixed plan (" + (", ".join(roles.fixed) or "any plan or static row") + ")",
              "heuristic": f"{roles.heuristic} (heuristic)", "statics": "a static row",
              "maskable": "a MaskablePPO row (" + ", ".join(roles.maskable) + ")"}
    block_goals = []
    for key, needed in NEEDS.items():
        missing = [labels[part] for part in needed if found[part] is None]
        block_goals.append({"goal": key, "rule": GOALS[key], "missing": missing,
                            **({"holds": None} if missing else _read_goal(key, found))})
    learner = found["learner"]
    versus = {"best fixed plan": found["plan"], "heuristic": found["heuristic"], "best MaskablePPO": found["maskable"]}
    differences = [{"versus": name, "arm": row["arm"], **{key: paired(learner, row, key)
                                                            for key in ("return", "test_accuracy", "train_flops")}}
                   for name, row in versus.items() if learner is not None and row is not None]
    selection = {"rule": "the highest mean return, on these same episodes",
                 "best_fixed_plan": _arm(found["plan"]), "fixed_among": [r["arm"] for r in fixed],
                 "best_maskable": _arm(found["maskable"]), "maskable_among": [r["arm"] for r in maskable]}
    return {"roles": asdict(roles), "selection": selection, "differences": differences, "goals": block_goals}


def _arm(row: dict | None) -> str | None:
    return None if row is None else row["arm"]


def write_json(rows: Sequence[dict], roles: Roles, path: Path) -> bool:
    """Write :func:`goals` to ``path``; False (no file) when no row records its episodes."""
    block = goals(rows, roles)
    if block:
        path.write_text(json.dumps(block, indent=1, default=float))
    return bool(block)
