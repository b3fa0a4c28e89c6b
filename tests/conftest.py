"""Shared fixtures: tiny synthetic environments that run on the CI's 2-core CPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# One thread: on a loaded 2-core machine, two OpenMP threads per process made tiny steps 50x slower.
torch.set_num_threads(1)

TINY = {
    "device": "cpu",
    "batch_size": 64,
    "eval_batch_size": 128,
    "synthetic_train_size": 256,
    "synthetic_val_size": 128,
    "synthetic_test_size": 64,
    "synthetic_image_size": 16,
    "max_epochs": 6,
}
"""Keyword arguments for Esper-Synthetic-v0 that make a step take a few milliseconds on a CPU."""


@pytest.fixture
def tiny() -> dict:
    return dict(TINY)


def real_data_dir() -> Path | None:
    """The folder with real CIFAR-10 shards named by ESPER_DATA_DIR, if it holds them."""
    value = os.environ.get("ESPER_DATA_DIR")
    if value and (Path(value) / "train_0.npz").exists():
        return Path(value)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
