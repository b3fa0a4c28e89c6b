"""The host CNN with slots, and the forward maths of a slot in each lifecycle stage.

The host is a stack of blocks (conv3x3 without bias -> BatchNorm -> ReLU -> MaxPool2), global average pooling
and a linear classifier over the dataset's classes; :func:`build_host` is the one place a host is made, from the
env config and the dataset's :class:`~esper_env.dataset_spec.DatasetSpec`. A :class:`SlotModule` sits after the
pool of chosen blocks and holds at most one seed. With host features ``h``, the seed reads
``x = lerp(h.detach(), h, u)`` (value ``h``; gradient to ``h`` scaled by ``u``), produces ``s = seed(x)``, and
the slot outputs::

    h + a * (s - h) + t * (s - s.detach())

``a`` is the blending amplitude (alpha, times the learned per-sample gate for the gated blend), ``t`` the
straight-through flag and ``u`` the upstream-gradient flag. Each lifecycle stage is one setting of the three
(see :func:`mode_flags`):

=========  =========  ===  ===  ==================================================================
mode       a          t    u    meaning
=========  =========  ===  ===  ==================================================================
INCUBATE   0          1    0    value exactly ``h``; the seed learns from dL/dh; host gradients are
                                the seedless model's
BLEND      alpha      0    0    ``h + alpha * (s(h.detach()) - h)``: host's direct path scaled by 1 - alpha
FULL       1          0    1    ``s(h)``: upstream host layers learn *through* the seed
=========  =========  ===  ===  ==================================================================

All three are device tensors, so moving a seed from stage to stage does not change the computation graph; only
planting or removing a seed does, and one shortcut: a slot the caller marks ``full`` (its controls are exactly
FULL's and it has no gate) outputs ``s(h)`` itself, without the mixing arithmetic that would leave that value
unchanged (the trainer marks them from the epoch's controls; the engine re-captures when the set changes). A
family seed is FULL for its whole life (``lifecycle.blends_at_birth``), so on the growth task a live seed trains
at the cost of the network it grows. This module owns weights and maths only; it never decides what is legal
(that is ``lifecycle``).

Validation stacks K configurations (``alphas`` of shape ``(num_slots, K)``): the output holds K copies of the
batch's logits, configuration-major, and everything before the first seed that reads an amplitude runs once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from esper_env import family
from esper_env.config import EnvConfig
from esper_env.dataset_spec import DatasetSpec
from esper_env.lifecycle import ForwardMode
from esper_env.seeds import BlendGate, build_seed

if TYPE_CHECKING:
    from esper_env.family_host import FamilyHost


class HostBlock(nn.Sequential):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)
        )


def mode_flags(mode: ForwardMode) -> tuple[float, float]:
    """The (straight-through, upstream-gradient) flags of a forward mode; see the module docstring."""
    return (1.0 if mode == ForwardMode.INCUBATE else 0.0, 1.0 if mode == ForwardMode.FULL else 0.0)


def full_slots(controls: list[float]) -> frozenset[int]:
    """The slots whose controls (as :func:`slot_controls` lays them out) are exactly FULL's: alpha 1, no
    straight-through, upstream gradients. Their seeds may run without the mixing arithmetic (``host``)."""
    n = len(controls) // 3
    return frozenset(k for k in range(n) if (controls[k], controls[n + k], controls[2 * n + k]) == (1.0, 0.0, 1.0))


def slot_controls(modes: tuple[ForwardMode, ...], alphas: tuple[float, ...]) -> list[float]:
    """The per-slot control values of an epoch: blending amplitude, then straight-through and upstream flags."""
    blending = [a if m in (ForwardMode.BLEND, ForwardMode.FULL) else 0.0 for m, a in zip(modes, alphas, strict=True)]
    flags = [mode_flags(m) for m in modes]
    return blending + [f[0] for f in flags] + [f[1] for f in flags]


class SlotModule(nn.Module):
    """An injection point between two host blocks; holds at most one seed and its optional blending gate."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels
        self.seed: nn.Module | None = None
        self.gate: BlendGate | None = None

    def plant(self, seed: nn.Module, gate: BlendGate | None) -> None:
        self.seed, self.gate = seed, gate

    def clear(self) -> None:
        """Drop the seed and its gate; their memory is freed once no optimizer or graph holds them."""
        self.seed, self.gate = None, None

    def forward(self, h: torch.Tensor, alpha: torch.Tensor, straight: torch.Tensor, upstream: torch.Tensor,
                full: bool, stack: Stacker) -> torch.Tensor:
        """``alpha``: 0-dim, or ``(K,)`` for K stacked configurations; ``straight`` and ``upstream``: 0-dim
        flags. Pass them in ``h``'s dtype: a cast would cost a kernel per call. ``full``: the caller knows the
        controls are FULL's (module docstring). ``stack``: the host forward's :class:`Stacker`; ``h`` may hold one
        configuration's batch, which the output stacks (the seed runs on it once)."""
        if self.seed is None:
            return h
        if full and self.gate is None:
            return self.seed(h)
        grad = torch.is_grad_enabled()
        x = torch.lerp(h.detach(), h, upstream) if grad else h
        s = self.seed(x)
        gate = self.gate(x) if self.gate is not None else None
        h, s, gate = stack(h), stack(s), stack(gate) if gate is not None else None
        a = _per_sample(alpha, h.shape[0])
        if gate is not None:
            a = a * gate
        out = torch.addcmul(h, a, s - h)
        return torch.addcmul(out, straight, s - s.detach()) if grad else out


