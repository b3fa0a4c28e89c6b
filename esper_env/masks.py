"""Action masks, derived from the lifecycle's gates and the parameter budget and nothing else; action validation.

Four masks per sub-env, recomputed after every step:

* ``blend_mask`` — bool ``(num_slots, num_blueprints, num_blends)``: which blends GERMINATE may use for each
  blueprint in each slot. All True unless ``param_budget_mask`` is set; then a planting is allowed where the
  seed parameters at full size plus the new seed's size (with its gate for the gated blend) stay within
  ``param_budget`` (see :func:`blend_mask`), so the hard budget is exact.
* ``blueprint_mask`` — bool ``(num_slots, num_blueprints)``: which blueprints GERMINATE may plant in each slot,
  the ``any`` of ``blend_mask`` over the blends. A blueprint is allowed where its ungated size fits, because the
  linear and cosine blends carry no gate.
* ``op_slot_mask`` — bool ``(num_ops, num_slots)``: exactly which slots each op may target. The WAIT row is all
  True, because WAIT ignores the slot head, so no row of the flat mask is ever empty. The GERMINATE row is False
  where ``blueprint_mask`` allows no blueprint, so a valid op always has a valid value for every head it reads.
* ``action_mask`` — bool ``(sum(nvec),)``: the op mask, then for each other head the values valid for *some*
  valid op (the marginal; what sb3-contrib's MaskablePPO reads). Because WAIT accepts any value of the heads it
  ignores, the marginals of the slot and tempo heads are all True, and so are the blueprint's and the blend's
  unless GERMINATE is valid somewhere; then the blueprint marginal is the union of ``blueprint_mask`` over the slots
  GERMINATE may target, and the blend marginal the union of ``blend_mask`` over the (slot, blueprint) pairs it
  may plant (both all True when nothing is over budget). Every valid action has a spelling the flat mask admits
  (once these marginals are narrowed, a WAIT may need its ignored blueprint and blend values from the unions);
  the converse fails: an action the flat mask allows may still be forbidden by the exact masks and is then
  executed as WAIT (flagged ``invalid_action``).
"""

from __future__ import annotations

import numpy as np

from esper_env import lifecycle
from esper_env.config import EnvConfig
from esper_env.episode import full_seed_params
from esper_env.lifecycle import BLEND_CURVES, SlotState
from esper_env.spaces import HEAD_RELEVANCE, Head, Op, head_sizes

_SIZE_COLUMN = np.array([int(curve == "gated") for curve in BLEND_CURVES])
"""Per blend, the column of ``param_table[slot, blueprint, gated]`` that holds the size of a seed planted with it."""


def blend_mask(slots: tuple[SlotState, ...], cfg: EnvConfig, param_table: np.ndarray) -> np.ndarray:
    """Which blends GERMINATE may use for each blueprint in each slot: ``(num_slots, num_blueprints, num_blends)``.

    With ``param_budget_mask``, blend ``k`` of blueprint ``b`` is allowed in slot ``s`` when the seeds already
    planted, counted at full size, plus the new seed's size (``param_table[s, b, 1]`` with the gated blend's gate,
    ``param_table[s, b, 0]`` without) stay within ``param_budget``. ``param_table[slot, blueprint, gated]`` as in
    the vector env.
    """
    candidates = param_table[:, :, _SIZE_COLUMN]
    if not cfg.param_budget_mask:
        return np.ones(candidates.shape, dtype=bool)
    return full_seed_params(slots, param_table) + candidates <= cfg.param_budget


def blueprint_mask(slots: tuple[SlotState, ...], cfg: EnvConfig, param_table: np.ndarray) -> np.ndarray:
    """Which blueprints GERMINATE may plant in each slot, ``(num_slots, num_blueprints)`` bool: those with at least
    one blend :func:`blend_mask` allows (with ``param_budget_mask``: those whose ungated size fits)."""
    return blend_mask(slots, cfg, param_table).any(axis=-1)


def op_slot_mask(slots: tuple[SlotState, ...], cfg: EnvConfig, blueprints: np.ndarray | None = None) -> np.ndarray:
    """Which slot each op may target, from the lifecycle gates; GERMINATE also needs a blueprint that
    ``blueprints`` (a :func:`blueprint_mask`; None = every blueprint) allows in the slot."""
    mask = np.zeros((len(Op), len(slots)), dtype=bool)
    mask[Op.WAIT, :] = True
    for i, state in enumerate(slots):
        mask[Op.GERMINATE, i] = lifecycle.may_germinate(slots, i, cfg)
        mask[Op.ADVANCE, i] = lifecycle.may_advance(state, cfg)
        mask[Op.PRUNE, i] = lifecycle.may_prune(state, cfg)
        mask[Op.FOSSILIZE, i] = lifecycle.may_fossilize(state, cfg)
    if blueprints is not None:
        mask[Op.GERMINATE] &= blueprints.any(axis=1)
    return mask


