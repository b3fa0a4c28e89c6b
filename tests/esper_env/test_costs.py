"""The growth costs: zero for the static seedling, per doubling, telescoping, and fractions in [0, 1]."""

from __future__ import annotations

import math

import pytest

from esper_env.costs import Reference, cost, fractions

REF = Reference(params=1000, epoch_flops=10.0, max_params=64000, max_epoch_flops=400.0)


def test_the_static_seedling_pays_nothing() -> None:
    for t in range(1, 5):
        assert cost(1000, 10.0 * t, t, REF, flops_price=0.02, params_price=0.01) == 0.0
    assert cost(5000, 0.0, 0, REF, 0.02, 0.01) == 0.0  # nothing trained yet


def test_each_doubling_costs_its_price() -> None:
    assert cost(1000, 20.0 * 3, 3, REF, 0.02, 0.0) == pytest.approx(0.02)  # twice the compute, every epoch
    assert cost(4000, 30.0, 3, REF, 0.0, 0.01) == pytest.approx(0.02)  # four times the params
    assert cost(4000, 60.0, 3, REF, 0.02, 0.01) == pytest.approx(0.04)


def test_growing_late_costs_less_than_growing_early() -> None:
    early = [10.0] + [80.0] * 3  # epoch FLOPs: grown after the first epoch
    late = [10.0] * 3 + [80.0]
    assert cost(8000, sum(early), 4, REF, 0.02, 0.0) > cost(8000, sum(late), 4, REF, 0.02, 0.0) > 0.0


def test_fractions_are_relative_to_the_largest_and_bounded() -> None:
    assert fractions(1000, 30.0, 3, REF) == (1000 / 64000, 30.0 / 1200.0)
    assert fractions(64000, 1200.0, 3, REF) == (1.0, 1.0)
    assert fractions(1000, 0.0, 0, REF) == (1000 / 64000, 0.0)
    assert all(0.0 <= v <= 1.0 for v in fractions(10**9, 10.0**9, 1, REF))
    assert math.isclose(sum(fractions(32000, 600.0, 3, REF)), 1.0)
