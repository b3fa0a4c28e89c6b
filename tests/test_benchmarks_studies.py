"""Smoke tests of the finished studies under benchmarks/studies/ with tiny budgets on CPU, so that each stays
runnable; the committed results under benchmarks/results came from their GPU or longer CPU runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks import compare_report
from benchmarks.studies import (
    collapse,
    grouped,
    growth_screen,
    h2h_pilot,
    heuristic_budget,
    hidden_condition,
    host_alone,
    imitation_probe,
    queue_order,
    seed_groups,
)
from esper_agent.distributions import ActionMasks
from esper_env.config import EnvConfig
from esper_env.host import build_host
from esper_env.spaces import BLUEPRINT_NAMES, Head, Op

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks/results"

TINY = {"max_epochs": 4, "min_training_epochs": 0, "synthetic_train_size": 128, "synthetic_val_size": 64,
        "synthetic_test_size": 64, "batch_size": 64}


def test_screen_pairs_arms_and_writes_json(tmp_path):
    torch.set_num_threads(1)
    report = growth_screen.main(["--configs", f"tiny={json.dumps(TINY)}", "--arms", "static", "random",
                                 "grow_conv_light", "--episodes", "2", "--out", str(tmp_path)])
    summary = report["configs"]["tiny"]["summary"]
    assert summary["static"]["return_minus_static"][0] == 0.0
    assert summary["grow_conv_light"]["seed_params"][0] > 0  # it planted from the first epoch
    assert summary["random"]["best_growth_arm"] == "grow_conv_light"
    path = next(tmp_path.glob("growth_screen_cpu_*.json"))
    written = json.loads(path.read_text())
    assert len(written["configs"]["tiny"]["episodes"]["static"]) == 2
    _, free = growth_screen.reprice(path, "tiny", 0.0)  # no parameter price: the return is the accuracy gained
    grown = free["grow_conv_light"][0]
    assert grown["episode_return"] == pytest.approx(grown["final_accuracy"] - 0.1, abs=1e-6)
    _, same = growth_screen.reprice(path, "tiny", 0.01)  # the screen's own price changes nothing
    assert same == written["configs"]["tiny"]["episodes"]
    # a screen split over processes writes one file each with the same config name: both tables stay
    path.with_name("growth_screen_cpu_99999999-000000.json").write_text(path.read_text())
    summary_md = growth_screen.write_summary(tmp_path).read_text()
    assert summary_md.count("Esper-Synthetic-v0 tiny ") == 2
    assert path.name in summary_md and "growth_screen_cpu_99999999-000000.json" in summary_md


def test_scripted_growth_fossilizes_before_it_germinates():
    op_slot = np.zeros((2, len(Op), 3), bool)
    op_slot[:, Op.WAIT] = True
    op_slot[0, Op.GERMINATE, 1:] = True
    op_slot[1, Op.GERMINATE, 2] = op_slot[1, Op.FOSSILIZE, 0] = True
    masks = ActionMasks(flat=np.ones((2, 1), bool), op_slot=op_slot)
    actions = growth_screen.ScriptedGrowthActor("conv_heavy").act(np.zeros((2, 4)), masks, np.ones(2, bool))
    assert actions[0, Head.OP] == Op.GERMINATE and actions[0, Head.SLOT] == 1
    assert actions[0, Head.BLUEPRINT] == BLUEPRINT_NAMES.index("conv_heavy")
    assert actions[1, Head.OP] == Op.FOSSILIZE and actions[1, Head.SLOT] == 0


def test_unknown_arm_and_config_are_refused():
    with pytest.raises(ValueError, match="unknown arm"):
        growth_screen.make_actor("grow_tree", None, 0)  # type: ignore[arg-type]
    with pytest.raises(SystemExit, match="unknown config"):
        growth_screen.parse_config("nope")


def test_scripted_growth_plans_one_blueprint_per_slot():
    op_slot = np.zeros((2, len(Op), 2), bool)
    op_slot[:, Op.WAIT] = True
    op_slot[0, Op.GERMINATE, :] = True  # both slots free: the first gets its own blueprint
    op_slot[1, Op.GERMINATE, 1] = True  # only slot 1 free, and the plan leaves it empty: WAIT
    masks = ActionMasks(flat=np.ones((2, 1), bool), op_slot=op_slot)
    actor = growth_screen.make_actor("grow_conv_light+none", None, 0)  # type: ignore[arg-type]
    actions = actor.act(np.zeros((2, 4)), masks, np.ones(2, bool))
    assert actions[0, Head.OP] == Op.GERMINATE and actions[0, Head.SLOT] == 0
    assert actions[0, Head.BLUEPRINT] == BLUEPRINT_NAMES.index("conv_light")
    assert actions[1, Head.OP] == Op.WAIT
    plan = growth_screen.make_actor("grow_depthwise+conv_small", None, 0)  # type: ignore[arg-type]
    op_slot[0, Op.GERMINATE, 0] = False  # now slot 1 is the first free one
    assert plan.act(np.zeros((2, 4)), masks, np.ones(2, bool))[0, Head.BLUEPRINT] == BLUEPRINT_NAMES.index("conv_small")
    with pytest.raises(ValueError, match="a plan for 3 slots"):
        growth_screen.make_actor("grow_norm+norm+norm", None, 0).act(np.zeros((2, 4)), masks, np.ones(2, bool))
    with pytest.raises(ValueError, match="unknown arm"):
        growth_screen.make_actor("grow_none", None, 0)  # type: ignore[arg-type]


def test_scripted_growth_plants_only_what_the_blueprint_mask_allows():
    op_slot = np.zeros((2, len(Op), 3), bool)
    op_slot[:, Op.WAIT] = op_slot[:, Op.GERMINATE] = True
    blueprint = np.ones((2, 3, len(BLUEPRINT_NAMES)), bool)
    conv_heavy = BLUEPRINT_NAMES.index("conv_heavy")
    blueprint[0, 0, conv_heavy] = False  # over budget in slot 0 only: the next free slot takes it
    blueprint[1, :, conv_heavy] = False  # over budget everywhere: WAIT
    masks = ActionMasks(flat=np.ones((2, 1), bool), op_slot=op_slot, blueprint=blueprint)
    actions = growth_screen.ScriptedGrowthActor("conv_heavy").act(np.zeros((2, 4)), masks, np.ones(2, bool))
    assert actions[0, Head.OP] == Op.GERMINATE and actions[0, Head.SLOT] == 1
    assert actions[0, Head.BLUEPRINT] == conv_heavy
    assert actions[1, Head.OP] == Op.WAIT


def test_scripted_growth_plants_a_gated_seed_only_where_its_gate_fits():
    op_slot = np.zeros((2, len(Op), 3), bool)
    op_slot[:, Op.WAIT] = op_slot[:, Op.GERMINATE] = True
    blend = np.ones((2, 3, len(BLUEPRINT_NAMES), 3), bool)
    blend[1, 0, BLUEPRINT_NAMES.index("conv_light"), 2] = False  # sub-env 1: the gate does not fit in slot 0
    masks = ActionMasks(flat=np.ones((2, 1), bool), op_slot=op_slot, blueprint=blend.any(-1), blend=blend)
    actions = growth_screen.ScriptedGrowthActor("conv_light", blend=2).act(np.zeros((2, 4)), masks, np.ones(2, bool))
    assert (actions[:, Head.OP] == Op.GERMINATE).all() and (actions[:, Head.SLOT] == 0).all()
    assert actions[:, Head.BLEND].tolist() == [2, 0]  # gated where it fits, else linear (ungated)


def test_a_delayed_plan_waits_for_its_step_then_plants_and_counts_again_after_a_reset():
    op_slot = np.zeros((2, len(Op), 2), bool)
    op_slot[:, Op.WAIT] = op_slot[:, Op.GERMINATE, 0] = True
    masks = ActionMasks(flat=np.ones((2, 1), bool), op_slot=op_slot)
    actor = growth_screen.make_actor("grow_conv_light+none@2", None, 0)  # type: ignore[arg-type]
    actor.reset(2)
    ops = [actor.act(np.zeros((2, 4)), masks, np.array([t == 0, t in (0, 3)]))[:, Head.OP] for t in range(5)]
    # steps 0 and 1 WAIT; env 1's episode restarts at step 3, so it plants two steps later than env 0
    assert [int(o[0]) for o in ops] == [Op.WAIT, Op.WAIT, Op.GERMINATE, Op.GERMINATE, Op.GERMINATE]
    assert [int(o[1]) for o in ops] == [Op.WAIT, Op.WAIT, Op.GERMINATE, Op.WAIT, Op.WAIT]
    fossilizable = op_slot.copy()
    fossilizable[:, Op.FOSSILIZE, 1] = True
    actor.reset(2)
    first = actor.act(np.zeros((2, 4)), ActionMasks(flat=masks.flat, op_slot=fossilizable), np.ones(2, bool))
    assert (first[:, Head.OP] == Op.FOSSILIZE).all()  # the delay holds back planting only
    for bad in ("grow_conv_light@x", "grow_conv_light@-1"):
        with pytest.raises(ValueError, match="unknown arm"):
            growth_screen.make_actor(bad, None, 0)  # type: ignore[arg-type]


def test_reprice_with_a_budget_charges_only_the_parameters_past_it(tmp_path):
    torch.set_num_threads(1)
    growth_screen.main(["--configs", f"tiny={json.dumps(TINY)}", "--arms", "static", "grow_conv_light",
                        "--episodes", "2", "--out", str(tmp_path)])
    path = next(tmp_path.glob("growth_screen_cpu_*.json"))
    _, plain = growth_screen.reprice(path, "tiny", 0.01)
    _, budgeted = growth_screen.reprice(path, "tiny", 0.01, param_budget=100)
    cfg = EnvConfig.from_kwargs(**TINY, dataset="synthetic")
    host = growth_screen.host_param_count(cfg, growth_screen.load_dataset(cfg, torch.device("cpu")).spec)
    for before, after in zip(plain["grow_conv_light"], budgeted["grow_conv_light"], strict=True):
        over = max(0.0, before["seed_params"] - 100)  # at the default over_budget_penalty 1.0
        assert over > 0 and after["episode_return"] == pytest.approx(before["episode_return"] - over / host)
    assert budgeted["static"] == plain["static"]  # no seeds, nothing over budget


def test_summary_pairs_test_accuracy_with_the_heuristic():
    def episodes(tests: list[float]) -> list[dict]:
        return [{"env": i, "episode_return": 0.4, "final_accuracy": 0.5, "seed_params": 0.0, "rollback": False,
                 "test_accuracy": t} for i, t in enumerate(tests)]

    results = {"static": episodes([0.50, 0.52]), "heuristic": episodes([0.54, 0.55]),
               "grow_conv_light": episodes([0.55, 0.57])}
    summary = growth_screen.summarize(results)
    assert summary["grow_conv_light"]["test_minus_heuristic"][0] == pytest.approx(0.015)
    assert summary["heuristic"]["test_minus_heuristic"][0] == 0.0
    assert "test_minus_heuristic" not in growth_screen.summarize({"static": results["static"]})["static"]


# report_test_accuracy may be named in --env-kwargs: host_alone measures the test set whatever it says
SMALL = {"device": "cpu", "max_epochs": 3, "synthetic_train_size": 256, "synthetic_val_size": 128,
         "synthetic_test_size": 128, "batch_size": 64, "report_test_accuracy": False}


def test_host_alone_reports_test_accuracy(tmp_path):
    host_alone.main(["--env", "Esper-Synthetic-v0", "--seeds", "2", "--env-kwargs", json.dumps(SMALL),
                     "--out", str(tmp_path)])
    result = json.loads(next(tmp_path.glob("host_alone-cpu.json")).read_text())
    (row,) = result["rows"]
    assert row["truncated"] and len(row["test_accuracy"]) == 2
    assert {"git_commit", "git_dirty", "torch", "created"} <= set(result)


def test_the_imitation_probe_plays_the_imitated_policy_beside_the_heuristic(tmp_path):
    torch.set_num_threads(1)
    result = imitation_probe.main(["--env-kwargs", json.dumps(SMALL | {"max_epochs": 6}), "--num-envs", "2",
                                   "--updates", "2", "--episodes", "2", "--out", str(tmp_path),
                                   "--agent-kwargs", json.dumps({"hidden_size": 16, "rollout_steps": 6})])
    assert [len(result[k]["per_episode"]) for k in ("imitated_greedy", "heuristic")] == [2, 2]
    assert len(result["updates"]) == 2 and all(0 < u["imitation/action_prob"] <= 1 for u in result["updates"])
    assert json.loads(next(tmp_path.glob("imitation_probe_*.json")).read_text())["device"].startswith("cpu")


def test_the_heuristic_budget_study_compares_masked_and_unmasked_episodes(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setattr(heuristic_budget, "HOST", TINY | {"host_widths": [16, 32], "device": "cpu"})
    report = heuristic_budget.main(["--budgets", "100000", "--episodes", "2", "--threads", "1",
                                    "--out", str(tmp_path)])
    assert report["budgets"]["100000"]["identical_to_unmasked"]  # a budget nothing reaches changes nothing
    assert json.loads((tmp_path / "heuristic_budget_cpu.json").read_text())["unmasked"] == report["unmasked"]


@pytest.mark.parametrize("train", [True, False])
def test_grouped_host_is_the_same_function_as_separate_hosts(train: bool) -> None:
    torch.manual_seed(0)
    hosts = [build_host(EnvConfig(host_widths=(4, 8)), grouped.RANDOM_DATA) for _ in range(3)]
    model = grouped.GroupedHost(3, (4, 8))
    model.load_hosts(hosts)
    images = torch.randn(3, 5, 3, 16, 16)  # (K, B, C, H, W): each host its own batch
    for module in [model, *hosts]:
        module.train(train)
    no_slots = torch.zeros(2), torch.zeros(2, 2)  # two empty slots
    separate = torch.stack([host(x, *no_slots) for host, x in zip(hosts, images, strict=True)], dim=1)
    torch.testing.assert_close(model(grouped.interleave(images)), separate, rtol=1e-5, atol=1e-5)


def test_collapse_study_records_curves_and_rollbacks(tmp_path: Path) -> None:
    out = tmp_path / "collapse.json"
    kwargs = {"device": "cpu", "max_epochs": 3, "synthetic_train_size": 128, "synthetic_val_size": 32,
              "synthetic_test_size": 16, "batch_size": 32, "eval_batch_size": 32, "synthetic_image_size": 8}
    collapse.main(["--env", "Esper-Synthetic-v0", "--seeds", "2", "--env-kwargs", json.dumps(kwargs),
                   "--out", str(out)])
    result = json.loads(out.read_text())
    # a sub-env's record stops at its rollback (this tiny host at the default lr diverges in one of the two)
    ends = [3 if at is None else at + 1 for at in result["rollback_epoch"]]
    assert [len(c) for c in result["val_curves"]] == ends
    assert result["rolled_back"] == sum(at is not None for at in result["rollback_epoch"])
    assert result["device"] and "git_commit" in result


def test_seed_groups_report_pairs_by_reset_seed(tmp_path):
    """Evaluation episodes are matched to the screen's rows by reset seed (seed + sub-env), whatever their order."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("update,episode/return_mean\n" + "".join(
        f"{u},{0.5 if u <= 10 else 0.6}\n" for u in range(1, 31)))
    returns = {100: 0.50, 101: 0.60, 102: 0.40}  # the agent's, by reset seed
    episodes = [{"env": s - 100, "episode_return": r, "test_accuracy": 0.7} for s, r in returns.items()]
    (tmp_path / "run.argmax.json").write_text(json.dumps({"seed": 100, "episodes": episodes[::-1]}))
    fixed = [{"arm": "plan", "seed": s, "return": r - 0.01 * (s - 99), "test_accuracy": 0.6}
             for s, r in returns.items()]
    (tmp_path / "fixed-arms.jsonl").write_text("".join(json.dumps(row) + "\n" for row in fixed))
    text = seed_groups.report(tmp_path)
    assert "| run | 50.00 ± 0.00 | 60.00 ± 0.00 |  |" in text
    assert "| run (argmax) | 3 | 50.00 | 70.00 | +2.00 ± 2.48 |" in text  # 1, 2, 3 points above the plan
    duplicated = {"seed": 100, "episodes": episodes + episodes[:1]}
    (tmp_path / "run.argmax.json").write_text(json.dumps(duplicated))
    with pytest.raises(ValueError, match="more than one episode"):
        seed_groups.report(tmp_path)


