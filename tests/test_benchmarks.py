"""Smoke tests of the benchmark scripts with tiny budgets on CPU (the real runs are on a GPU)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmarks import checkpoint_cost, compare_agents, compare_plots, compare_report
from benchmarks.sb3_actor import Sb3Actor
from benchmarks.slice_state import TrainingClock
from esper_agent.checkpoint import load_checkpoint, save_checkpoint

# report_test_accuracy may be named in --env-kwargs: evaluation measures the test set whatever it says
TINY = {"device": "cpu", "max_epochs": 3, "synthetic_train_size": 256, "synthetic_val_size": 128,
        "synthetic_test_size": 128, "batch_size": 64, "report_test_accuracy": False}


def test_compare_agents_writes_resumable_slices_and_the_report(tmp_path, capsys):
    torch.set_num_threads(1)
    args = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--arms", "static", "heuristic",
            "--seeds", "0", "1", "--eval-episodes", "2", "--out", str(tmp_path)]
    compare_agents.main(args)
    folder = tmp_path / "Esper-Synthetic-v0"
    slice_ = json.loads((folder / "heuristic" / "seed1.json").read_text())
    assert len(slice_["episodes"]) == 2 and slice_["episodes"][0]["length"] == 3
    assert all(0.0 <= e["test_accuracy"] <= 1.0 for e in slice_["episodes"])
    assert (folder / "heuristic" / "seed0-sheet.png").exists()
    assert "episode_records" not in slice_ and (folder / "heuristic" / "seed1-records.json.gz").exists()
    compare_agents.main(args)  # every slice exists: nothing is recomputed
    assert capsys.readouterr().out.count("exists: skipped") == 4
    compare_agents.main(["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--arms", "static",
                         "--seeds", "0", "--eval-episodes", "2", "--out", str(tmp_path), "--label", "again"])
    compare_report.main([str(folder)])
    table = (folder / "table.md").read_text()
    assert "| static | 2 |" in table and "| heuristic | 2 |" in table and (folder / "curves.png").exists()
    assert "| static-again | 1 |" in table  # a labelled run sits beside the arm's own folder
    assert "(100%) |" in table.split("| static | 2 |")[1].splitlines()[0]  # "grown", read from the timelines


def test_the_agent_arm_records_its_telemetry_and_the_report_plots_it(tmp_path):
    torch.set_num_threads(1)
    common = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "0", "--eval-episodes", "1",
              "--num-envs", "2", "--out", str(tmp_path)]
    compare_agents.main([*common, "--arms", "esper_agent", "--budget-epochs", "12", "--agent-device", "cpu",
                         "--label", "tiny", "--agent-kwargs", json.dumps({"hidden_size": 16})])
    compare_agents.main([*common, "--arms", "static"])
    folder = tmp_path / "Esper-Synthetic-v0"
    curve = json.loads((folder / "esper_agent-tiny" / "seed0.json").read_text())["curve"]
    assert len(curve) == 2  # 12 host epochs = 2 updates of 2 sub-envs x 3 steps
    assert {"entropy/op", "entropy/blueprint", "ppo/kl", "value/explained_variance"} <= set(curve[0]["telemetry"])
    assert "plant/slot0_conv_light" in curve[0]["telemetry"]  # what GERMINATE planted where, per update
    compare_report.main([str(folder)])
    assert (folder / "telemetry-esper_agent-tiny.png").exists()
    assert not (folder / "telemetry-static.png").exists()  # nothing learned, nothing to plot
    table = (folder / "table.md").read_text()
    assert table.index("| esper_agent-tiny |") < table.index("| static |")  # a labelled arm sits with its arm


def test_an_agent_arm_with_selection_plays_the_kept_and_the_last_policy_on_the_same_episodes(tmp_path):
    torch.set_num_threads(1)
    compare_agents.main(["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "0",
                         "--eval-episodes", "2", "--num-envs", "2", "--out", str(tmp_path), "--arms", "esper_agent",
                         "--budget-epochs", "18", "--agent-device", "cpu", "--agent-kwargs",
                         json.dumps({"hidden_size": 16, "select_best_window": 2})])
    folder = tmp_path / "Esper-Synthetic-v0"
    slice_ = json.loads((folder / "esper_agent" / "seed0.json").read_text())
    returns = [point["return"] for point in slice_["curve"]]  # 3 updates: windows end at updates 2 and 3
    kept = 2 if (returns[0] + returns[1]) >= (returns[1] + returns[2]) else 3
    assert slice_["selection"] == {"window": 2, "update": kept,
                                   "window_return_mean": pytest.approx(sum(returns[kept - 2:kept]) / 2)}
    last = slice_["last_policy_episodes"]
    assert [e["env_seed"] for e in last] == [e["env_seed"] for e in slice_["episodes"]]
    compare_report.main([str(folder)])
    table = (folder / "table.md").read_text()
    assert "| esper_agent | 1 |" in table and "| esper_agent (last policy) | 1 |" in table
    assert table.splitlines()[-1].endswith(" |  |")  # the last policy's row names no kept update
    assert f" | {kept} |" in next(line for line in table.splitlines() if line.startswith("| esper_agent | 0 |"))


def test_eval_sampled_plays_the_same_episodes_with_sampled_actions(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    evaluate, played = compare_agents.evaluate, []

    def recording(actor, args, seed):  # which actor played (3-epoch episodes end alike whatever it does)
        played.append(actor.deterministic)
        return evaluate(actor, args, seed)

    monkeypatch.setattr(compare_agents, "evaluate", recording)
    compare_agents.main(["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "0", "1",
                         "--eval-episodes", "4", "--num-envs", "2", "--out", str(tmp_path), "--arms", "esper_agent",
                         "--budget-epochs", "6", "--agent-device", "cpu", "--agent-kwargs",
                         json.dumps({"hidden_size": 16})])  # seeds 0 and 1 without the flag: left out of the row
    folder = tmp_path / "Esper-Synthetic-v0"
    compare_agents.main(["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "2",
                         "--eval-episodes", "4", "--num-envs", "2", "--out", str(tmp_path), "--arms", "esper_agent",
                         "--budget-epochs", "6", "--agent-device", "cpu", "--agent-kwargs",
                         json.dumps({"hidden_size": 16}), "--eval-sampled"])
    slice_ = json.loads((folder / "esper_agent" / "seed2.json").read_text())
    sampled, argmax = slice_["sampled_episodes"], slice_["episodes"]
    assert [e["env_seed"] for e in sampled] == [e["env_seed"] for e in argmax]
    assert played == [True, True, True, False]  # seeds 0 and 1 argmax only; seed 2 argmax, then sampled
    assert "sampled_episodes" not in json.loads((folder / "esper_agent" / "seed0.json").read_text())
    compare_report.main([str(folder)])
    table = (folder / "table.md").read_text()
    assert "| esper_agent | 3 |" in table and "| esper_agent (sampled actions) | 1 |" in table


class _SamplingModel:
    """Stands in for a MaskablePPO model: samples from torch's global stream unless deterministic."""

    def __init__(self):
        self.calls = []

    def predict(self, obs, action_masks, deterministic):
        self.calls.append(deterministic)
        if deterministic:
            return np.zeros((len(obs), 5), np.int64), None
        return torch.randint(0, 1000, (len(obs), 5)).numpy(), None


