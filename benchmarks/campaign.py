"""Run a head-to-head campaign on one or several GPUs: every (arm, seed) of ``benchmarks.compare_agents`` in its
own process, at most ``--per-gpu`` processes on each GPU at once, each GPU's next process started as one ends.

Why one process per slice: a slice is the unit ``compare_agents`` resumes (a finished slice is skipped, a learning
slice continues from its last update), so a campaign cut short anywhere is continued by running the same command
again, and processes never share a GPU's memory pools or a CPU thread pool. Why a cap per GPU: each process holds
its own copy of the data and its sub-envs' hosts and CUDA graphs (on ``Esper-CIFAR10-v0`` with 8 sub-envs,
15-26 GiB each: 7-8 per 140 GiB H200 ran out of memory, 5 fit). The learning arms start first, since they take the
longest; every slice already written is skipped without starting a process.

``--arms`` takes whatever ``compare_agents --arms`` takes (its own arms, ``plan:<name>``, ``static:<name>`` and
``oracle``), checked by ``compare_agents``' own parsing before anything runs. The processes run in the campaign's
own working directory, so ``--out`` and ``--oracle-from`` are passed on as given and mean the same to them; the
logs and the slices' records then name those paths as given, not the machine's folders.

``--preset NAME`` takes the env, its kwargs, the sub-envs, the agent config and the training budget from
:mod:`esper_agent.presets` (flags given here win; ``--env-kwargs`` is merged over the preset's), and labels the
esper_agent folder with the preset's name unless ``--label`` says otherwise. The label applies to the arms whose
training the campaign's configuration changes: esper_agent (the other arms do not read the agent config, so one
folder per env config serves every agent recipe) and, when ``--sb3-kwargs`` is given, the MaskablePPO arms, so that
each configuration of a sweep has its own folders; that needs ``--label``, as a finished slice in the default
configuration's folder would be skipped as done. Every flag this command does not define goes to
``compare_agents`` unchanged (``--budget-epochs``, ``--eval-episodes``, ``--eval-sampled``, ``--agent-kwargs``,
``--sb3-kwargs``, ...); ``--time-limit-s``, a time limit per learning slice, too.
Each process's output goes to ``<out>/logs/<env>/<folder>-<seed>.log`` (appended, so a resumed slice keeps its
earlier runs' lines).

``--stop-at`` (a wall-clock time in seconds since the epoch) is for machines lent by the call: every process must
have ended by then. A learning slice started at time t pauses after ``--time-limit-s`` or ``stop_at - t -
--stop-margin-s`` seconds of training, whichever is less, so slices queued behind others (more slices than
``--per-gpu`` allows at once) get what is left of the call, not a full limit. ``--stop-at`` needs
``--eval-reserve-s``, the seconds a learning slice's whole evaluation takes (argmax, sampled, last policy; a fixed
arm's, shorter, is covered by it too): a slice that finishes training with less than that left pauses before
evaluating, and its next run evaluates first. No slice starts with less than the reserve plus the margin left (a
trained learner needs the reserve, a fixed arm is all evaluation); those wait for the next run of the same
command. The margin covers the setup a slice's clock does not time (imports, data; esper_agent's envs and trainer)
and an update that runs longer than the one before it (a slice starts another update only if one as long as the
last would end within its limit; the first update's time includes the rest of the setup).

``--plan FILE`` runs several configurations as one queue (a sweep's, or a head-to-head's learners and fixed arms
side by side): FILE is a JSON list of argument lists, each a group of slices as this command would take it
(``["--arms", "esper_agent", "--label", "b", "--agent-kwargs", "{...}"]``), parsed over the command line's own
flags (which a group may override, except :data:`PACKING`, the command's alone); every group's learning slices
start before any fixed arm's, and ``--per-gpu`` caps them all together. No slice may be made twice (by two groups,
or by an arm named twice: seeds are made unique); an error in a group names it.

    python -m benchmarks.campaign --preset cifar10-fast-budget --arms esper_agent heuristic --seeds 0-15 \\
        --out benchmarks/results/compare_val5k --eval-episodes 48 --eval-sampled --per-gpu 2 --threads 4
    python -m benchmarks.campaign --preset cifar10-fast-budget --seeds 0-15 --out ... --status   # what is done
    python -m benchmarks.campaign --env Esper-CIFAR10-v0 --arms maskable_flat --seeds 100-102 --label lr1e-4 \
        --sb3-kwargs '{"learning_rate": 1e-4, "normalize": "obs"}' --out ...   # one configuration of a sweep
    python -m benchmarks.campaign --plan sweep.json --env Esper-CIFAR10-Fast-v0 --seeds 100-101 \\
        --budget-epochs 8000 --eval-episodes 24 --eval-sampled --out <folder> --per-gpu 5 \\
        --stop-at $(( $(date +%s) + 530 )) --eval-reserve-s 150   # several configurations, one queue, one call
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

import gymnasium as gym

from benchmarks import compare_agents, scheduler
from benchmarks.common import child_env
from benchmarks.scheduler import Deadline, Process, gpu_slots
from esper_env.config import EnvConfig


@dataclass(frozen=True)
class Job:
    """One (arm, seed) slice: the ``compare_agents`` command that makes it, and where it writes."""

    arm: str
    seed: int
    folder: Path
    argv: tuple[str, ...]
    log: Path

    @property
    def name(self) -> str:
        """The slice's folder name: its arm and, where the campaign labels it, the label (``esper_agent-b``)."""
        return self.folder.name

    @property
    def slice_path(self) -> Path:
        return self.folder / f"seed{self.seed}.json"

    def state(self) -> str:
        """``done`` (its slice is written), ``paused`` (a learning slice's saved state waits) or ``to run``."""
        if self.slice_path.exists():
            return "done"
        return "paused" if any(p.exists() for p in compare_agents.saved_state(self.arm, self.seed, self.folder)) \
            else "to run"


