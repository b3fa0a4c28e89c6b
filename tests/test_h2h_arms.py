"""The head-to-head's fixed arms in ``compare_agents``: the screen's plans and static sizes, the per-condition
oracle, and what every evaluation episode records (condition, ops, final params and training FLOPs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import compare_agents, h2h_arms
from benchmarks.screen import PlanActor
from benchmarks.screen_arms import FAMILY_SIZES, plan_step
from benchmarks.studies import pilot_paired
from esper_env.conditions import CONDITIONS

ENV = "Esper-Synthetic-v0"
FAMILY = {"host": "family", "device": "cpu", "max_epochs": 3, "synthetic_train_size": 256, "synthetic_val_size": 64,
          "synthetic_test_size": 64, "synthetic_image_size": 16, "batch_size": 64}


def _summary(path: Path, best: dict[str, str]) -> Path:
    """A screen summary in which arm ``best[c]`` has the best return on condition ``c``; every other fixed arm of
    the rows scores lower, and a heuristic and a mixture row score higher than all (the oracle ignores both)."""
    arms = sorted(set(best.values()) | {"static-seedling"})
    rows = [{"arm": arm, "kind": "plan" if arm.startswith("grow") else "static", "condition": c,
             "return": 60.0 + (10.0 if arm == chosen else arms.index(arm))}
            for c, chosen in best.items() for arm in arms]
    rows += [{"arm": "heuristic", "kind": "heuristic", "condition": c, "return": 99.0} for c in best]
    rows += [{"arm": "static-largest", "kind": "static", "condition": "mixture", "return": 99.0}]
    path.write_text(json.dumps(rows))
    return path


def _run(tmp_path: Path, kwargs: dict, *argv: str) -> Path:
    torch.set_num_threads(1)
    compare_agents.main(["--env", ENV, "--env-kwargs", json.dumps(kwargs), "--seeds", "0", "--out", str(tmp_path),
                         *argv])
    return tmp_path / ENV


def _episodes(folder: Path, arm: str) -> list[dict]:
    return json.loads((folder / h2h_arms.folder_name(arm) / "seed0.json").read_text())["episodes"]


def test_plan_and_static_spellings_name_the_family_set_and_nothing_else(tmp_path):
    assert h2h_arms.fixed_arm("plan:grow-x2@0").plan[0] == (0, 1, 0, "widen_s")
    widths, blocks = FAMILY_SIZES["small"]
    assert dict(h2h_arms.fixed_arm("static:small").env_kwargs) == {"start_widths": list(widths),
                                                                   "start_blocks": list(blocks)}
    assert h2h_arms.fixed_arm("static:seedling").env_kwargs == {}
    with pytest.raises(ValueError, match=r"'static-small' is no plan .* expected one of \[.*'grow-x2@0'"):
        h2h_arms.fixed_arm("plan:static-small")
    with pytest.raises(ValueError, match=r"'huge' is no static .* expected one of \[.*'largest'"):
        h2h_arms.fixed_arm("static:huge")
    with pytest.raises(ValueError, match="arm 'walk': expected one of"):
        h2h_arms.check_arms(["walk"], compare_agents.ARMS, None)
    with pytest.raises(ValueError, match="needs --oracle-from"):
        h2h_arms.check_arms(["oracle"], compare_agents.ARMS, None)
    with pytest.raises(SystemExit):
        compare_agents.parse_args(["--arms", "heuristic", "plan:grow-x9@0"])
    assert compare_agents.parse_args(["--arms", "static:wide", "plan:grow-x4@2"]).arms == ["static:wide",
                                                                                          "plan:grow-x4@2"]
    assert h2h_arms.folder_name("plan:grow-x2@0") == "plan_grow-x2_at0" and h2h_arms.folder_name("static") == "static"
    assert compare_agents.slice_folder(tmp_path, ENV, "static:small").name == "static_small"
    assert h2h_arms.seed_runs([4, 5, 6, 8, 9], 2) == [[4, 5], [6], [8, 9]]


def test_the_oracle_takes_each_conditions_best_static_or_plan_row(tmp_path):
    summary = _summary(tmp_path / "summary.json", {"full": "static-small", "pool5k": "grow-x2@0"})
    assert h2h_arms.oracle_choice(summary) == {"full": "static-small", "pool5k": "grow-x2@0"}
    (tmp_path / "odd.json").write_text(json.dumps([{"arm": "grow-elsewhere", "kind": "plan", "condition": "full",
                                                    "return": 1.0}]))
    with pytest.raises(ValueError, match=r"arms \['grow-elsewhere'\] are not static or plan arms"):
        h2h_arms.oracle_choice(tmp_path / "odd.json")
    (tmp_path / "mixture.json").write_text(json.dumps([{"arm": "static-small", "kind": "static",
                                                        "condition": "mixture", "return": 1.0}]))
    with pytest.raises(ValueError, match="no static or plan row on any condition but 'mixture'"):
        h2h_arms.oracle_choice(tmp_path / "mixture.json")


def test_plan_and_static_arms_play_their_steps_on_the_paired_episodes(tmp_path):
    folder = _run(tmp_path, FAMILY, "--eval-episodes", "2", "--arms", "static", "static:seedling", "static:small",
                  "plan:grow-x2@0")
    static, seedling, small, plan = (_episodes(folder, arm) for arm in ("static", "static:seedling", "static:small",
                                                                         "plan:grow-x2@0"))
    assert [e["return"] for e in seedling] == [e["return"] for e in static]  # the same episodes, the same policy
    assert [e["env_seed"] for e in plan] == [e["env_seed"] for e in static]
    # each slot's fossilize waits for the lifecycle, so the plan germinates the next slot meanwhile
    assert plan[0]["ops"] == [[0, "germinate", 0, "widen_s"], [1, "germinate", 1, "widen_s"],
                              [2, "germinate", 2, "widen_s"]]
    assert static[0]["ops"] == [] and static[0]["condition"] == "full"
    assert small[0]["params"] > static[0]["params"] and small[0]["train_flops"] > static[0]["train_flops"]
    assert plan[0]["params"] > static[0]["params"]
    record = json.loads((folder / "static_small" / "seed0.json").read_text())
    assert record["fixed_arm"]["kind"] == "static" and record["fixed_arm"]["env_kwargs"]["start_widths"] == [32, 64, 64]
    assert record["arm"] == "static:small" and record["budget_host_epochs"] == 0 and record["horizon"] is None


def test_episodes_count_their_seeds_fates_from_the_timeline():
    torch.set_num_threads(1)
    quick = {**FAMILY, "max_epochs": 8, "min_training_epochs": 0, "max_holding_epochs": 1}
    never_keeps = PlanActor([plan_step(0, "germinate", 0, "widen_s")])
    episode = h2h_arms.play_seeds(never_keeps, ENV, quick, [0])[0][0]
    assert episode["ops"] == [[0, "germinate", 0, "widen_s"]]  # the timeout is no op
    assert episode["seeds"] == {"planted": 1, "fossilized": 0, "pruned": 1, "holding_timeouts": 1, "rolled_back": 0}
    assert pilot_paired.episode_fates(episode) == {"timed out": 1}


def test_the_oracle_plays_the_arm_of_a_fixed_condition_and_says_it_knows_it(tmp_path, monkeypatch):
    summary = _summary(tmp_path / "summary.json", {"noise40": "static-small", "full": "static-seedling"})
    kwargs = FAMILY | {"condition": "noise40", "max_epochs": 2}
    folder = _run(tmp_path, kwargs, "--eval-episodes", "2", "--arms", "oracle", "static:small",
                  "--oracle-from", str(summary))
    oracle, small = _episodes(folder, "oracle"), _episodes(folder, "static:small")
    assert [e["played_arm"] for e in oracle] == ["static-small"] * 2
    assert [e["return"] for e in oracle] == [e["return"] for e in small]  # paired by reset seed, on its host
    record = json.loads((folder / "oracle" / "seed0.json").read_text())["oracle"]
    assert record == {"summary": str(summary), "choice": {"full": "static-seedling", "noise40": "static-small"},
                      "knows_condition": True}
    # the probe's condition is checked against what the played episode's first step reports
    monkeypatch.setattr(h2h_arms, "drawn_conditions", lambda env, kwargs, seeds: ["full"] * len(seeds))
    args = compare_agents.parse_args(["--env", ENV, "--env-kwargs", json.dumps(kwargs), "--arms", "oracle",
                                      "--eval-episodes", "1", "--oracle-from", str(summary)])
    with pytest.raises(RuntimeError, match="the probe drew condition 'full' but the episode static-seedling played "
                       "reports 'noise40'"):
        h2h_arms.evaluate_oracle(args, [7])
    with pytest.raises(SystemExit):  # a summary that cannot be read is refused before anything runs
        compare_agents.parse_args(["--arms", "oracle", "--oracle-from", str(tmp_path / "none.json")])


def test_a_listed_mixture_is_read_per_reset_seed():
    kwargs = FAMILY | {"condition": "mixture:full,classes2", "max_epochs": 2}
    seeds = compare_agents.eval_env_seeds(0, 6, 1000)
    drawn = h2h_arms.drawn_conditions(ENV, kwargs, seeds)
    assert set(drawn) == {"full", "classes2"}
    assert h2h_arms.drawn_conditions(ENV, kwargs, seeds[::-1]) == drawn[::-1]


def test_the_oracle_switches_arms_per_episode_on_the_drawn_condition(tmp_path):
    # the mixture draws pools of up to 15k images; conditions come from the reset seed alone
    kwargs = FAMILY | {"condition": "mixture", "max_epochs": 2, "synthetic_train_size": 15_000,
                       "train_images_per_epoch": 128}
    seeds = compare_agents.eval_env_seeds(0, 6, 1000)
    drawn = h2h_arms.drawn_conditions(ENV, kwargs, seeds)
    assert len(set(drawn)) > 1 and set(drawn) <= {c.name for c in CONDITIONS}
    best = {c.name: ("grow-x2@0" if c.name.startswith("pool") else "static-small" if c.name.startswith("res")
                     else "static-seedling") for c in CONDITIONS}
    summary = _summary(tmp_path / "summary.json", best)
    folder = _run(tmp_path, kwargs, "--eval-episodes", "6", "--arms", "oracle", "--oracle-from", str(summary))
    oracle = _episodes(folder, "oracle")
    assert [e["condition"] for e in oracle] == drawn and [e["env_seed"] for e in oracle] == seeds
    assert [e["played_arm"] for e in oracle] == [best[c] for c in drawn]
    assert len({e["played_arm"] for e in oracle}) > 1
    part = _summary(tmp_path / "part.json", {drawn[0]: "static-small"})
    args = compare_agents.parse_args(["--env", ENV, "--env-kwargs", json.dumps(kwargs), "--arms", "oracle",
                                      "--oracle-from", str(part)])
    with pytest.raises(ValueError, match=r"no static or plan row for condition\(s\) \["):
        h2h_arms.evaluate_oracle(args, seeds)
