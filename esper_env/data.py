"""Datasets on the device, their splits, and batched augmentation.

:func:`load_dataset` returns one :class:`Dataset` per process, data source and device: uint8 NCHW tensors that
every sub-env on that device shares read-only. Each sub-env draws its own permutations and augmentation
parameters from its own generator and applies them with :func:`random_crop_flip` and :func:`normalize`, which
are fixed-shape and sync-free so that they can be captured in a CUDA graph.

CIFAR-10's official training set is split into 45,000 training and 5,000 validation images by a fixed seed
(:func:`split_indices`), the same in every run and on every machine, so that validation accuracies of different
runs are comparable; the reward and the observation read validation only, and the official 10,000 test images
serve only for reporting, so that nothing the agent learns from has seen them.

Real CIFAR-10 is found, verified and downloaded by :mod:`esper_env.download`; a missing or corrupt copy raises
:class:`DatasetError` and is never replaced by synthetic data. ``dataset="synthetic"`` generates a small,
deterministic, learnable stand-in for tests and quick runs, with ``synthetic_num_classes`` classes.

Every dataset describes itself with a :class:`~esper_env.dataset_spec.DatasetSpec` (``Dataset.spec``): the
host builder and the reward read the class count, channels and chance accuracy from it.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from esper_env import download
from esper_env.config import EnvConfig
from esper_env.dataset_spec import DatasetSpec, balanced_chance
from esper_env.download import DatasetError

SPLIT_SEED = 0  # fixed: the 45k/5k train/validation split must be the same in every run and on every machine
VAL_FRACTION = 10  # one in ten official training images is held out for validation (5,000 of 50,000)
SYNTHETIC_SEED = 20_240_601  # fixed: synthetic data depends on its sizes only, never on global RNG state


@dataclass(frozen=True, eq=False)  # eq=False: identity comparison; field-wise == on tensors is ambiguous
class Dataset:
    """Device-resident images, shared read-only by all sub-envs of a process on that device."""

    spec: DatasetSpec  # classes, geometry, split sizes, chance accuracy and normalisation, as plain values
    train_x: torch.Tensor  # uint8 (N_train, C, H, W) on the device, contiguous NCHW
    train_y: torch.Tensor  # int64 (N_train,)
    val_x: torch.Tensor  # uint8 (N_val, C, H, W)
    val_y: torch.Tensor
    test_x: torch.Tensor  # uint8 (N_test, C, H, W)
    test_y: torch.Tensor
    mean: torch.Tensor  # float32 (C,) per-channel mean of train_x / 255, on the device (= spec.mean)
    std: torch.Tensor  # float32 (C,) (= spec.std)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def image_size(self) -> int:
        """Side length of the (square) images, in pixels."""
        return self.spec.image_size


_lock = threading.Lock()  # sub-envs built from several threads must still share one copy
_cache: dict[tuple, Dataset] = {}


def load_dataset(cfg: EnvConfig, device: torch.device) -> Dataset:
    """The dataset ``cfg`` asks for, on ``device``; the same object for the same source, sizes and device.

    Configs that differ only in ``val_images`` get distinct objects whose tensors share the same storage.
    """
    device = _canonical(torch.device(device))
    source = _source_key(cfg)
    with _lock:
        full = _cache.get((*source, device))
        if full is None:
            full = _build(cfg, device)
            _cache[(*source, device)] = full
        key = (*source, device, cfg.val_images)
        if key not in _cache:
            _cache[key] = _limit_val(full, cfg.val_images)
        return _cache[key]


def _canonical(device: torch.device) -> torch.device:
    # "cuda" and "cuda:0" are the same memory; keying both would load the data twice.
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _source_key(cfg: EnvConfig) -> tuple:
    if cfg.dataset == "synthetic":
        sizes = (cfg.synthetic_train_size, cfg.synthetic_val_size, cfg.synthetic_test_size)
        return ("synthetic", *sizes, cfg.synthetic_image_size, cfg.synthetic_num_classes)
    explicit = download.data_dir_from(cfg.data_dir)
    return ("cifar10", None if explicit is None else explicit.resolve(), download.cache_dir().resolve())


def _build(cfg: EnvConfig, device: torch.device) -> Dataset:
    if cfg.dataset == "synthetic":
        return _build_synthetic(cfg, device)
    if cfg.dataset == "cifar10":
        return _build_cifar10(cfg, device)
    raise ValueError(f"dataset={cfg.dataset!r}; expected 'cifar10' or 'synthetic'")


def _limit_val(full: Dataset, val_images: int | None) -> Dataset:
    available = full.val_x.shape[0]
    if val_images is None or val_images == available:
        return full
    if val_images > available:
        raise ValueError(
            f"val_images={val_images} exceeds the {available} validation images of {full.name}; "
            f"expected None or at most {available}"
        )
    # A prefix of a contiguous tensor is a contiguous view: no copy, same fixed subset every time.
    spec = dataclasses.replace(full.spec, val_size=val_images)
    return dataclasses.replace(full, spec=spec, val_x=full.val_x[:val_images], val_y=full.val_y[:val_images])


def split_indices(num_images: int) -> tuple[np.ndarray, np.ndarray]:
    """Training and validation indices into the official training set (sorted, disjoint, fixed seed)."""
    order = np.random.default_rng(SPLIT_SEED).permutation(num_images)
    num_val = num_images // VAL_FRACTION
    # Sorted so that each split keeps the official order; only membership comes from the permutation.
    return np.sort(order[num_val:]), np.sort(order[:num_val])


def _build_cifar10(cfg: EnvConfig, device: torch.device) -> Dataset:
    raw = download.find_cifar10(cfg.data_dir, cfg.download, download.CIFAR10)
    train_idx, val_idx = split_indices(len(raw.train_y))
    all_x = _to_nchw(raw.train_x, device)
    all_y = torch.from_numpy(raw.train_y).to(device)
    train_i = torch.from_numpy(train_idx).to(device)
    val_i = torch.from_numpy(val_idx).to(device)
    splits = (
        (all_x.index_select(0, train_i).contiguous(), all_y.index_select(0, train_i)),
        (all_x.index_select(0, val_i).contiguous(), all_y.index_select(0, val_i)),
        (_to_nchw(raw.test_x, device).contiguous(), torch.from_numpy(raw.test_y).to(device)),
    )
    # CIFAR-10's classes are balanced (5,000 training and 1,000 test images each).
    return _assemble("cifar10", download.NUM_CLASSES, balanced_chance(download.NUM_CLASSES), splits)


def _assemble(name: str, num_classes: int, chance: float,
              splits: tuple[tuple[torch.Tensor, torch.Tensor], ...]) -> Dataset:
    """A :class:`Dataset` and its spec from (images, labels) of the train, validation and test splits."""
    (train_x, train_y), (val_x, val_y), (test_x, test_y) = splits
    mean, std = channel_mean_std(train_x)
    spec = DatasetSpec(
        name=name, num_classes=num_classes, image_size=int(train_x.shape[-1]), channels=int(train_x.shape[1]),
        train_size=int(train_x.shape[0]), val_size=int(val_x.shape[0]), test_size=int(test_x.shape[0]),
        chance_accuracy=chance, mean=tuple(mean.tolist()), std=tuple(std.tolist()),  # sync: setup only
    )
    return Dataset(spec, train_x, train_y, val_x, val_y, test_x, test_y, mean, std)


def _to_nchw(x: np.ndarray, device: torch.device) -> torch.Tensor:
    # Upload NHWC as stored and transpose on the device, where the copy is cheap; callers make it contiguous.
    return torch.from_numpy(x).to(device).permute(0, 3, 1, 2)


def channel_mean_std(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and (population) std of uint8 ``images / 255``, as float32 (C,) on their device."""
    # Exact from 256-bin histograms in float64: no float32 round-off over ~46M pixels, no float copy of data.
    channels = images.shape[1]
    counts = torch.stack([torch.bincount(images[:, c].reshape(-1), minlength=256) for c in range(channels)])
    counts = counts.to(torch.float64)
    values = torch.arange(256, dtype=torch.float64, device=images.device) / 255.0
    total = counts.sum(dim=1)
    mean = (counts * values).sum(dim=1) / total
    var = (counts * (values - mean[:, None]) ** 2).sum(dim=1) / total
    return mean.to(torch.float32), var.sqrt().to(torch.float32)


