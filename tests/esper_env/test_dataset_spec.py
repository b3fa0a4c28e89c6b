"""The dataset description: its checks, and the env reading classes and chance from it instead of constants."""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import numpy as np
import pytest

import esper_env  # noqa: F401  (registers the ids)
from esper_env.dataset_spec import DatasetSpec, balanced_chance

VALID = DatasetSpec(name="toy", num_classes=4, image_size=8, channels=2, train_size=100, val_size=20, test_size=10,
                    chance_accuracy=0.25, mean=(0.5, 0.4), std=(0.2, 0.3))


def test_a_valid_spec_is_a_plain_frozen_value() -> None:
    assert dataclasses.replace(VALID) == VALID and hash(VALID) == hash(dataclasses.replace(VALID))
    with pytest.raises(dataclasses.FrozenInstanceError):
        VALID.num_classes = 3  # type: ignore[misc]
    assert balanced_chance(4) == 0.25


@pytest.mark.parametrize(("field", "value"), [
    ("num_classes", 1), ("image_size", 0), ("channels", 0), ("train_size", 0), ("val_size", 0), ("test_size", 0),
    ("chance_accuracy", 0.0), ("chance_accuracy", 1.5), ("mean", (0.5,)), ("mean", (0.5, math.nan)),
    ("std", (0.2, 0.0)), ("std", (0.2, 0.3, 0.1)),
])
def test_a_bad_field_is_refused_by_name(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"DatasetSpec 'toy': {field}=.*; expected"):
        dataclasses.replace(VALID, **{field: value})


@pytest.mark.parametrize("num_classes", [4, 10])
def test_the_env_sizes_the_classifier_and_the_chance_level_from_the_dataset(tiny, num_classes: int) -> None:
    """Planting nothing and paying nothing, the first step's reward is the accuracy gained over chance."""
    env = gym.make("Esper-Synthetic-v0", **tiny, synthetic_num_classes=num_classes)
    venv = env.unwrapped.vector_env
    model = venv._engine.trainers[0].model
    assert venv.dataset_spec.num_classes == num_classes == model.classifier.out_features
    assert venv.host_params == sum(p.numel() for p in model.host_parameters())
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.zeros(5, dtype=np.int64))
    assert reward == pytest.approx(info["val_accuracy"] - 1 / num_classes, abs=1e-12)
    env.close()
