"""One sub-env's training and scoring data under its episode's hidden condition (:mod:`esper_env.conditions`).

The helpers apply a condition to device tensors with the episode's generator, so that an episode is
reproducible from its reset seed: :func:`draw_classes`, :func:`in_play`, :func:`draw_pool`, :func:`noisy_labels`,
:func:`epoch_order` and :func:`reduce_resolution`. :class:`EpisodeData` holds what one sub-env's trainer reads:

* at reset, :meth:`EpisodeData.draw` draws the condition (under the mixture), the classes in play, the pool and
  its noisy labels, in that order, from the data generator. A condition that neither restricts the classes nor
  sets a pool size draws no pool (the trainer's per-epoch permutation covers the whole split) and a clean one
  draws no labels, so ``"full"`` leaves the data stream exactly what it is without conditions;
* every epoch trains on the same number of images whatever the condition (:meth:`EpisodeData.epoch_rows`), so
  the step's cost and the FLOPs counter give nothing away;
* validation and test images are prepared once per dataset, dtype and resolution and shared by sub-envs. The
  validation pass is captured as a CUDA graph, so what it reads changes in place between episodes, never by
  re-binding: the 0/1 weights of the images in play, and, under a mixture of resolutions, the trainer's own
  copy of the validation images.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from esper_env.conditions import Condition, drawable
from esper_env.data import Dataset, normalize
from esper_env.dataset_spec import DatasetSpec


def draw_classes(condition: Condition, num_classes: int, generator: torch.Generator) -> torch.Tensor | None:
    """The episode's classes in play (int64, sorted), or None when every class is."""
    if condition.classes is None:
        return None
    if condition.classes > num_classes:
        raise ValueError(f"condition {condition.name!r} puts {condition.classes} classes in play; the data has "
                         f"{num_classes}")
    chosen = torch.randperm(num_classes, generator=generator, device=generator.device)[: condition.classes]
    return chosen.sort().values


def in_play(labels: torch.Tensor, classes: torch.Tensor | None) -> torch.Tensor:
    """Indices of the images whose label is one of ``classes`` (every index when ``classes`` is None)."""
    if classes is None:
        return torch.arange(len(labels), device=labels.device)
    return torch.isin(labels, classes).nonzero().flatten()


