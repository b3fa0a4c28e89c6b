"""A family-host sub-env's growth bookkeeping: where each blueprint may grow, what the network weighs, what
its training has cost, and the reward's price of both (``esper_env.costs``).

One :class:`GrowthLedger` per sub-env, kept by the vector env beside the sub-env's trainer. It reads the host's
architecture and its seeds' analytic counts (``FamilyHost.seed_counts``); it never touches tensors.

* **Where each blueprint may grow** (:meth:`GrowthLedger.growable`): a family blueprint in a slot whose stage
  stays within ``max_widths`` / ``max_blocks`` once it joins; the head's values past the family catalogue never.
* **Parameters** ``P_t``: the host's, plus each live seed's weighted by its alpha (what the function uses).
* **Training FLOPs** ``C_t``: each epoch adds ``3 x forward FLOPs x images per epoch`` of the host and of every
  live seed, incubating ones included (they train).
"""

from __future__ import annotations

import numpy as np

from esper_env import costs
from esper_env.architecture import forward_flops, param_count, widen_extra
from esper_env.blueprints import BLUEPRINTS, FAMILY_BLUEPRINTS
from esper_env.config import EnvConfig
from esper_env.dataset_spec import DatasetSpec
from esper_env.lifecycle import BLEND_CURVES, SlotState

TRAIN_PASSES = 3  # a training step costs about three forward passes (forward, and the backward's two products)


class GrowthLedger:
    """Counts and costs of one sub-env's growing family host (see the module docstring)."""

    def __init__(self, cfg: EnvConfig, spec: DatasetSpec, images_per_epoch: int) -> None:
        self.cfg, self.spec, self.images = cfg, spec, images_per_epoch
        count = (spec.num_classes, spec.channels)
        self.reference = costs.Reference(
            params=param_count(cfg.seedling, *count), epoch_flops=self._epoch_flops(self._flops(cfg.seedling)),
            max_params=param_count(cfg.largest, *count), max_epoch_flops=self._epoch_flops(self._flops(cfg.largest)))
        self.reset()

    def reset(self) -> None:
        self.train_flops, self.epochs, self.last_cost = 0.0, 0, 0.0

    def _flops(self, arch) -> int:
        return forward_flops(arch, self.spec.image_size, self.spec.num_classes, self.spec.channels)

    def _epoch_flops(self, forward: float) -> float:
        return TRAIN_PASSES * forward * self.images

    def after_epoch(self, model) -> None:
        """Add the epoch just trained: the host and every seed it held (``model``: the ``FamilyHost``)."""
        seeds = sum(model.seed_counts(k, self.spec.image_size)[1] for k in range(len(model.slots)))
        self.train_flops += self._epoch_flops(self._flops(model.arch) + seeds)
        self.epochs += 1

    def params(self, model, slots: tuple[SlotState, ...]) -> float:
        """``P_t``: the host's parameters plus every live seed's, weighted by its alpha."""
        host = param_count(model.arch, self.spec.num_classes, self.spec.channels)
        size = self.spec.image_size
        return host + sum(s.alpha * model.seed_counts(k, size)[0] for k, s in enumerate(slots) if s.has_seed)

    def cost(self, params: float) -> float:
        """``cost_t`` of ``esper_env.costs`` for the epochs counted so far."""
        return costs.cost(params, self.train_flops, self.epochs, self.reference, self.cfg.flops_price,
                          self.cfg.params_price)

    def charge(self, params: float) -> tuple[float, float]:
        """The cost before and after the step just finished (``cost_{t-1}``, ``cost_t``); remembers the latter."""
        previous, self.last_cost = self.last_cost, self.cost(params)
        return previous, self.last_cost

    def fractions(self, params: float) -> tuple[float, float]:
        return costs.fractions(params, self.train_flops, self.epochs, self.reference)

    def train_flops_reference(self) -> float:
        """What the seedling trained static would have spent over the epochs counted so far."""
        return self.epochs * self.reference.epoch_flops

    def growable(self, model) -> np.ndarray:
        """bool ``(num_slots, len(BLUEPRINTS))``: which blueprint head values may grow each slot's stage."""
        arch, cfg = model.arch, self.cfg
        out = np.zeros((len(arch.widths), len(BLUEPRINTS)), dtype=bool)
        for slot, (width, blocks) in enumerate(zip(arch.widths, arch.blocks, strict=True)):
            for b, blueprint in enumerate(FAMILY_BLUEPRINTS):
                if blueprint.name == "deepen":
                    out[slot, b] = blocks < cfg.max_blocks[slot]
                else:
                    out[slot, b] = width + widen_extra(width, blueprint.name) <= cfg.max_widths[slot]
        return out

    def seed_table(self, model, slots: tuple[SlotState, ...]) -> np.ndarray:
        """``param_table[slot, blueprint, gated]`` as the small host's, holding each live seed's real size at
        its blueprint (the family's seeds' sizes depend on the stage they grow), so that ``episode.seed_params``
        and the observation read the family's seeds right; 0 elsewhere."""
        table = np.zeros((len(slots), len(BLUEPRINTS), 2))
        for k, state in enumerate(slots):
            if state.has_seed:
                table[k, state.blueprint, :] = model.seed_counts(k, self.spec.image_size)[0]
        return table

    def blend_mask(self, model) -> np.ndarray:
        """bool ``(num_slots, len(BLUEPRINTS), len(BLEND_CURVES))``: :meth:`growable` with the linear and cosine
        blends (the family host has no gated blend)."""
        curves = np.array([curve != "gated" for curve in BLEND_CURVES])
        return self.growable(model)[:, :, None] & curves


def growth_info(ledgers: list[GrowthLedger], params: list[float]) -> dict[str, np.ndarray]:
    """The family host's counts as vector-info keys, set for every sub-env: ``params`` (``P_t``), ``train_flops``
    (``C_t``), and their references (the seedling's parameters, and its training FLOPs over as many epochs)."""
    n = len(ledgers)
    columns = {
        "params": np.array(params, dtype=np.float64),
        "train_flops": np.array([g.train_flops for g in ledgers], dtype=np.float64),
        "params_reference": np.array([g.reference.params for g in ledgers], dtype=np.float64),
        "train_flops_reference": np.array([g.train_flops_reference() for g in ledgers], dtype=np.float64),
    }
    return {**columns, **{f"_{key}": np.ones(n, dtype=bool) for key in columns}}
