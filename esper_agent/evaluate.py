"""Play a policy for N episodes and report a results table, one timeline per episode and a markdown report.

``python -m esper_agent.evaluate --checkpoint runs/x/checkpoint.pt --episodes 10`` rebuilds the env the run trained
on (id, kwargs and number of sub-envs are stored in the checkpoint; flags override them), plays N deterministic
(argmax) episodes with the policy the run hands out (with ``select_best_window``, the one it kept; ``--last-policy``
for the last one), prints a markdown table of per-episode return, final validation accuracy and seed parameters, and
writes it (and a JSON copy, with the env's settings and, on an Esper env, each episode's seed fates) beside the
checkpoint. On an Esper env it also writes, into ``<checkpoint>.eval/``, ``episode-<k>.png`` per episode,
``contact-sheet.png``, ``episodes.json`` (the timelines, to redraw) and ``report.md`` (:mod:`esper_agent.report`:
seeds by blueprint and slot, parameters added, op histogram).

``--policy static|random|heuristic --env ID --num-envs N`` reports a baseline the same way, without a checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from esper_agent.baselines import Actor, RandomValidActor, StaticActor
from esper_agent.checkpoint import load_checkpoint
from esper_agent.collect import EpisodeRecord, EpisodeTracker, masks_to_device
from esper_agent.config import AgentConfig
from esper_agent.contracts import episode_length
from esper_agent.distributions import ActionMasks
from esper_agent.envs import EnvStep, VectorEnvDriver
from esper_agent.heuristic import HeuristicActor, env_host
from esper_agent.normalize import ObservationNormalizer
from esper_agent.policy import RecurrentPolicy
from esper_agent.report import build_report, count_seeds, mean_ci95
from esper_agent.selection import kept_policy
from esper_env.info import split_vector_info
from esper_env.render import EpisodeRecord as Timeline
from esper_env.render import write_contact_sheet, write_episode_png

POLICIES = ("checkpoint", "static", "random", "heuristic")
StepCallback = Callable[[EnvStep, Mapping[str, Any]], None]
"""Called by :func:`run_episodes` after every step with the driver's step and the env's raw vector ``info``."""


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


def run_episodes(driver: VectorEnvDriver, actor: Actor, episodes: int, seed: int,
                 on_step: StepCallback | None = None) -> list[EpisodeRecord]:
    """Play until every sub-env has finished its share of ``episodes`` (shares differ by at most one), so
    short episodes are not over-represented; records come back in (env, order of completion) order, i.e. the
    first episodes each sub-env finished (what :meth:`TimelineRecorder.timelines_of` relies on)."""
    n = driver.num_envs
    quota = np.array([episodes // n + (i < episodes % n) for i in range(n)])
    done_count = np.zeros(n, np.int64)
    obs, masks = driver.reset(seed)
    actor.reset(n)
    starts, tracker, records = np.ones(n, bool), EpisodeTracker(n), []
    while (done_count < quota).any():
        actions = actor.act(obs, masks, starts)
        step = driver.step(actions)
        if on_step is not None:
            on_step(step, driver.last_info)
        for record in tracker.record(step, actions):
            if done_count[record.env] < quota[record.env]:
                records.append(record)
                done_count[record.env] += 1
        obs, masks, starts = step.obs, step.masks, step.episode_start
    return sorted(records, key=lambda r: r.env)


TIMELINE_KEYS = ("epoch", "executed_op", "stage", "alpha", "blueprint")
"""Step-info keys a timeline (:class:`esper_env.render.EpisodeRecord`) cannot do without."""


class TimelineRecorder:
    """A :data:`StepCallback` that keeps a timeline (:class:`esper_env.render.EpisodeRecord`) of every episode
    of every sub-env. An env whose info lacks :data:`TIMELINE_KEYS` (not Esper) gets none: :attr:`missing`
    then names the keys it lacked."""

    def __init__(self, driver: VectorEnvDriver, max_epochs: int | None = None) -> None:
        self.num_slots, self.max_epochs, self.host = driver.num_slots, max_epochs, env_host(driver.envs)
        self.same_step = driver.mode == AutoresetMode.SAME_STEP
        self.current = [Timeline.start(self.num_slots, max_epochs, self.host) for _ in range(driver.num_envs)]
        self.finished: list[list[Timeline]] = [[] for _ in range(driver.num_envs)]
        self.missing: list[str] = []

    def __call__(self, step: EnvStep, info: Mapping[str, Any]) -> None:
        if self.missing:
            return
        done = step.terminated | step.truncated
        for i in np.flatnonzero(step.active):  # an inactive sub-env was reset by this step: no transition
            # SAME_STEP: ``info`` already describes the next episode; the step that ended this one is final_info.
            source = info.get("final_info", {}) if self.same_step and done[i] else info
            self.missing = [key for key in TIMELINE_KEYS if key not in source]
            if self.missing:
                return
            self.current[i].add(split_vector_info(source, i))
            if done[i]:
                self.finished[i].append(self.current[i])
                self.current[i] = Timeline.start(self.num_slots, self.max_epochs, self.host)

    def timelines_of(self, records: Sequence[EpisodeRecord]) -> list[Timeline]:
        """The timeline of each of ``records``, which :func:`run_episodes` returns as the first episodes each
        sub-env finished, in order of completion."""
        taken = [0] * len(self.finished)
        timelines = []
        for record in records:
            finished = self.finished[record.env]
            if taken[record.env] >= len(finished):
                raise ValueError(f"sub-env {record.env} has {len(finished)} recorded episodes; expected at least "
                                 f"{taken[record.env] + 1} (was the recorder passed to run_episodes?)")
            timelines.append(finished[taken[record.env]])
            taken[record.env] += 1
        return timelines


def policy_from_checkpoint(payload: dict[str, Any], device: str | torch.device, last: bool = False
                           ) -> tuple[RecurrentPolicy, ObservationNormalizer]:
    """The policy a checkpoint hands out: the one ``select_best_window`` kept (:mod:`esper_agent.selection`) if
    it kept one, else (or with ``last``) the last one trained."""
    config, shape = AgentConfig.from_dict(payload["config"]), payload["shape"]
    policy = RecurrentPolicy.from_config(shape["obs_dim"], shape["num_slots"], config)
    policy.load_state_dict(payload["policy"])
    obs_norm = ObservationNormalizer(shape["obs_dim"], config.obs_clip, config.normalize_obs)
    obs_norm.load_state_dict(payload["normalizers"]["obs"])
    selection = payload.get("selection")
    if not last and selection is not None and selection["best"] is not None:
        return kept_policy(selection["best"], policy, obs_norm, device)
    return policy.to(device).eval(), obs_norm


def which_policy(payload: dict[str, Any], last: bool) -> str:
    """Which of a checkpoint's policies :func:`policy_from_checkpoint` hands out, in words."""
    selection = payload.get("selection")
    if last or selection is None or selection["best"] is None:
        return f"the last policy, after update {payload['counters']['update']}"
    return (f"the policy that collected update {selection['update']}'s rollout, kept by select_best_window="
            f"{selection['window']} (window mean return {selection['score']:.4g})")


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


