"""The rule-based baseline: germinate on a plateau, prune what hurts, fossilize what helps.

It reads only the observation (decoded with ``esper_env.spaces.observation_layout``) and the masks, so it runs
on any Esper vector env. Unlike the reference implementation's heuristic it can fossilize: the env measures
every blended seed's counterfactual contribution each epoch, and the observation carries it.

Rules, checked in this order for each sub-env every step (the first that applies wins):

1. FOSSILIZE a HOLDING seed whose contribution, measured this epoch, is at least ``fossilize_above`` pp;
2. PRUNE a blended seed (BLENDING or HOLDING) whose contribution, measured this epoch, is below
   ``prune_below`` pp;
3. GERMINATE into the first free slot when validation accuracy has plateaued (gained less than
   ``plateau_gain`` over the last ``plateau_epochs`` epochs) and enough of the episode is left for a seed to
   incubate, blend and be judged; blueprints rotate through ``blueprints``. Where ``blueprint_mask`` rules
   blueprints out of a slot (a hard parameter budget; on the family host, a stage at its widest or deepest)
   the rotation skips to the next blueprint the mask allows in that slot, the next free slot is tried when it
   allows none, and nothing is planted when no free slot allows any; when the configured blend is not allowed
   for the chosen blueprint (``blend_mask``: a gated blend whose gate does not fit, or any gated blend on the
   family host), the first blend that is (linear) is used instead;
4. otherwise WAIT.

The blueprint head's values mean different blueprints on the two hosts (``esper_env.blueprints.catalogue``), so
the actor is told the host kind (``EnvConfig.host``; :func:`env_host` reads it from an env) and resolves the
rotation's names in that host's catalogue. On the family host a FOSSILIZE makes the seed part of the host and
frees its slot, so the same rules keep growing a stage until its mask says it is full.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from esper_env.blueprints import catalogue
from esper_env.config import HOSTS
from esper_env.lifecycle import Stage
from esper_env.spaces import Head, Op, observation_layout

CONTRIBUTION_SCALE = 10.0  # the observation stores contribution / 10 (percentage points)

ROTATIONS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "small": ("conv_light", "conv_small", "depthwise", "bottleneck", "attention"),
    # Width first: on this task width is what limits a small CNN (a wider static host gains 8-10 points where
    # depth-only growth gained about one, GROWTH.md), so the largest widening comes first; then a block at the
    # new width; the small widening last, because it is the one that still fits when a stage is close to its
    # widest and the mask rules out the large one.
    "family": ("widen_l", "deepen", "widen_s"),
})
"""The default rotation (``HeuristicConfig.blueprints=None``) on each host kind, names of its catalogue."""


@dataclass(frozen=True)
class HeuristicConfig:
    plateau_gain: float = 0.02
    """Germinate when validation accuracy gained less than this (fraction) over ``plateau_epochs`` epochs."""
    plateau_epochs: int = 2
    """Window of the plateau test (epochs)."""
    min_epochs_left: float = 0.35
    """Germinate only while at least this fraction of the episode is left (a seed needs ~8 epochs)."""
    prune_below: float = 0.0
    """Prune a blended seed whose fresh contribution is below this (percentage points)."""
    fossilize_above: float = 0.0
    """Fossilize a holding seed whose fresh contribution is at least this (percentage points)."""
    blueprints: tuple[str, ...] | None = None
    """Blueprints to plant, in rotation (names in the host's catalogue); None: the host's :data:`ROTATIONS`."""
    blend: int = 0
    """Blending curve (index: 0 linear, 1 cosine, 2 gated; the family host allows no gated blend, so a gated
    choice falls back to linear there)."""
    tempo: int = 0
    """Blending tempo (index: 0 = 3 epochs, 1 = 5, 2 = 8)."""


class HeuristicActor:
    """The rules above as an ``esper_agent.baselines.Actor`` for an env whose host is of kind ``host``
    (``EnvConfig.host``: ``"small"`` or ``"family"``)."""

    def __init__(self, num_slots: int, config: HeuristicConfig | None = None, host: str = "small") -> None:
        if host not in HOSTS:
            raise ValueError(f"host={host!r}; expected one of {HOSTS}")
        self.config, self.host = config or HeuristicConfig(), host
        self.fields = {f.name: f for f in observation_layout(num_slots)}
        self.num_slots = num_slots
        self.blueprints = rotation_indices(self.config.blueprints, host)
        """The rotation as blueprint-head values of ``host``'s catalogue."""
        self.rotation = np.zeros(0, dtype=np.int64)  # per sub-env: position of the next blueprint in the rotation

    def reset(self, num_envs: int) -> None:
        self.rotation = np.zeros(num_envs, dtype=np.int64)

    def act(self, obs: np.ndarray, masks, episode_start: np.ndarray) -> np.ndarray:
        if self.rotation.shape[0] != obs.shape[0]:
            self.reset(obs.shape[0])
        self.rotation[np.asarray(episode_start, dtype=bool)] = 0
        op_slot = np.asarray(masks.op_slot)
        blueprint, blend = planting_masks(masks, obs.shape[0])
        return np.stack([self._one(i, obs[i], op_slot[i], blueprint[i], blend[i]) for i in range(obs.shape[0])])

    def _value(self, obs: np.ndarray, name: str) -> np.ndarray:
        field = self.fields[name]
        return obs[field.start:field.start + field.size]

    def _one(self, env: int, obs: np.ndarray, op_slot: np.ndarray, blueprint: np.ndarray | None,
             blend: np.ndarray | None) -> np.ndarray:
        action = np.zeros(len(Head), dtype=np.int64)
        for slot in range(self.num_slots):
            stage = int(np.argmax(self._value(obs, f"slot{slot}.stage")))
            fresh = self._value(obs, f"slot{slot}.contribution_freshness")[0] == 1.0
            contribution = CONTRIBUTION_SCALE * self._value(obs, f"slot{slot}.contribution")[0]
            if fresh and stage == Stage.HOLDING and contribution >= self.config.fossilize_above \
                    and op_slot[Op.FOSSILIZE, slot]:
                return _with(action, Op.FOSSILIZE, slot)
            if fresh and stage in (Stage.BLENDING, Stage.HOLDING) and contribution < self.config.prune_below \
                    and op_slot[Op.PRUNE, slot]:
                return _with(action, Op.PRUNE, slot)
        free = np.flatnonzero(op_slot[Op.GERMINATE])
        planting = self._planting(env, free, blueprint) if free.size and self._plateau(obs) else None
        if planting is not None:
            slot, position = planting
            action = _with(action, Op.GERMINATE, slot)
            action[Head.BLUEPRINT] = self._rotation_blueprint(position)
            allowed = None if blend is None else blend[slot, action[Head.BLUEPRINT]]
            action[Head.BLEND], action[Head.TEMPO] = allowed_blend(self.config.blend, allowed), self.config.tempo
            self.rotation[env] = position + 1  # the next planting continues after the blueprint used now
        return action

    def _rotation_blueprint(self, position: int) -> int:
        return self.blueprints[position % len(self.blueprints)]

    def _planting(self, env: int, free: np.ndarray, blueprint: np.ndarray | None) -> tuple[int, int] | None:
        """The first free slot where the mask allows a blueprint of the rotation, and the rotation position of the
        first one allowed there from the current position on; None when no free slot allows any."""
        start = int(self.rotation[env])
        for slot in free:
            for position in range(start, start + len(self.blueprints)):
                if blueprint is None or blueprint[slot, self._rotation_blueprint(position)]:
                    return int(slot), position
        return None

    def _plateau(self, obs: np.ndarray) -> bool:
        progress = self._value(obs, "progress")[0]
        if 1.0 - progress < self.config.min_epochs_left:
            return False
        now = self._value(obs, "val_accuracy")[0]
        history = self._value(obs, "val_accuracy_history")  # newest first, -1 where unknown
        window = self.config.plateau_epochs
        if now < 0 or history[window - 1] < 0:
            return False
        return now - history[window - 1] < self.config.plateau_gain


def rotation_indices(names: Sequence[str] | None, host: str) -> tuple[int, ...]:
    """The blueprint-head values of ``names`` (None: ``ROTATIONS[host]``) in the catalogue of host kind ``host``."""
    names = ROTATIONS[host] if names is None else tuple(names)
    known = [blueprint.name for blueprint in catalogue(host)]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValueError(f"blueprints={names!r} for host={host!r}; expected one or more of {known}")
    return tuple(known.index(name) for name in names)


def env_host(envs: Any) -> str:
    """The host kind (``EnvConfig.host``) of a vector env: read from the native Esper env's ``config``, or from
    its sub-envs' through ``get_attr`` (a ``SyncVectorEnv`` of single envs); ``"small"`` for an env without an
    Esper config, whose blueprint head, if it has one, can only mean the small catalogue."""
    config = getattr(envs.unwrapped, "config", None)
    if config is None:
        try:
            config = envs.get_attr("config")[0]
        except (AttributeError, IndexError):
            return "small"
    return str(getattr(config, "host", "small"))


def planting_masks(masks, num_envs: int) -> tuple[Sequence[np.ndarray | None], Sequence[np.ndarray | None]]:
    """Each sub-env's ``blueprint_mask`` and ``blend_mask`` rows from ``masks`` (an ``ActionMasks``); None per
    sub-env where the env gives no such mask (every blueprint, every blend may be planted anywhere)."""
    none = [None] * num_envs
    blueprint = none if masks.blueprint is None else np.asarray(masks.blueprint)
    blend = none if masks.blend is None else np.asarray(masks.blend)
    return blueprint, blend


def allowed_blend(preferred: int, allowed: np.ndarray | None) -> int:
    """``preferred`` where ``allowed`` (a planting's ``blend_mask`` row; None = every blend) allows it, else the
    first blend it allows. Under a hard budget only the gated blend can be ruled out for a blueprint that fits, so
    the fallback is ungated (linear)."""
    if allowed is None or allowed[preferred]:
        return preferred
    choices = np.flatnonzero(allowed)
    if choices.size == 0:
        raise ValueError(f"blend_mask row {np.asarray(allowed).tolist()} allows no blend; expected at least one "
                         "True for a blueprint that may be planted")
    return int(choices[0])


def _with(action: np.ndarray, op: Op, slot: int) -> np.ndarray:
    action[Head.OP], action[Head.SLOT] = op, slot
    return action
