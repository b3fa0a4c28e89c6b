"""Does a hard parameter budget change the heuristic? Its episodes with and without ``param_budget_mask``.

The heuristic reads the masks, so a budget mask can change what it plants (its rotation skips forbidden
blueprints). Seed sizes depend only on the slots' channels, so the Synthetic host with the head-to-head's widths
answers for the real-data host: the same reset seeds with no mask and with each budget, final validation accuracy
and seed parameters per episode, and whether every episode is identical to the unmasked one.

    python -m benchmarks.studies.heuristic_budget --budgets 3424 3300     # about 1 min on 2 CPU threads
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import esper_env  # noqa: F401  (registers the Esper ids)
from benchmarks.common import device_name, run_stamp, write_json
from esper_agent.envs import VectorEnvDriver
from esper_agent.evaluate import run_episodes
from esper_agent.heuristic import HeuristicActor, env_host

HOST = {"max_epochs": 25, "batch_size": 64, "host_widths": [16, 32], "host_lr": 0.2, "min_prune_age": 6,
        "synthetic_train_size": 512, "device": "cpu"}
OUT = Path(__file__).resolve().parents[1] / "results"


def heuristic_episodes(kwargs: dict[str, Any], episodes: int) -> list[dict[str, float]]:
    """The heuristic's episodes, one per sub-env, from reset seed 0."""
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=episodes, **kwargs)
    try:
        driver = VectorEnvDriver(envs)
        records = run_episodes(driver, HeuristicActor(driver.num_slots, host=env_host(driver.envs)), episodes, 0)
        return [{"final_accuracy": r.final_accuracy, "seed_params": r.seed_params} for r in records]
    finally:
        envs.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.heuristic_budget",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--budgets", type=int, nargs="+", default=[3424, 3300], help="param_budget values (parameters)")
    p.add_argument("--episodes", type=int, default=8, help="episodes = sub-envs (count)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--out", type=Path, default=OUT, help="output folder")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    unmasked = heuristic_episodes(HOST, args.episodes)
    report: dict[str, Any] = {"benchmark": "heuristic_budget", "env": "Esper-Synthetic-v0", "env_kwargs": HOST,
                              "device_name": device_name("cpu"), **run_stamp(), "unmasked": unmasked,
                              "budgets": {}}
    for budget in args.budgets:
        masked = heuristic_episodes(HOST | {"param_budget": budget, "param_budget_mask": True}, args.episodes)
        report["budgets"][str(budget)] = {"episodes": masked, "identical_to_unmasked": masked == unmasked}
        print(f"budget {budget}: identical to unmasked: {masked == unmasked}; seed params "
              f"{[e['seed_params'] for e in masked]} (unmasked {[e['seed_params'] for e in unmasked]})")
    path = write_json(args.out / "heuristic_budget_cpu.json", report, indent=2)
    print(f"written to {path}")
    return report


if __name__ == "__main__":
    main()