def flat_action_mask(op_slot: np.ndarray, blueprints: np.ndarray | None = None,
                     blends: np.ndarray | None = None) -> np.ndarray:
    """The per-head marginal mask, concatenated in head order (the MaskablePPO layout). ``blueprints`` is the
    :func:`blueprint_mask` and ``blends`` the :func:`blend_mask` (None = every value allowed everywhere)."""
    sizes = head_sizes(op_slot.shape[1])
    valid_ops = op_slot.any(axis=1)
    parts = [valid_ops]
    for head in list(Head)[1:]:
        head_valid = np.zeros(sizes[head], dtype=bool)
        for op in np.flatnonzero(valid_ops):
            if head not in HEAD_RELEVANCE[Op(op)]:
                head_valid[:] = True  # an op that ignores this head accepts any value of it
            elif head == Head.SLOT:
                head_valid |= op_slot[op]
            else:
                head_valid[:] = True  # tempo is never restricted; blueprint and blend are narrowed below
        parts.append(head_valid)
    if valid_ops[Op.GERMINATE]:
        # GERMINATE is the only op that reads the blueprint and the blend. Narrowing their marginals to what it may
        # plant steers a per-head masker (MaskablePPO on MultiDiscrete) away from over-budget plantings; WAIT, which
        # ignores both heads, stays expressible with any of these values, and the unions are never empty here.
        slots = op_slot[Op.GERMINATE]
        if blueprints is not None:
            parts[Head.BLUEPRINT] = blueprints[slots].any(axis=0)
        if blends is not None:
            plantable = blends[slots] if blueprints is None else blends[slots] & blueprints[slots][..., None]
            parts[Head.BLEND] = plantable.any(axis=(0, 1))
    return np.concatenate(parts)


def at_keep_deadline(holding_steps_left: np.ndarray) -> np.ndarray:
    """Where a HOLDING seed is at its keep deadline, from ``info["holding_steps_left"]`` (any shape): 1 means
    FOSSILIZE now or never, since the holding timeout prunes the seed after this step."""
    return np.asarray(holding_steps_left) == 1


def deadline_keeps(op_slot: np.ndarray, at_deadline: np.ndarray) -> np.ndarray:
    """Where FOSSILIZE stays allowed under the deferred keep: the slots whose seed the env lets keep (``op_slot``,
    ``(..., num_ops, num_slots)``) and that are at their keep deadline (``at_deadline``, ``(..., num_slots)``,
    :func:`at_keep_deadline`). The deferred keep is a learner's prior, not the task's rule: esper_agent's
    ``AgentConfig.defer_keep`` narrows its own masks so, and :class:`esper_env.sb3.Sb3VecEnv` MaskablePPO's."""
    return np.asarray(op_slot, dtype=bool)[..., Op.FOSSILIZE, :] & np.asarray(at_deadline, dtype=bool)


def defer_keep_flat(flat: np.ndarray, op_slot: np.ndarray, at_deadline: np.ndarray) -> np.ndarray:
    """A copy of the per-head marginal masks ``flat`` (``(..., sum(nvec))``, :func:`flat_action_mask`'s layout)
    whose op head allows FOSSILIZE only where some slot's seed may be kept at its deadline (:func:`deadline_keeps`).
    The slot head stays the marginal over every op: :func:`early_keeps_as_wait` handles a FOSSILIZE paired with
    another slot."""
    narrowed = np.array(flat, dtype=bool)
    narrowed[..., Op.FOSSILIZE] &= deadline_keeps(op_slot, at_deadline).any(axis=-1)
    return narrowed