def test_h2h_pilot_pairs_learners_by_reset_seed_and_picks_each_configurations_better_mode(tmp_path):
    """Two learner configurations, each evaluated by argmax and by sampling, and the static seedling, on the same
    reset seeds (two per learner seed, in a different order for the static arm): the differences are per learner
    seed means of per-episode differences, and the better mode is chosen per configuration by mean return."""
    folder = tmp_path / "Esper-Synthetic-v0"

    def episode(env_seed: int, ret: float, condition: str, ops: list) -> dict:
        return {"env_seed": env_seed, "return": ret, "val_accuracy": 0.5, "test_accuracy": ret + 0.1,
                "seed_params": 0.0, "rollback": False, "length": 4, "invalid_rate": 0.0, "condition": condition,
                "ops": ops, "params": 1e4, "train_flops": 1e12}

    deepen = [[0, "germinate", 1, "deepen"], [2, "fossilize", 1, None]]
    static_return = {1000: 0.40, 1001: 0.50, 2000: 0.30, 2001: 0.60}
    condition = {1000: "full", 1001: "pool5k", 2000: "full", 2001: "pool5k"}

    def slices(arm: str, plus: dict[int, float], sampled_plus: float | None, ops: list) -> None:
        (folder / arm).mkdir(parents=True)
        for seed, resets in ((0, [1000, 1001]), (1, [2000, 2001])):
            order = resets[::-1] if arm == "static" else resets
            s = {"arm": arm, "seed": seed, "budget_host_epochs": 0 if arm == "static" else 96, "train_seconds": 0.0,
                 "eval_seconds": 1.0, "device": "cpu", "curve": [],
                 "episodes": [episode(r, static_return[r] + plus[r], condition[r], ops) for r in order]}
            if sampled_plus is not None:
                s["sampled_episodes"] = [episode(r, static_return[r] + sampled_plus, condition[r], []) for r in order]
            (folder / arm / f"seed{seed}.json").write_text(json.dumps(s))

    slices("static", dict.fromkeys(static_return, 0.0), None, [])
    slices("esper_agent", {1000: 0.02, 1001: 0.04, 2000: 0.00, 2001: 0.00}, 0.05, [])  # argmax +3, +0; sampled +5
    slices("esper_agent-b", {1000: 0.06, 1001: 0.06, 2000: 0.04, 2001: 0.02}, 0.01, deepen)  # +6, +3; sampled +1
    compare_report.main([str(folder)])
    text = h2h_pilot.report(folder, plan="static", oracle="static")
    assert "| esper_agent | 2 | 46.50 | 56.50 | 1e+12 | +1.50 ± 19.06 |" in text  # seeds +3 and +0
    assert "| esper_agent-b | 2 | 49.50 | 59.50 | 1e+12 | +4.50 ± 19.06 |" in text
    assert "| esper_agent | esper_agent-b | -3.00 ± 0.00 |" in text  # argmax against argmax: -3 on both seeds
    assert "| esper_agent (sampled actions) | esper_agent-b | +0.50 ± 19.06 |" in text  # rule: +5-6, +5-3
    assert "| full | 2 | ? | none | +5.00 ± 0.00 | deepen 1.00 | +5.00 ± 12.71 |" in text