def test_a_sampling_sb3_actor_draws_from_its_own_seeded_stream():
    obs, masks, starts = np.zeros((2, 4), np.float32), SimpleNamespace(flat=np.ones((2, 9), bool)), np.ones(2, bool)

    def draws(seed):
        actor = Sb3Actor(_SamplingModel(), flatten=False, num_slots=1, deterministic=False, seed=seed)
        return [actor.act(obs, masks, starts).tolist() for _ in range(3)]

    torch.manual_seed(0)
    first = draws(7)
    state = torch.get_rng_state()
    again = draws(7)
    assert torch.equal(torch.get_rng_state(), state)  # torch's own stream is left where it was
    assert first == again and first[0] != first[1] and draws(8) != first
    argmax = Sb3Actor(_SamplingModel(), flatten=False, num_slots=1)
    assert argmax.act(obs, masks, starts).tolist() == [[0] * 5] * 2 and argmax.model.calls == [True]


def test_a_paused_agent_slice_continues_exactly_where_it_stopped(tmp_path, capsys):
    torch.set_num_threads(1)
    common = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "0", "--eval-episodes", "2",
              "--num-envs", "2", "--arms", "esper_agent", "--budget-epochs", "18", "--agent-device", "cpu",
              "--agent-kwargs", json.dumps({"hidden_size": 16, "imitation_updates": 1})]  # pauses at the switch
    compare_agents.main([*common, "--out", str(tmp_path / "whole")])
    paused = tmp_path / "paused" / "Esper-Synthetic-v0" / "esper_agent"
    for done in (1, 2):  # a limit of 0 s: one update per run, then the state is saved
        compare_agents.main([*common, "--out", str(tmp_path / "paused"), "--time-limit-s", "0"])
        assert (paused / "seed0.ckpt").exists() and not (paused / "seed0.json").exists()
        assert f"paused after update {done}/3" in capsys.readouterr().out
    changed = [a if a != "18" else "24" for a in common]  # another budget: not the run that was saved
    with pytest.raises(ValueError, match="budget_epochs"):
        compare_agents.main([*changed, "--out", str(tmp_path / "paused")])
    # the last update fits the limit, its evaluation (reserved: all but 0.01 s of it) does not: trained, not evaluated
    compare_agents.main([*common, "--out", str(tmp_path / "paused"), "--time-limit-s", "1000",
                         "--eval-reserve-s", "999.99"])
    assert "esper_agent seed 0: trained, paused before its evaluation" in capsys.readouterr().out
    assert (paused / "seed0.ckpt").exists() and not (paused / "seed0.json").exists()
    compare_agents.main([*common, "--out", str(tmp_path / "paused")])
    assert "continues from update 3/3" in capsys.readouterr().out  # straight to the evaluation
    assert not (paused / "seed0.ckpt").exists()
    whole = json.loads((tmp_path / "whole" / "Esper-Synthetic-v0" / "esper_agent" / "seed0.json").read_text())
    resumed = json.loads((paused / "seed0.json").read_text())
    assert [p["return"] for p in resumed["curve"]] == [p["return"] for p in whole["curve"]]
    assert resumed["episodes"] == whole["episodes"]
    # every run that trained it, on its device and code; the last only evaluated
    spans = [(r["from_host_epochs"], r["to_host_epochs"]) for r in resumed["training_runs"]]
    assert spans == [(0, 6), (6, 12), (12, 18), (18, 18)]
    assert {r["device"] for r in resumed["training_runs"]} == {resumed["device"]}
    assert {r["git_commit"] for r in resumed["training_runs"]} == {resumed["git_commit"]}
    assert [(r["from_host_epochs"], r["to_host_epochs"]) for r in whole["training_runs"]] == [(0, 18)]


