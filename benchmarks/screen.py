"""The acceptance screen's runner: play fixed policies in the env, paired by reset seed, one JSON line per episode.

GROWTH.md's last section asks, before any agent is compared, whether the task rewards growth at all: fixed
policies only, every arm on the same reset seeds, under every hidden condition and under the mixture as drawn.
The arms are data (``benchmarks.screen_arms``: an :class:`~benchmarks.screen_arms.Arm` per policy, named sets
in ``ARM_SETS``); :class:`PlanActor` executes a growth plan's steps as soon as the masks allow.

Pairing: sub-env ``i`` of a vector env reset with a list of seeds draws its host's initialisation, data order and
condition from ``seeds[i]`` alone (``esper_env.vector_env``), so a seed's episode does not depend on the arm or
on which seeds share its vector env; the random arm keeps one generator per sub-env, seeded with the reset seed.

    python -m benchmarks.screen --env Esper-CIFAR10-v0 --set NAME --conditions full pool15k pool5k \\
        --seeds 0 1 2 3 4 --out slice.jsonl [--no-mixture] [--shard 0/4] [--env-kwargs JSON]
    python -m benchmarks.screen --report benchmarks/results/screen/Esper-CIFAR10-v0   # benchmarks.screen_report

Every arm plays under each ``--conditions`` name (the env kwarg ``condition=<name>``) and under the mixture
(``condition="mixture"``; given no conditions, the screen passes no condition kwarg and labels the run
``mixture``); ``--no-mixture`` leaves the mixture out. A line records the condition the env reports in
``info["condition"]`` and the validation accuracy after every step (``val_curve``, the report's noise estimate).

Work comes in groups, one per (arm, condition): all the seeds of a group play as the sub-envs of one vector env,
so the GPU runs wide batches. ``--shard i/n`` deals the groups to ``n`` processes by estimated cost
(``benchmarks.screen_shards``), the same way for the same arms, conditions and seeds, so several processes
share the GPUs evenly. A job already in ``--out`` (same env, arm, condition and seed) is skipped, so a run cut
short continues where it stopped when given the same arguments (a shard also skips what its siblings' slices
hold, so the number of processes may change between runs); ``--stop-at`` (a Unix time) starts only the
groups expected to end by then, for machines lent in calls of limited length. ``--processes n`` starts the
``n`` shards itself, at most ``--per-gpu`` on each visible GPU, shard ``i`` writing ``<out stem>-i.jsonl``:

    python -m benchmarks.screen --env Esper-CIFAR10-v0 --set family --conditions full ... --processes 16 \
        --out benchmarks/results/screen/Esper-CIFAR10-v0/all.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import screen_report, screen_shards
from benchmarks.common import device_name, run_stamp
from benchmarks.screen_arms import ARM_SETS, SEEDLING_ARM, Arm, PlanStep, arm_set, blueprint_index, plan_step
from benchmarks.screen_shards import arm_costs, played_conditions, shard_jobs
from esper_agent.baselines import Actor, RandomValidActor, StaticActor
from esper_agent.distributions import ActionMasks
from esper_agent.envs import VectorEnvDriver
from esper_agent.heuristic import HeuristicActor, allowed_blend, env_host, planting_masks
from esper_env.blueprints import BLUEPRINTS, catalogue
from esper_env.lifecycle import BLEND_CURVES, TEMPOS
from esper_env.spaces import Head, Op


class PlanActor:
    """Executes a plan: each step, the first step of the plan (in list order) that is due (its epoch reached, every
    earlier step for its slot done) and that the masks allow now; else WAIT. A step counts as done once issued.
    GERMINATE uses ``blend`` (index into ``BLEND_CURVES``; the first allowed one when ``blend_mask`` forbids it)
    and ``tempo`` (index into ``TEMPOS``). Reads only the masks and the episode starts, so it never acts
    invalidly."""

    def __init__(self, plan: Sequence[PlanStep], blend: int = 0, tempo: int = 0) -> None:
        if not 0 <= blend < len(BLEND_CURVES) or not 0 <= tempo < len(TEMPOS):
            raise ValueError(f"blend={blend}, tempo={tempo}; expected indices below {len(BLEND_CURVES)} and "
                             f"{len(TEMPOS)}")
        self.plan = tuple(plan_step(*step) for step in plan)
        self.blend, self.tempo = blend, tempo
        self.reset(0)

    def reset(self, num_envs: int) -> None:
        self.done = np.zeros((num_envs, len(self.plan)), bool)
        self.steps = np.zeros(num_envs, np.int64)  # steps taken in each sub-env's current episode

    def act(self, obs: np.ndarray, masks: ActionMasks, episode_start: np.ndarray) -> np.ndarray:
        op_slot = np.asarray(masks.op_slot)
        if (wanted := max((step.slot for step in self.plan), default=-1)) >= op_slot.shape[-1]:
            raise ValueError(f"the plan uses slot {wanted}; the env has {op_slot.shape[-1]} slots")
        if self.steps.shape != (obs.shape[0],):
            self.reset(obs.shape[0])
        starts = np.asarray(episode_start, bool)
        self.steps[starts], self.done[starts] = 0, False
        blueprint, blend = planting_masks(masks, obs.shape[0])
        actions = np.stack([self._one(i, op_slot[i], blueprint[i], blend[i]) for i in range(obs.shape[0])])
        self.steps += 1
        return actions

    def _one(self, i: int, op_slot: np.ndarray, blueprint: np.ndarray | None,
             blend: np.ndarray | None) -> np.ndarray:
        action = np.zeros(len(Head), np.int64)
        waiting: set[int] = set()  # slots with an earlier step not done yet
        for k, step in enumerate(self.plan):
            if self.done[i, k]:
                continue
            due = step.slot not in waiting and step.epoch <= self.steps[i]
            waiting.add(step.slot)
            if not due or not op_slot[step.op, step.slot]:
                continue
            if step.op == Op.GERMINATE:
                index = blueprint_index(step.blueprint)
                if blueprint is not None and not blueprint[step.slot, index]:
                    continue
                allowed = None if blend is None else blend[step.slot, index]
                action[Head.BLUEPRINT], action[Head.TEMPO] = index, self.tempo
                action[Head.BLEND] = allowed_blend(self.blend, allowed)
            action[Head.OP], action[Head.SLOT] = step.op, step.slot
            self.done[i, k] = True
            return action
        return action


class PerEnvActor:
    """One actor per sub-env, each made by ``make(seed)`` with that sub-env's reset seed, so an actor that draws
    random numbers plays a seed's episode the same whichever seeds share the vector env."""

    def __init__(self, make: Callable[[int], Actor], seeds: Sequence[int]) -> None:
        self.actors = [make(seed) for seed in seeds]

    def reset(self, num_envs: int) -> None:
        if num_envs != len(self.actors):
            raise ValueError(f"{len(self.actors)} per-env actors for {num_envs} sub-envs; expected one each")
        for actor in self.actors:
            actor.reset(1)

    def act(self, obs: np.ndarray, masks: ActionMasks, episode_start: np.ndarray) -> np.ndarray:
        def row(mask: np.ndarray | None, i: int) -> np.ndarray | None:
            return None if mask is None else np.asarray(mask)[i : i + 1]

        return np.concatenate([actor.act(obs[i : i + 1], ActionMasks(*(row(m, i) for m in masks)),
                                         np.asarray(episode_start)[i : i + 1])
                               for i, actor in enumerate(self.actors)])


