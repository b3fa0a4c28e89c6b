"""The host CNN with slots, and the forward maths of a slot in each lifecycle stage.

The host is a stack of blocks (conv3x3 without bias -> BatchNorm -> ReLU -> MaxPool2), global average pooling
and a linear classifier. A :class:`SlotModule` sits after the pool of chosen blocks and holds at most one seed.
How the slot combines host features ``h`` with its seed's output ``s`` depends only on the seed's
:class:`~esper_env.lifecycle.ForwardMode` (a Python value: changing it changes the graph) and on alpha (a
device tensor: changing it never does):

=========  ======================================  =================================================
mode       output                                  gradients
=========  ======================================  =================================================
OFF        ``h``                                   host only
INCUBATE   ``h + (s(h.detach()) - s.detach())``    value is exactly ``h``; the seed learns from dL/dh;
                                                   the host's gradients equal the seedless model's
BLEND      ``h + a * (s(h.detach()) - h)``         host's direct path scaled by ``1 - a``
FULL       ``h + a * (s(h) - h)``, alpha = 1       upstream host layers learn *through* the seed
=========  ======================================  =================================================

``a`` is alpha, times the learned per-sample gate for the gated blend. This module owns weights and maths only;
it never decides what is legal (that is ``lifecycle``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from esper_env.lifecycle import ForwardMode
from esper_env.seeds import BlendGate, build_seed

NUM_CLASSES = 10


class HostBlock(nn.Sequential):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)
        )


class SlotModule(nn.Module):
    """An injection point between two host blocks; holds at most one seed and its optional blending gate."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels
        self.seed: nn.Module | None = None
        self.gate: BlendGate | None = None
        self.mode = ForwardMode.OFF

    def plant(self, seed: nn.Module, gate: BlendGate | None) -> None:
        self.seed, self.gate, self.mode = seed, gate, ForwardMode.INCUBATE

    def clear(self) -> None:
        """Drop the seed and its gate; their memory is freed once no optimizer or graph holds them."""
        self.seed, self.gate, self.mode = None, None, ForwardMode.OFF

    def forward(self, h: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """``alpha``: shape ``(K,)``; the batch holds K stacked configurations of equal size (K = 1 in training)."""
        if self.seed is None or self.mode == ForwardMode.OFF:
            return h
        if self.mode == ForwardMode.INCUBATE:
            if not torch.is_grad_enabled():
                return h  # the incubating output's value is exactly h
            s = self.seed(h.detach())
            return h + (s - s.detach())
        seed_input = h.detach() if self.mode == ForwardMode.BLEND else h
        s = self.seed(seed_input)
        a = _per_sample(alpha, h.shape[0])
        if self.gate is not None:
            a = a * self.gate(seed_input)
        return h + a.to(h.dtype) * (s - h)


def _per_sample(alpha: torch.Tensor, batch: int) -> torch.Tensor:
    """Expand ``(K,)`` per-configuration alphas to ``(batch, 1, 1, 1)`` per-sample factors."""
    configs = alpha.shape[0]
    if configs == 1:
        return alpha.view(1, 1, 1, 1)
    return alpha.repeat_interleave(batch // configs).view(batch, 1, 1, 1)


class HostModel(nn.Module):
    """Host blocks with slots after chosen blocks, then global average pooling and a linear classifier."""

    def __init__(self, widths: Sequence[int], slot_blocks: Sequence[int], in_channels: int = 3) -> None:
        super().__init__()
        channels = [in_channels, *widths]
        self.blocks = nn.ModuleList(HostBlock(channels[i], channels[i + 1]) for i in range(len(widths)))
        self.slot_blocks = tuple(slot_blocks)
        self.slots = nn.ModuleList(SlotModule(widths[b]) for b in self.slot_blocks)
        self.classifier = nn.Linear(widths[-1], NUM_CLASSES)
        self._slot_after = {block: i for i, block in enumerate(self.slot_blocks)}

    def forward(self, x: torch.Tensor, alphas: torch.Tensor) -> torch.Tensor:
        """``alphas``: ``(num_slots, K)``; ``x`` holds K stacked configurations (see ``SlotModule.forward``)."""
        h = x
        for index, block in enumerate(self.blocks):
            h = block(h)
            slot = self._slot_after.get(index)
            if slot is not None:
                h = self.slots[slot](h, alphas[slot])
        return self.classifier(F.adaptive_avg_pool2d(h, 1).flatten(1))

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


def host_param_count(widths: Sequence[int], in_channels: int = 3) -> int:
    """Parameters of the host alone (what the seed-parameter penalty is relative to)."""
    with torch.device("meta"):
        model = HostModel(widths, slot_blocks=(), in_channels=in_channels)
    return sum(p.numel() for p in model.host_parameters())
