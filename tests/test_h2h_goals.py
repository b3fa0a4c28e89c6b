"""The head-to-head's goals on hand-made slices: pairing by reset seed, which fixed plan and MaskablePPO row are
the best, each goal holding and failing, arms that did not run, Fieller's interval and the report's files."""

from __future__ import annotations

import argparse
import json
import random

import numpy as np
import pytest

from benchmarks import compare_report, h2h_goals, h2h_report
from benchmarks.h2h_arms import folder_name
from esper_agent.evaluate import mean_ci95

SEEDS = (0, 1, 2, 3)
CONDITIONS = ("full", "pool5k")
JITTER = (0.0, 0.004, -0.002, 0.002)  # the learner's luck per seed: mean 0.001, so its CIs have a width


def _slices(arm: str, ret: float, test: float | tuple[float, float], flops: float, *, jitter=(0.0,) * 4,
            budget: int = 0) -> list[dict]:
    """One slice per seed of :data:`SEEDS`; seed k plays reset seeds 100_000 + 10 k + i on condition i (full,
    pool5k). Every arm's return and test accuracy carry the same part that depends on the reset seed alone (so
    pairing by position, not reset seed, would change the differences), ``test`` may differ per condition."""
    tests = test if isinstance(test, tuple) else (test, test)
    out = []
    for k, seed in enumerate(SEEDS):
        episodes = []
        for i, condition in enumerate(CONDITIONS):
            env_seed = 100_000 + 10 * seed + i
            shared = 0.01 * (env_seed % 3)
            episodes.append({"env_seed": env_seed, "return": ret + jitter[k] + shared, "val_accuracy": tests[i],
                             "test_accuracy": tests[i] + jitter[k] + shared, "seed_params": 0.0, "rollback": False,
                             "length": 6, "invalid_rate": 0.0, "condition": condition, "ops": [], "params": 1e4,
                             "train_flops": flops})
        out.append({"arm": arm, "seed": seed, "episodes": episodes, "budget_host_epochs": budget,
                    "train_seconds": 0.0, "eval_seconds": 1.0, "device": "cpu", "curve": []})
    return out


def _arms(**changed: tuple) -> dict[str, list[dict]]:
    """The default campaign (every goal holds), with some arms' (return, test, flops) changed or (None) removed."""
    arms = {"static": (0.20, 0.50, 2e12), "static:small": (0.22, 0.59, 4e12), "static:largest": (0.20, 0.70, 9e12),
            "plan:a": (0.25, 0.58, 7e12), "plan:b": (0.20, 0.57, 7e12), "oracle": (0.32, 0.62, 8e12),
            "heuristic": (0.25, 0.58, 6e12), "maskable_flat": (0.22, 0.55, 5e12),
            "maskable_flat-lr3": (0.26, 0.55, 5e12), "esper_agent-imitation": (0.50, 0.70, 5e12)}
    arms |= {folder: value for folder, value in changed.items()}
    out = {folder_name(a): _slices(a, *v, budget=96 * ("_" in a)) for a, v in arms.items() if v is not None}
    return {"esper_agent": _slices("esper_agent", 0.30, 0.60, 5e12, jitter=JITTER, budget=96)} | out


def _goals(arms: dict[str, list[dict]], roles: h2h_goals.Roles = h2h_goals.DEFAULT_ROLES) -> dict:
    rows = compare_report.summarize(arms)
    block = h2h_goals.goals(rows, roles)
    return block | {"by_goal": {g["goal"]: g for g in block["goals"]}}


def test_every_goal_holds_on_the_default_campaign_with_the_values_by_hand():
    block = _goals(_arms())
    goal = block["by_goal"]
    assert {key: g["holds"] for key, g in goal.items()} == dict.fromkeys(h2h_goals.GOALS, True)
    mean, half = mean_ci95([0.05 + j for j in JITTER])  # learner - plan:a per seed
    assert goal["fixed_plan"]["return"] == pytest.approx({"mean": mean, "ci95": half, "seeds": 4})
    assert goal["fixed_plan"]["gap_closed"]["value"] == pytest.approx(0.051 / 0.07)  # gap: oracle - plan:a
    assert goal["heuristic"]["test_accuracy"]["mean"] == pytest.approx(0.021)
    assert goal["heuristic"]["train_flops"] == {"mean": -1e12, "ci95": 0.0, "seeds": 4}
    assert goal["maskable"]["return"]["mean"] == pytest.approx(0.041)  # against maskable_flat-lr3
    worst = goal["static_frontier"]["worst"]
    assert worst["static"] == "static_small" and worst["margin"] == pytest.approx(0.011)
    assert [d["arm"] for d in block["differences"]] == ["plan_a", "heuristic", "maskable_flat-lr3"]