def episode_rows(records: Sequence[EpisodeRecord], timelines: Sequence[Timeline] | None) -> list[dict[str, Any]]:
    """The results file's rows: each record, with its seeds' fates (:func:`esper_agent.report.count_seeds`) where
    the env gave timelines."""
    rows = [_finite_or_none(r._asdict()) for r in records]
    if timelines is not None:
        for row, timeline in zip(rows, timelines, strict=True):
            row["seeds"] = asdict(count_seeds([timeline]).total)
    return rows


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m esper_agent.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", choices=POLICIES, default="checkpoint", help="what plays: a trained checkpoint "
                   "or a baseline (static: always WAIT; random: uniform over valid joint actions; heuristic: "
                   "esper_agent.heuristic)")
    p.add_argument("--checkpoint", default=None, help="checkpoint file written by esper_agent.train (required "
                   "for --policy checkpoint, refused otherwise)")
    p.add_argument("--episodes", type=int, default=10, help="episodes to play (count)")
    p.add_argument("--env", default=None, help="env id (default: the one the checkpoint trained on; required "
                   "for a baseline)")
    p.add_argument("--env-kwargs", type=json.loads, default=None, help="JSON kwargs for gym.make_vec "
                   "(default: the checkpoint's, else none)")
    p.add_argument("--num-envs", type=int, default=None, help="sub-envs (default: the checkpoint's, else 1)")
    p.add_argument("--seed", type=int, default=1_000_003, help="env reset seed (distinct from training seeds); "
                   "also seeds the policy's sampling")
    p.add_argument("--device", default="cpu", help="torch device of the policy")
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the argmax "
                   "(checkpoint policy)")
    p.add_argument("--last-policy", action="store_true", help="play the last policy trained, not the one the "
                   "run's select_best_window kept (checkpoint policy; no effect when it kept none)")
    p.add_argument("--output", default=None, help="results file (.md; a .json is written beside it); default: "
                   "<checkpoint>.eval.md, or <env>.<policy>.eval.md for a baseline")
    p.add_argument("--report-dir", default=None, help="folder for episode-<k>.png, contact-sheet.png, "
                   "episodes.json and report.md; default: <checkpoint>.eval/, or <env>.<policy>.eval/")
    return p


