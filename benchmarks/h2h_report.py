"""What the head-to-head adds to ``benchmarks.compare_report``: per arm, what it cost (final parameters, training
FLOPs) beside its return and test accuracy, how each learner read the end of an episode (the horizon), what it
grows, where and when under each hidden condition (in words, and as heatmaps for the arms that choose: learners
and fixed policies), and a figure of test accuracy against training FLOPs with every arm's seeds and the static
frontier drawn as a line; and what one episode's slots grew (:func:`seeds_at_end`,
the report's "grown" column), joins on the family host included.

It reads what ``benchmarks.h2h_arms.EpisodeFacts`` records in each evaluation episode (``condition``, ``ops``,
``params``, ``train_flops``); slices written before it recorded them get none of this (:func:`row_fields` adds
nothing and :func:`markdown_lines` writes nothing), so the committed tables stay what they were.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from benchmarks import h2h_goals
from benchmarks.h2h_arms import ORACLE
from esper_env.blueprints import catalogue
from esper_env.lifecycle import Stage
from esper_env.render import EpisodeRecord, episode_events
from esper_env.spaces import Op

CEILING = "ceiling"  # the oracle's kind: it knows the hidden condition, so it is reported, not a rival
COSTS = ("return", "test_accuracy", "final_params", "train_flops")
EPISODE_KEYS = {"return": "return", "test_accuracy": "test_accuracy", "final_params": "params",
                "train_flops": "train_flops"}  # a per-seed cost -> the episode key it is the mean of
HOLDS = {True: "yes", False: "no", None: "not read"}  # a goal's holds, as the table writes it
ON_FRONTIER = {True: "on or above", False: "below", None: "not read"}
PAIRED = ("return", "test_accuracy", "train_flops")  # what each row keeps per episode, for pairing by reset seed


def _slot_at_end(blueprint: int, stage: int, host: str) -> str:
    """A slot's seed at the end of an episode: its blueprint in the catalogue of the episode's host, starred while
    not yet fossilized; '-' if none."""
    if Stage.GERMINATED <= stage <= Stage.HOLDING:
        return catalogue(host)[blueprint].name + "*"
    return catalogue(host)[blueprint].name if stage == Stage.FOSSILIZED else "-"


def seeds_at_end(timeline: dict) -> str:
    """One episode's seeds, slot by slot: the seed in the slot at the end (starred while not fossilized); on the
    family host, where a seed joins the host as it fossilizes and leaves its slot free, the seeds that joined from
    each slot, in order ('+'), then the one alive at the end."""
    host = timeline.get("host", "small")  # timelines from before the family host: small
    at_end = [_slot_at_end(b, st, host) for b, st in zip(timeline["blueprint"][-1], timeline["stage"][-1],
                                                         strict=True)]
    if host != "family":
        return ", ".join(at_end)
    record = EpisodeRecord.from_json(timeline)
    joined: list[list[str]] = [[] for _ in at_end]
    for event in episode_events(record):
        is_join = event.kind == "fossilize" and record.stage[event.step][event.slot] == Stage.DORMANT
        if is_join:  # the seed that joined is the one alive in the slot the step before
            joined[event.slot].append(record.blueprint_name(record.blueprint[event.step - 1][event.slot]))
    slots = []
    for names, live in zip(joined, at_end, strict=True):
        seeds = names + ([live] if live != "-" else [])
        slots.append("+".join(seeds) if seeds else "-")
    return ", ".join(slots)


def has_facts(slices: Sequence[dict]) -> bool:
    """Whether any evaluation episode of ``slices`` recorded its condition and ops (``EpisodeFacts``)."""
    return any("condition" in e for s in slices for e in s["episodes"])


def kind_of(slice_: dict) -> str:
    """What an arm is, for reading the table: ``ceiling`` (the oracle), ``static`` (WAIT on a starting host: the
    static frontier), ``plan`` (a fixed growth plan), ``learner`` (trained for a budget) or ``policy`` (the other
    fixed policies: heuristic, random)."""
    arm = slice_["arm"]
    if arm == ORACLE:
        return CEILING
    if arm == "static" or arm.startswith("static:"):
        return "static"
    if arm.startswith("plan:"):
        return "plan"
    return "learner" if slice_["budget_host_epochs"] > 0 else "policy"


def _mean(values: Sequence[Any]) -> float:
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return float(np.mean(finite)) if finite else math.nan


def per_seed_costs(slices: Sequence[dict], counted: Sequence[dict[int, dict]]) -> list[dict[str, Any]]:
    """Per slice, the means of :data:`COSTS` over its counted episodes (``compare_report.counted_episodes``)."""
    return [{"seed": s["seed"], **{key: _mean([e.get(EPISODE_KEYS[key]) for e in episodes.values()])
                                   for key in COSTS}}
            for s, episodes in zip(slices, counted, strict=True)]


def horizon_of(slices: Sequence[dict]) -> str | None:
    """How the arm's training read the end at ``max_epochs`` (``terminal`` or ``truncated``; both, joined by
    '/', if its seeds differ); None for an arm that does not learn."""
    found = sorted({s.get("horizon") for s in slices} - {None})
    return "/".join(found) if found else None


def plans(slices: Sequence[dict]) -> dict[str, dict[str, Any]]:
    """Per hidden condition, over every evaluation episode of ``slices``: how many episodes, the count of each
    executed (op, blueprint, slot), most frequent first, the episode steps at which germinations happened and
    the germinations per episode: what the arm grows, where and when, without being told the condition."""
    found: dict[str, dict[str, Any]] = {}
    for episode in (e for s in slices for e in s["episodes"] if "condition" in e):
        entry = found.setdefault(str(episode["condition"]), {"episodes": 0, "ops": Counter(), "at": Counter()})
        entry["episodes"] += 1
        for step, op, slot, blueprint in episode["ops"]:
            entry["ops"][(op, blueprint, slot)] += 1
            entry["at"][step] += int(op == "germinate")
    out = {}
    for condition in sorted(found):
        entry = found[condition]
        # most frequent first; ties in the op table's order (germinate before fossilize), then by slot
        ops = sorted(entry["ops"].items(), key=lambda item: (-item[1], Op[item[0][0].upper()], item[0][2],
                                                             str(item[0][1])))
        out[condition] = {
            "episodes": entry["episodes"],
            "ops": [{"op": op, "blueprint": blueprint, "slot": slot, "count": n} for (op, blueprint, slot), n in ops],
            "germinations_at": {str(step): n for step, n in sorted(entry["at"].items()) if n},
            "germinations_per_episode": sum(entry["at"].values()) / entry["episodes"]}
    return out


def by_episode(slices: Sequence[dict], counted: Sequence[dict[int, dict]]) -> list[dict[str, Any]]:
    """Every evaluation episode of ``slices`` whose reset seed is known, by training seed and reset seed: whether
    it is one of its seed's counted episodes (``compare_report.counted_episodes``), its condition and
    :data:`PAIRED`; what ``benchmarks.h2h_goals`` pairs across arms by reset seed, from the rows alone."""
    out = []
    for s, chosen in zip(slices, counted, strict=True):
        # a counted episode's reset seed is its key there (derived for slices that did not record it)
        counted_at = {id(e): reset for reset, e in chosen.items()}
        for e in s["episodes"]:
            reset = counted_at.get(id(e), e.get("env_seed"))
            if reset is not None:
                out.append({"seed": s["seed"], "env_seed": reset, "counted": id(e) in counted_at,
                            "condition": e.get("condition"), **{key: e.get(key) for key in PAIRED}})
    return sorted(out, key=lambda e: (e["seed"], e["env_seed"]))  # whatever order the slice kept them in


def row_fields(slices: Sequence[dict], counted: Sequence[dict[int, dict]]) -> dict[str, Any]:
    """The head-to-head's fields of an arm's row in ``summary.json``; none for slices without ``EpisodeFacts``."""
    if not has_facts(slices):
        return {}
    seeds = per_seed_costs(slices, counted)
    return {"kind": kind_of(slices[0]), "final_params": _mean([p["final_params"] for p in seeds]),
            "train_flops": _mean([p["train_flops"] for p in seeds]), "horizon": horizon_of(slices),
            "per_seed_costs": seeds, "plans": plans(slices), "by_episode": by_episode(slices, counted)}


def static_frontier(rows: Sequence[dict]) -> list[dict[str, Any]]:
    """The static arms' mean (training FLOPs, test accuracy), by training FLOPs: every size trained from scratch."""
    points = [{"arm": r["arm"], "train_flops": r["train_flops"], "test_accuracy": r["test_accuracy"]}
              for r in rows if r.get("kind") == "static" and math.isfinite(r["train_flops"])]
    return sorted(points, key=lambda p: p["train_flops"])


