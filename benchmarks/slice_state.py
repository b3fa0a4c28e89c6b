"""What a ``compare_agents`` slice carries from training to evaluation, and what lets a learning slice's training
span runs: the trained policies (:class:`Trained`), the pause at ``--time-limit-s`` or before an evaluation that
would overrun it (:class:`Paused`, :class:`TrainingClock`) and the check that a saved state continues only under
the settings it was saved with."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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


class Paused(Exception):
    """A learning slice stopped at ``--time-limit-s`` with its training state saved; rerun to continue it."""


class TrainingClock:
    """This run's training time against ``--time-limit-s``, plus what earlier runs of the slice spent; with
    ``--eval-reserve-s``, the seconds of the limit a slice's evaluation needs. Training runs in steps (an update,
    a rollout) whose state is saved after each; :meth:`no_time_for_another_step` predicts the next step's length
    by the last one's."""

    def __init__(self, limit_s: float | None, earlier_s: float = 0.0, eval_reserve_s: float = 0.0) -> None:
        self.limit_s, self.earlier_s, self.start = limit_s, earlier_s, time.perf_counter()
        self.eval_reserve_s = eval_reserve_s
        self.last_step_s, self._step_start = 0.0, self.start

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
