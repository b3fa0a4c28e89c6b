"""Does growing pay? Play fixed policies on candidate Esper configs, paired by env seed, without any training.

For each named config (``CONFIGS``, or ``--config NAME=JSON`` for your own) every arm plays the same episodes:
one vector env with ``--episodes`` sub-envs is reset once per arm with the same seed, so sub-env ``i`` trains a
host from the same initialisation and data order in every arm and each sub-env's first episode is one paired
sample. Arms:

- ``static``: always WAIT (the host alone);
- ``random``: uniform over the valid joint actions (``esper_agent.baselines.RandomValidActor``);
- ``heuristic``: ``esper_agent.heuristic.HeuristicActor`` with its defaults;
- ``grow_<blueprint>``: scripted growth: FOSSILIZE whenever the mask allows it, else GERMINATE ``<blueprint>``
  (linear blend, fastest tempo) into the first free slot, from the first epoch on, else WAIT;
- ``grow_<bp1>+<bp2>+...``: the same with one blueprint per slot, in slot order, ``none`` leaving a slot empty:
  ``grow_conv_light+conv_small`` plants at once the two seeds the heuristic ends up with on the two-block host,
  to ask whether its choice planted early beats it at the same parameters;
- ``grow_...@<k>``: the same plan, but GERMINATE only from the episode's ``k``-th step on (counted from 0), to
  ask how much of the heuristic's lead over its own seeds planted at once is the timing of its planting.

Reported per arm: mean episode return and final validation accuracy, and the paired difference to ``static``
and to the best growth arm (mean over episodes with a Student-t 95% CI). JSON goes under ``--out``, one file per
run, named with the device.

    python -m benchmarks.studies.growth_screen --configs d2w16 --episodes 8 --arms static random heuristic \\
        grow_conv_heavy grow_conv_light grow_conv_small grow_depthwise grow_bottleneck      # ~3 min, 1 CPU thread
    python -m benchmarks.studies.growth_screen --summarize benchmarks/results/growth_screen      # rebuild summary.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from benchmarks.common import device_name, device_tag, run_stamp, summarized, write_json
from esper_agent.baselines import Actor, RandomValidActor, StaticActor
from esper_agent.distributions import ActionMasks
from esper_agent.envs import VectorEnvDriver
from esper_agent.evaluate import run_episodes
from esper_agent.heuristic import HeuristicActor, allowed_blend, env_host, planting_masks
from esper_agent.report import mean_ci95
from esper_agent.train import make_envs
from esper_env.config import EnvConfig
from esper_env.data import load_dataset
from esper_env.host import host_param_count
from esper_env.rewards import parameter_cost
from esper_env.spaces import BLUEPRINT_NAMES, Head, Op

ENV_ID = "Esper-Synthetic-v0"
OUT = Path(__file__).resolve().parents[1] / "results" / "growth_screen"

CONFIGS: dict[str, dict[str, Any]] = {
    # the last agent_vs_random measurement: batch 512 on 2048 images = 4 SGD steps per epoch, 40 per episode
    "default": {"max_epochs": 10},
    # 8x more SGD steps at the default peak lr 0.6 (too high for batch 64: the host trains badly)
    "b64": {"max_epochs": 10, "batch_size": 64},
    # the default 3-block host with a learning rate that suits batch 64
    "ref_lr02": {"max_epochs": 10, "batch_size": 64, "host_widths": [8, 16, 32], "host_lr": 0.2},
    # narrower 3-block hosts, where a seed is a large fraction of the model
    "narrow": {"max_epochs": 10, "batch_size": 64, "host_widths": [4, 8, 16], "host_lr": 0.2},
    "tiny": {"max_epochs": 10, "batch_size": 64, "host_widths": [2, 4, 8], "host_lr": 0.2},
    "tiny_fast": {"max_epochs": 10, "batch_size": 64, "host_widths": [2, 4, 8], "host_lr": 0.2,
                  "min_training_epochs": 1, "one_seed_incubating": False},
    # shallower hosts: a seed adds depth, the one thing a seed can add (it keeps the slot's width)
    "d1w16": {"max_epochs": 10, "batch_size": 64, "host_widths": [16], "host_lr": 0.2},
    "d2w8": {"max_epochs": 10, "batch_size": 64, "host_widths": [8, 16], "host_lr": 0.2},
    "d2w16": {"max_epochs": 10, "batch_size": 64, "host_widths": [16, 32], "host_lr": 0.2},
    # d2w16, a seed may not be pruned before it is 4 (resp. 8) epochs old: random-valid prunes less
    "d2w16_prune4": {"max_epochs": 10, "batch_size": 64, "host_widths": [16, 32], "host_lr": 0.2, "min_prune_age": 4},
    "d2w16_prune8": {"max_epochs": 10, "batch_size": 64, "host_widths": [16, 32], "host_lr": 0.2, "min_prune_age": 8},
    "d2w16_t1024": {"max_epochs": 10, "batch_size": 32, "host_widths": [16, 32], "host_lr": 0.2,
                    "synthetic_train_size": 1024},
}
"""Candidate Esper-Synthetic-v0 configs (env kwargs; ``device`` is added from ``--device``)."""

DEFAULT_ARMS = ("static", "random", "heuristic", "grow_conv_heavy", "grow_conv_light")


class ScriptedGrowthActor:
    """FOSSILIZE the first slot that may be fossilized; else GERMINATE the slot's planned blueprint into the first
    slot that may germinate, has one and whose ``blueprint_mask`` (a hard parameter budget) allows it (``blend``,
    linear by default, at the fastest tempo; linear instead where ``blend_mask`` forbids a gated blend's gate);
    else WAIT. Reads only the masks.

    ``blueprints`` is one blueprint name for every slot, or one name (or None: leave empty) per slot; nothing is
    germinated before the episode's ``start_step``-th step (counted from 0), FOSSILIZE is never held back."""

    def __init__(self, blueprints: str | Sequence[str | None], blend: int = 0, tempo: int = 0,
                 start_step: int = 0) -> None:
        if start_step < 0:
            raise ValueError(f"start_step must be >= 0, got {start_step}")
        names = [blueprints] if isinstance(blueprints, str) else list(blueprints)
        for name in names:
            if name is not None and name not in BLUEPRINT_NAMES:
                raise ValueError(f"unknown blueprint {name!r}; expected one of {BLUEPRINT_NAMES} or None")
        self.plan = [None if n is None else BLUEPRINT_NAMES.index(n) for n in names]
        self.per_slot = not isinstance(blueprints, str)
        self.blend, self.tempo, self.start_step = blend, tempo, start_step
        self.steps = np.zeros(0, np.int64)  # steps taken in each sub-env's current episode

    def reset(self, num_envs: int) -> None:
        self.steps = np.zeros(num_envs, np.int64)

    def _blueprint(self, slot: int) -> int | None:
        return self.plan[slot] if self.per_slot else self.plan[0]

    def _plantable(self, slot: int, blueprint: np.ndarray | None) -> bool:
        planned = self._blueprint(slot)
        return planned is not None and (blueprint is None or bool(blueprint[slot, planned]))

    def _one(self, op_slot: np.ndarray, may_germinate: bool, blueprint: np.ndarray | None = None,
             blend: np.ndarray | None = None) -> np.ndarray:
        action = np.zeros(len(Head), np.int64)
        fossilize = np.flatnonzero(op_slot[Op.FOSSILIZE])
        free = np.flatnonzero(op_slot[Op.GERMINATE]) if may_germinate else []
        germinate = [s for s in free if self._plantable(s, blueprint)]
        if fossilize.size:
            action[Head.OP], action[Head.SLOT] = Op.FOSSILIZE, fossilize[0]
        elif germinate:
            slot = germinate[0]
            action[Head.OP], action[Head.SLOT] = Op.GERMINATE, slot
            action[Head.BLUEPRINT] = self._blueprint(slot)
            allowed = None if blend is None else blend[slot, action[Head.BLUEPRINT]]
            action[Head.BLEND], action[Head.TEMPO] = allowed_blend(self.blend, allowed), self.tempo
        return action

    def act(self, obs: np.ndarray, masks: ActionMasks, episode_start: np.ndarray) -> np.ndarray:
        op_slot = np.asarray(masks.op_slot)
        if self.per_slot and op_slot.shape[-1] != len(self.plan):
            raise ValueError(f"a plan for {len(self.plan)} slots, but the env has {op_slot.shape[-1]}")
        if self.steps.shape != (obs.shape[0],):  # act() without reset() (a one-off call): count from here
            self.reset(obs.shape[0])
        self.steps = np.where(np.asarray(episode_start, bool), 0, self.steps)
        blueprint, blend = planting_masks(masks, obs.shape[0])
        actions = np.stack([self._one(op_slot[i], self.steps[i] >= self.start_step, blueprint[i], blend[i])
                            for i in range(obs.shape[0])])
        self.steps += 1
        return actions


def parse_growth_arm(arm: str) -> ScriptedGrowthActor | None:
    """The scripted actor of ``grow_<bp>`` or ``grow_<bp1>+<bp2>...`` (``none`` = leave the slot empty), with an
    optional ``@<k>``: germinate only from step ``k`` on."""
    if not arm.startswith("grow_"):
        return None
    plan, _, start = arm.removeprefix("grow_").partition("@")
    if start and not start.isdigit():
        return None
    names = plan.split("+")
    if any(n not in BLUEPRINT_NAMES and n != "none" for n in names) or all(n == "none" for n in names):
        return None  # unknown names, or a plan that grows nothing (that is static)
    blueprints = names[0] if len(names) == 1 else [None if n == "none" else n for n in names]
    return ScriptedGrowthActor(blueprints, start_step=int(start or 0))


def make_actor(arm: str, driver: VectorEnvDriver, seed: int) -> Actor:
    """The actor of an arm name (see the module docstring)."""
    if arm == "static":
        return StaticActor()
    if arm == "random":
        return RandomValidActor(driver.head_sizes, seed=seed)
    if arm == "heuristic":
        return HeuristicActor(driver.num_slots, host=env_host(driver.envs))
    actor = parse_growth_arm(arm)
    if actor is None:
        raise ValueError(f"unknown arm {arm!r}; expected static, random, heuristic, grow_<bp> or "
                         f"grow_<bp>+<bp>+... (one per slot, 'none' for empty), optionally ending in @<step>, "
                         f"<bp> one of {BLUEPRINT_NAMES}")
    if actor.per_slot and driver is not None and len(actor.plan) != driver.num_slots:
        raise ValueError(f"{arm}: {len(actor.plan)} blueprints, expected one per slot ({driver.num_slots}) or a "
                         "single grow_<bp>")
    return actor


def play_arms(kwargs: dict[str, Any], arms: list[str], episodes: int, seed: int, env_id: str = ENV_ID
              ) -> dict[str, list[dict]]:
    """Each arm's episodes, one per sub-env, all arms from the same reset seed (paired by sub-env index)."""
    envs = make_envs(env_id, episodes, kwargs)
    try:
        driver = VectorEnvDriver(envs)
        out = {}
        for arm in arms:
            records = run_episodes(driver, make_actor(arm, driver, seed), episodes, seed)
            out[arm] = [r._asdict() for r in records]
        return out
    finally:
        envs.close()


def paired(a: list[dict], b: list[dict], key: str) -> list[float]:
    """Mean and 95% CI half-width of ``a - b`` per paired episode (matched by sub-env index)."""
    by_env = {e["env"]: e[key] for e in b}
    return list(mean_ci95([e[key] - by_env[e["env"]] for e in a]))


def summarize(results: dict[str, list[dict]]) -> dict[str, dict[str, Any]]:
    """Per arm: means with CIs, paired differences to static, to the heuristic's test accuracy (the goal's
    yardstick) and to the best growth arm (by return)."""
    growth = [arm for arm in results if arm not in ("static", "random")]
    best = max(growth, key=lambda arm: np.mean([e["episode_return"] for e in results[arm]]), default=None)
    summary: dict[str, dict[str, Any]] = {}
    for arm, episodes in results.items():
        row: dict[str, Any] = {key: list(mean_ci95([e[key] for e in episodes]))
                               for key in ("episode_return", "final_accuracy", "seed_params")}
        row["rollbacks"] = int(sum(e["rollback"] for e in episodes))
        tested = all(e.get("test_accuracy") is not None for e in episodes)
        if tested:
            row["test_accuracy"] = list(mean_ci95([e["test_accuracy"] for e in episodes]))
        if "static" in results:
            row["return_minus_static"] = paired(episodes, results["static"], "episode_return")
            row["accuracy_minus_static"] = paired(episodes, results["static"], "final_accuracy")
            if tested:
                row["test_minus_static"] = paired(episodes, results["static"], "test_accuracy")
        if tested and "heuristic" in results:
            row["test_minus_heuristic"] = paired(episodes, results["heuristic"], "test_accuracy")
        if best is not None:
            row["best_growth_arm"] = best
            row["return_minus_best_growth"] = paired(episodes, results[best], "episode_return")
        summary[arm] = row
    return summary


def _cell(pair: list[float], scale: float = 1.0) -> str:
    mean, half = pair
    return f"{scale * mean:+.2f} ± {scale * half:.2f}" if math.isfinite(half) else f"{scale * mean:+.2f}"


def table(name: str, summary: dict[str, dict[str, Any]]) -> str:
    """Markdown: one row per arm; returns and accuracies in percentage points."""
    lines = [f"### {name}", "", "| arm | return (pp) | final val acc (%) | test acc (%) | seed params | "
             "return − static (paired) | val acc − static (paired) | test acc − static (paired) | "
             "test acc − heuristic (paired) | return − best growth (paired) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    missing = [math.nan] * 2
    for arm, row in summary.items():
        cells = [_cell(row["episode_return"], 100), _cell(row["final_accuracy"], 100),
                 _cell(row["test_accuracy"], 100) if "test_accuracy" in row else "—",
                 f"{row['seed_params'][0]:.0f}", _cell(row.get("return_minus_static", missing), 100),
                 _cell(row.get("accuracy_minus_static", missing), 100),
                 _cell(row["test_minus_static"], 100) if "test_minus_static" in row else "—",
                 _cell(row["test_minus_heuristic"], 100) if "test_minus_heuristic" in row else "—",
                 _cell(row.get("return_minus_best_growth", missing), 100)]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_config(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME`` (one of ``CONFIGS``) or ``NAME=JSON`` (env kwargs)."""
    name, _, body = text.partition("=")
    if body:
        return name, json.loads(body)
    if name not in CONFIGS:
        raise SystemExit(f"unknown config {name!r}; expected one of {sorted(CONFIGS)} or NAME=JSON")
    return name, CONFIGS[name]


def write_summary(folder: Path) -> Path:
    """``summary.md`` in ``folder``: the tables of every config in every ``growth_screen_*.json`` there, from the
    stored episodes, one table per (file, config): a screen split over several processes (one per GPU) writes one
    file each, and arms are paired only within a file."""
    configs: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("growth_screen_*.json")):
        report = json.loads(path.read_text())
        for name, entry in report["configs"].items():
            env_id = report.get("env", ENV_ID)
            configs[f"{path.name} {env_id} {name}"] = entry | {
                "file": path.name, "episodes_per_arm": report["episodes"], "env_id": env_id, "name": name,
                "device": report.get("device_name", report.get("device", "cpu"))}
    parts = ["# Growth screen (paired episodes; pp = percentage points, ± = 95% CI)\n"]
    for entry in configs.values():
        kwargs, count = json.dumps(entry["env_kwargs"]), entry["episodes_per_arm"]
        title = (f"{entry['env_id']} {entry['name']} {kwargs}: {count} paired episodes on {entry['device']} "
                 f"({entry['file']})")
        parts.append(table(title, summarize(entry["episodes"])))
    out = folder / "summary.md"
    out.write_text("\n".join(parts))
    return out


def reprice(path: Path, config: str, param_penalty: float, param_budget: int | None = None
            ) -> tuple[str, dict[str, list[dict]]]:
    """One config of a screen report replayed at another ``param_penalty`` (and ``param_budget``, whose
    ``over_budget_penalty`` is the report's): a title and the episodes per arm.

    The screened policies never read the parameter price, and in reward mode ``accuracy`` without shaping the
    price enters an episode's return only as ``- parameter_cost(P_T)`` (``esper_env.rewards``), so each recorded
    return is shifted by the old cost minus the new one; nothing is played again.
    """
    report = json.loads(path.read_text())
    entry = report["configs"][config]
    cfg = EnvConfig.from_kwargs(**{**gym.spec(report.get("env", ENV_ID)).kwargs, **entry["env_kwargs"]})
    if cfg.reward_mode != "accuracy" or cfg.pbrs_weight or cfg.op_cost or cfg.invalid_action_penalty:
        raise SystemExit(f"{path.name} {config}: only an unshaped 'accuracy' reward can be repriced")
    new = dataclasses.replace(cfg, param_penalty=param_penalty, param_budget=param_budget)
    host = host_param_count(cfg, load_dataset(cfg, torch.device("cpu")).spec)

    def shift(params: float) -> float:
        return parameter_cost(params, host, cfg) - parameter_cost(params, host, new)

    results = {arm: [e | {"episode_return": e["episode_return"] + shift(e["seed_params"])} for e in episodes]
               for arm, episodes in entry["episodes"].items()}
    budget = "" if param_budget is None else f" with param_budget {param_budget}"
    title = f"{report.get('env', ENV_ID)} {config} {json.dumps(entry['env_kwargs'])} repriced from param_penalty " \
            f"{cfg.param_penalty} to {param_penalty}{budget} ({path.name})"
    return title, results


def _summarized(titled: tuple[str, dict[str, list[dict]]]) -> tuple[str, dict[str, dict[str, Any]]]:
    title, results = titled
    return title, summarize(results)


def _file_tag(args: argparse.Namespace) -> str:
    """``cpu`` or the GPU's name (``nvidia-h200``), plus the env when it is not the Synthetic default."""
    device = device_tag(device_name(args.device))
    env = args.env.split(":")[-1]
    return device if env == ENV_ID else f"{env}_{device}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.growth_screen",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default=ENV_ID, help="vector env id the configs apply to")
    p.add_argument("--configs", nargs="+", default=["default"], help="names in CONFIGS or NAME=JSON env kwargs")
    p.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS),
                   help="static, random, heuristic, grow_<bp>, grow_<bp>+<bp>+... (module docstring)")
    p.add_argument("--episodes", type=int, default=8, help="paired episodes = sub-envs (count, >= 2)")
    p.add_argument("--seed", type=int, default=0, help="env reset seed (sub-env i gets seed + i)")
    p.add_argument("--device", default="cpu", help="env device")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--out", type=Path, default=OUT, help="output folder")
    p.add_argument("--summarize", type=Path, default=None, help="only rebuild summary.md of this results folder")
    p.add_argument("--reprice", nargs=3, metavar=("REPORT", "CONFIG", "PENALTY"), default=None,
                   help="only print a report's config at another param_penalty (recorded episodes, no play)")
    p.add_argument("--budget", type=int, default=None, help="with --reprice: also a param_budget")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    if summarized(args.summarize, write_summary):
        return {}
    if args.reprice is not None:
        path, config, penalty = args.reprice
        print(table(*_summarized(reprice(Path(path), config, float(penalty), args.budget))))
        return {}
    torch.set_num_threads(args.threads)
    report: dict[str, Any] = {"benchmark": "growth_screen", "env": args.env, "episodes": args.episodes,
                              "seed": args.seed, "device": args.device, "device_name": device_name(args.device),
                              **run_stamp(), "configs": {}}
    for text in args.configs:
        name, kwargs = parse_config(text)
        start = time.perf_counter()
        results = play_arms(kwargs | {"device": args.device}, args.arms, args.episodes, args.seed, args.env)
        summary = summarize(results)
        report["configs"][name] = {"env_kwargs": kwargs, "seconds": time.perf_counter() - start,
                                   "summary": summary, "episodes": results}
        print(table(f"{name} {json.dumps(kwargs)} ({time.perf_counter() - start:.0f} s)", summary), flush=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = write_json(args.out / f"growth_screen_{_file_tag(args)}_{stamp}.json", report, indent=2)
    print(f"written to {path}")
    return report


if __name__ == "__main__":
    main()