def make_actor(arm: Arm, driver: VectorEnvDriver, seeds: Sequence[int]) -> Actor:
    """The policy of ``arm`` for ``driver``'s sub-envs, which were reset with ``seeds``."""
    if arm.kind == "static":
        return StaticActor()
    if arm.kind == "random":
        return PerEnvActor(lambda seed: RandomValidActor(driver.head_sizes, seed=seed), seeds)
    if arm.kind == "heuristic":
        return HeuristicActor(driver.num_slots, host=env_host(driver.envs))
    return PlanActor(arm.plan)


def _at(info: Mapping[str, Any], key: str, i: int) -> Any:
    """Sub-env ``i``'s value of a vector-info key, or None where the env does not set it."""
    if key not in info or not np.asarray(info.get(f"_{key}", np.ones(i + 1, bool)))[i]:
        return None
    value = np.asarray(info[key])[i]
    return value.item() if isinstance(value, np.generic) else value


def _measured(info: Mapping[str, Any], key: str, i: int) -> float | None:
    """Sub-env ``i``'s measurement ``key`` as a float, or None where the step measured none (NaN or unset)."""
    value = _at(info, key, i)
    return float(value) if value is not None and np.isfinite(value) else None


@dataclass
class EpisodeLog:
    """What one sub-env's first episode did: its return, the ops it executed (WAITs left out) and the validation
    and training accuracy after each step (the training accuracy is what the policy observes: on the labels it
    trains on, noisy ones included, so its gap to the validation accuracy shows memorisation)."""

    reward: float = 0.0
    length: int = 0
    invalid: int = 0
    ops: list[list[Any]] = field(default_factory=list)  # [step, op name, slot, blueprint name or None]
    val_curve: list[float | None] = field(default_factory=list)  # fraction; None where the step measured none
    train_curve: list[float | None] = field(default_factory=list)  # the same for the training accuracy
    names: tuple[str, ...] = tuple(b.name for b in BLUEPRINTS)  # the host's catalogue, in head order

    def add(self, reward: float, info: Mapping[str, Any], i: int, action: np.ndarray) -> None:
        op = _at(info, "executed_op", i)
        if op is not None and op != Op.WAIT:
            planted = self.names[int(action[Head.BLUEPRINT])] if op == Op.GERMINATE else None
            self.ops.append([self.length, Op(op).name.lower(), _at(info, "executed_slot", i), planted])
        self.invalid += bool(_at(info, "invalid_action", i))
        self.val_curve.append(_measured(info, "val_accuracy", i))
        self.train_curve.append(_measured(info, "train_accuracy", i))
        self.reward += reward
        self.length += 1

    def finish(self, info: Mapping[str, Any], i: int) -> dict[str, Any]:
        """The episode's record, read from the info of its last step."""
        condition = _at(info, "condition", i)
        return {"condition_reported": None if condition is None else str(condition),
                "return": self.reward, "return_points": 100 * self.reward, "episode_length": self.length,
                **{key: _at(info, key, i) for key in ("val_accuracy", "test_accuracy", "params", "train_flops",
                                                      "seed_params", "rollback")},
                "invalid_actions": self.invalid, "ops": self.ops, "val_curve": self.val_curve,
                "train_curve": self.train_curve}