def _env_settings(args: argparse.Namespace, payload: dict[str, Any] | None) -> tuple[str, int, dict[str, Any]]:
    """(env id, sub-envs, env kwargs): the flags, else what the checkpoint trained on."""
    run = payload.get("run", {}) if payload is not None else {}
    env_id = args.env or run.get("env_id")
    if env_id is None:
        where = f"{args.checkpoint} does not name its env" if payload is not None else f"--policy {args.policy}"
        raise SystemExit(f"{where}; pass --env")
    num_envs = args.num_envs or run.get("num_envs", 1)
    return env_id, num_envs, run.get("env_kwargs", {}) if args.env_kwargs is None else args.env_kwargs


def make_actor(args: argparse.Namespace, payload: dict[str, Any] | None, driver: VectorEnvDriver) -> Actor:
    """The policy ``--policy`` names, for ``driver``'s action space."""
    if args.policy == "static":
        return StaticActor()
    if args.policy == "random":
        return RandomValidActor(driver.head_sizes, seed=args.seed)
    if args.policy == "heuristic":
        return HeuristicActor(driver.num_slots, host=env_host(driver.envs))
    if payload is None:
        raise ValueError(f"--policy {args.policy} needs a checkpoint payload; got None")
    policy, obs_norm = policy_from_checkpoint(payload, args.device, last=args.last_policy)
    return PolicyActor(policy, obs_norm, deterministic=not args.stochastic, seed=args.seed)


def _output_base(args: argparse.Namespace, env_id: str) -> str:
    """Prefix of the default output paths: the checkpoint, or ``<env>.<policy>`` in the working directory."""
    if args.policy == "checkpoint":
        return str(args.checkpoint)
    return f"{re.sub(r'[^A-Za-z0-9._-]+', '_', env_id)}.{args.policy}"  # "module:Id" ids hold a colon