def parse_seeds(texts: Sequence[str]) -> list[int]:
    """``["0-3", "8"]`` -> ``[0, 1, 2, 3, 8]``: single seeds and inclusive ranges, in order, each once."""
    seeds: list[int] = []
    for text in texts:
        first, dash, last = text.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"seed {text!r}: expected a number or a range like 0-15")
        span = range(int(first), int(last or first) + 1)
        if not span:
            raise ValueError(f"seed range {text!r} is empty: expected its first seed <= its last")
        seeds += [s for s in span if s not in seeds]
    return seeds


def preset_argv(name: str) -> tuple[list[str], dict]:
    """The ``compare_agents`` flags a preset fixes, and its env kwargs (merged with ``--env-kwargs``)."""
    from esper_agent import presets  # only a campaign that names a preset needs them

    preset = presets.load(name)
    run, agent = preset.run, preset.agent
    argv = ["--agent-kwargs", json.dumps(agent)]
    if "env" in run:
        argv += ["--env", run["env"]]
    if "num_envs" in run:
        argv += ["--num-envs", str(run["num_envs"])]
    if "device" in run:  # the train command's device is the agent's; the env keeps its own (auto: the GPU)
        argv += ["--agent-device", run["device"]]
    if "total_updates" in run and "num_envs" in run:
        env = run.get("env") or compare_agents.build_parser().get_default("env")
        steps = agent.get("rollout_steps") or EnvConfig.from_kwargs(
            **{**gym.spec(env).kwargs, **run.get("env_kwargs", {})}).max_epochs
        argv += ["--budget-epochs", str(run["total_updates"] * steps * run["num_envs"])]
    return argv, dict(run.get("env_kwargs", {}))


