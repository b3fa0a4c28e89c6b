"""A markdown report of evaluated episodes: what each episode ended with, which seeds were planted, fossilized
and pruned (by blueprint and by slot), the parameters they added and which ops ran.

Pure functions of two parallel lists: the agent's :class:`esper_agent.collect.EpisodeRecord` (return, end-of-episode
numbers) and the step-by-step :class:`esper_env.render.EpisodeRecord` of the same episode (lifecycle stages, ops).
``python -m esper_agent.evaluate`` writes the report beside one timeline PNG per episode; anything that holds both
lists (e.g. ``benchmarks/compare_agents.py``) can call :func:`build_report` too.

The env's info names the executed op but not its slot, so seeds are counted from stage changes between steps
(:func:`esper_env.render.episode_events`), the same reading the timelines draw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

from esper_agent.collect import EpisodeRecord
from esper_env.blueprints import catalogue
from esper_env.lifecycle import COOLDOWN, LIVE, SEEDED, Stage
from esper_env.render import EpisodeRecord as Timeline
from esper_env.render import episode_events
from esper_env.spaces import Op

# Two-sided 95% Student-t quantiles for 1..30 degrees of freedom (larger samples: _t95_large).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)
UNKNOWN_BLUEPRINT = "unknown"  # not reported (planted in a step that rolled back) or outside the catalogue
TEST_HINT = " (Esper measures it at the last epoch with the env kwarg report_test_accuracy=true)"


def _t95_large(df: int) -> float:
    """The two-sided 95% Student-t quantile for more than 30 degrees of freedom, by its Cornish-Fisher expansion
    around the normal's 1.96 (within 1e-4 of the exact value from df 31 on; 1.96 alone is 4% narrow at df 31)."""
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (Student t); NaN half-width for n < 2."""
    data = np.asarray([v for v in values if math.isfinite(v)], np.float64)
    if data.size == 0:
        return math.nan, math.nan
    if data.size == 1:
        return float(data[0]), math.nan
    t = _T95[data.size - 2] if data.size - 1 <= len(_T95) else _t95_large(data.size - 1)
    return float(data.mean()), float(t * data.std(ddof=1) / math.sqrt(data.size))


# --- Seeds -----------------------------------------------------------------------------------------------
class SeedEvent(NamedTuple):
    step: int  # index into the timeline's lists
    slot: int
    blueprint: str  # name in the episode's host's catalogue (esper_env.blueprints.catalogue), or UNKNOWN_BLUEPRINT
    kind: str  # "planted", "fossilized", "pruned", "holding_timeout" or "rolled_back"


@dataclass
class SeedCounts:
    """How many seeds met each fate (counts over episodes)."""

    planted: int = 0
    fossilized: int = 0
    pruned: int = 0
    """Pruned by the agent or by a holding timeout."""
    holding_timeouts: int = 0
    """Of ``pruned``: removed because they held too long without being fossilized."""
    rolled_back: int = 0
    """Live seeds removed by a governor rollback (not in ``pruned``: the agent did not choose it)."""

    def add(self, kind: str) -> None:
        if kind == "holding_timeout":
            self.pruned += 1
            self.holding_timeouts += 1
        elif kind in _KINDS:
            setattr(self, kind, getattr(self, kind) + 1)
        else:
            raise ValueError(f"seed event kind {kind!r}; expected one of {sorted({*_KINDS, 'holding_timeout'})}")


_KINDS = ("planted", "fossilized", "pruned", "rolled_back")
_FROM_RENDER = {"germinate": "planted", "fossilize": "fossilized", "prune": "pruned",
                "holding_timeout": "holding_timeout"}


class LifecycleCounts(NamedTuple):
    by_blueprint: dict[str, SeedCounts]  # every blueprint of the catalogue, in action-head order
    by_slot: dict[int, SeedCounts]  # every slot of the widest record
    total: SeedCounts


def _blueprint_name(timeline: Timeline, index: int) -> str:
    name = timeline.blueprint_name(index)
    return UNKNOWN_BLUEPRINT if name == "?" else name


def seed_events(timeline: Timeline) -> list[SeedEvent]:
    """Each seed's planting and fate in one episode. A seed is named by the blueprint its step reports, or by
    the step before where the slot no longer holds it (removed, or joined to a family host), since an empty
    slot reports no blueprint."""
    events = []
    for event in episode_events(timeline):
        kind = _FROM_RENDER[event.kind]
        step = event.step if timeline.stage[event.step][event.slot] in SEEDED else event.step - 1
        index = timeline.blueprint[step][event.slot] if step >= 0 else -1
        events.append(SeedEvent(event.step, event.slot, _blueprint_name(timeline, index), kind))
    return sorted(events + _rollback_events(timeline))


def _rollback_events(timeline: Timeline) -> list[SeedEvent]:
    """Seeds a governor rollback removed, which episode_events leaves out (a rollback is drawn on its own). A seed
    planted in the step that rolls back goes from DORMANT to PRUNED at once, and its blueprint is not reported."""
    events = []
    for step in np.flatnonzero(timeline.rollback).tolist():
        previous = timeline.stage[step - 1] if step > 0 else [int(Stage.DORMANT)] * timeline.num_slots
        for slot, (before, now) in enumerate(zip(previous, timeline.stage[step], strict=True)):
            if now not in COOLDOWN:
                continue
            if before in LIVE:
                events.append(SeedEvent(step, slot, _blueprint_name(timeline, timeline.blueprint[step - 1][slot]),
                                        "rolled_back"))
            elif before == Stage.DORMANT:
                events.append(SeedEvent(step, slot, UNKNOWN_BLUEPRINT, "planted"))
                events.append(SeedEvent(step, slot, UNKNOWN_BLUEPRINT, "rolled_back"))
    return events


def count_seeds(timelines: Sequence[Timeline]) -> LifecycleCounts:
    """Seed fates over every episode, by blueprint and by slot."""
    hosts = dict.fromkeys(t.host for t in timelines) or {"small": None}
    by_blueprint = {b.name: SeedCounts() for host in hosts for b in catalogue(host)}
    by_slot = {slot: SeedCounts() for slot in range(max((t.num_slots for t in timelines), default=0))}
    total = SeedCounts()
    for timeline in timelines:
        for event in seed_events(timeline):
            by_blueprint.setdefault(event.blueprint, SeedCounts()).add(event.kind)
            by_slot[event.slot].add(event.kind)
            total.add(event.kind)
    return LifecycleCounts(by_blueprint, by_slot, total)


# --- Ops and parameters ----------------------------------------------------------------------------------
class OpSummary(NamedTuple):
    executed: dict[str, int]  # op name -> steps that executed it (an invalid action executes as WAIT)
    steps: int
    invalid: int  # steps whose action the masks forbade


def op_summary(timelines: Sequence[Timeline]) -> OpSummary:
    """The executed-op histogram over every step of every episode, and how many actions were invalid."""
    ops = np.asarray([op for t in timelines for op in t.executed_op], np.int64)
    unknown = ops[(ops < 0) | (ops >= len(Op))]
    if unknown.size:
        raise ValueError(f"executed_op values {sorted(set(unknown.tolist()))}; expected 0..{len(Op) - 1} "
                         f"({', '.join(op.name for op in Op)})")
    counts = np.bincount(ops, minlength=len(Op))
    invalid = sum(sum(t.invalid_action) for t in timelines)
    return OpSummary({op.name: int(counts[op]) for op in Op}, int(ops.size), int(invalid))


def final_seed_params(timelines: Sequence[Timeline]) -> list[float]:
    """Alpha-weighted seed parameters at each episode's end (NaN for an episode with no step)."""
    return [t.seed_params[-1] if t.seed_params else math.nan for t in timelines]


