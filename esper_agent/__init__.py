"""esper_agent: a factored recurrent (LSTM) PPO agent for Esper's vector environments.

It talks to an environment only through the Gymnasium vector API plus ``esper_env.spaces`` (head sizes and the
op -> relevant-heads table)::

    import gymnasium as gym
    import esper_env  # registers the Esper ids
    from esper_agent import AgentConfig, Trainer

    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=4)
    trainer = Trainer(envs, AgentConfig(), seed=0)
    for metrics in trainer.train(total_updates=10):
        print(metrics["update"], metrics["episode/return_mean"])

Command lines: ``python -m esper_agent.train`` and ``python -m esper_agent.evaluate``.
"""

from __future__ import annotations

from esper_agent.config import AgentConfig
from esper_agent.policy import RecurrentPolicy
from esper_agent.trainer import Trainer

__all__ = ["AgentConfig", "RecurrentPolicy", "Trainer"]
__version__ = "0.1.0"
