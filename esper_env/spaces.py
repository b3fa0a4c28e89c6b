"""Action heads, the op enum, which heads matter for which op, and the observation layout.

This module is the only part of ``esper_env`` an agent needs besides the Gymnasium API: head names and sizes
(:func:`head_sizes`), :data:`HEAD_RELEVANCE` (used by masks, the agent's loss, entropy and KL) and
:func:`observation_layout`. The blueprint head and the observation's blueprint one-hot follow the catalogue in
:mod:`esper_env.blueprints`. Pure Python, no torch.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from esper_env.blueprints import BLUEPRINTS
from esper_env.config import EnvConfig
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
BLUEPRINT_NAMES = tuple(blueprint.name for blueprint in BLUEPRINTS)
"""The seed catalogue's names in action-head order (``blueprints.BLUEPRINTS``)."""

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
    Feature("params_fraction", 1, "family: parameters / the largest architecture's (0 on the small host)"),
    Feature("train_flops_fraction", 1, "family: training FLOPs / the largest's, static as long (0 on the small host)"),
)
SLOT_FEATURES = (
    Feature("stage", len(Stage), "one-hot stage: " + ", ".join(stage.name for stage in Stage)),
    Feature("alpha", 1, "blending amplitude used in the coming epoch"),
    Feature("contribution", 1, "clip(counterfactual contribution in pp / 10, -1, 1); 0 if never measured"),
    Feature("contribution_freshness", 1, "0.8 ** epochs since measured; -1 if never measured"),
    Feature("epochs_in_stage", 1, "epochs in the current stage / max_epochs"),
    Feature("seed_age", 1, "epochs since germination / max_epochs"),
    Feature("blueprint", len(BLUEPRINT_NAMES), "one-hot blueprint (all 0 without a seed)"),
    Feature("blend", len(BLEND_CURVES), "one-hot blending curve (all 0 without a seed)"),
    Feature("tempo", 1, "blending ramp length / 8 (0 without a seed)"),
    Feature("grad_ratio", 1, "symlog(seed / host gradient norm) / 4; -1 if not measured"),
    Feature("host_width", 1, "family: log2(this slot's stage channels / the seedling's) / log2(the widest's / the "
            "seedling's) (0 on the small host)"),
    Feature("host_blocks", 1, "family: this slot's stage residual blocks / the most it may hold (0 on the small "
            "host)"),
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


# ----------------------------------------------------------------------------------------------------------
# The env docstring's parts that follow the catalogue and the layout
# ----------------------------------------------------------------------------------------------------------
def _span(start: int, size: int) -> str:
    return f"+{start}" if size == 1 else f"+{start}-{start + size - 1}"


def _doc_blocks() -> dict[str, str]:
    """Multi-line parts: the blueprint list and the per-slot observation rows."""
    blueprint_list = [f"* {i} ``{b.name}``: {b.doc}" for i, b in enumerate(BLUEPRINTS)]
    slot_rows, offset = [], 0
    for feature in SLOT_FEATURES:
        slot_rows.append(f"| {_span(offset, feature.size)} | {feature.name} | {feature.description} |")
        offset += feature.size
    return {"blueprint_list": "\n".join(blueprint_list), "slot_rows": "\n".join(slot_rows)}


def _doc_values() -> dict[str, str]:
    """Inline parts: counts, sizes and the blueprint head's values."""
    default_slots = EnvConfig().num_slots
    return {
        "num_blueprints": str(len(BLUEPRINTS)),
        "blueprint_values": ", ".join(f"{i} {b.name}" for i, b in enumerate(BLUEPRINTS)),
        "global_size": str(sum(f.size for f in GLOBAL_FEATURES)),
        "slot_size": str(sum(f.size for f in SLOT_FEATURES)),
        "default_slots": str(default_slots),
        "default_size": str(observation_size(default_slots)),
    }


def fill_env_doc(template: str | None) -> str | None:
    """``template`` with ``${name}`` fields filled in from the blueprint catalogue and the observation layout,
    so that the env's docstring cannot fall behind them. A line holding only ``${blueprint_list}`` or
    ``${slot_rows}`` becomes lines indented like it; other fields are inline values (see
    :func:`_doc_values`). An unknown field raises ``KeyError``. None (docstrings stripped by ``-OO``) stays None.
    """
    if template is None:
        return None
    blocks = _doc_blocks()

    def block(match: re.Match[str]) -> str:
        indent, name = match.groups()
        return "\n".join(indent + line for line in blocks[name].splitlines())

    pattern = r"^([ \t]*)\$\{(" + "|".join(blocks) + r")\}[ \t]*$"
    return string.Template(re.sub(pattern, block, template, flags=re.MULTILINE)).substitute(_doc_values())