def _number(value: float, spec: str, scale: float = 1.0) -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(scale * value, spec)


def _horizon_line(rows: Sequence[dict]) -> str:
    learners = {r["arm"]: r["horizon"] for r in rows if r["kind"] == "learner"}
    if not learners:
        return "Horizon: no learner ran."
    if len(set(learners.values())) == 1:
        return f"Horizon: every learner read the end at max_epochs as {next(iter(learners.values()))}."
    named = ", ".join(f"{arm}: {h}" for arm, h in learners.items())
    return f"Horizon: the learners read the end at max_epochs differently ({named}); not one choice for all."


def markdown_lines(rows: Sequence[dict], roles: h2h_goals.Roles = h2h_goals.DEFAULT_ROLES) -> list[str]:
    """The head-to-head's sections of ``table.md``: the goals (:func:`goal_lines`, ``roles`` naming who plays
    which part), cost and horizon per arm, the static frontier, and what each arm grows under each hidden
    condition; nothing when no row has :func:`row_fields`."""
    shown = [r for r in rows if "plans" in r]
    if not shown:
        return []
    lines = [*goal_lines(h2h_goals.goals(rows, roles)), "", "## Cost, horizon and what each arm grows", "",
             "Mean over seeds (each seed's counted episodes): the env's return (pp), test accuracy, final parameters "
             "and training FLOPs (the family host's count; n/a elsewhere). The oracle is a ceiling, not a rival: it "
             "knows each episode's hidden condition.", "",
             "| arm | kind | seeds | return (pp) | test accuracy % | final params | training FLOPs | horizon |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in shown:
        kind = "ceiling (knows the condition)" if r["kind"] == CEILING else r["kind"]
        lines.append(f"| {r['arm']} | {kind} | {len(r['seeds'])} | {_number(r['return'], '.2f', 100)} | "
                     f"{_number(r['test_accuracy'], '.2f', 100)} | {_number(r['final_params'], ',.0f')} | "
                     f"{_number(r['train_flops'], '.3g')} | {r['horizon'] or '–'} |")
    frontier = static_frontier(shown)
    lines += ["", _horizon_line(shown), "", "Static frontier (static arms by training FLOPs): " + (
        "; ".join(f"{p['arm']} {p['train_flops']:.3g} FLOPs, {100 * p['test_accuracy']:.2f}%" for p in frontier)
        or "no static arm with training FLOPs") + ".", "",
        "Plans by hidden condition, over every evaluation episode: op blueprint@slot ×count, and the episode steps "
        "at which germinations happened (step ×count).", ""]
    for r in shown:
        for condition, p in r["plans"].items():
            ops = ", ".join(f"{o['op']}{' ' + o['blueprint'] if o['blueprint'] else ''}@{o['slot']} ×{o['count']}"
                            for o in p["ops"]) or "WAIT only"
            at = ", ".join(f"{step} ×{n}" for step, n in p["germinations_at"].items()) or "none"
            lines.append(f"- {r['arm']}, {condition} ({p['episodes']} episodes, {p['germinations_per_episode']:.2f} "
                         f"germinations each): {ops}; germinations at steps {at}")
    return lines


def _paired(difference: dict[str, Any] | None, unit: str = "pp") -> tuple[str, str]:
    """A paired difference (``h2h_goals.paired``) as (mean, 95% CI half-width) text: pp of a fraction, or FLOPs."""
    if difference is None or difference["mean"] is None:
        return "n/a", "n/a"
    scale, spec = (100.0, ".2f") if unit == "pp" else (1.0, ".3g")
    half = "n/a (one seed)" if difference["ci95"] is None else f"± {format(scale * difference['ci95'], spec)} {unit}"
    return f"{format(scale * difference['mean'], '+' + spec)} {unit}", half


def _goal_cells(goal: dict[str, Any]) -> tuple[str, str, str]:
    """A goal's value, 95% CI and holds as the goals table writes them."""
    if goal["missing"]:
        return "n/a", "n/a", "not read: missing " + ", ".join(goal["missing"])
    holds = HOLDS[goal["holds"]]
    parts = [(name, _paired(goal[key], unit)) for key, name, unit in (
        ("return", "return", "pp"), ("test_accuracy", "test accuracy", "pp"), ("train_flops", "training", "FLOPs"))
        if key in goal]
    if goal["goal"] == "static_frontier":
        worst = goal["worst"]
        parts = [] if worst is None else [(f"worst margin ({worst['condition']}, vs {worst['static']})",
                                           (format(100 * worst["margin"], "+.2f") + " pp",
                                            _paired(worst["paired"])[1] + " (paired)"))]
        holds += f" (below on {', '.join(goal['fails_on'])})" if goal["fails_on"] else ""
    if goal["goal"] == "fixed_plan":
        gap = goal["gap_closed"]
        share = "n/a" if gap["value"] is None else f"{gap['value']:.2f}"
        bounds = gap["why"] if gap["ci95"] is None else f"{gap['ci95'][0]:.2f} to {gap['ci95'][1]:.2f} (Fieller)"
        parts.append(("share of the gap closed", (share, bounds)))
    value = "; ".join(f"{name} {mean}" for name, (mean, _) in parts) or "n/a"
    return value, "; ".join(f"{name} {half}" for name, (_, half) in parts) or "n/a", holds


def goal_lines(block: dict[str, Any]) -> list[str]:
    """The goals' section of ``table.md`` from ``h2h_goals.goals``: the learner's paired differences to the best
    fixed plan, the heuristic and the best MaskablePPO row, each goal's value, CI and whether it holds, and the
    learner against the static frontier per condition; nothing for an empty block."""
    if not block:
        return []
    learner, chosen = block["roles"]["learner"], block["selection"]
    lines = ["", "## Goals", "",
             f"Learner: {learner} (its own row's evaluation). Paired by reset seed: per learner seed, the mean over "
             "its counted evaluation episodes of (learner − the other arm's episode on the same reset seed), then the "
             "mean over learner seeds with a Student-t 95% CI. The best fixed plan (among "
             f"{', '.join(chosen['fixed_among']) or 'none'}) and the best MaskablePPO row (among "
             f"{', '.join(chosen['maskable_among']) or 'none'}) are those with {chosen['rule']}: a choice that "
             "favours them. The share of the gap closed is (learner − plan) / (oracle − plan) in return, the ratio "
             "of the means over learner seeds, with Fieller's 95% CI; it holds at a share ≥ 0.5.", ""]
    if block["differences"]:
        lines += [f"| {learner} − | arm | return | test accuracy | training FLOPs | learner seeds paired |",
                  "|---|---|---:|---:|---:|---:|"]
        for d in block["differences"]:
            cells = [" ".join(_paired(d[key], unit)) for key, unit in (
                ("return", "pp"), ("test_accuracy", "pp"), ("train_flops", "FLOPs"))]
            lines.append(f"| {d['versus']} | {d['arm']} | {' | '.join(cells)} | {d['return']['seeds']} |")
        lines.append("")
    lines += ["| goal | value | 95% CI | holds |", "|---|---|---|---|"]
    lines += [f"| {goal['rule']} | {' | '.join(_goal_cells(goal))} |" for goal in block["goals"]]
    frontier = next(g for g in block["goals"] if g["goal"] == "static_frontier")
    if frontier.get("conditions"):
        lines += ["", f"Per condition, {learner}'s mean test accuracy at its mean training FLOPs against the static "
                  "row with the highest mean test accuracy among those of at most those FLOPs:", ""]
    for entry in frontier.get("conditions", []):
        versus = ("no static row at or below its FLOPs" if entry["static"] is None else
                  f"{entry['static']} {100 * entry['static_test_accuracy']:.2f}% at "
                  f"{entry['static_train_flops']:.3g} FLOPs, margin {100 * entry['margin']:+.2f} pp")
        lines.append(f"- {entry['condition']}: {learner} {_number(entry['test_accuracy'], '.2f', 100)}% at "
                     f"{_number(entry['train_flops'], '.3g')} FLOPs; {versus}: {ON_FRONTIER[entry['holds']]}")
    return lines


def plot_accuracy_flops(rows: Sequence[dict], path: Path, env: str) -> bool:
    """Test accuracy against training FLOPs: every arm's seeds as points, the static frontier (the static arms'
    means by training FLOPs) as a line; False (no file) when no row has training FLOPs."""
    shown = [r for r in rows if any(math.isfinite(p["train_flops"]) for p in r.get("per_seed_costs", []))]
    if not shown:
        return False
    figure = Figure(figsize=(9, 5.5), dpi=110)
    axis = figure.add_subplot()
    for k, r in enumerate(shown):
        points = [(p["train_flops"], 100 * p["test_accuracy"]) for p in r["per_seed_costs"]
                  if math.isfinite(p["train_flops"]) and math.isfinite(p["test_accuracy"])]
        marker = {"static": "s", CEILING: "*", "plan": "^", "learner": "o"}.get(r["kind"], "D")
        label = f"{r['arm']} (ceiling)" if r["kind"] == CEILING else r["arm"]
        if points:
            x, y = np.array(points).T
            axis.scatter(x, y, marker=marker, color=f"C{k % 10}", alpha=0.7, label=label)
    frontier = static_frontier(shown)
    if frontier:
        axis.plot([p["train_flops"] for p in frontier], [100 * p["test_accuracy"] for p in frontier], color="black",
                  linewidth=1.2, label="static frontier (means)")
    if all(p["train_flops"] > 0 for r in shown for p in r["per_seed_costs"] if math.isfinite(p["train_flops"])):
        axis.set_xscale("log")  # the frontier spans sizes that differ by orders of magnitude
    axis.set(xlabel="training FLOPs (episode total)", ylabel="test accuracy (%)", title=f"{env}: one point per seed")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
    figure.tight_layout()
    FigureCanvasAgg(figure).print_png(str(path))
    return True


CHOOSING = ("learner", "policy")  # the kinds whose plans may depend on what they see, so worth a heatmap


def plan_grids(slices: Sequence[dict], conditions: Sequence[str], steps: int, sites: Sequence[tuple[str, int]]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two matrices over ``conditions`` (rows) of an arm's germinations per evaluation episode: by episode step
    (``steps`` columns: when) and by (blueprint, slot) (``sites`` columns: what and where), and how many seeds
    each row rests on. Each cell is the mean over the arm's seeds that played the condition of that seed's mean,
    so that a difference between two rows is not one seed's habit against another's (pooled episodes would show
    seeds that drew more of a condition as the condition); NaN where no seed played it."""
    when, what = np.zeros((len(conditions), steps)), np.zeros((len(conditions), len(sites)))
    seeds = np.zeros(len(conditions))
    for slice_ in slices:
        mine = plans([slice_])
        for i, condition in enumerate(conditions):
            plan = mine.get(condition)
            if not plan:
                continue
            seeds[i] += 1
            for step, count in plan["germinations_at"].items():
                when[i, int(step)] += count / plan["episodes"]
            for op in plan["ops"]:
                if op["op"] == "germinate":
                    what[i, sites.index((op["blueprint"], op["slot"]))] += op["count"] / plan["episodes"]
    played = np.where(seeds > 0, seeds, np.nan)[:, None]
    return when / played, what / played, seeds


def plot_plans(arms: dict[str, list[dict]], path: Path, env: str) -> bool:
    """Per learner or fixed policy (:data:`CHOOSING`; ``arms``: each row's slices, as ``compare_report`` names
    them), germinations per episode by hidden condition, the mean over seeds (:func:`plan_grids`): at each step
    (left) and per blueprint and slot (right), so that a policy that grows by the condition it is not told shows
    as rows that differ (a blank row: no seed played that condition); False (no file) when no such arm recorded
    its plans."""
    shown = {name: slices for name, slices in arms.items()
             if kind_of(slices[0]) in CHOOSING and has_facts(slices)}
    if not shown:
        return False
    pooled = [plans(slices) for slices in shown.values()]
    conditions = sorted({c for p in pooled for c in p})
    steps = 1 + max((int(s) for p in pooled for c in p.values() for s in c["germinations_at"]), default=0)
    sites = sorted({(o["blueprint"], o["slot"]) for p in pooled for c in p.values() for o in c["ops"]
                    if o["op"] == "germinate"}, key=lambda site: (site[1], str(site[0])))
    # each arm's panels: its conditions' rows plus room for the title and the step or blueprint@slot labels
    figure = Figure(figsize=(12, len(shown) * (0.25 * len(conditions) + 1.6) + 0.4), dpi=100, layout="constrained")
    axes = figure.subplots(len(shown), 2, squeeze=False, width_ratios=(max(steps, 1), max(len(sites), 1)))
    for (left, right), (name, slices) in zip(axes, shown.items(), strict=True):
        when, what, seeds = plan_grids(slices, conditions, steps, sites)
        rows = [f"{c} ({n:.0f})" for c, n in zip(conditions, seeds, strict=True)]  # the seeds behind each row
        for axis, grid, labels, by in zip((left, right), (when, what),
                                          (list(range(steps)), [f"{b}@{s}" for b, s in sites]),
                                          ("episode step", "blueprint@slot"), strict=True):
            if not grid.size:  # no arm germinated anything: no blueprint@slot column to draw
                axis.set_axis_off()
                continue
            image = axis.imshow(grid, aspect="auto", cmap="viridis", vmin=0, interpolation="nearest")
            axis.set_yticks(range(len(conditions)), rows, fontsize=6)
            axis.set_xticks(range(len(labels)), labels, fontsize=6, rotation=0 if by == "episode step" else 90)
            axis.set_title(f"{name}: germinations per episode (condition (seeds)), by step" if by == "episode step"
                           else f"by {by}", fontsize=8)
            figure.colorbar(image, ax=axis, fraction=0.03)
    figure.suptitle(f"{env}: what each choosing arm grows, and when, by hidden condition (mean over seeds)",
                    fontsize=9)
    FigureCanvasAgg(figure).print_png(str(path))
    return True
