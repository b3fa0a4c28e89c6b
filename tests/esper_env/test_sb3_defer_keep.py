"""The deferred keep for MaskablePPO (``Sb3VecEnv(defer_keep=True)``, ``Sb3Actor(defer_keep=True)``): FOSSILIZE only
at a seed's keep deadline, in the masks of both action layouts, with early keeps of the native heads stepped as
WAIT; the same prior esper_agent's ``AgentConfig.defer_keep`` puts in its own masks."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import sb3_train
from benchmarks.sb3_actor import Sb3Actor
from esper_agent.distributions import ActionMasks
from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.masks import defer_keep_flat, early_keeps_as_wait
from esper_env.sb3 import Sb3VecEnv, make_sb3_env
from esper_env.spaces import Head, Op, head_sizes
from esper_env.wrappers import defer_keep_joint, joint_actions, joint_masks

ID = "Esper-Synthetic-v0"
DEEPEN = [b.name for b in FAMILY_BLUEPRINTS].index("deepen")
# A seed planted at step 0 holds from about step 2 and may be kept for three steps, all inside the episode.
KWARGS = dict(host="family", max_epochs=10, max_holding_epochs=3, train_images_per_epoch=256, batch_size=128,
              min_training_epochs=1, collapse_patience=0, device="cpu")
N, SLOTS = 2, 3
TABLE = joint_actions(SLOTS)
LAYOUTS = pytest.mark.parametrize("flatten", [True, False], ids=["joint", "marginal"])


def _two_keepable_seeds(rows: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` sub-envs whose env may keep the seeds of slots 0 and 1 (slot 2 holds none); only slot 1's is at its
    deadline."""
    op_slot = np.zeros((rows, len(Op), SLOTS), bool)
    op_slot[:, Op.WAIT] = True
    op_slot[:, Op.FOSSILIZE, :2] = True
    op_slot[:, Op.GERMINATE, 2] = True
    return op_slot, np.tile([False, True, False], (rows, 1))


def test_the_narrowed_masks_leave_fossilize_only_at_the_deadline() -> None:
    op_slot, at_deadline = _two_keepable_seeds()
    joint = joint_masks(op_slot)
    narrowed = defer_keep_joint(joint, at_deadline)
    keeps = TABLE[:, Head.OP] == Op.FOSSILIZE
    assert TABLE[narrowed[0] & keeps, Head.SLOT].tolist() == [1]  # slot 0's keep is gone, slot 1's stays
    assert (narrowed[0, ~keeps] == joint[0, ~keeps]).all()
    flat = np.concatenate([op_slot.any(-1), np.ones((1, sum(head_sizes(SLOTS)) - len(Op)), bool)], axis=1)
    assert defer_keep_flat(flat, op_slot, at_deadline)[0, Op.FOSSILIZE]  # some seed is at its deadline
    assert not defer_keep_flat(flat, op_slot, np.zeros_like(at_deadline))[0, Op.FOSSILIZE]  # none is
    assert (defer_keep_flat(flat, op_slot, at_deadline)[0, len(Op):] == flat[0, len(Op):]).all()


def test_only_an_early_keep_that_the_env_would_take_becomes_wait() -> None:
    op_slot, at_deadline = _two_keepable_seeds(rows=6)
    actions = np.zeros((6, len(Head)), np.int64)
    actions[:, Head.OP] = Op.GERMINATE, Op.FOSSILIZE, Op.FOSSILIZE, Op.FOSSILIZE, Op.FOSSILIZE, Op.FOSSILIZE
    actions[:, Head.SLOT] = 2, 1, 0, 2, -1, SLOTS
    out = early_keeps_as_wait(actions, op_slot, at_deadline)
    # only the early keep of slot 0 (a later row) becomes WAIT; the keep at the deadline, the one the env forbids
    # and those of slots out of range are left for the env to take or flag
    assert out[:, Head.OP].tolist() == [Op.GERMINATE, Op.FOSSILIZE, Op.WAIT] + [Op.FOSSILIZE] * 3
    assert actions[2, Head.OP] == Op.FOSSILIZE  # a copy
    with pytest.raises(ValueError, match=r"dtype float64 and shape \(6, 5\); expected integers"):
        early_keeps_as_wait(actions.astype(float), op_slot, at_deadline)


