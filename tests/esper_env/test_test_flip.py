"""Flip test-time augmentation of the test read (``test_flip``): the test scores the mean of the logits of each
image and of its mirror image, and nothing else changes (CPU, synthetic data)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

import esper_env
from esper_env.config import EnvConfig
from esper_env.data import load_dataset
from esper_env.training import HostTrainer, MetricLayout

SMALL = {"dataset": "synthetic", "device": "cpu", "batch_size": 64, "eval_batch_size": 48,
         "synthetic_train_size": 256, "synthetic_val_size": 64, "synthetic_test_size": 100,
         "synthetic_image_size": 16, "host_widths": (4, 8), "condition": "classes5"}
"""``classes5`` scores only some test images (per-image weights); 100 test images in chunks of 48 leave a short
last chunk."""


def _tested(test_flip: bool, host: str) -> tuple[HostTrainer, torch.Tensor]:
    """A trainer trained for two epochs from reset (same weights and condition whatever ``test_flip``: the flag
    changes no training) and its test metrics."""
    family = {"host": "family", "family_widths": (4, 8, 8), "family_stem": 4, "max_widths": (8, 16, 16)}
    cfg = EnvConfig(**SMALL, test_flip=test_flip, **(family if host == "family" else {}))
    trainer = HostTrainer(cfg, load_dataset(cfg, torch.device("cpu")), torch.zeros(MetricLayout(cfg.num_slots).size),
                          None)
    trainer.reset(init_seed=3, data_seed=5)
    for _ in range(2):
        trainer.begin_epoch([0.0] * (3 * cfg.num_slots), np.full((trainer.batches_per_epoch, 2), 0.3))
        for _ in range(trainer.batches_per_epoch):
            trainer.train_step()
    trainer.evaluate_test()
    return trainer, trainer.metrics[trainer.layout.test].clone()


def _by_hand(trainer: HostTrainer, flip: bool) -> tuple[float, float]:
    """Summed loss and correct predictions over the scored test images, one forward of the whole set per view."""
    data = trainer.episode_data
    x = data.test_images.permute(0, 3, 1, 2)  # NCHW
    with torch.no_grad():
        logits = trainer.model(x, trainer.alpha, trainer.flags)
        if flip:
            logits = (logits + trainer.model(x.flip(3), trainer.alpha, trainer.flags)) / 2
    y, w = trainer.data.test_y, data.test_weight
    assert w is not None and 0 < int(w.sum()) < len(y)  # the weights really leave images out
    loss = (F.cross_entropy(logits, y, reduction="none") * w).sum()
    return float(loss), float(((logits.argmax(1) == y) * w).sum())


def test_the_test_read_scores_the_mean_logits_of_image_and_mirror() -> None:
    for host in ("small", "family"):
        plain_trainer, plain = _tested(False, host)
        flip_trainer, flipped = _tested(True, host)
        for trainer, metrics, flip in ((plain_trainer, plain, False), (flip_trainer, flipped, True)):
            loss, correct = _by_hand(trainer, flip)
            assert abs(metrics[0].item() - loss) < 1e-4 * loss
            assert metrics[1].item() == correct
        assert flipped[1] != plain[1] and flipped[0] != plain[0], host  # the augmentation changes the read


def test_only_the_test_accuracy_changes() -> None:
    """Same seeds with and without the flag: the same validation accuracies and rewards, a different test
    accuracy at the episode's end."""
    kwargs = {"device": "cpu", "max_epochs": 2, "train_images_per_epoch": 256, "batch_size": 64,
              "synthetic_train_size": 256, "synthetic_val_size": 64, "synthetic_test_size": 256,
              "host_widths": [4, 8], "report_test_accuracy": True}
    runs = []
    for test_flip in (False, True):
        env = gym.make_vec("Esper-Synthetic-v0", num_envs=2, vectorization_mode="vector_entry_point",
                           test_flip=test_flip, **kwargs)
        env.reset(seed=11)
        wait = np.zeros((2, env.single_action_space.shape[0]), np.int64)
        steps = [env.step(wait) for _ in range(kwargs["max_epochs"])]
        env.close()
        runs.append(([s[4]["val_accuracy"] for s in steps], [s[1] for s in steps], steps[-1][4]["test_accuracy"]))
    (val, rewards, test), (val_flip, rewards_flip, test_flip) = runs
    assert np.array_equal(np.stack(val), np.stack(val_flip)) and np.array_equal(np.stack(rewards),
                                                                                np.stack(rewards_flip))
    assert np.all(np.isfinite(test)) and not np.array_equal(test, test_flip)


def test_the_family_task_flips_its_test_read_and_the_small_task_does_not() -> None:
    assert esper_env.FAMILY_TASK["test_flip"] is True and esper_env.SMALL_TASK["test_flip"] is False
    assert EnvConfig().test_flip is False
    assert gym.spec("Esper-CIFAR10-v0").kwargs["test_flip"] is True
    assert "test_flip" not in gym.spec("Esper-Synthetic-v0").kwargs