class _HostLost(Exception):
    """What a test raises where a GPU host went away mid-run."""


def _lose_host_at(monkeypatch, owner, name, call):
    """Make ``owner.name`` raise :class:`_HostLost` on its ``call``-th call (counted from 1)."""
    real, calls = getattr(owner, name), []

    def dying(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise _HostLost
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, dying)


def test_an_agent_slice_cut_short_continues_from_its_last_update(tmp_path, monkeypatch, capsys):
    torch.set_num_threads(1)
    common = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "0", "--eval-episodes", "2",
              "--num-envs", "2", "--arms", "esper_agent", "--budget-epochs", "18", "--agent-device", "cpu",
              "--agent-kwargs", json.dumps({"hidden_size": 16, "imitation_updates": 1, "select_best_window": 1})]
    compare_agents.main([*common, "--out", str(tmp_path / "whole")])  # three updates, the best one's policy kept
    cut = [*common, "--out", str(tmp_path / "cut")]
    folder = tmp_path / "cut" / "Esper-Synthetic-v0" / "esper_agent"
    with monkeypatch.context() as lost:  # the host goes during the third update
        _lose_host_at(lost, compare_agents.Trainer, "update", 3)
        with pytest.raises(_HostLost):
            compare_agents.main(cut)
    assert load_checkpoint(folder / "seed0.ckpt")["counters"]["update"] == 2
    with monkeypatch.context() as lost:  # then during the evaluation, training done
        _lose_host_at(lost, compare_agents, "evaluate", 1)
        with pytest.raises(_HostLost):
            compare_agents.main(cut)
    assert "continues from update 2/3" in capsys.readouterr().out and not (folder / "seed0.json").exists()
    assert load_checkpoint(folder / "seed0.ckpt")["counters"]["update"] == 3
    compare_agents.main(cut)  # only evaluates
    assert "continues from update 3/3" in capsys.readouterr().out
    assert not (folder / "seed0.ckpt").exists()
    whole = json.loads((tmp_path / "whole" / "Esper-Synthetic-v0" / "esper_agent" / "seed0.json").read_text())
    resumed = json.loads((folder / "seed0.json").read_text())
    assert [p["return"] for p in resumed["curve"]] == [p["return"] for p in whole["curve"]]
    assert resumed["selection"] == whole["selection"] and resumed["selection"] is not None
    assert resumed["episodes"] == whole["episodes"]
    assert resumed["last_policy_episodes"] == whole["last_policy_episodes"]


