"""Where a vector step's time goes on a GPU: steady replay with and without seeds, and re-captures.

    python -m benchmarks.profile_step --num-envs 1 8 --out benchmarks/results     # writes profile_step-<gpu>.json
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
from benchmarks.common import device_name, device_tag, run_stamp, write_json
from benchmarks.throughput import CIFAR_SHAPED
from esper_env.spaces import Op


def _steps(envs, actions_for, count: int) -> float:
    torch.cuda.synchronize()  # sync: timing boundary
    start = time.perf_counter()
    for t in range(count):
        envs.step(actions_for(t))
    torch.cuda.synchronize()  # sync: timing boundary
    return time.perf_counter() - start


def steady_rates(num_envs: int, seeds: int, kwargs: dict) -> dict:
    """Images/s with ``seeds`` seeds planted then left alone (no captures in the timed steps)."""
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=num_envs, **kwargs)
    env = envs.unwrapped
    envs.reset(seed=0)
    wait = np.zeros((num_envs, 5), dtype=np.int64)
    for slot in range(seeds):
        plant = np.tile([Op.GERMINATE, slot, 5, 0, 0], (num_envs, 1))
        envs.step(plant)
        for _ in range(8):  # past incubation, into blending and holding
            envs.step(wait)
    before = env.graph_captures
    elapsed = _steps(envs, lambda t: wait, 4)
    images = 4 * num_envs * env._engine.trainers[0].batches_per_epoch * env._engine.trainers[0].batch_size
    out = {"num_envs": num_envs, "seeds": seeds, "images_per_s": images / elapsed,
           "captures_in_timed_steps": env.graph_captures - before, "stages": env._episodes[0].stages}
    envs.close()
    return out


def capture_cost(kwargs: dict) -> dict:
    """Seconds per step when every step plants or prunes a seed (one re-capture per step) vs. when none does."""
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=1, **{**kwargs, "min_prune_age": 0})
    envs.reset(seed=0)
    wait = np.zeros((1, 5), dtype=np.int64)
    envs.step(wait)

    def churn(t: int) -> np.ndarray:
        return np.array([[Op.GERMINATE, 0, t % 7, 0, 0] if t % 2 == 0 else [Op.PRUNE, 0, 0, 0, 0]])

    t_churn = _steps(envs, churn, 6) / 6
    t_wait = _steps(envs, lambda t: wait, 6) / 6
    envs.close()
    return {"seconds_per_step_with_recapture": t_churn, "seconds_per_step_without": t_wait}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    kwargs = {**CIFAR_SHAPED, "device": "cuda", "max_epochs": 100}
    result = {"device": device_name("cuda"), **run_stamp(), "capture": capture_cost(kwargs), "steady": []}
    print(json.dumps(result["capture"]), flush=True)
    for n in args.num_envs:
        for seeds in (0, 3):
            row = steady_rates(n, seeds, kwargs)
            result["steady"].append(row)
            print(json.dumps(row), flush=True)
    write_json(args.out / f"profile_step-{device_tag(result['device'])}.json", result)


if __name__ == "__main__":
    main()
