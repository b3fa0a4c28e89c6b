"""The ``info`` dicts of the vector env: what each step measured and did, as arrays over sub-envs.

Gymnasium's vector convention: every key ``k`` holds an array of length ``num_envs`` and ``info["_k"]`` a bool
array marking the sub-envs for which it is set. The masks (``action_mask``, ``op_slot_mask``,
``blueprint_mask``, ``blend_mask``) and ``holding_steps_left`` are set for every sub-env after every reset and
step; the step keys are set for the sub-envs that trained this step (not for sub-envs that were reset instead
under the NEXT_STEP autoreset mode).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from esper_env.episode import Episode, Measurement


@dataclass
class StepRecord:
    """One sub-env's step, filled in two halves: before and after the epoch."""

    valid: bool
    op: int
    slot: int  # the slot the executed op targeted, -1 for WAIT
    previous: tuple[float, float, float]  # accuracy, seed params, potential before the step
    pruned_contribution: float
    reward: float = 0.0
    measurement: Measurement | None = None
    terminated: bool = False
    truncated: bool = False
    rollback: bool = False
    holding_timeout: list[bool] = field(default_factory=list)

    def finish(self, reward: float, measurement: Measurement, terminated: bool = False, truncated: bool = False,
               rollback: bool = False, holding_timeout: list[bool] | None = None) -> None:
        self.reward, self.measurement = reward, measurement
        self.terminated, self.truncated, self.rollback = terminated, truncated, rollback
        self.holding_timeout = holding_timeout or []


def reset_info(op_slot: np.ndarray, blueprints: np.ndarray, blends: np.ndarray, flat_masks: np.ndarray,
               holding_left: np.ndarray, reset: np.ndarray) -> dict[str, np.ndarray]:
    """The keys set after every reset and step: the masks, ``holding_steps_left`` (``holding_left``, per slot:
    ``lifecycle.holding_steps_left``) and ``reset``."""
    everyone = np.ones(op_slot.shape[0], dtype=bool)
    return {"action_mask": flat_masks, "_action_mask": everyone, "op_slot_mask": op_slot.copy(),
            "_op_slot_mask": everyone, "blueprint_mask": blueprints.copy(), "_blueprint_mask": everyone,
            "blend_mask": blends.copy(), "_blend_mask": everyone, "holding_steps_left": holding_left.copy(),
            "_holding_steps_left": everyone, "reset": reset.copy(), "_reset": everyone}


def build_step_info(records: dict[int, StepRecord], episodes: list[Episode], mask_info: dict[str, np.ndarray],
                    seed_params: list[float], conditions: list[str]) -> dict[str, np.ndarray]:
    """The info of a step: ``mask_info`` (a :func:`reset_info` whose ``reset`` marks the sub-envs without a
    record) and the step keys of the sub-envs in ``records``; ``conditions`` names each sub-env's hidden training
    condition (info only: screens group by it, the observation never shows it)."""
    n, num_slots = mask_info["op_slot_mask"].shape[0], mask_info["op_slot_mask"].shape[2]
    stepped = np.zeros(n, dtype=bool)
    stepped[list(records)] = True
    info = dict(mask_info)
    columns: dict[str, list] = {key: [] for key in _PER_ENV}
    for i in range(n):
        row = _row(records.get(i), episodes[i], seed_params[i], num_slots)
        for key in _PER_ENV:
            columns[key].append(row[key])
    for key, dtype in _PER_ENV.items():
        info[key], info[f"_{key}"] = np.array(columns[key], dtype=dtype), stepped.copy()
    info["condition"], info["_condition"] = np.array(conditions, dtype=object), stepped.copy()
    tested = np.array([i in records and records[i].measurement is not None
                       and records[i].measurement.test_accuracy is not None for i in range(n)])
    if tested.any():
        info["test_accuracy"] = np.array([records[i].measurement.test_accuracy if tested[i] else np.nan
                                          for i in range(n)])
        info["_test_accuracy"] = tested
    return info


def only_rows(info: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """``info`` with every ``_k`` flag cleared outside ``rows`` (bool ``(num_envs,)``), nested dicts too: the
    ``final_info`` of the sub-envs that finished this step, as Gymnasium's vector envs lay it out."""
    out: dict[str, np.ndarray] = {}
    for key, value in info.items():
        if isinstance(value, dict):
            value = only_rows(value, rows)
        out[key] = value & rows if key.startswith("_") else value
    return out


_PER_ENV = {
    "invalid_action": bool, "executed_op": np.int64, "executed_slot": np.int64, "epoch": np.int64, "rollback": bool,
    "val_accuracy": np.float64, "val_loss": np.float64, "train_accuracy": np.float64, "train_loss": np.float64,
    "host_only_accuracy": np.float64, "seed_params": np.float64, "images_trained": np.int64,
    "stage": np.int64, "alpha": np.float64, "blueprint": np.int64, "contribution": np.float64,
    "holding_timeout": bool,
}


def _row(record: StepRecord | None, ep: Episode, seed_params: float, num_slots: int) -> dict:
    m = record.measurement if record else None
    nan = float("nan")
    return {
        "invalid_action": bool(record and not record.valid),
        "executed_op": record.op if record else 0,
        "executed_slot": record.slot if record else -1,
        "epoch": ep.epoch,
        "rollback": bool(record and record.rollback),
        "val_accuracy": m.val_accuracy if m else nan,
        "val_loss": m.val_loss if m else nan,
        "train_accuracy": m.train_accuracy if m else nan,
        "train_loss": m.train_loss if m else nan,
        "host_only_accuracy": m.host_only_accuracy if m else nan,
        "seed_params": seed_params,
        "images_trained": m.images_trained if m else 0,
        "stage": [int(s.stage) for s in ep.slots],
        "alpha": [s.alpha for s in ep.slots],
        "blueprint": [s.blueprint for s in ep.slots],
        "contribution": [s.contribution if s.contribution is not None and s.contribution_age == 0 else nan
                         for s in ep.slots],
        "holding_timeout": (record.holding_timeout if record and record.holding_timeout else [False] * num_slots),
    }


def split_vector_info(info: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Sub-env ``index``'s unbatched info from a vector info dict; keys whose ``_k`` mask is False are left out."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        mask = info.get(f"_{key}")
        if key.startswith("_") or (mask is not None and not mask[index]):
            continue
        item = split_vector_info(value, index) if isinstance(value, Mapping) else value[index]
        out[key] = item.copy() if isinstance(item, np.ndarray) else item
    return out