def test_a_maskable_slice_whose_evaluation_was_cut_short_evaluates_again(tmp_path, monkeypatch, capsys):
    torch.set_num_threads(1)
    args = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "0", "--eval-episodes", "1",
            "--num-envs", "2", "--arms", "maskable_flat", "--budget-epochs", "12", "--out", str(tmp_path)]
    folder = tmp_path / "Esper-Synthetic-v0" / "maskable_flat"
    with monkeypatch.context() as lost:
        _lose_host_at(lost, compare_agents, "evaluate", 1)
        with pytest.raises(_HostLost):
            compare_agents.main(args)
    assert json.loads((folder / "seed0.curve.json").read_text())["host_epochs"] == 12
    compare_agents.main(args)
    assert "continues from 12 host epochs" in capsys.readouterr().out
    assert [p["host_epochs"] for p in json.loads((folder / "seed0.json").read_text())["curve"]] == [6, 6, 12, 12]
    assert not (folder / "seed0.sb3.zip").exists() and not (folder / "seed0.curve.json").exists()


@pytest.mark.parametrize("arm, paused", [("esper_agent", "paused after update 1/2"),
                                         ("maskable_multidiscrete", "paused at 6/12 host epochs")])
def test_a_learning_slice_does_not_start_a_step_that_would_overrun_its_limit(tmp_path, capsys, monkeypatch, arm,
                                                                            paused):
    """Each update (rollout) is timed, and one as long as the last that would end past --time-limit-s is not
    begun: here every step is made to look 2,000 s long, so a 1,000-s limit stops the run after its first."""
    torch.set_num_threads(1)
    steps = []

    def slow_step_done(clock: TrainingClock) -> None:
        steps.append(clock)
        clock.last_step_s = 2000.0

    monkeypatch.setattr(TrainingClock, "step_done", slow_step_done)
    compare_agents.main(["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "0",
                         "--eval-episodes", "1", "--num-envs", "2", "--arms", arm, "--budget-epochs", "12",
                         "--agent-device", "cpu", "--agent-kwargs", json.dumps({"hidden_size": 16}),
                         "--out", str(tmp_path), "--time-limit-s", "1000"])
    out = capsys.readouterr().out
    assert paused in out and "took 2000 s)" in out and len(steps) == 1  # the log says how long the step took


def test_a_paused_maskable_slice_continues_to_its_budget(tmp_path, capsys):
    torch.set_num_threads(1)
    args = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "0", "--eval-episodes", "1",
            "--num-envs", "2", "--arms", "maskable_multidiscrete", "--budget-epochs", "12", "--out", str(tmp_path)]
    folder = tmp_path / "Esper-Synthetic-v0" / "maskable_multidiscrete"
    compare_agents.main([*args, "--time-limit-s", "0"])  # one rollout of 2 sub-envs x 3 steps, then it pauses
    assert "paused at 6/12 host epochs" in capsys.readouterr().out
    assert (folder / "seed0.sb3.zip").exists() and not (folder / "seed0.json").exists()
    record = json.loads((folder / "seed0.curve.json").read_text())
    assert [(r["from_host_epochs"], r["to_host_epochs"]) for r in record["runs"]] == [(0, 6)]
    del record["runs"]  # as a state saved before runs were recorded
    (folder / "seed0.curve.json").write_text(json.dumps(record))
    compare_agents.main([*args, "--time-limit-s", "1000", "--eval-reserve-s", "999.99"])  # trains on, evaluates not
    out = capsys.readouterr().out
    assert "continues from 6 host epochs" in out and "trained, paused before its evaluation" in out
    assert (folder / "seed0.sb3.zip").exists() and not (folder / "seed0.json").exists()
    compare_agents.main([*args, "--eval-sampled"])
    assert "continues from 12 host epochs" in capsys.readouterr().out
    slice_ = json.loads((folder / "seed0.json").read_text())
    assert [p["host_epochs"] for p in slice_["curve"]] == [6, 6, 12, 12]  # each sub-env's episode per rollout
    assert [e["env_seed"] for e in slice_["sampled_episodes"]] == [e["env_seed"] for e in slice_["episodes"]]
    assert not (folder / "seed0.sb3.zip").exists() and not (folder / "seed0.curve.json").exists()
    # the first run's record was lost with its state: the runs start where the recorded ones began
    assert [(r["from_host_epochs"], r["to_host_epochs"], r["device"]) for r in slice_["training_runs"]] == [
        (6, 12, slice_["device"]), (12, 12, slice_["device"])]