# --- Markdown --------------------------------------------------------------------------------------------
def _cell(value: float, digits: int = 4) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.{digits}f}"


def _params(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:,.0f}"


def _check_parallel(episodes: Sequence[EpisodeRecord], timelines: Sequence[Timeline],
                    images: Sequence[str] | None) -> None:
    """The two lists must describe the same episodes, in the same order."""
    if len(episodes) != len(timelines) or (images is not None and len(images) != len(episodes)):
        raise ValueError(f"{len(episodes)} episodes, {len(timelines)} timelines, "
                         f"{None if images is None else len(images)} images; expected one timeline (and image, "
                         "if any) per episode")
    for k, (episode, timeline) in enumerate(zip(episodes, timelines, strict=True)):
        if episode.length != len(timeline.epoch):
            raise ValueError(f"episode {k} (env {episode.env}) has length {episode.length} but its timeline "
                             f"{len(timeline.epoch)} steps; expected the timeline of the same episode")


def episode_table(episodes: Sequence[EpisodeRecord], timelines: Sequence[Timeline],
                  images: Sequence[str] | None = None) -> list[str]:
    """One row per episode, then the mean and 95% CI of return, accuracies and seed parameters."""
    link = "| timeline " if images is not None else ""
    lines = [f"| episode | env | return | val accuracy | test accuracy | seed params | rollback | length "
             f"| planted / fossilized / pruned {link}|", "|---" * (9 + (images is not None)) + "|"]
    for k, (episode, timeline) in enumerate(zip(episodes, timelines, strict=True)):
        seeds = count_seeds([timeline]).total
        image = f"| [png]({images[k]}) " if images is not None else ""
        lines.append(f"| {k} | {episode.env} | {_cell(episode.episode_return)} | {_cell(episode.final_accuracy)} "
                     f"| {_cell(episode.test_accuracy)} | {_params(episode.seed_params)} "
                     f"| {'yes' if episode.rollback else 'no'} | {episode.length} "
                     f"| {seeds.planted} / {seeds.fossilized} / {seeds.pruned} {image}|")
    lines.append("")
    for name, key in (("return", "episode_return"), ("val accuracy", "final_accuracy"),
                      ("test accuracy", "test_accuracy"), ("seed params", "seed_params")):
        values = [getattr(e, key) for e in episodes]
        measured = sum(math.isfinite(v) for v in values)
        if measured == 0:
            lines.append(f"- {name}: not measured" + (TEST_HINT if key == "test_accuracy" else ""))
            continue
        mean, half = mean_ci95(values)
        lines.append(f"- {name}: mean {_cell(mean)} ± {_cell(half)} (95% CI, n={measured})")
    rollbacks = sum(e.rollback for e in episodes)
    lines.append(f"- rollbacks: {rollbacks} of {len(episodes)} episodes")
    return lines


