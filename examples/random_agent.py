"""A random agent that only ever picks valid actions, read from the masks in ``info``.

    python examples/random_agent.py --episodes 2 --num-envs 4
"""

from __future__ import annotations

import argparse
import json

import gymnasium as gym
import numpy as np

import esper_env  # noqa: F401  (registers the Esper ids)
from esper_env.masks import fill_heads


def sample_valid(op_slot_mask: np.ndarray, nvec: np.ndarray, rng: np.random.Generator,
                 blueprint_mask: np.ndarray | None = None, blend_mask: np.ndarray | None = None) -> np.ndarray:
    """Pick a valid op, then let ``fill_heads`` pick a slot that op may target and a value for every other head it
    reads: the blueprint among those ``blueprint_mask`` (``info["blueprint_mask"]``, a hard parameter budget)
    allows in that slot, the blend among those ``blend_mask`` (``info["blend_mask"]``: a gate may not fit) allows
    for that blueprint."""
    op = int(rng.choice(np.flatnonzero(op_slot_mask.any(axis=1))))
    return fill_heads(op, op_slot_mask, nvec, rng, blueprint_mask, blend_mask)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Esper-Synthetic-v0")
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=1, help="episodes per sub-env")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env-kwargs", type=json.loads, default={}, help="JSON dict of env arguments")
    args = parser.parse_args(argv)

    envs = gym.make_vec(args.env, num_envs=args.num_envs, **(args.env_kwargs | {"autoreset_mode": "SameStep"}))
    nvec = envs.single_action_space.nvec
    rng = np.random.default_rng(args.seed)
    _, info = envs.reset(seed=args.seed)
    returns, finished = np.zeros(args.num_envs), 0
    while finished < args.episodes * args.num_envs:
        blueprints = info.get("blueprint_mask", [None] * args.num_envs)
        blends = info.get("blend_mask", [None] * args.num_envs)
        actions = np.stack([sample_valid(m, nvec, rng, b, k) for m, b, k in zip(info["op_slot_mask"], blueprints,
                                                                                 blends, strict=True)])
        _, rewards, terminated, truncated, info = envs.step(actions)
        assert not info["invalid_action"].any()
        returns += rewards
        for i in np.flatnonzero(terminated | truncated):
            final = info["final_info"]
            print(f"sub-env {i}: return {returns[i]:+.4f}, final val accuracy {final['val_accuracy'][i]:.4f}, "
                  f"seed params {final['seed_params'][i]:.0f}")
            returns[i], finished = 0.0, finished + 1
    envs.close()


if __name__ == "__main__":
    main()