def test_keep_policy_keeps_a_finished_slices_trained_policy_where_a_rerun_does_not_resume_it(tmp_path):
    from esper_agent import evaluate

    torch.set_num_threads(1)
    common = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "0", "--eval-episodes", "1",
              "--num-envs", "2", "--budget-epochs", "12", "--agent-device", "cpu", "--keep-policy",
              "--agent-kwargs", json.dumps({"hidden_size": 16}), "--out", str(tmp_path)]
    compare_agents.main([*common, "--arms", "esper_agent", "maskable_flat", "--sb3-kwargs",
                         json.dumps({"normalize": "both"}), "--label", "n"])
    agent, maskable = (tmp_path / "Esper-Synthetic-v0" / name for name in ("esper_agent-n", "maskable_flat-n"))
    def files(folder):  # without the episodes' timeline figures
        return sorted(p.name for p in folder.glob("seed0*") if p.suffix != ".png")

    assert files(agent) == ["seed0-records.json.gz", "seed0-trained.ckpt", "seed0.json"]
    assert files(maskable) == ["seed0-records.json.gz", "seed0-trained.sb3.zip", "seed0-trained.vecnorm.pkl",
                               "seed0.json"]
    payload = load_checkpoint(agent / "seed0-trained.ckpt")
    assert payload["counters"]["update"] == 2  # the last update's policy, as the slice evaluated it
    policy, _ = evaluate.policy_from_checkpoint(payload, "cpu")
    assert sum(p.numel() for p in policy.parameters()) > 0
    (agent / "seed0.json").unlink()  # the slice again: trained afresh, never loading the kept policy
    (agent / "seed0-trained.ckpt").write_bytes(b"not a checkpoint")
    compare_agents.main([*common, "--arms", "esper_agent", "--label", "n"])
    assert load_checkpoint(agent / "seed0-trained.ckpt")["counters"]["update"] == 2
    (maskable / "seed0.json").unlink()  # and without --keep-policy, no earlier run's policy stays beside the slice
    unkept = [a for a in common if a != "--keep-policy"]
    compare_agents.main([*unkept, "--arms", "maskable_flat", "--label", "n", "--sb3-kwargs", '{"normalize": "both"}'])
    assert files(maskable) == ["seed0-records.json.gz", "seed0.json"]


def test_maskable_training_resets_from_a_hashed_seed(tmp_path, monkeypatch):
    from esper_agent.collect import rollout_seed
    from esper_env import sb3

    torch.set_num_threads(1)
    reset_seeds, make = [], sb3.make_sb3_env

    def recording_make(*args, **kwargs):
        env = make(*args, **kwargs)
        native_reset = env.venv.reset

        def reset(*, seed=None, options=None):
            reset_seeds.append(seed)
            return native_reset(seed=seed, options=options)

        env.venv.reset = reset
        return env

    monkeypatch.setattr(sb3, "make_sb3_env", recording_make)
    compare_agents.main(["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--seeds", "3",
                         "--eval-episodes", "1", "--num-envs", "2", "--arms", "maskable_flat", "--budget-epochs", "6",
                         "--out", str(tmp_path)])
    base = rollout_seed(3, 0)  # not 3: seed 4 would then get all but one of seed 3's sub-env streams
    assert reset_seeds[0] == [base, base + 1]


