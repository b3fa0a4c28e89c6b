"""Hidden training conditions: the catalogue, and pools, label noise and epoch orders exact and reproducible."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from esper_env.conditions import CONDITIONS, MIXTURE, Condition, condition_named, drawable
from esper_env.episode_data import (
    draw_classes,
    draw_pool,
    epoch_order,
    in_play,
    noisy_labels,
    reduce_resolution,
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_pool_is_a_reproducible_subset_of_distinct_images() -> None:
    pool = draw_pool(Condition("p", pool=300), torch.arange(1000), _gen(1))
    assert len(pool) == 300 and len(set(pool.tolist())) == 300 and int(pool.max()) < 1000
    assert torch.equal(pool, draw_pool(Condition("p", pool=300), torch.arange(1000), _gen(1)))
    assert sorted(draw_pool(Condition("full"), torch.arange(1000), _gen(1)).tolist()) == list(range(1000))
    odd = torch.arange(1, 1000, 2)
    assert all(i % 2 for i in draw_pool(Condition("p", pool=100), odd, _gen(1)).tolist())


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
    with pytest.raises(ValueError, match="needs a pool of 15000 images; it has 1000"):
        draw_pool(condition_named("pool15k"), torch.arange(1000), _gen())
    with pytest.raises(ValueError, match="classes=1"):
        Condition("bad", classes=1)
    with pytest.raises(ValueError, match="puts 5 classes in play; the data has 4"):
        draw_classes(Condition("c", classes=5), 4, _gen())
    with pytest.raises(ValueError, match="resolution=5 does not divide the image size 16"):
        reduce_resolution(torch.zeros(1, 3, 16, 16), Condition("r", resolution=5))
    with pytest.raises(ValueError, match="condition='nope' is unknown"):
        condition_named("nope")


def test_catalogue_has_four_axes_and_unique_names() -> None:
    assert len({c.name for c in CONDITIONS}) == len(CONDITIONS) and MIXTURE not in {c.name for c in CONDITIONS}
    assert any(c.pool for c in CONDITIONS) and any(c.label_noise for c in CONDITIONS)
    assert any(c.classes for c in CONDITIONS) and any(c.resolution for c in CONDITIONS)
    assert drawable(MIXTURE) == CONDITIONS and drawable("res8") == (condition_named("res8"),)


def test_the_catalogue_imports_no_torch() -> None:
    """The config validates ``condition`` against the catalogue, and the config is pure Python."""
    code = "import sys, esper_env.conditions, esper_env.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_classes_in_play_select_their_images() -> None:
    classes = draw_classes(Condition("c", classes=3), 10, _gen(4))
    assert len(classes) == 3 and len(set(classes.tolist())) == 3
    assert draw_classes(Condition("all"), 10, _gen(4)) is None
    labels = torch.arange(100) % 10
    chosen = in_play(labels, classes)
    assert len(chosen) == 30 and set(labels[chosen].tolist()) == set(classes.tolist())
    assert torch.equal(in_play(labels, None), torch.arange(100))


def test_reduced_resolution_keeps_the_size_and_averages_blocks() -> None:
    images = torch.arange(16.0).view(1, 1, 4, 4)
    reduced = reduce_resolution(images, Condition("r", resolution=2))
    assert reduced.shape == images.shape
    assert reduced[0, 0].tolist() == [[2.5, 2.5, 4.5, 4.5], [2.5, 2.5, 4.5, 4.5],
                                      [10.5, 10.5, 12.5, 12.5], [10.5, 10.5, 12.5, 12.5]]
    assert reduce_resolution(images, Condition("full")) is images