def _keep_whenever_allowed(env: Sb3VecEnv, masks: np.ndarray, infos: list[dict]) -> np.ndarray:
    """FOSSILIZE where the adapter's masks allow it (on the native heads, on the first slot the env's own mask
    allows, which may be early), else plant deepen in slot 2, else WAIT."""
    actions = []
    for mask, info in zip(masks, infos, strict=True):
        keepable = np.flatnonzero(info["op_slot_mask"][Op.FOSSILIZE])
        plant = info["op_slot_mask"][Op.GERMINATE, 2] and info["blueprint_mask"][2, DEEPEN]
        if env.flatten:
            keeps = [j for j in np.flatnonzero(mask) if TABLE[j, Head.OP] == Op.FOSSILIZE]
            germinate = np.flatnonzero((TABLE[:, Head.OP] == Op.GERMINATE) & (TABLE[:, Head.SLOT] == 2)
                                       & (TABLE[:, Head.BLUEPRINT] == DEEPEN))
            actions.append(keeps[0] if keeps else germinate[0] if plant else 0)
            continue
        action = np.zeros(len(Head), np.int64)
        if mask[Op.FOSSILIZE] and len(keepable):
            action[[Head.OP, Head.SLOT]] = Op.FOSSILIZE, keepable[0]
        elif plant:
            action[[Head.OP, Head.SLOT, Head.BLUEPRINT]] = Op.GERMINATE, 2, DEEPEN
        actions.append(action)
    return np.array(actions)


def _keeps(flatten: bool, defer_keep: bool) -> list[int]:
    """The holding steps left (before the step) of every seed the env kept, over one episode."""
    env = make_sb3_env(ID, N, flatten, seed=0, defer_keep=defer_keep, **KWARGS)
    env.reset()
    infos, kept = env.reset_infos, []
    for _ in range(KWARGS["max_epochs"] - 1):  # no episode ends: infos stay the running episode's
        left = [info["holding_steps_left"].copy() for info in infos]
        _, _, _, infos = env.step(_keep_whenever_allowed(env, env.action_masks(), infos))
        kept += [int(left[i][info["executed_slot"]]) for i, info in enumerate(infos)
                 if info["executed_op"] == Op.FOSSILIZE]
    env.close()
    return kept


@LAYOUTS
def test_maskable_ppo_masks_keep_a_seed_only_at_its_deadline(flatten: bool) -> None:
    assert _keeps(flatten, defer_keep=False) == [3] * N  # as soon as allowed, three steps before the timeout
    assert _keeps(flatten, defer_keep=True) == [1] * N  # at the deadline, the last step before it


@LAYOUTS
@pytest.mark.parametrize("mode", ["Disabled", "SameStep"])
def test_the_masks_differ_from_the_plain_adapters_in_early_keeps_alone(flatten: bool, mode: str) -> None:
    """Over two episodes of each sub-env (resets included), the deferred masks are the plain ones less every
    FOSSILIZE on a seed before its deadline."""
    plain, deferred = (make_sb3_env(ID, N, flatten, seed=1, defer_keep=d, autoreset_mode=mode, **KWARGS)
                       for d in (False, True))
    plain.reset()
    deferred.reset()
    infos, ends, removed = deferred.reset_infos, 0, 0
    for _ in range(2 * KWARGS["max_epochs"]):
        base, narrowed = plain.action_masks(), deferred.action_masks()
        at_deadline = np.stack([info["holding_steps_left"] == 1 for info in infos])
        expected = (defer_keep_joint(base, at_deadline) if flatten
                    else defer_keep_flat(base, np.stack([info["op_slot_mask"] for info in infos]), at_deadline))
        np.testing.assert_array_equal(narrowed, expected)
        removed += int((base & ~narrowed).sum())
        actions = _keep_whenever_allowed(deferred, narrowed, infos)
        plain.step(actions)
        _, _, dones, infos = deferred.step(actions)
        ends += int(dones.sum())
    assert ends == 2 * N and removed > 0
    for env in (plain, deferred):
        env.close()


