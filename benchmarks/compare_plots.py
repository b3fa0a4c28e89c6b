"""The head-to-head's figures, drawn from the slices and rows :mod:`benchmarks.compare_report` computes: the
learning curves of every arm and, per learning arm, its PPO telemetry per update."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def plot_curves(arms: dict[str, list[dict]], rows: list[dict], path: Path, env: str) -> None:
    figure = Figure(figsize=(8, 4.5), dpi=110)
    axis = figure.add_subplot()
    for arm, slices in arms.items():
        points = [(p["host_epochs"], p["final_accuracy"]) for s in slices for p in s["curve"]
                  if p.get("final_accuracy") is not None]
        if points:
            x, y = np.array(points).T
            order = np.argsort(x)
            window = max(1, len(x) // 20)
            smooth = np.convolve(y[order], np.ones(window) / window, mode="valid")
            axis.plot(x[order][window - 1:], 100 * smooth, label=f"{arm} (training episodes)")
    fixed = [row for row in rows if row["budget_host_epochs"] == 0]  # the policies that do not learn
    for k, row in enumerate(fixed):
        axis.axhline(100 * row["val_accuracy"], linestyle="--", linewidth=1, color=f"C{len(arms) + k}",
                     label=f"{row['arm']} (evaluation)")
    axis.set(xlabel="host epochs of training", ylabel="final validation accuracy (%)", title=env)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    FigureCanvasAgg(figure).print_png(str(path))


TELEMETRY_PANELS = {
    "op histogram (fraction of steps)": ("actions/op_wait", "actions/op_germinate", "actions/op_prune",
                                         "actions/op_fossilize"),
    "entropy per head (normalised)": ("entropy/op", "entropy/blueprint", "entropy/slot"),
    "approximate KL": ("ppo/kl",),
    "value explained variance": ("value/explained_variance",),
}


def _number(value: float | None) -> float:
    return math.nan if value is None else value


def most_planted(curves: list[list[dict]], updates: int) -> list[str]:
    """The ``plant/...`` telemetry keys, most planted over the first ``updates`` updates of every seed first; ties
    by name, so that the figure is the same in every run (a set's order changes with string hashing)."""
    planted = {k for c in curves for k in c[0] if k.startswith("plant/")}
    return sorted(planted, key=lambda k: (-sum(u.get(k, 0.0) for c in curves for u in c[:updates]), k))


def plot_telemetry(slices: list[dict], path: Path, title: str) -> bool:
    """The learning arm's PPO telemetry per update, mean over seeds; False when its slices recorded none. Where
    the slices counted what GERMINATE planted (``plant/...``), a fifth panel shows the most planted kinds."""
    curves = [[p["telemetry"] for p in s["curve"] if "telemetry" in p] for s in slices]
    curves = [c for c in curves if c]
    if not curves:
        return False
    updates = min(len(c) for c in curves)
    panels = dict(TELEMETRY_PANELS)
    planted = most_planted(curves, updates)
    if planted:
        panels["seeds planted per update (most planted)"] = tuple(planted[:5])
    figure = Figure(figsize=(10, 3 * math.ceil(len(panels) / 2)), dpi=100)
    for k, (panel, keys) in enumerate(panels.items()):
        axis = figure.add_subplot(math.ceil(len(panels) / 2), 2, k + 1)
        for key in keys:
            # a head's entropy is None in an update where no step used that head (no GERMINATE, say)
            values = [[_number(c[u].get(key)) for u in range(updates)] for c in curves]
            with warnings.catch_warnings():  # an update where no seed used the head: NaN, a gap in the line
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(values, axis=0)
            axis.plot(np.arange(1, updates + 1), mean, label=key.split("/")[-1])
        axis.set(title=panel, xlabel="PPO update")
        axis.grid(alpha=0.3)
        if len(keys) > 1:
            axis.legend(fontsize=7)
    figure.suptitle(f"{title}: mean over {len(curves)} seeds")
    figure.tight_layout()
    FigureCanvasAgg(figure).print_png(str(path))
    return True
