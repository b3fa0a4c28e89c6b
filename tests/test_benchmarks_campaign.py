"""``python -m benchmarks.campaign``: the plan of (arm, seed) processes, their placement over GPUs (with stand-in
processes, no GPU needed), and a tiny synthetic campaign run for real on the CPU, resumed and continued."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from benchmarks import campaign

TINY = {"device": "cpu", "max_epochs": 3, "synthetic_train_size": 256, "synthetic_val_size": 128,
        "synthetic_test_size": 128, "batch_size": 64}


class _StandIn:
    """A process that ends with ``code`` at its ``polls``-th poll."""

    def __init__(self, polls: int, code: int = 0) -> None:
        self.polls, self.code = polls, code

    def poll(self) -> int | None:
        self.polls -= 1
        return self.code if self.polls <= 0 else None


def _jobs(tmp_path: Path, argv: list[str]) -> list[campaign.Job]:
    args, passed = campaign.build_parser().parse_known_args([*argv, "--out", str(tmp_path)])
    args.seeds = campaign.parse_seeds(args.seeds)
    return campaign.plan(args, passed)


def test_seeds_are_numbers_and_ranges_in_order_each_once():
    assert campaign.parse_seeds(["0-3", "8", "2", "10-11"]) == [0, 1, 2, 3, 8, 10, 11]
    for bad in ("x", "3-", "5-2", "-1"):
        with pytest.raises(ValueError, match=f"seed.*{bad}"):
            campaign.parse_seeds([bad])


def test_the_plan_runs_learning_arms_first_and_labels_only_the_agent(tmp_path):
    jobs = _jobs(tmp_path, ["--arms", "static", "esper_agent", "maskable_flat", "--seeds", "0-1", "--label", "x",
                            "--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--budget-epochs", "12"])
    assert [(j.arm, j.seed) for j in jobs] == [("esper_agent", 0), ("esper_agent", 1), ("maskable_flat", 0),
                                               ("maskable_flat", 1), ("static", 0), ("static", 1)]
    assert [j.folder.name for j in jobs[::2]] == ["esper_agent-x", "maskable_flat", "static"]
    assert jobs[0].folder == tmp_path / "Esper-Synthetic-v0" / "esper_agent-x"
    assert jobs[1].log == tmp_path / "logs" / "Esper-Synthetic-v0" / "esper_agent-x-1.log"
    argv = list(jobs[0].argv)
    assert argv[argv.index("--budget-epochs") + 1] == "12"  # a flag campaign does not define is passed on
    with pytest.raises(SystemExit):  # compare_agents refuses it before anything runs
        _jobs(tmp_path, ["--budget-epochs", "many"])


def test_a_preset_gives_the_agent_and_budget_and_given_env_kwargs_merge_over_its_own(tmp_path):
    presets = pytest.importorskip("esper_agent.presets")
    preset = presets.load("synthetic-grow")
    jobs = _jobs(tmp_path, ["--preset", "synthetic-grow", "--arms", "esper_agent", "heuristic", "--seeds", "3",
                            "--env-kwargs", json.dumps({"device": "cpu", "max_epochs": 4})])
    argv = list(jobs[0].argv)
    given = json.loads(argv[argv.index("--env-kwargs") + 1])
    assert given == preset.run["env_kwargs"] | {"device": "cpu", "max_epochs": 4}
    assert json.loads(argv[argv.index("--agent-kwargs") + 1]) == preset.agent
    steps = preset.agent["rollout_steps"] * preset.run["num_envs"]  # host epochs of one update
    assert argv[argv.index("--budget-epochs") + 1] == str(preset.run["total_updates"] * steps)
    assert [j.folder.name for j in jobs] == ["esper_agent-synthetic-grow", "heuristic"]


def test_processes_go_to_the_least_loaded_gpu_and_never_more_than_per_gpu(tmp_path):
    jobs = _jobs(tmp_path, ["--arms", "static", "--seeds", "0-6"])
    started, running = [], {}

    def start(job, gpu):
        running[gpu] = running.get(gpu, 0) + 1
        assert running[gpu] <= 2, f"a third process on GPU {gpu}"
        started.append((job.seed, gpu))
        return _Counted(running, gpu, polls=1 + job.seed % 3)

    codes = campaign.run_jobs(jobs, ["4", "6"], per_slot=2, start=start, poll_s=0)
    assert sorted(codes.values()) == [0] * 7 and [s for s, _ in started] == list(range(7))
    assert started[:4] == [(0, "4"), (1, "6"), (2, "4"), (3, "6")]  # filled evenly before the cap is reached


class _Counted(_StandIn):
    """A stand-in that keeps a count of what runs on its GPU."""

    def __init__(self, running: dict, gpu: str, polls: int) -> None:
        super().__init__(polls)
        self.running, self.gpu = running, gpu

    def poll(self) -> int | None:
        code = super().poll()
        if code is not None:
            self.running[self.gpu] -= 1
        return code


def test_a_deadline_gives_queued_learning_slices_what_is_left_and_starts_none_too_late(tmp_path, capsys):
    jobs = _jobs(tmp_path, ["--arms", "esper_agent", "static", "--seeds", "0", "1"])  # learning slices first
    deadline = campaign.Deadline(stop_at=1000.0, margin_s=100.0, time_limit_s=600.0)
    times, started = iter([0.0, 500.0, 880.0, 950.0]), []

    def start(job, gpu):
        started.append(job)
        return _StandIn(1)

    codes = campaign.run_jobs(jobs, [None], per_slot=1, start=start, poll_s=0, deadline=deadline,
                              clock=lambda: next(times))
    limits = [job.argv[-1] if job.argv[-2] == "--time-limit-s" else None for job in started]
    # the first learning slice keeps the given 600 s; the second gets 1000 - 500 - 100; the fixed arm runs untimed
    assert limits == ["600", "400", None] and [j.arm for j in started] == ["esper_agent", "esper_agent", "static"]
    assert set(codes) == set(jobs[:3])  # keyed by the planned jobs, whatever limit each was started with
    assert "not started, too close to --stop-at: 1 slice(s)" in capsys.readouterr().out
    reserved = campaign.Deadline(stop_at=1000.0, margin_s=100.0, eval_reserve_s=300.0)
    # no slice starts without more than the evaluation's reserve left: a learning one may only need its evaluation
    assert not reserved.allows(650.0) and reserved.allows(550.0) and reserved.limit_s(550.0) == 350.0


def test_the_command_line_deadline_reaches_the_learning_slices(tmp_path, capsys):
    import time

    started = []
    argv = ["--arms", "esper_agent", "--seeds", "0", "--gpus", "--stop-at", str(time.time() + 1000),
            "--stop-margin-s", "100", "--eval-reserve-s", "200", "--time-limit-s", "5000", "--out", str(tmp_path)]
    assert campaign.main(argv, start=lambda job, gpu, threads: started.append(job.argv) or _StandIn(1)) == 0
    [args] = started
    from benchmarks import compare_agents

    parsed = compare_agents.parse_args(list(args))  # the last --time-limit-s wins: what is left of the 1000 s
    assert 880 <= parsed.time_limit_s <= 900 and parsed.eval_reserve_s == 200
    for bad, why in ((["--stop-at", "nan", "--eval-reserve-s", "1"], "expected a time in seconds"),
                     (["--stop-at", "1e12"], "--stop-at without --eval-reserve-s"),
                     (["--eval-reserve-s", "60", "--time-limit-s", "60"], "expected less than the limit")):
        with pytest.raises(SystemExit):
            campaign.main(["--arms", "static", "--gpus", *bad, "--out", str(tmp_path)])
        assert why in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the slice's own parser says the same
        compare_agents.parse_args(["--time-limit-s", "10", "--eval-reserve-s", "10"])


def test_an_arm_named_twice_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit):
        campaign.main(["--arms", "static", "heuristic", "static", "--seeds", "0", "--out", str(tmp_path),
                       "--gpus", "--dry-run"])
    assert "--arms names an arm twice" in capsys.readouterr().err and not list(tmp_path.iterdir())


def test_gpus_are_torch_indices_mapped_through_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    assert campaign.gpu_slots([0, 2]) == ["4", "6"] and campaign.gpu_slots(None) == ["4", "5", "6"]
    assert campaign.gpu_slots([]) == [None]  # --gpus with none named: the CPU
    with pytest.raises(ValueError, match=r"--gpus \[3\]: this machine shows 3 GPU"):
        campaign.gpu_slots([3])


def test_a_failed_process_is_reported_and_fails_the_campaign(tmp_path, capsys):
    argv = ["--arms", "random", "--seeds", "0", "1", "--gpus", "--out", str(tmp_path)]
    code = campaign.main(argv, start=lambda job, gpu, threads: _StandIn(1, code=3 if job.seed == 1 else 0))
    out = capsys.readouterr().out
    assert code == 1 and "random seed 1: failed (exit code 3" in out and "random seed 0: to run" in out


def test_a_tiny_campaign_runs_resumes_and_continues_a_paused_slice_on_the_cpu(tmp_path, capsys):
    common = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--gpus", "--per-gpu", "2",
              "--threads", "1", "--eval-episodes", "1", "--num-envs", "2", "--budget-epochs", "12",
              "--agent-kwargs", json.dumps({"hidden_size": 16}), "--out", str(tmp_path)]
    assert campaign.main([*common, "--arms", "esper_agent", "static", "--seeds", "0", "1", "--label", "tiny",
                          "--time-limit-s", "0"]) == 0  # the agent pauses after one of its two updates
    out = capsys.readouterr().out
    assert "esper_agent-tiny seed 1: paused (run the same command again" in out and "static seed 1: done" in out
    folder = tmp_path / "Esper-Synthetic-v0"
    assert (folder / "esper_agent-tiny" / "seed0.ckpt").exists() and (folder / "static" / "seed1.json").exists()
    log = (tmp_path / "logs" / "Esper-Synthetic-v0" / "esper_agent-tiny-0.log").read_text()
    assert "paused after update 1/2" in log
    again = [*common, "--arms", "esper_agent", "static", "--seeds", "0", "1", "--label", "tiny"]
    assert campaign.main(again) == 0  # static is done: only the agent's two slices run, and continue
    out = capsys.readouterr().out
    assert "2 of 4 slices done; 2 to run" in out and "started static" not in out
    assert "continues from update 1/2" in (tmp_path / "logs" / "Esper-Synthetic-v0" / "esper_agent-tiny-0.log"
                                          ).read_text()
    assert len(json.loads((folder / "esper_agent-tiny" / "seed0.json").read_text())["curve"]) == 2
    assert campaign.main([*again, "--status"]) == 0
    assert capsys.readouterr().out.count(": done") == 4


def test_the_processes_run_where_the_campaign_runs_and_its_paths_stay_as_given(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # a relative --out means the same to the campaign and its processes
    assert campaign.main(["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--gpus", "--threads", "1",
                          "--eval-episodes", "1", "--arms", "static", "--seeds", "0", "--out", "res"]) == 0
    assert (tmp_path / "res" / "Esper-Synthetic-v0" / "static" / "seed0.json").exists()
    log = (tmp_path / "res" / "logs" / "Esper-Synthetic-v0" / "static-0.log").read_text()
    assert "python -m benchmarks.compare_agents " in log and " --out res " in log
    assert str(tmp_path) not in log + capsys.readouterr().out  # neither names the machine's folders


def test_the_dry_run_prints_commands_that_run_as_they_are(tmp_path, capsys):
    campaign.main(["--arms", "heuristic", "--seeds", "2", "--env-kwargs", json.dumps({"max_epochs": 3}),
                   "--gpus", "--dry-run", "--out", str(tmp_path)])
    line = capsys.readouterr().out.splitlines()[-1]
    argv = shlex.split(line.split(": ", 1)[1])[3:]  # after "python -m benchmarks.compare_agents"
    from benchmarks import compare_agents

    args = compare_agents.parse_args(argv)
    assert args.arms == ["heuristic"] and args.seeds == [2] and args.env_kwargs == {"max_epochs": 3}
    assert not (tmp_path / "logs").exists()  # nothing ran


def test_a_plan_file_queues_every_groups_slices_learners_first_over_the_command_lines_flags(tmp_path, capsys):
    groups = [["--arms", "static", "heuristic"],
              ["--arms", "esper_agent", "--label", "a", "--agent-kwargs", json.dumps({"hidden_size": 16})],
              ["--arms", "esper_agent", "--label", "b", "--seeds", "5"]]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(groups))
    groups[2] += ["--budget-epochs", "7"]  # a compare_agents flag: the group's wins over the command line's
    plan.write_text(json.dumps(groups))
    common = ["--plan", str(plan), "--seeds", "0", "1", "--env-kwargs", json.dumps({"max_epochs": 3}), "--gpus",
              "--budget-epochs", "99", "--out", str(tmp_path)]
    assert campaign.main([*common, "--dry-run"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if ": python -m" in line]
    from benchmarks import compare_agents

    parsed = [compare_agents.parse_args(shlex.split(line.split(": ", 1)[1])[3:]) for line in lines]
    assert [(a.arms[0], a.label, a.seeds[0]) for a in parsed] == [
        ("esper_agent", "a", 0), ("esper_agent", "a", 1), ("esper_agent", "b", 5),  # learners first, over groups
        ("static", "", 0), ("static", "", 1), ("heuristic", "", 0), ("heuristic", "", 1)]
    assert all(a.env_kwargs == {"max_epochs": 3} for a in parsed)  # the command line's flags reach every group
    assert [a.budget_epochs for a in parsed] == [99, 99, 7, 99, 99, 99, 99]
    assert json.loads(parsed[0].agent_kwargs) == {"hidden_size": 16} and json.loads(parsed[2].agent_kwargs) == {}
    for bad, why in (([["--arms", "static", "--per-gpu", "2"]], "group 1 ['--arms', 'static', '--per-gpu', '2'] "
                                                                 "sets --per-gpu"),
                     ([["--arms", "static"], ["--arms", "static", "--seeds", "1"]], "slices made twice"),
                     ([["--arms", "static"], ["--arms", "nonsense"]], "group 2 ['--arms', 'nonsense']: refused"),
                     ([["--arms", "static"], ["--arms", "static", "--label"]],
                      "group 2 ['--arms', 'static', '--label']: argument --label: expected one argument"),
                     ([["--arms", "static"], ["--arms", "static", "--seeds", "x"]], "group 2 ['--arms', 'static', "
                                                                                   "'--seeds', 'x']: seed 'x'"),
                     ([["--arms", "static", "--help"]], "group 1 ['--arms', 'static', '--help'] asks for help"),
                     ([["--arms", "static", "static"]], "slices made twice"),
                     ({"arms": ["static"]}, "a JSON list of argument lists"),
                     (None, "No such file")):
        if bad is None:
            plan.unlink()
        else:
            plan.write_text(json.dumps(bad))
        with pytest.raises(SystemExit):
            campaign.main(common)
        assert why in capsys.readouterr().err