def test_an_early_keep_on_the_native_heads_is_stepped_as_wait_and_said() -> None:
    env = make_sb3_env(ID, N, flatten=False, seed=0, defer_keep=True, **KWARGS)
    env.reset()
    infos = env.reset_infos
    for _ in range(KWARGS["max_epochs"]):  # plant, then wait until the env would take a keep
        if all(info["op_slot_mask"][Op.FOSSILIZE, 2] for info in infos):
            break
        _, _, _, infos = env.step(_keep_whenever_allowed(env, env.action_masks(), infos))
    assert all(info["holding_steps_left"][2] > 1 for info in infos) and not env.action_masks()[:, Op.FOSSILIZE].any()
    keep = np.zeros((N, len(Head)), np.int64)
    keep[:, [Head.OP, Head.SLOT]] = Op.FOSSILIZE, 2
    _, _, _, infos = env.step(keep)
    assert [(info["executed_op"], info["invalid_action"], info["early_keep_waited"]) for info in infos] == [
        (Op.WAIT, False, True)] * N
    with pytest.raises(ValueError, match="expected integers"):  # the env's own refusal, as without defer_keep
        env.step(keep.astype(float) + 0.5)
    env.close()


def test_an_env_without_keep_deadlines_is_refused() -> None:
    env = make_sb3_env(ID, N, flatten=True, seed=0, defer_keep=True, **KWARGS)
    env.reset()
    infos = [{k: v for k, v in info.items() if k != "holding_steps_left"} for info in env.reset_infos]
    with pytest.raises(ValueError, match=r"info of sub-env 0 lacks \['holding_steps_left'\]"):
        env._stack_masks(infos)
    env.close()


class _Model:
    """Stands in for MaskablePPO: keeps the masks it was given and answers a keep of slot 0."""

    def __init__(self, flatten: bool) -> None:
        self.flatten = flatten

    def predict(self, obs, action_masks, deterministic):
        self.masks = action_masks
        if self.flatten:
            keep_slot0 = np.flatnonzero((TABLE[:, Head.OP] == Op.FOSSILIZE) & (TABLE[:, Head.SLOT] == 0))[0]
            return np.full(len(obs), keep_slot0), None
        action = np.zeros((len(obs), len(Head)), np.int64)
        action[:, [Head.OP, Head.SLOT]] = Op.FOSSILIZE, 0
        return action, None


@LAYOUTS
@pytest.mark.parametrize("deterministic", [True, False])
def test_the_evaluation_actor_acts_under_the_training_masks(flatten: bool, deterministic: bool) -> None:
    op_slot, at_deadline = _two_keepable_seeds(rows=2)
    at_deadline[1] = [True, True, False]  # sub-env 1: slot 0's seed is at its deadline too
    flat = np.concatenate([op_slot.any(-1), np.ones((2, sum(head_sizes(SLOTS)) - len(Op)), bool)], axis=1)
    masks = ActionMasks(op_slot, flat, keep_deadline=at_deadline)
    model = _Model(flatten)
    actor = Sb3Actor(model, flatten, SLOTS, deterministic=deterministic, defer_keep=True)
    actions = actor.act(np.zeros((2, 4)), masks, np.ones(2, bool))
    if flatten:
        np.testing.assert_array_equal(model.masks, defer_keep_joint(joint_masks(op_slot), at_deadline))
    else:
        np.testing.assert_array_equal(model.masks, defer_keep_flat(flat, op_slot, at_deadline))
        assert actions[:, Head.OP].tolist() == [Op.WAIT, Op.FOSSILIZE]  # too early in sub-env 0 only
    plain = Sb3Actor(model, flatten, SLOTS, deterministic=deterministic).act(np.zeros((2, 4)), masks, np.ones(2, bool))
    assert plain[:, Head.OP].tolist() == [Op.FOSSILIZE, Op.FOSSILIZE]
    with pytest.raises(ValueError, match="keep deadline"):
        actor.act(np.zeros((2, 4)), masks._replace(keep_deadline=None), np.ones(2, bool))


def test_defer_keep_is_a_maskable_setting_recorded_only_when_on() -> None:
    assert sb3_train.check_sb3_kwargs({"defer_keep": True}) == {"defer_keep": True}
    for value in (1, False):
        with pytest.raises(ValueError, match=f"defer_keep={value}: expected true"):
            sb3_train.check_sb3_kwargs({"defer_keep": value})
    assert sb3_train.resolved_config({"defer_keep": True}, 10, 2)["defer_keep"] is True
    assert "defer_keep" not in sb3_train.resolved_config({}, 10, 2)  # as every slice before the option recorded it
    assert "defer_keep" not in sb3_train.model_kwargs({"defer_keep": True}, 10, 2)  # not MaskablePPO's argument
