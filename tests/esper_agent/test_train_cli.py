"""The command lines: train (outputs, exact resume, refusals) and evaluate."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent import evaluate, presets, train
from esper_agent.checkpoint import load_checkpoint
from esper_agent.config import AgentConfig
from esper_env import spaces

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ENV = f"{toy_env.__name__}:{toy_env.ENV_ID}"
SMALL = ["--rollout-steps", "8", "--hidden-size", "16", "--num-minibatches", "2"]


def base_args(run_dir: Path, updates: int = 2, mode: str = "SameStep") -> list[str]:
    return ["--env", ENV, "--env-kwargs", json.dumps({"autoreset_mode": mode}), "--num-envs", "4",
            "--device", "cpu", "--seed", "3", "--total-updates", str(updates), "--run-dir", str(run_dir), *SMALL]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    assert train.main(base_args(run_dir)) == 0
    return run_dir


def test_cli_writes_every_output(trained_run: Path) -> None:
    config = json.loads((trained_run / "config.json").read_text())
    assert config["git_commit"] == "unknown" or re.fullmatch(r"[0-9a-f]{40}", config["git_commit"])
    assert config["agent"] == AgentConfig(rollout_steps=8, hidden_size=16).to_dict()
    assert config["run"]["env_id"] == ENV and config["run"]["seed"] == 3
    rows = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2]
    for key in ("loss/policy", "loss/value", "ppo/kl", "ppo/clip_fraction", "value/explained_variance",
                "entropy/op", "entropy/slot", "grad/norm_preclip", "grad/op", "actions/op_wait",
                "actions/invalid_rate", "episode/return_mean", "episode/final_accuracy", "episode/seed_params",
                "lifecycle/fossilize_count", "lifecycle/prune_count", "time/env_steps_per_s", "anomalies"):
        assert key in rows[0], key
    csv_lines = (trained_run / "metrics.csv").read_text().splitlines()
    assert len(csv_lines) == 3 and csv_lines[0].startswith("update,")
    assert any(p.name.startswith("events.out.tfevents") for p in (trained_run / "tb").iterdir())
    checkpoint = load_checkpoint(trained_run / "checkpoint.pt")
    assert checkpoint["counters"]["update"] == 2 and checkpoint["run"]["env_id"] == ENV


def test_module_entry_point_runs(tmp_path: Path) -> None:
    path = os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": path}  # one thread: see agent_fixtures.py
    result = subprocess.run([sys.executable, "-m", "esper_agent.train", *base_args(tmp_path / "run", updates=1)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "update 1 |" in result.stdout  # plain lines when stdout is not a TTY
    help_text = subprocess.run([sys.executable, "-m", "esper_agent.train", "--help"], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=60).stdout
    assert "--clip-coef" in help_text and "--resume" in help_text and "nats per step" in help_text


def comparable(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def test_interrupted_run_resumes_to_the_same_parameters_and_metrics(tmp_path: Path) -> None:
    """A run stopped during update 3 (checkpoint at update 2) and resumed from its checkpoint ends exactly
    where an uninterrupted run ends: parameters, optimizer, normalisers, RNG and every logged metric."""
    args = ["--checkpoint-interval", "2", "--normalize-obs", "--anneal-lr"]
    assert train.main(base_args(tmp_path / "straight", updates=4, mode="NextStep") + args) == 0

    def interrupt(metrics: dict) -> None:
        if metrics["update"] == 3:
            raise KeyboardInterrupt

    parsed = vars(train.build_parser().parse_args(base_args(tmp_path / "broken", updates=4, mode="NextStep") + args))
    fields = AgentConfig.__dataclass_fields__
    config = AgentConfig(**{k: v for k, v in parsed.items() if k in fields})
    options = train._options({k: v for k, v in parsed.items() if k not in fields}, None)
    with pytest.raises(KeyboardInterrupt):
        train.run(options, config, on_update=interrupt)
    assert load_checkpoint(tmp_path / "broken" / "checkpoint.pt")["counters"]["update"] == 2
    assert len(comparable(tmp_path / "broken" / "metrics.jsonl")) == 3  # update 3 was logged, not saved

    assert train.main(["--resume", str(tmp_path / "broken")]) == 0
    straight = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")
    resumed = load_checkpoint(tmp_path / "broken" / "checkpoint.pt")
    assert straight["counters"] == resumed["counters"]
    for name in ("policy",):
        for key, value in straight[name].items():
            assert torch.equal(value, resumed[name][key]), key
    assert str(straight["optimizer"]) == str(resumed["optimizer"])
    assert str(straight["normalizers"]) == str(resumed["normalizers"])
    assert torch.equal(straight["rng"]["sample"], resumed["rng"]["sample"])
    assert comparable(tmp_path / "straight" / "metrics.jsonl") == comparable(tmp_path / "broken" / "metrics.jsonl")
    csv_rows = (tmp_path / "broken" / "metrics.csv").read_text().splitlines()
    assert len(csv_rows) == 5  # header + updates 1..4, the pre-interruption update 3 replaced


def test_resume_refuses_changed_settings(trained_run: Path) -> None:
    with pytest.raises(SystemExit, match=r"\['clip_coef'\] differ from the checkpoint"):
        train.main(["--resume", str(trained_run), "--clip-coef", "0.1"])
    with pytest.raises(SystemExit, match="num_envs"):
        train.main(["--resume", str(trained_run), "--num-envs", "2"])


def test_cli_refuses_a_gamma_mismatch(tmp_path: Path) -> None:
    args = base_args(tmp_path / "run")
    args[args.index("--env-kwargs") + 1] = json.dumps({"pbrs_weight": 0.2, "pbrs_gamma": 0.9})
    with pytest.raises(ValueError, match="pbrs_gamma=0.9"):
        train.main(args)


def test_evaluate_writes_a_results_table(trained_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = trained_run / "checkpoint.pt"
    assert evaluate.main(["--checkpoint", str(checkpoint), "--episodes", "6"]) == 0
    table = Path(f"{checkpoint}.eval.md").read_text()
    assert "| episode | env | return | final accuracy | seed params | length |" in table
    assert len(re.findall(r"^\| \d+ \| \d \|", table, flags=re.M)) == 6
    data = json.loads(Path(f"{checkpoint}.eval.json").read_text())
    assert len(data["episodes"]) == 6 and data["deterministic"] is True
    assert "return: mean" in capsys.readouterr().out
    # Deterministic: the same episodes again give the same table.
    assert evaluate.main(["--checkpoint", str(checkpoint), "--episodes", "6"]) == 0
    assert Path(f"{checkpoint}.eval.md").read_text() == table


def test_slot_conditioned_heads_train_resume_and_evaluate(tmp_path: Path) -> None:
    """--slot-conditioned-heads builds heads with one row per slot; the checkpoint's config rebuilds the same
    network to resume and to evaluate."""
    run_dir = tmp_path / "run"
    assert train.main([*base_args(run_dir, updates=1), "--slot-conditioned-heads"]) == 0
    payload = load_checkpoint(run_dir / "checkpoint.pt")
    assert AgentConfig.from_dict(payload["config"]).slot_conditioned_heads
    num_slots = payload["shape"]["num_slots"]
    blueprints = spaces.head_sizes(num_slots)[spaces.Head.BLUEPRINT]
    assert payload["policy"]["heads.2.2.weight"].shape[0] == num_slots * blueprints  # a row of logits per slot
    assert train.main([*base_args(run_dir, updates=2), "--slot-conditioned-heads", "--resume", str(run_dir)]) == 0
    assert evaluate.main(["--checkpoint", str(run_dir / "checkpoint.pt"), "--episodes", "2"]) == 0


def test_git_dirty_counts_code_not_results(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "code.py").write_text("x = 1\n")
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "seed0.ckpt").write_text("state")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "start")
    assert train.git_commit(tmp_path / "pkg")[1] is False
    (results / "seed0.ckpt").unlink()  # a resumed slice removes its saved state; a run writes its log
    (results / "run.log").write_text("log")
    commit, dirty = train.git_commit(tmp_path / "pkg")
    assert re.fullmatch(r"[0-9a-f]{40}", commit) and dirty is False
    (tmp_path / "launch.sh").write_text("echo")  # untracked code counts
    assert train.git_commit(tmp_path / "pkg")[1] is True
    (tmp_path / "launch.sh").unlink()
    (tmp_path / "pkg" / "code.py").write_text("x = 2\n")
    assert train.git_commit(tmp_path / "pkg")[1] is True


def test_a_preset_gives_its_values_and_flags_beside_it_win() -> None:
    preset = presets.load("cifar10-fast-budget")
    args = train.with_preset(vars(train.build_parser().parse_args([
        "--preset", "cifar10-fast-budget", "--num-envs", "2", "--hidden-size", "16",
        "--env-kwargs", json.dumps({"device": "cpu", "val_images": None})])))
    assert args["env"] == preset.run["env"] and args["total_updates"] == preset.run["total_updates"]
    assert args["num_envs"] == 2 and args["hidden_size"] == 16
    assert args["reference_kl_coef"] == preset.agent["reference_kl_coef"]
    # --env-kwargs is merged key by key: the preset's host stays, the flag's keys win.
    assert args["env_kwargs"] == preset.run["env_kwargs"] | {"device": "cpu", "val_images": None}


def test_a_preset_run_records_the_preset_config(tmp_path: Path) -> None:
    """The run's config.json holds the preset's agent fields (bar the flags given beside it) and its env kwargs."""
    tiny = {"max_epochs": 2, "device": "cpu", "synthetic_train_size": 64, "synthetic_val_size": 32,
            "batch_size": 32, "host_widths": [4, 8]}
    flags = ["--num-envs", "2", "--rollout-steps", "2", "--hidden-size", "8", "--env-kwargs", json.dumps(tiny)]
    assert train.main(["--preset", "synthetic-grow", *flags, "--total-updates", "1", "--run-dir", str(tmp_path)]) == 0
    preset = presets.load("synthetic-grow")
    config = json.loads((tmp_path / "config.json").read_text())
    expected = AgentConfig(**(preset.agent | {"rollout_steps": 2, "hidden_size": 8}))
    assert config["agent"] == expected.to_dict()
    assert config["run"]["env_kwargs"] == preset.run["env_kwargs"] | tiny
    assert config["run"]["env_id"] == "Esper-Synthetic-v0" and config["run"]["preset"] == "synthetic-grow"
    assert config["command"][:3] == ["python -m esper_agent.train", "--preset", "synthetic-grow"]  # as called
    # The same command resumes (its preset's values match the checkpoint's); another preset's values do not.
    assert train.main(["--preset", "synthetic-grow", *flags, "--total-updates", "2", "--resume", str(tmp_path)]) == 0
    with pytest.raises(SystemExit, match="differ from the checkpoint"):
        train.main(["--preset", "cifar10-fast-budget", *flags, "--resume", str(tmp_path)])


def test_an_unknown_preset_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        train.build_parser().parse_args(["--preset", "no-such-preset"])
    err = capsys.readouterr().err
    assert "no-such-preset" in err and all(name in err for name in presets.names())
    with pytest.raises(ValueError, match=r"unknown preset 'no-such-preset'; expected one of \['cifar10-fast-budget'"):
        presets.load("no-such-preset")


def test_env_kwargs_beside_a_preset_must_be_an_object() -> None:
    with pytest.raises(SystemExit, match=r"--env-kwargs \[1\]: expected a JSON object"):
        train.with_preset({"preset": "synthetic-grow", "env_kwargs": [1]})


def test_a_shipped_copy_names_its_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ESPER_GIT_COMMIT", "0123abc")
    assert train.git_commit() == ("0123abc", False)
    monkeypatch.setenv("ESPER_GIT_DIRTY", "1")
    assert train.git_commit() == ("0123abc", True)


def test_a_fresh_run_on_an_esper_id_collects_one_episode_per_rollout_unless_told(tmp_path: Path) -> None:
    """Without --rollout-steps a rollout is the env's max_epochs long (here 3, not the config's 25), so no rollout
    ends inside an episode that the next one's reset throws away; a given --rollout-steps wins."""
    tiny = {"max_epochs": 3, "device": "cpu", "synthetic_train_size": 64, "synthetic_val_size": 32,
            "batch_size": 32, "host_widths": [4, 8]}
    flags = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(tiny), "--num-envs", "2", "--hidden-size", "8",
             "--total-updates", "1"]
    assert train.main([*flags, "--run-dir", str(tmp_path / "default")]) == 0
    assert json.loads((tmp_path / "default" / "config.json").read_text())["agent"]["rollout_steps"] == 3
    assert train.main([*flags, "--rollout-steps", "4", "--run-dir", str(tmp_path / "given")]) == 0
    assert json.loads((tmp_path / "given" / "config.json").read_text())["agent"]["rollout_steps"] == 4
    assert train.episode_length_of(ENV, {}) is None  # not Esper's: the config's default stays
    assert train.episode_length_of("Esper-CIFAR10-v0", {}) == 20
