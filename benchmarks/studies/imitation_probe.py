"""Does imitation make the agent play like the heuristic? Train only the imitation updates, then compare greedy play.

Trains ``--updates`` imitation updates (:mod:`esper_agent.imitate`; no PPO), logs per update the imitation loss,
the mean probability of the heuristic's action and each head's entropy, then plays ``--episodes`` evaluation
episodes with the greedy imitated policy and with the heuristic on the same reset seeds, and writes everything
as JSON (``benchmarks/results/imitation_probe_<env>_<device>_<time>.json``).

    python -m benchmarks.studies.imitation_probe --env Esper-Synthetic-v0 --env-kwargs '{"host_widths": [16, 32]}'
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import esper_env  # noqa: F401
from benchmarks.common import device_tag, env_device, run_stamp, write_json
from esper_agent.config import AgentConfig
from esper_agent.envs import VectorEnvDriver
from esper_agent.evaluate import PolicyActor, run_episodes
from esper_agent.heuristic import HeuristicActor, env_host
from esper_agent.trainer import Trainer


def _summary(records: list) -> dict:
    return {"final_val_accuracy": float(np.mean([r.final_accuracy for r in records])),
            "seed_params": float(np.mean([r.seed_params for r in records])),
            "per_episode": [{"val_accuracy": r.final_accuracy, "seed_params": r.seed_params} for r in records]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Esper-Synthetic-v0")
    parser.add_argument("--env-kwargs", type=json.loads, default={"host_widths": [16, 32], "min_prune_age": 6})
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--agent-kwargs", type=json.loads,
                        default={"imitation_epochs": 20, "hidden_size": 64, "learning_rate": 1e-3, "prune_prior": 2.0})
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)

    config = AgentConfig(**(args.agent_kwargs | {"imitation_updates": args.updates}))
    trainer = Trainer(gym.make_vec(args.env, num_envs=args.num_envs, **args.env_kwargs), config, seed=args.seed,
                      total_updates=args.updates)
    start, updates = time.perf_counter(), []
    for metrics in trainer.train():
        row = {k: float(v) for k, v in metrics.items() if k.startswith(("imitation/", "entropy/", "value/"))}
        updates.append(row)
        print(f"update {metrics['update']}: action prob {row['imitation/action_prob']:.3f}, "
              f"nll {row['imitation/nll']:.3f}", flush=True)
    train_s = time.perf_counter() - start
    driver = VectorEnvDriver(gym.make_vec(args.env, num_envs=args.num_envs, **args.env_kwargs))
    eval_seed = 100_000 + args.seed
    imitated = run_episodes(driver, PolicyActor(trainer.policy.eval(), trainer.obs_norm, True), args.episodes,
                            eval_seed)
    heuristic = run_episodes(driver, HeuristicActor(driver.num_slots, host=env_host(driver.envs)), args.episodes,
                             eval_seed)
    result = {"env": args.env, "env_kwargs": args.env_kwargs, "num_envs": args.num_envs,
              "agent_config": config.to_dict(), "device": env_device(args.env_kwargs),
              "torch_threads": torch.get_num_threads(),
              "train_seconds": train_s, "updates": updates, "eval_seed": eval_seed, **run_stamp(),
              "imitated_greedy": _summary(imitated), "heuristic": _summary(heuristic)}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = write_json(args.out / f"imitation_probe_{args.env}_{device_tag(result['device'])}_{stamp}.json", result)
    print(f"imitated (greedy): {result['imitated_greedy']['final_val_accuracy']:.4f} val, "
          f"{result['imitated_greedy']['seed_params']:.0f} params; heuristic: "
          f"{result['heuristic']['final_val_accuracy']:.4f}, {result['heuristic']['seed_params']:.0f}; {path}")
    return result


if __name__ == "__main__":
    main()
