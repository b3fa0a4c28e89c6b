"""Does the trained esper_agent beat a random-valid policy? Train over several seeds, then play both.

For each seed: train the PPO agent for ``--updates`` updates, then play ``--episodes`` evaluation episodes with
the trained agent (argmax actions unless ``--stochastic``), with the random-valid policy (uniform over the valid
joint actions read from ``op_slot_mask``), with the static policy (always WAIT) and with any ``--extra-arms``
(``heuristic``, ``grow_<blueprint>``, ``grow_<bp>+<bp>...``: see ``benchmarks.studies.growth_screen``). Every arm plays
on a fresh vector env of ``--episodes`` sub-envs reset with the same seed, one episode per sub-env: sub-env ``i``
trains the same host initialisation on the same data order in every arm, so the arms are paired.

Reports, per arm, the mean episode return with a 95% confidence interval over seeds (Student t on the per-seed
means), final validation accuracy and seed parameters; and the *paired* margin of the agent over every other
arm: the per-seed difference of episode means (agent - arm), with a Student-t 95% CI over seeds, plus the
pooled per-episode paired difference for reference (episodes of one seed are not independent of the agent's
training). Writes everything as JSON under ``--out`` with the device named.

    python -m benchmarks.studies.agent_vs_random --updates 40 --seeds 0 1 2 --num-envs 8 --device cuda
    python -m benchmarks.studies.agent_vs_random --updates 1 --seeds 0 1 2 --num-envs 2 --episodes 2 \\
        --env-kwargs '{"max_epochs": 3, "device": "cpu"}' --device cpu        # smoke test

Each finished seed is kept in ``<out>/agent_vs_random_slices/<hash of the settings>/seed<k>.json`` as soon as it
is done, and a rerun of the same settings reuses it: a campaign is run in parts (``--seeds`` of a part), and a
killed run loses only its unfinished seeds. ``--jobs N`` trains N seeds at once in separate processes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import device_name, run_stamp, summarized, write_json
from benchmarks.studies.growth_screen import make_actor
from esper_agent.baselines import Actor
from esper_agent.collect import rollout_seed
from esper_agent.config import AgentConfig
from esper_agent.envs import VectorEnvDriver
from esper_agent.evaluate import PolicyActor, mean_ci95, run_episodes
from esper_agent.train import make_envs, resolve_device
from esper_agent.trainer import Trainer

EVAL_SEED_OFFSET = 1_000_003  # evaluation resets never reuse a training reset seed's stream by construction


CURVE_KEYS = ("update", "episode/return_mean", "episode/final_accuracy", "episode/seed_params", "ppo/kl",
              "loss/entropy", "actions/op_wait", "actions/op_germinate", "actions/op_prune", "actions/op_fossilize")


def evaluate_arms(trainer: Trainer, args: argparse.Namespace, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Every arm's ``--episodes`` episodes, one per sub-env of a fresh env, all from the same reset seed."""
    envs = make_envs(args.env, args.episodes, args.env_kwargs)
    try:
        driver = VectorEnvDriver(envs)
        # "agent" plays as --stochastic says; the other way of playing the same policy is reported beside it.
        other = "agent_argmax" if args.stochastic else "agent_sampled"
        arms: dict[str, Actor] = {
            "agent": PolicyActor(trainer.policy, trainer.obs_norm, deterministic=not args.stochastic, seed=seed),
            other: PolicyActor(trainer.policy, trainer.obs_norm, deterministic=args.stochastic, seed=seed)}
        for name in ("random", "static", *args.extra_arms):
            arms[name] = make_actor(name, driver, seed)
        eval_seed = rollout_seed(seed + EVAL_SEED_OFFSET, 0)
        return {name: [r._asdict() for r in run_episodes(driver, actor, args.episodes, eval_seed)]
                for name, actor in arms.items()}
    finally:
        envs.close()


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    envs = make_envs(args.env, args.num_envs, args.env_kwargs)
    try:
        length = getattr(getattr(envs.unwrapped, "config", None), "max_epochs", None) or 25
        config = AgentConfig(**({"rollout_steps": length} | args.agent_config))
        trainer = Trainer(envs, config, device=args.device, seed=seed, total_updates=args.updates)
        start = time.perf_counter()
        history = []
        for metrics in trainer.train():
            history.append({k: v for k, v in metrics.items() if isinstance(v, int | float)})
            if args.progress:
                print(f"seed {seed} update {metrics['update']}: " + ", ".join(
                    f"{k.split('/')[-1]} {metrics.get(k, math.nan):.4f}" for k in CURVE_KEYS[1:]), flush=True)
        trained = time.perf_counter()
        arms = evaluate_arms(trainer, args, seed)
        return {"seed": seed, "train_seconds": trained - start, "eval_seconds": time.perf_counter() - trained,
                "training_curve": [{k: h.get(k) for k in CURVE_KEYS} for h in history], "arms": arms,
                "config": config.to_dict()}
    finally:
        envs.close()


