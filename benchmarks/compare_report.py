"""Rebuild the head-to-head table and learning curves from every committed ``compare_agents`` slice.

    python -m benchmarks.compare_report benchmarks/results/compare/Esper-CIFAR10-Fast-v0

Per arm, each seed contributes the mean over its counted evaluation episodes (:func:`counted_episodes`: no reset
seed counts for two seeds of one arm, so the seeds' scores are independent); the table gives the mean over seeds
with a 95% Student-t confidence interval. "Gain per 1k params" is (test accuracy - static's) in percentage points per
1,000 added seed parameters (alpha-weighted, at the end of the episode); it is noise-dominated where an arm adds
few parameters, so the table also gives the difference to static itself, on the test set and on the
validation images the env's reward measures (``val_images`` of them: 2,000 in ``Esper-CIFAR10-Fast-v0``).
"− heuristic, paired" is the mean over the seeds both arms ran of (arm − heuristic), with its 95% CI: a seed's
evaluation episodes start from the same reset seeds in every arm (host initialisation, data order), so pairing
removes that shared part of their luck; host training on a GPU is not bit-deterministic, so only part of it.
"Return" is the env's own return (the
objective the learning arms maximise, in percentage points); "grown" is the most common set of seeds alive at
the end of an evaluation episode, slot by slot, with its share of episodes (on the family host, each slot's seeds
that joined the host, then its live one). A second table gives every
(arm, seed). An esper_agent arm trained with ``select_best_window`` is scored with the policy its training kept
(the per-seed table names the update whose rollout that policy collected), and gets a second row, "(last
policy)", for its last policy on the same episodes; a learning arm run with ``compare_agents --eval-sampled``
gets a row "(sampled actions)" for its policy sampling its actions on the same episodes. Below the table,
:func:`goal_check` says for each esper_agent arm whether it meets the first head-to-head's goal (slices without
costs and plans; the growth task's goals replace it where they are recorded). Writes
``summary.json``, ``table.md``, ``curves.png`` and, for each learning arm whose slices recorded the PPO telemetry
(esper_agent), ``telemetry-<arm>.png`` (op histogram, entropy per head, KL, explained variance per update; drawn by
:mod:`benchmarks.compare_plots`) into
the folder. Slices whose episodes record their hidden condition and ops (``benchmarks.h2h_arms``) also get, from
:mod:`benchmarks.h2h_report`, each arm's final params, training FLOPs, horizon and plans by condition (in
``summary.json`` and a section of ``table.md``), ``accuracy-flops.png`` with the static frontier and
``plans.png`` (the learners' and fixed policies' germinations by condition, step, blueprint and slot, the mean
over seeds), and from
:mod:`benchmarks.h2h_goals` whether the learner meets the head-to-head's goals (``goals.json`` and a section of
``table.md``; the ``--goal-*`` flags name which rows play which part).
``--seeds 8 9 ...`` scores only those seeds of every arm (e.g. a confirmation run's fresh seeds, apart from the
seeds its candidate was chosen on) into ``summary-seeds<...>.json`` and ``table-seeds<...>.md``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import numpy as np

from benchmarks import h2h_goals, h2h_report
from benchmarks.compare_agents import eval_env_seeds, records_path
from benchmarks.compare_plots import plot_curves, plot_telemetry
from esper_agent.evaluate import mean_ci95

ORDER = ("esper_agent", "maskable_flat", "maskable_multidiscrete", "heuristic", "random", "static")
RIVALS = ("heuristic", "maskable_flat", "maskable_multidiscrete")  # the arms the goal's CI must clear


def slice_paths(folder: Path) -> list[Path]:
    """Every finished slice ``<arm>/seed<k>.json`` under ``folder`` (not a paused slice's ``seed<k>.curve.json``)."""
    return sorted(p for p in folder.glob("*/seed*.json") if re.fullmatch(r"seed\d+\.json", p.name))


def load_slices(folder: Path) -> dict[str, list[dict]]:
    """Every slice of :func:`slice_paths`, with its episode timelines (``records_path``) when kept."""
    arms: dict[str, list[dict]] = {}
    for path in slice_paths(folder):
        slice_ = json.loads(path.read_text())
        if records_path(path).exists():
            slice_["episode_records"] = json.loads(gzip.decompress(records_path(path).read_bytes()))
        arms.setdefault(path.parent.name, []).append(slice_)
    # seeds in numeric order (the paths sort seed10 before seed2)
    return {arm: sorted(arms[arm], key=lambda s: s["seed"]) for arm in sorted(arms, key=lambda a: (_rank(a), a))}


def only_seeds(arms: dict[str, list[dict]], seeds: list[int]) -> dict[str, list[dict]]:
    """Each arm's slices of the given seeds, e.g. a confirmation run's fresh seeds; arms with none are left out."""
    kept = {arm: [s for s in slices if s["seed"] in seeds] for arm, slices in arms.items()}
    return {arm: slices for arm, slices in kept.items() if slices}


class Alternate(NamedTuple):
    """Another evaluation a slice may hold (``<key>_episodes``, ``<key>_eval_seconds``) on its own episodes."""

    key: str
    name: str  # the row is "<arm> (<name>)"
    every_seed: bool  # a seed without it played this evaluation as its own, so its own episodes count
    same_policy: bool  # it plays the policy the arm's row plays (so the kept update still applies)

    def row(self, arm: str) -> str:
        return f"{arm} ({self.name})"


ALTERNATE_EVALUATIONS = (
    Alternate("last_policy", "last policy", every_seed=True, same_policy=False),  # select_best_window's last policy
    Alternate("sampled", "sampled actions", every_seed=False, same_policy=True),  # compare_agents --eval-sampled
)


def with_alternate_evaluations(arms: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """``arms`` plus, after each arm whose slices also hold an evaluation of :data:`ALTERNATE_EVALUATIONS`, a row
    ``<arm> (<name>)`` scored on those episodes (its "grown" is n/a: only the arm's own timelines are saved; its
    seconds are that evaluation's). The last-policy row has the arm's seeds (a seed that kept nothing played its
    last policy as its own), so it shows what the choice changed; the sampled row leaves out seeds run without
    ``--eval-sampled``, so it may have fewer seeds than the arm's: compare it with the per-seed table."""
    out: dict[str, list[dict]] = {}
    for arm, slices in arms.items():
        out[arm] = slices
        for alt in ALTERNATE_EVALUATIONS:
            episodes, seconds = f"{alt.key}_episodes", f"{alt.key}_eval_seconds"
            if not any(episodes in s for s in slices):
                continue
            dropped = ("episode_records",) if alt.same_policy else ("episode_records", "selection")
            out[alt.row(arm)] = [{k: v for k, v in s.items() if k not in dropped}
                                 | {"episodes": s.get(episodes, s["episodes"]),
                                    "eval_seconds": s.get(seconds, s["eval_seconds"])}
                                 for s in slices if alt.every_seed or episodes in s]
    return out


def is_alternate_row(row: str) -> bool:
    """Whether a table row is an arm's alternate evaluation (:func:`with_alternate_evaluations`)."""
    return any(row.endswith(alt.row("")) for alt in ALTERNATE_EVALUATIONS)


def arm_of(folder: str) -> str:
    """The arm of a results folder: ``<arm>`` or ``<arm>-<label>``."""
    return folder.split("-")[0]


def _rank(folder: str) -> int:
    """Table position of an arm's folder: ``<arm>`` or ``<arm>-<label>`` sits with its arm."""
    return ORDER.index(arm_of(folder)) if arm_of(folder) in ORDER else len(ORDER)


def episode_seeds(slice_: dict) -> list[int]:
    """The reset seed of each of a slice's evaluation episodes; slices before 2026-11-27 did not record them and
    all used stride 1 (``compare_agents.eval_env_seeds``)."""
    episodes = slice_["episodes"]
    if all("env_seed" in e for e in episodes):
        return [e["env_seed"] for e in episodes]
    return eval_env_seeds(slice_["seed"], len(episodes), slice_.get("eval_seed_stride", 1))


def counted_episodes(slices: list[dict]) -> list[dict[int, dict]]:
    """Per slice (in the given order), the episodes it is scored on, by reset seed: the same number for every
    seed of the arm, and no reset seed counted for two of them. Seeds in increasing order each take the lowest
    reset seeds of their own that no earlier seed took, and the number is the largest every seed can get. With
    disjoint reset seeds that is every episode; with the overlapping ones of old campaigns (seed k+1 replayed
    all but one of seed k's), a fixed policy scored nearly the same on every seed, and a CI over seeds measured
    nothing."""
    seeds_of = [episode_seeds(s) for s in slices]
    order = sorted(range(len(slices)), key=lambda k: slices[k]["seed"])
    most = len(set().union(*seeds_of)) // max(1, len(slices))
    chosen = next((c for share in range(most, 0, -1) if (c := _deal(seeds_of, order, share)) is not None),
                  [[] for _ in slices])
    return [{seed: s["episodes"][seeds.index(seed)] for seed in c}
            for s, seeds, c in zip(slices, seeds_of, chosen, strict=True)]


def _deal(seeds_of: list[list[int]], order: list[int], share: int) -> list[list[int]] | None:
    """``share`` reset seeds to each slice, in ``order``, none to two; None if some slice cannot get that many."""
    taken: set[int] = set()
    chosen: list[list[int]] = [[] for _ in seeds_of]
    for k in order:
        chosen[k] = sorted(seed for seed in seeds_of[k] if seed not in taken)[:share]
        if len(chosen[k]) < share:
            return None
        taken.update(chosen[k])
    return chosen


def _mean_of(episodes: dict[int, dict], key: str) -> float:
    values = [e[key] for e in episodes.values() if e.get(key) is not None]
    return float(np.mean(values)) if values else math.nan


def _per_seed(counted: list[dict[int, dict]], key: str) -> list[float]:
    """Each seed's mean of ``key`` over its counted episodes (:func:`counted_episodes`)."""
    return [_mean_of(episodes, key) for episodes in counted]


def seed_means(slices: list[dict], key: str) -> list[float]:
    """Each slice's (seed's) mean of ``key`` over the episodes :func:`counted_episodes` counts for it."""
    return _per_seed(counted_episodes(slices), key)


def paired_difference(slices: list[dict], reference: list[dict]) -> tuple[float, float, int]:
    """Mean and 95% CI half-width over the seeds both ran of (test accuracy - the reference's), each seed on its
    counted episodes (which no other seed of this arm counts) against the reference's episodes of the same seed
    and reset seeds, and the number of seeds paired."""
    theirs = {s["seed"]: dict(zip(episode_seeds(s), s["episodes"], strict=True)) for s in reference}
    diffs = []
    for s, ours in zip(slices, counted_episodes(slices), strict=True):
        reference_episodes = theirs.get(s["seed"], {})
        both = [(ours[e]["test_accuracy"], reference_episodes[e]["test_accuracy"])
                for e in sorted(ours.keys() & reference_episodes.keys())]
        differences = [a - b for a, b in both if a is not None and b is not None]
        if differences:
            diffs.append(float(np.mean(differences)))
    if not diffs:
        return math.nan, math.nan, 0
    mean, half = mean_ci95(diffs)
    return mean, half, len(diffs)


def grown(slices: list[dict]) -> str:
    """The most common :func:`benchmarks.h2h_report.seeds_at_end` over all evaluation episodes, with its share."""
    counts = Counter(h2h_report.seeds_at_end(r) for s in slices for r in s.get("episode_records", []))
    if not counts:
        return "n/a"
    top, n = counts.most_common(1)[0]
    return f"{top} ({100 * n / counts.total():.0f}%)"


def trained_host_epochs(slices: list[dict]) -> int:
    """The most host epochs any of the arm's seeds trained: its curve's last episode ends there. MaskablePPO
    collects whole rollouts, so a budget that is not a whole number of them ends one rollout past it
    (``maskable_multidiscrete-m3``'s 640-host-epoch rollouts reach 8,320 of a budget of 8,000); an arm without a
    curve (a fixed policy) trained what its budget says."""
    return max(int((s.get("curve") or [{}])[-1].get("host_epochs", s["budget_host_epochs"])) for s in slices)


def budget_cell(row: dict) -> str:
    """The budget, and what the arm trained where that differs, so a learner that trained more is never hidden."""
    budget, trained = row["budget_host_epochs"], row["trained_host_epochs"]
    return f"{budget}" if trained == budget else f"{budget} ({trained} trained)"


def summarize(arms: dict[str, list[dict]]) -> list[dict]:
    counted = {arm: counted_episodes(slices) for arm, slices in arms.items()}
    static = np.nanmean(_per_seed(counted["static"], "test_accuracy")) if "static" in arms else math.nan
    static_val = np.nanmean(_per_seed(counted["static"], "val_accuracy")) if "static" in arms else math.nan
    rows = []
    for arm, slices in arms.items():
        per_seed_test = _per_seed(counted[arm], "test_accuracy")
        per_seed_params = _per_seed(counted[arm], "seed_params")
        test, half = mean_ci95(per_seed_test)
        ret, ret_half = mean_ci95(_per_seed(counted[arm], "return"))
        params = float(np.nanmean(per_seed_params))
        val = float(np.nanmean(_per_seed(counted[arm], "val_accuracy")))
        gain = 100 * (test - static) / (params / 1000) if params > 0 and math.isfinite(static) else math.nan
        reference = arms.get("heuristic", []) if arm != "heuristic" else []
        paired, paired_half, pairs = paired_difference(slices, reference)
        rows.append({
            "arm": arm, "seeds": sorted(s["seed"] for s in slices), "test_accuracy": test, "test_ci95": half,
            "test_minus_static": test - static, "val_minus_static": val - static_val,
            "test_minus_heuristic_paired": paired,
            "test_minus_heuristic_ci95": paired_half, "paired_seeds": pairs, "return": ret, "return_ci95": ret_half,
            "grown": grown(slices),
            "val_accuracy": val, "seed_params": params,
            "gain_pp_per_1k_params": gain,
            "invalid_rate": float(np.nanmean(_per_seed(counted[arm], "invalid_rate"))),
            "budget_host_epochs": slices[0]["budget_host_epochs"], "trained_host_epochs": trained_host_epochs(slices),
            "rollbacks": int(sum(
                e["rollback"] for s in slices for e in s["episodes"])),
            "seconds_per_seed": float(np.mean([s["train_seconds"] + s["eval_seconds"] for s in slices])),
            "devices": sorted({s["device"] for s in slices}),
            "episodes_per_seed": min(len(s["episodes"]) for s in slices),
            "counted_per_seed": len(counted[arm][0]),  # the same for every seed of the arm
            "per_seed": [{"seed": s["seed"], "test_accuracy": t, "seed_params": p, "grown": grown([s]),
                          "kept_update": (s.get("selection") or {}).get("update")}
                         for s, t, p in zip(slices, per_seed_test, per_seed_params, strict=True)],
            **h2h_report.row_fields(slices, counted[arm]),  # cost, horizon and plans, where the slices record them
        })
    return rows


def goal_check(rows: list[dict]) -> list[dict]:
    """The head-to-head's goal for each esper_agent arm, read from its own row (the argmax policy, not an
    alternate evaluation): its test accuracy's 95% CI lies wholly above the CI of every rival in :data:`RIVALS`
    that ran, and it adds no more seed parameters than the heuristic. ``margin`` is the arm's lower bound minus the
    highest upper bound among the rivals (positive when the CIs are apart). An empty list without a heuristic row.
    With many arms one can clear the bar by luck, so an arm chosen after its results were seen needs confirming on
    seeds it has not run."""
    by_arm = {r["arm"]: r for r in rows}
    if "heuristic" not in by_arm:
        return []
    upper = {a: by_arm[a]["test_accuracy"] + by_arm[a]["test_ci95"] for a in RIVALS if a in by_arm}
    # a CI needs two seeds: an arm with one has no upper bound, which nothing can be shown to clear
    closest = max(upper, key=lambda a: upper[a] if math.isfinite(upper[a]) else math.inf)
    checks = []
    for r in rows:
        if arm_of(r["arm"]) != "esper_agent" or is_alternate_row(r["arm"]):
            continue
        margin = (r["test_accuracy"] - r["test_ci95"]) - upper[closest]  # NaN where either CI is unknown
        params_ok = bool(r["seed_params"] <= by_arm["heuristic"]["seed_params"])
        checks.append({"arm": r["arm"], "seeds": len(r["seeds"]), "closest_rival": closest,
                       "margin": float(margin), "params_ok": params_ok, "met": bool(margin > 0 and params_ok)})
    return checks


def markdown(rows: list[dict], env: str, roles: h2h_goals.Roles = h2h_goals.DEFAULT_ROLES) -> str:
    def pct(v: float) -> str:
        return "n/a" if not math.isfinite(v) else f"{100 * v:.2f}"

    def ci(v: float) -> str:
        return "" if not math.isfinite(v) else f" ± {100 * v:.2f}"

    devices = " / ".join(sorted({d for row in rows for d in row["devices"]}))
    played = sorted({row["episodes_per_seed"] for row in rows})
    counted = sorted({row["counted_per_seed"] for row in rows})
    lines = [f"Env {env}; devices {devices}; {_span(played)} evaluation episodes per seed, {_span(counted)} of "
             "them counted (no reset seed counted for two seeds of an arm); mean over seeds with a 95% CI; grown "
             "(the most common seeds at the end of an episode, slot by slot, * = not fossilized, '+' = joined in "
             "turn on the family host, with its share of episodes) and rollbacks count every episode.", "",
             "| arm | seeds | test accuracy % | − static, test / val (pp) | − heuristic, paired (pp) | return (pp) | "
             "seed params | gain pp / 1k params | grown | invalid actions % | budget (host epochs) | rollbacks | "
             "wall s / seed |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        gain = "n/a" if not math.isfinite(r["gain_pp_per_1k_params"]) else f"{r['gain_pp_per_1k_params']:+.2f}"
        delta = ("n/a" if not math.isfinite(r["test_minus_static"])
                 else f"{100 * r['test_minus_static']:+.2f} / {100 * r['val_minus_static']:+.2f}")
        paired = ("n/a" if not math.isfinite(r["test_minus_heuristic_paired"])
                  else f"{100 * r['test_minus_heuristic_paired']:+.2f}{ci(r['test_minus_heuristic_ci95'])}")
        lines.append(f"| {r['arm']} | {len(r['seeds'])} | {pct(r['test_accuracy'])}{ci(r['test_ci95'])} | {delta} | "
                     f"{paired} | {pct(r['return'])}{ci(r['return_ci95'])} | {r['seed_params']:.0f} | {gain} | "
                     f"{r['grown']} | "
                     f"{pct(r['invalid_rate'])} | {budget_cell(r)} | "
                     f"{r['rollbacks']} | {r['seconds_per_seed']:.0f} |")
    lines += _goal_lines(rows)
    lines += h2h_report.markdown_lines(rows, roles)  # goals, cost, horizon and plans, where the slices record them
    lines += ["", "Per seed (mean over its counted evaluation episodes):", "",
              "| arm | seed | test accuracy % | seed params | grown | kept policy (collected update) |",
              "|---|---:|---:|---:|---|---:|"]
    lines += [f"| {r['arm']} | {p['seed']} | {pct(p['test_accuracy'])} | {p['seed_params']:.0f} | {p['grown']} | "
              f"{'' if p['kept_update'] is None else p['kept_update']} |" for r in rows for p in r["per_seed"]]
    return "\n".join(lines) + "\n"


def _goal_lines(rows: list[dict]) -> list[str]:
    """The first head-to-head's goal, for slices of that campaign; slices that record costs and plans are read by
    the growth task's goals instead (``h2h_report.markdown_lines``), so it is not shown beside them."""
    checks = goal_check(rows) if not any("plans" in r for r in rows) else []
    if not checks:
        return []
    lines = ["", f"Goal: the arm's test-accuracy 95% CI wholly above that of each rival that ran "
             f"({', '.join(RIVALS)}), at no more seed params than the heuristic (margin: the arm's lower bound minus "
             "the highest rival upper bound):", ""]
    for c in checks:
        params = "" if c["params_ok"] else "; more seed params than the heuristic"
        margin = f"{100 * c['margin']:+.2f} pp" if math.isfinite(c["margin"]) else "n/a (a CI needs 2 seeds)"
        lines.append(f"- {c['arm']} ({c['seeds']} seeds): {'met' if c['met'] else 'not met'}, margin {margin} to "
                     f"{c['closest_rival']}{params}")
    return lines


def _span(values: list[int]) -> str:
    return str(values[0]) if values[0] == values[-1] else f"{values[0]} to {values[-1]}"


def seed_list_name(seeds: list[int]) -> str:
    """A file-name-safe name for a set of seeds: ``8-15`` for a run of consecutive seeds, else ``0_3_5``."""
    ordered = sorted(set(seeds))
    if len(ordered) > 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return "_".join(map(str, ordered))


def seeds_named(name: str) -> list[int]:
    """The seeds of a :func:`seed_list_name` (``table-seeds<name>.md``)."""
    first, _, last = name.partition("-")
    return list(range(int(first), int(last) + 1)) if last else [int(k) for k in name.split("_")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="benchmarks/results/compare/<env>")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="only these seeds of every arm; writes table-seeds<...>.md and summary-seeds<...>.json "
                             "and no figures, beside the whole table")
    h2h_goals.add_arguments(parser)
    args = parser.parse_args(argv)
    roles = h2h_goals.roles_from(args)
    arms = load_slices(args.folder)
    if args.seeds is not None:
        arms = only_seeds(arms, args.seeds)
    if not arms:
        raise SystemExit(f"no slices (<arm>/seed<k>.json) under {args.folder}"
                         + ("" if args.seeds is None else f" of seeds {args.seeds}"))
    alternates = with_alternate_evaluations(arms)  # each row's slices, "(sampled actions)" rows included
    rows = summarize(alternates)
    env = args.folder.name
    suffix = "" if args.seeds is None else f"-seeds{seed_list_name(args.seeds)}"
    (args.folder / f"summary{suffix}.json").write_text(json.dumps(rows, indent=1, default=float))
    (args.folder / f"table{suffix}.md").write_text(markdown(rows, env, roles))
    h2h_goals.write_json(rows, roles, args.folder / f"goals{suffix}.json")
    if args.seeds is None:  # the figures are of the whole campaign
        plot_curves(arms, rows, args.folder / "curves.png", env)
        h2h_report.plot_accuracy_flops(rows, args.folder / "accuracy-flops.png", env)
        h2h_report.plot_plans(alternates, args.folder / "plans.png", env)
        for arm, slices in arms.items():
            plot_telemetry(slices, args.folder / f"telemetry-{arm}.png", f"{arm} on {env}")
    print(markdown(rows, env, roles))


if __name__ == "__main__":
    main()