def test_pairing_is_by_reset_seed_whatever_the_order_or_the_seed_that_played_it():
    arms = _arms()
    shuffled = {arm: [s | {"episodes": random.Random(s["seed"]).sample(s["episodes"], 2)} for s in slices[::-1]]
                for arm, slices in arms.items()}
    assert any(s["episodes"] != t["episodes"] for s, t in zip(arms["plan_a"], shuffled["plan_a"][::-1], strict=True))
    assert _goals(shuffled) == _goals(arms)
    # the plan's episodes all in one slice of another training seed: still paired with every learner seed
    arms["plan_a"] = [arms["plan_a"][0] | {"seed": 7, "episodes": [e for s in arms["plan_a"] for e in s["episodes"]]}]
    assert _goals(arms)["by_goal"]["fixed_plan"]["return"] == _goals(shuffled)["by_goal"]["fixed_plan"]["return"]


def test_the_best_fixed_plan_and_maskable_row_are_the_highest_mean_return_among_the_named_rows():
    block = _goals(_arms(**{"maskable_multidiscrete (sampled actions)": (0.27, 0.5, 5e12)}))
    chosen = block["selection"]
    assert chosen["best_fixed_plan"] == "plan_a"
    assert chosen["fixed_among"] == ["static", "static_small", "static_largest", "plan_a", "plan_b"]
    assert chosen["best_maskable"] == "maskable_multidiscrete (sampled actions)"
    assert sorted(chosen["maskable_among"]) == ["maskable_flat", "maskable_flat-lr3",
                                                "maskable_multidiscrete (sampled actions)"]
    roles = h2h_goals.Roles(fixed=("plan_b", "static_small"), maskable=("maskable_flat",))
    chosen = _goals(_arms(), roles)["selection"]
    assert (chosen["best_fixed_plan"], chosen["best_maskable"]) == ("static_small", "maskable_flat-lr3")


@pytest.mark.parametrize(("changed", "jitter", "holds"), [
    ({}, JITTER, True),
    ({"oracle": (0.45, 0.62, 8e12)}, JITTER, False),  # closes 0.051 / 0.20 of the gap
    ({}, (0.0, 0.2, -0.2, 0.1), False),  # +0.075 but the CI holds 0
    ({"oracle": (0.24, 0.62, 8e12)}, JITTER, None),  # the oracle is below the best plan: no gap to read
])
def test_the_fixed_plan_goal(changed, jitter, holds):
    arms = _arms(**changed)
    arms["esper_agent"] = _slices("esper_agent", 0.30, 0.60, 5e12, jitter=jitter, budget=96)
    assert _goals(arms)["by_goal"]["fixed_plan"]["holds"] is holds


@pytest.mark.parametrize(("heuristic", "holds"), [
    ((0.25, 0.58, 6e12), True), ((0.31, 0.50, 6e12), False),  # return below the heuristic's
    ((0.25, 0.595, 6e12), False),  # +0.6 pp test accuracy only
    ((0.25, 0.58, 4e12), False),  # more training FLOPs
])
def test_the_heuristic_goal(heuristic, holds):
    assert _goals(_arms(heuristic=heuristic))["by_goal"]["heuristic"]["holds"] is holds


def test_the_static_frontier_goal_lists_the_conditions_below_it():
    goal = _goals(_arms(**{"static:mid": (0.2, (0.55, 0.65), 4.5e12)}))["by_goal"]["static_frontier"]
    assert goal["holds"] is False and goal["fails_on"] == ["pool5k"]
    assert [(e["condition"], e["static"]) for e in goal["conditions"]] == [("full", "static_small"),
                                                                          ("pool5k", "static_mid")]
    assert goal["worst"]["margin"] == pytest.approx(0.60 + 0.001 + 0.01 * 2 / 4 - 0.65 - 0.01 * 2 / 4)
    # a static size that scores higher but costs more than the learner is no rival
    assert _goals(_arms(**{"static:mid": (0.2, 0.65, 5.5e12)}))["by_goal"]["static_frontier"]["holds"] is True


def test_the_maskable_goal():
    assert _goals(_arms())["by_goal"]["maskable"]["holds"] is True
    assert _goals(_arms(maskable_multidiscrete=(0.31, 0.5, 5e12)))["by_goal"]["maskable"]["holds"] is False


def test_missing_arms_are_named_and_never_read():
    block = _goals(_arms(oracle=None, maskable_flat=None, **{"maskable_flat-lr3": None}))
    goal = block["by_goal"]
    assert goal["fixed_plan"] == {"goal": "fixed_plan", "rule": h2h_goals.GOALS["fixed_plan"],
                                  "missing": ["oracle (oracle)"], "holds": None}
    assert goal["maskable"]["missing"] == ["a MaskablePPO row (maskable_flat, maskable_multidiscrete)"]
    assert goal["heuristic"]["holds"] is True and goal["static_frontier"]["holds"] is True
    lines = h2h_report.goal_lines(block)
    assert f"| {h2h_goals.GOALS['fixed_plan']} | n/a | n/a | not read: missing oracle (oracle) |" in lines
    nobody = _goals({k: v for k, v in _arms().items() if k != "esper_agent"})
    assert {g["holds"] for g in nobody["goals"]} == {None} and nobody["differences"] == []
    assert all(g["missing"][0] == "esper_agent (learner)" for g in nobody["goals"])
    old = [{k: v for k, v in r.items() if k != "by_episode"} for r in compare_report.summarize(_arms())]
    assert h2h_goals.goals(old) == {}