def play(driver: VectorEnvDriver, actor: Actor, seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Sub-env ``i`` plays one episode from reset seed ``seeds[i]``; their records, in the order of ``seeds``.

    The env's default autoreset (NEXT_STEP): the info of the step that ends an episode is that episode's."""
    obs, masks = driver.reset(list(seeds))
    actor.reset(driver.num_envs)
    names = tuple(b.name for b in catalogue(env_host(driver.envs)))
    logs = [EpisodeLog(names=names) for _ in seeds]
    records: list[dict[str, Any] | None] = [None] * len(seeds)
    starts = np.ones(driver.num_envs, bool)
    while any(r is None for r in records):
        actions = actor.act(obs, masks, starts)
        step = driver.step(actions)
        for i in np.flatnonzero(step.active):
            if records[i] is not None:  # a sub-env that finished early (a rollback) plays on unrecorded
                continue
            logs[i].add(float(step.reward[i]), driver.last_info, int(i), actions[i])
            if step.terminated[i] or step.truncated[i]:
                records[i] = logs[i].finish(driver.last_info, int(i))
        obs, masks, starts = step.obs, step.masks, step.episode_start
    return records  # type: ignore[return-value]  # every entry was filled above


def job_kwargs(base: Mapping[str, Any], arm: Arm, condition: str | None) -> dict[str, Any]:
    """The env kwargs of one job: test accuracy reported, then ``base``, the arm's overrides, and ``condition``
    (``"mixture"`` included) unless it is None: a screen given no conditions passes no condition kwarg."""
    kwargs = {"report_test_accuracy": True, **base, **arm.env_kwargs}
    if kwargs.get("autoreset_mode", "NextStep") != "NextStep":
        raise ValueError(f"autoreset_mode={kwargs['autoreset_mode']!r}; the screen reads the final step's info "
                         "under the default 'NextStep'")
    return kwargs if condition is None else {**kwargs, "condition": condition}


def run_slices(out: Path) -> list[Path]:
    """The slices of the run ``out`` belongs to that exist: ``<stem>.jsonl`` and every ``<stem>-<i>.jsonl`` beside
    it (what ``--processes`` writes), where ``out`` is either."""
    base = re.sub(r"-\d+$", "", out.stem)
    named = re.compile(re.escape(base) + r"(-\d+)?" + re.escape(out.suffix))
    return sorted(path for path in out.parent.glob(f"{base}*{out.suffix}") if named.fullmatch(path.name))


def finished_jobs(out: Path, env_id: str) -> set[tuple[str, str, int]]:
    """(arm, condition, seed) of the episodes for ``env_id`` already in any slice of ``out``'s run
    (:func:`run_slices`): a job one shard played is not played again, even by a run resumed with another number
    of processes (which deals the groups differently)."""
    rows = [json.loads(line) for path in run_slices(out) for line in path.read_text().splitlines() if line.strip()]
    return {(r["arm"], r["condition"], r["seed"]) for r in rows if r["env_id"] == env_id}


def run_group(env_id: str, kwargs: dict[str, Any], arm: Arm, condition: str, seeds: list[int]) -> list[dict]:
    """One (arm, condition) on ``seeds``, the sub-envs of one vector env: a slice line per episode."""
    from esper_agent.train import make_envs  # torch and the env stack, only when playing
    from esper_env.engine import resolve_devices

    envs = make_envs(env_id, len(seeds), kwargs)
    try:
        started = time.perf_counter()
        driver = VectorEnvDriver(envs)
        records = play(driver, make_actor(arm, driver, seeds), seeds)
        seconds = time.perf_counter() - started
        config = envs.unwrapped.config
        device = device_name(str(resolve_devices(config, 1)[0]))
    finally:
        envs.close()
    stamp = run_stamp()
    return [{**arm.record(), "condition": condition, "seed": seed, "env_id": env_id, "env_kwargs": kwargs,
             "max_epochs": config.max_epochs, **record, "seconds": seconds, "episodes_together": len(seeds),
             "device": device, "git_commit": stamp["git_commit"], "git_dirty": stamp["git_dirty"]}
            for seed, record in zip(seeds, records, strict=True)]


Groups = dict[tuple[str, str], tuple[Arm, list[int]]]

SECONDS_PER_COST = 120.0
"""Seconds a group is assumed to take per unit of its arm's estimated cost (``screen_shards.arm_cost``) until the
process has timed one: about 52 on an H200 shared by 3 processes, more when more share it."""


def to_play(args: argparse.Namespace) -> tuple[Groups, dict[str, float]]:
    """This shard's (arm, condition) groups with the seeds ``--out`` does not hold yet, in play order, and each
    arm's estimated cost."""
    every = arm_set(args.set)
    arms = [arm for arm in every if not args.arms or arm.name in args.arms]
    if unknown := set(args.arms or ()) - {arm.name for arm in every}:
        raise SystemExit(f"--arms {sorted(unknown)} are not in set {args.set!r}")
    try:
        conditions = played_conditions(args.conditions, not args.no_mixture)
    except ValueError as error:
        raise SystemExit(str(error)) from error
    costs = arm_costs(arms, args.env, args.env_kwargs)
    jobs = shard_jobs(arms, conditions, args.seeds, args.shard, costs)
    done = finished_jobs(args.out, args.env)
    groups: Groups = {}
    for job in jobs:
        if (job.arm.name, job.condition, job.seed) not in done:
            groups.setdefault((job.arm.name, job.condition), (job.arm, []))[1].append(job.seed)
    total = sum(costs[arm.name] for arm in arms) * len(conditions) * len(args.seeds)
    print(f"shard {args.shard}: {len(jobs)} episodes, estimated cost {sum(costs[j.arm.name] for j in jobs):.1f} "
          f"of {total:.1f}; {sum(len(seeds) for _, seeds in groups.values())} still to play", flush=True)
    return groups, costs


def run(args: argparse.Namespace) -> int:
    """Play this shard's jobs not yet in ``--out``, grouped by (arm, condition); returns the episodes played.
    With ``--stop-at``, a group starts only if it is expected to end by then, at the rate of seconds per unit of
    cost of the last group this process timed (:data:`SECONDS_PER_COST` before the first), so that a run cut at
    a time limit does not lose a group half played; the groups left over are played by the next run."""
    groups, costs = to_play(args)
    played, rate = 0, SECONDS_PER_COST
    for (name, condition), (arm, seeds) in groups.items():
        expected = costs[name] * rate
        if args.stop_at is not None and time.time() + expected > args.stop_at:
            print(f"{name} {condition}: left for the next run (expected {expected:.0f} s, "
                  f"{args.stop_at - time.time():.0f} s left)", flush=True)
            continue
        kwargs = job_kwargs(args.env_kwargs, arm, condition if args.conditions else None)
        started = time.time()
        rows = run_group(args.env, kwargs, arm, condition, seeds)
        rate = (time.time() - started) / costs[name]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        tests = " ".join(f"{r['test_accuracy']:.4f}" if r["test_accuracy"] is not None else "-" for r in rows)
        print(f"{name} {condition} seeds {seeds}: test {tests} in {rows[0]['seconds']:.0f} s", flush=True)
        played += len(rows)
    return played


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.screen", description=__doc__.split("\n\n")[0])
    p.add_argument("--report", type=Path, help="rebuild summary.json, criteria.json and table.md in this folder "
                   "from its *.jsonl slices, and exit")
    p.add_argument("--seedling", default=SEEDLING_ARM, help="with --report: the static seedling arm's name")
    p.add_argument("--env", default="Esper-CIFAR10-v0", help="env id")
    p.add_argument("--set", default=next(iter(ARM_SETS)), choices=sorted(ARM_SETS), help="arm set")
    p.add_argument("--arms", nargs="*", help="arm names of the set to play (default: all)")
    p.add_argument("--conditions", nargs="*", default=[], help="condition names, each passed as the env kwarg "
                   "condition=<name>; the mixture is played too unless --no-mixture (module docstring)")
    p.add_argument("--no-mixture", action="store_true", help="play only the --conditions, not the mixture")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="reset seeds, shared by every arm")
    p.add_argument("--shard", default="0/1", help="i/n: play the i-th of n shares of the (arm, condition) groups, "
                   "dealt by estimated cost")
    p.add_argument("--env-kwargs", type=json.loads, default={}, help="JSON env kwargs under every arm's own")
    p.add_argument("--out", type=Path, help="JSON-lines slice to append one line per episode to")
    p.add_argument("--processes", type=int, help="play as this many shards in child processes spread over the "
                   "visible GPUs, shard i writing <out stem>-i.jsonl (benchmarks.screen_shards.launch)")
    p.add_argument("--per-gpu", type=int, default=4, help="with --processes: at most this many on one GPU")
    p.add_argument("--stop-at", type=float, help="Unix time (seconds) by which every group started must be expected "
                   "to end, e.g. $(( $(date +%%s) + 530 )) inside a 10-minute call; later groups wait for a rerun")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.report is not None:
        screen_report.report(args.report, args.seedling)
        print(f"written to {args.report}")
        return 0
    if args.out is None:
        raise SystemExit("--out is required to play (or --report DIR to rebuild a report)")
    if args.processes is not None:
        return screen_shards.launch(sys.argv[1:] if argv is None else argv, args.out, args.processes, args.per_gpu)
    print(f"{run(args)} episodes written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