def test_the_hidden_condition_toy_hides_the_condition_until_reveal_and_pays_growth_only_where_it_pays():
    env = hidden_condition.HiddenConditionEnv(num_envs=64, horizon=6, reveal=2)
    obs, info = env.reset(seed=5)
    assert set(env.condition.tolist()) == {0, 1} and (obs[:, 1] == -1).all()
    assert info["op_slot_mask"][:, Op.GERMINATE, 0].all() and not info["op_slot_mask"][:, Op.PRUNE].any()
    actions = np.zeros((64, len(Head)), np.int64)
    actions[:, 0] = Op.GERMINATE
    returns = np.zeros(64)
    for t in range(6):
        obs, reward, terminated, truncated, info = env.step(actions)
        returns += reward
        assert (obs[:, 1] == -1).all() == (t + 1 < 2) and (truncated == (t == 5)).all() and not terminated.any()
        assert not info["op_slot_mask"][:, Op.GERMINATE].any()  # once per episode
    waited = hidden_condition.HiddenConditionEnv(num_envs=64, horizon=6, reveal=2)
    waited.reset(seed=5)
    waits = sum(waited.step(np.zeros((64, len(Head)), np.int64))[1] for _ in range(6))
    gain = returns - waits  # the same episodes (same reset seeds), growing at step 0 against never
    assert np.allclose(gain[env.condition == 0], 0.08 - 0.01) and np.allclose(gain[env.condition == 1], -0.04)
    obs, reward, terminated, truncated, info = env.step(actions)  # NEXT_STEP autoreset: this step only restarts
    assert not reward.any() and not truncated.any() and (obs[:, 0] == 0).all() and (obs[:, 1] == -1).all()
    assert info["op_slot_mask"][:, Op.GERMINATE, 0].all()
    fixed = hidden_condition.fixed_returns({"horizon": 6, "reveal": 2})
    assert fixed["oracle"] > fixed["blind"] > fixed["wait"]