def test_fieller_interval_is_every_ratio_whose_difference_ci_holds_zero():
    rng = np.random.default_rng(0)
    closed, gap = list(rng.normal(1.0, 0.3, 6)), list(rng.normal(2.0, 0.3, 6))
    low, high = h2h_goals.fieller(closed, gap)

    def inside(f: float) -> bool:
        mean, half = mean_ci95([n - f * g for n, g in zip(closed, gap, strict=True)])
        return abs(mean) <= half

    assert low < np.mean(closed) / np.mean(gap) < high
    assert inside(low + 1e-6) and inside(high - 1e-6) and not inside(low - 1e-6) and not inside(high + 1e-6)
    assert h2h_goals.fieller(closed, [1.0, -1.0, 0.5, -0.4, 0.2, -0.2]) is None  # the gap's CI holds 0: unbounded


def test_the_report_writes_the_goals_for_the_roles_it_is_given(tmp_path):
    folder = tmp_path / "Esper-Synthetic-v0"
    arms = _arms()
    arms["esper_agent-scratch"] = arms.pop("esper_agent")
    for slices in arms.values():
        for s in slices:
            path = folder / folder_name(s["arm"] if s["arm"] != "esper_agent" else "esper_agent-scratch")
            path.mkdir(parents=True, exist_ok=True)
            (path / f"seed{s['seed']}.json").write_text(json.dumps(s))
    compare_report.main([str(folder), "--goal-learner", "esper_agent-scratch", "--goal-maskable", "maskable_flat"])
    block = json.loads((folder / "goals.json").read_text())
    assert block["roles"]["learner"] == "esper_agent-scratch" and block["roles"]["maskable"] == ["maskable_flat"]
    assert [g["holds"] for g in block["goals"]] == [True] * 4
    table = (folder / "table.md").read_text()
    assert "| esper_agent-scratch − | arm | return | test accuracy | training FLOPs | learner seeds paired |" in table
    assert (f"| {h2h_goals.GOALS['maskable']} | return +4.10 pp | return ± 0.41 pp | yes |") in table
    assert table.index("## Goals") < table.index("## Cost, horizon")


def test_goal_flags_take_arms_as_the_campaign_spells_them_or_as_the_table_names_them():
    parser = argparse.ArgumentParser()
    h2h_goals.add_arguments(parser)
    spelled = h2h_goals.roles_from(parser.parse_args(["--goal-fixed", "plan:grow-x2@0", "static:small"]))
    named = h2h_goals.roles_from(parser.parse_args(["--goal-fixed", "plan_grow-x2_at0", "static_small"]))
    assert spelled.fixed == named.fixed == ("plan_grow-x2_at0", "static_small")
    assert spelled.learner == "esper_agent"


def test_only_the_learners_counted_episodes_pair_against_every_episode_of_the_other_arm():
    # overlapping reset seeds (seed k+1 replays one of seed k's): each learner seed counts one episode of its own
    def overlapping(arm: str, ret: float, uncounted: float) -> list[dict]:
        slices = _slices(arm, ret, 0.6, 1e12, budget=96)[:2]
        for s in slices:
            s["episodes"] = [e | {"env_seed": 100_000 + s["seed"] + i, "return": ret if i == 0 else uncounted}
                             for i, e in enumerate(s["episodes"])]
        return slices

    rows = {r["arm"]: r for r in compare_report.summarize({"esper_agent": overlapping("esper_agent", 0.3, 9.0),
                                                           "heuristic": overlapping("heuristic", 0.2, 0.2)})}
    assert [(e["seed"], e["env_seed"], e["counted"]) for e in rows["esper_agent"]["by_episode"]] == [
        (0, 100_000, True), (0, 100_001, False), (1, 100_001, True), (1, 100_002, False)]
    # learner seed 1 counts reset seed 100_001, which the heuristic played (uncounted) as its seed 0's second
    assert h2h_goals.paired(rows["esper_agent"], rows["heuristic"], "return") == pytest.approx(
        {"mean": 0.1, "ci95": 0.0, "seeds": 2})


def test_the_first_campaigns_goal_is_not_shown_beside_the_growth_tasks_goals():
    rows = compare_report.summarize(_arms())
    table = compare_report.markdown(rows, "env")
    assert "Goal: the arm's test-accuracy 95% CI" not in table
    older = [{k: v for k, v in r.items() if k != "plans"} for r in rows]  # slices without costs and plans
    assert "Goal: the arm's test-accuracy 95% CI" in compare_report.markdown(older, "env")