STATS = ("episode_return", "final_accuracy", "seed_params")


def _episode_mean(episodes: list[dict[str, Any]], key: str) -> float:
    values = [e[key] for e in episodes if e[key] is not None and math.isfinite(e[key])]
    return float(np.mean(values)) if values else math.nan


def summarize(per_seed: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per arm and statistic: [mean over seeds, 95% CI half-width] of the per-seed episode means."""
    return {arm: {key: list(mean_ci95([_episode_mean(s["arms"][arm], key) for s in per_seed])) for key in STATS}
            for arm in per_seed[0]["arms"]}


def _paired_episodes(agent: list[dict[str, Any]], other: list[dict[str, Any]], key: str) -> list[float]:
    """agent - other per episode, matched by (sub-env, order of completion)."""
    def keyed(episodes: list[dict[str, Any]]) -> dict[tuple[int, int], float]:
        seen: dict[int, int] = {}
        out = {}
        for e in episodes:
            seen[e["env"]] = seen.get(e["env"], -1) + 1
            out[(e["env"], seen[e["env"]])] = e[key]
        return out
    a, b = keyed(agent), keyed(other)
    return [a[k] - b[k] for k in sorted(a.keys() & b.keys())]


def paired_margins(per_seed: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Agent minus each other arm, per statistic: the per-seed differences of episode means with their mean and
    Student-t 95% CI over seeds (``by_seed``), and the pooled per-episode paired differences (``by_episode``)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for arm in [a for a in per_seed[0]["arms"] if a != "agent"]:
        out[arm] = {}
        for key in STATS:
            diffs = [_episode_mean(s["arms"]["agent"], key) - _episode_mean(s["arms"][arm], key) for s in per_seed]
            pooled = [d for s in per_seed for d in _paired_episodes(s["arms"]["agent"], s["arms"][arm], key)]
            mean, half = mean_ci95(diffs)
            out[arm][key] = {"per_seed": diffs, "by_seed": [mean, half], "by_episode": list(mean_ci95(pooled)),
                             "ci95_low": mean - half, "ci95_high": mean + half,
                             "seeds_agent_better": int(sum(d > 0 for d in diffs))}
    return out


def print_margins(margins: dict[str, dict[str, dict[str, Any]]]) -> None:
    print("\n| agent − arm (paired) | return: mean ± 95% CI over seeds | seeds agent better | per episode |"
          "\n|---|---|---|---|")
    for arm, stats in margins.items():
        r = stats["episode_return"]
        mean, half = r["by_seed"]
        pooled = r["by_episode"]
        print(f"| agent − {arm} | {mean:+.4f} ± {half:.4f} | {r['seeds_agent_better']}/{len(r['per_seed'])} | "
              f"{pooled[0]:+.4f} ± {pooled[1]:.4f} |")


SLICE_KEYS = ("env", "env_kwargs", "agent_config", "num_envs", "updates", "episodes", "stochastic", "extra_arms",
              "device")


def slice_folder(args: argparse.Namespace) -> Path:
    """Where finished seeds are kept: one folder per experiment (everything but the seed list), named by a hash."""
    # The whole agent config, defaults included: a run made before a default changed is not the same experiment.
    full = AgentConfig(**args.agent_config).to_dict()
    settings = json.dumps({k: getattr(args, k) for k in SLICE_KEYS} | {"agent_config": full}, sort_keys=True)
    return args.out / "agent_vs_random_slices" / hashlib.sha1(settings.encode()).hexdigest()[:12]


def _finish(folder: Path, seed: int, result: dict[str, Any]) -> dict[str, Any]:
    write_json(folder / f"seed{seed}.json", result, indent=None)
    print(f"seed {seed}: trained in {result['train_seconds']:.0f} s; kept in {folder}", flush=True)
    return result


def train_seeds(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every seed's training and evaluation, ``--jobs`` seeds at a time (separate processes), in seed order.

    Each finished seed is written to :func:`slice_folder` at once, and a later run of the same experiment reuses
    it: a campaign longer than one sitting is run in parts, and a killed run loses only its unfinished seeds.
    """
    folder = slice_folder(args)
    done = {seed: json.loads((folder / f"seed{seed}.json").read_text())
            for seed in args.seeds if (folder / f"seed{seed}.json").exists()}
    todo = [seed for seed in args.seeds if seed not in done]
    if done:
        print(f"seeds {sorted(done)} reused from {folder}", flush=True)
    if args.jobs <= 1:
        done |= {seed: _finish(folder, seed, run_seed(args, seed)) for seed in todo}
        return [done[seed] for seed in args.seeds]
    # spawn, not fork: a forked child inherits the parent's OpenMP thread pool state and can hang in it.
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=torch.set_num_threads, initargs=(args.threads or 1,)) as pool:
        futures = {pool.submit(run_seed, args, seed): seed for seed in todo}
        for future in as_completed(futures):
            done[futures[future]] = _finish(folder, futures[future], future.result())
    return [done[seed] for seed in args.seeds]


