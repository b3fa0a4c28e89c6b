"""The heuristic on the growable family host: it plants the family's blueprints in rotation, only where the masks
allow, never with the gated blend, and plants again in a slot that a FOSSILIZE freed (CPU, synthetic data)."""

from __future__ import annotations

from argparse import Namespace
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

import esper_env  # noqa: F401  (registers the ids)
from esper_agent import evaluate
from esper_agent.config import AgentConfig
from esper_agent.distributed import SingleProcess
from esper_agent.distributions import ActionMasks
from esper_agent.envs import VectorEnvDriver
from esper_agent.extensions import Imitation
from esper_agent.heuristic import ROTATIONS, HeuristicActor, HeuristicConfig, env_host
from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.lifecycle import BLEND_CURVES, Stage
from esper_env.spaces import BLUEPRINT_NAMES, Head, Op, observation_layout

ID = "Esper-Synthetic-v0"
FAMILY = {b.name: i for i, b in enumerate(FAMILY_BLUEPRINTS)}
GATED, LINEAR = BLEND_CURVES.index("gated"), BLEND_CURVES.index("linear")
KWARGS = dict(host="family", max_epochs=10, train_images_per_epoch=256, batch_size=128, collapse_patience=0,
              min_training_epochs=1, device="cpu")
EAGER = HeuristicConfig(plateau_gain=0.5, plateau_epochs=1, min_epochs_left=0.0, blend=GATED)
"""Plants whenever a slot is free (a plateau at once, all episode long), and asks for the gated blend."""


def _family(num_envs: int = 2, **overrides) -> gym.vector.VectorEnv:
    return gym.make_vec(ID, num_envs=num_envs, vectorization_mode="vector_entry_point", autoreset_mode="Disabled",
                        **{**KWARGS, **overrides})


def test_the_rotation_is_resolved_in_the_hosts_catalogue() -> None:
    small = ("conv_light", "conv_small", "depthwise", "bottleneck", "attention")
    assert HeuristicActor(3).blueprints == tuple(BLUEPRINT_NAMES.index(name) for name in small)
    assert HeuristicActor(3, host="family").blueprints == (FAMILY["widen_l"], FAMILY["deepen"], FAMILY["widen_s"])
    assert ROTATIONS["family"] == ("widen_l", "deepen", "widen_s")
    chosen = HeuristicActor(3, HeuristicConfig(blueprints=("widen_s", "deepen")), host="family")
    assert chosen.blueprints == (FAMILY["widen_s"], FAMILY["deepen"])
    with pytest.raises(ValueError, match=r"blueprints=\('conv_light',\) for host='family'; expected one or more "
                                         r"of \['deepen', 'widen_s', 'widen_l'\]"):
        HeuristicActor(3, HeuristicConfig(blueprints=("conv_light",)), host="family")
    with pytest.raises(ValueError, match=r"blueprints=\(\) for host='small'"):
        HeuristicActor(3, HeuristicConfig(blueprints=()))
    with pytest.raises(ValueError, match=r"host='big'; expected one of \('small', 'family'\)"):
        HeuristicActor(3, host="big")


def _plateau_obs() -> np.ndarray:
    layout = {f.name: f for f in observation_layout(3)}
    obs = np.full(sum(f.size for f in layout.values()), -1.0, np.float32)
    for name, value in (("progress", 0.1), ("val_accuracy", 0.5), ("val_accuracy_history", 0.5)):
        obs[layout[name].start : layout[name].start + layout[name].size] = value
    for slot in range(3):
        obs[layout[f"slot{slot}.stage"].start : layout[f"slot{slot}.stage"].start + len(Stage)] = np.eye(len(Stage))[0]
    return obs[None]


def test_family_plantings_follow_the_rotation_and_the_masks() -> None:
    actor = HeuristicActor(3, HeuristicConfig(plateau_gain=0.5, blend=GATED), host="family")
    actor.reset(1)
    op_slot = np.zeros((1, len(Op), 3), bool)
    op_slot[0, Op.WAIT] = op_slot[0, Op.GERMINATE] = True
    blueprint = np.zeros((1, 3, len(BLUEPRINT_NAMES)), bool)
    blueprint[0, :, : len(FAMILY)] = True  # the head's values past the family catalogue are always masked
    blueprint[0, 0, FAMILY["widen_l"]] = False  # slot 0 has no room for the large widening
    blend = np.repeat(blueprint[..., None], len(BLEND_CURVES), -1)
    blend[..., GATED] = False  # the family host has no gated blend
    masks = ActionMasks(op_slot, np.ones((1, 21), bool), blueprint, blend)
    obs, start = _plateau_obs(), np.zeros(1, bool)
    first = actor.act(obs, masks, start)[0]
    assert first[[Head.OP, Head.SLOT, Head.BLUEPRINT, Head.BLEND]].tolist() == [Op.GERMINATE, 0, FAMILY["deepen"],
                                                                                 LINEAR]
    assert actor.act(obs, masks, start)[0][Head.BLUEPRINT] == FAMILY["widen_s"]  # the rotation goes on
    blueprint[0, 0] = False  # slot 0 is full: the next free slot takes the rotation's next, widen_l
    third = actor.act(obs, masks, start)[0]
    assert third[[Head.SLOT, Head.BLUEPRINT, Head.BLEND]].tolist() == [1, FAMILY["widen_l"], LINEAR]