def plan(args: argparse.Namespace, passed: list[str]) -> list[Job]:
    """Every (arm, seed) job, learning arms first; ``passed`` are the flags meant for ``compare_agents``."""
    base, env_kwargs = preset_argv(args.preset) if args.preset else ([], {})
    given = json.loads(args.env_kwargs or "{}")
    if not isinstance(given, dict):
        raise ValueError(f"--env-kwargs {args.env_kwargs}: expected a JSON object of env arguments")
    common = [*base, "--env-kwargs", json.dumps(env_kwargs | given), *passed,
              *(["--time-limit-s", repr(args.time_limit_s)] if args.time_limit_s is not None else []),
              *(["--eval-reserve-s", repr(args.eval_reserve_s)] if args.eval_reserve_s else []),
              *(["--env", args.env] if args.env else []), "--out", str(args.out),
              *(["--oracle-from", str(args.oracle_from)] if args.oracle_from else [])]
    given_label = args.label if args.label is not None else (args.preset or "")
    arms = args.arms or list(compare_agents.ARMS)
    # refused here, before anything runs
    resolved = compare_agents.parse_args([*common, "--label", given_label, "--arms", *arms])
    labelled = {"esper_agent", *(compare_agents.MASKABLE_ARMS if resolved.sb3_kwargs else ())}
    if args.label is None and resolved.sb3_kwargs and labelled & set(arms) - {"esper_agent"}:
        raise ValueError(f"--sb3-kwargs {json.dumps(resolved.sb3_kwargs)} without --label: expected a label for "
                         "this configuration's MaskablePPO folders (<arm>-<label>), apart from the default's")
    arms = sorted(arms, key=lambda arm: arm not in compare_agents.LEARNING_ARMS)  # stable: the given order within
    jobs = []
    for arm in arms:
        label = resolved.label if arm in labelled else ""
        folder = compare_agents.slice_folder(resolved.out, resolved.env, arm, label)
        for seed in args.seeds:
            argv = [*common, "--label", label, "--arms", arm, "--seeds", str(seed)]
            log = resolved.out / "logs" / resolved.env / f"{folder.name}-{seed}.log"
            jobs.append(Job(arm, seed, folder, tuple(argv), log))
    return jobs


def start_process(job: Job, gpu: str | None, threads: int) -> subprocess.Popen:
    """``python -m benchmarks.compare_agents`` for one job on one GPU, its output appended to the job's log."""
    env = child_env(gpu, OMP_NUM_THREADS=str(threads))
    job.log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "benchmarks.compare_agents", *job.argv]
    with job.log.open("a") as log:
        log.write(f"== {time.strftime('%Y-%m-%dT%H:%M:%S%z')} on GPU {gpu}: python -m benchmarks.compare_agents "
                  f"{shlex.join(job.argv)}\n")
        log.flush()
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def timed(job: Job, limit_s: float) -> Job:
    """``job`` with its training capped at ``limit_s`` (argparse keeps the last ``--time-limit-s``)."""
    if job.arm not in compare_agents.LEARNING_ARMS:
        return job
    return replace(job, argv=(*job.argv, "--time-limit-s", f"{max(limit_s, 1.0):.0f}"))


def run_jobs(jobs: Sequence[Job], slots: Sequence[str | None], per_slot: int,
             start: Callable[[Job, str | None], Process], **kwargs: Any) -> dict[Job, int]:
    """:func:`benchmarks.scheduler.run_jobs` with each learning slice's training capped by the deadline."""
    return scheduler.run_jobs(jobs, slots, per_slot, start, limit=timed, **kwargs)


