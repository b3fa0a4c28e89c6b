"""The agent solves the masked memory toy task (see toy_env.py).

Stated result: with the settings below (16 sub-envs, NEXT_STEP autoreset, 16 steps = 4 episodes per sub-env per
update, hidden 64, lr 1e-3, entropy 0.03, seed 0), after 60 updates the greedy policy scores a mean return of
at least 0.95 over 64 evaluation episodes (the maximum is 1.0; the random-valid policy scores below 0). Measured
on the 2-core CPU: greedy return 1.0 for seeds 0-7 at update 60, about 12 s of training per seed.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.baselines import RandomValidActor
from esper_agent.config import AgentConfig
from esper_agent.envs import VectorEnvDriver
from esper_agent.evaluate import PolicyActor, run_episodes
from esper_agent.trainer import Trainer

UPDATES, TARGET = 60, 0.95
CONFIG = AgentConfig(rollout_steps=16, hidden_size=64, num_minibatches=4, learning_rate=1e-3, ent_coef=0.03)


def greedy_return(actor: object, seed: int = 123) -> float:
    envs = gym.make_vec(toy_env.ENV_ID, num_envs=8)
    records = run_episodes(VectorEnvDriver(envs), actor, 64, seed=seed)
    return float(np.mean([r.episode_return for r in records]))


def test_agent_solves_the_memory_task() -> None:
    envs = gym.make_vec(toy_env.ENV_ID, num_envs=16)  # NEXT_STEP autoreset, episode length 4
    trainer = Trainer(envs, CONFIG, seed=0, total_updates=UPDATES)
    start = time.perf_counter()
    history = [m["episode/return_mean"] for m in trainer.train()]
    elapsed = time.perf_counter() - start
    agent = greedy_return(PolicyActor(trainer.policy, trainer.obs_norm, deterministic=True))
    random = greedy_return(RandomValidActor(trainer.driver.head_sizes, seed=0))
    print(f"toy task: greedy return {agent:.3f} after {UPDATES} updates ({elapsed:.1f} s); random-valid {random:.3f}; "
          f"training return first/last update {history[0]:.3f}/{history[-1]:.3f}")
    assert agent >= TARGET
    assert random < 0.1
