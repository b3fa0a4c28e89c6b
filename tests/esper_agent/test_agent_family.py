"""esper_agent on the growable family host (CPU, synthetic data): its policy draws only what the family's masks
allow (no blueprint past the family catalogue, no gated blend, nothing an outgrown stage cannot take), and a run
that imitates the heuristic and then runs PPO completes its updates without an invalid action."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

import esper_env  # noqa: F401  (registers the ids)
from esper_agent.collect import masks_to_device
from esper_agent.config import AgentConfig
from esper_agent.distributions import ActionMasks
from esper_agent.envs import VectorEnvDriver
from esper_agent.policy import RecurrentPolicy
from esper_agent.trainer import Trainer
from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.lifecycle import BLEND_CURVES
from esper_env.spaces import BLUEPRINT_NAMES, Head, Op

ID = "Esper-Synthetic-v0"
KWARGS = dict(host="family", max_epochs=4, train_images_per_epoch=256, batch_size=128, collapse_patience=0,
              device="cpu")
GATED = BLEND_CURVES.index("gated")
AGENT = dict(rollout_steps=4, hidden_size=32, num_minibatches=2)


def _family(**overrides) -> gym.vector.VectorEnv:
    return gym.make_vec(ID, num_envs=2, vectorization_mode="vector_entry_point", **{**KWARGS, **overrides})


def test_the_policy_draws_only_what_the_family_masks_allow() -> None:
    # Stage 0 may only deepen, stage 1 nothing, stage 2 only widen (up to 256 channels).
    # Two-epoch episodes: a planted seed holds its slot to the episode's end, so short ones plant most often.
    envs = _family(max_epochs=2, max_widths=(16, 32, 256), max_blocks=(1, 0, 0))
    trainer = Trainer(envs, AgentConfig(**{**AGENT, "rollout_steps": 16}, normalize_obs=False), seed=0)
    rollout, stats = trainer.collector.collect(0, trainer.sample_generator)
    assert stats.invalid == 0 and stats.op_counts[Op.GERMINATE] >= 6
    germinate = rollout.actions[..., Head.OP] == Op.GERMINATE
    slots, planted = rollout.actions[..., Head.SLOT][germinate], rollout.actions[..., Head.BLUEPRINT][germinate]
    assert (slots != 1).all()
    assert ((slots == 0) == (planted == 0)).all()  # deepen in stage 0, a widening in stage 2
    assert (planted < len(FAMILY_BLUEPRINTS)).all() and (rollout.actions[..., Head.BLEND][germinate] != GATED).all()
    start = sum(trainer.collector.driver.head_sizes[: Head.BLUEPRINT])
    used = rollout.used_masks[..., start : start + len(BLUEPRINT_NAMES) + len(BLEND_CURVES)][germinate]
    assert not used[:, len(FAMILY_BLUEPRINTS) : len(BLUEPRINT_NAMES)].any()  # the head's values past the catalogue
    assert not used[:, len(BLUEPRINT_NAMES) + GATED].any()


def test_imitation_then_ppo_updates_run_on_the_family_host() -> None:
    # Six epochs: the heuristic waits for two epochs of history and plants only while 35% of the episode is left.
    # Stage 0 may only double: the teacher's rotation must skip its first blueprint (widen_l) there.
    envs = _family(max_epochs=6, max_widths=(32, 256, 256))
    trainer = Trainer(envs, AgentConfig(**{**AGENT, "rollout_steps": 6}, imitation_updates=1), seed=0)
    rows = list(trainer.train(2))
    assert len(rows) == 2
    assert all(row["actions/invalid_rate"] == 0.0 and row["episode/count"] == 2 for row in rows)
    assert math.isfinite(rows[0]["imitation/nll"]) and math.isnan(rows[1]["imitation/nll"])
    assert rows[0]["actions/op_germinate"] > 0  # the heuristic grew something for the policy to imitate
    # What was planted where is named in the family's catalogue, whose values mean other blueprints.
    plant = {key: value for key, value in rows[0].items() if key.startswith("plant/")}
    assert set(plant) == {f"plant/slot{s}_{b.name}" for s in range(3) for b in FAMILY_BLUEPRINTS}
    assert sum(plant.values()) > 0
    for key in ("loss/policy", "loss/value", "ppo/kl"):
        assert math.isfinite(rows[1][key]), key
    assert np.isfinite(rows[1]["episode/return_mean"])


def _keeps(defer_keep: bool) -> list[int]:
    """The ``holding_steps_left`` of every slot the argmax policy fossilized, over two 10-epoch episodes of a
    policy whose op head prefers FOSSILIZE, then GERMINATE, then WAIT."""
    driver = VectorEnvDriver(_family(max_epochs=10, max_holding_epochs=3))
    torch.manual_seed(0)
    policy = RecurrentPolicy(driver.obs_dim, driver.num_slots, 32, defer_keep=defer_keep)
    with torch.no_grad():
        policy.heads[Head.OP][-1].bias[[Op.FOSSILIZE, Op.GERMINATE]] = torch.tensor([6.0, 3.0])
    obs, masks = driver.reset(0)
    state, starts, kept = policy.initial_state(2), np.ones(2, bool), []
    for _ in range(10):
        out = policy.step(torch.as_tensor(obs), masks_to_device(masks, torch.device("cpu")), state,
                          torch.as_tensor(starts), deterministic=True)
        action = out.action.numpy()
        deadline = np.asarray(masks.keep_deadline)
        for i in np.flatnonzero(action[:, Head.OP] == Op.FOSSILIZE):
            kept.append(bool(deadline[i, action[i, Head.SLOT]]))
        step = driver.step(action)
        obs, masks, state, starts = step.obs, step.masks, out.state, step.episode_start
    return kept


def test_defer_keep_fossilizes_only_at_the_keep_deadline() -> None:
    deferred, eager = _keeps(True), _keeps(False)
    assert deferred and all(deferred)  # it kept, and only on a seed's last step
    assert eager and not any(eager)  # without it the same policy keeps at the first chance, before the deadline


def test_defer_keep_needs_the_env_to_report_the_deadline() -> None:
    policy = RecurrentPolicy(4, 3, 32, defer_keep=True)
    masks = ActionMasks(torch.ones(1, len(Op), 3, dtype=torch.bool), torch.ones(1, 21, dtype=torch.bool))
    with pytest.raises(ValueError, match="holding_steps_left"):
        policy.step(torch.zeros(1, 4), masks, policy.initial_state(1), torch.ones(1, dtype=torch.bool))
    with pytest.raises(ValueError, match="defer_keep"):
        AgentConfig(defer_keep=True, imitation_updates=1)
