"""Pictures of an episode: the validation-accuracy curve above one lifecycle row per slot.

:class:`EpisodeRecord` keeps one sub-env's step infos as plain numbers (JSON round trip) so that an evaluation
can save episodes and redraw them later; :func:`draw_episode` makes an RGB array, :func:`write_episode_png` and
:func:`write_contact_sheet` write PNGs, and :class:`Renderer` serves the env faces' ``render_mode="rgb_array"``.

Convention: everything drawn at epoch ``k`` is what step ``k`` reported, i.e. the state at the end of epoch ``k``
(the accuracy just measured, the stage and alpha the next epoch starts from). An op happens at the start of its
epoch, so its marker sits on the left edge of column ``k``, where the colour changes.

Matplotlib is used through ``Figure`` + ``FigureCanvasAgg`` only, never ``pyplot``: no display, no global
figure registry, so drawing is safe from any thread.
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.patheffects import withStroke
from matplotlib.ticker import MaxNLocator, NullLocator
from PIL import Image

from esper_env.blueprints import catalogue
from esper_env.config import HOSTS
from esper_env.lifecycle import COOLDOWN, LIVE, SEEDED, Stage

RENDER_FPS = 4  # one frame per host epoch; 4 fps plays a 25-epoch episode in about 6 s
RENDER_METADATA: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": RENDER_FPS}

# Okabe & Ito's colour-blind-safe palette (https://jfly.uni-koeln.de/color/), growth stages warm to cool.
STAGE_COLORS: Mapping[Stage, str] = dict(zip(Stage, (
    "#f4f4f4", "#F0E442", "#E69F00", "#56B4E9", "#0072B2", "#009E73", "#D55E00", "#CC79A7"), strict=True))
EVENT_STYLE: Mapping[str, tuple[str, str]] = {  # kind -> (matplotlib marker, face colour)
    "germinate": ("^", "white"), "fossilize": ("D", "white"), "prune": ("X", "white"), "holding_timeout": ("v", "#999")}
_STEP_FLOATS = ("val_accuracy", "host_only_accuracy", "train_accuracy", "seed_params")
_SLOT_FIELDS = {"stage": int, "alpha": float, "blueprint": int, "contribution": float, "holding_timeout": bool}
_FLOAT_FIELDS = (*_STEP_FLOATS, "alpha", "contribution")  # None in JSON stands for NaN in these


@dataclass
class EpisodeRecord:
    """One sub-env's episode, step by step, in plain Python numbers (NaN = not measured)."""

    num_slots: int
    max_epochs: int | None = None
    epoch: list[int] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)  # fraction
    host_only_accuracy: list[float] = field(default_factory=list)  # fraction, every seed's alpha forced to 0
    train_accuracy: list[float] = field(default_factory=list)  # fraction, over the epoch's training batches
    seed_params: list[float] = field(default_factory=list)  # alpha-weighted seed parameters
    executed_op: list[int] = field(default_factory=list)  # spaces.Op
    invalid_action: list[bool] = field(default_factory=list)
    rollback: list[bool] = field(default_factory=list)
    stage: list[list[int]] = field(default_factory=list)  # [step][slot]
    alpha: list[list[float]] = field(default_factory=list)
    blueprint: list[list[int]] = field(default_factory=list)  # -1 = no seed
    contribution: list[list[float]] = field(default_factory=list)  # pp, NaN when not measured that step
    holding_timeout: list[list[bool]] = field(default_factory=list)
    test_accuracy: float | None = None
    host: str = "small"  # the host kind (``EnvConfig.host``): its catalogue names the blueprint values

    @classmethod
    def start(cls, num_slots: int, max_epochs: int | None = None, host: str = "small") -> EpisodeRecord:
        if num_slots < 1 or (max_epochs is not None and max_epochs < 1) or host not in HOSTS:
            raise ValueError(f"num_slots={num_slots}, max_epochs={max_epochs}, host={host!r}; expected >= 1 "
                             f"(max_epochs or None) and a host in {HOSTS}")
        return cls(num_slots=num_slots, max_epochs=max_epochs, host=host)

    def blueprint_name(self, index: int) -> str:
        """The name of blueprint value ``index`` in this episode's host's catalogue; "?" for none."""
        return catalogue(self.host)[index].name if 0 <= index < len(catalogue(self.host)) else "?"

    def add(self, step_info: Mapping[str, Any]) -> None:
        """Append one step from the unbatched info of one env (what the single env's ``step`` returns)."""
        missing = [k for k in ("epoch", "executed_op", "stage", "alpha", "blueprint") if k not in step_info]
        if missing:
            raise ValueError(f"step info lacks {missing}; expected the info of a step, got keys {sorted(step_info)}")
        self.epoch.append(int(step_info["epoch"]))
        for key in _STEP_FLOATS:
            getattr(self, key).append(float(step_info.get(key, math.nan)))
        self.executed_op.append(int(step_info["executed_op"]))
        for key in ("invalid_action", "rollback"):
            getattr(self, key).append(bool(step_info.get(key, False)))
        for key, kind in _SLOT_FIELDS.items():
            default = [kind(math.nan if kind is float else 0)] * self.num_slots
            values = [kind(v) for v in np.ravel(step_info.get(key, default))]
            if len(values) != self.num_slots:
                raise ValueError(f"step info {key!r} has {len(values)} values; expected num_slots={self.num_slots}")
            getattr(self, key).append(values)
        if step_info.get("test_accuracy") is not None and np.isfinite(step_info["test_accuracy"]):
            self.test_accuracy = float(step_info["test_accuracy"])

    def to_json(self) -> str:
        """Strict JSON (NaN becomes null) that any JSON reader loads; ``json.loads`` of it nests in a bigger file."""
        return json.dumps({key: _nan_to_none(value) for key, value in asdict(self).items()}, allow_nan=False)

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any]) -> EpisodeRecord:
        """From :meth:`to_json`'s text or the dict ``json.loads`` made of it."""
        fields = json.loads(data) if isinstance(data, str) else data
        return cls(**{k: _none_to_nan(v) if k in _FLOAT_FIELDS else v for k, v in fields.items()})


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, list):
        return [_nan_to_none(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _none_to_nan(value: Any) -> Any:
    if isinstance(value, list):
        return [_none_to_nan(v) for v in value]
    return math.nan if value is None else float(value)


class Event(NamedTuple):
    step: int  # index into the record's lists; drawn at epoch record.epoch[step]
    slot: int
    kind: str  # "germinate", "fossilize", "prune" or "holding_timeout"
    label: str  # the blueprint's name, plus the last measured contribution when the seed's fate is decided


def episode_events(record: EpisodeRecord) -> list[Event]:
    """Lifecycle events read off consecutive stages (the info names the op, not its slot). A live seed whose
    slot is dormant one step later joined the host (a family host's FOSSILIZE): a fossilize event. Seeds removed
    by a rollback are not prune events: the rollback is marked on its own."""
    events, previous = [], [int(Stage.DORMANT)] * record.num_slots
    for step, stages in enumerate(record.stage):
        for slot, stage in enumerate(stages):
            before, bp = previous[slot], record.blueprint[step][slot]
            if record.holding_timeout[step][slot]:
                events.append(Event(step, slot, "holding_timeout", _fate_label(record, step - 1, slot)))
            elif before not in SEEDED and stage in SEEDED:
                events.append(Event(step, slot, "germinate", record.blueprint_name(bp)))
            elif stage == Stage.FOSSILIZED and before != Stage.FOSSILIZED:
                events.append(Event(step, slot, "fossilize", _fate_label(record, step, slot)))
            elif before in LIVE and stage == Stage.DORMANT and not record.rollback[step]:
                # a family host's seed joins the host as it fossilizes: its slot is free again in the same step
                events.append(Event(step, slot, "fossilize", _fate_label(record, step - 1, slot)))
            elif before in LIVE and stage in COOLDOWN and not record.rollback[step]:
                events.append(Event(step, slot, "prune", _fate_label(record, step - 1, slot)))
        previous = list(stages)
    return events


def _fate_label(record: EpisodeRecord, step: int, slot: int) -> str:
    """Blueprint of the seed alive at ``step``, with its last measured contribution (pp) if any."""
    name = record.blueprint_name(record.blueprint[step][slot]) if step >= 0 else "?"
    while step >= 0 and record.stage[step][slot] in SEEDED:
        if math.isfinite(value := record.contribution[step][slot]):
            return f"{name} {value:+.1f}pp"
        step -= 1
    return name


# --- Drawing ---------------------------------------------------------------------------------------------
_BASE_WIDTH = 960  # px at which the layout below is specified; other widths scale it with the dpi
_TITLE, _ACCURACY, _GAP, _ROW, _ROW_GAP, _XAXIS, _LEGEND = 34, 190, 14, 56, 6, 40, 62  # px at the base width
_LEFT, _RIGHT = 74, 18  # px at the base width
_VAL_COLOR, _ROLLBACK_COLOR, _INVALID_COLOR = "#0072B2", "#D55E00", "#AA3377"


def frame_size(num_slots: int, width: int = _BASE_WIDTH, legend: bool = True) -> tuple[int, int]:
    """``(height, width)`` of :func:`draw_episode`'s frame: fixed for a number of slots and a width."""
    base = _TITLE + _ACCURACY + _GAP + num_slots * _ROW + (num_slots - 1) * _ROW_GAP + _XAXIS + _LEGEND * legend
    return round(base * width / _BASE_WIDTH), width


def draw_episode(record: EpisodeRecord, title: str = "", width: int = _BASE_WIDTH, height: int | None = None,
                 max_epochs: int | None = None, legend: bool = True) -> np.ndarray:
    """The episode so far as an RGB ``uint8`` array ``(height, width, 3)``; see the module docstring.

    The x axis spans epochs 1..``max_epochs`` (argument, else ``record.max_epochs``, else the last epoch seen)
    from the first step, so frames of one episode all have the same layout and size."""
    horizon = max_epochs or record.max_epochs or max(record.epoch, default=1)
    height = height or frame_size(record.num_slots, width, legend)[0]
    strip = _legend_strip(width) if legend else np.zeros((0, width, 3), dtype=np.uint8)
    scale, plot_height = width / _BASE_WIDTH, height - strip.shape[0]
    text = min(1.5, max(1.0, scale ** -0.5))  # small frames shrink text less than lines, or it can't be read
    fig = Figure(figsize=(width / (100 * scale), plot_height / (100 * scale)), dpi=100 * scale, facecolor="white")
    accuracy_ax, slot_axes = _layout(fig, record.num_slots, plot_height / scale)
    _draw_accuracy(accuracy_ax, record, text)
    events = episode_events(record)
    for slot, ax in enumerate(slot_axes):
        _draw_slot(ax, record, slot, [e for e in events if e.slot == slot], (horizon, text))
    for ax in (accuracy_ax, *slot_axes):
        ax.set_xlim(0.5, horizon + 0.5)
        for step in np.flatnonzero(record.rollback):
            ax.axvline(record.epoch[step], color=_ROLLBACK_COLOR, linestyle="--", linewidth=1.4, zorder=5)
    slot_axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True, nbins=min(horizon, 25)))
    slot_axes[-1].set_xlabel("epoch", fontsize=9 * text, labelpad=1)
    top = 1 - 20 / (plot_height / scale)
    fig.text(_LEFT / _BASE_WIDTH, top, title, fontsize=11 * text, weight="bold", va="center")
    fig.text(1 - _RIGHT / _BASE_WIDTH, top, _summary(record, horizon), fontsize=9 * text, ha="right",
             va="center", color="#333333")
    return np.concatenate([_pixels(fig, plot_height, width), strip])


