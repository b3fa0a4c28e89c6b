"""The head-to-head's report additions on hand-made slices: cost per arm, the learners' horizon, plans by hidden
condition and the accuracy-against-FLOPs figure with the static frontier."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import compare_report, h2h_report
from benchmarks.h2h_arms import folder_name
from esper_env.blueprints import BLUEPRINTS, FAMILY_BLUEPRINTS
from esper_env.lifecycle import Stage

GROW = [[0, "germinate", 0, "widen_s"], [1, "germinate", 1, "widen_s"], [4, "fossilize", 0, None]]


def _episode(env_seed: int, test: float, condition: str, ops: list, params: float, flops: float) -> dict:
    return {"env_seed": env_seed, "return": test - 0.1, "val_accuracy": test, "test_accuracy": test,
            "seed_params": 0.0, "rollback": False, "length": 6, "invalid_rate": 0.0, "condition": condition,
            "ops": ops, "params": params, "train_flops": flops}


def _slice(arm: str, seed: int, test: float, ops: list, params: float, flops: float, budget: int = 0,
           horizon: str | None = None) -> dict:
    """Two evaluation episodes of reset seeds 100k + 10 seed + (0, 1), on conditions full and pool5k; the second's
    test accuracy and costs 10% above the first's."""
    episodes = [_episode(100_000 + 10 * seed + i, test * (1 + 0.1 * i), condition, ops, params * (1 + 0.1 * i),
                         flops * (1 + 0.1 * i)) for i, condition in enumerate(("full", "pool5k"))]
    return {"arm": arm, "seed": seed, "episodes": episodes, "budget_host_epochs": budget, "horizon": horizon,
            "train_seconds": 0.0, "eval_seconds": 1.0, "device": "cpu", "curve": []}


def _write(folder: Path, slices: list[dict]) -> None:
    for s in slices:
        path = folder / folder_name(s["arm"]) / f"seed{s['seed']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(s))


def test_the_report_gives_cost_horizon_plans_and_the_frontier_per_arm(tmp_path):
    folder = tmp_path / "Esper-Synthetic-v0"
    _write(folder, [_slice(arm, seed, test, ops, params, flops, budget, horizon)
                    for seed in (0, 1)
                    for arm, test, ops, params, flops, budget, horizon in (
                        ("static", 0.50, [], 1e4, 2e12, 0, None),
                        ("static:small", 0.60, [], 4e4, 8e12, 0, None),
                        ("static:wide", 0.55, [], 1.6e5, 3e13, 0, None),
                        ("plan:grow-x2@0", 0.58, GROW, 4e4, 7e12, 0, None),
                        ("oracle", 0.62, [], 4e4, 8e12, 0, None),
                        ("esper_agent", 0.57, GROW[:1], 2e4, 5e12, 96, "terminal"),
                        ("maskable_flat", 0.52, [], 1e4, 2e12, 96, "truncated"))])
    compare_report.main([str(folder)])
    rows = {r["arm"]: r for r in json.loads((folder / "summary.json").read_text())}
    small = rows["static_small"]
    assert small["kind"] == "static" and small["final_params"] == pytest.approx(4.2e4)
    assert small["train_flops"] == pytest.approx(8.4e12)
    assert small["per_seed_costs"][1] == pytest.approx({"seed": 1, "return": 0.53, "test_accuracy": 0.63,
                                                         "final_params": 4.2e4, "train_flops": 8.4e12})
    assert rows["oracle"]["kind"] == "ceiling" and rows["esper_agent"]["kind"] == "learner"
    assert rows["esper_agent"]["horizon"] == "terminal" and rows["static"]["horizon"] is None
    plan = rows["plan_grow-x2_at0"]["plans"]
    assert sorted(plan) == ["full", "pool5k"]
    assert plan["full"] == {"episodes": 2, "germinations_at": {"0": 2, "1": 2}, "germinations_per_episode": 2.0,
                            "ops": [{"op": "germinate", "blueprint": "widen_s", "slot": 0, "count": 2},
                                    {"op": "germinate", "blueprint": "widen_s", "slot": 1, "count": 2},
                                    {"op": "fossilize", "blueprint": None, "slot": 0, "count": 2}]}
    assert rows["static"]["plans"]["pool5k"]["ops"] == [] and rows["static"]["plans"]["pool5k"]["episodes"] == 2
    table = (folder / "table.md").read_text()
    section = table.split("## Cost, horizon and what each arm grows")[1]
    assert "| oracle | ceiling (knows the condition) | 2 | 55.10 | 65.10 | 42,000 | 8.4e+12 | – |" in section
    assert "| esper_agent | learner | 2 | 49.85 | 59.85 | 21,000 | 5.25e+12 | terminal |" in section
    assert "differently (esper_agent: terminal, maskable_flat: truncated)" in section
    assert ("Static frontier (static arms by training FLOPs): static 2.1e+12 FLOPs, 52.50%; static_small 8.4e+12 "
            "FLOPs, 63.00%; static_wide 3.15e+13 FLOPs, 57.75%.") in section
    assert ("- plan_grow-x2_at0, full (2 episodes, 2.00 germinations each): germinate widen_s@0 ×2, germinate "
            "widen_s@1 ×2, fossilize@0 ×2; germinations at steps 0 ×2, 1 ×2") in section
    assert "- static, pool5k (2 episodes, 0.00 germinations each): WAIT only; germinations at steps none" in section
    assert (folder / "accuracy-flops.png").stat().st_size > 0 and (folder / "plans.png").stat().st_size > 0
    agent = compare_report.load_slices(folder)["esper_agent"]
    full = agent[0]["episodes"][0]
    # seed 0: three episodes of full, one grows (1/3 per episode); seed 1: one episode of full, not growing (0)
    agent[0]["episodes"] = [full, {**full, "ops": []}, {**full, "ops": []}, agent[0]["episodes"][1]]
    agent[1]["episodes"][0]["ops"] = []
    when, what, seeds = h2h_report.plan_grids(agent, ["full", "missing", "pool5k"], 3,
                                              [("widen_s", 0), ("widen_s", 1)])
    # per seed, then the mean over seeds (1/6), not over pooled episodes (1/4); blank where no seed played
    assert when[0].tolist() == pytest.approx([1 / 6, 0, 0]) and what[0].tolist() == pytest.approx([1 / 6, 0])
    assert np.isnan(when[1]).all() and when[2].tolist() == [1, 0, 0] and seeds.tolist() == [2, 0, 2]


