"""The acceptance screen: arms as data, the plan actor, seed pairing, slices, and the report's four criteria."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks import screen, screen_arms, screen_report, screen_shards
from benchmarks.screen_arms import Arm, plan_step
from esper_agent.distributions import ActionMasks
from esper_agent.envs import VectorEnvDriver
from esper_agent.train import make_envs
from esper_env.blueprints import BLUEPRINTS
from esper_env.conditions import CONDITIONS
from esper_env.config import EnvConfig
from esper_env.lifecycle import Stage
from esper_env.spaces import Head, Op, head_sizes

ENV = "Esper-Synthetic-v0"
NAMES = [b.name for b in BLUEPRINTS]
GROW = ((0, "germinate", 0, "conv_light"), (0, "fossilize", 0))


def _screen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny: dict, arms: tuple[Arm, ...], *args: str) -> list:
    """Run the screen CLI on ``arms`` (as set "test") into ``tmp_path/slice.jsonl``; the lines written."""
    monkeypatch.setitem(screen_arms.ARM_SETS, "test", lambda: arms)
    out = tmp_path / "slice.jsonl"
    screen.main(["--env", ENV, "--set", "test", "--out", str(out), "--env-kwargs", json.dumps(tiny), *args])
    return [json.loads(line) for line in out.read_text().splitlines()]


# --- arms and plans -------------------------------------------------------------------------------------------
def test_plan_steps_and_arms_refuse_what_they_cannot_mean():
    assert plan_step(3, "germinate", 1, "conv_small") == (3, Op.GERMINATE, 1, "conv_small")
    with pytest.raises(ValueError, match="'conv_huge' is not in the catalogue"):
        plan_step(0, Op.GERMINATE, 0, "conv_huge")
    with pytest.raises(ValueError, match="a blueprint name for GERMINATE"):
        plan_step(0, "germinate", 0)
    with pytest.raises(ValueError, match="op 'grow' is unknown"):
        plan_step(0, "grow", 0)
    with pytest.raises(ValueError, match="other than WAIT"):
        plan_step(0, Op.WAIT, 0)
    with pytest.raises(ValueError, match="steps for kind 'plan'"):
        Arm("static-with-plan", "static", plan=GROW)
    with pytest.raises(ValueError, match="only a plan has a twin"):
        Arm("s", "static", twin="t")
    assert Arm("g", "plan", plan=GROW).plan[1] == (0, Op.FOSSILIZE, 0, None)


def test_an_arm_set_checks_names_and_twins(monkeypatch):
    monkeypatch.setitem(screen_arms.ARM_SETS, "bad", lambda: (Arm("a", "static"), Arm("g", "plan", plan=GROW,
                                                                                       twin="random")))
    with pytest.raises(ValueError, match="twin 'random' is not a static arm"):
        screen_arms.arm_set("bad")
    monkeypatch.setitem(screen_arms.ARM_SETS, "twice", lambda: (Arm("a", "static"), Arm("a", "random")))
    with pytest.raises(ValueError, match="repeats an arm name"):
        screen_arms.arm_set("twice")
    assert {a.kind for a in screen_arms.arm_set("synthetic")} == set(screen_arms.KINDS)


def test_the_undo_set_plants_the_same_and_differs_only_in_what_follows():
    arms = {a.name: a for a in screen_arms.arm_set("undo")}
    plans = {name: [(s.epoch, s.op.name, s.slot, s.blueprint) for s in arm.plan] for name, arm in arms.items()}
    planted = plans["agent-plan@1"][:3]
    assert [p[:2] for p in planted] == [(1, "GERMINATE")] * 3
    assert {name: plan[3:] for name, plan in plans.items() if plan} == {
        "agent-plan@1": [(1, "FOSSILIZE", slot, None) for slot in (2, 1, 0)],
        "agent-plan@1-fossilize@6": [(6, "FOSSILIZE", slot, None) for slot in (2, 1, 0)],
        "agent-plan@1-prune@6": [(6, "PRUNE", slot, None) for slot in (2, 1, 0)]}
    assert all(plan[:3] == planted for plan in plans.values() if plan) and plans[screen_arms.SEEDLING_ARM] == []


def _masks(op_slot: np.ndarray, blueprint: np.ndarray | None = None) -> ActionMasks:
    return ActionMasks(op_slot[None], np.ones((1, sum(head_sizes(op_slot.shape[1]))), bool),
                       None if blueprint is None else blueprint[None])


def test_the_plan_actor_waits_for_its_epoch_its_slot_order_and_the_masks():
    actor = screen.PlanActor([(2, "germinate", 1, "conv_small"), (0, "germinate", 0, "norm"), (0, "fossilize", 0)])
    actor.reset(1)
    obs, start, everything = np.zeros((1, 4)), np.array([True]), np.ones((len(Op), 2), bool)

    def act(op_slot: np.ndarray = everything, blueprint: np.ndarray | None = None, first: bool = False) -> tuple:
        action = actor.act(obs, _masks(op_slot, blueprint), np.array([first]))[0]
        return tuple(int(v) for v in action[[Head.OP, Head.SLOT, Head.BLUEPRINT]])

    no_germinate_0, no_fossilize = everything.copy(), everything.copy()
    no_germinate_0[Op.GERMINATE, 0] = no_fossilize[Op.FOSSILIZE, 0] = False
    no_conv_small = np.ones((2, len(NAMES)), bool)
    no_conv_small[1, NAMES.index("conv_small")] = False
    assert act(no_germinate_0, first=True)[0] == Op.WAIT  # slot 0's FOSSILIZE waits for its GERMINATE
    assert act() == (Op.GERMINATE, 0, NAMES.index("norm"))
    assert act(no_fossilize, no_conv_small)[0] == Op.WAIT  # step 2: slot 1 is due, its blueprint masked
    assert act() == (Op.GERMINATE, 1, NAMES.index("conv_small"))  # listed first, so before the FOSSILIZE
    assert act()[:2] == (Op.FOSSILIZE, 0)
    assert act()[0] == Op.WAIT  # the plan is done
    assert act(first=True) == (Op.GERMINATE, 0, NAMES.index("norm"))  # a new episode starts it over
    with pytest.raises(ValueError, match="the plan uses slot 1; the env has 1 slots"):
        actor.act(obs, _masks(np.ones((len(Op), 1), bool)), start)


def test_the_plan_actor_plants_the_named_blueprint_in_the_named_slot_and_never_acts_invalidly(tiny):
    plan = [(1, "germinate", 2, "conv_heavy"), (1, "germinate", 1, "depthwise"), (0, "fossilize", 2)]
    tiny |= {"max_epochs": 8, "min_training_epochs": 1, "fossilize_min_contribution": -100.0}
    envs = make_envs(ENV, 1, tiny)
    try:
        driver = VectorEnvDriver(envs)
        actor, (obs, masks), stages = screen.PlanActor(plan), driver.reset(7), []
        actor.reset(1)
        for t in range(tiny["max_epochs"]):
            action = actor.act(obs, masks, np.array([t == 0]))
            step = driver.step(action)
            info = driver.last_info
            assert not info["invalid_action"][0]
            stages.append(list(info["stage"][0]))
            if t == 1:
                assert info["blueprint"][0][2] == NAMES.index("conv_heavy") and stages[-1][1] == Stage.DORMANT
            obs, masks = step.obs, step.masks
    finally:
        envs.close()
    # one seed incubating at a time: slot 1 germinates only once slot 2's seed has left TRAINING
    planted_1 = next(t for t, s in enumerate(stages) if s[1] != Stage.DORMANT)
    assert planted_1 > 1 and stages[planted_1 - 1][2] not in (Stage.GERMINATED, Stage.TRAINING)
    assert Stage.FOSSILIZED in [s[2] for s in stages]


# --- the runner -----------------------------------------------------------------------------------------------
def test_arms_are_paired_by_reset_seed_whatever_shares_their_vector_env(tmp_path, monkeypatch, tiny):
    arms = (Arm("static-seedling", "static"), Arm("static-copy", "static"), Arm("random", "random"),
            Arm("static-wide", "static", {"host_widths": [12, 16, 32]}))
    together = _screen(tmp_path / "a", monkeypatch, tiny, arms, "--seeds", "3", "5")
    alone = _screen(tmp_path / "b", monkeypatch, tiny, arms, "--seeds", "5")
    keys = ("return", "val_accuracy", "test_accuracy", "ops")

    def of(rows: list, arm: str, seed: int) -> tuple:
        row = next(r for r in rows if r["arm"] == arm and r["seed"] == seed)
        return tuple(json.dumps(row[k]) for k in keys)

    assert of(together, "static-seedling", 5) == of(together, "static-copy", 5) == of(alone, "static-seedling", 5)
    assert of(together, "static-seedling", 3) != of(together, "static-seedling", 5)
    assert of(together, "random", 5) == of(alone, "random", 5) and of(together, "random", 5)[3] != "[]"
    assert of(together, "static-wide", 5) != of(together, "static-seedling", 5)
    wide = next(r for r in together if r["arm"] == "static-wide")
    assert wide["env_kwargs"]["host_widths"] == [12, 16, 32] and wide["env_kwargs"]["report_test_accuracy"]
    assert {r["condition"] for r in together} == {"mixture"} and "condition" not in wide["env_kwargs"]
    assert {r["episodes_together"] for r in together} == {2} and all(r["invalid_actions"] == 0 for r in together)
    for row in together:  # the validation and training accuracy after every step, the last one the episode's final
        assert len(row["val_curve"]) == row["episode_length"] and row["val_curve"][-1] == row["val_accuracy"]
        assert len(row["train_curve"]) == row["episode_length"]
        assert all(0.0 <= a <= 1.0 for a in row["train_curve"]) and row["train_curve"] != row["val_curve"]


def test_shards_split_the_jobs_and_a_second_run_plays_only_what_is_missing(tmp_path, monkeypatch, tiny):
    arms = (Arm("static-seedling", "static"), Arm("grow", "plan", plan=GROW))
    with pytest.raises(ValueError, match="expected i/n"):
        screen_shards.shard_jobs(arms, ["mixture"], [0], "3/3")
    first = _screen(tmp_path, monkeypatch, tiny, arms, "--seeds", "0", "--shard", "0/2")
    assert [r["arm"] for r in first] == ["static-seedling"]
    again = _screen(tmp_path, monkeypatch, tiny, arms, "--seeds", "0", "--shard", "0/2")
    assert again == first  # nothing played twice
    both = _screen(tmp_path, monkeypatch, tiny, arms, "--seeds", "0")
    assert [r["arm"] for r in both] == ["static-seedling", "grow"]
    assert both[1]["ops"][0] == [0, "germinate", 0, "conv_light"]
    assert both[1]["plan"] == [[0, "germinate", 0, "conv_light"], [0, "fossilize", 0, None]]
    with pytest.raises(SystemExit, match=r"--arms \['nope'\] are not in set 'test'"):
        _screen(tmp_path, monkeypatch, tiny, arms, "--arms", "nope")
    with pytest.raises(SystemExit, match="--no-mixture with no --conditions leaves nothing to play"):
        _screen(tmp_path, monkeypatch, tiny, arms, "--no-mixture")
    with pytest.raises(ValueError, match="autoreset_mode='SameStep'"):
        screen.job_kwargs({"autoreset_mode": "SameStep"}, arms[0], None)


def _fake_groups(monkeypatch: pytest.MonkeyPatch, seconds: float = 0.0) -> list[tuple[str, tuple[int, ...]]]:
    """Replace playing a group by recording it, each taking ``seconds`` of a fake clock that starts at 1000; the
    (arm, seeds) of the groups played, in order."""
    played, clock = [], [1000.0]

    def fake_group(env_id, kwargs, arm, condition, seeds):
        played.append((arm.name, tuple(seeds)))
        clock[0] += seconds
        return [{"arm": arm.name, "condition": condition, "seed": s, "env_id": env_id, "test_accuracy": 0.5,
                 "seconds": seconds} for s in seeds]

    monkeypatch.setattr(screen, "run_group", fake_group)
    monkeypatch.setattr(screen.time, "time", lambda: clock[0])
    return played


def test_stop_at_starts_only_groups_expected_to_end_in_time_and_a_rerun_plays_the_rest(tmp_path, monkeypatch, tiny):
    played = _fake_groups(monkeypatch, seconds=50.0)  # the first group is assumed to take SECONDS_PER_COST (120)
    arms = tuple(Arm(name, "static") for name in ("a", "b", "c"))  # another host's arms: each costs 1.0
    rows = _screen(tmp_path, monkeypatch, tiny, arms, "--seeds", "0", "--stop-at", "1130")
    # a: 1000 + 120 <= 1130, plays; b: 1050 + 50 (the rate a measured; 120 would not fit) <= 1130, plays;
    # c: 1100 + 50 > 1130, left
    assert [name for name, _ in played] == ["a", "b"] and [r["arm"] for r in rows] == ["a", "b"]
    rows = _screen(tmp_path, monkeypatch, tiny, arms, "--seeds", "0")
    assert [name for name, _ in played] == ["a", "b", "c"] and [r["arm"] for r in rows] == ["a", "b", "c"]
    _screen(tmp_path, monkeypatch, tiny, arms, "--seeds", "0", "--stop-at", "0")
    assert len(played) == 3  # nothing left, nothing started


def test_a_job_in_any_slice_of_the_run_is_not_played_again(tmp_path, monkeypatch, tiny):
    played = _fake_groups(monkeypatch)
    row = {"arm": "a", "condition": "mixture", "seed": 1, "env_id": ENV}
    (tmp_path / "slice-3.jsonl").write_text(json.dumps(row) + "\n")  # a shard of an earlier run with 4 processes
    (tmp_path / "slice-x.jsonl").write_text(json.dumps(row | {"seed": 0}) + "\n")  # another run's: not counted
    (tmp_path / "other-0.jsonl").write_text(json.dumps(row | {"seed": 0}) + "\n")
    arms = (Arm("a", "static"), Arm("b", "static"))
    _screen(tmp_path, monkeypatch, tiny, arms, "--seeds", "0", "1")
    assert played == [("a", (0,)), ("b", (0, 1))]
    assert [p.name for p in screen.run_slices(tmp_path / "slice-0.jsonl")] == ["slice-3.jsonl", "slice.jsonl"]


@pytest.mark.skipif("condition" not in {f.name for f in dataclasses.fields(EnvConfig)},
                    reason="EnvConfig has no condition field yet")
def test_conditions_are_passed_to_the_env_and_recorded_as_reported(tmp_path, monkeypatch, tiny):
    tiny |= {"synthetic_train_size": 15_000, "train_images_per_epoch": 256}  # the mixture draws pools of 15k
    arms = (Arm("static-seedling", "static"),)
    only = _screen(tmp_path, monkeypatch, tiny, arms, "--seeds", "0", "--conditions", "noise40", "--no-mixture")
    assert [r["condition"] for r in only] == ["noise40"]
    rows = _screen(tmp_path, monkeypatch, tiny, arms, "--seeds", "0", "--conditions", "noise40")
    assert rows[0] == only[0] and len(rows) == 2  # the mixture added, noise40 not played again
    by = {r["condition"]: r for r in rows}
    assert by["noise40"]["env_kwargs"]["condition"] == "noise40" and by["noise40"]["condition_reported"] == "noise40"
    assert by["mixture"]["env_kwargs"]["condition"] == "mixture" and by["mixture"]["condition_reported"] != "mixture"


def test_slices_round_trip_through_the_report(tmp_path, monkeypatch, tiny):
    arms = (Arm("static-seedling", "static"), Arm("static-wide", "static", {"host_widths": [12, 16, 32]}),
            Arm("grow", "plan", plan=GROW), Arm("heuristic", "heuristic"))
    rows = _screen(tmp_path, monkeypatch, tiny | {"min_training_epochs": 1}, arms, "--seeds", "0", "1")
    screen.main(["--report", str(tmp_path)])
    summary = {r["arm"]: r for r in json.loads((tmp_path / "summary.json").read_text())}
    assert set(summary) == {a.name for a in arms} and summary["grow"]["condition"] == "mixture"
    test = {(r["arm"], r["seed"]): 100 * r["test_accuracy"] for r in rows}
    assert summary["grow"]["seeds"] == [0, 1]
    assert math.isclose(summary["grow"]["test_accuracy"], (test["grow", 0] + test["grow", 1]) / 2)
    gap = sum(test["static-wide", s] - test["static-seedling", s] for s in (0, 1)) / 2
    assert gap != 0 and math.isclose(summary["static-wide"]["minus_static_seedling_paired"], gap)
    assert math.isclose(summary["heuristic"]["return"], 50 * sum(r["return"] for r in rows if r["arm"] == "heuristic"))
    criteria = json.loads((tmp_path / "criteria.json").read_text())
    assert sorted(criteria) == ["1", "2", "3", "4", "val_noise"] and not criteria["1"]["holds"]  # no 'full' run
    noise = criteria["val_noise"]["by_condition"]["mixture"]
    assert noise["episodes"] == 4 and noise["arms"] == ["static-seedling", "static-wide"]
    table = (tmp_path / "table.md").read_text()
    assert "## mixture" in table and "| grow | plan | 2 |" in table and "## Criteria" in table
    assert "Validation noise of one step" in table and "mixture" in table.split("Validation noise")[1]


# --- the report's arithmetic on hand-made rows ------------------------------------------------------------------
def _row(arm: str, seed: int, test: float, condition: str = "full", kind: str = "static", ret: float = 0.0,
         twin: str | None = None, plan: list | None = None) -> dict:
    return {"arm": arm, "kind": kind, "twin": twin, "plan": plan or [], "condition": condition, "seed": seed,
            "env_id": ENV, "condition_reported": condition, "max_epochs": 20, "test_accuracy": test,
            "val_accuracy": test, "return": ret, "params": 10, "train_flops": 1e9}


def _runs(rows: list[dict]) -> screen_report.Runs:
    return screen_report.by_run(rows)


def test_criterion_1_takes_the_best_plan_and_needs_eight_points_with_the_ci_above_zero():
    base = [_row("static-seedling", s, 0.50 + 0.01 * s) for s in range(3)]
    good = [_row("grow-a", s, 0.59 + 0.01 * s + 0.001 * (s == 1), kind="plan") for s in range(3)]
    small = [_row("grow-b", s, 0.575 + 0.01 * s, kind="plan") for s in range(3)]
    result = screen_report.criterion_1(_runs(base + good + small))
    assert result["best_plan"] == "grow-a" and math.isclose(result["value"], 9 + 0.1 / 3) and result["holds"]
    assert not screen_report.criterion_1(_runs(base + small))["holds"]  # 7.5 points
    noisy = [_row("grow-c", s, 0.5 + 0.01 * s + (0.20 if s == 0 else -0.02), kind="plan") for s in range(2)]
    result = screen_report.criterion_1(_runs(base + noisy))
    assert result["value"] == pytest.approx(9.0) and not result["holds"]  # gaps 20 and -2: the CI spans 0
    assert screen_report.criterion_1(_runs(good))["reason"] == "no 'static-seedling' run on condition 'full'"


def test_criterion_2_reads_the_growth_time_from_the_plan_and_the_best_25_percent_arm_decides():
    def grown(arm: str, epoch: int, gap: float) -> list[dict]:
        plan = [[epoch, "germinate", 0, "conv_light"], [epoch, "fossilize", 0, None]]
        return [_row(arm, s, 0.80 + 0.01 * s + gap / 100, kind="plan", twin="static-final", plan=plan)
                for s in range(2)]

    twin = [_row("static-final", s, 0.80 + 0.01 * s) for s in range(2)]
    rows = twin + grown("g10", 2, -0.2) + grown("g25-naive", 5, -2.0) + grown("g25-split", 5, -0.6) \
        + grown("g50", 10, -3.0) + grown("g20", 4, -0.1)
    result = screen_report.criterion_2(_runs(rows))
    assert result["arm"] == "g25-split" and result["value"] == pytest.approx(-0.6) and result["holds"]
    assert {k: v["arm"] for k, v in result["best_gap_at"].items()} == {"10%": "g10", "25%": "g25-split", "50%": "g50"}
    assert result["arms"]["g20"]["fraction"] is None  # epoch 4 of 20 is a whole epoch from 25%
    failing = screen_report.criterion_2(_runs(twin + grown("g25-naive", 5, -2.0)))
    assert failing["value"] == pytest.approx(-2.0) and not failing["holds"]
    assert screen_report.growth_fraction({"plan": [[6, "germinate", 0, "x"]], "max_epochs": 25}) == 0.25


def _condition_rows(returns: dict[tuple[str, str], float], kind: str = "static") -> list[dict]:
    return [_row(arm, s, 0.5, condition=c, kind=kind, ret=r + 0.001 * s * (s % 2)) for (arm, c), r in returns.items()
            for s in range(3)]


def test_criterion_3_pairs_the_per_condition_oracle_with_the_best_single_plan_and_places_the_heuristic():
    # plan "big" wins "full" by 4 points, "small" wins "pool5k" by 2: oracle − best single = (0 + 2) / 2 = 1 point
    returns = {("big", "full"): 0.60, ("small", "full"): 0.56, ("big", "pool5k"): 0.30, ("small", "pool5k"): 0.32}
    heuristic = _condition_rows({("heuristic", "full"): 0.575, ("heuristic", "pool5k"): 0.31}, kind="heuristic")
    mixture = _condition_rows({("big", "mixture"): 0.0})
    result = screen_report.criterion_3(_runs(_condition_rows(returns) + heuristic + mixture))
    assert result["conditions"] == ["full", "pool5k"] and result["best_single"] == "big"
    assert result["oracle"] == {"full": "big", "pool5k": "small"} and result["value"] == pytest.approx(1.0)
    assert not result["holds"]  # below 1.5
    assert result["heuristic"]["rank"] == 2 and result["heuristic"]["of"] == 3  # 44.25 points: big 45, small 44
    assert result["heuristic"]["minus_best_single"] == pytest.approx((-2.5 + 1) / 2)
    returns[("small", "pool5k")] = 0.34  # now small wins pool5k by 4: the gap is 2 points on every seed
    result = screen_report.criterion_3(_runs(_condition_rows(returns)))
    assert result["value"] == pytest.approx(2.0) and result["holds"] and result["heuristic"] is None
    one = screen_report.criterion_3(_runs(_condition_rows({k: v for k, v in returns.items() if k[1] == "full"})))
    assert one["value"] is None and "two conditions" in one["reason"]  # one condition: nothing to infer


def test_criterion_4_is_the_largest_sd_of_a_fixed_plan_on_full():
    steady = [_row("static-seedling", s, 0.80 + 0.002 * s) for s in range(3)]  # SD 0.2 points
    shaky = [_row("grow", s, 0.80 + 0.005 * s, kind="plan") for s in range(3)]  # SD 0.5 points
    wild = [_row("random", s, 0.5 + 0.1 * s, kind="random") for s in range(3)]  # not a fixed plan
    result = screen_report.criterion_4(_runs(steady + wild))
    assert result["arm"] == "static-seedling" and result["value"] == pytest.approx(0.2) and result["holds"]
    result = screen_report.criterion_4(_runs(steady + shaky + wild))
    assert result["arm"] == "grow" and result["value"] == pytest.approx(0.5) and not result["holds"]
    assert result["pooled_sd"] == pytest.approx(((0.2**2 + 0.5**2) / 2) ** 0.5)  # the random arm is not a plan


def test_the_report_refuses_duplicate_runs_and_mixed_envs(tmp_path):
    rows = [_row("static-seedling", 0, 0.5), _row("static-seedling", 0, 0.6)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match="'static-seedling' condition 'full' seed 0 appears twice"):
        screen_report.load(tmp_path)
    rows[1] |= {"seed": 1, "env_id": "Esper-CIFAR10-v0"}
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match="several envs"):
        screen_report.load(tmp_path)
    rows[1] |= {"env_id": ENV, "kind": "plan"}
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match="arm 'static-seedling' has kind/twin/plan"):
        screen_report.load(tmp_path)
    (tmp_path / "a.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="a.jsonl:1 is not a JSON line"):
        screen_report.load(tmp_path)


def test_criterion_3_needs_only_per_condition_rows_and_says_which_rows_and_conditions_it_used():
    returns = {("big", "full"): 0.60, ("small", "full"): 0.56, ("big", "pool5k"): 0.30, ("small", "pool5k"): 0.32}
    heuristic = _condition_rows({("heuristic", "full"): 0.575, ("heuristic", "pool5k"): 0.31}, kind="heuristic")
    result = screen_report.criterion_3(_runs(_condition_rows(returns) + heuristic))  # no drawn-mixture row
    assert result["value"] == pytest.approx(1.0) and result["seeds"] == [0, 1, 2]
    assert result["rows"].startswith("per-condition runs") and "drawn-mixture runs not used" in result["rows"]
    assert not result["covers_mixture"] and result["mixture_conditions"] == [c.name for c in CONDITIONS]
    place = result["heuristic"]  # oracle 46, best single 45: the heuristic sits between small (44) and big
    assert place["minus_oracle"] == pytest.approx((-2.5 - 1) / 2) and place["minus_oracle_ci95"] == pytest.approx(0)
    assert result["oracle_mean_return"] == pytest.approx(46.0 + 0.1 / 3)
    # every catalogue condition: big wins every third by a point and loses the others by one, so the best single
    # plan is small and the oracle gains a point on each third one, every condition weighing the same
    every = {(arm, c.name): 0.5 + (0.01 if i % 3 == 0 else -0.01) * (arm == "big")
             for i, c in enumerate(CONDITIONS) for arm in ("big", "small")}
    result = screen_report.criterion_3(_runs(_condition_rows(every)))
    n = len(CONDITIONS)
    assert result["covers_mixture"] and result["best_single"] == "small"
    assert result["value"] == pytest.approx(len(range(0, n, 3)) / n)
    assert f"{n} of {n} mixture conditions" in screen_report._what("3", result)


def test_the_step_noise_estimate_recovers_a_known_noise_on_a_bending_curve():
    rng = np.random.default_rng(0)
    t = np.arange(20)
    trend = 0.9 - 0.5 * np.exp(-t / 6)  # a learning curve, steep early and flat late
    curves = [trend + rng.normal(0, 0.003, t.size) for _ in range(2000)]  # 0.3 points of noise a step
    residuals = [screen_report.step_residuals(list(curve)) for curve in curves]
    assert all(len(r) == 9 for r in residuals)  # steps 10 to 18 of 20: the second half, both neighbours measured
    # within 2.5%: dividing by 1.5 (n − 1) instead would read 0.323, and leaving the trend in 0.312
    assert screen_report.step_noise(residuals) == pytest.approx(0.3, rel=0.025)
    assert screen_report.step_noise([screen_report.step_residuals(list(trend))]) < 0.03  # the bend alone: tiny
    bend = [screen_report.step_residuals(list(0.5 + 0.001 * t**2))]  # a steady bend is the episode's mean
    assert screen_report.step_noise(bend) == pytest.approx(0, abs=1e-9)
    assert screen_report.step_residuals([0.5, 0.6, None, 0.7, 0.7, 0.8]) is None  # a gap in the second half
    assert screen_report.step_residuals([0.5, 0.6, 0.7]) is None  # too short for two residuals


def _noisy(arm: str, seed: int, condition: str, kind: str = "static", noise: float = 0.004, **extra) -> dict:
    curve = [0.5 + 0.01 * t + noise * (-1) ** (t + seed) for t in range(22)]
    return _row(arm, seed, 0.5, condition=condition, kind=kind) | {"val_curve": curve, **extra}


def test_val_noise_reads_static_episodes_with_a_curve_per_condition_and_skips_the_rest():
    rows = [_noisy("static-seedling", s, "full") for s in range(3)] + [_noisy("static-wide", 0, "full", noise=0.002)]
    rows += [_noisy("static-seedling", 0, "pool5k", noise=0.001), _row("static-seedling", 1, 0.5, "pool5k")]
    rows += [_noisy("grow", 0, "full", kind="plan", noise=0.1), _noisy("static-seedling", 9, "full", rollback=True)]
    noise = screen_report.val_noise(_runs(rows))
    # ±n alternating on a line: ten residuals of ±2n about a zero mean, so the estimate is 2n / sqrt(1.5 − 1/10²)
    scale = 2 * 100 / math.sqrt(1.5 - 1 / 100)
    full = noise["by_condition"]["full"]
    assert full["episodes"] == 4 and full["arms"] == ["static-seedling", "static-wide"]
    assert full["sd_points"] == pytest.approx(scale * math.sqrt((3 * 0.004**2 + 0.002**2) / 4))
    assert noise["by_condition"]["pool5k"] == {"sd_points": pytest.approx(scale * 0.001), "episodes": 1,
                                               "arms": ["static-seedling"]}
    assert noise["pooled"]["episodes"] == 5 and list(noise["by_condition"]) == ["full", "pool5k"]
    assert screen_report.val_noise(_runs([_row("static-seedling", 0, 0.5)])) | {"what": ""} == {
        "what": "", "by_condition": {}, "pooled": None}  # slices from before val_curve: nothing to measure


def test_the_report_merges_shard_files_of_one_condition(tmp_path):
    returns = {("big", "full"): 0.60, ("small", "full"): 0.56, ("big", "pool5k"): 0.30, ("small", "pool5k"): 0.32}
    rows = _condition_rows(returns) + [_noisy("static-seedling", s, "full") for s in range(3)]
    for k, name in enumerate(("shard-00.jsonl", "shard-01.jsonl", "shard-02.jsonl")):  # seeds and arms split
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows[k::3]))
    screen.main(["--report", str(tmp_path)])
    summary = {(r["arm"], r["condition"]): r for r in json.loads((tmp_path / "summary.json").read_text())}
    assert summary["big", "full"]["seeds"] == summary["static-seedling", "full"]["seeds"] == [0, 1, 2]
    criteria = json.loads((tmp_path / "criteria.json").read_text())
    assert criteria["3"]["value"] == pytest.approx(1.0) and criteria["3"]["conditions"] == ["full", "pool5k"]
    assert criteria["val_noise"]["by_condition"]["full"]["episodes"] == 3
    assert "Validation noise of one step" in (tmp_path / "table.md").read_text()