def test_the_hidden_condition_toys_grow_window_allows_germinate_only_inside_it():
    env = hidden_condition.HiddenConditionEnv(num_envs=4, horizon=6, reveal=2, grow_window=(2, 2))
    env.reset(seed=[3, 3, 4, 4])  # a seed group: the same reset seed, the same episode
    assert env.condition[0] == env.condition[1] and env.luck[0] == env.luck[1]
    germinate = np.zeros((4, len(Head)), np.int64)
    germinate[:, 0] = Op.GERMINATE
    allowed = []
    for _ in range(6):
        allowed.append(bool(env._info()["op_slot_mask"][0, Op.GERMINATE, 0]))
        env.step(germinate)  # refused (run as WAIT) outside the window
    assert allowed == [False, False, True, False, False, False] and (env.grown_at == 2).all()
    fixed = hidden_condition.fixed_returns({"horizon": 6, "reveal": 2, "grow_window": [2, 2]})
    assert fixed["oracle"] > fixed["wait"] and fixed["oracle"] > fixed["blind"]
    with pytest.raises(ValueError, match="grow_window"):
        hidden_condition.HiddenConditionEnv(horizon=6, grow_window=(4, 6))
    with pytest.raises(ValueError, match="reveal=0"):
        hidden_condition.HiddenConditionEnv(reveal=0)