def test_seeds_with_old_and_new_evaluation_seeds_count_equally_and_pair_by_reset_seed():
    def slice_(seed, env_seeds, accuracy=0.5):
        return {"seed": seed, "episodes": [{"env_seed": e, "test_accuracy": accuracy} for e in env_seeds]}

    old = [slice_(k, range(100_000 + k, 100_008 + k)) for k in range(5)]  # stride 1: overlapping
    new = [slice_(k, range(100_000 + 1000 * k, 100_008 + 1000 * k)) for k in range(5, 10)]
    assert [len(c) for c in compare_report.counted_episodes(old + new)] == [2] * 10
    # an arm that ran fewer seeds than the heuristic still pairs every one of them
    arm = [slice_(k, range(100_000 + k, 100_003 + k), 0.6) for k in range(3)]
    heuristic = [slice_(k, range(100_000 + k, 100_003 + k)) for k in range(5)]
    mean, _, pairs = compare_report.paired_difference(arm, heuristic)
    assert pairs == 3 and mean == pytest.approx(0.1)


def test_the_report_names_the_seeds_grown_slot_by_slot():
    def record(blueprints, stages):  # the last epoch of an episode record, as compare_agents stores it
        return {"blueprint": [[-1, -1], blueprints], "stage": [[0, 0], stages]}

    slices = [{"episode_records": [record([6, 5], [5, 3]), record([6, 5], [5, 3]), record([-1, 2], [7, 5])]}]
    assert compare_report.grown(slices) == "conv_heavy, conv_light* (67%)"  # 5 = FOSSILIZED, 3 = BLENDING
    assert compare_report.grown([{"episodes": []}]) == "n/a"


def test_the_paired_difference_uses_only_the_seeds_and_episodes_both_arms_ran():
    def slice_(seed, **accuracy_of_env_seed):
        return {"seed": seed, "episodes": [{"env_seed": int(e[1:]), "test_accuracy": a}
                                           for e, a in accuracy_of_env_seed.items()]}

    arm = [slice_(0, e0=0.50, e1=0.52), slice_(1, e10=0.60, e11=0.70), slice_(3, e30=0.90, e31=0.90)]
    heuristic = [slice_(0, e0=0.50, e1=0.50), slice_(1, e10=0.58, e12=0.10), slice_(2, e20=0.10, e21=0.10)]
    mean, half, pairs = compare_report.paired_difference(arm, heuristic)
    # seed 0: (0 + 0.02) / 2; seed 1: only reset seed 10 was played by both; seeds 2 and 3 unpaired
    assert pairs == 2 and mean == pytest.approx(0.015)
    assert half > 0
    mean, _, pairs = compare_report.paired_difference(arm, [])
    assert pairs == 0 and math.isnan(mean)


def test_seeds_are_scored_on_episodes_no_other_seed_counts():
    # slices from before the reset seeds were recorded: seed k played reset seeds 100000 + k + i
    old = [{"seed": k, "episodes": [{"test_accuracy": 0.5 + k + i} for i in range(3)]} for k in (1, 0)]
    counted = compare_report.counted_episodes(old)
    assert [sorted(c) for c in counted] == [[100_002, 100_003], [100_000, 100_001]]  # 4 reset seeds, 2 each
    assert compare_report._per_seed(counted, "test_accuracy") == [pytest.approx(3.0), pytest.approx(1.0)]
    new = [{"seed": k, "episodes": [{"env_seed": 100_000 + 1000 * k + i, "test_accuracy": 0.5} for i in range(3)]}
           for k in (0, 1)]
    assert [len(c) for c in compare_report.counted_episodes(new)] == [3, 3]  # disjoint: every episode counts


