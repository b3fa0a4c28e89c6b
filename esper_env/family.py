"""The growable host family of the task's version 2: a fast modern CNN grown in width and depth.

An :class:`Architecture` names a member of the family; :class:`FamilyNet` builds it::

    stem:    conv3x3(3 -> stem) -> BatchNorm -> GELU                               (full resolution)
    stage i: conv3x3(c_in -> w_i) -> MaxPool2 -> BatchNorm -> GELU, then blocks[i] residual blocks
    block:   x + BN0(conv3x3(GELU(BN(conv3x3(x)))))                                 (at the stage's resolution)
    head:    global max pool -> linear (no bias), logits scaled by 1/8

This is the shape of the fast CIFAR-10 recipes (airbench and its ancestors): three pooled conv groups, GELU,
a max-pooled head with scaled logits. The residual blocks carry the depth, because a block whose last
BatchNorm starts with weight 0 is exactly the identity, which makes deepening free at birth.

Growth keeps the function (up to the symmetry-breaking noise of width growth):

* :func:`deepen` appends a residual block to a stage; its last BatchNorm's weight and bias start at 0.
* :func:`widen` gives a stage more channels by splitting existing ones, as Net2Net's WiderNet does (Chen,
  Goodfellow & Shlens, 2016, arXiv:1511.05641): every new channel copies a randomly chosen source channel's
  incoming weights and BatchNorm state, and every layer that reads the stage divides the source's outgoing
  weights among its copies, so the sum the next layer sees is unchanged. Small noise on the copies' incoming
  weights breaks the symmetry so that copies can learn apart. One index map serves the whole stage: the
  residual sums add channel ``j`` to channel ``j``, so every tensor in the stage must split the same way.

Both return a :class:`Growth` that maps each replaced parameter to its successor and the rule that expanded it,
so :func:`carry_momentum` can expand an optimizer's state the same way (momentum is a sum of gradients of the
same linear map, so it transforms like the weight). Counts of parameters and FLOPs are analytic and need no
model (:func:`param_count`, :func:`forward_flops`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from esper_env.architecture import Architecture, forward_flops, param_count

__all__ = ["Architecture", "FamilyNet", "ResidualBlock", "Growth", "deepen", "widen", "grow_to", "carry_momentum",
           "fresh_masks", "boost_fresh", "forward_flops", "param_count", "LOGIT_SCALE", "noisy_copies",
           "sync_shape_attributes"]

LOGIT_SCALE = 1.0 / 8.0  # scaled logits, as in the fast recipes: with label smoothing it tames early steps


def _conv(c_in: int, c_out: int) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)


class ResidualBlock(nn.Module):
    """``x + BN0(conv(GELU(BN(conv(x)))))``; BN0 starts at weight 0 and bias 0, so the block starts as identity."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1, self.norm1 = _conv(width, width), nn.BatchNorm2d(width)
        self.conv2, self.norm2 = _conv(width, width), nn.BatchNorm2d(width)
        nn.init.zeros_(self.norm2.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm2(self.conv2(F.gelu(self.norm1(self.conv1(x)))))


class Stage(nn.Module):
    """``conv -> MaxPool2 -> BN -> GELU`` at half the input's resolution, then residual blocks."""

    def __init__(self, c_in: int, width: int, blocks: int) -> None:
        super().__init__()
        self.conv, self.norm = _conv(c_in, width), nn.BatchNorm2d(width)
        self.blocks = nn.ModuleList(ResidualBlock(width) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.norm(F.max_pool2d(self.conv(x), 2)))
        for block in self.blocks:
            x = block(x)
        return x


class FamilyNet(nn.Module):
    """A host of the family; :attr:`arch` always describes the current (possibly grown) shape."""

    def __init__(self, arch: Architecture, num_classes: int, in_channels: int = 3) -> None:
        super().__init__()
        self.arch = arch
        self.stem = nn.Sequential(_conv(in_channels, arch.stem), nn.BatchNorm2d(arch.stem), nn.GELU())
        inputs = (arch.stem, *arch.widths[:-1])
        self.stages = nn.ModuleList(Stage(c, w, b) for c, w, b in zip(inputs, arch.widths, arch.blocks, strict=True))
        self.head = nn.Linear(arch.widths[-1], num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.head(F.adaptive_max_pool2d(x, 1).flatten(1)) * LOGIT_SCALE


# --- growth ------------------------------------------------------------------------------------------------

Rule = Callable[[torch.Tensor], torch.Tensor]
"""How a parameter (or its optimizer state) of the old shape becomes one of the new shape."""


@dataclass
class Growth:
    """What one growth step did: the parameters it replaced, their successors and rules, and what it added."""

    replaced: list[tuple[nn.Parameter, nn.Parameter, Rule]]
    added: list[nn.Parameter]


def deepen(net: FamilyNet, stage: int) -> Growth:
    """Append an identity-at-birth residual block to ``stage``, on the net's device and dtype."""
    _check_stage(net, stage)
    reference = net.head.weight
    block = ResidualBlock(net.arch.widths[stage]).to(reference.device, reference.dtype)
    net.stages[stage].blocks.append(block)
    net.arch = net.arch.deepened(stage)
    return Growth(replaced=[], added=list(block.parameters()))


def widen(net: FamilyNet, stage: int, width: int, noise: float = 0.01,
          generator: torch.Generator | None = None) -> Growth:
    """Split channels of ``stage`` until it has ``width``; the function changes only by ``noise``.

    ``noise``: standard deviation of the perturbation added to each copy's incoming conv weights, relative to
    the standard deviation of that weight tensor (unitless; 0 keeps the function exactly, up to round-off).
    Sources are drawn with ``generator`` (on the CPU; default torch's global one).
    """
    _check_stage(net, stage)
    old = net.arch.widths[stage]
    if width <= old:
        raise ValueError(f"width={width} for stage {stage}; expected more than its current {old} channels")
    sources = torch.randint(old, (width - old,), generator=generator)
    index = torch.cat([torch.arange(old), sources])
    counts = torch.bincount(index, minlength=old).to(torch.float32)[index]  # copies of each channel's source
    split = _Split(index, counts, old, noise, generator)
    for module, out_rows, in_cols in _stage_tensors(net, stage):
        split.apply(module, out_rows, in_cols)
    net.arch = net.arch.widened(stage, width)
    return Growth(replaced=split.replaced, added=[])


def grow_to(net: FamilyNet, target: Architecture, optimizer: torch.optim.Optimizer, noise: float = 0.01,
            generator: torch.Generator | None = None) -> None:
    """Widen, then deepen, every stage of ``net`` to ``target``, carrying ``optimizer``'s state through.

    ``target`` must be at least as wide and as deep as the net in every stage and keep its stem; ``noise`` and
    ``generator`` are :func:`widen`'s.
    """
    arch = net.arch
    if target.stem != arch.stem or len(target.widths) != len(arch.widths) or any(
            t < a for t, a in zip((*target.widths, *target.blocks), (*arch.widths, *arch.blocks), strict=True)):
        raise ValueError(f"target={target}; expected the stem and stage count of {arch}, and no stage narrower "
                         "or shallower")
    for stage, width in enumerate(target.widths):
        if width > net.arch.widths[stage]:
            carry_momentum(optimizer, widen(net, stage, width, noise, generator))
    for stage, blocks in enumerate(target.blocks):
        while net.arch.blocks[stage] < blocks:
            carry_momentum(optimizer, deepen(net, stage))


def _check_stage(net: FamilyNet, stage: int) -> None:
    if not 0 <= stage < len(net.stages):
        raise ValueError(f"stage={stage!r}; expected a stage index in [0, {len(net.stages)})")


def _stage_tensors(net: FamilyNet, stage: int) -> Iterator[tuple[nn.Module, bool, bool]]:
    """Every module whose weights index the stage's channels: (module, on its outputs, on its inputs)."""
    body = net.stages[stage]
    yield body.conv, True, False
    yield body.norm, True, False
    for block in body.blocks:
        yield from ((block.conv1, True, True), (block.norm1, True, False))
        yield from ((block.conv2, True, True), (block.norm2, True, False))
    consumer = net.stages[stage + 1].conv if stage + 1 < len(net.stages) else net.head
    yield consumer, False, True


class _Split:
    """Applies one stage's channel map to modules, recording how each parameter was expanded."""

    def __init__(self, index: torch.Tensor, counts: torch.Tensor, old: int, noise: float,
                 generator: torch.Generator | None) -> None:
        self.index, self.counts, self.old = index, counts, old
        self.noise, self.generator = noise, generator
        self.replaced: list[tuple[nn.Parameter, nn.Parameter, Rule]] = []

    def rule(self, out_rows: bool, in_cols: bool) -> Rule:
        def expand(t: torch.Tensor) -> torch.Tensor:
            index = self.index.to(t.device)
            if out_rows:
                t = t.index_select(0, index)
            if in_cols:
                t = t.index_select(1, index) / self.counts.to(t.device, t.dtype).view(1, -1, *[1] * (t.dim() - 2))
            return t
        return expand

    def apply(self, module: nn.Module, out_rows: bool, in_cols: bool) -> None:
        rule = self.rule(out_rows, in_cols)
        for name, param in list(module.named_parameters(recurse=False)):
            grown = rule(param.detach())
            if out_rows and isinstance(module, nn.Conv2d):
                grown = self._perturb_copies(grown)
            successor = nn.Parameter(grown, requires_grad=param.requires_grad)
            setattr(module, name, successor)
            self.replaced.append((param, successor, rule))
        for name, buffer in list(module.named_buffers(recurse=False)):
            if buffer.dim() == 1:  # BatchNorm running statistics; num_batches_tracked (0-dim) stays
                setattr(module, name, buffer.index_select(0, self.index.to(buffer.device)))
        sync_shape_attributes(module)

    def _perturb_copies(self, weight: torch.Tensor) -> torch.Tensor:
        copies = noisy_copies(weight[self.old:], weight[: self.old], self.noise, self.generator)
        return torch.cat([weight[: self.old], copies])


def noisy_copies(copies: torch.Tensor, reference: torch.Tensor, noise: float,
                 generator: torch.Generator | None) -> torch.Tensor:
    """``copies`` plus Gaussian noise of SD ``noise`` x the SD of ``reference`` (the copied weight tensor), drawn on
    the CPU with ``generator``: what breaks the symmetry between a split channel and its source."""
    if noise == 0:
        return copies
    scale = noise * float(reference.std())  # sync: once per growth step, not per batch
    draw = torch.randn(copies.shape, generator=generator).to(copies.device, copies.dtype)
    return copies + scale * draw


def sync_shape_attributes(module: nn.Module) -> None:
    """Keep a grown module's shape attributes (its ``repr`` and checks read them) true to its weight's shape."""
    weight = module.weight
    if isinstance(module, nn.Conv2d):
        module.out_channels, module.in_channels = weight.shape[0], weight.shape[1]
    elif isinstance(module, nn.BatchNorm2d):
        module.num_features = weight.shape[0]
    elif isinstance(module, nn.Linear):
        module.out_features, module.in_features = weight.shape


def fresh_masks(net: FamilyNet, since: Architecture) -> list[tuple[nn.Parameter, torch.Tensor]]:
    """For every parameter grown or added since the net was ``since``: 1.0 on its new entries, else 0.0.

    An entry is new when it belongs to a channel past the stage's width in ``since`` (growth appends channels),
    reads such a channel, or sits in a block past the stage's block count in ``since``. Masks broadcast
    against their parameter.
    """
    masks: dict[int, tuple[nn.Parameter, torch.Tensor]] = {}
    for stage, body in enumerate(net.stages):
        old = since.widths[stage]
        for module, out_rows, in_cols in _stage_tensors(net, stage):
            for param in module.parameters(recurse=False):
                mask = _new_channels(param, old, out_rows, in_cols)
                if id(param) in masks:
                    mask = torch.maximum(mask, masks[id(param)][1])
                masks[id(param)] = (param, mask)
        for block in body.blocks[since.blocks[stage]:]:
            masks.update({id(p): (p, torch.ones((), device=p.device)) for p in block.parameters()})
    return [(param, mask) for param, mask in masks.values() if bool(mask.any())]  # sync: once per growth


def _new_channels(param: torch.Tensor, old: int, out_rows: bool, in_cols: bool) -> torch.Tensor:
    none = torch.zeros((), device=param.device)
    rows = (torch.arange(param.shape[0], device=param.device) >= old).float() if out_rows else none
    cols = (torch.arange(param.shape[1], device=param.device) >= old).float() if in_cols else none
    rows = rows.view(-1, *[1] * (param.dim() - 1)) if out_rows else rows
    cols = cols.view(1, -1, *[1] * (param.dim() - 2)) if in_cols else cols
    return torch.maximum(rows, cols)


def boost_fresh(net: FamilyNet, since: Architecture, factor: float) -> list[torch.utils.hooks.RemovableHandle]:
    """Scale the gradients of the entries new since ``since`` by ``factor``; returns the hook handles.

    With SGD this is a larger learning rate on the new entries only, so that capacity that arrives late can
    catch up with what trained from the start; remove the handles to end the boost.
    """
    handles = []
    for param, mask in fresh_masks(net, since):
        scale = 1.0 + (factor - 1.0) * mask
        handles.append(param.register_hook(lambda grad, scale=scale: grad * scale))
    return handles


def carry_momentum(optimizer: torch.optim.Optimizer, growth: Growth) -> None:
    """Point ``optimizer`` at the grown parameters: replaced ones keep their group and their expanded state,
    added ones join the first parameter group with fresh state.

    Works for any optimizer whose per-parameter state tensors have the parameter's shape (SGD's momentum
    buffer, Adam's moments); scalar state (Adam's step) is copied as is.
    """
    successors = {id(old): (new, rule) for old, new, rule in growth.replaced}
    for group in optimizer.param_groups:
        params = []
        for param in group["params"]:
            if id(param) not in successors:
                params.append(param)
                continue
            new, rule = successors[id(param)]
            state = optimizer.state.pop(param, {})
            optimizer.state[new] = {k: rule(v) if torch.is_tensor(v) and v.dim() > 0 else v for k, v in state.items()}
            params.append(new)
        group["params"] = params
    if growth.added:
        optimizer.param_groups[0]["params"].extend(growth.added)