def random_crop_flip(
    images: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor, pad: int = 4
) -> torch.Tensor:
    """Crop each image from its zero-padded copy at ``offsets`` and mirror it where ``flips`` is True.

    images: uint8 (B, 3, H, W); offsets: int64 (B, 2), (row, col) in [0, 2 * pad] (not checked: that would
    sync); flips: bool (B,). Returns a new uint8 (B, 3, H, W). Fixed shapes, no host sync and one gather, so
    it can run inside a CUDA graph.
    """
    b, c, h, w = images.shape
    if offsets.shape != (b, 2) or flips.shape != (b,):
        raise ValueError(
            f"offsets {tuple(offsets.shape)}, flips {tuple(flips.shape)}; expected ({b}, 2) and ({b},)"
        )
    padded = F.pad(images, (pad, pad, pad, pad))  # (B, C, H + 2p, W + 2p), zeros around
    width = w + 2 * pad
    rows = offsets[:, 0:1] + torch.arange(h, device=images.device)  # (B, H)
    cols_fwd = torch.arange(w, device=images.device)
    cols = offsets[:, 1:2] + torch.where(flips[:, None], cols_fwd.flip(0), cols_fwd)  # (B, W), maybe mirrored
    flat = (rows[:, :, None] * width + cols[:, None, :]).reshape(b, 1, h * w)  # index into each padded plane
    out = padded.reshape(b, c, -1).gather(2, flat.expand(b, c, h * w))
    return out.view(b, c, h, w)


