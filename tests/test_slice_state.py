"""The training clock of a learning slice: when a run pauses, predicted from the last step's length."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import slice_state
from benchmarks.slice_state import Paused, TrainingClock


@pytest.fixture
def now(monkeypatch):
    """A settable clock in place of time.perf_counter: now[0] is the time in seconds."""
    t = [1000.0]
    monkeypatch.setattr(slice_state.time, "perf_counter", lambda: t[0])
    return t


def test_another_step_is_started_only_if_one_as_long_as_the_last_ends_within_the_limit(now):
    clock = TrainingClock(100.0)
    now[0] += 30  # the first step, its setup included
    clock.step_done()
    assert clock.last_step_s == 30 and not clock.no_time_for_another_step()  # 30 + 30 <= 100
    now[0] += 45
    clock.step_done()
    assert clock.last_step_s == 45 and clock.no_time_for_another_step()  # 75 + 45 > 100, though 25 s are left
    assert not clock.out_of_time()


def test_the_prediction_is_the_last_step_not_the_longest_nor_the_first(now):
    clock = TrainingClock(100.0)
    now[0] += 40
    clock.step_done()
    now[0] += 25
    clock.step_done()
    assert not clock.no_time_for_another_step()  # 65 + 25 <= 100 (by the first or longest step, 65 + 40 > 100)
    now[0] += 10
    clock.step_done()
    assert not clock.no_time_for_another_step()  # 75 + 10 <= 100: not a pause once half the limit has passed


def test_a_step_predicted_to_end_at_the_limit_is_not_started(now):
    clock = TrainingClock(100.0)
    now[0] += 50
    clock.step_done()
    assert clock.no_time_for_another_step()  # 50 + 50 reaches the limit: the limit is where training stops
    clock = TrainingClock(100.0)
    now[0] += 49.5
    clock.step_done()
    assert not clock.no_time_for_another_step()


def test_without_a_limit_training_never_pauses(now):
    clock = TrainingClock(None, eval_reserve_s=50.0)
    now[0] += 10**6
    clock.step_done()
    assert not clock.no_time_for_another_step()
    clock.pause_unless_evaluation_fits("arm seed 0", Path("seed0.ckpt"))  # does not raise


def test_the_evaluation_pauses_when_less_than_its_reserve_is_left(now):
    clock = TrainingClock(100.0, eval_reserve_s=40.0)
    clock.resume(500.0, [], host_epochs=0)
    now[0] += 59
    clock.pause_unless_evaluation_fits("arm seed 0", Path("seed0.ckpt"))  # 41 s left
    now[0] += 2
    with pytest.raises(Paused, match="less than --eval-reserve-s 40 s"):
        clock.pause_unless_evaluation_fits("arm seed 0", Path("seed0.ckpt"))
    assert clock.total_s() == 561  # earlier runs' seconds count toward the slice, not toward this run's limit


def test_a_resumed_clock_keeps_the_earlier_runs_and_adds_its_own_on_its_device_and_code(now, monkeypatch):
    monkeypatch.setattr(slice_state, "run_stamp", lambda: {"git_commit": "abc", "git_dirty": False, "torch": "2.x",
                                                           "created": "now"})
    earlier = [{"device": "GPU A", "git_commit": "old", "from_host_epochs": 0, "to_host_epochs": 640}]
    clock = TrainingClock(100.0, device="GPU B")
    clock.resume(300.0, earlier, host_epochs=640)
    now[0] += 20
    saved = clock.saved(1280)
    assert saved["train_seconds"] == 320  # all runs' seconds, as before
    assert saved["runs"] == [*earlier, {"device": "GPU B", "git_commit": "abc", "git_dirty": False, "torch": "2.x",
                                        "from_host_epochs": 640, "to_host_epochs": 1280, "train_seconds": 20}]
    assert len(earlier) == 1  # the caller's list is left as it was


def test_a_fresh_clock_has_one_run_from_zero(now):
    clock = TrainingClock(None, device="cpu")
    now[0] += 5
    [run] = clock.runs(12)
    assert (run["device"], run["from_host_epochs"], run["to_host_epochs"], run["train_seconds"]) == ("cpu", 0, 12, 5)
