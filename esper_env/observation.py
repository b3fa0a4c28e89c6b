"""The observation vector: a pure function of an episode's measurements and slot states. No torch.

Every feature is pre-scaled into [-1, 1] (the layout and the scaling of each field are in
``spaces.GLOBAL_FEATURES`` / ``spaces.SLOT_FEATURES``); values not known yet are ``spaces.SENTINEL`` (-1).
"""

from __future__ import annotations

import math

import numpy as np

from esper_env.architecture import Architecture
from esper_env.config import EnvConfig
from esper_env.episode import Episode, seed_params
from esper_env.lifecycle import BLEND_CURVES, TEMPOS, SlotState, Stage
from esper_env.spaces import BLUEPRINT_NAMES, HISTORY, SENTINEL, Op, observation_layout

LOSS_SCALE = 4.0  # symlog(loss) / 4 keeps losses up to ~e^4 nats inside [-1, 1]
FRESHNESS_DECAY = 0.8  # per epoch since a contribution was measured


def symlog(x: float) -> float:
    return math.copysign(math.log1p(abs(x)), x)


def _one_hot(index: int | None, size: int) -> list[float]:
    out = [0.0] * size
    if index is not None and 0 <= index < size:
        out[index] = 1.0
    return out


def _history(values: list[float], scale) -> list[float]:
    newest_first = [scale(v) for v in reversed(values[-HISTORY:])]
    return newest_first + [SENTINEL] * (HISTORY - len(newest_first))


def _global_features(ep: Episode, cfg: EnvConfig, param_table: np.ndarray, host_params: int,
                     growth: tuple[float, float]) -> dict:
    m = ep.measurement
    loss = lambda v: symlog(v) / LOSS_SCALE
    previous = ep.val_accuracy_history[-1] if ep.val_accuracy_history else None
    delta = 0.0 if m is None or previous is None else 10.0 * (m.val_accuracy - previous)
    counts = np.bincount(ep.stages, minlength=len(Stage)) / len(ep.slots)
    return {
        "progress": [ep.epoch / cfg.max_epochs],
        "val_accuracy": [SENTINEL if m is None else m.val_accuracy],
        "val_loss": [SENTINEL if m is None else loss(m.val_loss)],
        "train_accuracy": [SENTINEL if m is None else m.train_accuracy],
        "train_loss": [SENTINEL if m is None else loss(m.train_loss)],
        "val_accuracy_history": _history(ep.val_accuracy_history, float),
        "val_loss_history": _history(ep.val_loss_history, loss),
        "accuracy_delta": [delta],
        "seed_param_ratio": [min(seed_params(ep.slots, param_table) / max(host_params, 1), 4.0) / 4.0],
        "stage_counts": list(counts),
        "last_op": _one_hot(ep.last_op, len(Op)),
        "last_action_valid": [1.0 if ep.last_valid else 0.0],
        "params_fraction": [growth[0]],
        "train_flops_fraction": [growth[1]],
    }


def host_shape(arch: Architecture | None, cfg: EnvConfig) -> list[tuple[float, float]]:
    """Per stage of the family host (one slot each), how far it has grown: its width between the seedling's (0)
    and the widest allowed (1) on a log2 scale, and its residual blocks over the most allowed. The host's own
    (joined) shape: a live seed shows in its slot's blueprint and alpha instead. All zeros without ``arch`` (the
    small host). A memoryless policy needs this: after a join the slot is free again, and only the host's shape
    says what was grown there."""
    if arch is None:
        return [(0.0, 0.0)] * cfg.num_slots
    out = []
    for width, blocks, low, high, deepest in zip(arch.widths, arch.blocks, cfg.family_widths, cfg.max_widths,
                                                 cfg.max_blocks, strict=True):
        grown = math.log2(width / low) / math.log2(high / low) if high > low else 0.0
        out.append((grown, blocks / deepest if deepest else 0.0))
    return out


def _slot_features(state: SlotState, cfg: EnvConfig, shape: tuple[float, float]) -> dict:
    seeded = state.has_seed
    measured = state.contribution is not None
    return {
        "stage": _one_hot(int(state.stage), len(Stage)),
        "alpha": [state.alpha],
        "contribution": [state.contribution / 10.0 if measured else 0.0],
        "contribution_freshness": [FRESHNESS_DECAY ** state.contribution_age if measured else SENTINEL],
        "epochs_in_stage": [state.epochs_in_stage / cfg.max_epochs],
        "seed_age": [state.age / cfg.max_epochs],
        "blueprint": _one_hot(state.blueprint if seeded else None, len(BLUEPRINT_NAMES)),
        "blend": _one_hot(state.blend if seeded else None, len(BLEND_CURVES)),
        "tempo": [state.tempo / max(TEMPOS) if seeded else 0.0],
        "grad_ratio": [SENTINEL if state.grad_ratio is None else symlog(state.grad_ratio) / LOSS_SCALE],
        "host_width": [shape[0]],
        "host_blocks": [shape[1]],
    }


def observe(ep: Episode, cfg: EnvConfig, param_table: np.ndarray, host_params: int,
            growth: tuple[float, float] = (0.0, 0.0), arch: Architecture | None = None) -> np.ndarray:
    """The observation of one sub-env, float32, laid out as ``spaces.observation_layout``; ``growth``: the family
    host's parameter and training-FLOPs fractions (``GrowthLedger.fractions``); ``arch``: the family host's current
    architecture (None on the small host)."""
    values = _global_features(ep, cfg, param_table, host_params, growth)
    for i, (state, shape) in enumerate(zip(ep.slots, host_shape(arch, cfg), strict=True)):
        values.update({f"slot{i}.{k}": v for k, v in _slot_features(state, cfg, shape).items()})
    layout = observation_layout(len(ep.slots))
    out = np.empty(layout[-1].start + layout[-1].size, dtype=np.float64)
    for f in layout:
        out[f.start:f.start + f.size] = values[f.name]
    out = np.nan_to_num(out, nan=SENTINEL, posinf=1.0, neginf=-1.0)
    return np.clip(out, -1.0, 1.0).astype(np.float32)