def _check_planting(action: np.ndarray, masks: ActionMasks, i: int, rotation: list[int]) -> None:
    """A GERMINATE of sub-env ``i``: a family blueprint, the first of ``rotation`` (the rotation from the one
    after the last planted) that the mask allowed in its slot, with an allowed, ungated blend."""
    slot, planted, blend = int(action[Head.SLOT]), int(action[Head.BLUEPRINT]), int(action[Head.BLEND])
    assert planted < len(FAMILY) and blend != GATED
    assert masks.blueprint[i, slot, planted] and masks.blend[i, slot, planted, blend]
    assert planted == next(b for b in rotation if masks.blueprint[i, slot, b])


def test_a_family_episode_grows_a_slot_again_after_fossilizing() -> None:
    # Only stage 0 may grow (one block, up to 32 channels): every planting goes there, so it must be freed first.
    # It never prunes and the env and heuristic let it fossilize whatever it measures: on 256 images a seed's
    # contribution is a coin flip of one image either way (below 0 on some CPUs, where at >= 0 it never joined).
    driver = VectorEnvDriver(_family(max_widths=(32, 32, 32), max_blocks=(1, 0, 0), fossilize_min_contribution=-100.0))
    config = replace(EAGER, prune_below=-100.0, fossilize_above=-100.0)
    actor = HeuristicActor(driver.num_slots, config, host=env_host(driver.envs))
    obs, masks = driver.reset(seed=0)
    actor.reset(driver.num_envs)
    starts = np.ones(driver.num_envs, bool)
    cycle = [FAMILY[name] for name in ("widen_l", "deepen", "widen_s")]  # the family's default rotation
    position = np.zeros(driver.num_envs, np.int64)
    executed: list[list[tuple[int, int]]] = [[] for _ in range(driver.num_envs)]  # (op, slot) per sub-env
    for _ in range(KWARGS["max_epochs"]):
        actions = actor.act(obs, masks, starts)
        for i in np.flatnonzero(actions[:, Head.OP] == Op.GERMINATE):
            rotation = [cycle[(position[i] + k) % len(cycle)] for k in range(len(cycle))]
            _check_planting(actions[i], masks, i, rotation)
            position[i] += rotation.index(int(actions[i, Head.BLUEPRINT])) + 1
        step = driver.step(actions)
        assert not driver.last_info["invalid_action"].any()
        for i in range(driver.num_envs):
            executed[i].append((int(driver.last_info["executed_op"][i]), int(driver.last_info["executed_slot"][i])))
        obs, masks, starts = step.obs, step.masks, step.episode_start
    for ops in executed:
        joined = ops.index((Op.FOSSILIZE, 0))
        assert (Op.GERMINATE, 0) in ops[:joined] and (Op.GERMINATE, 0) in ops[joined + 1 :]
        assert all(slot == 0 for op, slot in ops if op == Op.GERMINATE)


def test_env_host_reads_the_host_kind_of_any_vector_env() -> None:
    assert env_host(_family(1)) == "family"
    assert env_host(gym.make_vec(ID, num_envs=1, vectorization_mode="vector_entry_point", device="cpu")) == "small"
    sync = gym.make_vec(ID, num_envs=1, vectorization_mode="sync", **{**KWARGS, "max_epochs": 2})
    assert env_host(sync) == "family"  # through the sub-envs' config
    assert env_host(gym.make_vec(toy_env.ENV_ID, num_envs=1)) == "small"  # no Esper config


def test_the_agents_builders_give_the_heuristic_the_envs_host() -> None:
    driver = VectorEnvDriver(_family(1))
    assert evaluate.make_actor(Namespace(policy="heuristic"), None, driver).host == "family"
    teacher = Imitation(AgentConfig(imitation_updates=1), driver, SingleProcess()).teacher(0)
    assert teacher is not None and teacher.host == "family"
    small = VectorEnvDriver(gym.make_vec(ID, num_envs=1, vectorization_mode="vector_entry_point", device="cpu"))
    assert evaluate.make_actor(Namespace(policy="heuristic"), None, small).host == "small"