def test_the_hidden_condition_toys_undo_keeps_only_fossilized_growth_and_prunes_a_seed_held_too_long():
    env = hidden_condition.HiddenConditionEnv(num_envs=3, horizon=12, reveal=2, undo=(2, 3))
    obs, info = env.reset(seed=[7, 7, 7])  # one episode three times: fossilized, pruned, left to time out
    assert obs.shape == (3, 5) and not info["op_slot_mask"][:, [Op.PRUNE, Op.FOSSILIZE]].any()
    plays = [[Op.GERMINATE, Op.WAIT, Op.FOSSILIZE], [Op.GERMINATE, Op.PRUNE], [Op.GERMINATE]]
    returns, allowed, left = np.zeros(3), [], []
    for t in range(12):
        actions = np.zeros((3, len(Head)), np.int64)
        actions[:, 0] = [play[t] if t < len(play) else Op.WAIT for play in plays]
        allowed.append(info["op_slot_mask"][2, :, 0].copy())
        left.append(int(info["holding_steps_left"][2, 0]))
        obs, reward, _, _, info = env.step(actions)
        returns += reward
    # FOSSILIZE from hold_from steps after planting; a seed still live after step 0 + 2 + 3 is pruned
    assert [bool(a[Op.FOSSILIZE]) for a in allowed[:7]] == [False, False, True, True, True, True, False]
    assert [bool(a[Op.PRUNE]) for a in allowed[:7]] == [False, True, True, True, True, True, False]
    assert left[:7] == [0, 0, 4, 3, 2, 1, 0]  # as on Esper: 1 is the last step FOSSILIZE may keep it
    assert env.kept().tolist() == [True, False, False] and env.pruned.tolist() == [False, True, True]
    assert obs[:, 2:].tolist() == [[0, 1, 0], [0, 0, 1], [0, 0, 1]]  # live, fossilized, pruned
    gain = 0.08 if env.condition[0] == 0 else -0.03
    assert returns[0] - returns[1] == pytest.approx(gain) and returns[1] == pytest.approx(returns[2])
    fixed = hidden_condition.fixed_returns({"horizon": 12, "reveal": 4, "undo": [2, 5]})
    assert fixed["oracle"] > fixed["blind"] > fixed["wait"]  # plant, then keep or undo once the condition shows
    with pytest.raises(ValueError, match=r"undo=\(2, 0\)"):
        hidden_condition.HiddenConditionEnv(undo=(2, 0))