class Stacker:
    """Repeats a tensor that holds one batch (``batch`` images) into ``configs`` stacked copies, configuration-major,
    at the point where it starts to differ between configurations; a tensor already stacked passes through. A
    host's forward makes one, so that what precedes the first amplitude runs once for all configurations."""

    def __init__(self, batch: int, configs: int) -> None:
        self.batch, self.configs = batch, configs

    @classmethod
    def of(cls, x: torch.Tensor, alphas: torch.Tensor) -> Stacker:
        """For a forward of ``x`` under ``alphas`` ``(num_slots,)`` (one configuration) or ``(num_slots, K)``."""
        return cls(x.shape[0], alphas.shape[1] if alphas.dim() == 2 else 1)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        if self.configs == 1 or t.shape[0] != self.batch:
            return t
        return torch.cat([t] * self.configs)  # keeps channels-last (``repeat`` would not)


def _per_sample(alpha: torch.Tensor, batch: int) -> torch.Tensor:
    """Expand ``(K,)`` per-configuration alphas to ``(batch, 1, 1, 1)`` per-sample factors (0-dim stays)."""
    if alpha.dim() == 0:
        return alpha
    return alpha.repeat_interleave(batch // alpha.shape[0]).view(batch, 1, 1, 1)


class HostModel(nn.Module):
    """Host blocks with slots after chosen blocks, then global average pooling and a linear classifier.

    Build it with :func:`build_host`, which reads the widths and slots from the config and the input channels
    and class count from the dataset's spec.
    """

    def __init__(self, widths: Sequence[int], slot_blocks: Sequence[int], *, in_channels: int,
                 num_classes: int) -> None:
        super().__init__()
        channels = [in_channels, *widths]
        self.blocks = nn.ModuleList(HostBlock(channels[i], channels[i + 1]) for i in range(len(widths)))
        self.slot_blocks = tuple(slot_blocks)
        self.slots = nn.ModuleList(SlotModule(widths[b]) for b in self.slot_blocks)
        self.classifier = nn.Linear(widths[-1], num_classes)
        self._slot_after = {block: i for i, block in enumerate(self.slot_blocks)}

    def forward(self, x: torch.Tensor, alphas: torch.Tensor, flags: torch.Tensor,
                skip: tuple[bool, ...] = (), full: frozenset[int] = frozenset()) -> torch.Tensor:
        """``alphas``: ``(num_slots,)``, or ``(num_slots, K)``: then the logits stack K configurations of ``x``'s
        batch, configuration-major; ``flags``: ``(2, num_slots)`` straight-through and upstream-gradient flags
        (see the module docstring). Slots marked in ``skip`` output ``h`` without running their seed: the caller
        knows their alpha is 0 and no gradient is needed. Slots in ``full`` run their seed alone: the caller
        knows their controls are FULL's (one configuration only: stacked ones differ in amplitude)."""
        h, stack = x, Stacker.of(x, alphas)
        full = full if stack.configs == 1 else frozenset()
        for index, block in enumerate(self.blocks):
            h = block(h)
            slot = self._slot_after.get(index)
            if slot is not None and not (skip and skip[slot]):
                h = self.slots[slot](h, alphas[slot], flags[0, slot], flags[1, slot], slot in full, stack)
        return stack(self.classifier(F.adaptive_avg_pool2d(h, 1).flatten(1)))

    def host_parameters(self) -> list[nn.Parameter]:
        return [*self.blocks.parameters(), *self.classifier.parameters()]

    def host_buffers(self) -> list[torch.Tensor]:
        return list(self.blocks.buffers())

    def plant(self, slot: int, blueprint: int, gated: bool) -> list[nn.Parameter]:
        """Build a fresh seed (and gate) in ``slot`` on the host's device; return the new parameters.

        Weights come from torch's global generator: callers seed it (``sub-env`` generators fork it).
        """
        device = self.classifier.weight.device
        module = self.slots[slot]
        seed = build_seed(blueprint, module.channels)
        gate = BlendGate(module.channels) if gated else None
        seed.to(device)
        if gate is not None:
            gate.to(device)
        module.plant(seed, gate)
        return seed_parameters(module)


def seed_parameters(module: SlotModule) -> list[nn.Parameter]:
    parts = [m for m in (module.seed, module.gate) if m is not None]
    return [p for m in parts for p in m.parameters()]


def build_host(cfg: EnvConfig, spec: DatasetSpec) -> HostModel | FamilyHost:
    """A fresh seedless host for ``cfg`` on data described by ``spec``, on torch's current default device.

    Every host in the package, its benchmarks and tests is made here, so the host family is chosen from ``cfg``
    in this one place (``cfg.host``): the small host of this module, or the growable family's seedling
    (``family_host.FamilyHost``, architecture ``cfg.start``). Both have the same interface
    (``forward(x, alphas, flags, skip)``, ``slots``, ``host_parameters()``, ``host_buffers()``, ``plant()``);
    the family's also ``join()``. Weights come from torch's global generator: callers seed it.
    """
    if cfg.host == "family":
        from esper_env.family_host import FamilyHost  # it builds on this module's slot maths

        return FamilyHost(cfg.start, num_classes=spec.num_classes, in_channels=spec.channels)
    return HostModel(cfg.host_widths, cfg.slot_block_indices, in_channels=spec.channels,
                     num_classes=spec.num_classes)


def host_param_count(cfg: EnvConfig, spec: DatasetSpec) -> int:
    """Parameters of the fresh host alone (what the seed-parameter penalty is relative to), without memory."""
    if cfg.host == "family":
        return family.param_count(cfg.start, spec.num_classes, spec.channels)
    with torch.device("meta"):
        model = build_host(cfg, spec)
    return sum(p.numel() for p in model.host_parameters())
