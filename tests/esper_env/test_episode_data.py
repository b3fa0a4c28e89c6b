"""The env applies its hidden training condition per episode: pool, label noise, classes in play, resolution."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from esper_env.conditions import CONDITIONS, condition_named
from esper_env.config import EnvConfig
from esper_env.data import load_dataset
from esper_env.episode_data import prepared_images, reduce_resolution
from esper_env.training import HostTrainer, MetricLayout

ID = "Esper-Synthetic-v0"
SMALL = {"dataset": "synthetic", "device": "cpu", "batch_size": 64, "eval_batch_size": 96,
         "synthetic_train_size": 256, "synthetic_val_size": 128, "synthetic_test_size": 64,
         "synthetic_image_size": 16, "host_widths": (4, 8)}
BIG_POOL = {**SMALL, "synthetic_train_size": 15_000, "train_images_per_epoch": 256}
"""Enough training images for every pool of the catalogue; 4 batches per epoch all the same."""


def _trainer(**overrides) -> HostTrainer:
    cfg = EnvConfig(**{**SMALL, **overrides})
    metrics = torch.zeros(MetricLayout(cfg.num_slots).size)
    return HostTrainer(cfg, load_dataset(cfg, torch.device("cpu")), metrics, None)


def _epoch(trainer: HostTrainer) -> tuple[torch.Tensor, torch.Tensor]:
    """Prepare one epoch; return the training rows it drew (replayed from a copy of the generator) and labels."""
    replay = torch.Generator().set_state(trainer.generator.get_state())
    count = trainer.epoch_labels.numel()
    rows, _ = trainer.episode_data.epoch_rows(trainer.perm.clone(), count, replay)
    trainer.begin_epoch([0.0] * (3 * trainer.cfg.num_slots), np.full((trainer.batches_per_epoch, 2), 0.1))
    return rows, trainer.epoch_labels.flatten()


def test_full_draws_nothing_and_trains_on_the_streams_permutation() -> None:
    """``"full"`` leaves the data stream what it was without conditions: no draw at reset, one permutation of
    the whole split per epoch, clean labels, every validation image scored without weights."""
    trainer = _trainer(condition="full")
    trainer.reset(init_seed=1, data_seed=7)
    assert torch.equal(trainer.generator.get_state(), torch.Generator().manual_seed(7).get_state())
    data = trainer.episode_data
    assert data.pool is None and data.val_weight is None and data.val_count == 128 and data.test_count == 64
    rows, labels = _epoch(trainer)
    assert torch.equal(rows, torch.randperm(256, generator=torch.Generator().manual_seed(7))[:256])
    assert torch.equal(labels, trainer.data.train_y[rows])
    assert data.val_images is prepared_images(trainer.data, "val", torch.float32, None)


def test_a_pool_is_the_only_source_of_training_images_at_the_same_images_per_epoch() -> None:
    full, pooled = _trainer(**BIG_POOL), _trainer(**BIG_POOL, condition="pool5k")
    for t in (full, pooled):
        t.reset(init_seed=1, data_seed=3)
    pool = pooled.episode_data.pool
    assert pool is not None and len(pool) == 5_000 and len(set(pool.tolist())) == 5_000
    rows, labels = _epoch(pooled)
    assert set(rows.tolist()) <= set(pool.tolist()) and len(set(rows.tolist())) == len(rows) == 256
    assert torch.equal(labels, pooled.data.train_y[rows])
    assert pooled.epoch_images.shape == full.epoch_images.shape and pooled.batches_per_epoch == 4


def test_label_noise_makes_exactly_that_fraction_of_the_pool_wrong_and_training_reads_it() -> None:
    trainer = _trainer(**BIG_POOL, condition="pool15k-noise20")
    trainer.reset(init_seed=1, data_seed=3)
    data, clean = trainer.episode_data, trainer.data.train_y
    wrong = (data.labels != clean).nonzero().flatten()
    assert len(wrong) == 3_000 and set(wrong.tolist()) <= set(data.pool.tolist())
    rows, labels = _epoch(trainer)
    assert torch.equal(labels, data.labels[rows]) and not torch.equal(labels, clean[rows])
    noisy = _trainer(condition="noise40")
    noisy.reset(init_seed=1, data_seed=3)
    assert int((noisy.episode_data.labels != noisy.data.train_y).sum()) == round(0.4 * 256)


def test_classes_in_play_restrict_training_labels_and_validation_scoring() -> None:
    trainer = _trainer(condition="classes2")
    trainer.reset(init_seed=1, data_seed=4)
    data, val_y = trainer.episode_data, trainer.data.val_y
    _, labels = _epoch(trainer)
    classes = sorted(set(labels.tolist()))
    assert len(classes) == 2
    kept = torch.isin(val_y, torch.tensor(classes))
    assert data.val_count == int(kept.sum()) and torch.equal(data.val_weight, kept.float())
    trainer.set_plan((True, False))  # two configurations: the weights repeat per configuration
    trainer.evaluate()
    trainer.model.eval()
    x = prepared_images(trainer.data, "val", torch.float32)[kept].permute(0, 3, 1, 2)
    with torch.no_grad():
        logits = trainer.model(x, trainer.alpha, trainer.flags)
    loss = F.cross_entropy(logits, val_y[kept], reduction="sum")
    correct = (logits.argmax(1) == val_y[kept]).sum().float()
    evals = trainer.metrics[trainer.layout.eval].view(-1, 2)[:2]
    torch.testing.assert_close(evals, torch.stack([loss, correct]).expand(2, 2))
    m = trainer.read_measurement(trainer.metrics.numpy(), tested=False)
    assert m.val_accuracy == pytest.approx(float(correct) / data.val_count)
    assert m.val_loss == pytest.approx(float(loss) / data.val_count, rel=1e-5)


def test_reduced_resolution_reaches_training_validation_and_test_images() -> None:
    trainer = _trainer(condition="res8")
    trainer.reset(init_seed=1, data_seed=2)
    _epoch(trainer)
    data = trainer.episode_data
    full = prepared_images(trainer.data, "val", torch.float32)
    assert not torch.equal(data.val_images, full)
    expected = reduce_resolution(full.permute(0, 3, 1, 2), condition_named("res8")).permute(0, 2, 3, 1)
    torch.testing.assert_close(data.val_images, expected)
    for images in (trainer.epoch_images.flatten(0, 1), data.test_images):  # NHWC: 2x2 blocks of equal pixels
        assert torch.equal(images[:, ::2, ::2], images[:, 1::2, 1::2])


def test_the_mixture_draws_per_reset_seed_reproducibly_and_updates_graph_inputs_in_place() -> None:
    trainer, again = _trainer(**BIG_POOL, condition="mixture"), _trainer(**BIG_POOL, condition="mixture")
    data = trainer.episode_data
    pointers = (data.val_images.data_ptr(), data.val_weight.data_ptr())
    drawn = {}
    for seed in range(12):
        trainer.reset(init_seed=0, data_seed=seed)
        again.reset(init_seed=0, data_seed=seed)
        drawn[seed] = data.condition.name
        assert again.episode_data.condition == data.condition
        assert torch.equal(again.episode_data.labels, data.labels)
        assert (data.pool is None) == (again.episode_data.pool is None)
        assert data.pool is None or torch.equal(again.episode_data.pool, data.pool)
        resolution = data.condition.resolution
        for split in ("val", "test"):
            expected = prepared_images(trainer.data, split, torch.float32, resolution)
            assert torch.equal(getattr(data, f"{split}_images"), expected)
        assert data.val_count == int(data.val_weight.sum())
        assert (data.val_images.data_ptr(), data.val_weight.data_ptr()) == pointers
    assert len(set(drawn.values())) >= 4
    assert set(drawn.values()) <= {c.name for c in CONDITIONS}


def test_a_listed_mixture_draws_only_its_conditions_per_reset_seed() -> None:
    trainer, again = _trainer(condition="mixture:full,classes2"), _trainer(condition="mixture:full,classes2")
    drawn = []
    for seed in range(16):
        trainer.reset(init_seed=0, data_seed=seed)
        again.reset(init_seed=0, data_seed=seed)
        assert again.episode_data.condition == trainer.episode_data.condition
        drawn.append(trainer.episode_data.condition.name)
    assert set(drawn) == {"full", "classes2"}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"condition": "nope"}, r"condition='nope' is out of range; expected one of \('full', .*'mixture'\)"),
    ({"condition": "mixture"}, "condition='mixture' can draw 'pool15k', which needs a pool of 15000 training "
                               "images; dataset 'synthetic' has 256"),
    ({"condition": "mixture:full"}, r"condition='mixture:full' is out of range; expected .*'mixture:<name>"),
    ({"condition": "mixture:full,full"}, "condition='mixture:full,full' is out of range"),
    ({"condition": "mixture:full,nope"}, "condition='mixture:full,nope' is out of range"),
    ({"condition": "mixture:full,pool2k"}, "condition='mixture:full,pool2k' can draw 'pool2k', which needs a pool "
                                           "of 2000 training images; dataset 'synthetic' has 256"),
    ({"condition": "classes5", "synthetic_num_classes": 4}, "condition='classes5' puts 5 classes in play; "
                                                            "dataset 'synthetic' has 4"),
    ({"condition": "res8", "synthetic_image_size": 12}, "condition='res8' reduces images to 8 pixels, which does "
                                                        "not divide dataset 'synthetic''s image size 12"),
])
def test_conditions_the_data_cannot_meet_are_refused_by_name(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _trainer(**kwargs)


def test_info_names_the_condition_and_the_observation_does_not_show_it(tiny: dict) -> None:
    observations = []
    for condition in ("full", "res8"):
        venv = gym.make_vec(ID, num_envs=2, **tiny, condition=condition)
        obs, info = venv.reset(seed=0)
        observations.append(obs)
        assert "condition" not in info
        _, _, _, _, info = venv.step(np.zeros((2, 5), dtype=np.int64))
        assert info["condition"].tolist() == [condition] * 2 and info["_condition"].all()
        venv.close()
    np.testing.assert_array_equal(*observations)
    env = gym.make(ID, **tiny, condition="classes2")
    env.reset(seed=0)
    assert env.step(np.zeros(5, dtype=np.int64))[4]["condition"] == "classes2"
    env.close()


def test_every_accepted_name_is_documented_on_the_config_field() -> None:
    import inspect

    from esper_env.conditions import CHOICES
    source = inspect.getsource(EnvConfig)
    doc = source[source.index("condition: str"):].split('"""')[1]
    assert all(f'"{name}"' in doc for name in CHOICES)