def _layout(fig: Figure, num_slots: int, height: float) -> tuple[Any, list[Any]]:
    """Axes at fixed pixel positions (no tight/constrained layout: it costs time and would move things between
    frames). ``height`` is in base-width pixels; the accuracy panel takes what the slot rows leave."""
    left, right = _LEFT / _BASE_WIDTH, 1 - _RIGHT / _BASE_WIDTH
    rows = num_slots * _ROW + (num_slots - 1) * _ROW_GAP
    accuracy_height = max(height - _TITLE - _GAP - rows - _XAXIS, 40)
    accuracy_ax = fig.add_axes((left, (_XAXIS + rows + _GAP) / height, right - left, accuracy_height / height))
    slot_axes = []
    for slot in range(num_slots):
        y = _XAXIS + (num_slots - 1 - slot) * (_ROW + _ROW_GAP)
        slot_axes.append(fig.add_axes((left, y / height, right - left, _ROW / height)))
    # Not sharex: tick objects dominate the drawing time, so only the bottom row gets x ticks.
    for ax in (accuracy_ax, *slot_axes):
        ax.xaxis.set_major_locator(NullLocator())
    return accuracy_ax, slot_axes


def _draw_accuracy(ax: Any, record: EpisodeRecord, text: float) -> None:
    epochs = np.asarray(record.epoch, dtype=float)
    val = 100 * np.asarray(record.val_accuracy, dtype=float)
    host = 100 * np.asarray(record.host_only_accuracy, dtype=float)
    ax.plot(epochs, host, color="#777777", linestyle="--", linewidth=1.2)
    ax.plot(epochs, val, color=_VAL_COLOR, marker="o", markersize=3.5, linewidth=1.8)
    finite = np.concatenate([val[np.isfinite(val)], host[np.isfinite(host)]])
    low, high = (finite.min(), finite.max()) if finite.size else (0.0, 100.0)
    pad = max(2.0, 0.08 * (high - low))
    ax.set_ylim(max(0.0, low - pad), min(100.0, high + pad))
    invalid = epochs[np.asarray(record.invalid_action, dtype=bool)]
    # Subtle on purpose: an invalid action is executed as WAIT, so it changes nothing but the reward.
    ax.plot(invalid, np.full(invalid.shape, 0.04), linestyle="none", marker="|", markersize=7,
            color=_INVALID_COLOR, transform=ax.get_xaxis_transform())
    for step in np.flatnonzero(record.rollback):
        ax.text(record.epoch[step], 0.96, " rollback", color=_ROLLBACK_COLOR, fontsize=8 * text, va="top",
                transform=ax.get_xaxis_transform())
    ax.set_ylabel("val acc (%)", fontsize=9 * text)
    ax.tick_params(labelsize=8 * text)
    ax.grid(True, color="#e6e6e6", linewidth=0.8)
    ax.set_axisbelow(True)


