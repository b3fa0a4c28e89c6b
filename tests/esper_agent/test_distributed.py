"""The agent under torchrun, on CPU: the gloo backend and 2 processes, against one process.

One ``torchrun --nproc-per-node 2`` launch (the module fixture) runs :func:`worker` (this file as a script) in
two processes. Each rank trains one update on its own sub-envs and saves what went into its PPO update and what
came out; the tests then run the update of *one* process on the union of both ranks' data (rows of rank 0,
then rank 1, as one vector env with every sub-env) and compare. The worker then runs the training CLI: a
straight 2-process run, the same run interrupted and resumed with 2 processes, a 1-process checkpoint resumed
with 2, and a refused resume (which every rank must leave); back in pytest, a 2-process checkpoint is resumed by
one process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)
from conftest import TINY

import esper_agent.trainer as trainer_module
from esper_agent import distributed, train
from esper_agent.buffer import Rollout
from esper_agent.checkpoint import load_checkpoint
from esper_agent.collect import rank_reset_seed, rollout_seed
from esper_agent.config import AgentConfig
from esper_agent.normalize import RunningMeanStd
from esper_agent.policy import LSTMState, RecurrentPolicy
from esper_agent.ppo import NonFiniteGuard, Reference, TrainBatch, ppo_update
from esper_agent.trainer import Trainer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SEED = 5
UPDATE = dict(hidden_size=16, update_epochs=2, num_minibatches=1, target_kl=0.0, learning_rate=1e-3)
"""One minibatch per rank per epoch: each step is then exactly one process's step over every sub-env."""
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # Esper itself: 2 sub-envs per rank, whole 6-epoch episodes.
    "synthetic": ({"id": "Esper-Synthetic-v0", "num_envs": 2} | TINY, {"rollout_steps": 6}),
    # The toy env's PRUNE ends episodes early, so the ranks' rows hold different numbers of valid steps; and the
    # KL to the reference (the policy before this first PPO update: non-zero from the second epoch) and the kept
    # policy must come out of the ranks as out of one process.
    "toy": ({"id": toy_env.ENV_ID, "num_envs": 3, "autoreset_mode": "NextStep", "episode_length": 4},
            {"rollout_steps": 10, "reference_kl_coef": 0.1, "select_best_window": 1}),
}
CLI = ["--env", f"toy_env:{toy_env.ENV_ID}", "--env-kwargs", json.dumps({"autoreset_mode": "NextStep"}),
       "--num-envs", "2", "--device", "cpu", "--seed", "3", "--rollout-steps", "8", "--hidden-size", "16"]
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
"""float32 sums in another order (gloo's reduction, one minibatch of every row instead of two halves): measured
max difference 6e-8 on parameters that the update moved by 2e-3."""


def make_case(name: str, ranks: distributed.SingleProcess) -> Trainer:
    env_kwargs, config = CASES[name]
    env_kwargs = dict(env_kwargs)
    envs = gym.make_vec(env_kwargs.pop("id"), **env_kwargs)
    return Trainer(envs, AgentConfig(**(UPDATE | config)), seed=SEED, total_updates=1, ranks=ranks)


def capture_update(trainer: Trainer) -> dict[str, Any]:
    """One ``trainer.update()``, with what went into its PPO update and its normalisers, and what came out."""
    seen: dict[str, Any] = {"shape": trainer._shape()}
    real_update = trainer_module.ppo_update

    def spy(policy, optimizer, batch, cfg, generator, guard, ranks, reference=None):
        rollout = {k: (torch.stack([v.h, v.c]) if isinstance(v, LSTMState) else torch.as_tensor(v)).clone()
                   for k, v in batch.rollout._asdict().items()}
        seen.update(before={k: v.clone() for k, v in policy.state_dict().items()}, generator=generator.get_state(),
                    rollout=rollout, advantages=batch.advantages.clone(), returns=batch.returns.clone())
        return real_update(policy, optimizer, batch, cfg, generator, guard, ranks, reference)

    for name, normalizer in (("obs", trainer.obs_norm), ("reward", trainer.reward_scaler)):
        def commit(ranks, normalizer=normalizer, name=name, real=normalizer.commit):
            seen[f"{name}_pending"] = np.concatenate(normalizer._pending)
            real(ranks)
        normalizer.commit = commit
    trainer_module.ppo_update = spy
    try:
        seen["metrics"] = trainer.update()
    finally:
        trainer_module.ppo_update = real_update
    seen["after"] = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    seen["normalizers"] = {"obs": trainer.obs_norm.state_dict(), "reward": trainer.reward_scaler.state_dict()}
    return seen


