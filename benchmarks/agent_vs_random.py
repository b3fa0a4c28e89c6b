"""Does the trained esper_agent beat a random-valid policy? Train over several seeds, then play both.

For each seed: train the PPO agent for ``--updates`` updates, then play ``--episodes`` evaluation episodes with
the trained agent (argmax actions unless ``--stochastic``), with the random-valid policy (uniform over the valid
joint actions read from ``op_slot_mask``) and with the static policy (always WAIT), all three from the same
env reset seed. Reports the mean episode return with a 95% confidence interval over seeds (Student t on the
per-seed means), plus final validation accuracy and seed parameters, and writes everything as JSON under
``--out`` with the device named.

    python -m benchmarks.agent_vs_random --updates 40 --seeds 0 1 2 --num-envs 8 --device cuda
    python -m benchmarks.agent_vs_random --updates 1 --seeds 0 1 2 --num-envs 2 --episodes 2 \\
        --env-kwargs '{"max_epochs": 3, "device": "cpu"}' --device cpu        # smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from esper_agent.baselines import RandomValidActor, StaticActor
from esper_agent.collect import rollout_seed
from esper_agent.config import AgentConfig
from esper_agent.evaluate import PolicyActor, mean_ci95, run_episodes
from esper_agent.train import make_envs
from esper_agent.trainer import Trainer

EVAL_SEED_OFFSET = 1_000_003  # evaluation resets never reuse a training reset seed's stream by construction


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({platform.processor() or platform.machine()})"


def evaluate_arms(trainer: Trainer, args: argparse.Namespace, seed: int) -> dict[str, list[dict[str, Any]]]:
    arms = {"agent": PolicyActor(trainer.policy, trainer.obs_norm, deterministic=not args.stochastic, seed=seed),
            "random": RandomValidActor(trainer.driver.head_sizes, seed=seed), "static": StaticActor()}
    eval_seed = rollout_seed(seed + EVAL_SEED_OFFSET, 0)
    results = {}
    for name, actor in arms.items():
        records = run_episodes(trainer.driver, actor, args.episodes, eval_seed)
        results[name] = [r._asdict() for r in records]
    return results


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    envs = make_envs(args.env, args.num_envs, args.env_kwargs)
    try:
        length = getattr(getattr(envs.unwrapped, "config", None), "max_epochs", None) or 25
        config = AgentConfig(**({"rollout_steps": length} | args.agent_config))
        trainer = Trainer(envs, config, device=args.device, seed=seed, total_updates=args.updates)
        start = time.perf_counter()
        history = [{k: v for k, v in m.items() if isinstance(v, int | float)} for m in trainer.train()]
        trained = time.perf_counter()
        arms = evaluate_arms(trainer, args, seed)
        return {"seed": seed, "train_seconds": trained - start, "eval_seconds": time.perf_counter() - trained,
                "training_curve": [{k: h.get(k) for k in ("update", "episode/return_mean", "ppo/kl")}
                                   for h in history], "arms": arms, "config": config.to_dict()}
    finally:
        envs.close()


def summarize(per_seed: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per arm and statistic: [mean over seeds, 95% CI half-width] of the per-seed episode means."""
    out: dict[str, dict[str, list[float]]] = {}
    for arm in per_seed[0]["arms"]:
        out[arm] = {}
        for key in ("episode_return", "final_accuracy", "seed_params"):
            seed_means = [float(np.nanmean([e[key] for e in s["arms"][arm]])) if any(
                math.isfinite(e[key]) for e in s["arms"][arm]) else math.nan for s in per_seed]
            out[arm][key] = list(mean_ci95(seed_means))
    return out


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.agent_vs_random", description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="Esper-Synthetic-v0", help="vector env id ('module:Id' allowed)")
    p.add_argument("--env-kwargs", type=json.loads, default={}, help="JSON kwargs for gym.make_vec")
    p.add_argument("--agent-config", type=json.loads, default={}, help="JSON AgentConfig overrides "
                   "(rollout_steps defaults to the env's max_epochs)")
    p.add_argument("--num-envs", type=int, default=8, help="sub-envs (count)")
    p.add_argument("--updates", type=int, default=40, help="PPO updates per seed (count)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (at least 3)")
    p.add_argument("--episodes", type=int, default=16, help="evaluation episodes per arm and seed (count)")
    p.add_argument("--device", default="auto", help="agent device: cpu, cuda or auto")
    p.add_argument("--stochastic", action="store_true", help="evaluate the agent with sampled actions")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results", help="output folder")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    if len(args.seeds) < 3:
        raise SystemExit(f"--seeds needs at least 3 seeds for a confidence interval; got {args.seeds}")
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    per_seed = [run_seed(args, seed) for seed in args.seeds]
    summary = summarize(per_seed)
    report = {"benchmark": "agent_vs_random", "env": args.env, "env_kwargs": args.env_kwargs,
              "num_envs": args.num_envs, "updates": args.updates, "episodes": args.episodes, "seeds": args.seeds,
              "agent_deterministic": not args.stochastic, "device": args.device,
              "device_name": device_name(args.device), "torch": torch.__version__,
              "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "summary": summary, "per_seed": per_seed}
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"agent_vs_random_{args.env.split(':')[-1]}_{args.device.split(':')[0]}_{time.strftime('%Y%m%d-%H%M%S')}"
    path = args.out / f"{name}.json"
    path.write_text(json.dumps(_json_safe(report), indent=2) + "\n")
    print(f"{args.env}, {args.updates} updates x {args.num_envs} sub-envs, seeds {args.seeds}, "
          f"{args.episodes} episodes per arm and seed, on {report['device_name']}")
    print("| arm | return (mean ± 95% CI over seeds) | final accuracy | seed params |\n|---|---|---|---|")
    for arm, stats in summary.items():
        cells = [f"{m:+.4f} ± {h:.4f}" if math.isfinite(h) else f"{m:+.4f}" for m, h in stats.values()]
        print(f"| {arm} | " + " | ".join(cells) + " |")
    print(f"written to {path}")
    return report


if __name__ == "__main__":
    main()