def write_report_dir(folder: Path, title: str, episodes: Sequence[EpisodeRecord], timelines: Sequence[Timeline],
                     settings: Sequence[str] = ()) -> Path:
    """``episode-<k>.png`` per episode, ``contact-sheet.png``, ``episodes.json`` and ``report.md`` in ``folder``;
    returns the report's path."""
    folder.mkdir(parents=True, exist_ok=True)
    # A previous, longer evaluation into the same folder would leave timelines the new report does not list.
    for old in folder.glob("episode-*.png"):
        if re.fullmatch(r"episode-(\d+)\.png", old.name) and int(old.stem.split("-")[1]) >= len(timelines):
            old.unlink()
    images = [f"episode-{k}.png" for k in range(len(timelines))]
    for k, (episode, timeline) in enumerate(zip(episodes, timelines, strict=True)):
        write_episode_png(timeline, folder / images[k], title=f"episode {k} (env {episode.env})")
    write_contact_sheet(timelines, folder / "contact-sheet.png", title=title)
    (folder / "episodes.json").write_text(json.dumps({"episodes": [json.loads(t.to_json()) for t in timelines]}))
    report = folder / "report.md"
    report.write_text(build_report(title, episodes, timelines, settings, images, "contact-sheet.png"))
    return report


def _check_args(args: argparse.Namespace) -> None:
    if args.episodes < 1:
        raise SystemExit(f"--episodes must be >= 1, got {args.episodes}")
    if args.num_envs is not None and args.num_envs < 1:
        raise SystemExit(f"--num-envs must be >= 1, got {args.num_envs}")
    if args.policy == "checkpoint" and args.checkpoint is None:
        raise SystemExit(f"--policy checkpoint needs --checkpoint PATH (or a baseline: {', '.join(POLICIES[1:])})")
    if args.policy != "checkpoint" and args.checkpoint is not None:
        raise SystemExit(f"--checkpoint {args.checkpoint} is read only by --policy checkpoint; got --policy "
                         f"{args.policy}")


def main(argv: Sequence[str] | None = None) -> int:
    from esper_agent.train import make_envs  # train imports this module's helpers; avoid a cycle at import

    args = build_parser().parse_args(argv)
    _check_args(args)
    payload = load_checkpoint(args.checkpoint) if args.policy == "checkpoint" else None
    env_id, num_envs, env_kwargs = _env_settings(args, payload)
    envs = make_envs(env_id, num_envs, env_kwargs)
    try:
        driver = VectorEnvDriver(envs)
        recorder = TimelineRecorder(driver, episode_length(envs))
        records = run_episodes(driver, make_actor(args, payload, driver), args.episodes, args.seed, recorder)
    finally:
        envs.close()
    label = str(args.checkpoint) if payload is not None else f"the {args.policy} policy"
    table, base = results_table(records), _output_base(args, env_id)
    output = Path(args.output) if args.output else Path(f"{base}.eval.md")
    output.write_text(f"# Evaluation of {label} on {env_id}\n\n{table}")
    timelines = None if recorder.missing else recorder.timelines_of(records)
    output.with_suffix(".json").write_text(json.dumps(
        {"policy": args.policy, "checkpoint": None if payload is None else str(args.checkpoint), "env_id": env_id,
         "env_kwargs": env_kwargs, "num_envs": num_envs, "seed": args.seed,
         "deterministic": not args.stochastic if payload else args.policy != "random",
         "episodes": episode_rows(records, timelines)}, indent=2))
    sys.stdout.write(table)
    print(f"written to {output}")
    if recorder.missing:
        print(f"no timelines or report: the info of {env_id} lacks {recorder.missing}")
        return 0
    actions = "" if payload is None else f", {'sampled' if args.stochastic else 'argmax'} actions"
    played = "" if payload is None else f" ({args.checkpoint}, {which_policy(payload, args.last_policy)})"
    settings = [f"policy: {args.policy}{played}",
                f"env: {env_id}, {num_envs} sub-envs, kwargs {json.dumps(env_kwargs, sort_keys=True)}",
                f"episodes: {len(records)}, reset seed {args.seed}{actions}"]
    report = write_report_dir(Path(args.report_dir or f"{base}.eval"), f"{label} on {env_id}", records, timelines,
                              settings)
    print(f"timelines and report written to {report.parent}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
