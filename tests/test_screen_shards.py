"""The screen's split of work between processes: whole (arm, condition) groups, dealt by estimated cost."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from benchmarks import screen_shards
from benchmarks.screen_arms import Arm, arm_set
from esper_env.conditions import CONDITIONS

FAMILY_ENV = "Esper-CIFAR10-v0"  # the family host: only the config is built, no data or env


def test_dealing_covers_every_item_once_longest_first_to_the_least_loaded():
    costs = [5.0, 1.0, 4.0, 3.0, 3.0, 2.0, 2.0, 1.0]
    shards = screen_shards.deal(costs, 3)
    assert sorted(itertools.chain(*shards)) == list(range(len(costs)))
    loads = [sum(costs[k] for k in shard) for shard in shards]
    assert loads == [7.0, 7.0, 7.0]  # 5+2 | 1+4+2 | 3+3+1, each shard's indices in ascending order
    assert shards == [[0, 6], [1, 2, 5], [3, 4, 7]] and screen_shards.deal(costs, 3) == shards
    dealt_in_order = [sum(costs[k::3]) for k in range(3)]  # dealing every n-th would be uneven here
    assert max(dealt_in_order) > max(loads)
    assert screen_shards.deal(costs, 10)[8:] == [[], []]  # more shards than items: some idle
    with pytest.raises(ValueError, match="0 shards; expected at least 1"):
        screen_shards.deal(costs, 0)


def test_an_arms_cost_grows_with_its_architecture_and_how_early_it_grows():
    arms = {arm.name: arm for arm in arm_set("family")}
    costs = screen_shards.arm_costs(tuple(arms.values()), FAMILY_ENV, {})
    assert costs["static-seedling"] < costs["static-small"] < costs["static-wide"] < costs["static-largest"]
    assert costs["grow-x4@10"] < costs["grow-x4@5"] < costs["grow-x4@2"] < costs["grow-x4@0"]
    assert costs["grow-x4@0"] == pytest.approx(costs["static-wide"] + screen_shards.GROWTH_OVERHEAD)
    known = [c for name, c in costs.items() if name not in ("heuristic", "random")]
    assert costs["heuristic"] == costs["random"] == pytest.approx(sum(known) / len(known))
    bigger = screen_shards.arm_costs((arms["static-seedling"],), FAMILY_ENV, {"start_widths": [64, 128, 128]})
    assert bigger["static-seedling"] == pytest.approx(costs["static-wide"])  # the base kwargs count
    other_host = screen_shards.arm_costs(arm_set("synthetic"), "Esper-Synthetic-v0", {})
    assert set(other_host.values()) == {1.0}  # no estimate for another host: every group weighs the same


def test_shards_hold_whole_groups_every_group_once_and_similar_work():
    arms = arm_set("family")
    conditions = screen_shards.played_conditions([c.name for c in CONDITIONS])
    costs = screen_shards.arm_costs(arms, FAMILY_ENV, {})
    shards = [screen_shards.shard_jobs(arms, conditions, [0, 1, 2, 3, 4], f"{i}/16", costs) for i in range(16)]
    groups = [sorted({(job.arm.name, job.condition) for job in shard}) for shard in shards]
    every = [group for shard in groups for group in shard]
    assert len(every) == len(set(every)) == len(arms) * len(conditions) == 21 * (len(CONDITIONS) + 1)
    for shard in shards:  # every seed of a group in the same shard, side by side
        for (name, condition), jobs in itertools.groupby(shard, key=lambda job: (job.arm.name, job.condition)):
            assert [job.seed for job in jobs] == [0, 1, 2, 3, 4], (name, condition)
    loads = [sum(costs[name] for name, _ in shard) for shard in groups]
    mean = sum(loads) / len(loads)
    assert max(loads) - mean <= max(costs.values()) and max(loads) / min(loads) < 1.1
    again = screen_shards.shard_jobs(arms, conditions, [0, 1, 2, 3, 4], "7/16", costs)
    assert again == shards[7]  # the same deal for the same inputs: a restarted shard resumes its own groups


def test_the_mixture_is_played_unless_left_out():
    assert screen_shards.played_conditions(["full", "pool5k"]) == ["full", "pool5k", "mixture"]
    assert screen_shards.played_conditions(["full", "full"], mixture=False) == ["full"]
    assert screen_shards.played_conditions([]) == ["mixture"]
    with pytest.raises(ValueError, match="--no-mixture with no --conditions"):
        screen_shards.played_conditions([], mixture=False)
    arms = (Arm("static-seedling", "static"),)
    jobs = screen_shards.shard_jobs(arms, screen_shards.played_conditions(["full"], mixture=False), [0], "0/1")
    assert [(job.condition, job.seed) for job in jobs] == [("full", 0)]


def test_the_launcher_leaves_its_own_options_out_of_the_shards_command_lines() -> None:
    argv = ["--set", "family", "--processes", "4", "--out=a.jsonl", "--per-gpu=2", "--shard", "0/1", "--seeds", "0"]
    assert screen_shards.shard_argv(argv) == ["--set", "family", "--seeds", "0"]
    with pytest.raises(ValueError, match="--processes 0"):
        screen_shards.launch([], Path("a.jsonl"), 0, 1)


def test_the_launcher_plays_every_shard_in_its_own_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import screen

    monkeypatch.chdir(tmp_path)  # the shards run here too, importing benchmarks from the repository
    kwargs = {"host": "family", "device": "cpu", "max_epochs": 2, "synthetic_train_size": 256,
              "synthetic_val_size": 64, "synthetic_image_size": 16, "batch_size": 64, "report_test_accuracy": True}
    argv = ["--env", "Esper-Synthetic-v0", "--set", "family", "--arms", "static-seedling", "grow-x2@0",
            "--conditions", "full", "--no-mixture", "--seeds", "0", "--env-kwargs", json.dumps(kwargs),
            "--processes", "2", "--per-gpu", "2", "--out", "all.jsonl"]
    assert screen.main(argv) == 0
    rows = [json.loads(line) for i in (0, 1) for line in (tmp_path / f"all-{i}.jsonl").read_text().splitlines()]
    assert sorted(r["arm"] for r in rows) == ["grow-x2@0", "static-seedling"]  # one group each, both played
