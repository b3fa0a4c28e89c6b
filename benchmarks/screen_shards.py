"""How the acceptance screen's work is split between processes: whole (arm, condition) groups, dealt by cost.

A group's seeds play as the sub-envs of one vector env (``benchmarks.screen``), so the GPU runs wide batches;
``--shard i/n`` gives process ``i`` the groups :func:`deal` hands it, longest first to the least loaded, on
:func:`arm_costs`' estimates. The deal depends only on the arms, conditions, seeds and env kwargs, never on what
is already played, so a process restarted with the same arguments resumes the same groups.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.common import child_env
from benchmarks.screen_arms import Arm
from benchmarks.screen_report import MIXTURE
from esper_env import ENV_IDS, EnvConfig
from esper_env.architecture import WIDEN_FACTORS, Architecture, forward_flops, widen_extra
from esper_env.spaces import Op


class Job(NamedTuple):
    """One episode of the screen: an arm under a condition label from a reset seed."""

    arm: Arm
    condition: str  # a catalogue condition's name, or MIXTURE (the env draws one per episode)
    seed: int


def played_conditions(conditions: Sequence[str], mixture: bool = True) -> list[str]:
    """The condition labels to play: ``conditions``, then the mixture unless ``mixture`` is False."""
    if not mixture and not conditions:
        raise ValueError("--no-mixture with no --conditions leaves nothing to play; expected condition names")
    return list(dict.fromkeys([*conditions, MIXTURE] if mixture else conditions))


OVERHEAD = 0.7
"""An episode's cost that does not grow with the architecture (data, validation, test, Python), in units of the
largest family architecture's training FLOPs over a whole episode: on an H200 the committed ``full`` slices took
39 s a group for the static seedling and 89 s for the static largest, whose training FLOPs differ 31-fold, so a
group's seconds are about 37 + 52 × (its FLOPs / the largest's)."""
GROWTH_OVERHEAD = 0.4
"""What growing adds to an episode's cost in the same units (seeds training beside the host, new shapes to
compile): the committed growth plans took 13 to 31 s a group more on the H200 than statics of their FLOPs."""


def _grown(arch: Architecture, blueprint: str | None, stage: int) -> Architecture:
    """``arch`` after a family blueprint joins stage ``stage``; unchanged for other blueprints (another host's)."""
    if stage >= len(arch.widths):
        return arch
    if blueprint in WIDEN_FACTORS:
        return arch.widened(stage, arch.widths[stage] + widen_extra(arch.widths[stage], blueprint))
    return arch.deepened(stage) if blueprint == "deepen" else arch


def arm_cost(arm: Arm, env_id: str, base: Mapping[str, Any]) -> float | None:
    """An episode's estimated cost: :data:`OVERHEAD`, :data:`GROWTH_OVERHEAD` for a plan that grows, and the
    forward FLOPs of the architecture the arm has grown to by each epoch (a plan's growth counted from its
    GERMINATE epoch on) summed over the episode, over the largest architecture's. None where it cannot be told in
    advance: the heuristic and random arms choose their own growth, and only the family host's architectures are
    counted."""
    config = EnvConfig.from_kwargs(**{**ENV_IDS.get(env_id, {}), **base, **arm.env_kwargs})
    if config.host != "family" or arm.kind in ("heuristic", "random"):
        return None
    arch, total = config.start, 0
    growth = [step for step in arm.plan if step.op == Op.GERMINATE and step.epoch < config.max_epochs]
    for epoch in range(config.max_epochs):
        for step in (step for step in growth if step.epoch == epoch):
            arch = _grown(arch, step.blueprint, step.slot)
        total += forward_flops(arch)
    fixed = OVERHEAD + (GROWTH_OVERHEAD if growth else 0.0)
    return fixed + total / (config.max_epochs * forward_flops(config.largest))


def arm_costs(arms: Sequence[Arm], env_id: str, base: Mapping[str, Any]) -> dict[str, float]:
    """:func:`arm_cost` by arm name; an arm without an estimate costs the mean of those with one (1.0 if none)."""
    known = {arm.name: arm_cost(arm, env_id, base) for arm in arms}
    estimates = [cost for cost in known.values() if cost is not None]
    fallback = sum(estimates) / len(estimates) if estimates else 1.0
    return {name: fallback if cost is None else cost for name, cost in known.items()}


def deal(costs: Sequence[float], count: int) -> list[list[int]]:
    """Indices of ``costs`` dealt to ``count`` shards, longest first, each to the shard with the least cost so far
    (the lower index on a tie): every index exactly once, and no shard's load above the mean load by more than
    the costliest item. Each shard's indices are in ascending order."""
    if count < 1:
        raise ValueError(f"{count} shards; expected at least 1")
    shards: list[list[int]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for k in sorted(range(len(costs)), key=lambda k: (-costs[k], k)):
        target = min(range(count), key=lambda s: (loads[s], s))
        shards[target].append(k)
        loads[target] += costs[k]
    return [sorted(shard) for shard in shards]


def shard_jobs(arms: Sequence[Arm], conditions: Sequence[str], seeds: Sequence[int], shard: str,
               costs: Mapping[str, float] | None = None) -> list[Job]:
    """The jobs of shard ``i`` of ``n`` (``shard`` = ``"i/n"``): whole (arm, condition) groups, every seed of a
    group, dealt by :func:`deal` on the arms' ``costs`` (1.0 each when None), in arm then condition order."""
    index, _, count = shard.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise ValueError(f"--shard {shard!r}; expected i/n with 0 <= i < n")
    groups = [(arm, condition) for arm in arms for condition in conditions]
    mine = deal([1.0 if costs is None else costs[arm.name] for arm, _ in groups], int(count))[int(index)]
    return [Job(*groups[k], seed) for k in mine for seed in seeds]


@dataclass(frozen=True)
class ShardJob:
    """One shard of a launched screen: its process writes ``out`` and logs to ``log``
    (``benchmarks.scheduler.run_jobs`` names a job by ``name`` and ``seed`` and prints its ``log``)."""

    seed: int  # the shard's index
    count: int
    out: Path
    log: Path
    name: str = "shard"


LAUNCHER_OPTIONS = {"--processes": 1, "--per-gpu": 1, "--shard": 1, "--out": 1}
"""The launcher's own options (and how many values each takes), left out of the shards' command lines."""


def shard_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` without the launcher's options, for the shards' command lines."""
    kept, skip = [], 0
    for arg in argv:
        name = arg.split("=", 1)[0]
        if skip:
            skip -= 1
        elif name in LAUNCHER_OPTIONS:
            skip = 0 if "=" in arg else LAUNCHER_OPTIONS[name]
        else:
            kept.append(arg)
    return kept


def launch(argv: Sequence[str], out: Path, processes: int, per_gpu: int,
           start: Callable[[ShardJob, str | None], Any] | None = None) -> int:
    """Play the screen as ``processes`` shards (``--shard i/processes``), each in its own process writing
    ``<out stem>-<i><suffix>`` beside ``out``, at most ``per_gpu`` on each visible GPU (:mod:`benchmarks.scheduler`).
    Rerun the same command to resume: each shard skips what its slice holds. 0 when all succeeded."""
    from benchmarks.scheduler import gpu_slots, run_jobs

    if processes < 1 or per_gpu < 1:
        raise ValueError(f"--processes {processes}, --per-gpu {per_gpu}; expected both >= 1")
    jobs = [ShardJob(i, processes, out.with_name(f"{out.stem}-{i}{out.suffix}"),
                     out.with_name(f"{out.stem}-{i}.log")) for i in range(processes)]
    base = shard_argv(argv)

    def start_shard(job: ShardJob, gpu: str | None) -> subprocess.Popen:
        command = [sys.executable, "-m", "benchmarks.screen", *base, "--shard", f"{job.seed}/{job.count}",
                   "--out", str(job.out)]
        job.log.parent.mkdir(parents=True, exist_ok=True)
        with job.log.open("a") as log:
            return subprocess.Popen(command, env=child_env(gpu), stdout=log, stderr=subprocess.STDOUT)

    codes = run_jobs(jobs, gpu_slots(None), per_gpu, start or start_shard)
    failed = [job for job in jobs if codes.get(job) != 0]
    for job in failed:
        print(f"shard {job.seed} failed (exit code {codes.get(job)}; its log: {job.log})", flush=True)
    return 1 if failed else 0
