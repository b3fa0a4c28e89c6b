"""``python -m esper_agent.train``: train the agent on a Gymnasium vector env, with logs and checkpoints.

Example::

    python -m esper_agent.train --env Esper-CIFAR10-v0 --num-envs 8 --total-updates 200 --device cuda
    python -m esper_agent.train --preset cifar10-fast-budget --seed 1
    python -m esper_agent.train --resume runs/Esper-CIFAR10-v0-20261126-120000-s0

Every :class:`~esper_agent.config.AgentConfig` field is a flag (``--clip-coef 0.1``; booleans also take
``--no-...``). ``--preset <name>`` starts from a named, committed config (:mod:`esper_agent.presets`); flags
given beside it override its values, and ``--env-kwargs`` is merged into its env kwargs key by key. A run
directory receives ``config.json`` (with the git commit and the preset's name), ``metrics.jsonl``,
``metrics.csv``, TensorBoard events under ``tb/`` and ``checkpoint.pt`` (rewritten atomically every
``--checkpoint-interval`` updates and at the end). ``--resume`` continues from a checkpoint exactly where it
stopped; only ``--total-updates``, ``--device`` and ``--run-dir`` may change on resume.

Several GPUs: the same command under ``torchrun --nproc-per-node N`` runs one process per GPU (``--device cuda``
is then each process's ``cuda:LOCAL_RANK``, ``--num-envs`` the sub-envs of each process); rank 0 alone writes
the run folder, and a run resumes with the same or another number of processes (``esper_agent.distributed``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from esper_agent import distributed, presets
from esper_agent.checkpoint import load_checkpoint, save_checkpoint
from esper_agent.config import AgentConfig, field_help
from esper_agent.distributed import SINGLE, SingleProcess
from esper_agent.telemetry import RunLogger
from esper_agent.trainer import Trainer
from esper_env.config import EnvConfig

CHECKPOINT_NAME = "checkpoint.pt"
RUN_DEFAULTS: dict[str, Any] = {"env": "Esper-CIFAR10-v0", "env_kwargs": {}, "num_envs": 8, "device": "auto",
                                "seed": 0, "total_updates": 100, "run_dir": None, "resume": None, "preset": None}
# A resumed run keeps its settings; a preset named beside --resume is checked through the values it gives.
RESUME_MAY_CHANGE = frozenset({"total_updates", "device", "run_dir", "resume", "preset"})


@dataclass(frozen=True)
class RunOptions:
    env_id: str
    env_kwargs: dict[str, Any]
    num_envs: int
    device: str
    seed: int
    total_updates: int
    run_dir: Path
    preset: str | None = None
    command: tuple[str, ...] | None = None
    """The command line's arguments as given (recorded in config.json); None: this process's ``sys.argv``."""


def make_envs(env_id: str, num_envs: int, env_kwargs: dict[str, Any]) -> gym.vector.VectorEnv:
    """``gym.make_vec`` after importing ``esper_env`` (which registers the Esper ids) when it is installed."""
    with contextlib.suppress(ImportError):  # other envs ("module:Id") need no esper_env registration
        importlib.import_module("esper_env")
    return gym.make_vec(env_id, num_envs=num_envs, **env_kwargs)


# Folders the benchmarks write their results and logs into: a run that writes there (or deletes a saved state it
# resumed from) still ran the commit's code, so changes under them do not count as uncommitted code.
RESULT_PATHS = ("benchmarks/results",)


def git_commit(where: Path | None = None) -> tuple[str, bool | None]:
    """(commit of the checkout holding this package, whether its code has uncommitted changes), or "unknown".

    Code is every tracked or untracked file outside ``RESULT_PATHS`` and ``.gitignore``; ``where`` is a folder in
    the checkout (default: this package's). A copy of the code shipped without its own history (a remote
    machine's working tree) names its commit in ``ESPER_GIT_COMMIT`` and, with ``ESPER_GIT_DIRTY=1``, that it had
    uncommitted changes; those win over whatever ``.git`` lies there.
    """
    if commit := os.environ.get("ESPER_GIT_COMMIT"):
        return commit, os.environ.get("ESPER_GIT_DIRTY", "0") == "1"
    where = where or Path(__file__).resolve().parent
    outside_results = [":(top)", *(f":(top,exclude){path}" for path in RESULT_PATHS)]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return "unknown", None
        status = subprocess.run(["git", "status", "--porcelain", "--", *outside_results], cwd=where,
                                capture_output=True, text=True, timeout=10)
        return head.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return "unknown", None


def write_config_json(options: RunOptions, config: AgentConfig, world_size: int = 1) -> Path:
    commit, dirty = git_commit()
    record = {
        "agent": config.to_dict(),
        "run": {"env_id": options.env_id, "env_kwargs": options.env_kwargs, "num_envs": options.num_envs,
                "device": options.device, "seed": options.seed, "total_updates": options.total_updates,
                "world_size": world_size, "preset": options.preset},
        "git_commit": commit, "git_dirty": dirty,
        "command": sys.argv if options.command is None else ["python -m esper_agent.train", *options.command],
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "gymnasium": gym.__version__, "numpy": np.__version__},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    path = options.run_dir / "config.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def _checkpoint_payload(trainer: Trainer, options: RunOptions) -> dict[str, Any]:
    return trainer.state_dict() | {"run": {"env_id": options.env_id, "env_kwargs": options.env_kwargs,
                                           "num_envs": options.num_envs}}


def run(options: RunOptions, config: AgentConfig, resume: dict[str, Any] | None = None,
        on_update: Callable[[dict[str, Any]], None] | None = None, ranks: SingleProcess = SINGLE
        ) -> dict[str, Any] | None:
    """Train until ``options.total_updates``; returns the last update's metrics (None if none ran).

    Under torchrun every rank calls this with the same arguments (``options.device`` is the rank's own); only
    rank 0 writes the run folder.
    """
    envs = make_envs(options.env_id, options.num_envs,
                     distributed.rank_env_kwargs(options.env_id, options.env_kwargs, ranks))
    trainer = Trainer(envs, config, device=options.device, seed=options.seed, total_updates=options.total_updates,
                      ranks=ranks)
    if resume is not None:
        trainer.load_state_dict(resume)
    logger = None
    if ranks.is_main:
        options.run_dir.mkdir(parents=True, exist_ok=True)
        if resume is None or not (options.run_dir / "config.json").exists():
            write_config_json(options, config, ranks.world_size)
        logger = RunLogger(options.run_dir, options.total_updates, start_update=trainer.update_index)
    metrics = None
    try:
        for metrics in trainer.train(options.total_updates):
            if logger is not None:
                logger.log(metrics)
            done = trainer.update_index
            if done % config.checkpoint_interval == 0 or done == options.total_updates:
                payload = _checkpoint_payload(trainer, options)  # a collective under torchrun: every rank
                if ranks.is_main:
                    save_checkpoint(options.run_dir / CHECKPOINT_NAME, payload)
                ranks.barrier()  # no rank runs ahead into the next update's collectives while rank 0 writes
            if on_update is not None:
                on_update(metrics)
    finally:
        if logger is not None:
            logger.close()
        envs.close()
    return metrics


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m esper_agent.train", argument_default=argparse.SUPPRESS,
                                     description="Train the esper_agent PPO on a Gymnasium vector env, with "
                                     "TensorBoard/JSONL/CSV logs and atomic checkpoints.")
    group = parser.add_argument_group("run")
    group.add_argument("--preset", choices=presets.names(), help="named config to start from "
                       "(esper_agent/presets/<name>.json): its run settings and agent fields; flags given beside "
                       "it override them, and --env-kwargs is merged into its env kwargs key by key")
    group.add_argument("--env", help="Gymnasium id of a vector env with Esper's action space; 'module:Id' imports "
                       f"the module first [default: {RUN_DEFAULTS['env']}]")
    group.add_argument("--env-kwargs", type=json.loads, help="JSON object of keyword arguments for "
                       "gym.make_vec, e.g. '{\"max_epochs\": 25}' [default: {}]")
    group.add_argument("--num-envs", type=int, help="sub-envs (count), per process under torchrun "
                       f"[default: {RUN_DEFAULTS['num_envs']}]")
    group.add_argument("--device", help="torch device of the agent: cpu, cuda, cuda:1 or auto; under torchrun "
                       "cuda (or auto) is each process's cuda:LOCAL_RANK [default: auto]")
    group.add_argument("--seed", type=int, help="seed of the network init, action sampling, minibatches and env "
                       "resets [default: 0]")
    group.add_argument("--total-updates", type=int, help="PPO updates to run in total (count; one update = "
                       f"rollout_steps env steps per sub-env) [default: {RUN_DEFAULTS['total_updates']}]")
    group.add_argument("--run-dir", type=Path, help="output folder [default: runs/<env>-<time>-s<seed>]")
    group.add_argument("--resume", type=Path, help="checkpoint file, or run folder holding checkpoint.pt, to "
                       "continue")
    agent = parser.add_argument_group("agent (AgentConfig)")
    helps = field_help()
    for f in dataclasses.fields(AgentConfig):
        flag = "--" + f.name.replace("_", "-")
        text = f"{helps[f.name]} [default: {f.default}]"
        if f.type == "bool":
            agent.add_argument(flag, action=argparse.BooleanOptionalAction, help=text)
        else:
            agent.add_argument(flag, type=int if f.type == "int" else float, help=text)
    return parser


def resolve_device(device: str) -> str:
    """``auto`` as ``cuda`` when there is a GPU, else ``cpu``; any other name unchanged."""
    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def _options(given: dict[str, Any], stored: dict[str, Any] | None) -> RunOptions:
    values = RUN_DEFAULTS | (stored or {}) | given
    run_dir = values["run_dir"] or Path("runs") / (
        f"{values['env'].split(':')[-1]}-{time.strftime('%Y%m%d-%H%M%S')}-s{values['seed']}")
    return RunOptions(values["env"], dict(values["env_kwargs"]), int(values["num_envs"]),
                      resolve_device(values["device"]), int(values["seed"]), int(values["total_updates"]),
                      Path(run_dir), values["preset"])


def _load_resume(path: Path, given: dict[str, Any], overrides: dict[str, Any]
                 ) -> tuple[dict[str, Any], dict[str, Any], AgentConfig]:
    """The checkpoint to resume, the run options it stored, and its config; refuses changed settings."""
    checkpoint = path / CHECKPOINT_NAME if path.is_dir() else path
    payload = load_checkpoint(checkpoint)
    run_info = payload.get("run", {})
    stored = {"env": run_info.get("env_id"), "env_kwargs": run_info.get("env_kwargs", {}),
              "num_envs": run_info.get("num_envs"), "seed": payload["counters"]["seed"],
              "total_updates": payload["counters"]["total_updates"], "run_dir": checkpoint.parent}
    config = AgentConfig.from_dict(payload["config"])
    changed = [k for k, v in given.items() if k not in RESUME_MAY_CHANGE and stored.get(k) != v]
    changed += [k for k, v in overrides.items() if getattr(config, k) != v]
    if changed:
        raise SystemExit(f"--resume {path}: {sorted(changed)} differ from the checkpoint; a resumed run keeps its "
                         f"settings (only {sorted(RESUME_MAY_CHANGE)} may change)")
    return payload, stored, config


def episode_length_of(env_id: str, env_kwargs: dict[str, Any]) -> int | None:
    """The episode length (``max_epochs``) a registered Esper env id and its kwargs resolve to, read without
    making the env; None for an id that is not Esper's or is not registered yet ('module:Id')."""
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        return None
    if not str(spec.entry_point).startswith("esper_env."):
        return None
    return EnvConfig.from_kwargs(**{**spec.kwargs, **env_kwargs}).max_epochs


def _setup(given: dict[str, Any], overrides: dict[str, Any]
           ) -> tuple[dict[str, Any] | None, RunOptions, AgentConfig]:
    """The checkpoint to resume (or None), the run options and the agent config of this command line. A fresh
    run on an Esper id without ``--rollout-steps`` collects rollouts of one episode (``max_epochs`` steps): the
    config's default, 25, is the small task's length, and on the 20-epoch CIFAR-10 ids it would spend a fifth of
    every rollout on the start of an episode that the next rollout's reset throws away."""
    if "resume" in given:
        resume, stored, config = _load_resume(given["resume"], given, overrides)
        return resume, _options(given, stored), config
    options = _options(given, None)
    if "rollout_steps" not in overrides and (length := episode_length_of(options.env_id, options.env_kwargs)):
        overrides = overrides | {"rollout_steps": length}
    return None, options, AgentConfig(**overrides)


def with_preset(args: dict[str, Any]) -> dict[str, Any]:
    """The parsed flags over the values of the preset ``--preset`` names (none: the flags unchanged).

    A flag given on the command line wins over the preset's value; ``--env-kwargs`` is merged into the preset's
    env kwargs key by key, so that a device or a data folder can be added without restating the host config.
    """
    name = args.get("preset")
    if name is None:
        return dict(args)
    preset = presets.load(name)
    merged = preset.run | preset.agent | args
    if "env_kwargs" in args:
        if not isinstance(args["env_kwargs"], dict):
            raise SystemExit(f"--env-kwargs {json.dumps(args['env_kwargs'])}: expected a JSON object")
        merged["env_kwargs"] = preset.run.get("env_kwargs", {}) | args["env_kwargs"]
    return merged


def main(argv: Sequence[str] | None = None) -> int:
    args = with_preset(vars(build_parser().parse_args(argv)))
    field_names = {f.name for f in dataclasses.fields(AgentConfig)}
    overrides = {k: v for k, v in args.items() if k in field_names}
    given = {k: v for k, v in args.items() if k not in field_names}
    ranks = distributed.init(str(given.get("device", RUN_DEFAULTS["device"])))
    # Rank 0 alone reads the checkpoint and names the run folder (its name holds the time); the others get both.
    resume, options, config = ranks.on_main(lambda: _setup(given, overrides))
    options = dataclasses.replace(options, command=tuple(sys.argv[1:] if argv is None else argv))
    if isinstance(ranks, distributed.ProcessGroup):
        options = dataclasses.replace(options, device=str(ranks.device))
    try:
        run(options, config, resume, ranks=ranks)
    except KeyboardInterrupt:
        if ranks.is_main:
            print(f"interrupted; continue with: python -m esper_agent.train --resume {options.run_dir}",
                  file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
