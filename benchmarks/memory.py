"""Device and host memory over many consecutive episodes of a vector env under a random valid policy.

Every episode plants, blends, fossilizes and prunes seeds, so modules, optimizer state and (on CUDA) graphs are
created and freed again and again; memory must stay flat.

    python -m benchmarks.memory --episodes 200 --num-envs 4 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import esper_env  # noqa: F401
from benchmarks.common import device_name, device_tag, run_stamp, write_json
from benchmarks.throughput import CIFAR_SHAPED, random_actions


def run(args: argparse.Namespace) -> dict:
    kwargs = {**CIFAR_SHAPED, **json.loads(args.env_kwargs), "device": args.device,
              "max_epochs": args.episode_epochs, "train_images_per_epoch": args.train_images}
    envs = gym.make_vec(args.env, num_envs=args.num_envs, **(kwargs | {"autoreset_mode": "SameStep"}))
    env, rng = envs.unwrapped, np.random.default_rng(0)
    _, info = envs.reset(seed=0)
    on_cuda = args.device.startswith("cuda")
    samples, start = [], time.perf_counter()
    for episode in range(args.episodes):
        for _ in range(args.episode_epochs):
            actions = random_actions(info, env.single_action_space.nvec, rng, wait=0.4)
            _, _, _, _, info = envs.step(actions)
        if on_cuda:
            torch.cuda.synchronize()  # sync: between episodes, for the reading only
        samples.append({"episode": episode,
                        "allocated": torch.cuda.memory_allocated() if on_cuda else 0,
                        "reserved": torch.cuda.memory_reserved() if on_cuda else 0,
                        "host_max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})
    elapsed = time.perf_counter() - start
    captures = env.graph_captures
    envs.close()
    steady = samples[len(samples) // 10:]
    summary = {key: {"min": min(s[key] for s in steady), "max": max(s[key] for s in steady)}
               for key in ("allocated", "reserved", "host_max_rss_kib")}
    return {"device": device_name(args.device), **run_stamp(), "episodes": args.episodes, "num_envs": args.num_envs,
            "epochs_per_episode": args.episode_epochs, "graph_captures": captures,
            "seconds": elapsed, "steady_state": summary, "samples": samples}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Esper-Synthetic-v0")
    parser.add_argument("--env-kwargs", default="{}", help="JSON dict of extra env arguments")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--episode-epochs", type=int, default=5)
    parser.add_argument("--train-images", type=int, default=2048, help="training images per sub-env epoch")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--tag", default=None)
    args = parser.parse_args(argv)
    result = run(args)
    write_json(args.out / f"memory-{args.tag or device_tag(result['device'])}.json", result)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))


if __name__ == "__main__":
    main()
