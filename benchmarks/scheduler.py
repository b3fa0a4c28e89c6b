"""The queue that runs a campaign's slices (and a sharded screen's shards) on a machine's GPUs: each job in its own
process, at most ``per_slot`` processes on one GPU at once, the next job started on the GPU running the fewest as
one ends, and, for machines lent for a call of limited length, no job started once a :class:`Deadline` leaves too
little time. ``benchmarks.campaign`` documents the flags (``--gpus``, ``--per-gpu``, ``--stop-at``, ...)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

POLL_S = 2.0  # seconds between checks for a finished process: slices take minutes


class Process(Protocol):
    def poll(self) -> int | None: ...


def gpu_slots(gpus: list[int] | None) -> list[str | None]:
    """The ``CUDA_VISIBLE_DEVICES`` of each GPU a process may go to: ``gpus`` are torch's indices, mapped through
    this process's own ``CUDA_VISIBLE_DEVICES`` when it has one; ``[None]`` (leave it as it is) without a GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [v.strip() for v in visible.split(",") if v.strip()] if visible is not None else None
    count = len(names) if names is not None else torch.cuda.device_count()
    chosen = list(range(count)) if gpus is None else gpus
    wrong = [g for g in chosen if not 0 <= g < count]
    if wrong:
        raise ValueError(f"--gpus {wrong}: this machine shows {count} GPU(s) (indices 0 to {count - 1})")
    if not chosen:
        return [None]
    return [names[g] if names is not None else str(g) for g in chosen]


@dataclass(frozen=True)
class Deadline:
    """``--stop-at`` and ``--stop-margin-s`` (``benchmarks.campaign``'s docstring), with ``--time-limit-s`` and
    ``--eval-reserve-s`` as given."""

    stop_at: float
    margin_s: float
    time_limit_s: float | None = None
    eval_reserve_s: float = 0.0

    def left_s(self, now: float) -> float:
        return self.stop_at - now - self.margin_s

    def allows(self, now: float) -> bool:
        """Whether a slice may start ``now``: while more than the evaluation's reserve is left, since a fixed arm's
        slice is all evaluation and a learning slice may have finished training and need only its evaluation
        (with the limit at or below the reserve, it would pause before it on every run)."""
        return self.left_s(now) > self.eval_reserve_s

    def limit_s(self, now: float) -> float:
        """The training time a learning slice started ``now`` may spend."""
        left = self.left_s(now)
        return left if self.time_limit_s is None else min(left, self.time_limit_s)


Job = Any  # anything with ``name``, ``seed`` and ``log`` (campaign.Job, screen_shards.ShardJob)


def run_jobs(jobs: Sequence[Job], slots: Sequence[str | None], per_slot: int,
             start: Callable[[Job, str | None], Process], poll_s: float = POLL_S, deadline: Deadline | None = None,
             clock: Callable[[], float] = time.time,
             limit: Callable[[Job, float], Job] = lambda job, limit_s: job) -> dict[Job, int]:
    """Start the jobs in order, each on the slot (GPU) running the fewest (the first of those), never more than
    ``per_slot`` on one, none once ``deadline`` leaves too little time (those are counted and left for the next
    run); wait for all that started; their exit codes. Under a deadline each job starts as ``limit(job, seconds
    it may train)`` makes it."""
    pending, running, late = list(jobs), [[] for _ in slots], 0
    codes: dict[Job, int] = {}
    while pending or any(running):
        for procs in running:
            for job, process in list(procs):
                if (code := process.poll()) is not None:
                    codes[job] = code
                    procs.remove((job, process))
        while pending and (free := [k for k, procs in enumerate(running) if len(procs) < per_slot]):
            job, now = pending.pop(0), clock()
            if deadline is not None and not deadline.allows(now):
                late += 1
                continue
            slot = min(free, key=lambda k: len(running[k]))
            running[slot].append((job, start(job if deadline is None else limit(job, deadline.limit_s(now)),
                                             slots[slot])))
            print(f"started {job.name} seed {job.seed} on GPU {slots[slot]} (log {job.log})", flush=True)
        if any(running):
            time.sleep(poll_s)
    if late:
        print(f"not started, too close to --stop-at: {late} slice(s); run the same command again", flush=True)
    return codes
