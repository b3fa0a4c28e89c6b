"""The read's rehearsal: missing slices cloned onto their own reset seeds, what the slices measured exchanged among
them (nothing of it kept in place), the report run on the copy and only its layout shown."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from benchmarks import rehearse_read
from benchmarks.compare_agents import eval_env_seeds
from benchmarks.h2h_arms import folder_name

CONDITIONS = ("full", "pool5k")


def _slice(arm: str, seed: int, test: float) -> dict:
    episodes = [{"env_seed": env_seed, "return": test - 0.1 + 0.01 * i, "val_accuracy": test,
                 "test_accuracy": test + 0.01 * i, "seed_params": 0.0, "rollback": False, "length": 6,
                 "invalid_rate": 0.0, "condition": CONDITIONS[i], "ops": [], "params": 1e4, "train_flops": 2e12}
                for i, env_seed in enumerate(eval_env_seeds(seed, 2, 1000))]
    return {"arm": arm, "seed": seed, "episodes": episodes, "eval_seed_stride": 1000, "budget_host_epochs": 0,
            "horizon": None, "train_seconds": 10.0 + seed, "eval_seconds": 1.0 + test, "device": "cpu",
            "curve": [], "agent_kwargs": {"learning_rate": 0.001}}


def _campaign(folder: Path, slices: list[dict]) -> None:
    for s in slices:
        path = folder / folder_name(s["arm"]) / f"seed{s['seed']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(s))


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_missing_slice_is_cloned_onto_its_own_reset_seeds(tmp_path):
    _campaign(tmp_path, [_slice("static", 0, 0.5), _slice("static", 2, 0.6), _slice("heuristic", 0, 0.55)])
    written = rehearse_read.clone_missing(tmp_path, {"static": [0, 1, 2, 3], "heuristic": [0]})
    assert written == ["static seed1", "static seed3"]
    clone = json.loads((tmp_path / "static" / "seed3.json").read_text())
    assert clone["seed"] == 3
    assert [e["env_seed"] for e in clone["episodes"]] == eval_env_seeds(3, 2, 1000)
    assert clone["episodes"][0]["test_accuracy"] == 0.6  # from seed 2, the latest
    with pytest.raises(SystemExit, match="random: no finished slice"):
        rehearse_read.clone_missing(tmp_path, {"random": [0]})


def test_scrambling_moves_every_measured_value_and_keeps_reset_seeds_conditions_and_config():
    slices = [_slice(arm, seed, test) for seed in range(4)
              for arm, test in (("static", 0.5), ("heuristic", 0.6), ("oracle", 0.7))]
    before = json.loads(json.dumps(slices))
    rehearse_read.scramble(slices, random.Random(1))

    def measured(group: list[dict]) -> Counter:
        return Counter((e["return"], e["test_accuracy"]) for s in group for e in s["episodes"])

    assert measured(slices) == measured(before)  # the same values, dealt anew
    assert Counter(s["eval_seconds"] for s in slices) == Counter(s["eval_seconds"] for s in before)
    static_tests = [e["test_accuracy"] for s in slices if s["arm"] == "static" for e in s["episodes"]]
    assert set(static_tests) - {0.5, 0.51}, "static kept only its own episodes"
    for s, b in zip(slices, before, strict=True):
        assert [(e["env_seed"], e["condition"]) for e in s["episodes"]] == \
               [(e["env_seed"], e["condition"]) for e in b["episodes"]]
        assert (s["arm"], s["seed"], s["agent_kwargs"]) == (b["arm"], b["seed"], b["agent_kwargs"])


def test_the_rehearsal_runs_the_report_on_a_copy_and_shows_only_its_layout(tmp_path, capsys):
    campaign = tmp_path / "results" / "Esper-Synthetic-v0"
    _campaign(campaign, [_slice(arm, seed, test) for seed in (0, 1)
                         for arm, test in (("static", 0.5), ("heuristic", 0.6))] + [_slice("random", 0, 0.4)])
    before = _files(campaign)
    code = rehearse_read.main([str(campaign), "--into", str(tmp_path / "copy"), "--expect", "0-1", "static",
                               "heuristic", "random"])
    out = capsys.readouterr().out
    assert code == 0
    assert _files(campaign) == before  # the campaign's own folder untouched
    copy = tmp_path / "copy" / "Esper-Synthetic-v0"
    assert (copy / "random" / "seed1.json").exists() and (copy / "table.md").exists()
    assert "1 cloned: random seed1" in out and "table.md" in out
    layout = out.split("\n", 2)[2]
    assert "| heuristic |" in layout and not any(c.isdigit() for c in layout)


def test_bad_arguments_are_refused_before_anything_is_written(tmp_path, capsys):
    _campaign(tmp_path / "c", [_slice("static", 0, 0.5)])
    (tmp_path / "taken").mkdir()
    for argv, message in (
            ([str(tmp_path / "c"), "--into", str(tmp_path / "taken")], "exists; expected a new folder"),
            ([str(tmp_path / "nowhere"), "--into", str(tmp_path / "x")], "expected a campaign's folder"),
            ([str(tmp_path / "c"), "--into", str(tmp_path / "x"), "--expect", "0-7"], "at least one arm folder"),
            ([str(tmp_path / "c"), "--into", str(tmp_path / "x"), "--expect", "7-0", "static"], "is empty"),
            ([str(tmp_path / "c"), "--into", str(tmp_path / "x"), "--expect", "0-1", "random"], "no slice under")):
        with pytest.raises(SystemExit):
            rehearse_read.main(argv)
        assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
