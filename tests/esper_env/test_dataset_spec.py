"""The dataset description: its checks, and the env reading classes and chance from it instead of constants."""

from __future__ import annotations

import dataclasses
import math

import pytest

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