def worker(out: Path) -> None:
    """Runs in each torchrun process."""
    ranks = distributed.init("cpu")
    assert isinstance(ranks, distributed.ProcessGroup) and ranks.world_size == 2, ranks
    for name in CASES:
        torch.save(capture_update(make_case(name, ranks)), out / f"{name}-rank{ranks.rank}.pt")
    assert train.main([*CLI, "--total-updates", "3", "--run-dir", str(out / "straight")]) == 0
    assert train.main([*CLI, "--total-updates", "2", "--run-dir", str(out / "resumed")]) == 0
    assert train.main(["--resume", str(out / "resumed"), "--total-updates", "3"]) == 0
    assert train.main(["--resume", str(out / "single"), "--total-updates", "2"]) == 0  # 1 process -> 2
    with pytest.raises(SystemExit, match="clip_coef"):  # rank 0 refuses; rank 1 must leave too, not hang
        train.main(["--resume", str(out / "single"), "--clip-coef", "0.1"])


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("distributed")
    assert train.main([*CLI, "--total-updates", "1", "--run-dir", str(out / "single")]) == 0
    path = os.pathsep.join([str(ROOT), str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(Path(__file__).resolve()), str(out)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    return out


def load_ranks(out: Path, name: str) -> list[dict[str, Any]]:
    return [torch.load(out / f"{name}-rank{r}.pt", weights_only=False) for r in range(2)]


def union_batch(parts: list[dict[str, Any]]) -> TrainBatch:
    """Both ranks' rollouts as one process with every sub-env would hold them (rank 0's rows first)."""
    fields = {k: torch.cat([p["rollout"][k] for p in parts], dim=1 if k == "initial_state" else 0)
              for k in parts[0]["rollout"]}
    fields["initial_state"] = LSTMState(*fields["initial_state"])
    fields["resets_inside"] = fields["resets_inside"].numpy()
    return TrainBatch(Rollout(**fields), torch.cat([p["advantages"] for p in parts]),
                      torch.cat([p["returns"] for p in parts]))


@pytest.mark.parametrize("name", list(CASES))
def test_two_ranks_make_the_update_of_one_process_over_both_ranks_data(launched: Path, name: str) -> None:
    parts = load_ranks(launched, name)
    for key, value in parts[0]["after"].items():  # every rank ends the update with the very same network
        assert torch.equal(value, parts[1]["after"][key]), key
    shape = parts[0]["shape"]
    policy = RecurrentPolicy(shape["obs_dim"], shape["num_slots"], shape["hidden_size"])
    policy.load_state_dict(parts[0]["before"])
    config = AgentConfig(**(UPDATE | CASES[name][1]))
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, eps=config.adam_eps)
    generator = torch.Generator().manual_seed(0)  # one minibatch per epoch: the order of rows does not matter
    reference = None
    if config.reference_kl_coef > 0:  # the first PPO update: the reference is the policy before it
        frozen = RecurrentPolicy(shape["obs_dim"], shape["num_slots"], shape["hidden_size"])
        frozen.load_state_dict(parts[0]["before"])
        reference = Reference(frozen.requires_grad_(False), config.reference_kl_coef)
    stats = ppo_update(policy, optimizer, union_batch(parts), config, generator, NonFiniteGuard(3),
                       reference=reference)

    moved = max((parts[0]["after"][k] - parts[0]["before"][k]).abs().max().item() for k in parts[0]["before"])
    assert moved > 1e-4  # the update did something to compare
    for key, value in policy.state_dict().items():
        torch.testing.assert_close(parts[0]["after"][key], value, **TOLERANCE, msg=key)
    metrics = parts[0]["metrics"]
    assert stats["ppo/steps_applied"] == metrics["ppo/steps_applied"] == 2
    for key in ("loss/policy", "loss/value", "loss/total", "ppo/kl", "ppo/ratio_max", "ppo/ratio_min",
                "entropy/op", "grad/norm_preclip", "loss/reference_kl"):
        assert stats[key] == pytest.approx(metrics[key], rel=1e-4, abs=1e-6), key
    if reference is not None:
        assert metrics["loss/reference_kl"] > 0 and metrics["selection/best_update"] == 1.0
        assert parts[1]["metrics"]["selection/best_return"] == metrics["selection/best_return"]
    valid = [int(p["rollout"]["valid"].sum()) for p in parts]
    assert metrics["env_steps"] == sum(valid)  # logged metrics count every rank's transitions
    if name == "toy":
        assert valid[0] != valid[1]  # the global denominators were needed, not just DDP's average


@pytest.mark.parametrize("name", list(CASES))
def test_ranks_merge_normalisers_into_the_statistics_of_all_data(launched: Path, name: str) -> None:
    parts = load_ranks(launched, name)
    assert str(parts[0]["normalizers"]) == str(parts[1]["normalizers"])
    for key in ("obs", "reward"):
        expected = RunningMeanStd(parts[0][f"{key}_pending"].shape[1:])
        expected.update(np.concatenate([p[f"{key}_pending"] for p in parts]))
        merged = parts[0]["normalizers"][key]
        merged = merged["stats"] if key == "reward" else merged
        assert merged["count"] == expected.count
        np.testing.assert_allclose(merged["mean"].numpy(), expected.mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(merged["var"].numpy(), expected.var, rtol=1e-10, atol=1e-12)


def test_ranks_start_alike_and_sample_differently(launched: Path) -> None:
    parts = load_ranks(launched, "synthetic")
    single = make_case("synthetic", distributed.SINGLE)  # one process, same seed: the same initial network
    for key, value in single.policy.state_dict().items():
        assert torch.equal(value, parts[0]["before"][key]) and torch.equal(value, parts[1]["before"][key]), key
    assert not torch.equal(parts[0]["rollout"]["actions"], parts[1]["rollout"]["actions"])


def test_rank_r_sub_env_i_is_sub_env_r_n_plus_i_of_one_process(tiny: dict) -> None:
    """After one WAIT step (the reset observation is the same for every seed), rank 1's sub-envs match the
    second half of one vector env holding both ranks' sub-envs."""
    n = 2
    assert rank_reset_seed(SEED, 3, 0, n) == rollout_seed(SEED, 3)
    observations = []
    for num_envs, rank in ((2 * n, 0), (n, 1)):
        envs = gym.make_vec("Esper-Synthetic-v0", num_envs=num_envs, **tiny)
        envs.reset(seed=rank_reset_seed(SEED, 3, rank, n))
        observations.append(envs.step(np.zeros((num_envs, 5), np.int64))[0])
        envs.close()
    whole, rank1 = observations
    np.testing.assert_array_equal(rank1, whole[n:])
    assert not np.array_equal(whole[:n], whole[n:])


def comparable(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
            for line in path.read_text().splitlines()]


def test_rank_zero_alone_writes_and_two_ranks_resume_exactly(launched: Path) -> None:
    straight, resumed = launched / "straight", launched / "resumed"
    assert sorted(p.name for p in straight.iterdir()) == ["checkpoint.pt", "config.json", "metrics.csv",
                                                           "metrics.jsonl", "tb"]
    assert len(list((straight / "tb").iterdir())) == 1
    assert [row["update"] for row in comparable(straight / "metrics.jsonl")] == [1, 2, 3]  # one writer
    assert json.loads((straight / "config.json").read_text())["run"]["world_size"] == 2
    a, b = load_checkpoint(straight / "checkpoint.pt"), load_checkpoint(resumed / "checkpoint.pt")
    assert a["counters"] == b["counters"] and a["counters"]["world_size"] == 2
    for key, value in a["policy"].items():
        assert torch.equal(value, b["policy"][key]), key
    assert str(a["optimizer"]) == str(b["optimizer"]) and str(a["normalizers"]) == str(b["normalizers"])
    assert len(a["rng"]["sample_by_rank"]) == 2
    assert all(torch.equal(x, y) for x, y in zip(a["rng"]["sample_by_rank"], b["rng"]["sample_by_rank"], strict=True))
    assert comparable(straight / "metrics.jsonl") == comparable(resumed / "metrics.jsonl")


def test_resume_with_another_number_of_processes(launched: Path, tmp_path: Path) -> None:
    grown = load_checkpoint(launched / "single" / "checkpoint.pt")  # written by 1 process, continued by 2
    assert grown["counters"]["update"] == 2 and grown["counters"]["world_size"] == 2
    shrunk = shutil.copytree(launched / "resumed", tmp_path / "shrunk")  # written by 2, continued by 1
    with pytest.warns(UserWarning, match="written by 2 process"):
        assert train.main(["--resume", str(shrunk), "--total-updates", "4"]) == 0
    checkpoint = load_checkpoint(shrunk / "checkpoint.pt")
    assert checkpoint["counters"]["update"] == 4 and checkpoint["counters"]["world_size"] == 1
    assert [row["update"] for row in comparable(shrunk / "metrics.jsonl")] == [1, 2, 3, 4]


def test_single_process_needs_no_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in distributed.TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)
    assert distributed.init("cpu") is distributed.SINGLE
    assert distributed.sample_seed(7, 0) == 7 and distributed.sample_seed(7, 1) != distributed.sample_seed(7, 2)


def test_cuda_devices_per_rank_and_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert distributed.rank_device("cuda", 1, 2) == torch.device("cuda:1")
    assert distributed.rank_device("auto", 0, 2) == torch.device("cuda:0")
    assert distributed.rank_device("cpu", 1, 2) == torch.device("cpu")
    with pytest.raises(ValueError, match="pass --device cuda"):
        distributed.rank_device("cuda:1", 0, 2)
    with pytest.raises(ValueError, match="2 CUDA device"):
        distributed.rank_device("cuda", 2, 3)
    rank1 = distributed.ProcessGroup(1, 2, 1, torch.device("cuda:1"))
    assert distributed.rank_env_kwargs("Esper-Synthetic-v0", {}, rank1) == {"device": "cuda:1"}
    assert distributed.rank_env_kwargs("Esper-Synthetic-v0", {"device": "auto"}, rank1) == {"device": "cuda:1"}
    assert distributed.rank_env_kwargs("Esper-Synthetic-v0", {"device": "cpu"}, rank1) == {"device": "cpu"}
    assert distributed.rank_env_kwargs(toy_env.ENV_ID, {}, rank1) == {}  # not an Esper env: no device kwarg
    with pytest.raises(ValueError, match="drop devices"):
        distributed.rank_env_kwargs("Esper-Synthetic-v0", {"devices": ["cuda:0", "cuda:1"]}, rank1)
    with pytest.raises(ValueError, match="same GPU"):
        distributed.rank_env_kwargs("Esper-Synthetic-v0", {"device": "cuda:0"}, rank1)


if __name__ == "__main__":
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", UserWarning)  # the short rollouts warn; the launch log stays readable
    worker(Path(sys.argv[1]))
