"""One short episode on the real CIFAR-10 (needs ESPER_DATA_DIR; CI sets it when ../shared/data exists)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import real_data_dir

import esper_env  # noqa: F401

pytestmark = pytest.mark.realdata


@pytest.fixture
def data_dir() -> str:
    folder = real_data_dir()
    if folder is None:
        pytest.skip("ESPER_DATA_DIR is not set to a folder with the CIFAR-10 shards (train_0..4.npz, test.npz)")
    return str(folder)


def test_short_real_episode(data_dir):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    env = gym.make("Esper-CIFAR10-Fast-v0", data_dir=data_dir, device=device, max_epochs=3, batch_size=128,
                   train_images_per_epoch=2048, val_images=1000, report_test_accuracy=True, download=False)
    obs, info = env.reset(seed=0)
    accuracies = []
    for t in range(3):
        action = np.array([1, 2, 5, 0, 0]) if t == 0 else np.zeros(5, dtype=np.int64)
        obs, reward, terminated, truncated, info = env.step(action)
        accuracies.append(info["val_accuracy"])
        assert info["images_trained"] == 2048 and np.isfinite(reward) and not terminated
    assert truncated and 0.0 <= info["test_accuracy"] <= 1.0
    assert accuracies[-1] > 0.15, accuracies  # three small epochs already beat chance (0.1) clearly
