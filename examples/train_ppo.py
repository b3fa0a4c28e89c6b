"""The shortest path to training the esper_agent PPO on an Esper vector env.

    python examples/train_ppo.py                      # 3 updates on Esper-Synthetic-v0, 4 sub-envs
    python examples/train_ppo.py --updates 50 --device cuda

For logs, checkpoints and resuming use the command line instead: ``python -m esper_agent.train --help``.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import torch

import esper_env  # noqa: F401  (registers the Esper ids)
from esper_agent import AgentConfig, Trainer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Esper-Synthetic-v0")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--updates", type=int, default=3, help="PPO updates (one = one episode per sub-env)")
    parser.add_argument("--max-epochs", type=int, default=5, help="host epochs per episode (env steps)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto, for both the env and the agent")
    args = parser.parse_args(argv)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device

    envs = gym.make_vec(args.env, num_envs=args.num_envs, max_epochs=args.max_epochs, device=device)
    config = AgentConfig(rollout_steps=args.max_epochs)  # one rollout = one whole episode per sub-env
    trainer = Trainer(envs, config, device=device, seed=0, total_updates=args.updates)
    for m in trainer.train():
        print(f"update {m['update']}: return {m['episode/return_mean']:+.4f}, "
              f"final val accuracy {m['episode/final_accuracy']:.3f}, seed params {m['episode/seed_params']:.0f}, "
              f"KL {m['ppo/kl']:.4f}, anomalies {m['anomalies'] or 'none'}")
    envs.close()


if __name__ == "__main__":
    main()
