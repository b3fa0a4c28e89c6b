"""The pilot's paired read of candidates against a reference, and its report on the committed replay pilot."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.studies import pilot_paired

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks/results"
REFERENCE = RESULTS / "h2h_v2_sweep/Esper-CIFAR10-Fast-v0"
PILOT = RESULTS / "replay_pilot/Esper-CIFAR10-Fast-v0"
COMMITTED = pytest.mark.skipif(not (REFERENCE.exists() and PILOT.exists()),
                               reason="the committed sweep and replay pilot are not in this checkout")


def test_paired_returns_match_reset_seeds_and_group_by_learner_seed() -> None:
    reference = [{"env_seed": 1, "return": 0.50}, {"env_seed": 2, "return": 0.40}, {"env_seed": 3, "return": 0.60}]
    candidate = [{"seed": 7, "env_seed": 2, "return": 0.45}, {"seed": 7, "env_seed": 1, "return": 0.40},
                 {"seed": 5, "env_seed": 3, "return": 0.70}, {"seed": 5, "env_seed": 9, "return": 0.99}]
    paired = pilot_paired.paired_returns(candidate, reference)
    assert list(paired) == [5, 7]  # learner seeds in order; reset seed 9 has no reference episode
    assert paired[5] == pytest.approx([10.0]) and paired[7] == pytest.approx([5.0, -10.0])


def test_op_counts_reads_every_episodes_timeline() -> None:
    rows = [{"ops": [[0, "germinate", 1, "deepen"], [3, "prune", 1, None]]},
            {"ops": [[1, "germinate", 2, "widen"], [2, "fossilize", 2, None]]}, {"ops": []}]
    assert pilot_paired.op_counts(rows) == "2 / 1 / 1"


def test_fates_follow_each_seed_to_its_end() -> None:
    ops = [[0, "germinate", 1, "deepen"], [1, "germinate", 2, "widen_s"], [4, "fossilize", 1, None],
           [6, "germinate", 1, "deepen"],  # slot 1 grows again after its keep
           [9, "germinate", 2, "widen_l"],  # slot 2 free again without a keep or prune: the timeout took it
           [12, "prune", 1, None], [13, "prune", 0, None]]  # nothing was planted in slot 0
    assert pilot_paired.fates(ops) == {"kept": 1, "pruned": 1, "let go": 2}  # the second slot-2 seed: live at the end


def test_episode_fates_are_exact_where_the_episode_counted_its_seeds():
    ops = [[0, "germinate", 0, "deepen"], [2, "germinate", 1, "deepen"], [3, "fossilize", 1, None]]
    counted = {"planted": 5, "fossilized": 1, "pruned": 3, "holding_timeouts": 2, "rolled_back": 1}
    assert pilot_paired.episode_fates({"ops": ops}) == {"kept": 1, "let go": 1}  # from the ops alone
    assert pilot_paired.episode_fates({"ops": ops, "seeds": counted}) == {"kept": 1, "pruned": 1, "timed out": 2,
                                                                          "let go": 1}  # the rolled back one
    assert pilot_paired.fate_cell([{"ops": ops}, {"ops": []}]) == "0.5 / 0.0 / 0.5"
    assert pilot_paired.fate_cell([{"ops": ops, "seeds": counted}, {"ops": [], "seeds": {**counted, "planted": 4}}]) \
        == "1.0 / 1.0 / 2.5 (2.0 timed out)"


@COMMITTED
def test_the_committed_read_is_what_the_study_computes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(RESULTS.parents[1])  # the report names its folders as given: relative to the repo root
    text = pilot_paired.report(REFERENCE.relative_to(RESULTS.parents[1]), "esper_agent-e3",
                               PILOT.relative_to(RESULTS.parents[1]))
    assert text == (PILOT / "paired.md").read_text(), (
        "rebuild it with the command in benchmarks/studies/pilot_paired.py's docstring")


@COMMITTED
def test_a_missing_reference_is_named() -> None:
    with pytest.raises(SystemExit, match=r"no reference 'esper_agent-e9' in .*; it has \["):
        pilot_paired.report(REFERENCE, "esper_agent-e9", PILOT)