def report(jobs: Sequence[Job], codes: dict[Job, int]) -> bool:
    """One line per job (its folder, arm and label, and seed): done, paused (rerun to continue) or failed; True
    when none failed."""
    failed = False
    for job in jobs:
        state, code = job.state(), codes.get(job)
        if code not in (None, 0):
            failed = True
            state = f"failed (exit code {code}; its log: {job.log})"
        elif state == "paused":
            state = "paused (run the same command again to continue it)"
        print(f"{job.name} seed {job.seed}: {state}", flush=True)
    return not failed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.campaign", description=__doc__.splitlines()[0], allow_abbrev=False,
        epilog="Every other flag goes to benchmarks.compare_agents unchanged (python -m benchmarks.compare_agents "
               "--help): --budget-epochs, --eval-episodes, --eval-sampled, --agent-kwargs, "
               "--sb3-kwargs, ...")
    parser.add_argument("--preset", default=None, help="a name in esper_agent/presets (env, agent, budget)")
    parser.add_argument("--arms", nargs="+", default=None, help=f"of {', '.join(compare_agents.ARMS)}, "
                        "'plan:<name>', 'static:<name>' and 'oracle', as compare_agents takes them (default: "
                        f"{', '.join(compare_agents.ARMS)})")
    parser.add_argument("--oracle-from", type=Path, default=None, help="the screen summary.json the oracle arm "
                        "picks from")
    parser.add_argument("--seeds", nargs="+", default=["0-4"], help="seeds and ranges, e.g. 0-15 or 0 3 5")
    parser.add_argument("--env", default=None, help="env id (default: the preset's, else compare_agents')")
    parser.add_argument("--env-kwargs", default=None, help="JSON env kwargs, merged over the preset's")
    parser.add_argument("--label", default=None, help="suffix of the esper_agent folder (default: the preset) and, "
                        "with --sb3-kwargs, of the MaskablePPO arms' folders (then required)")
    parser.add_argument("--out", type=Path, default=Path(compare_agents.build_parser().get_default("out")),
                        help="the campaign's results folder")
    parser.add_argument("--gpus", type=int, nargs="*", default=None, help="GPUs to use (torch's indices; "
                        "default: every visible one; none: the CPU)")
    parser.add_argument("--per-gpu", type=int, default=1, help="processes at once on one GPU (count)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of each process (OMP_NUM_THREADS)")
    parser.add_argument("--time-limit-s", type=float, default=None, help="passed on to every learning slice: it "
                        "pauses after training this long (seconds)")
    parser.add_argument("--stop-at", type=float, default=None, help="seconds since the epoch by which every process "
                        "must have ended, e.g. $(( $(date +%%s) + 530 )): learning slices get what is left, less "
                        "--stop-margin-s, as their time limit, and none starts with less left")
    parser.add_argument("--stop-margin-s", type=float, default=60.0, help="with --stop-at: the seconds a slice "
                        "needs beyond its training time and its evaluation (setup, an update longer than the last)")
    parser.add_argument("--eval-reserve-s", type=float, default=0.0, help="passed on to every learning slice (one "
                        "that finishes training with less than this left of its time limit pauses before its "
                        "evaluation): a learning slice's whole evaluation, in seconds; needed with --stop-at, under "
                        "which no slice starts with less than this (plus the margin) left")
    parser.add_argument("--plan", type=Path, default=None, help="a JSON list of argument lists, one per group of "
                        "slices (arms, seeds, label, kwargs, ...), each over this command's flags: all groups' "
                        "slices run as one queue under this command's --per-gpu and --stop-at")
    parser.add_argument("--dry-run", action="store_true", help="print each process's GPU and command, run nothing")
    parser.add_argument("--status", action="store_true", help="print each slice's state, run nothing")
    return parser


PACKING = ("--plan", "--gpus", "--per-gpu", "--threads", "--time-limit-s", "--stop-at", "--stop-margin-s",
           "--eval-reserve-s", "--dry-run", "--status")
"""The command's own flags, not a ``--plan`` group's: how all the groups' slices share the machine and the call."""


def planned_jobs(parser: argparse.ArgumentParser, args: argparse.Namespace, passed: list[str]) -> list[Job]:
    """The command's jobs; with ``--plan``, every group's (module docstring), learning slices first over all
    groups, each group parsed over the command's flags (``passed``, then the group's own, which win)."""
    if args.plan is None:
        jobs = plan(argparse.Namespace(**{**vars(args), "seeds": parse_seeds(args.seeds)}), passed)
        refuse_twice(jobs, "--arms names an arm twice (expected each arm once)")
        return jobs
    try:
        groups = json.loads(args.plan.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"--plan {args.plan}: {error}") from error
    if not isinstance(groups, list) or not all(isinstance(g, list) and all(isinstance(a, str) for a in g)
                                               for g in groups):
        raise ValueError(f"--plan {args.plan}: expected a JSON list of argument lists (lists of strings)")
    jobs = [job for number, group in enumerate(groups, 1) for job in group_jobs(parser, args, passed, number, group)]
    refuse_twice(jobs, f"--plan {args.plan}: slices made twice (by two groups, or by an arm named twice in one)")
    return sorted(jobs, key=lambda job: job.arm not in compare_agents.LEARNING_ARMS)


