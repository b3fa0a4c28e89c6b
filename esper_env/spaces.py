"""Action heads, the op enum, which heads matter for which op, and the observation layout.

This module is the only part of ``esper_env`` an agent needs besides the Gymnasium API: head names and sizes
(:func:`head_sizes`), :data:`HEAD_RELEVANCE` (used by masks, the agent's loss, entropy and KL) and
:func:`observation_layout`. Pure Python, no torch.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from esper_env.lifecycle import BLEND_CURVES, TEMPOS, Stage


class Op(IntEnum):
    WAIT = 0
    GERMINATE = 1
    ADVANCE = 2
    PRUNE = 3
    FOSSILIZE = 4


class Head(IntEnum):
    """Positions in a ``MultiDiscrete`` action, in this order."""

    OP = 0
    SLOT = 1
    BLUEPRINT = 2
    BLEND = 3
    TEMPO = 4


HEAD_NAMES = tuple(h.name.lower() for h in Head)
BLUEPRINT_NAMES = ("norm", "attention", "depthwise", "conv_small", "bottleneck", "conv_light", "conv_heavy")
"""The seed catalogue in action-head order; ``seeds.BLUEPRINTS`` is keyed by these names in this order."""

H = Head
HEAD_RELEVANCE: Mapping[Op, frozenset[Head]] = MappingProxyType({
    Op.WAIT: frozenset({H.OP}),
    Op.GERMINATE: frozenset({H.OP, H.SLOT, H.BLUEPRINT, H.BLEND, H.TEMPO}),
    Op.ADVANCE: frozenset({H.OP, H.SLOT}),
    Op.PRUNE: frozenset({H.OP, H.SLOT}),
    Op.FOSSILIZE: frozenset({H.OP, H.SLOT}),
})
"""Which heads an op reads. A head outside its op's set is ignored and never makes an action invalid."""


def head_sizes(num_slots: int) -> tuple[int, ...]:
    """Sizes of the action heads, in :class:`Head` order."""
    return (len(Op), num_slots, len(BLUEPRINT_NAMES), len(BLEND_CURVES), len(TEMPOS))


def relevance_matrix() -> np.ndarray:
    """``(num_ops, num_heads)`` bool: ``[op, head]`` is True when ``head`` matters for ``op``."""
    table = np.zeros((len(Op), len(Head)), dtype=bool)
    for op, heads in HEAD_RELEVANCE.items():
        table[op, list(heads)] = True
    return table


def action_space(num_slots: int) -> gym.spaces.MultiDiscrete:
    return gym.spaces.MultiDiscrete(np.array(head_sizes(num_slots), dtype=np.int64))


# ----------------------------------------------------------------------------------------------------------
# Observation layout
# ----------------------------------------------------------------------------------------------------------
HISTORY = 5  # past validation accuracies and losses in the observation
SENTINEL = -1.0  # value of a feature that is not known (yet)


class Feature(NamedTuple):
    name: str
    size: int
    description: str


GLOBAL_FEATURES = (
    Feature("progress", 1, "epochs done / max_epochs"),
    Feature("val_accuracy", 1, "validation accuracy (fraction)"),
    Feature("val_loss", 1, "symlog(validation loss) / 4"),
    Feature("train_accuracy", 1, "training accuracy over the epoch (fraction)"),
    Feature("train_loss", 1, "symlog(training loss) / 4"),
    Feature("val_accuracy_history", HISTORY, "previous validation accuracies, newest first (-1: none)"),
    Feature("val_loss_history", HISTORY, "previous symlog(validation loss) / 4, newest first (-1: none)"),
    Feature("accuracy_delta", 1, "clip(10 * change of validation accuracy, -1, 1)"),
    Feature("seed_param_ratio", 1, "clip(alpha-weighted seed parameters / host parameters, 0, 4) / 4"),
    Feature("stage_counts", len(Stage), "slots in each stage / number of slots"),
    Feature("last_op", len(Op), "one-hot of the op executed last step (all 0 at reset)"),
    Feature("last_action_valid", 1, "1 if the last action was valid, 0 if it was executed as WAIT"),
)
SLOT_FEATURES = (
    Feature("stage", len(Stage), "one-hot lifecycle stage"),
    Feature("alpha", 1, "blending amplitude used in the coming epoch"),
    Feature("contribution", 1, "clip(counterfactual contribution in pp / 10, -1, 1); 0 if never measured"),
    Feature("contribution_freshness", 1, "0.8 ** epochs since measured; -1 if never measured"),
    Feature("epochs_in_stage", 1, "epochs in the current stage / max_epochs"),
    Feature("seed_age", 1, "epochs since germination / max_epochs"),
    Feature("blueprint", len(BLUEPRINT_NAMES), "one-hot blueprint (all 0 without a seed)"),
    Feature("blend", len(BLEND_CURVES), "one-hot blending curve (all 0 without a seed)"),
    Feature("tempo", 1, "blending ramp length / 8 (0 without a seed)"),
    Feature("grad_ratio", 1, "symlog(seed / host gradient norm) / 4; -1 if not measured"),
)


class Field(NamedTuple):
    name: str  # "val_accuracy" or "slot1.alpha"
    start: int
    size: int
    description: str


@functools.cache
def observation_layout(num_slots: int) -> tuple[Field, ...]:
    """Every field of the observation vector with its start index, global part first, then slot by slot."""
    fields, start = [], 0
    for feature in GLOBAL_FEATURES:
        fields.append(Field(feature.name, start, feature.size, feature.description))
        start += feature.size
    for slot in range(num_slots):
        for feature in SLOT_FEATURES:
            fields.append(Field(f"slot{slot}.{feature.name}", start, feature.size, feature.description))
            start += feature.size
    return tuple(fields)


def observation_size(num_slots: int) -> int:
    return sum(f.size for f in GLOBAL_FEATURES) + num_slots * sum(f.size for f in SLOT_FEATURES)


def observation_space(num_slots: int) -> gym.spaces.Box:
    """Features are pre-scaled into [-1, 1]; the box leaves room for rounding."""
    size = observation_size(num_slots)
    return gym.spaces.Box(low=-1.0, high=1.0, shape=(size,), dtype=np.float32)
