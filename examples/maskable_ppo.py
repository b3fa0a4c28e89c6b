"""The shortest path to training sb3-contrib's MaskablePPO on an Esper vector env.

    python examples/maskable_ppo.py                                  # exact masks over joint actions
    python examples/maskable_ppo.py --no-flatten                     # MultiDiscrete heads, marginal masks
    python examples/maskable_ppo.py --env Esper-CIFAR10-Fast-v0 --timesteps 20000 --env-kwargs '{"device": "cuda"}'

``--flatten`` (the default) gives MaskablePPO one ``Discrete`` action over the valid joint combinations with an
exact mask, so it never picks an invalid action; ``--no-flatten`` keeps the five heads, which MaskablePPO can
only mask one by one. See ``esper_env.sb3``.
"""

from __future__ import annotations

import argparse
import json

from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecMonitor

from esper_env.sb3 import make_sb3_env


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Esper-Synthetic-v0")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--timesteps", type=int, default=400, help="env steps (host epochs), summed over sub-envs")
    parser.add_argument("--n-steps", type=int, default=25, help="steps per sub-env per PPO rollout")
    parser.add_argument("--flatten", action=argparse.BooleanOptionalAction, default=True,
                        help="Discrete joint actions with exact masks (default) or MultiDiscrete with marginal masks")
    parser.add_argument("--eval-episodes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env-kwargs", type=json.loads, default={}, help="JSON dict of env arguments")
    args = parser.parse_args(argv)

    # VecMonitor records whole-episode returns: SB3's ep_rew_mean and evaluate_policy read them.
    env = VecMonitor(make_sb3_env(args.env, args.num_envs, args.flatten, seed=args.seed, **args.env_kwargs))
    # batch_size = n_steps: num_envs equal minibatches per epoch. The policy is a small MLP, which SB3 runs
    # fastest on the CPU whatever device the env's host CNNs use.
    model = MaskablePPO("MlpPolicy", env, n_steps=args.n_steps, batch_size=args.n_steps, seed=args.seed,
                        device="cpu")
    model.learn(total_timesteps=args.timesteps)
    mean, std = evaluate_policy(model, env, n_eval_episodes=args.eval_episodes, use_masking=True)
    print(f"{args.env}, flatten={args.flatten}: mean return {mean:+.4f} ± {std:.4f} "
          f"over {args.eval_episodes} episodes after {model.num_timesteps} steps")
    env.close()
    return float(mean)


if __name__ == "__main__":
    main()
