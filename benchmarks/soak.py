"""Soak test: a vector env and a policy run for a given wall time while faults are injected at a given rate.

Every fault (``EsperVectorEnv.inject_fault``, kinds drawn uniformly) must end in a governor rollback of that very
sub-env on the step that follows it; the report counts faults injected and survived, mismatches either way,
episodes, rollbacks, invalid actions, non-finite observations or rewards, the host RSS high-water mark and (on
CUDA) device memory high-water marks, and env steps/s. The policy is the PPO agent (``esper_agent.trainer.Trainer``,
``update()`` in a loop), the heuristic, the uniform-over-valid ``random`` actor, or ``uniform`` (the action
space's ``sample()``, so invalid actions too).

    python -m benchmarks.soak --minutes 30 --device cuda --fault-rate 0.01 --num-envs 8
    python -m benchmarks.soak --minutes 1 --device cpu --fault-rate 0.05 --policy random \\
        --env-kwargs '{"synthetic_train_size": 256, "synthetic_val_size": 128, "batch_size": 64, "max_epochs": 4}'

A fault that does not end in a rollback of its sub-env counts as a mismatch and fails the soak.

The JSON report goes to ``--out`` (a folder, default ``benchmarks/results``, or a ``.json`` file) as
``soak-<device>.json``, with the device named; the exit status is 1 when any check failed.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

import esper_env  # noqa: F401  (registers the Esper ids)
from benchmarks.common import device_name, device_tag, run_stamp, write_json
from esper_agent.baselines import RandomValidActor
from esper_agent.config import AgentConfig
from esper_agent.envs import VectorEnvDriver, autoreset_mode
from esper_agent.heuristic import HeuristicActor, env_host
from esper_agent.trainer import Trainer
from esper_env.vector_env import FAULTS

POLICIES = ("agent", "heuristic", "random", "uniform")
MAX_EXAMPLES = 20  # mismatches kept verbatim in the report; the rest are only counted
SAMPLE_EVERY_S = 10.0  # seconds between memory samples in the report's time series


@dataclass
class SoakCounts:
    """What :class:`FaultInjector` saw, summed over sub-envs and steps."""

    vector_steps: int = 0
    transitions: int = 0  # sub-env steps that trained (NEXT_STEP reset steps excluded)
    episodes: int = 0
    rollbacks: int = 0
    invalid_actions: int = 0
    faults_injected: Counter[str] = field(default_factory=Counter)
    faults_survived: int = 0  # the fault's sub-env rolled back and terminated on that step
    missed: list[dict[str, Any]] = field(default_factory=list)  # faults without a rollback (first MAX_EXAMPLES)
    missed_count: int = 0
    unprovoked_rollbacks: int = 0  # rollbacks on a sub-env that had no fault injected (natural divergence)
    nonfinite_observations: int = 0  # sub-env observations with a NaN or inf
    nonfinite_rewards: int = 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["faults_injected"] = dict(self.faults_injected)
        data["faults_injected_total"] = sum(self.faults_injected.values())
        return data


class FaultInjector(VectorWrapper):
    """Injects faults into an Esper vector env between steps and checks that each one ends in a rollback.

    ``rate``: probability per sub-env step of a fault (kind drawn uniformly from ``FAULTS``); ``schedule``:
    extra faults at given vector-step indices (counted from construction), ``{step: [(sub_env, kind), ...]}``.
    Under the NEXT_STEP autoreset mode a sub-env whose episode just ended is reset by the next step, which
    discards any fault: such sub-envs get none (and a scheduled one raises, as a mistake of the caller).
    """

    def __init__(self, env: VectorEnv, rate: float = 0.0, seed: int = 0,
                 schedule: dict[int, list[tuple[int, str]]] | None = None) -> None:
        super().__init__(env)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate {rate!r}; expected a probability in [0, 1]")
        self.rate, self.rng, self.schedule = rate, np.random.default_rng(seed), dict(schedule or {})
        self.counts = SoakCounts()
        self.next_step_mode = autoreset_mode(env) == AutoresetMode.NEXT_STEP
        self._resetting = np.zeros(self.num_envs, bool)  # NEXT_STEP: the next step resets these sub-envs

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        mask = (options or {}).get("reset_mask")
        self._resetting[np.ones(self.num_envs, bool) if mask is None else mask] = False
        return obs, info

    def step(self, actions: Any):
        faults = self._draw_faults()
        for index, kind in faults.items():
            self.env.unwrapped.inject_fault(index, kind)
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        self._account(faults, np.asarray(rewards), np.asarray(terminated), np.asarray(truncated), info)
        self.counts.nonfinite_observations += int((~np.isfinite(np.asarray(obs))).any(axis=-1).sum())
        if self.next_step_mode:
            self._resetting = np.asarray(terminated) | np.asarray(truncated)
        self.counts.vector_steps += 1
        return obs, rewards, terminated, truncated, info

    def _draw_faults(self) -> dict[int, str]:
        draws = self.rng.random(self.num_envs) < self.rate
        kinds = self.rng.integers(len(FAULTS), size=self.num_envs)
        faults = {int(i): FAULTS[kinds[i]] for i in np.flatnonzero(draws & ~self._resetting)}
        for index, kind in self.schedule.get(self.counts.vector_steps, []):
            if self._resetting[index]:
                raise ValueError(f"scheduled fault {kind!r} at step {self.counts.vector_steps} on sub-env {index}, "
                                 "which this step resets (NEXT_STEP autoreset); schedule it one step later")
            faults[index] = kind
        return faults

    def _account(self, faults: dict[int, str], rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                 info: dict[str, Any]) -> None:
        c, n = self.counts, self.num_envs
        info = stepped_info(info, n)
        stepped = np.asarray(info.get("_rollback", np.ones(n, bool)), bool)
        rollback = np.asarray(info.get("rollback", np.zeros(n, bool)), bool) & stepped
        invalid = np.asarray(info.get("invalid_action", np.zeros(n, bool)), bool)
        c.transitions += int(stepped.sum())
        c.episodes += int((terminated | truncated).sum())
        c.rollbacks += int(rollback.sum())
        c.invalid_actions += int((invalid & stepped).sum())
        c.nonfinite_rewards += int((~np.isfinite(rewards)).sum())
        injected = np.zeros(n, bool)
        for index, kind in faults.items():
            injected[index] = True
            c.faults_injected[kind] += 1
            if rollback[index] and terminated[index]:
                c.faults_survived += 1
                continue
            c.missed_count += 1
            if len(c.missed) < MAX_EXAMPLES:
                c.missed.append({"step": c.vector_steps, "sub_env": index, "kind": kind,
                                 "rollback": bool(rollback[index]), "terminated": bool(terminated[index]),
                                 "stepped": bool(stepped[index])} | _measured(info, index))
        c.unprovoked_rollbacks += int((rollback & ~injected).sum())


def stepped_info(info: dict[str, Any], num_envs: int) -> dict[str, Any]:
    """The info of the step just taken, for every sub-env.

    Under SameStep autoreset a sub-env that finished has its reset info in the top-level row and the step's
    own row in ``final_info`` (as Gymnasium's ``SyncVectorEnv`` lays it out): take those rows from there.
    """
    done = np.asarray(info.get("_final_info", np.zeros(num_envs, bool)), bool)
    if not done.any():
        return info
    merged = dict(info)
    for key, value in info["final_info"].items():
        if isinstance(value, dict):
            continue
        value = np.asarray(value)
        if key.startswith("_"):  # final_info's flags are already cleared outside the finished rows
            merged[key] = np.asarray(info.get(key, np.zeros(num_envs, bool)), bool) | value
        else:
            here = np.asarray(info[key]) if key in info else np.zeros_like(value)
            merged[key] = np.where(done.reshape(-1, *[1] * (value.ndim - 1)), value, here)
    return merged


def _measured(info: dict[str, Any], index: int) -> dict[str, float]:
    """What the env measured on sub-env ``index`` this step, for a mismatch's record."""
    keys = ("epoch", "train_loss", "val_loss", "val_accuracy", "train_accuracy")
    return {k: float(np.asarray(info[k])[index]) for k in keys if k in info}


class UniformActor:
    """``action_space.sample()``: well-formed but often invalid actions (executed as WAIT and flagged)."""

    def __init__(self, space: gym.spaces.MultiDiscrete, seed: int) -> None:
        self.space = space
        self.space.seed(seed)

    def reset(self, num_envs: int) -> None:
        del num_envs

    def act(self, obs: np.ndarray, masks: Any, episode_start: np.ndarray) -> np.ndarray:
        return np.asarray(self.space.sample(), np.int64)


def current_rss_bytes() -> int:
    """The process's resident set size now (not the high-water mark), from ``/proc/self/statm``."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * resource.getpagesize()
    except (OSError, IndexError, ValueError):  # no procfs (macOS): the high-water mark is the best we have
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    scale = 1 if platform.system() == "Darwin" else 1024  # ru_maxrss is bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


class MemoryProbe:
    """Host RSS and CUDA memory high-water marks, plus a sample every ``SAMPLE_EVERY_S`` seconds.

    Each sample records the episodes finished so far, so the report shows memory against episodes (flat means
    no leak); ``on_sample`` (if given) is called after each sample, e.g. to write a partial report.
    """

    def __init__(self, device: str, counts: SoakCounts | None = None,
                 on_sample: Callable[[], None] | None = None) -> None:
        self.cuda = device.startswith("cuda")
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(device)
        self.device, self.start = device, time.perf_counter()
        self.counts, self.on_sample = counts or SoakCounts(), on_sample
        self.rss_start = self.rss_max = current_rss_bytes()
        self.samples: list[dict[str, float]] = []
        self._next = 0.0

    def poll(self) -> None:
        rss = current_rss_bytes()
        self.rss_max = max(self.rss_max, rss)
        elapsed = time.perf_counter() - self.start
        if elapsed >= self._next:
            sample = {"seconds": round(elapsed, 1), "episodes": self.counts.episodes, "rss_mib": rss / 2**20}
            if self.cuda:
                sample["cuda_allocated_mib"] = torch.cuda.memory_allocated(self.device) / 2**20
                sample["cuda_reserved_mib"] = torch.cuda.memory_reserved(self.device) / 2**20
            self.samples.append(sample)
            self._next = elapsed + SAMPLE_EVERY_S
            if self.on_sample is not None:
                self.on_sample()

    def sample_now(self) -> None:
        self._next = 0.0
        self.poll()

    def report(self) -> dict[str, Any]:
        mib = 2**20
        out: dict[str, Any] = {"host_rss_start_mib": self.rss_start / mib,
                               "host_rss_end_mib": current_rss_bytes() / mib,
                               "host_rss_max_sampled_mib": self.rss_max / mib,
                               "host_rss_high_water_mib": peak_rss_bytes() / mib,
                               "cuda_allocated_high_water_mib": None, "cuda_reserved_high_water_mib": None}
        # Growth after the first sample (taken once the env and the agent exist): flat means no leak.
        out["host_rss_growth_mib"] = out["host_rss_end_mib"] - self.samples[0]["rss_mib"]
        if self.cuda:
            out["cuda_allocated_high_water_mib"] = torch.cuda.max_memory_allocated(self.device) / mib
            out["cuda_reserved_high_water_mib"] = torch.cuda.max_memory_reserved(self.device) / mib
            out |= cuda_growth(self.samples, torch.cuda.memory_allocated(self.device) / mib)
        return out | {"memory_samples": self.samples}


def cuda_growth(samples: list[dict[str, float]], allocated_now_mib: float) -> dict[str, float]:
    """Allocated growth since the first sample, and the allocated/reserved range over the second half of the run.

    The first half includes warm-up (cuDNN autotuning, the first graph captures); flat memory means the
    second half's range is small and the episodes keep coming.
    """
    late = samples[len(samples) // 2:]
    return {"cuda_allocated_growth_mib": allocated_now_mib - samples[0]["cuda_allocated_mib"],
            "cuda_allocated_second_half_range_mib": [min(s["cuda_allocated_mib"] for s in late),
                                                     max(s["cuda_allocated_mib"] for s in late)],
            "cuda_reserved_second_half_range_mib": [min(s["cuda_reserved_mib"] for s in late),
                                                    max(s["cuda_reserved_mib"] for s in late)],
            "episodes_second_half": samples[-1]["episodes"] - late[0]["episodes"]}


def run_agent(envs: FaultInjector, args: argparse.Namespace, deadline: float, probe: MemoryProbe) -> dict[str, Any]:
    """PPO updates until the deadline (each update is a rollout of whole episodes, then the PPO epochs)."""
    episode_length = envs.unwrapped.config.max_epochs
    config = AgentConfig(rollout_steps=args.rollout_steps or episode_length, hidden_size=args.hidden_size,
                         num_minibatches=min(2, envs.num_envs))
    trainer = Trainer(envs, config, device=args.device, seed=args.seed, total_updates=10**9)
    anomalies: Counter[str] = Counter()
    nonfinite_losses = 0
    while time.perf_counter() < deadline:
        metrics = trainer.update()
        probe.poll()
        anomalies.update(a.split(":")[0] for a in metrics["anomalies"])
        nonfinite_losses += sum(1 for k, v in metrics.items()
                                if k.startswith("loss/") and isinstance(v, float) and not np.isfinite(v))
    return {"updates": trainer.update_index, "agent_config": config.to_dict(), "anomalies": dict(anomalies),
            "nonfinite_losses": nonfinite_losses}


def run_actor(envs: FaultInjector, args: argparse.Namespace, deadline: float, probe: MemoryProbe) -> dict[str, Any]:
    """A policy without learning, stepped through ``esper_agent``'s driver (all three autoreset modes)."""
    driver = VectorEnvDriver(envs)
    if args.policy == "heuristic":
        actor: Any = HeuristicActor(driver.num_slots, host=env_host(driver.envs))
    elif args.policy == "random":
        actor = RandomValidActor(driver.head_sizes, seed=args.seed)
    else:
        actor = UniformActor(envs.action_space, args.seed)
    actor.reset(driver.num_envs)
    obs, masks = driver.reset(args.seed)
    starts = np.ones(driver.num_envs, bool)
    while time.perf_counter() < deadline:
        step = driver.step(actor.act(obs, masks, starts))
        obs, masks, starts = step.obs, step.masks, step.episode_start
        probe.poll()
    return {}


def soak(args: argparse.Namespace, partial_path: Path | None = None) -> dict[str, Any]:
    """Run the soak and return its report (the JSON written by :func:`main`).

    With ``partial_path``, a partial report (counts and memory so far, ``"partial": true``) is written there at
    every memory sample, so a run cut short (a lost machine, a kill) still leaves its numbers behind.
    """
    kwargs = {**json.loads(args.env_kwargs), "device": args.device}
    probe = MemoryProbe(args.device)  # before the env: its construction counts towards the high-water marks
    envs = FaultInjector(gym.make_vec(args.env, num_envs=args.num_envs, **kwargs), args.fault_rate, args.seed)
    start, stamp = time.perf_counter(), run_stamp()
    probe.counts = envs.counts
    if partial_path is not None:
        probe.on_sample = lambda: write_report(partial_path, stamp | report_head(args, kwargs, envs.counts, start)
                                               | {"partial": True, "memory_samples": probe.samples})
    run = run_agent if args.policy == "agent" else run_actor
    extra = run(envs, args, start + 60.0 * args.minutes, probe)
    probe.sample_now()  # the last sample while the env and the agent still exist
    envs.close()
    head = report_head(args, kwargs, envs.counts, start)
    failures = {"fault_mismatches": head["missed_count"], "nonfinite_observations": head["nonfinite_observations"],
                "nonfinite_rewards": head["nonfinite_rewards"], "nonfinite_losses": extra.get("nonfinite_losses", 0)}
    return stamp | head | extra | probe.report() | {"ok": not any(failures.values()), "failures": failures}


def report_head(args: argparse.Namespace, kwargs: dict[str, Any], counts: SoakCounts, start: float
                ) -> dict[str, Any]:
    """The run's settings, its counts and rates so far."""
    elapsed = time.perf_counter() - start
    return {"device": device_name(args.device), "policy": args.policy, "env": args.env, "env_kwargs": kwargs,
            "num_envs": args.num_envs, "fault_rate": args.fault_rate, "fault_kinds": list(FAULTS), "seed": args.seed,
            "minutes": args.minutes, "elapsed_s": elapsed,
            "env_steps_per_s": counts.transitions / elapsed, "vector_steps_per_s": counts.vector_steps / elapsed,
            **counts.to_dict()}


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write the JSON report atomically (a reader never sees half a file)."""
    write_json(path, report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="wall time of the soak (minutes)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="torch device of the env and the agent (cpu, cuda, cuda:1)")
    parser.add_argument("--fault-rate", type=float, default=0.01, help="probability of a fault per sub-env step")
    parser.add_argument("--policy", choices=POLICIES, default="agent", help="who acts [default: agent]")
    parser.add_argument("--env", default="Esper-Synthetic-v0", help="Gymnasium id of an Esper env")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of extra gym.make_vec arguments")
    parser.add_argument("--num-envs", type=int, default=4, help="sub-envs (count)")
    parser.add_argument("--seed", type=int, default=0, help="seed of faults, env resets, policy")
    parser.add_argument("--hidden-size", type=int, default=64, help="agent: LSTM width (units)")
    parser.add_argument("--rollout-steps", type=int, default=None,
                        help="agent: env steps per sub-env per update [default: the env's max_epochs]")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"),
                        help="folder for soak-<device>.json, or a .json file path")
    return parser


def report_path(out: Path, device: str) -> Path:
    return out if out.suffix == ".json" else out / f"soak-{device_tag(device_name(device))}.json"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    path = report_path(args.out, args.device)
    report = soak(args, partial_path=path)
    write_report(path, report)
    print(json.dumps({k: v for k, v in report.items() if k not in ("memory_samples", "agent_config", "env_kwargs")},
                     indent=1))
    print(f"report: {path}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
