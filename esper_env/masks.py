"""Action masks, derived from the lifecycle's gates and nothing else; action validation.

Two masks per sub-env, recomputed after every step:

* ``op_slot_mask`` — bool ``(num_ops, num_slots)``: exactly which slots each op may target. The WAIT row is all
  True, because WAIT ignores the slot head, so no row of the flat mask is ever empty.
* ``action_mask`` — bool ``(sum(nvec),)``: the op mask, then for each other head the values valid for *some*
  valid op (the marginal; what sb3-contrib's MaskablePPO reads). Because WAIT accepts any value of the heads it
  ignores, the marginals of the non-op heads are all True: the flat mask is strictly weaker than
  ``op_slot_mask``, and an action it allows may still be executed as WAIT (flagged ``invalid_action``).
"""

from __future__ import annotations

import numpy as np

from esper_env import lifecycle
from esper_env.config import EnvConfig
from esper_env.lifecycle import SlotState
from esper_env.spaces import HEAD_RELEVANCE, Head, Op, head_sizes


def op_slot_mask(slots: tuple[SlotState, ...], cfg: EnvConfig) -> np.ndarray:
    """Which slot each op may target, from the lifecycle gates."""
    mask = np.zeros((len(Op), len(slots)), dtype=bool)
    mask[Op.WAIT, :] = True
    for i, state in enumerate(slots):
        mask[Op.GERMINATE, i] = lifecycle.may_germinate(slots, i, cfg)
        mask[Op.ADVANCE, i] = lifecycle.may_advance(state, cfg)
        mask[Op.PRUNE, i] = lifecycle.may_prune(state, cfg)
        mask[Op.FOSSILIZE, i] = lifecycle.may_fossilize(state, cfg)
    return mask


def flat_action_mask(op_slot: np.ndarray) -> np.ndarray:
    """The per-head marginal mask, concatenated in head order (the MaskablePPO layout)."""
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
                head_valid[:] = True  # blueprint, blend and tempo are never restricted
        parts.append(head_valid)
    return np.concatenate(parts)


def is_valid(action: np.ndarray, op_slot: np.ndarray) -> bool:
    """Whether one well-formed action is allowed: its op may target its slot (the other heads are free)."""
    op = int(action[Head.OP])
    if Head.SLOT not in HEAD_RELEVANCE[Op(op)]:
        return True
    return bool(op_slot[op, int(action[Head.SLOT])])


def validate_actions(actions: object, num_envs: int, nvec: np.ndarray) -> np.ndarray:
    """Check a batch of actions for shape, dtype, NaN and range; return it as int64 ``(num_envs, heads)``.

    Raises ``ValueError`` naming the problem. Never mutates anything, so a bad action changes no state.
    """
    array = np.asarray(actions)
    expected = (num_envs, len(nvec))
    if array.shape != expected:
        raise ValueError(f"actions have shape {array.shape}; expected {expected} (one row of {len(nvec)} "
                         f"heads {tuple(h.name.lower() for h in Head)} per sub-env)")
    if array.dtype.kind == "f" and np.isnan(array).any():
        raise ValueError(f"actions contain NaN: {array.tolist()}; expected integers")
    if array.dtype.kind not in "iu":
        raise ValueError(f"actions have dtype {array.dtype}; expected an integer dtype")
    low, high = array < 0, array >= nvec[None, :]
    if (low | high).any():
        env, head = np.argwhere(low | high)[0]
        raise ValueError(f"action head '{Head(head).name.lower()}' of sub-env {env} is {array[env, head]}; "
                         f"expected an integer in [0, {nvec[head]})")
    return array.astype(np.int64, copy=True)
