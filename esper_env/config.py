"""The environment's one configuration object.

Every keyword argument that ``gym.make`` / ``gym.make_vec`` accepts is a field of :class:`EnvConfig`; the env
builds the config with :func:`EnvConfig.from_kwargs`, which rejects unknown keys, wrong types and values out of
range with a message that names the field. Values are plain JSON types so that ``env.spec.to_json()`` works.
Pure Python: no torch here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from esper_env import conditions
from esper_env.architecture import Architecture
from esper_env.config_types import check_types, plain_numbers, plain_value

REWARD_MODES = ("accuracy", "contribution", "sparse")
AUTORESET_MODES = ("NextStep", "SameStep", "Disabled")
EXECUTION_MODES = ("auto", "eager", "graph")
PRECISIONS = ("auto", "float32", "bfloat16")
DATASETS = ("cifar10", "synthetic")
HOSTS = ("small", "family")
LR_SCHEDULES = ("cosine", "wsd")

# Potential of each lifecycle stage for the optional PBRS term, in the order of ``lifecycle.Stage``:
# DORMANT, GERMINATED, TRAINING, BLENDING, HOLDING, FOSSILIZED, PRUNED, EMBARGOED.
DEFAULT_STAGE_POTENTIALS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.0, 0.0)


@dataclass(frozen=True)
class EnvConfig:
    """Configuration of an Esper environment (single or vector face)."""

    # --- data -------------------------------------------------------------------------------------------
    dataset: str = "cifar10"
    """Which images: ``"cifar10"`` (real, see ``data_dir``) or ``"synthetic"`` (generated, no download)."""
    data_dir: str | None = None
    """Folder with our ``.npz`` shards or torchvision's ``cifar-10-batches-py``; default ``$ESPER_DATA_DIR``."""
    download: bool = True
    """Whether a missing CIFAR-10 may be downloaded into the per-user cache."""
    train_images_per_epoch: int | None = None
    """Training images per step (a fresh random subset each epoch); None = the whole 45k training split."""
    val_images: int | None = None
    """Validation images used for reward and observation (a fixed subset); None = all 5k."""
    report_test_accuracy: bool = False
    """Measure the host on the official test set at episode end (``info["test_accuracy"]``)."""
    test_flip: bool = False
    """Score each test image by the mean of the logits of the image and of its horizontal mirror (flip
    test-time augmentation) in ``info["test_accuracy"]``; validation, reward and observation never use it."""
    synthetic_train_size: int = 2048
    """Synthetic dataset: training images (count)."""
    synthetic_val_size: int = 512
    """Synthetic dataset: validation images (count)."""
    synthetic_test_size: int = 512
    """Synthetic dataset: test images (count)."""
    synthetic_image_size: int = 16
    """Synthetic dataset: image side length (pixels)."""
    synthetic_num_classes: int = 10
    """Synthetic dataset: number of classes (count, >= 2); sets the classifier's width and the chance level."""
    condition: str = "full"
    """Hidden training condition (``esper_env.conditions``): a catalogue name (``"full"``, ``"pool15k"``,
    ``"pool5k"``, ``"noise40"``, ``"pool15k-noise20"``, ``"classes2"``, ``"classes5"``, ``"res16"``, ``"res8"``,
    ``"pool2k"``, ``"noise60"``, ``"pool5k-noise40"``) fixes it; ``"mixture"`` draws one uniformly per episode
    from the reset seed, ``"mixture:full,classes2"`` one of those listed. Never in the observation;
    ``info["condition"]`` names it."""

    # --- host and its training recipe -------------------------------------------------------------------
    host: str = "small"
    """Which host: ``"small"`` (conv blocks of ``host_widths``, seeds that stay in their slots) or ``"family"``
    (the growable family of ``esper_env.family``: a seedling grown in width and depth, task version 2)."""
    family_widths: tuple[int, ...] = (16, 32, 32)
    """Family host: the seedling's channels per stage (one slot per stage)."""
    family_blocks: tuple[int, ...] = (0, 0, 0)
    """Family host: the seedling's residual blocks per stage."""
    start_widths: tuple[int, ...] | None = None
    """Family host: start from these channels per stage instead of the seedling's (a static arm of another size);
    the costs stay relative to the seedling."""
    start_blocks: tuple[int, ...] | None = None
    """Family host: start from these residual blocks per stage instead of the seedling's."""
    family_stem: int = 24
    """Family host: channels of the full-resolution stem conv (fixed for the episode)."""
    max_widths: tuple[int, ...] = (64, 256, 256)
    """Family host: the widest each stage may grow (channels); a widen that would pass it is masked."""
    max_blocks: tuple[int, ...] = (0, 1, 1)
    """Family host: the deepest each stage may grow (residual blocks); a deepen that would pass it is masked."""
    host_widths: tuple[int, ...] = (8, 16, 32)
    """Output channels of each host block (conv3x3 -> BatchNorm -> ReLU -> MaxPool2)."""
    slot_blocks: tuple[int, ...] | None = None
    """Indices of the blocks after whose pool a slot sits; None = after every block."""
    batch_size: int = 512
    """Training batch (images)."""
    eval_batch_size: int = 1000
    """Validation chunk (images); the host stacks it once per counterfactual configuration where they differ."""
    host_lr: float = 0.6
    """Peak learning rate of the host (over the episode as ``lr_schedule`` says); the best of 0.05..0.6
    measured host-alone on CIFAR-10 (``benchmarks/results/host_alone-*.json``)."""
    seed_lr: float = 0.1
    """Peak learning rate of every seed (same schedule as the host's); not tuned yet."""
    momentum: float = 0.9
    """SGD momentum (Nesterov) for host and seeds."""
    lr_schedule: str = "cosine"
    """Learning rates over the episode (``esper_env.schedule``): ``"cosine"`` (annealed from the peak to 0, set
    per epoch) or ``"wsd"`` (warm-up, stable, decay, set per batch: a linear warm-up over the first epoch, the
    peak, then a linear decay to 0 at the last batch over the last 30% of the batches; a module grown while the
    rate is stable loses no high-rate time by arriving late)."""
    label_smoothing: float = 0.0
    """Label smoothing of the training loss (fraction of the target spread over all classes)."""
    crop_pad: int = 4
    """Random-crop augmentation: zero padding before the crop (pixels; 0 = no translation)."""
    weight_decay: float = 5e-4
    """L2 weight decay of the host (seeds use none)."""
    ema_epochs: float = 0.0
    """Validation and test read an exponential moving average of the weights with this time constant (epochs;
    ``esper_env.averaging``: it cuts the step-to-step noise of the validation accuracy); 0 reads the raw
    weights."""

    # --- episode and lifecycle --------------------------------------------------------------------------
    max_epochs: int = 25
    """Host epochs per episode = steps per episode; the episode is truncated after the last."""
    auto_advance: bool = True
    """Advance GERMINATED->TRAINING->BLENDING->HOLDING by timers; False = the ADVANCE op does it."""
    min_training_epochs: int = 3
    """Epochs a seed incubates in TRAINING before it may blend (epochs)."""
    max_holding_epochs: int = 5
    """Epochs a seed may wait in HOLDING before it is pruned automatically (epochs)."""
    embargo_epochs: int = 3
    """Epochs a slot stays EMBARGOED after a prune before it is DORMANT again (epochs)."""
    min_prune_age: int = 1
    """A seed may be pruned once it is this many epochs old (epochs)."""
    fossilize_min_contribution: float = 0.0
    """FOSSILIZE needs a measured counterfactual contribution at least this large (percentage points)."""
    max_seeds: int | None = None
    """Bound on live + fossilized seeds; None = number of slots."""
    one_seed_incubating: bool = True
    """Forbid GERMINATE while another seed is GERMINATED or TRAINING."""

    # --- reward -----------------------------------------------------------------------------------------
    reward_mode: str = "accuracy"
    """``"accuracy"`` (dense accuracy delta), ``"contribution"`` (counterfactual attribution) or ``"sparse"``."""
    param_penalty: float = 0.01
    """lambda_param: reward cost of seed parameters, per host-size worth of parameters (unitless)."""
    param_budget: int | None = None
    """Seed parameters the reward allows before ``over_budget_penalty`` applies too; None = no budget."""
    over_budget_penalty: float = 1.0
    """Reward cost of seed parameters above ``param_budget``, per host-size worth (on top of ``param_penalty``).

    A linear price cannot ask for "the best accuracy at no more than B parameters": a bigger seed that gains
    more outbids a small one at every price where either beats no growth (measured on real CIFAR-10 in
    docs/experiments/2026-11-27-plans-at-the-heuristics-size.md). The hinge makes every parameter past B cost a
    host-size worth at 1.0 (25 pp of return for 1,400 parameters over on a 5.5k host), so within the budget the
    price is ``param_penalty`` alone."""
    flops_price: float = 0.0
    """Reward cost per doubling of the episode's training FLOPs over the static seedling's (accuracy fraction,
    family host only; ``esper_env.costs``): 0.02 charges 2 points of accuracy for twice the seedling's compute."""
    params_price: float = 0.0
    """Reward cost per doubling of the network's parameters over the seedling's (accuracy fraction, family host
    only; ``esper_env.costs``)."""
    param_budget_mask: bool = False
    """True: a GERMINATE whose seed would take the seed parameters past ``param_budget`` is masked (a hard
    budget); needs ``param_budget``.

    Seeds count at full size (alpha 1, gate included), and so does the candidate: ``blueprint_mask`` allows a
    blueprint whose ungated seed fits, ``blend_mask`` the gated blend only where the seed fits with its gate, so
    the seed parameters never pass the budget (and the ``over_budget_penalty`` hinge never fires)."""
    pbrs_weight: float = 0.0
    """Weight of the potential-based shaping term over lifecycle stages (0 = off)."""
    pbrs_gamma: float = 0.995
    """Discount used by the shaping term; an agent must use the same gamma when ``pbrs_weight`` != 0."""
    stage_potentials: tuple[float, ...] = DEFAULT_STAGE_POTENTIALS
    """Potential of each stage (8 values, in ``Stage`` order) for the shaping term."""
    op_cost: float = 0.0
    """Reward cost of every executed non-WAIT op."""
    invalid_action_penalty: float = 0.0
    """Reward cost of an action the masks forbid (it is executed as WAIT)."""
    rollback_penalty: float = 1.0
    """Reward on the transition where the governor rolls the host back (subtracted)."""
    sparse_scale: float = 1.0
    """Sparse mode: multiplier of the final score before clipping."""
    sparse_clip: float = 1.0
    """Sparse mode: the scaled final reward is clipped to [-sparse_clip, sparse_clip]; must be at least
    ``sparse_scale`` (with ``reward_mode="sparse"``), so that the clip bounds only the parameter cost's side and
    any two final accuracies keep their order (a smaller clip would pay 1.0 for 40% and for 78% alike)."""

    # --- governor ---------------------------------------------------------------------------------------
    divergence_loss: float = 20.0
    """A training or validation loss above this (nats) counts as divergence and triggers a rollback."""
    collapse_patience: int = 3
    """Consecutive epochs (epochs) a host must look collapsed to chance before the governor rolls it back, as
    it does a diverged one; 0 turns collapse detection off. Collapsed: validation accuracy at chance (see
    ``collapse_accuracy_margin``) after the episode's best was ``collapse_peak`` above it, or at chance with the
    validation loss stuck at ln(number of classes), the loss of a constant prediction, while the training loss
    has stopped falling (a dead network, not a slow start; ``esper_env.episode.collapsed``)."""
    collapse_accuracy_margin: float = 0.02
    """Validation accuracy at most this far above chance (fraction) counts as at chance for collapse detection."""
    collapse_peak: float = 0.2
    """The accuracy collapse rule needs the episode's best earlier validation accuracy at least this far above
    chance (fraction; 30% on 10 classes): a host that has not learned yet has not collapsed, and a small host's
    noisy first epochs (tiny validation sets swing by several points) do not count as having learned."""
    collapse_loss_tolerance: float = 0.01
    """A validation loss within this of ln(number of classes) (nats) counts as stuck for collapse detection, and a
    training loss that fell by no more than this since the previous epoch as no longer falling."""
    snapshot_interval: int = 3
    """Epochs between refreshes of the host's last-good snapshot (epochs)."""

    # --- execution --------------------------------------------------------------------------------------
    device: str = "auto"
    """Torch device for all sub-envs: ``"auto"`` (cuda if available), ``"cpu"``, ``"cuda"``, ``"cuda:1"``..."""
    devices: tuple[str, ...] | None = None
    """Spread sub-envs round-robin over these devices (overrides ``device``)."""
    execution: str = "auto"
    """``"eager"``, ``"graph"`` (CUDA graphs on per-sub-env streams) or ``"auto"`` (graph on CUDA)."""
    precision: str = "auto"
    """Autocast dtype of host training: ``"float32"``, ``"bfloat16"`` or ``"auto"`` (bf16 on CUDA)."""
    autoreset_mode: str = "NextStep"
    """Vector face only: Gymnasium autoreset mode ``"NextStep"``, ``"SameStep"`` or ``"Disabled"``."""

    def __post_init__(self) -> None:
        plain_numbers(self)
        _validate(self)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EnvConfig:
        """Build a config from ``gym.make`` keyword arguments, converting JSON lists to tuples."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown Esper env argument(s) {unknown}; expected some of {sorted(known)}")
        converted = {key: _tuple_if_list(value) for key, value in kwargs.items()}
        return cls(**converted)

    @property
    def slot_block_indices(self) -> tuple[int, ...]:
        """The blocks after which a slot sits, in forward order."""
        if self.slot_blocks is None:
            return tuple(range(len(self.host_widths)))
        return self.slot_blocks

    @property
    def num_slots(self) -> int:
        return len(self.family_widths) if self.host == "family" else len(self.slot_block_indices)

    @property
    def seedling(self) -> Architecture:
        """The family host's starting architecture."""
        return Architecture(self.family_widths, self.family_blocks, self.family_stem)

    @property
    def start(self) -> Architecture:
        """The family host's architecture at reset: the seedling's, or ``start_widths``/``start_blocks``."""
        return Architecture(self.start_widths or self.family_widths, self.start_blocks or self.family_blocks,
                            self.family_stem)

    @property
    def largest(self) -> Architecture:
        """The largest architecture the family host may grow to."""
        return Architecture(self.max_widths, self.max_blocks, self.family_stem)

    @property
    def seed_limit(self) -> int:
        """The effective bound on live + fossilized seeds."""
        return self.num_slots if self.max_seeds is None else self.max_seeds