def test_the_hidden_condition_toys_costing_sets_how_often_growth_costs_and_how_much():
    rare = hidden_condition.HiddenConditionEnv(num_envs=1200, costing=(1 / 12, -0.09))
    rare.reset(seed=0)
    assert 0.05 < rare.condition.mean() < 0.12
    germinate = np.zeros((1200, len(Head)), np.int64)
    germinate[:, 0] = Op.GERMINATE
    grown = sum(rare.step(germinate)[1] for _ in range(20))
    rare.reset(seed=0)
    waited = sum(rare.step(np.zeros_like(germinate))[1] for _ in range(20))
    costs = rare.condition == 1
    assert np.allclose((grown - waited)[costs], -0.09 - 0.01) and np.allclose((grown - waited)[~costs], 0.08 - 0.01)
    fair = hidden_condition.HiddenConditionEnv(num_envs=64)
    fair.reset(seed=5)
    assert fair.condition.tolist() == [np.random.default_rng(5 + i).integers(2) for i in range(64)]
    with pytest.raises(ValueError, match=r"costing=\(1.0, -0.03\)"):
        hidden_condition.HiddenConditionEnv(costing=(1.0, -0.03))
    with pytest.raises(ValueError, match="a negative gain"):
        hidden_condition.HiddenConditionEnv(costing=(0.5, 0.01))


