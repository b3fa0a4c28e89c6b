"""``benchmarks.scheduler``: the GPU queue on its own, with stand-in jobs and processes (no GPU, no campaign)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks import scheduler


@dataclass(frozen=True)
class _Job:
    name: str
    seed: int
    log: Path = Path("unused.log")
    limit_s: float | None = None


class _Done:
    def poll(self) -> int:
        return 0


def test_a_deadline_passes_each_job_its_seconds_through_the_limit_hook_and_holds_back_late_ones(capsys):
    jobs = [_Job("a", 0), _Job("b", 0), _Job("c", 0)]
    deadline = scheduler.Deadline(stop_at=1000.0, margin_s=100.0, time_limit_s=600.0, eval_reserve_s=200.0)
    times, started = iter([0.0, 500.0, 750.0]), []
    codes = scheduler.run_jobs(jobs, [None], 1, lambda job, slot: started.append(job) or _Done(), poll_s=0,
                               deadline=deadline, clock=lambda: next(times),
                               limit=lambda job, seconds: replace(job, limit_s=seconds))
    # a: the given 600 s; b: what is left (1000 - 500 - 100); c: 150 s left, not more than the 200-s reserve
    assert [(j.name, j.limit_s) for j in started] == [("a", 600.0), ("b", 400.0)]
    assert set(codes) == set(jobs[:2])  # keyed by the jobs as given, not as the hook made them
    assert "not started, too close to --stop-at: 1 slice(s)" in capsys.readouterr().out


def test_without_a_deadline_jobs_start_as_given_on_the_least_loaded_slot():
    jobs, placed = [_Job(f"j{i}", i) for i in range(4)], []
    codes = scheduler.run_jobs(jobs, ["0", "1"], 2, lambda job, slot: placed.append((job.name, slot)) or _Done(),
                               poll_s=0, limit=lambda job, seconds: None)  # never called without a deadline
    assert placed == [("j0", "0"), ("j1", "1"), ("j2", "0"), ("j3", "1")] and set(codes) == set(jobs)