def _tuple_if_list(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


_INT_MIN = {
    "synthetic_train_size": 64,
    "synthetic_val_size": 16,
    "synthetic_test_size": 16,
    "synthetic_image_size": 8,
    "synthetic_num_classes": 2,
    "batch_size": 1,
    "eval_batch_size": 1,
    "max_epochs": 1,
    "min_training_epochs": 0,
    "max_holding_epochs": 1,
    "embargo_epochs": 0,
    "min_prune_age": 0,
    "snapshot_interval": 1,
    "collapse_patience": 0,
    "crop_pad": 0,
    "family_stem": 1,
}
_CHOICES = {
    "dataset": DATASETS,
    "reward_mode": REWARD_MODES,
    "autoreset_mode": AUTORESET_MODES,
    "execution": EXECUTION_MODES,
    "precision": PRECISIONS,
    "host": HOSTS,
    "lr_schedule": LR_SCHEDULES,
}
_NON_NEGATIVE = ("flops_price", "params_price",
                 "param_penalty", "over_budget_penalty", "op_cost", "invalid_action_penalty", "rollback_penalty",
                 "weight_decay", "collapse_loss_tolerance", "ema_epochs")
_POSITIVE = ("host_lr", "seed_lr", "divergence_loss", "sparse_scale", "sparse_clip")
_FRACTIONS = ("collapse_accuracy_margin", "collapse_peak", "label_smoothing")


def _validate(cfg: EnvConfig) -> None:
    check_types(cfg)
    for name, low in _INT_MIN.items():
        _require(cfg, name, getattr(cfg, name) >= low, f"an integer >= {low}")
    for name, choices in _CHOICES.items():
        _require(cfg, name, getattr(cfg, name) in choices, f"one of {choices}")
    for name in _NON_NEGATIVE:
        _require(cfg, name, _finite(getattr(cfg, name)) and getattr(cfg, name) >= 0, "a finite float >= 0")
    for name in _POSITIVE:
        _require(cfg, name, _finite(getattr(cfg, name)) and getattr(cfg, name) > 0, "a finite float > 0")
    for name in _FRACTIONS:
        _require(cfg, name, _finite(getattr(cfg, name)) and 0.0 <= getattr(cfg, name) <= 1.0, "a float in [0, 1]")
    _require(cfg, "momentum", _finite(cfg.momentum) and 0.0 <= cfg.momentum < 1.0, "a float in [0, 1)")
    _require(cfg, "pbrs_gamma", _finite(cfg.pbrs_gamma) and 0.0 < cfg.pbrs_gamma <= 1.0, "a float in (0, 1]")
    _require(cfg, "pbrs_weight", _finite(cfg.pbrs_weight), "a finite float")
    _require(cfg, "fossilize_min_contribution", _finite(cfg.fossilize_min_contribution), "a finite float")
    _require(cfg, "host_widths", len(cfg.host_widths) >= 1 and all(w >= 1 for w in cfg.host_widths),
             "a non-empty list of positive channel counts")
    blocks = cfg.slot_block_indices
    _require(cfg, "slot_blocks", len(blocks) >= 1 and len(set(blocks)) == len(blocks)
             and all(0 <= b < len(cfg.host_widths) for b in blocks) and list(blocks) == sorted(blocks),
             f"distinct increasing block indices in [0, {len(cfg.host_widths)})")
    _require(cfg, "param_budget", cfg.param_budget is None or cfg.param_budget >= 0, "None or an integer >= 0")
    _require(cfg, "condition", conditions.is_valid(cfg.condition), conditions.ACCEPTED)
    _check_budget_mask(cfg)
    _check_sparse_clip(cfg)
    _check_family(cfg)
    _require(cfg, "max_seeds", cfg.max_seeds is None or 1 <= cfg.max_seeds <= cfg.num_slots,
             f"None or an integer in [1, {cfg.num_slots}]")
    _require(cfg, "stage_potentials", len(cfg.stage_potentials) == 8
             and all(_finite(p) for p in cfg.stage_potentials), "8 finite floats, one per stage")
    for name in ("train_images_per_epoch", "val_images"):
        value = getattr(cfg, name)
        _require(cfg, name, value is None or value >= 1, "None or an integer >= 1")
    _require(cfg, "devices", cfg.devices is None or len(cfg.devices) >= 1, "None or a non-empty list of devices")


def _check_family(cfg: EnvConfig) -> None:
    # The seedling's widths set the stage count; each other field is checked against them and named when wrong.
    _require(cfg, "family_widths", len(cfg.family_widths) >= 1 and all(w >= 1 for w in cfg.family_widths),
             "a non-empty list of positive channel counts, one per stage")
    stages = len(cfg.family_widths)
    for name in ("family_blocks", "max_widths", "max_blocks"):
        value = getattr(cfg, name)
        _require(cfg, name, len(value) == stages and all(v >= (1 if "widths" in name else 0) for v in value),
                 f"{stages} {'positive channel' if 'widths' in name else 'non-negative block'} counts, one per stage")
    for name in ("start_widths", "start_blocks"):
        value = getattr(cfg, name)
        _require(cfg, name, value is None or len(value) == stages, f"None or {stages} counts, one per stage")
    pairs = (("family_widths", "max_widths"), ("family_blocks", "max_blocks"), ("start_widths", "max_widths"),
             ("start_blocks", "max_blocks"))
    for small, large in ((a, b) for a, b in pairs if getattr(cfg, a) is not None):
        _require(cfg, small, all(a <= b for a, b in zip(getattr(cfg, small), getattr(cfg, large), strict=True)),
                 f"at most {large}={getattr(cfg, large)!r} in every stage")
    if cfg.host != "family":
        for name in ("flops_price", "params_price"):
            _require(cfg, name, getattr(cfg, name) == 0.0, "0.0 unless host='family' (only it counts FLOPs)")
    elif cfg.param_budget is not None or cfg.param_budget_mask:
        raise ValueError(f"param_budget={cfg.param_budget!r} with host='family'; expected None: the family host "
                         "prices its size with params_price")


def _check_budget_mask(cfg: EnvConfig) -> None:
    # Not a range of one field but a pair: the mask has nothing to enforce without a budget.
    if cfg.param_budget_mask and cfg.param_budget is None:
        raise ValueError("param_budget_mask=True needs a budget, but param_budget=None; expected param_budget "
                         "set to an integer >= 0, or param_budget_mask=False")


def _check_sparse_clip(cfg: EnvConfig) -> None:
    # The sparse reward is clip(sparse_scale * (A_T - cost)) with A_T <= 1: a clip below the scale would pay the
    # same for every final accuracy above sparse_clip / sparse_scale and hide which run was better.
    if cfg.reward_mode == "sparse" and cfg.sparse_clip < cfg.sparse_scale:
        raise ValueError(f"sparse_clip={cfg.sparse_clip!r} is below sparse_scale={cfg.sparse_scale!r}: the sparse "
                         "reward would saturate for final accuracies in [0, 1] and lose their order; expected "
                         "sparse_clip >= sparse_scale")


def _finite(value: float) -> bool:
    """``math.isfinite`` that also takes ints too large for a float (they are not finite floats)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _require(cfg: EnvConfig, name: str, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"{name}={getattr(cfg, name)!r} is out of range; expected {expected}")


__all__ = ["EnvConfig", "REWARD_MODES", "AUTORESET_MODES", "DEFAULT_STAGE_POTENTIALS", "plain_value"]