def group_jobs(parser: argparse.ArgumentParser, args: argparse.Namespace, passed: list[str], number: int,
               group: list[str]) -> list[Job]:
    """One ``--plan`` group's jobs, parsed over the command's flags; any error names the group."""
    where = f"--plan {args.plan}, group {number} {group}"
    packing = sorted({a.split("=", 1)[0] for a in group} & set(PACKING))
    if packing:
        raise ValueError(f"{where} sets {', '.join(packing)}: expected those on the command line, for every group")
    if {"-h", "--help"} & set(group):
        raise ValueError(f"{where} asks for help: expected a configuration's arguments (python -m benchmarks.campaign "
                         "--help and python -m benchmarks.compare_agents --help list them)")

    def refuse(message: str) -> NoReturn:
        raise ValueError(f"{where}: {message}")

    exit_with_usage, parser.error = parser.error, refuse  # argparse reports through self.error
    try:
        own, own_passed = parser.parse_known_args(group, namespace=argparse.Namespace(**vars(args)))
        return plan(argparse.Namespace(**{**vars(own), "seeds": parse_seeds(own.seeds)}), [*passed, *own_passed])
    except ValueError as error:
        raise ValueError(str(error) if str(error).startswith(where) else f"{where}: {error}") from error
    except SystemExit as error:  # compare_agents' own parser, which checks the arms, has printed why
        raise ValueError(f"{where}: refused by compare_agents' parsing (its message above)") from error
    finally:
        parser.error = exit_with_usage


def refuse_twice(jobs: Sequence[Job], what: str) -> None:
    """Refuse jobs that would make one slice twice (two processes would write the same files)."""
    slices = [job.slice_path for job in jobs]
    if len(set(slices)) < len(slices):
        raise ValueError(f"{what}: {sorted({str(s) for s in slices if slices.count(s) > 1})}")


def check_packing(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse packing flags that could not work (counts below 1, negative or non-finite times)."""
    if args.per_gpu < 1 or args.threads < 1:
        parser.error(f"--per-gpu {args.per_gpu}, --threads {args.threads}: expected counts >= 1")
    if args.stop_at is not None and not math.isfinite(args.stop_at):
        parser.error(f"--stop-at {args.stop_at}: expected a time in seconds since the epoch")
    limits = (("--stop-margin-s", args.stop_margin_s), ("--eval-reserve-s", args.eval_reserve_s),
              ("--time-limit-s", 0.0 if args.time_limit_s is None else args.time_limit_s))
    for flag, value in limits:
        if not value >= 0:
            parser.error(f"{flag} {value}: expected seconds >= 0")
    if args.stop_at is not None and not args.eval_reserve_s > 0:
        parser.error("--stop-at without --eval-reserve-s: expected the seconds a learning slice's evaluation takes, "
                     "or a slice that finishes training near the deadline would evaluate past it")
    if args.eval_reserve_s and args.time_limit_s is not None and args.eval_reserve_s >= args.time_limit_s:
        parser.error(f"--eval-reserve-s {args.eval_reserve_s} with --time-limit-s {args.time_limit_s}: expected "
                     "less than the limit, or a trained slice would pause before its evaluation on every run")


def main(argv: list[str] | None = None, start: Callable[[Job, str | None, int], Process] = start_process) -> int:
    parser = build_parser()
    args, passed = parser.parse_known_args(argv)
    check_packing(parser, args)
    try:
        jobs = planned_jobs(parser, args, passed)
        slots = gpu_slots(args.gpus)
    except ValueError as error:
        parser.error(str(error))
    if args.status:
        return int(not report(jobs, {}))
    todo = [job for job in jobs if job.state() != "done"]
    print(f"{len(jobs) - len(todo)} of {len(jobs)} slices done; {len(todo)} to run on GPU(s) {slots}, "
          f"at most {args.per_gpu} per GPU", flush=True)
    if args.dry_run:
        for job in todo:
            print(f"{job.name} seed {job.seed}: python -m benchmarks.compare_agents {shlex.join(job.argv)}")
        return 0
    deadline = None if args.stop_at is None else Deadline(args.stop_at, args.stop_margin_s, args.time_limit_s,
                                                          args.eval_reserve_s)
    codes = run_jobs(todo, slots, args.per_gpu, lambda job, gpu: start(job, gpu, args.threads), deadline=deadline)
    return int(not report(jobs, codes))


if __name__ == "__main__":
    raise SystemExit(main())