BASE_CONFIG = AgentConfig().to_dict()


def _margin_cell(margin: dict[str, Any], scale: float) -> str:
    mean, half = margin["by_seed"]
    return f"{scale * mean:+.2f} ± {scale * half:.2f} ({margin['seeds_agent_better']}/{len(margin['per_seed'])})"


def write_summary(folder: Path) -> Path:
    """``summary.md`` in ``folder``: one row per report there, the agent's paired margins over random-valid and
    static on episode return and on final validation accuracy (mean ± 95% CI over seeds, seeds agent better)."""
    lines = ["# agent_vs_random reports (paired margins of the agent, mean ± 95% CI over seeds, seeds agent better)",
             "", "Returns are the env's reward as configured, so a report whose env kwargs add shaping (pbrs_weight) "
             "or op costs is comparable with the others only on final validation accuracy.", "",
             "| report | env kwargs | agent config (not default) | seeds × updates × sub-envs | agent play | "
             "return − random (pp) | return − static (pp) | final acc − random (pp) | final acc − static (pp) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for path in sorted(folder.glob("*.json")):
        report = json.loads(path.read_text())
        margins = report["paired_margin_of_agent"]
        config = AgentConfig.from_dict(report["per_seed"][0]["config"]).to_dict()  # older reports: LEGACY_VALUES
        changed = {k: v for k, v in config.items() if BASE_CONFIG.get(k) != v and k != "rollout_steps"}
        changed["bootstrap_truncation"] = config["bootstrap_truncation"]  # the setting that decided the result
        extra = {k: v for k, v in report["env_kwargs"].items() if k != "device"}
        play = "argmax" if report["agent_deterministic"] else "sampled"
        lines.append(f"| {path.stem} | `{json.dumps(extra)}` | `{json.dumps(changed)}` | {len(report['seeds'])} × "
                     f"{report['updates']} × {report['num_envs']} | {play} | "
                     + " | ".join(_margin_cell(margins[arm][key], scale) for arm, key, scale in (
                         ("random", "episode_return", 100), ("static", "episode_return", 100),
                         ("random", "final_accuracy", 100), ("static", "final_accuracy", 100))) + " |")
    out = folder / "summary.md"
    out.write_text("\n".join(lines) + "\n")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.agent_vs_random",
                                description=__doc__.split("\n\n")[0])
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
    p.add_argument("--extra-arms", nargs="*", default=[],
                   help="more arms to evaluate: heuristic, grow_<bp>, grow_<bp>+<bp>+... (one per slot)")
    p.add_argument("--progress", action="store_true", help="print each update's training metrics")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument("--jobs", type=int, default=1, help="seeds trained at once, each in its own process (count)")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results", help="output folder")
    p.add_argument("--summarize", type=Path, default=None, help="only write summary.md of the reports in a folder")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    if summarized(args.summarize, write_summary):
        return {}
    if len(args.seeds) < 3:
        raise SystemExit(f"--seeds needs at least 3 seeds for a confidence interval; got {args.seeds}")
    args.device = resolve_device(args.device)
    env_device = resolve_device(str(args.env_kwargs.get("device", "auto")))  # Esper's default env device is auto
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    per_seed = train_seeds(args)
    summary, margins = summarize(per_seed), paired_margins(per_seed)
    report = {"benchmark": "agent_vs_random", "env": args.env, "env_kwargs": args.env_kwargs,
              "num_envs": args.num_envs, "updates": args.updates, "episodes": args.episodes, "seeds": args.seeds,
              "agent_deterministic": not args.stochastic, "device": args.device,
              "device_name": device_name(args.device), "env_device_name": device_name(env_device),
              **run_stamp(), "wall_seconds": time.perf_counter() - start,
              "summary": summary, "paired_margin_of_agent": margins, "per_seed": per_seed}
    name = f"agent_vs_random_{args.env.split(':')[-1]}_{env_device.split(':')[0]}_{time.strftime('%Y%m%d-%H%M%S')}"
    path = write_json(args.out / f"{name}.json", report, indent=2)
    print(f"{args.env}, {args.updates} updates x {args.num_envs} sub-envs, seeds {args.seeds}, "
          f"{args.episodes} episodes per arm and seed, on {report['device_name']}")
    print("| arm | return (mean ± 95% CI over seeds) | final accuracy | seed params |\n|---|---|---|---|")
    for arm, stats in summary.items():
        cells = [f"{m:+.4f} ± {h:.4f}" if math.isfinite(h) else f"{m:+.4f}" for m, h in stats.values()]
        print(f"| {arm} | " + " | ".join(cells) + " |")
    print_margins(margins)
    print(f"written to {path}")
    return report


if __name__ == "__main__":
    main()