def seed_table(counts: Mapping[str, SeedCounts] | Mapping[int, SeedCounts], key: str,
               total: SeedCounts) -> list[str]:
    """Fates of the seeds, one row per blueprint or slot (``key`` names the column), then the total."""
    names = [f.name for f in fields(SeedCounts)]
    lines = [f"| {key} | " + " | ".join(n.replace("_", " ") for n in names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, row in [*counts.items(), ("**total**", total)]:
        lines.append(f"| {label} | " + " | ".join(str(getattr(row, n)) for n in names) + " |")
    return lines


def op_table(summary: OpSummary) -> list[str]:
    """The executed-op histogram and the invalid-action rate."""
    lines = ["| op | executed | share of steps |", "|---|---|---|"]
    for name, count in summary.executed.items():
        share = count / summary.steps if summary.steps else math.nan
        lines.append(f"| {name} | {count} | {_cell(100 * share, 1)}% |")
    rate = summary.invalid / summary.steps if summary.steps else math.nan
    lines += ["", f"Invalid actions (executed as WAIT): {summary.invalid} of {summary.steps} steps "
              f"({_cell(100 * rate, 1)}%)."]
    return lines


def params_lines(timelines: Sequence[Timeline]) -> list[str]:
    values = [v for v in final_seed_params(timelines) if math.isfinite(v)]
    if not values:
        return ["No episode reported its seed parameters."]
    return [f"Alpha-weighted seed parameters at the end of the episode, over {len(values)} episodes: "
            f"mean {_params(float(np.mean(values)))}, min {_params(min(values))}, max {_params(max(values))}."]


def build_report(title: str, episodes: Sequence[EpisodeRecord], timelines: Sequence[Timeline],
                 settings: Sequence[str] = (), images: Sequence[str] | None = None,
                 contact_sheet: str | None = None) -> str:
    """The whole markdown report. ``episodes[k]`` and ``timelines[k]`` describe the same episode; ``settings``
    are lines shown under the title; ``images`` and ``contact_sheet`` are paths relative to the report."""
    _check_parallel(episodes, timelines, images)
    counts = count_seeds(timelines)
    parts = [f"# {title}", "", *[f"- {line}" for line in settings], ""]
    if contact_sheet is not None:
        parts += [f"![every episode]({contact_sheet})", ""]
    parts += ["## Episodes", "", *episode_table(episodes, timelines, images), ""]
    parts += ["## Seeds by blueprint", "", *seed_table(counts.by_blueprint, "blueprint", counts.total), ""]
    parts += ["## Seeds by slot", "", *seed_table(counts.by_slot, "slot", counts.total), ""]
    parts += ["## Parameters added", "", *params_lines(timelines), ""]
    parts += ["## Ops", "", *op_table(op_summary(timelines)), ""]
    return "\n".join(parts)


__all__ = ["LifecycleCounts", "OpSummary", "SeedCounts", "SeedEvent", "build_report", "count_seeds",
           "episode_table", "final_seed_params", "mean_ci95", "op_summary", "op_table", "params_lines",
           "seed_events", "seed_table"]
