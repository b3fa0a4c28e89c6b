"""The agent on a CUDA device: storage, update and checkpoints stay on the device (skipped without CUDA)."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
import torch
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent import train
from esper_agent.checkpoint import load_checkpoint
from esper_agent.config import AgentConfig
from esper_agent.trainer import Trainer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_training_runs_on_cuda_and_learns_the_toy_task() -> None:
    envs = gym.make_vec(toy_env.ENV_ID, num_envs=16)
    config = AgentConfig(rollout_steps=16, hidden_size=64, num_minibatches=4, learning_rate=1e-3, ent_coef=0.03)
    trainer = Trainer(envs, config, device="cuda", seed=0, total_updates=60)
    returns = [m["episode/return_mean"] for m in trainer.train()]
    assert trainer.collector.storage.obs.is_cuda and next(trainer.policy.parameters()).is_cuda
    assert all(s.is_cuda for s in trainer.optimizer.state[next(trainer.policy.parameters())].values()
               if isinstance(s, torch.Tensor) and s.dim() > 0)
    print(f"cuda toy task: training return, mean of the last 10 updates {sum(returns[-10:]) / 10:.3f}")
    assert sum(returns[-10:]) / 10 > 0.6


def test_cuda_checkpoint_resume_and_evaluate(tmp_path: Path) -> None:
    args = ["--env", f"{toy_env.__name__}:{toy_env.ENV_ID}", "--num-envs", "4", "--device", "cuda",
            "--total-updates", "2", "--rollout-steps", "8", "--hidden-size", "32", "--run-dir", str(tmp_path)]
    assert train.main(args) == 0
    assert train.main(["--resume", str(tmp_path), "--total-updates", "3"]) == 0
    assert load_checkpoint(tmp_path / "checkpoint.pt")["counters"]["update"] == 3
    from esper_agent import evaluate

    assert evaluate.main(["--checkpoint", str(tmp_path / "checkpoint.pt"), "--episodes", "4", "--device", "cuda"]) == 0


@pytest.mark.skipif(importlib.util.find_spec("esper_env.vector_env") is None, reason="no esper_env vector env")
@pytest.mark.parametrize("defer_keep", [False, True])  # the keep deadline is masked on the device too
def test_esper_synthetic_on_cuda(tmp_path: Path, defer_keep: bool) -> None:
    args = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps({"max_epochs": 5}), "--num-envs", "4",
            "--device", "cuda", "--total-updates", "2", "--rollout-steps", "5", "--run-dir", str(tmp_path)]
    assert train.main(args + ["--defer-keep"] * defer_keep) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    print("esper synthetic on cuda:", {k: rows[-1][k] for k in ("episode/return_mean", "time/env_steps_per_s",
                                                                "time/host_images_per_s", "time/update_s")})
    assert rows[-1]["update"] == 2


def test_frozen_copies_and_the_swapped_in_average_keep_the_lstm_in_one_chunk_on_cuda() -> None:
    # The reference policy is a deep copy; unflattened, cuDNN warns and compacts its LSTM weights on every call
    # (as a deep-copied average did in the twenty-seventh session's task logs). The average is swapped into the
    # policy's own storage, which stays in one chunk.
    envs = gym.make_vec(toy_env.ENV_ID, num_envs=4)
    config = AgentConfig(rollout_steps=8, hidden_size=32, num_minibatches=2, proximal_ewma=0.5, replay_rollouts=2,
                         reference_kl_coef=0.1)
    trainer = Trainer(envs, config, device="cuda", seed=0, total_updates=3)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*single contiguous chunk of memory.*")
        metrics = list(trainer.train())  # a generator: nothing trains until it is iterated
    assert len(metrics) == 3
    assert trainer.reference_kl.policy is not None and next(trainer.reference_kl.policy.parameters()).is_cuda
    assert trainer.replay.average is not None and trainer.replay.average.average[0].is_cuda
