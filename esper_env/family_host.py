"""The growable family as an Esper host: one slot per stage, seeds that widen or deepen it, and joining.

:class:`FamilyHost` wraps a :class:`~esper_env.family.FamilyNet` and has the interface the trainer and engine
use for every host (``forward(x, alphas, flags, skip)``, ``slots``, ``host_parameters()``, ``host_buffers()``,
``plant()``), plus :meth:`FamilyHost.join`, which makes a fossilized seed part of the network and frees its slot,
so that growth compounds. Slot ``k`` belongs to stage ``k`` and holds at most one seed of one of two kinds:

* **deepen** (:class:`~esper_env.family.ResidualBlock` at the stage's width): sits after the stage's blocks; the
  slot mixes it in with the lifecycle's forward maths (``host.SlotModule``): ``h + a (s - h) + t (s - s.detach())``.
  Its last norm starts at zero, so ``s = h`` at birth: like a widen seed it is at alpha 1 from germination
  (``lifecycle.blends_at_birth``). Joining appends the block to the stage.
* **widen** (:class:`WidenSeed`): ``extra`` new channels of the stage, ``e = GELU(BN(MaxPool(conv(x_in))))`` from
  the stage's input ``x_in``, split from the stage's own channels as Net2Net splits them (Chen, Goodfellow &
  Shlens, 2016): each new channel copies a source channel's incoming weights (with small noise) and norm state,
  each source equally often, and a fixed equal share ``S`` of the source's outgoing weights into the next layer
  (the next stage's conv, or the head), which the source gives up when the seed joins; the copies' own
  outgoing weights ``V`` start at that share and learn. Its contribution to the next layer's output is
  ``d = V e - S h[sources]`` with ``h`` the stage's output (``S h[sources]`` read as ``h`` through the sources'
  columns, :attr:`WidenSeed.given`, which training folds into the next conv's weight: :meth:`FamilySlot.feed`),
  mixed in as ``y + a d``: it starts near zero
  (exactly zero without the noise) while the copies already carry the network's features, and at alpha 1 the
  sources' effective outgoing weights ``W - S`` and the copies' ``V`` learn exactly as the split layer's would;
  the probes (``benchmarks/grow_cost.py``) found split channels catch up much faster than fresh ones. A copy
  equals its source only where the stage has no residual blocks (it is taken before them), so in a stage with
  blocks ``S`` and ``V`` start at zero instead. Since the split keeps the function at any amplitude, a widen seed
  is mixed in at alpha 1 from germination (``lifecycle.blends_at_birth``). It has no straight-through term:
  by straight-through its outgoing weights would learn, with no feedback (the value does not depend on them),
  what the host is learning anyway, and grow without bound (on CIFAR-10 every plan that widened all three
  stages collapsed: ``benchmarks/results/screen_probe/``). Where two live widen seeds sit side by side, the
  later stage's copies read only the old channels of the earlier stage, and after the joins read its new ones
  through zero weights; two ways of giving them their sources' weights there were measured on CIFAR-10 and made
  growth worse: shared with the sources (``screen_probe/neighbour-tie/``) and as the copies' own inlet
  (the screen at 01e41f9 against ``screen_probe/growth-a2b77d9/``).
  Joining concatenates the seed's channels to the stage: the stage's conv and norm gain the seed's rows, the
  stage's residual blocks gain identity channels (new weights that read or write the old channels are zero, the
  new channels' last norm is zero), and the next layer gains ``V`` as input columns, the sources' giving up
  ``S``; live widen seeds beside it follow (``_widen_neighbours``). At alpha 1 the network computes exactly what
  the host with its seed computed.

Joining changes parameter shapes, so it returns, for each new parameter, how it was assembled from old ones
(``esper_env.family_join.Piece``); the optimizer assembles momentum the same way (``optim.NesterovSGD.regroup``).
Seeds' norms are BatchNorm, as the family's: a seed that joins must behave as the layer it becomes. Every count
is analytic.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from esper_env.architecture import widen_extra
from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.family import LOGIT_SCALE, Architecture, FamilyNet, ResidualBlock, noisy_copies
from esper_env.family_join import Assembly, join_widen
from esper_env.family_joint import forward_full
from esper_env.host import SlotModule, Stacker, _per_sample

SPLIT_NOISE = 0.01  # symmetry-breaking noise of a split channel's copied weights, relative to the weights' SD


class WidenSeed(nn.Module):
    """``extra`` new channels for a stage reading ``c_in`` channels, and their weights into the next layer."""

    def __init__(self, c_in: int, extra: int, c_next: int | None, num_classes: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, extra, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(extra)
        self.out: nn.Module = (nn.Linear(extra, num_classes, bias=False) if c_next is None
                               else nn.Conv2d(extra, c_next, 3, padding=1, bias=False))
        nn.init.zeros_(self.out.weight)
        self.register_buffer("sources", torch.zeros(extra, dtype=torch.long))
        """The stage channel each new channel was split from."""
        self.register_buffer("given", None)
        """The outgoing weights the sources give up to their copies, fixed at the split, as a weight of the next
        layer reading the stage's output (zero but at the sources' columns): it reads ``h`` itself, not a gather
        of the sources' channels, which costs a scatter in the backward pass (:meth:`split_from` sets it)."""
        self.split = False  # whether the outgoing weights were split (else they and ``given`` start at zero)

    @property
    def to_head(self) -> bool:
        return isinstance(self.out, nn.Linear)

    def channels(self, x: torch.Tensor) -> torch.Tensor:
        """The new channels, at the stage's output resolution."""
        return F.gelu(self.norm(F.max_pool2d(self.conv(x), 2)))

    def contribution(self, e: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """What the split adds to the next layer's output (the next conv's, or the scaled logits): the new channels
        ``e`` through their outgoing weights, minus what the sources give up of theirs (:attr:`given`) from the
        stage's output ``h`` (Net2Net's division of outgoing weights; the sources give it up when the seed joins).
        It is fixed, so at alpha 1 the copies' and the sources' outgoing weights learn as the joined layer's
        would."""
        if self.to_head:
            pooled, pooled_h = F.adaptive_max_pool2d(e, 1).flatten(1), F.adaptive_max_pool2d(h, 1).flatten(1)
            given_up = F.linear(pooled_h, self.given) if self.split else 0.0
            return (self.out(pooled) - given_up) * LOGIT_SCALE
        given_up = F.conv2d(h, self.given, padding=1) if self.split else 0.0
        return self.out(e) - given_up

    @torch.no_grad()
    def split_from(self, stage_conv: nn.Conv2d, stage_norm: nn.BatchNorm2d, consumer: torch.Tensor,
                   generator: torch.Generator, split_outgoing: bool = True) -> None:
        """Make every new channel a copy of an existing one (each source equally often): its incoming weights
        with noise, its norm state, and (``split_outgoing``) an equal share of its outgoing weights in
        ``consumer`` (the next layer's weight) among the source and its copies; else outgoing weights of zero.

        The share keeps the function only where the copy equals its source at the stage's output, that is in a
        stage without residual blocks (the copy is taken before them): elsewhere the outgoing weights start at
        zero."""
        old, extra = stage_conv.out_channels, self.conv.out_channels
        sources = torch.arange(extra) % old
        shares = (torch.bincount(sources, minlength=old) + 1).float()[sources]
        weight = stage_conv.weight.detach()
        self.conv.weight.copy_(noisy_copies(weight[sources.to(weight.device)], weight, SPLIT_NOISE, generator))
        index = sources.to(stage_norm.weight.device)
        for name in ("weight", "bias", "running_mean", "running_var"):
            getattr(self.norm, name).copy_(getattr(stage_norm, name)[index])
        share = shares.to(consumer.device, consumer.dtype).view(1, -1, *[1] * (consumer.dim() - 2))
        if split_outgoing:
            self.out.weight.copy_(consumer.detach()[:, sources.to(consumer.device)] / share)
            self.split = True
        self.sources.copy_(sources)
        given = consumer.new_zeros((consumer.shape[0], old, *consumer.shape[2:]))
        self.given = given.index_add_(1, self.sources.to(given.device), self.out.weight.detach())


class FamilySlot(SlotModule):
    """Stage ``stage``'s slot: a deepen seed mixed in after the stage, or a widen seed read by the next layer."""

    def __init__(self, channels: int, stage: int) -> None:
        super().__init__(channels)
        self.stage = stage

    @property
    def widens(self) -> bool:
        return isinstance(self.seed, WidenSeed)

    def forward(self, h: torch.Tensor, alpha: torch.Tensor, straight: torch.Tensor, upstream: torch.Tensor,
                full: bool, stack: Stacker) -> torch.Tensor:
        return h if self.widens else super().forward(h, alpha, straight, upstream, full, stack)

    def widen_channels(self, x_in: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
        x = torch.lerp(x_in.detach(), x_in, upstream) if torch.is_grad_enabled() else x_in
        return self.seed.channels(x)

    def feed(self, conv: nn.Conv2d, h: torch.Tensor, e: torch.Tensor, alpha: torch.Tensor,
             stack: Stacker) -> torch.Tensor:
        """The next stage's ``conv`` of this stage's output ``h``, with the widen seed's new channels ``e`` mixed
        in (:meth:`mix`). With one amplitude for the whole batch the sources' given-up share folds into the
        weight, ``conv(h, W - a given) + a V e``: the same sum without a second convolution of ``h``. Stacked
        configurations (one amplitude each) take the general path."""
        if alpha.dim() == 0 and self.seed.split:
            weight = conv.weight - alpha * self.seed.given
            return F.conv2d(h, weight, conv.bias, conv.stride, conv.padding) + alpha * self.seed.out(e)
        return self.mix(conv(h), e, h, alpha, stack)

    def mix(self, y: torch.Tensor, e: torch.Tensor, h: torch.Tensor, alpha: torch.Tensor,
            stack: Stacker) -> torch.Tensor:
        """``y + a d`` with ``d`` the widen seed's contribution to ``y`` given the stage's output ``h`` (no
        straight-through term: see the module docstring). Operands that hold one configuration's batch are
        combined once and stacked only for the amplitudes."""
        if e.shape[0] != h.shape[0]:
            e, h = stack(e), stack(h)
        y, d = stack(y), stack(self.seed.contribution(e, h))
        a = _per_sample(alpha, y.shape[0])
        if a.dim() and y.dim() == 2:
            a = a.view(-1, 1)
        return y + a * d


class FamilyHost(nn.Module):
    """A :class:`FamilyNet` with one :class:`FamilySlot` per stage (see the module docstring)."""

    def __init__(self, arch: Architecture, num_classes: int, in_channels: int) -> None:
        super().__init__()
        self.net = FamilyNet(arch, num_classes, in_channels)
        self.num_classes = num_classes
        self.slots = nn.ModuleList(FamilySlot(w, k) for k, w in enumerate(arch.widths))
        self.version = 0  # bumped whenever the host's own tensors change shape: graphs must be re-captured

    @property
    def arch(self) -> Architecture:
        return self.net.arch

    @property
    def classifier(self) -> nn.Linear:
        return self.net.head

    def forward(self, x: torch.Tensor, alphas: torch.Tensor, flags: torch.Tensor, skip: tuple[bool, ...] = (),
                full: frozenset[int] = frozenset()) -> torch.Tensor:
        """As ``host.HostModel.forward``: ``alphas`` ``(num_slots,)`` or ``(num_slots, K)``; ``flags``
        ``(2, num_slots)``. Training with every live seed in ``full`` runs the network the seeds grow
        (``family_joint.forward_full``)."""
        planted = [k for k, s in enumerate(self.slots) if s.seed is not None]
        if full and self.training and alphas.dim() == 1 and not any(skip) and all(k in full for k in planted):
            return forward_full(self, x)
        on = tuple(s.seed is not None and not (skip and skip[k]) for k, s in enumerate(self.slots))
        stack = Stacker.of(x, alphas)
        full = full if stack.configs == 1 else frozenset()  # stacked configurations differ in amplitude
        h = self.net.stem(x)
        pending: tuple[int, torch.Tensor] | None = None  # a widen seed's new channels, for the next layer
        for k, stage in enumerate(self.net.stages):
            slot = self.slots[k]
            e = slot.widen_channels(h, flags[1, k]) if on[k] and slot.widens else None
            y = stage.conv(h) if pending is None else self.slots[pending[0]].feed(
                stage.conv, h, pending[1], alphas[pending[0]], stack)
            h = F.gelu(stage.norm(F.max_pool2d(y, 2)))
            for block in stage.blocks:
                h = block(h)
            if on[k] and not slot.widens:
                h = slot(h, alphas[k], flags[0, k], flags[1, k], k in full, stack)
            pending = (k, e) if e is not None else None
        logits = self.net.head(F.adaptive_max_pool2d(h, 1).flatten(1)) * LOGIT_SCALE
        if pending is not None:
            logits = self.slots[pending[0]].mix(logits, pending[1], h, alphas[pending[0]], stack)
        return stack(logits)

    def host_parameters(self) -> list[nn.Parameter]:
        return list(self.net.parameters())

    def seed_counts(self, slot: int, image_size: int) -> tuple[int, int]:
        """Parameters and forward FLOPs per image (multiply-adds x 2, convolutions and head) of ``slot``'s seed;
        (0, 0) when empty. Analytic, like ``family.forward_flops``."""
        seed, arch = self.slots[slot].seed, self.arch
        if seed is None:
            return 0, 0
        out_pixels = (image_size // 2 ** (slot + 1)) ** 2  # the stage's resolution, after its pool
        if isinstance(seed, ResidualBlock):
            return sum(p.numel() for p in seed.parameters()), 2 * 2 * 9 * arch.widths[slot] ** 2 * out_pixels
        params = sum(p.numel() for part in (seed.conv, seed.norm, seed.out) for p in part.parameters())
        c_in, extra = seed.conv.in_channels, seed.conv.out_channels
        flops = 2 * 9 * c_in * extra * out_pixels * 4  # the seed's conv runs before the pool, like the stage's
        weight = seed.out.weight
        # What the seed adds to the architecture once joined: subtracting the sources' share until then is
        # bookkeeping of the split, not part of the network it grows, and is not priced.
        flops += 2 * weight.numel() * (1 if seed.to_head else out_pixels)
        return params, flops

    def host_buffers(self) -> list[torch.Tensor]:
        return [b for b in self.net.buffers() if b.dim() > 0]

    def plant(self, slot: int, blueprint: int, gated: bool) -> list[nn.Parameter]:
        """Plant the family blueprint ``blueprint`` in ``slot``; weights from torch's global generator."""
        if gated:
            raise ValueError("the family host has no gated blend; expected the linear or cosine blend")
        if not 0 <= blueprint < len(FAMILY_BLUEPRINTS):
            raise ValueError(f"blueprint={blueprint!r} cannot grow the family host; expected an index in "
                             f"[0, {len(FAMILY_BLUEPRINTS)}): {[b.name for b in FAMILY_BLUEPRINTS]}")
        name = FAMILY_BLUEPRINTS[blueprint].name
        device = self.net.head.weight.device
        module = self.slots[slot]
        if name == "deepen":
            seed: nn.Module = ResidualBlock(self.arch.widths[slot])
        else:
            seed = self._widen_seed(slot, widen_extra(self.arch.widths[slot], name))
        module.plant(seed.to(device), None)
        return list(seed.parameters())

    def _widen_seed(self, slot: int, extra: int) -> WidenSeed:
        arch, stage = self.arch, self.net.stages[slot]
        c_in = arch.stem if slot == 0 else arch.widths[slot - 1]
        c_next = arch.widths[slot + 1] if slot + 1 < len(arch.widths) else None
        seed = WidenSeed(c_in, extra, c_next, self.num_classes).to(stage.conv.weight.device)
        generator = torch.Generator().manual_seed(int(torch.randint(2**62, ())))  # from the seeded global stream
        consumer = self.net.stages[slot + 1].conv if c_next is not None else self.net.head
        seed.split_from(stage.conv, stage.norm, consumer.weight, generator, split_outgoing=not arch.blocks[slot])
        return seed

    def join(self, slot: int) -> Assembly:
        """Make the seed in ``slot`` part of the network (exactly, at alpha 1) and empty the slot."""
        module = self.slots[slot]
        if module.seed is None:
            raise ValueError(f"slot {slot} holds no seed to join")
        assembly: Assembly = {}
        if module.widens:
            assembly = join_widen(self, slot, module.seed)
        else:
            self.net.stages[slot].blocks.append(module.seed)
            self.net.arch = self.net.arch.deepened(slot)
        module.clear()
        self.version += 1
        return assembly
