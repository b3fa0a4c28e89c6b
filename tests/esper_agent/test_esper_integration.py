"""esper_agent against the real Esper vector env on CPU (skipped until esper_env.vector_env exists)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.config import AgentConfig
from esper_agent.trainer import Trainer

pytestmark = pytest.mark.skipif(importlib.util.find_spec("esper_env.vector_env") is None,
                                reason="esper_env.vector_env is not there yet")
SMALL = {"max_epochs": 3, "device": "cpu", "synthetic_train_size": 256, "synthetic_val_size": 64}


@pytest.mark.parametrize("defer_keep", [False, True])  # True: the keep deadline must survive each mode's resets
def test_autoreset_modes_on_esper_synthetic(defer_keep: bool) -> None:
    """SAME_STEP and DISABLED give bit-identical rollouts on the real env; NEXT_STEP stores no reset step."""
    rollouts = {}
    for mode in ("NextStep", "SameStep", "Disabled"):
        envs = gym.make_vec("Esper-Synthetic-v0", num_envs=2, autoreset_mode=mode, **SMALL)
        config = AgentConfig(rollout_steps=7, hidden_size=32, normalize_obs=False, defer_keep=defer_keep)
        trainer = Trainer(envs, config, seed=0)
        rollouts[mode], stats = trainer.collector.collect(5, trainer.sample_generator)
        envs.close()
        assert len(stats.episodes) == 4 and stats.invalid == 0
    same, disabled, nxt = rollouts["SameStep"], rollouts["Disabled"], rollouts["NextStep"]
    for name, a, b in zip(same._fields, same, disabled, strict=True):
        if name not in ("initial_state", "resets_inside"):
            assert torch.equal(a, b), name
    # In phase, every sub-env ends together: the all-reset NEXT_STEP steps are neither stored nor counted.
    assert nxt.valid.all() and nxt.episode_start.sum(1).tolist() == [3, 3]
    assert np.array_equal(nxt.truncated.numpy(), same.truncated.numpy())


def test_resume_is_exact_on_esper_synthetic(tmp_path: Path) -> None:
    """The exact-resume property holds on the real env too (CPU): it reseeds every rollout's reset."""
    from esper_agent import train
    from esper_agent.checkpoint import load_checkpoint

    base = ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(SMALL), "--num-envs", "2", "--device", "cpu",
            "--total-updates", "4", "--rollout-steps", "3", "--checkpoint-interval", "2"]
    assert train.main([*base, "--run-dir", str(tmp_path / "a")]) == 0
    parsed = vars(train.build_parser().parse_args([*base, "--run-dir", str(tmp_path / "b")]))
    fields = AgentConfig.__dataclass_fields__
    options = train._options({k: v for k, v in parsed.items() if k not in fields}, None)

    def interrupt(metrics: dict) -> None:
        if metrics["update"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train.run(options, AgentConfig(**{k: v for k, v in parsed.items() if k in fields}), on_update=interrupt)
    assert train.main(["--resume", str(tmp_path / "b")]) == 0
    a, b = load_checkpoint(tmp_path / "a" / "checkpoint.pt"), load_checkpoint(tmp_path / "b" / "checkpoint.pt")
    assert all(torch.equal(v, b["policy"][k]) for k, v in a["policy"].items())

    def rows(path: Path) -> list[dict]:
        lines = (path / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines]

    assert rows(tmp_path / "a") == rows(tmp_path / "b")


def test_the_rollout_counts_what_was_planted_where() -> None:
    from esper_agent.collect import EpisodeTracker
    from esper_agent.envs import VectorEnvDriver
    from esper_agent.telemetry import rollout_metrics
    from esper_env.spaces import BLUEPRINT_NAMES, Op

    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=2, **SMALL)
    driver = VectorEnvDriver(envs)
    _, masks = driver.reset(0)
    blueprint = int(np.flatnonzero(masks.blueprint[0, 1])[-1])  # a blueprint slot 1 allows
    tracker = EpisodeTracker(2, driver.num_slots)
    actions = np.zeros((2, 5), np.int64)  # sub-env 1 WAITs
    actions[0, :3] = [Op.GERMINATE, 1, blueprint]
    tracker.record(driver.step(actions), actions)
    envs.close()
    metrics = rollout_metrics(tracker.stats, 1.0)
    assert metrics[f"plant/slot1_{BLUEPRINT_NAMES[blueprint]}"] == 1.0
    planted = {k: v for k, v in metrics.items() if k.startswith("plant/")}
    assert len(planted) == driver.num_slots * len(BLUEPRINT_NAMES) and sum(planted.values()) == 1.0