def test_the_hidden_condition_study_trains_reads_and_tabulates(tmp_path):
    out = tmp_path / "runs.jsonl"
    hidden_condition.main(["--updates", "2", "--check-every", "1", "--seeds", "0-1", "--env-kwargs",
                           json.dumps({"horizon": 4, "reveal": 1}), "--config", "tiny", json.dumps({"hidden_size": 16}),
                           "--out", str(out)])
    runs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["seed"] for r in runs] == [0, 1] and [c["update"] for c in runs[0]["checks"]] == [1, 2]
    assert runs[0]["agent_kwargs"] == {"hidden_size": 16} and 0 <= runs[0]["checks"][-1]["grows_pays"] <= 1
    table = out.with_suffix(".md").read_text()
    assert "| tiny | 2 | 8 | 2 |" in table and "oracle" in table
    hidden_condition.main(["--out", str(out)])  # no --config: the same table again, nothing trained
    assert out.with_suffix(".md").read_text() == table and len(out.read_text().splitlines()) == 2


def test_queue_order_schedules_each_slice_on_the_first_slot_to_free(tmp_path):
    calls = {"long": 5, "short": 1}
    assert queue_order.makespan(["long", "short", "short"], calls, paused=(2, 1), slots=2) == 6  # long: 1 -> 6
    assert queue_order.makespan(["short", "short", "long"], calls, paused=(2, 1), slots=2) == 7  # long: 2 -> 7
    assert queue_order.longest_first(["short", "long", "short"], calls) == ("long", "short", "short")
    result = queue_order.main(["--draws", "2", "--out", str(tmp_path / "q.json")])
    assert result["estimates"]["longest first"] <= result["estimates"]["seed by seed"]
    assert result["mean_over_draws"]["best of all orders"] <= result["mean_over_draws"]["longest first"]
    assert json.loads((tmp_path / "q.json").read_text())["orders_searched"] == 92400
    with pytest.raises(SystemExit):
        queue_order.main(["--draws", "0"])


def test_hidden_condition_pairs_first_reads_by_seed_and_leaves_out_nevers():
    def run(label, seed, first):
        return {"label": label, "seed": seed, "first_read": first}
    runs = [run("a", 0, 40), run("a", 1, 60), run("a", 2, None), run("a", 3, 50),
            run("b", 0, 10), run("b", 1, 20), run("b", 2, 30), run("b", 3, None), run("b", 4, 10)]
    paired = hidden_condition.paired_first_reads(runs, "b", "a")
    assert paired["mean"] == pytest.approx(-35.0) and paired["seeds"] == 2 and paired["unpaired"] == 2
    assert paired["ci95"] == pytest.approx(12.706 * 5.0)  # two differences, -30 and -40: sd 7.07, se 5
    assert hidden_condition.paired_lines(runs, "a") == [
        "b − a, first read paired by seed: -35 ± 64 updates (Student-t 95%, 2 seeds where both read; 2 where "
        "either never read)"]
    with pytest.raises(ValueError, match=r"--paired-against 'c': no runs of it; the labels are \['a', 'b'\]"):
        hidden_condition.paired_lines(runs, "c")


@pytest.mark.skipif(not (RESULTS / "hidden_condition/skip-window.jsonl").exists(),
                    reason="the committed hidden-condition runs are not in this checkout")
def test_the_committed_skip_window_runs_give_the_notebooks_paired_read():
    runs = hidden_condition.read_runs(RESULTS / "hidden_condition/skip-window.jsonl")
    paired = hidden_condition.paired_first_reads(runs, "e3-skip", "e3")  # docs/experiments/2026-11-29-...-toy.md
    assert (round(paired["mean"]), round(paired["ci95"]), paired["seeds"]) == (-35, 13, 10)
