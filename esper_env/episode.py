"""One sub-env's episode bookkeeping: slot states, measurements and history. Pure Python, no torch.

The vector env keeps one :class:`Episode` per sub-env and moves it through a step with the functions here:
:func:`apply_action` (before training) returns which module changes the engine must make, and
:func:`finish_epoch` (after training and measurement) records the epoch and advances the lifecycle timers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from esper_env import lifecycle
from esper_env.config import EnvConfig
from esper_env.lifecycle import BLEND_CURVES, SlotState
from esper_env.spaces import Head, Op

GATED = BLEND_CURVES.index("gated")


class Measurement(NamedTuple):
    """What one epoch measured for one sub-env (accuracies are fractions, losses in nats)."""

    train_loss: float
    train_accuracy: float
    val_loss: float
    val_accuracy: float
    host_only_accuracy: float
    accuracy_without: tuple[float, ...]  # validation accuracy with each slot's alpha forced to 0
    host_grad_norm: float
    seed_grad_norms: tuple[float, ...]
    test_accuracy: float | None
    images_trained: int


class ModuleChange(NamedTuple):
    """What the engine must do to the sub-env's modules: ``kind`` is "plant", "remove" or "join" (a fossilized
    seed becomes part of a growable host and leaves its slot)."""

    kind: str
    slot: int
    blueprint: int = -1
    gated: bool = False


@dataclass
class Episode:
    slots: tuple[SlotState, ...]
    epoch: int = 0
    measurement: Measurement | None = None
    val_accuracy_history: list[float] = field(default_factory=list)  # oldest first
    val_loss_history: list[float] = field(default_factory=list)
    last_op: int | None = None
    last_valid: bool = True
    done: bool = False

    @classmethod
    def fresh(cls, num_slots: int) -> Episode:
        return cls(slots=(lifecycle.EMPTY,) * num_slots)

    @property
    def stages(self) -> tuple[int, ...]:
        return tuple(int(s.stage) for s in self.slots)


def seed_params(slots: tuple[SlotState, ...], param_table: np.ndarray) -> float:
    """Alpha-weighted parameters of live and fossilized seeds; ``param_table[slot, blueprint, gated]``."""
    return float(sum(state.alpha * size for state, size in _seed_sizes(slots, param_table)))


def full_seed_params(slots: tuple[SlotState, ...], param_table: np.ndarray) -> float:
    """Parameters of live and fossilized seeds at full size (alpha 1, gates included): what they will weigh
    once blended in, whatever their alpha now. The hard budget (``param_budget_mask``) counts this."""
    return float(sum(size for _, size in _seed_sizes(slots, param_table)))


def _seed_sizes(slots: tuple[SlotState, ...], param_table: np.ndarray) -> list[tuple[SlotState, float]]:
    """Each seeded slot's state with its seed's parameter count (its blending gate included when gated)."""
    return [(s, param_table[i, s.blueprint, int(s.blend == GATED)]) for i, s in enumerate(slots) if s.has_seed]


def apply_action(episode: Episode, action: np.ndarray, valid: bool,
                 host: str = "small") -> tuple[list[ModuleChange], float]:
    """Apply a validated action's op (WAIT if ``valid`` is False). Returns module changes and the last
    measured contribution of a seed this op pruned (0.0 if none), for the contribution reward. On the growable
    family ``host`` FOSSILIZE also joins the seed to the host and frees its slot (``lifecycle.release``), and a
    seed is mixed in from germination (``lifecycle.blends_at_birth``)."""
    op = Op(int(action[Head.OP])) if valid else Op.WAIT
    episode.last_op, episode.last_valid = int(op), valid
    if op == Op.WAIT:
        return [], 0.0
    slot = int(action[Head.SLOT])
    state = episode.slots[slot]
    changes: list[ModuleChange] = []
    pruned = 0.0
    if op == Op.GERMINATE:
        blueprint, blend = int(action[Head.BLUEPRINT]), int(action[Head.BLEND])
        new = lifecycle.germinate(state, blueprint, blend, int(action[Head.TEMPO]),
                                  born_blended=lifecycle.blends_at_birth(blueprint, host))
        changes.append(ModuleChange("plant", slot, blueprint, blend == GATED))
    elif op == Op.PRUNE:
        new, pruned = lifecycle.prune(state), state.contribution or 0.0
        changes.append(ModuleChange("remove", slot))
    elif op == Op.FOSSILIZE:
        new = lifecycle.fossilize(state)
        if host == "family":
            new = lifecycle.release(new)
            changes.append(ModuleChange("join", slot))
    else:
        new = lifecycle.advance(state)
    episode.slots = _replace(episode.slots, slot, new)
    return changes, pruned


def finish_epoch(episode: Episode, m: Measurement, cfg: EnvConfig) -> tuple[list[ModuleChange], list[bool]]:
    """Record the epoch's measurements, then tick every slot. Returns module changes (auto-prunes) and, per
    slot, whether the holding timeout pruned it."""
    if episode.measurement is not None:
        episode.val_accuracy_history.append(episode.measurement.val_accuracy)
        episode.val_loss_history.append(episode.measurement.val_loss)
    episode.measurement = m
    episode.epoch += 1
    changes, timeouts, slots = [], [], []
    for i, state in enumerate(episode.slots):
        measured = state.alpha > 0 and state.has_seed
        contribution = 100.0 * (m.val_accuracy - m.accuracy_without[i]) if measured else None
        ratio = m.seed_grad_norms[i] / m.host_grad_norm if m.host_grad_norm > 0 else None
        grad = m.seed_grad_norms[i] if state.has_seed else None
        recorded = lifecycle.record_epoch(state, contribution, grad, ratio if state.has_seed else None)
        ticked, event = lifecycle.tick(recorded, cfg)
        timeouts.append(event == "holding_timeout")
        if event == "holding_timeout":
            changes.append(ModuleChange("remove", i))
        slots.append(ticked)
    episode.slots = tuple(slots)
    return changes, timeouts


def measured_contributions(episode: Episode) -> tuple[float, ...]:
    """Contributions measured in the epoch just finished (for the contribution reward)."""
    return tuple(s.contribution for s in episode.slots
                 if s.has_seed and s.contribution is not None and s.contribution_age == 0)


def rollback(episode: Episode) -> list[ModuleChange]:
    """The governor fired: prune every live seed and end the episode (fossils stay; a reset follows). The
    epoch was spent, so it counts; its measurements are not recorded."""
    episode.epoch += 1
    changes = []
    slots = list(episode.slots)
    for i, state in enumerate(slots):
        if state.stage in lifecycle.LIVE:
            slots[i] = lifecycle.prune(state)
            changes.append(ModuleChange("remove", i))
    episode.slots = tuple(slots)
    episode.done = True
    return changes


def diverged(m: Measurement, cfg: EnvConfig) -> bool:
    """A non-finite loss, or one above ``cfg.divergence_loss`` nats: the governor rolls the host back."""
    losses = (m.train_loss, m.val_loss)
    return any(not math.isfinite(v) or v > cfg.divergence_loss for v in losses)


def collapsed(episode: Episode, m: Measurement, cfg: EnvConfig, chance_accuracy: float) -> bool:
    """Whether the host has collapsed to chance, counting ``m`` (this epoch, not yet recorded): the governor
    rolls it back as it does a diverged one. A collapse (a dead network after too large a step, say) stays
    finite and below ``divergence_loss``, so :func:`diverged` misses it and the episode would train a dead host
    to the end.

    For the last ``cfg.collapse_patience`` epochs (0: never) the validation accuracy is within
    ``collapse_accuracy_margin`` of ``chance_accuracy``, and either an earlier epoch of the episode was at least
    ``collapse_peak`` above chance, or the validation loss stayed within ``collapse_loss_tolerance`` nats of
    -ln(chance_accuracy), i.e. ln(number of classes) for balanced classes: the loss of a constant prediction,
    while the training loss did not fall by more than that tolerance since the previous epoch. The training loss
    tells a dead network from a slow start: validation read through a moving average of the weights
    (``ema_epochs``) lags the live weights by about an epoch, and a host that starts slowly (on Esper-Synthetic-v0
    with the family task, one reset seed in sixteen, WAIT only) showed validation at ln(10) for three epochs
    while its training loss fell by 0.03 nats per epoch, and was rolled back with a reward of -1 for nothing it
    did.
    """
    patience = cfg.collapse_patience
    accuracies = [*episode.val_accuracy_history, *_last(episode, "val_accuracy"), m.val_accuracy]
    losses = [*episode.val_loss_history, *_last(episode, "val_loss"), m.val_loss]
    if patience == 0 or len(accuracies) < patience:
        return False
    if any(a > chance_accuracy + cfg.collapse_accuracy_margin for a in accuracies[-patience:]):
        return False
    earlier = accuracies[:-patience]
    fell = bool(earlier) and max(earlier) >= chance_accuracy + cfg.collapse_peak
    chance_loss = -math.log(chance_accuracy)
    stuck = all(abs(v - chance_loss) <= cfg.collapse_loss_tolerance for v in losses[-patience:])
    previous_train = _last(episode, "train_loss")
    still_fitting = bool(previous_train) and previous_train[0] - m.train_loss > cfg.collapse_loss_tolerance
    return fell or (stuck and not still_fitting)


def _last(episode: Episode, name: str) -> list[float]:
    """The previous epoch's value of measurement field ``name`` (none before the first epoch)."""
    return [] if episode.measurement is None else [getattr(episode.measurement, name)]


def _replace(slots: tuple[SlotState, ...], index: int, state: SlotState) -> tuple[SlotState, ...]:
    return slots[:index] + (state,) + slots[index + 1:]