def draw_pool(condition: Condition, candidates: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The episode's pool: ``condition.pool`` of the ``candidates`` (indices into the training split), drawn
    without replacement, or all of them in a random order when the condition sets no pool size."""
    size = len(candidates) if condition.pool is None else condition.pool
    if size > len(candidates):
        raise ValueError(f"condition {condition.name!r} needs a pool of {size} images; it has {len(candidates)}")
    return candidates[torch.randperm(len(candidates), generator=generator, device=generator.device)[:size]]


def reduce_resolution(images: torch.Tensor, condition: Condition) -> torch.Tensor:
    """Float images ``(B, C, H, W)`` averaged down to the condition's resolution and enlarged back (nearest)."""
    if condition.resolution is None:
        return images
    size = images.shape[-1]
    if size % condition.resolution:
        raise ValueError(f"condition {condition.name!r}: resolution={condition.resolution} does not divide the "
                         f"image size {size}")
    factor = size // condition.resolution
    return F.avg_pool2d(images, factor).repeat_interleave(factor, -2).repeat_interleave(factor, -1)


def noisy_labels(labels: torch.Tensor, condition: Condition, num_classes: int,
                 generator: torch.Generator) -> torch.Tensor:
    """A copy of ``labels`` (the pool's) with ``round(label_noise * n)`` of them moved to another class."""
    out = labels.clone()
    wrong = round(condition.label_noise * len(labels))
    if wrong == 0:
        return out
    device = generator.device
    chosen = torch.randperm(len(labels), generator=generator, device=device)[:wrong]
    shift = torch.randint(1, num_classes, (wrong,), generator=generator, device=device)  # never 0: always wrong
    out[chosen] = (labels[chosen] + shift) % num_classes
    return out


def epoch_order(pool_size: int, images_per_epoch: int, generator: torch.Generator) -> torch.Tensor:
    """Positions into the pool for one epoch: whole passes without replacement, cut to ``images_per_epoch``."""
    device = generator.device
    passes = -(-images_per_epoch // pool_size)  # ceil
    order = torch.cat([torch.randperm(pool_size, generator=generator, device=device) for _ in range(passes)])
    return order[:images_per_epoch]


@functools.cache
def prepared_images(data: Dataset, split: str, dtype: torch.dtype, resolution: int | None = None) -> torch.Tensor:
    """A split's images normalised once, at ``resolution`` (None = full), in the compute dtype, channels-last
    (NHWC): shared per dataset, dtype and resolution."""
    x = normalize(getattr(data, f"{split}_x"), data.mean, data.std)
    x = reduce_resolution(x, Condition(f"{resolution} pixels", resolution=resolution))
    return x.to(dtype).permute(0, 2, 3, 1).contiguous()


def check_fits(name: str, choices: tuple[Condition, ...], spec: DatasetSpec) -> None:
    """Refuse, before any episode, a ``condition`` argument that can draw a condition the dataset cannot meet."""
    for c in choices:
        who = f"condition={name!r}" if c.name == name else f"condition={name!r} can draw {c.name!r}, which"
        if c.classes is not None and c.classes > spec.num_classes:
            raise ValueError(f"{who} puts {c.classes} classes in play; dataset {spec.name!r} has "
                             f"{spec.num_classes}; expected another condition or more classes")
        if c.pool is not None and c.pool > spec.train_size:
            raise ValueError(f"{who} needs a pool of {c.pool} training images; dataset {spec.name!r} has "
                             f"{spec.train_size}; expected another condition or a larger training split")
        if c.resolution is not None and spec.image_size % c.resolution:
            raise ValueError(f"{who} reduces images to {c.resolution} pixels, which does not divide dataset "
                             f"{spec.name!r}'s image size {spec.image_size}; expected another condition")


class EpisodeData:
    """What one sub-env's episode trains and is scored on under its condition, on the dataset's device."""

    def __init__(self, condition: str, data: Dataset, dtype: torch.dtype) -> None:
        self.data, self.dtype = data, dtype
        self.choices = drawable(condition)
        check_fits(condition, self.choices, data.spec)
        self.condition = self.choices[0]  # until the first draw
        self.pool: torch.Tensor | None = None
        """Indices of the training images the episode draws from; None = the whole training split."""
        self.labels = data.train_y
        """Training labels by image index (noisy inside the pool)."""
        device = data.train_y.device
        # Weights only where a drawable condition restricts the classes: the others then score exactly as they
        # did before conditions existed, with no extra kernel.
        restricted = any(c.classes is not None for c in self.choices)
        self.val_weight = torch.ones(data.val_y.shape[0], device=device) if restricted else None
        """1.0 for each validation image of a class in play, else 0.0; None when every class always is."""
        self.test_weight = torch.ones(data.test_y.shape[0], device=device) if restricted else None
        # Validation and test images in play (count): what accuracies and losses are averaged over.
        self.val_count, self.test_count = data.val_y.shape[0], data.test_y.shape[0]
        resolutions = {c.resolution for c in self.choices}
        # Prepared now, on the default stream, before any sub-env stream reads them (built lazily inside one
        # sub-env's stream, shared tensors race with the other sub-envs' first reads).
        for resolution in resolutions:
            for split in ("val", "test"):
                prepared_images(data, split, dtype, resolution)
        self.val_images = prepared_images(data, "val", dtype, self.condition.resolution)
        if len(resolutions) > 1:  # refilled in place at reset: the captured validation graph reads this tensor
            self.val_images = self.val_images.clone()
        self.test_images = prepared_images(data, "test", dtype, self.condition.resolution)
        self._loaded = self.condition.resolution

    def draw(self, generator: torch.Generator) -> None:
        """Draw the episode's condition (under the mixture), its classes in play, pool and noisy labels, in that
        order, from the episode's data generator; set the scoring weights and images to match."""
        if len(self.choices) > 1:
            pick = torch.randint(len(self.choices), (1,), generator=generator, device=generator.device)
            self.condition = self.choices[int(pick)]  # sync: once per episode, at reset
        c, spec, train_y = self.condition, self.data.spec, self.data.train_y
        classes = draw_classes(c, spec.num_classes, generator)
        self.pool = None if classes is None and c.pool is None else draw_pool(c, in_play(train_y, classes),
                                                                               generator)
        self.labels = train_y
        if c.label_noise:
            rows = torch.arange(len(train_y), device=train_y.device) if self.pool is None else self.pool
            self.labels = train_y.clone()
            self.labels[rows] = noisy_labels(train_y[rows], c, spec.num_classes, generator)
        self._weigh(classes)
        self._load_images()

    def _weigh(self, classes: torch.Tensor | None) -> None:
        if self.val_weight is None or self.test_weight is None:
            return
        for weight, labels in ((self.val_weight, self.data.val_y), (self.test_weight, self.data.test_y)):
            if classes is None:
                weight.fill_(1.0)
            else:
                weight.copy_(torch.isin(labels, classes))
        counts = torch.stack([self.val_weight.sum(), self.test_weight.sum()]).tolist()  # sync: once per episode
        self.val_count, self.test_count = round(counts[0]), round(counts[1])
        if min(self.val_count, self.test_count) == 0:
            raise ValueError(f"condition {self.condition.name!r} put classes {classes.tolist()} in play, and the "
                             f"validation or test split ({self.val_count} and {self.test_count} images of them) "
                             "has none of their images; expected splits with images of every class")

    @property
    def chance_accuracy(self) -> float:
        """Accuracy of a uniform guess among the classes in play (the dataset's chance when every class is)."""
        classes = self.condition.classes
        return self.data.spec.chance_accuracy if classes is None else 1.0 / classes

    def _load_images(self) -> None:
        resolution = self.condition.resolution
        # The test pass runs eagerly: re-binding its images is safe and copies nothing.
        self.test_images = prepared_images(self.data, "test", self.dtype, resolution)
        if resolution != self._loaded:
            self.val_images.copy_(prepared_images(self.data, "val", self.dtype, resolution))
            self._loaded = resolution

    def epoch_rows(self, perm: torch.Tensor, count: int, generator: torch.Generator) -> tuple[torch.Tensor,
                                                                                                torch.Tensor]:
        """One epoch's ``count`` training images (indices into the training split) and their labels.

        Without a pool, one permutation of the whole split into ``perm`` (its length), cut to ``count``: the
        stream of the env without conditions. With one, whole passes over the pool (:func:`epoch_order`).
        """
        if self.pool is None:
            torch.randperm(perm.shape[0], generator=generator, out=perm)
            rows = perm[:count]
        else:
            rows = self.pool[epoch_order(self.pool.shape[0], count, generator)]
        return rows, self.labels.index_select(0, rows)

    def inputs(self, images: torch.Tensor) -> torch.Tensor:
        """Normalised float training images ``(B, C, H, W)`` at the episode's resolution."""
        return reduce_resolution(images, self.condition)
