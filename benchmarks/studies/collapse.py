"""Does the governor roll back a host that collapses to chance, and leave healthy hosts alone?

Plays one WAIT-only episode per sub-env (one seed each) and records, per sub-env, the validation accuracy after
every epoch and the epochs at which the governor rolled the host back (``info["rollback"]``: a rollback ends
the episode, so each sub-env's record stops at its first one). A healthy host should show none; a host that
collapses to chance (a wide host at a learning rate too high for it) should show one soon after it collapses.

    python -m benchmarks.studies.collapse --env Esper-CIFAR10-v0 --seeds 4 \
        --env-kwargs '{"host_widths": [64, 128, 256]}' --out collapse-wide.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import esper_env  # noqa: F401
from benchmarks.common import device_name, run_stamp, write_json


def run(env_id: str, seeds: int, kwargs: dict) -> dict:
    """One WAIT-only episode per sub-env; per sub-env its validation curve and its rollback epoch (or None)."""
    envs = gym.make_vec(env_id, num_envs=seeds, **(kwargs | {"autoreset_mode": "Disabled"}))
    envs.reset(seed=0)
    curves: list[list[float]] = [[] for _ in range(seeds)]
    rollback_at: list[int | None] = [None] * seeds
    live = np.ones(seeds, bool)
    for epoch in range(envs.unwrapped.config.max_epochs):
        # a finished sub-env must not be stepped again: reset it, but record nothing more for it
        if not live.all():
            envs.reset(options={"reset_mask": ~live})
        _, _, terminated, truncated, info = envs.step(np.zeros((seeds, 5), dtype=np.int64))
        for i in np.flatnonzero(live):
            curves[i].append(float(info["val_accuracy"][i]))
            if info["rollback"][i]:
                rollback_at[i] = epoch
        live &= ~(terminated | truncated)
    envs.close()
    return {"env": env_id, "kwargs": kwargs, "seeds": list(range(seeds)), "val_curves": curves,
            "rollback_epoch": rollback_at, "rolled_back": sum(r is not None for r in rollback_at)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.collapse", description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Esper-CIFAR10-v0")
    parser.add_argument("--seeds", type=int, default=4, help="sub-envs, one seed each")
    parser.add_argument("--env-kwargs", default="{}", help="JSON dict of extra env arguments")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    result = run(args.env, args.seeds, json.loads(args.env_kwargs))
    device = device_name("cuda" if torch.cuda.is_available() else "cpu")
    write_json(args.out, {**run_stamp(), "device": device, **result})
    print(f"{args.env} {args.env_kwargs}: {result['rolled_back']} of {args.seeds} rolled back at "
          f"{result['rollback_epoch']}; final val {[c[-1] for c in result['val_curves']]}")


if __name__ == "__main__":
    main()