def test_the_goal_needs_the_agents_ci_above_every_rivals_and_no_more_params_than_the_heuristic():
    def row(arm, accuracy, half, params=1000.0):
        return {"arm": arm, "seeds": [0, 1, 2, 3, 4], "test_accuracy": accuracy, "test_ci95": half,
                "seed_params": params}

    rows = [row("esper_agent-a", 0.56, 0.005), row("esper_agent-a (sampled actions)", 0.60, 0.001),
            row("esper_agent-b", 0.56, 0.005, params=3000.0), row("esper_agent-c", 0.553, 0.005),
            row("esper_agent-d", 0.56, 0.005, params=2000.0),
            row("maskable_flat", 0.54, 0.012), row("heuristic", 0.545, 0.002, params=2000.0), row("static", 0.6, 0)]
    checks = {c["arm"]: c for c in compare_report.goal_check(rows)}
    assert list(checks) == ["esper_agent-a", "esper_agent-b", "esper_agent-c", "esper_agent-d"]  # no alternate row
    assert checks["esper_agent-d"]["met"]  # as many seed params as the heuristic is allowed
    assert checks["esper_agent-a"]["met"] and checks["esper_agent-a"]["closest_rival"] == "maskable_flat"
    assert checks["esper_agent-a"]["margin"] == pytest.approx(0.555 - 0.552)  # static is no rival
    assert not checks["esper_agent-b"]["met"] and not checks["esper_agent-b"]["params_ok"]
    assert not checks["esper_agent-c"]["met"] and checks["esper_agent-c"]["margin"] < 0  # 0.548 < 0.552
    assert compare_report.goal_check([r for r in rows if r["arm"] != "heuristic"]) == []
    one_seed = [row("maskable_multidiscrete", 0.50, math.nan)] + rows  # one seed: no CI, so nothing clears it
    check = compare_report.goal_check(one_seed)[0]
    assert check["closest_rival"] == "maskable_multidiscrete" and math.isnan(check["margin"]) and not check["met"]
    assert "margin n/a" in compare_report._goal_lines(one_seed)[3]


def test_the_most_planted_kinds_are_ranked_by_count_then_name():
    curves = [[{"plant/b": 1.0, "plant/a": 1.0, "plant/c": 3.0, "loss/policy": 9.0}, {"plant/a": 1.0}]]
    assert compare_plots.most_planted(curves, updates=1) == ["plant/c", "plant/a", "plant/b"]  # a ties b at 1
    assert compare_plots.most_planted(curves, updates=2) == ["plant/c", "plant/a", "plant/b"]
    assert compare_plots.most_planted([[{"plant/b": 2.0, "plant/a": 1.0}], [{"plant/a": 2.0}]], 1) == [
        "plant/a", "plant/b"]  # summed over seeds: 3 against 2


def test_the_report_orders_seeds_by_number_and_scores_a_subset_of_seeds_apart(tmp_path, capsys):
    torch.set_num_threads(1)
    compare_agents.main(["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--arms", "static",
                         "heuristic", "--seeds", "2", "10", "--eval-episodes", "1", "--out", str(tmp_path)])
    folder = tmp_path / "Esper-Synthetic-v0"
    assert [s["seed"] for s in compare_report.load_slices(folder)["static"]] == [2, 10]  # not the paths' 10, 2
    compare_report.main([str(folder), "--seeds", "10"])
    table = (folder / "table-seeds10.md").read_text()
    assert "| static | 1 |" in table and "| static | 10 |" in table and "| static | 2 |" not in table
    assert json.loads((folder / "summary-seeds10.json").read_text())[0]["seeds"] == [10]
    assert not (folder / "table.md").exists() and not (folder / "curves.png").exists()  # the whole table apart
    with pytest.raises(SystemExit, match=r"of seeds \[7\]"):
        compare_report.main([str(folder), "--seeds", "7"])
    for seeds, name in (([15, 8, 9, 10, 11, 12, 13, 14], "8-15"), ([3, 0, 5], "0_3_5"), ([10], "10")):
        assert compare_report.seed_list_name(seeds) == name and compare_report.seeds_named(name) == sorted(seeds)


def test_checkpoint_cost_times_both_kinds_of_saved_state(tmp_path):
    saved = save_checkpoint(tmp_path / "seed0.ckpt", {k: {} for k in ("config", "policy", "optimizer", "normalizers",
                                                                       "rng", "counters", "shape")})
    out = tmp_path / "cost.json"
    checkpoint_cost.main([str(saved), "--repeats", "2", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["esper_agent"]["bytes"] == saved.stat().st_size
    assert result["maskable_multidiscrete"]["bytes"] > 0
    assert all(result[k]["median_save_ms"] > 0 for k in ("esper_agent", "maskable_multidiscrete"))
