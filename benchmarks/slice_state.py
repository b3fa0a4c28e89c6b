"""What a ``compare_agents`` slice carries from training to evaluation, and what lets a learning slice's training
span runs: the trained policies (:class:`Trained`), the pause at ``--time-limit-s`` or before an evaluation that
would overrun it (:class:`Paused`, :class:`TrainingClock`), the record of which runs trained it (device and code
of each: :meth:`TrainingClock.runs`) and the check that a saved state continues only under the settings it was
saved with."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import run_stamp


@dataclass
class Trained:
    """What a slice evaluates: the arm's actor, its training curve and seconds; for a learning arm, the same
    policy sampling its actions (``sampled_actor``, evaluated with ``--eval-sampled``); for an esper_agent run with
    ``select_best_window``, also the last policy trained (``last_actor``, evaluated on the same episodes, so the
    slice shows what the choice changed) and which policy was kept (``selection``)."""

    actor: Any
    curve: list[dict] = field(default_factory=list)
    train_seconds: float = 0.0
    last_actor: Any = None
    selection: dict[str, Any] | None = None
    sampled_actor: Any = None
    training_runs: list[dict[str, Any]] = field(default_factory=list)


class Paused(Exception):
    """A learning slice stopped at ``--time-limit-s`` with its training state saved; rerun to continue it."""


class TrainingClock:
    """This run's training time against ``--time-limit-s``, plus what earlier runs of the slice spent; with
    ``--eval-reserve-s``, the seconds of the limit a slice's evaluation needs. Training runs in steps (an update,
    a rollout) whose state is saved after each; :meth:`no_time_for_another_step` predicts the next step's length
    by the last one's.

    It also keeps the slice's runs, each with the device (``device``) and code it trained on: a slice that spans
    runs can span machines and commits, and the slice's own ``device`` and ``git_commit`` name only the run that
    finished it. A state saved before runs were recorded has none, so its first recorded run starts past 0 host
    epochs."""

    def __init__(self, limit_s: float | None, eval_reserve_s: float = 0.0, device: str = "") -> None:
        self.limit_s, self.earlier_s, self.start = limit_s, 0.0, time.perf_counter()
        self.eval_reserve_s, self.device = eval_reserve_s, device
        self.last_step_s, self._step_start = 0.0, self.start
        self.earlier_runs: list[dict[str, Any]] = []
        self.from_host_epochs = 0
        self._code: dict[str, Any] | None = None  # this run's commit and torch, asked once (git is not free)

    def resume(self, train_seconds: float, runs: list[dict[str, Any]], host_epochs: int) -> None:
        """Continue a saved state: its earlier runs' training seconds and runs; this run starts at ``host_epochs``."""
        self.earlier_s, self.earlier_runs, self.from_host_epochs = float(train_seconds), list(runs), host_epochs

    def runs(self, host_epochs: int) -> list[dict[str, Any]]:
        """The earlier runs and this one, which has trained up to ``host_epochs`` so far."""
        if self._code is None:  # plain values: a checkpoint loads with weights_only (no torch's TorchVersion)
            stamp = run_stamp()
            self._code = {"git_commit": stamp["git_commit"], "git_dirty": stamp["git_dirty"],
                          "torch": str(stamp["torch"])}
        this = {"device": self.device, **self._code, "from_host_epochs": self.from_host_epochs,
                "to_host_epochs": host_epochs, "train_seconds": time.perf_counter() - self.start}
        return [*self.earlier_runs, this]

    def saved(self, host_epochs: int) -> dict[str, Any]:
        """What a learning slice's saved state keeps of its clock: seconds and runs up to ``host_epochs``."""
        return {"train_seconds": self.total_s(), "runs": self.runs(host_epochs)}

    def step_done(self) -> None:
        """Mark the end of a training step (its save included); the first step's length includes the setup
        before it, which errs on the side of pausing."""
        now = time.perf_counter()
        self.last_step_s, self._step_start = now - self._step_start, now

    def no_time_for_another_step(self) -> bool:
        """Whether another step as long as the last would reach the limit. Pausing before it, rather than
        starting it and being killed at the call's end, spends no GPU time on a step whose work would be lost,
        hands the GPU to the processes beside it, and cuts no save short, unless the step runs longer than
        the last (``benchmarks.campaign``'s ``--stop-margin-s`` is for that). A MaskablePPO rollout on a shared
        GPU can take most of a call's limit, so checking only whether the limit has passed is not enough."""
        return self.out_of_time(self.last_step_s)

    def out_of_time(self, reserve_s: float = 0.0) -> bool:
        """Whether less than ``reserve_s`` of the limit is left (none: never)."""
        return self.limit_s is not None and time.perf_counter() - self.start >= self.limit_s - reserve_s

    def pause_unless_evaluation_fits(self, who: str, saved: Path) -> None:
        """Called once training is done: raise :class:`Paused` when the evaluation would overrun the limit, so that
        a lent machine's call ends in time; the saved state holds the finished training, and the next run goes
        straight to the evaluation."""
        if self.eval_reserve_s > 0 and self.out_of_time(self.eval_reserve_s):
            raise Paused(f"{who}: trained, paused before its evaluation (less than --eval-reserve-s "
                         f"{self.eval_reserve_s:g} s of --time-limit-s left); state in {saved}")

    def total_s(self) -> float:
        return self.earlier_s + time.perf_counter() - self.start


def check_saved_settings(saved: Path, settings: dict[str, Any], expected: dict[str, Any]) -> None:
    """Refuse to continue the state ``saved`` under other settings than it was saved with (``settings``)."""
    differ = sorted(k for k in expected if settings.get(k) != expected[k])
    if differ:
        raise ValueError(f"{saved} was saved with other {', '.join(differ)} than this run "
                         f"({ {k: settings.get(k) for k in differ} } against { {k: expected[k] for k in differ} }); "
                         "continue it with the settings it was saved with, or delete it to start that slice over")