def test_the_table_shows_what_a_learner_trained_where_it_ran_past_its_budget():
    # MaskablePPO trains whole rollouts: 8,000 host epochs in rollouts of 640 end at 8,320
    slices = {"static": [_slice("static", 0, 0.5, [], 1e4, 2e12)],
              "maskable_flat": [_slice("maskable_flat", seed, 0.5, [], 1e4, 2e12, 8000) for seed in (0, 1)],
              "esper_agent": [_slice("esper_agent", 0, 0.5, [], 1e4, 2e12, 8000)]}
    slices["maskable_flat"][1]["curve"] = [{"host_epochs": 7680}, {"host_epochs": 8320}]
    slices["esper_agent"][0]["curve"] = [{"host_epochs": 8000}]
    rows = {r["arm"]: r for r in compare_report.summarize(slices)}
    assert [rows[a]["trained_host_epochs"] for a in ("static", "maskable_flat", "esper_agent")] == [0, 8320, 8000]
    table = compare_report.markdown(list(rows.values()), "Esper-Synthetic-v0")
    assert "| 8000 (8320 trained) |" in table and table.count("| 8000 |") == 1 and "| 0 |" in table


def test_the_frontier_the_horizon_line_and_slices_without_facts():
    rows = [{"arm": "b", "kind": "static", "train_flops": 9.0, "test_accuracy": 0.7},
            {"arm": "a", "kind": "static", "train_flops": 3.0, "test_accuracy": 0.6},
            {"arm": "g", "kind": "plan", "train_flops": 5.0, "test_accuracy": 0.9},
            {"arm": "n", "kind": "static", "train_flops": float("nan"), "test_accuracy": 0.5}]
    assert [p["arm"] for p in h2h_report.static_frontier(rows)] == ["a", "b"]
    learners = [{"arm": a, "kind": "learner", "horizon": "truncated"} for a in ("esper_agent", "maskable_flat")]
    assert h2h_report._horizon_line(learners) == "Horizon: every learner read the end at max_epochs as truncated."
    old = _slice("heuristic", 0, 0.5, [], 1.0, 1.0)
    old["episodes"] = [{k: v for k, v in e.items() if k not in ("condition", "ops", "params", "train_flops")}
                       for e in old["episodes"]]
    assert h2h_report.row_fields([old], compare_report.counted_episodes([old])) == {}
    rows = compare_report.summarize({"heuristic": [old]})
    assert h2h_report.markdown_lines(rows) == [] and "## Cost" not in compare_report.markdown(rows, "env")
    assert not h2h_report.plot_accuracy_flops(rows, Path("unused.png"), "env")
    assert not h2h_report.plot_plans({"heuristic": [old]}, Path("unused.png"), "env")


def _timeline(stages: list[list[int]], blueprints: list[list[int]], **fields) -> dict:
    """An evaluation timeline as ``EpisodeRecord.to_json`` writes it, with what reading its events needs."""
    steps, slots = len(stages), len(stages[0])
    return {"num_slots": slots, "stage": stages, "blueprint": blueprints, "rollback": [False] * steps,
            "holding_timeout": [[False] * slots] * steps, "contribution": [[None] * slots] * steps} | fields


def test_grown_names_seeds_from_the_catalogue_of_the_episodes_host():
    def timeline(**host: str) -> dict:
        return _timeline([[Stage.GERMINATED, Stage.FOSSILIZED, Stage.DORMANT]], [[0, 1, -1]], **host)

    family = compare_report.grown([{"episode_records": [timeline(host="family")]}])
    assert family == f"{FAMILY_BLUEPRINTS[0].name}*, {FAMILY_BLUEPRINTS[1].name}, - (100%)"
    small = compare_report.grown([{"episode_records": [timeline()]}])  # timelines from before the family host
    assert small == f"{BLUEPRINTS[0].name}*, {BLUEPRINTS[1].name}, - (100%)"


def test_grown_on_the_family_host_names_the_seeds_that_joined_from_each_slot():
    d, g, h = Stage.DORMANT, Stage.GERMINATED, Stage.HOLDING
    # slots 0 and 1 join at step 3 (blueprints 1 and 2), slot 0 germinates blueprint 0 at step 4; slot 2: nothing
    stages = [[d, d, d], [g, g, d], [h, h, d], [d, d, d], [g, d, d]]
    blueprints = [[-1, -1, -1], [1, 2, -1], [1, 2, -1], [-1, -1, -1], [0, -1, -1]]
    timeline = _timeline(stages, blueprints, host="family")
    names = [b.name for b in FAMILY_BLUEPRINTS]
    assert h2h_report.seeds_at_end(timeline) == f"{names[1]}+{names[0]}*, {names[2]}, -"
    rolled_back = timeline | {"rollback": [False, False, False, True, False]}  # step 3's empty slots: a rollback
    assert h2h_report.seeds_at_end(rolled_back) == f"{names[0]}*, -, -"