def early_keeps_as_wait(actions: np.ndarray, op_slot: np.ndarray, at_deadline: np.ndarray) -> np.ndarray:
    """A copy of native ``actions`` (int ``(num_envs, num_heads)``) in which each FOSSILIZE that the env would take
    (``op_slot``, per sub-env) on a seed not yet at its keep deadline (``at_deadline``, per sub-env and slot) is a
    WAIT. A per-head masker (MaskablePPO on MultiDiscrete) may pair FOSSILIZE, allowed for some slot at its
    deadline, with another slot that the slot head's marginal allows; under the deferred keep that pairing must not
    keep a seed early. Any other action, valid or not, is left for the env to judge."""
    out = np.asarray(actions)
    if out.dtype.kind not in "iu" or out.shape != (len(op_slot), len(Head)):
        raise ValueError(f"actions of dtype {out.dtype} and shape {out.shape}; expected integers of shape "
                         f"{(len(op_slot), len(Head))} (native heads, one row per sub-env)")
    out = out.astype(np.int64)
    slots = out[:, Head.SLOT]
    rows = np.flatnonzero((out[:, Head.OP] == Op.FOSSILIZE) & (slots >= 0) & (slots < op_slot.shape[-1]))
    early = rows[np.asarray(op_slot, dtype=bool)[rows, Op.FOSSILIZE, slots[rows]]
                 & ~np.asarray(at_deadline, dtype=bool)[rows, slots[rows]]]
    out[early, Head.OP] = Op.WAIT
    return out


def is_valid(action: np.ndarray, op_slot: np.ndarray, blueprints: np.ndarray | None = None,
             blends: np.ndarray | None = None) -> bool:
    """Whether one well-formed action is allowed: its op may target its slot and, for GERMINATE, ``blueprints``
    allows its blueprint there and ``blends`` its blend for that blueprint (None = every value). Heads the op
    ignores are free."""
    op = int(action[Head.OP])
    if Head.SLOT not in HEAD_RELEVANCE[Op(op)]:
        return True
    slot = int(action[Head.SLOT])
    if not op_slot[op, slot]:
        return False
    if Head.BLUEPRINT not in HEAD_RELEVANCE[Op(op)]:
        return True
    blueprint = int(action[Head.BLUEPRINT])
    if blueprints is not None and not blueprints[slot, blueprint]:
        return False
    return blends is None or bool(blends[slot, blueprint, int(action[Head.BLEND])])


def fill_heads(op: int, op_slot: np.ndarray, nvec: np.ndarray, rng: np.random.Generator,
               blueprints: np.ndarray | None = None, blends: np.ndarray | None = None) -> np.ndarray:
    """A valid action for ``op`` (which ``op_slot`` must allow somewhere): a slot ``op_slot[op]`` allows, then
    for each other head the op reads a uniform value among those allowed, the blueprint by ``blueprints`` in
    that slot and the blend by ``blends`` for that blueprint (None = every value). Heads the op ignores stay 0.
    Draws from ``rng`` in head order, so a seeded caller gets the same actions every run."""
    action = np.zeros(len(nvec), dtype=np.int64)
    action[Head.OP] = op
    for head in sorted(HEAD_RELEVANCE[Op(op)] - {Head.OP}):  # head order: slot and blueprint come before blend
        if head == Head.SLOT:
            action[head] = rng.choice(np.flatnonzero(op_slot[op]))
        elif head == Head.BLUEPRINT and blueprints is not None:
            action[head] = rng.choice(np.flatnonzero(blueprints[action[Head.SLOT]]))
        elif head == Head.BLEND and blends is not None:
            action[head] = rng.choice(np.flatnonzero(blends[action[Head.SLOT], action[Head.BLUEPRINT]]))
        else:
            action[head] = rng.integers(nvec[head])
    return action


def validate_actions(actions: object, num_envs: int | None, nvec: np.ndarray) -> np.ndarray:
    """Check actions for shape, dtype and range; return them as int64 ``(num_envs, heads)``.

    ``num_envs=None`` checks the one action ``(heads,)`` of a single env, whose errors then speak of one action,
    and returns it as ``(1, heads)``. Raises ``ValueError`` naming the problem (NaN is refused with the float
    dtype that holds it). Never mutates anything, so a bad action changes no state.
    """
    array, heads = np.asarray(actions), tuple(h.name.lower() for h in Head)
    single = num_envs is None
    noun, verb = ("action", "has") if single else ("actions", "have")
    expected = (len(nvec),) if single else (num_envs, len(nvec))
    if array.shape != expected:
        per = "one value per head" if single else f"one row of {len(nvec)} values per sub-env, heads"
        raise ValueError(f"{noun} {verb} shape {array.shape}; expected {expected}, {per} {heads}")
    if array.dtype.kind not in "iu":
        raise ValueError(f"{noun} {array.tolist()} {verb} dtype {array.dtype}; expected integers")
    bad = np.argwhere((array < 0) | (array >= nvec))
    if bad.size:
        where, head = tuple(bad[0]), int(bad[0][-1])
        of_env = "" if single else f" of sub-env {where[0]}"
        raise ValueError(f"action head '{heads[head]}'{of_env} is {array[where]}; expected an integer in "
                         f"[0, {nvec[head]})")
    return array.astype(np.int64).reshape(-1, len(nvec))
