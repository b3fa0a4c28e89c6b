"""Host-alone accuracy: full episodes in which the agent only ever WAITs, one seed per sub-env.

Measures the training recipe itself (the number every seed has to beat) on real CIFAR-10: final validation
accuracy and test accuracy after ``max_epochs`` epochs, for one or more peak learning rates.

    python -m benchmarks.studies.host_alone --env Esper-CIFAR10-v0 --seeds 4 --lrs 0.05 0.1 0.2 --out benchmarks/results
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


def run(env_id: str, seeds: int, kwargs: dict) -> dict:
    # the run's own settings win over the caller's kwargs, which may name them too
    own = {"report_test_accuracy": True, "autoreset_mode": "Disabled"}
    envs = gym.make_vec(env_id, num_envs=seeds, **(kwargs | own))
    envs.reset(seed=0)
    curve, start, info = [], time.perf_counter(), {}
    for _ in range(envs.unwrapped.config.max_epochs):
        _, _, _, truncated, info = envs.step(np.zeros((seeds, 5), dtype=np.int64))
        curve.append(info["val_accuracy"].tolist())
    elapsed = time.perf_counter() - start
    envs.close()
    val, test = np.array(curve[-1]), info["test_accuracy"]
    return {"env": env_id, "kwargs": kwargs, "seeds": list(range(seeds)), "seconds": elapsed,
            "val_accuracy": val.tolist(), "test_accuracy": test.tolist(),
            "val_mean": float(val.mean()), "test_mean": float(test.mean()), "test_std": float(test.std(ddof=1)),
            "val_curve": curve, "truncated": bool(truncated.all())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", nargs="+", default=["Esper-CIFAR10-v0", "Esper-CIFAR10-Fast-v0"])
    parser.add_argument("--seeds", type=int, default=4, help="sub-envs, one seed each")
    parser.add_argument("--lrs", type=float, nargs="+", default=[0.1], help="peak host learning rates to try")
    parser.add_argument("--env-kwargs", default="{}", help="JSON dict of extra env arguments")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for env_id in args.env:
        for lr in args.lrs:
            kwargs = {**json.loads(args.env_kwargs), "host_lr": lr, "seed_lr": lr}
            row = {"device": device_name(device), **run(env_id, args.seeds, kwargs)}
            rows.append(row)
            print(f"{env_id} host_lr={lr}: val {row['val_mean']:.4f} test {row['test_mean']:.4f} "
                  f"(+-{row['test_std']:.4f} over {args.seeds} seeds) in {row['seconds']:.1f}s", flush=True)
    write_json(args.out / f"host_alone-{device_tag(rows[0]['device'])}.json", run_stamp() | {"rows": rows})


if __name__ == "__main__":
    main()
