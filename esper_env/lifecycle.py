"""The seed lifecycle: stages, the one transition table, timers and gates. Pure Python, no torch.

Every set of stages used anywhere in the package is derived here from :data:`TRANSITIONS` (plus the name of the
one stage where blending happens), so that a change to the table changes every rule that depends on it.

One slot's state is a frozen :class:`SlotState`; the functions below return new states. The lifecycle ops
(:func:`germinate`, :func:`advance`, :func:`prune`, :func:`fossilize`) are applied before the host trains an
epoch; :func:`tick` runs after the epoch has been trained and measured and advances the timers (auto-advance,
the alpha ramp, the holding timeout, the embargo).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType

from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.config import EnvConfig


class Stage(IntEnum):
    DORMANT = 0
    GERMINATED = 1
    TRAINING = 2
    BLENDING = 3
    HOLDING = 4
    FOSSILIZED = 5
    PRUNED = 6
    EMBARGOED = 7


S = Stage
TRANSITIONS: Mapping[Stage, tuple[Stage, ...]] = MappingProxyType({
    S.DORMANT: (S.GERMINATED,),
    S.GERMINATED: (S.TRAINING, S.PRUNED),
    S.TRAINING: (S.BLENDING, S.PRUNED),
    S.BLENDING: (S.HOLDING, S.PRUNED),
    S.HOLDING: (S.FOSSILIZED, S.PRUNED),
    S.FOSSILIZED: (),
    S.PRUNED: (S.EMBARGOED,),
    S.EMBARGOED: (S.DORMANT,),
})


JOINING: Mapping[Stage, tuple[Stage, ...]] = MappingProxyType({**TRANSITIONS, S.FOSSILIZED: (S.DORMANT,)})
"""The growable family host's table: :data:`TRANSITIONS` plus FOSSILIZED -> DORMANT. There a fossilized seed
joins the host (its weights become the host's, ``family_host.FamilyHost.join``) and its slot is free to grow
again, so growth compounds; on the small host a fossilized seed stays in its slot for good. Every rule derived
below reads :data:`TRANSITIONS`: the one extra move happens only through :func:`release`."""


def sources_of(target: Stage) -> frozenset[Stage]:
    """The stages from which the table allows a move to ``target``."""
    return frozenset(s for s, successors in TRANSITIONS.items() if target in successors)


def reachable_from(start: Stage, avoid: frozenset[Stage] = frozenset()) -> frozenset[Stage]:
    """``start`` and every stage reachable from it without entering a stage in ``avoid``."""
    seen, frontier = {start}, [start]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in seen and nxt not in avoid:
                seen.add(nxt)
                frontier.append(nxt)
    return frozenset(seen)


TERMINAL = frozenset(s for s, successors in TRANSITIONS.items() if not successors)
SEEDED = reachable_from(S.GERMINATED, avoid=sources_of(S.DORMANT) | {S.PRUNED})
"""Stages in which a seed module exists (live or fossilized): they count toward ``max_seeds``."""
LIVE = SEEDED - TERMINAL
"""Seeded stages whose fate is still open: they may be pruned or advanced."""
COOLDOWN = reachable_from(S.PRUNED, avoid=frozenset({S.DORMANT}))
"""Stages between a prune and the slot being free again."""
GERMINABLE = sources_of(S.GERMINATED)
PRUNABLE = sources_of(S.PRUNED)
FOSSILIZABLE = sources_of(S.FOSSILIZED)


def _growth_successor(stage: Stage) -> Stage | None:
    """The next live stage on the way from germination to the terminal stage, if any."""
    nxt = [s for s in TRANSITIONS[stage] if s in LIVE]
    return nxt[0] if stage in LIVE and nxt else None


ADVANCE_TARGET: Mapping[Stage, Stage] = MappingProxyType(
    {s: t for s in Stage if (t := _growth_successor(s)) is not None}
)
"""Where the ADVANCE op (or auto-advance) moves a seed from each stage that has a next growth stage."""


def _growth_path() -> tuple[Stage, ...]:
    path = [next(t for s in GERMINABLE for t in TRANSITIONS[s] if t in LIVE)]
    while path[-1] in ADVANCE_TARGET:
        path.append(ADVANCE_TARGET[path[-1]])
    return tuple(path)


GROWTH_PATH = _growth_path()
"""Live stages in growth order, from germination to the stage that waits for FOSSILIZE."""
BLEND_STAGE = S.BLENDING
INCUBATING = frozenset(GROWTH_PATH[: GROWTH_PATH.index(BLEND_STAGE)])
"""Seeds that learn beside the host by straight-through: their forward value is exactly the host's."""
FULLY_BLENDED = SEEDED - INCUBATING - {BLEND_STAGE}
"""Seeds at alpha = 1 that read the host's features without detach."""


class ForwardMode(IntEnum):
    """How a slot combines host features ``h`` with its seed's output ``s`` (see ``host.SlotModule``)."""

    OFF = 0  # h
    INCUBATE = 1  # h + (s(h.detach()) - s.detach()): value h, the seed learns from dL/dh
    BLEND = 2  # h + alpha * (s(h.detach()) - h)
    FULL = 3  # h + alpha * (s(h) - h), alpha = 1: upstream host layers learn through the seed


def forward_mode(stage: Stage) -> ForwardMode:
    if stage in INCUBATING:
        return ForwardMode.INCUBATE
    if stage == BLEND_STAGE:
        return ForwardMode.BLEND
    if stage in FULLY_BLENDED:
        return ForwardMode.FULL
    return ForwardMode.OFF


BLEND_CURVES = ("linear", "cosine", "gated")
TEMPOS = (3, 5, 8)


def blend_curve(curve: int, progress: float) -> float:
    """Alpha at ``progress`` in [0, 1] of the ramp; the gated curve ramps its amplitude linearly."""
    progress = min(max(progress, 0.0), 1.0)
    if BLEND_CURVES[curve] == "cosine":
        return 0.5 * (1.0 - math.cos(math.pi * progress))
    return progress


@dataclass(frozen=True)
class SlotState:
    """Everything the rules know about one slot. Measurements are recorded by :func:`record_epoch`."""

    stage: Stage = Stage.DORMANT
    blueprint: int = -1  # index into spaces.BLUEPRINT_NAMES; -1 = none
    blend: int = -1  # index into BLEND_CURVES
    tempo: int = 0  # blending ramp length (epochs)
    epochs_in_stage: int = 0
    age: int = 0  # epochs since germination
    blend_step: int = 0  # 1..tempo while BLENDING
    alpha: float = 0.0  # amplitude used by the next epoch
    contribution: float | None = None  # last measured counterfactual contribution (percentage points)
    contribution_age: int = 0  # epochs since it was measured
    grad_norm: float | None = None  # seed gradient norm over the last epoch (None = not measured)
    grad_ratio: float | None = None  # seed gradient norm / host gradient norm over the last epoch
    born_blended: bool = False  # mixed in at alpha 1 from germination (:func:`blends_at_birth`)

    @property
    def has_seed(self) -> bool:
        return self.stage in SEEDED

    @property
    def gradient_healthy(self) -> bool:
        return self.grad_norm is not None and math.isfinite(self.grad_norm) and self.grad_norm > 0.0


EMPTY = SlotState()


def slot_mode(state: SlotState) -> ForwardMode:
    """How a slot's seed is mixed in this epoch: by its stage, except that a seed born blended is at full
    amplitude in every stage it holds a seed (:func:`blends_at_birth`)."""
    if state.born_blended and state.has_seed:
        return ForwardMode.FULL
    return forward_mode(state.stage)


# ----------------------------------------------------------------------------------------------------------
# Gates: may an op be applied? (masks.py turns these into masks)
# ----------------------------------------------------------------------------------------------------------
def may_germinate(slots: tuple[SlotState, ...], index: int, cfg: EnvConfig) -> bool:
    if slots[index].stage not in GERMINABLE:
        return False
    if sum(s.has_seed for s in slots) >= cfg.seed_limit:
        return False
    return not (cfg.one_seed_incubating and any(s.stage in INCUBATING and not s.born_blended for s in slots))


def may_advance(state: SlotState, cfg: EnvConfig) -> bool:
    """ADVANCE is an op only without auto-advance; with it, the timers do the same moves."""
    return not cfg.auto_advance and _advance_gate(state, cfg)


def _advance_gate(state: SlotState, cfg: EnvConfig) -> bool:
    target = ADVANCE_TARGET.get(state.stage)
    if target is None:
        return False
    if target == BLEND_STAGE:
        return state.epochs_in_stage >= cfg.min_training_epochs and state.gradient_healthy
    if state.stage == BLEND_STAGE:
        return state.blend_step >= state.tempo
    return True


def blends_at_birth(blueprint: int, host: str) -> bool:
    """Whether a seed of ``blueprint`` is mixed in at alpha 1 from germination: every seed of the family host.

    Each family seed computes the host's function at any amplitude when it is planted: a widen seed is a
    Net2Net split of its stage's channels (``family_host.WidenSeed``), a deepen seed a residual block whose last
    norm starts at zero (``family.ResidualBlock``). Incubation (which protects the host from an untrained seed)
    and the ramp protect nothing there, while every epoch spent on them is an epoch the grown network does not
    train: a deepen seed would reach alpha 1 four epochs after its germination. A seed born blended still passes
    through the lifecycle's stages and timers (its ramp is complete on entering BLENDING), so the agent decides
    when it joins, or prunes it, as for any seed. The small host's seeds incubate and blend as before."""
    return host == "family" and 0 <= blueprint < len(FAMILY_BLUEPRINTS)


def may_prune(state: SlotState, cfg: EnvConfig) -> bool:
    return state.stage in PRUNABLE and state.age >= cfg.min_prune_age


def may_fossilize(state: SlotState, cfg: EnvConfig) -> bool:
    return (
        state.stage in FOSSILIZABLE
        and state.contribution is not None
        and state.contribution >= cfg.fossilize_min_contribution
    )


# ----------------------------------------------------------------------------------------------------------
# Ops
# ----------------------------------------------------------------------------------------------------------
def germinate(state: SlotState, blueprint: int, blend: int, tempo_index: int,
              born_blended: bool = False) -> SlotState:
    _require_move(state, S.GERMINATED)
    return SlotState(stage=S.GERMINATED, blueprint=blueprint, blend=blend, tempo=TEMPOS[tempo_index],
                     born_blended=born_blended, alpha=1.0 if born_blended else 0.0)


def advance(state: SlotState) -> SlotState:
    target = ADVANCE_TARGET.get(state.stage)
    if target is None:
        raise ValueError(f"stage {state.stage.name} has no stage to advance to")
    _require_move(state, target)
    if target == BLEND_STAGE:
        if state.born_blended:  # already at alpha 1: its ramp is complete
            return dataclasses.replace(_enter(state, target), blend_step=state.tempo)
        return dataclasses.replace(_enter(state, target), blend_step=1, alpha=blend_curve(state.blend, 1 / state.tempo))
    if target in FULLY_BLENDED:
        return dataclasses.replace(_enter(state, target), alpha=1.0)
    return _enter(state, target)


def prune(state: SlotState) -> SlotState:
    _require_move(state, S.PRUNED)
    return SlotState(stage=S.PRUNED)


def fossilize(state: SlotState) -> SlotState:
    _require_move(state, S.FOSSILIZED)
    return dataclasses.replace(_enter(state, S.FOSSILIZED), alpha=1.0)


def release(state: SlotState) -> SlotState:
    """Free the slot of a fossilized seed that joined the host (the :data:`JOINING` table's extra move)."""
    if state.stage != S.FOSSILIZED:  # the one move JOINING adds; EMBARGOED -> DORMANT is the embargo's timer
        raise ValueError(f"illegal lifecycle move {state.stage.name} -> DORMANT; only a fossilized seed joins")
    return EMPTY


def _enter(state: SlotState, stage: Stage) -> SlotState:
    return dataclasses.replace(state, stage=stage, epochs_in_stage=0)


def _require_move(state: SlotState, target: Stage) -> None:
    if target not in TRANSITIONS[state.stage]:
        raise ValueError(f"illegal lifecycle move {state.stage.name} -> {target.name}")


# ----------------------------------------------------------------------------------------------------------
# After an epoch: record measurements, then advance timers
# ----------------------------------------------------------------------------------------------------------
def record_epoch(
    state: SlotState, contribution: float | None, grad_norm: float | None, grad_ratio: float | None
) -> SlotState:
    """Store this epoch's measurements (contribution is None when it was not measured)."""
    if not state.has_seed:
        return state
    if contribution is None:
        return dataclasses.replace(state, contribution_age=state.contribution_age + 1, grad_norm=grad_norm,
                                   grad_ratio=grad_ratio)
    return dataclasses.replace(state, contribution=contribution, contribution_age=0, grad_norm=grad_norm,
                               grad_ratio=grad_ratio)


def holding_steps_left(state: SlotState, cfg: EnvConfig) -> int:
    """For a seed that FOSSILIZE may keep (HOLDING), at how many more steps, this one included, it may still be
    kept before :func:`tick`'s holding timeout prunes it (1: now or never); 0 for any other slot. The timer only:
    FOSSILIZE also needs the contribution :func:`may_fossilize` asks for."""
    return max(cfg.max_holding_epochs - state.epochs_in_stage, 0) if state.stage in FOSSILIZABLE else 0


def tick(state: SlotState, cfg: EnvConfig) -> tuple[SlotState, str | None]:
    """Advance one epoch of timers. Returns the new state and an event name (``"holding_timeout"``) or None."""
    aged = dataclasses.replace(
        state, epochs_in_stage=state.epochs_in_stage + 1, age=state.age + (1 if state.has_seed else 0)
    )
    if aged.stage == S.PRUNED:
        return _enter(aged, S.EMBARGOED), None
    if aged.stage == S.EMBARGOED:
        return (EMPTY if aged.epochs_in_stage >= cfg.embargo_epochs else aged), None
    if aged.stage == BLEND_STAGE and aged.blend_step < aged.tempo:
        step = aged.blend_step + 1
        return dataclasses.replace(aged, blend_step=step, alpha=blend_curve(aged.blend, step / aged.tempo)), None
    if aged.stage in FOSSILIZABLE and aged.epochs_in_stage >= cfg.max_holding_epochs:
        return prune(aged), "holding_timeout"
    if cfg.auto_advance and _advance_gate(aged, cfg):
        return advance(aged), None
    return aged, None


__all__ = [
    "Stage", "TRANSITIONS", "SlotState", "EMPTY", "ForwardMode", "forward_mode", "BLEND_CURVES", "TEMPOS",
    "SEEDED", "LIVE", "TERMINAL", "COOLDOWN", "GERMINABLE", "PRUNABLE", "FOSSILIZABLE", "INCUBATING",
    "FULLY_BLENDED", "ADVANCE_TARGET", "GROWTH_PATH", "BLEND_STAGE", "sources_of", "reachable_from",
    "may_germinate", "may_advance", "may_prune", "may_fossilize", "holding_steps_left", "germinate", "advance",
    "prune", "fossilize",
    "JOINING", "release", "blends_at_birth", "slot_mode",
    "record_epoch", "tick", "blend_curve",
]