def normalize(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 (B, C, H, W) -> float32 ``(images / 255 - mean) / std``, with mean/std (C,) per channel."""
    scale = (1.0 / (255.0 * std)).view(1, -1, 1, 1)
    shift = (mean / std).view(1, -1, 1, 1)
    # One multiply-add on the images instead of three elementwise passes.
    return torch.addcmul(-shift, images.to(torch.float32), scale)


def _build_synthetic(cfg: EnvConfig, device: torch.device) -> Dataset:
    size, num_classes = cfg.synthetic_image_size, cfg.synthetic_num_classes
    prototypes = _prototypes(size, num_classes)
    counts = (cfg.synthetic_train_size, cfg.synthetic_val_size, cfg.synthetic_test_size)
    splits = [_synthetic_split(prototypes, count, size, split) for split, count in enumerate(counts)]
    # Labels are dealt round-robin before shuffling, so classes are balanced to within one image.
    on_device = tuple((x.to(device), y.to(device)) for x, y in splits)
    return _assemble("synthetic", num_classes, balanced_chance(num_classes), on_device)


# Synthetic difficulty, tuned so the test's small CNN reaches ~65% validation accuracy after 5 epochs on 2048
# 16x16 images and ~73% after 15: well above chance (10% with 10 classes) but with room for seeds to help.
_PROTOTYPE_RES = 4  # pixels: class patterns are 4x4 random colours upsampled, i.e. low frequency
_DISTRACTOR = 0.8  # weight of a second, random class's pattern mixed into every image
_NOISE = 1.5  # std of per-pixel Gaussian noise, in prototype units
_CONTRAST = 36.0  # grey levels per prototype unit around mid-grey 128 (few pixels clip at 0 or 255)


def _prototypes(size: int, num_classes: int) -> torch.Tensor:
    """One smooth random colour pattern per class, on a canvas ``margin`` pixels larger on each side."""
    gen = torch.Generator().manual_seed(SYNTHETIC_SEED)
    low = torch.randn(num_classes, 3, _PROTOTYPE_RES, _PROTOTYPE_RES, generator=gen)
    canvas = size + 2 * _margin(size)
    return F.interpolate(low, size=(canvas, canvas), mode="bicubic", align_corners=False)


def _margin(size: int) -> int:
    return max(1, size // 8)  # pixels of random shift each way: objects move, classes stay recognisable


def _synthetic_split(prototypes: torch.Tensor, count: int, size: int, split: int) -> tuple[torch.Tensor, ...]:
    """``count`` balanced images: a shifted, maybe mirrored class pattern + a distractor + noise."""
    # One generator per split: the validation set does not change when the training set grows.
    gen = torch.Generator().manual_seed(SYNTHETIC_SEED + 1 + split)
    num_classes = prototypes.shape[0]
    labels = (torch.arange(count) % num_classes)[torch.randperm(count, generator=gen)]
    others = torch.randint(0, num_classes, (count,), generator=gen)
    offsets = torch.randint(0, 2 * _margin(size) + 1, (count, 2), generator=gen)
    flips = torch.rand(count, generator=gen) < 0.5
    signal = _crop_float(prototypes[labels], offsets, flips, size)
    distractor = _crop_float(prototypes[others], offsets.flip(1), ~flips, size)
    gain = 1.0 + 0.3 * torch.randn(count, 1, 1, 1, generator=gen)
    bias = 0.3 * torch.randn(count, 3, 1, 1, generator=gen)
    noise = _NOISE * torch.randn(count, 3, size, size, generator=gen)
    x = gain * (signal + _DISTRACTOR * distractor) + bias + noise
    return (128.0 + _CONTRAST * x).round().clamp(0, 255).to(torch.uint8), labels


def _crop_float(canvas: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor, size: int) -> torch.Tensor:
    rows = offsets[:, 0:1] + torch.arange(size)
    cols = offsets[:, 1:2] + torch.arange(size)
    cols = torch.where(flips[:, None], cols.flip(1), cols)
    n, c, _, width = canvas.shape
    picked = canvas.gather(2, rows[:, None, :, None].expand(n, c, size, width))
    return picked.gather(3, cols[:, None, None, :].expand(n, c, size, size))


__all__ = [
    "Dataset",
    "DatasetError",
    "DatasetSpec",
    "channel_mean_std",
    "load_dataset",
    "normalize",
    "random_crop_flip",
    "split_indices",
]
