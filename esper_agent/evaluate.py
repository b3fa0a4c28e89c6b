"""Run a trained checkpoint for N episodes and report a results table (baselines: ``run_episodes``).

``python -m esper_agent.evaluate --checkpoint runs/x/checkpoint.pt --episodes 10`` rebuilds the env the run
trained on (id, kwargs and number of sub-envs are stored in the checkpoint; flags override them), plays N
deterministic (argmax) episodes, prints a markdown table of per-episode return, final validation accuracy and
seed parameters, and writes it (and a JSON copy) beside the checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from esper_agent.baselines import Actor
from esper_agent.checkpoint import load_checkpoint
from esper_agent.collect import EpisodeRecord, EpisodeTracker, masks_to_device
from esper_agent.config import AgentConfig
from esper_agent.distributions import ActionMasks
from esper_agent.envs import VectorEnvDriver
from esper_agent.normalize import ObservationNormalizer
from esper_agent.policy import RecurrentPolicy

# Two-sided 95% Student-t quantiles for 1..30 degrees of freedom (larger samples use 1.96).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (Student t); NaN half-width for n < 2."""
    data = np.asarray([v for v in values if math.isfinite(v)], np.float64)
    if data.size == 0:
        return math.nan, math.nan
    if data.size == 1:
        return float(data[0]), math.nan
    t = _T95[data.size - 2] if data.size - 1 <= len(_T95) else 1.96
    return float(data.mean()), float(t * data.std(ddof=1) / math.sqrt(data.size))


class PolicyActor:
    """A trained policy as an :class:`~esper_agent.baselines.Actor` (argmax actions when deterministic)."""

    def __init__(self, policy: RecurrentPolicy, obs_norm: ObservationNormalizer, deterministic: bool = True,
                 seed: int = 0) -> None:
        self.policy, self.obs_norm, self.deterministic = policy, obs_norm, deterministic
        self.device = policy.relevance.device
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.state = policy.initial_state(1)

    def reset(self, num_envs: int) -> None:
        self.state = self.policy.initial_state(num_envs)

    def act(self, obs: np.ndarray, masks: ActionMasks, episode_start: np.ndarray) -> np.ndarray:
        obs_t = torch.as_tensor(self.obs_norm.normalize(obs), device=self.device)
        starts = torch.as_tensor(episode_start, device=self.device)
        out = self.policy.step(obs_t, masks_to_device(masks, self.device), self.state, starts, self.generator,
                              self.deterministic)
        self.state = out.state
        return out.action.cpu().numpy()  # sync: the env takes host arrays


def run_episodes(driver: VectorEnvDriver, actor: Actor, episodes: int, seed: int) -> list[EpisodeRecord]:
    """Play until every sub-env has finished its share of ``episodes`` (shares differ by at most one), so
    short episodes are not over-represented; records come back in (env, order of completion) order."""
    n = driver.num_envs
    quota = np.array([episodes // n + (i < episodes % n) for i in range(n)])
    done_count = np.zeros(n, np.int64)
    obs, masks = driver.reset(seed)
    actor.reset(n)
    starts, tracker, records = np.ones(n, bool), EpisodeTracker(n), []
    while (done_count < quota).any():
        actions = actor.act(obs, masks, starts)
        step = driver.step(actions)
        for record in tracker.record(step, actions):
            if done_count[record.env] < quota[record.env]:
                records.append(record)
                done_count[record.env] += 1
        obs, masks, starts = step.obs, step.masks, step.episode_start
    return sorted(records, key=lambda r: r.env)


def policy_from_checkpoint(payload: dict[str, Any], device: str | torch.device
                           ) -> tuple[RecurrentPolicy, ObservationNormalizer]:
    config, shape = AgentConfig.from_dict(payload["config"]), payload["shape"]
    policy = RecurrentPolicy(shape["obs_dim"], shape["num_slots"], config.hidden_size)
    policy.load_state_dict(payload["policy"])
    obs_norm = ObservationNormalizer(shape["obs_dim"], config.obs_clip, config.normalize_obs)
    obs_norm.load_state_dict(payload["normalizers"]["obs"])
    return policy.to(device).eval(), obs_norm


def results_table(records: Sequence[EpisodeRecord]) -> str:
    """Markdown table: one row per episode, then mean +- 95% CI rows."""
    def cell(v: float) -> str:
        return "n/a" if not math.isfinite(v) else f"{v:.4f}"

    lines = ["| episode | env | return | final accuracy | seed params | length |", "|---|---|---|---|---|---|"]
    for i, r in enumerate(records):
        lines.append(f"| {i} | {r.env} | {cell(r.episode_return)} | {cell(r.final_accuracy)} | "
                     f"{cell(r.seed_params)} | {r.length} |")
    for name, key in (("return", "episode_return"), ("final accuracy", "final_accuracy"),
                      ("seed params", "seed_params")):
        mean, half = mean_ci95([getattr(r, key) for r in records])
        lines.append(f"\n{name}: mean {cell(mean)} ± {cell(half)} (95% CI, n={len(records)})")
    return "\n".join(lines) + "\n"


def _finite_or_none(row: dict[str, Any]) -> dict[str, Any]:
    """Strict JSON has no NaN: an unavailable statistic becomes null."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m esper_agent.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="checkpoint file written by esper_agent.train")
    p.add_argument("--episodes", type=int, default=10, help="episodes to play (count)")
    p.add_argument("--env", default=None, help="env id (default: the one the checkpoint trained on)")
    p.add_argument("--env-kwargs", type=json.loads, default=None, help="JSON kwargs for gym.make_vec "
                   "(default: the checkpoint's)")
    p.add_argument("--num-envs", type=int, default=None, help="sub-envs (default: the checkpoint's)")
    p.add_argument("--seed", type=int, default=1_000_003, help="env reset seed (distinct from training seeds)")
    p.add_argument("--device", default="cpu", help="torch device of the policy")
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the argmax")
    p.add_argument("--output", default=None, help="results file (.md; a .json is written beside it); default: "
                   "<checkpoint>.eval.md")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from esper_agent.train import make_envs  # train imports this module's helpers; avoid a cycle at import

    args = build_parser().parse_args(argv)
    if args.episodes < 1:
        raise SystemExit(f"--episodes must be >= 1, got {args.episodes}")
    payload = load_checkpoint(args.checkpoint)
    run = payload.get("run", {})
    env_id = args.env or run.get("env_id")
    if env_id is None:
        raise SystemExit(f"{args.checkpoint} does not name its env; pass --env")
    envs = make_envs(env_id, args.num_envs or run.get("num_envs", 1),
                     run.get("env_kwargs", {}) if args.env_kwargs is None else args.env_kwargs)
    try:
        policy, obs_norm = policy_from_checkpoint(payload, args.device)
        actor = PolicyActor(policy, obs_norm, deterministic=not args.stochastic, seed=args.seed)
        records = run_episodes(VectorEnvDriver(envs), actor, args.episodes, args.seed)
    finally:
        envs.close()
    table = results_table(records)
    output = Path(args.output) if args.output else Path(f"{args.checkpoint}.eval.md")
    output.write_text(f"# Evaluation of {args.checkpoint} on {env_id}\n\n{table}")
    output.with_suffix(".json").write_text(json.dumps(
        {"checkpoint": str(args.checkpoint), "env_id": env_id, "seed": args.seed,
         "deterministic": not args.stochastic, "episodes": [_finite_or_none(r._asdict()) for r in records]},
        indent=2))
    sys.stdout.write(table)
    print(f"written to {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
