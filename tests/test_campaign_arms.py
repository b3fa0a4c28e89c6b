"""``benchmarks.campaign`` schedules every arm ``compare_agents`` takes (its own, ``plan:<name>``,
``static:<name>``, ``oracle``), checked by ``compare_agents``' parsing, and passes ``--oracle-from`` and
``--sb3-kwargs`` on to each slice, a sweep configuration's MaskablePPO slices in their own labelled folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import campaign, compare_agents

ENV = "Esper-Synthetic-v0"
FAMILY = {"host": "family", "device": "cpu", "max_epochs": 2, "synthetic_train_size": 256, "synthetic_val_size": 64,
          "synthetic_test_size": 64, "synthetic_image_size": 16, "batch_size": 64, "condition": "noise40"}
SWEEP = {"learning_rate": 1e-4, "normalize": "obs"}


def _jobs(out: Path, *argv: str) -> list[campaign.Job]:
    args, passed = campaign.build_parser().parse_known_args(["--seeds", "0", *argv, "--env", ENV, "--out", str(out)])
    args.seeds = campaign.parse_seeds(args.seeds)
    return campaign.plan(args, passed)


def _summary(path: Path) -> Path:
    """A screen summary whose best fixed arm on noise40 is static-small."""
    path.write_text(json.dumps([{"arm": arm, "kind": "static", "condition": "noise40", "return": value}
                                for arm, value in (("static-small", 70.0), ("static-seedling", 60.0))]))
    return path


def test_the_campaign_schedules_plan_static_and_oracle_arms_and_passes_their_flags_on(tmp_path, monkeypatch):
    _summary(tmp_path / "summary.json")
    monkeypatch.chdir(tmp_path)  # the summary named relative to here, where the processes run too
    jobs = _jobs(tmp_path / "out", "--arms", "oracle", "plan:grow-x2@0", "static:small", "maskable_flat",
                 "--oracle-from", "summary.json", "--sb3-kwargs", json.dumps(SWEEP),
                 "--label", "lr1e-4", "--env-kwargs", json.dumps(FAMILY), "--eval-episodes", "1")
    assert [j.arm for j in jobs] == ["maskable_flat", "oracle", "plan:grow-x2@0", "static:small"]
    assert [j.folder.name for j in jobs] == ["maskable_flat-lr1e-4", "oracle", "plan_grow-x2_at0", "static_small"]
    for job in jobs:
        args = compare_agents.parse_args(list(job.argv))
        assert args.arms == [job.arm] and args.oracle_from == Path("summary.json")
        assert args.sb3_kwargs == SWEEP
        assert compare_agents.slice_folder(args.out, args.env, job.arm, args.label) == job.folder
    torch.set_num_threads(1)
    compare_agents.main(list(jobs[1].argv))  # the oracle's slice, as its process would run it
    record = json.loads(jobs[1].slice_path.read_text())
    assert record["oracle"]["choice"] == {"noise40": "static-small"}
    assert [e["played_arm"] for e in record["episodes"]] == ["static-small"]
    assert jobs[1].state() == "done" and jobs[2].state() == "to run"


def test_arms_and_flags_are_refused_as_compare_agents_refuses_them(tmp_path, capsys):
    for argv in (["--arms", "plan:grow-x9@0"], ["--arms", "oracle"], ["--arms", "walk"],
                 ["--arms", "maskable_flat", "--sb3-kwargs", json.dumps({"lr": 1e-4})]):
        with pytest.raises(SystemExit):
            _jobs(tmp_path, *argv)
    err = capsys.readouterr().err
    assert "'grow-x9@0' is no plan" in err and "needs --oracle-from" in err and "arm 'walk'" in err
    assert "key 'lr' is not one" in err


def test_a_sweep_configuration_needs_a_label_and_the_default_keeps_its_folders(tmp_path):
    with pytest.raises(ValueError, match=r"--sb3-kwargs .* without --label: expected a label"):
        _jobs(tmp_path, "--arms", "maskable_multidiscrete", "--sb3-kwargs", json.dumps(SWEEP))
    jobs = _jobs(tmp_path, "--arms", "maskable_flat", "esper_agent", "heuristic", "--label", "x")
    assert [j.folder.name for j in jobs] == ["maskable_flat", "esper_agent-x", "heuristic"]
    swept = _jobs(tmp_path, "--arms", "maskable_flat", "esper_agent", "heuristic", "--label", "x",
                  "--sb3-kwargs", json.dumps(SWEEP))
    assert [j.folder.name for j in swept] == ["maskable_flat-x", "esper_agent-x", "heuristic"]
    assert _jobs(tmp_path, "--arms", "heuristic", "--sb3-kwargs", json.dumps(SWEEP))[0].folder.name == "heuristic"
