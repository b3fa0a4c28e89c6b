"""Hidden training conditions: pools, label noise and epoch orders are exact and reproducible."""

from __future__ import annotations

import pytest
import torch

from esper_env.conditions import CONDITIONS, Condition, condition_named, draw_pool, epoch_order, noisy_labels


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_pool_is_a_reproducible_subset_of_distinct_images() -> None:
    pool = draw_pool(Condition("p", pool=300), 1000, _gen(1))
    assert len(pool) == 300 and len(set(pool.tolist())) == 300 and int(pool.max()) < 1000
    assert torch.equal(pool, draw_pool(Condition("p", pool=300), 1000, _gen(1)))
    assert len(draw_pool(Condition("full"), 1000, _gen(1))) == 1000


def test_label_noise_makes_exactly_that_fraction_wrong() -> None:
    labels = torch.arange(1000) % 10
    noisy = noisy_labels(labels, Condition("n", label_noise=0.4), 10, _gen(2))
    assert int((noisy != labels).sum()) == 400
    assert int(noisy.min()) >= 0 and int(noisy.max()) < 10
    assert torch.equal(noisy_labels(labels, Condition("clean"), 10, _gen(2)), labels)


def test_epoch_order_covers_the_pool_in_passes() -> None:
    order = epoch_order(300, 1000, _gen(3))
    counts = torch.bincount(order, minlength=300)
    assert len(order) == 1000 and int(counts.min()) >= 3 and int(counts.max()) <= 4
    assert torch.equal(torch.bincount(order[:900], minlength=300), torch.full((300,), 3))


def test_errors_name_the_value() -> None:
    with pytest.raises(ValueError, match="pool=0"):
        Condition("bad", pool=0)
    with pytest.raises(ValueError, match="label_noise=1.0"):
        Condition("bad", label_noise=1.0)
    with pytest.raises(ValueError, match="needs a pool of 15000 images; the split has 1000"):
        draw_pool(condition_named("pool15k"), 1000, _gen())
    with pytest.raises(ValueError, match="condition='nope' is unknown"):
        condition_named("nope")


def test_catalogue_has_two_axes_and_unique_names() -> None:
    assert len({c.name for c in CONDITIONS}) == len(CONDITIONS)
    assert any(c.pool for c in CONDITIONS) and any(c.label_noise for c in CONDITIONS)
