"""Two slices of one configuration compared update by update (benchmarks.studies.same_training)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.studies import same_training


def _slice() -> dict:
    telemetry = {"loss/policy": -0.01, "time/update_s": 0.06}
    return {"env": "E", "env_kwargs": {}, "agent_kwargs": {"learning_rate": 0.001}, "seed": 0, "git_commit": "abc1234",
            "device": "cpu", "curve": [{"telemetry": dict(telemetry), "return": 0.1, "final_accuracy": 0.2}
                                       for _ in range(2)],
            "episodes": [{"return": 0.3}], "sampled_episodes": [{"return": 0.4}]}


def test_timings_aside_any_difference_is_named(tmp_path: Path, capsys) -> None:
    a, b = _slice(), _slice()
    b["curve"][1]["telemetry"]["time/update_s"] = 9.0  # timings differ run to run
    assert same_training.differences(a, b) == []
    b["curve"][1]["telemetry"]["loss/policy"] = -0.02
    b["sampled_episodes"] = [{"return": 0.5}]
    assert same_training.differences(a, b) == ["update 2, loss/policy: -0.01 against -0.02",
                                               "sampled_episodes' returns: [0.4] against [0.5]"]
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, slice_ in zip(paths, (a, b), strict=True):
        path.write_text(json.dumps(slice_))
    assert same_training.main([str(p) for p in paths]) == 1
    assert "differ:\nupdate 2, loss/policy" in capsys.readouterr().out
    assert same_training.main([str(paths[0]), str(paths[0])]) == 0