def _draw_slot(ax: Any, record: EpisodeRecord, slot: int, events: Sequence[Event], sizes: tuple[int, float]) -> None:
    """Stage spans (one ``broken_barh`` per stage), alpha on a 0..1 scale over them, event markers."""
    horizon, text = sizes
    stages = [row[slot] for row in record.stage]
    spans: dict[int, list[tuple[float, float]]] = {}
    for epoch, stage in zip(record.epoch, stages, strict=True):
        spans.setdefault(stage, []).append((epoch - 0.5, 1.0))
    for stage, ranges in spans.items():
        ax.broken_barh(ranges, (-0.2, 1.4), facecolors=STAGE_COLORS[Stage(stage)], linewidth=0)
    alpha = np.array([row[slot] if s in SEEDED else np.nan for row, s in zip(record.alpha, stages, strict=True)])
    halo = [withStroke(linewidth=3.2, foreground="white")]  # keeps the line visible on every stage colour
    ax.plot(record.epoch, alpha, color="#111111", linewidth=1.5, marker=".", markersize=4, path_effects=halo)
    for event in events:
        marker, face = EVENT_STYLE[event.kind]
        x = record.epoch[event.step] - 0.5
        ax.plot([x], [0.5], linestyle="none", marker=marker, markersize=8, markerfacecolor=face,
                markeredgecolor="#111111", markeredgewidth=1.1, zorder=6, clip_on=False)  # epoch 1: on the edge
        right = x > horizon - 3  # near the right edge the label goes left of its marker to stay inside
        # Above the marker after a germinate (alpha is still 0), below it after the fate (alpha is 1 or gone).
        y = 0.72 if event.kind == "germinate" else 0.0
        ax.text(x - 0.12 if right else x + 0.12, y, event.label, fontsize=7.5 * text, va="bottom", zorder=7,
                ha="right" if right else "left",
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    ax.set(ylim=(-0.2, 1.2), yticks=[])  # the row is alpha's 0..1 scale; ticks would cost more than they say
    ax.tick_params(labelsize=7 * text, length=2)
    ax.set_ylabel(f"slot {slot}\nα", fontsize=9 * text, rotation=0, ha="right", va="center", labelpad=11)


@functools.cache
def _legend_strip(width: int) -> np.ndarray:
    """The legend, the same in every frame: drawn once per width and pasted under the plot."""
    scale = width / _BASE_WIDTH
    height = frame_size(1, width)[0] - frame_size(1, width, legend=False)[0]  # so the sum is frame_size
    fig = Figure(figsize=(_BASE_WIDTH / 100, height / (100 * scale)), dpi=100 * scale, facecolor="white")
    line = functools.partial(Line2D, [], [])
    handles: list[Any] = [Patch(facecolor=STAGE_COLORS[s], edgecolor="#bbbbbb", linewidth=0.5, label=s.name.lower())
                          for s in Stage]
    handles += [line(color="#111111", linewidth=1.5, label="α (blending)"),
                line(color=_VAL_COLOR, marker="o", markersize=3.5, label="val accuracy"),
                line(color="#777777", linestyle="--", label="host-only accuracy"),
                line(color=_INVALID_COLOR, linestyle="none", marker="|", label="invalid action")]
    handles += [line(linestyle="none", marker=m, markerfacecolor=f, markeredgecolor="#111111",
                     label=kind.replace("_", " ")) for kind, (m, f) in EVENT_STYLE.items()]
    handles.append(line(color=_ROLLBACK_COLOR, linestyle="--", label="rollback"))
    # ncol=6 fills column by column: stages, stages, stages + alpha, curves, events, events.
    fig.legend(handles=handles, loc="center", ncol=6, fontsize=8, frameon=False, handlelength=1.6,
               columnspacing=1.4, labelspacing=0.35)
    strip = _pixels(fig, height, width)
    strip.flags.writeable = False  # shared by every frame of this width
    return strip


def _summary(record: EpisodeRecord, horizon: int) -> str:
    if not record.epoch:
        return f"epoch 0/{horizon}"
    test = "" if record.test_accuracy is None else f"   test {100 * record.test_accuracy:.1f}%"
    return (f"epoch {record.epoch[-1]}/{horizon}   val {100 * record.val_accuracy[-1]:.1f}%{test}   "
            f"seed params {record.seed_params[-1]:,.0f}")


def _pixels(fig: Figure, height: int, width: int) -> np.ndarray:
    """The figure drawn by Agg, exactly ``(height, width, 3)``: inch/dpi rounding can leave it a pixel off."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgb = np.asarray(canvas.buffer_rgba())[:height, :width, :3]
    return np.pad(rgb, ((0, height - rgb.shape[0]), (0, width - rgb.shape[1]), (0, 0)), constant_values=255)


# --- Files -----------------------------------------------------------------------------------------------
def write_episode_png(record: EpisodeRecord, path: str | os.PathLike[str], title: str = "") -> Path:
    """Draw ``record`` into a PNG at ``path`` (atomically: a reader never sees half a file)."""
    return _write_png(draw_episode(record, title=title), Path(path))


def write_contact_sheet(records: Sequence[EpisodeRecord], path: str | os.PathLike[str], title: str = "",
                        columns: int = 4, titles: Sequence[str] | None = None) -> Path:
    """Several episodes (e.g. every evaluated episode of one policy) as a grid of small timelines under one
    title and one legend. ``titles`` names each tile (default ``episode i``)."""
    if not records or (titles is not None and len(titles) != len(records)):
        raise ValueError(f"{len(records)} records, {titles and len(titles)} titles; expected >= 1 record and "
                         "None or one title per record")
    names = titles if titles is not None else [f"episode {i}" for i in range(len(records))]
    tiles = [draw_episode(r, title=t, width=560, legend=False) for r, t in zip(records, names, strict=True)]
    tile_h, tile_w = max(t.shape[0] for t in tiles), max(t.shape[1] for t in tiles)
    columns = max(1, min(columns, len(tiles)))
    rows, gutter = math.ceil(len(tiles) / columns), 8
    grid = np.full((rows * (tile_h + gutter) - gutter, columns * (tile_w + gutter) - gutter, 3), 255, np.uint8)
    for i, tile in enumerate(tiles):
        y, x = (i // columns) * (tile_h + gutter), (i % columns) * (tile_w + gutter)
        grid[y:y + tile.shape[0], x:x + tile.shape[1]] = tile
    return _write_png(np.concatenate([_banner(title, grid.shape[1]), grid]), Path(path))


def _banner(title: str, width: int) -> np.ndarray:
    """A title line over the shared legend, ``width`` pixels wide."""
    fig = Figure(figsize=(width / 100, 0.4), dpi=100, facecolor="white")
    fig.text(0.5, 0.45, title, fontsize=13, weight="bold", ha="center", va="center")
    strip = _legend_strip(min(width, _BASE_WIDTH))
    pad = width - strip.shape[1]
    legend = np.pad(strip, ((0, 0), (pad // 2, pad - pad // 2), (0, 0)), constant_values=255)
    return np.concatenate([_pixels(fig, 40, width), legend])


def _write_png(rgb: np.ndarray, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            Image.fromarray(rgb).save(file, format="PNG")
        os.chmod(tmp, 0o644)  # mkstemp makes the file owner-only; results are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# --- What the env faces call for render_mode="rgb_array" -------------------------------------------------
class Renderer:
    """Records one env's steps and draws the episode so far; the frame is cached until the next step."""

    def __init__(self, num_slots: int, max_epochs: int, title: str = "", host: str = "small") -> None:
        self.title, self.host = title, host
        self.reset(num_slots, max_epochs)

    def reset(self, num_slots: int, max_epochs: int) -> None:
        self.record = EpisodeRecord.start(num_slots, max_epochs, self.host)
        self._frame: np.ndarray | None = None

    def step(self, info: Mapping[str, Any]) -> None:
        """Take one env's unbatched info after a step. A new episode starts on an info with ``reset`` and no
        step keys (NEXT_STEP autoreset) or with an epoch that does not follow the last one (SAME_STEP)."""
        stepped, last = "epoch" in info, self.record.epoch[-1] if self.record.epoch else 0
        if (stepped and int(info["epoch"]) <= last) or (not stepped and info.get("reset", False)):
            self.reset(self.record.num_slots, self.record.max_epochs or 1)
        if stepped:
            self.record.add(info)
            self._frame = None

    def frame(self) -> np.ndarray:
        if self._frame is None:
            self._frame = draw_episode(self.record, title=self.title)
        return self._frame.copy()

