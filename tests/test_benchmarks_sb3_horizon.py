"""``benchmarks.compare_agents`` gives its MaskablePPO arms the horizon reading of its esper_agent arm.

The adapter's ``horizon`` decides whether SB3 bootstraps the episode's last reward from V(final observation)
(``tests/esper_env/test_sb3.py`` checks that against MaskablePPO's rollout buffer); here: which reading each arm
gets, that training builds the adapter with it, that each slice records it and that a paused slice does not
continue under another one.
"""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import compare_agents
from esper_env import sb3

TINY = {"device": "cpu", "max_epochs": 3, "synthetic_train_size": 256, "synthetic_val_size": 128,
        "synthetic_test_size": 128, "batch_size": 64}


def horizons(*argv: str) -> dict[str, str | None]:
    args = compare_agents.parse_args(["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), *argv])
    return {arm: compare_agents.horizon(arm, args) for arm in compare_agents.ARMS}


def test_every_learner_reads_the_horizon_as_esper_agent_does_unless_told():
    learners, fixed = compare_agents.LEARNING_ARMS, ("heuristic", "random", "static")
    default = horizons()
    assert [default[a] for a in learners] == ["terminal"] * 3  # AgentConfig's bootstrap_truncation is False
    assert [default[a] for a in fixed] == [None] * 3
    bootstrapped = horizons("--agent-kwargs", json.dumps({"bootstrap_truncation": True}))
    assert [bootstrapped[a] for a in learners] == ["truncated"] * 3
    told = horizons("--sb3-horizon", "truncated")
    assert [told[a] for a in learners] == ["terminal", "truncated", "truncated"]  # the flag is MaskablePPO's only
    with pytest.raises(SystemExit):
        horizons("--sb3-horizon", "episodic")
    flag = next(a for a in compare_agents.build_parser()._actions if a.dest == "sb3_horizon")
    assert tuple(flag.choices) == sb3.HORIZONS


@pytest.mark.parametrize(("agent_kwargs", "expected"), [({}, "terminal"), ({"bootstrap_truncation": True},
                                                                             "truncated")])
def test_the_maskable_arm_trains_and_records_under_that_reading(tmp_path, monkeypatch, agent_kwargs, expected):
    torch.set_num_threads(1)
    built, make = [], sb3.make_sb3_env

    def recording_make(*args, **kwargs):
        env = make(*args, **kwargs)
        built.append(env.horizon)
        return env

    monkeypatch.setattr(sb3, "make_sb3_env", recording_make)
    common = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "0", "--eval-episodes",
              "1", "--num-envs", "2", "--arms", "maskable_flat", "--budget-epochs", "12", "--out", str(tmp_path),
              "--agent-kwargs", json.dumps(agent_kwargs)]
    compare_agents.main([*common, "--time-limit-s", "0"])  # one rollout, then paused with its state saved
    other = "truncated" if expected == "terminal" else "terminal"
    with pytest.raises(ValueError, match="horizon"):
        compare_agents.main([*common, "--sb3-horizon", other])
    compare_agents.main(common)
    assert built == [expected, other, expected]
    slice_ = json.loads((tmp_path / "Esper-Synthetic-v0" / "maskable_flat" / "seed0.json").read_text())
    assert slice_["horizon"] == expected
