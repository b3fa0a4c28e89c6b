"""A training step of a family host whose live seeds are all at full amplitude, run as the network they grow.

Every family seed is mixed in at alpha 1 from germination, with no straight-through term and with upstream
gradients (``lifecycle.blends_at_birth``, FULL's controls in ``host``). At those controls the host with its seeds
computes a function that one network of the grown widths computes too, and this module runs that network:

* a live **widen** seed's channels are computed with its stage's own: one convolution whose weight stacks the
  stage's rows and the seed's (``[W; C]``), then the pool, the norm (the stage's and the seed's statistics side by
  side) and GELU over all channels at once;
* the layer after it reads the stage's output and the new channels as one tensor, through ``[W' - S, V]``: the
  sources' outgoing weights less the share they give their copies, and the copies' own (``WidenSeed.given``,
  ``WidenSeed.out``), which is ``y + (V e - S h)``, the general path's sum at alpha 1;
* where the next stage also holds a widen seed, its copies read only the old channels, as in the general path:
  their rows get zero columns for the new ones;
* a residual block of a stage with a widen seed runs on the stage's old channels only, and the new channels
  bypass it, as they do in the general path;
* a live **deepen** seed is the block it will be once joined: ``s(h)``.

So a live seed costs about what its joined weights will, instead of a second convolution, pool and norm per
seed, a weight fold and the mixing arithmetic of the general path (``FamilyHost.forward``). The values and
gradients are the general path's at FULL's controls, up to floating-point round-off (a test checks both). The
joint norm updates the stage's and the seed's running statistics as their own modules would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from esper_env.family import LOGIT_SCALE

if TYPE_CHECKING:
    from esper_env.family_host import FamilyHost, WidenSeed


def forward_full(host: FamilyHost, x: torch.Tensor) -> torch.Tensor:
    """The logits of ``host`` on ``x`` with every live seed at FULL's controls, in training mode."""
    net = host.net
    z = net.stem(x)  # the stage's input: the previous stage's channels, then the copies of its widen seed if any
    before: WidenSeed | None = None  # the previous stage's live widen seed
    for k, stage in enumerate(net.stages):
        slot = host.slots[k]
        seed = slot.seed if slot.widens else None
        weight = _reading(stage.conv.weight, before)
        if seed is not None:
            weight = torch.cat([weight, _old_channels_only(seed.conv.weight, before)])
        y = F.max_pool2d(F.conv2d(z, weight, padding=1), 2)
        z = F.gelu(_norm(y, stage.norm, seed.norm if seed is not None else None))
        if stage.blocks:
            z = _blocks(stage.blocks, z, stage.conv.out_channels)
        if slot.seed is not None and seed is None:
            z = slot.seed(z)  # a deepen seed: the block it becomes
        before = seed
    pooled = F.adaptive_max_pool2d(z, 1).flatten(1)
    return F.linear(pooled, _reading(net.head.weight, before)) * LOGIT_SCALE


def _reading(weight: torch.Tensor, before: WidenSeed | None) -> torch.Tensor:
    """The weight of a layer reading a stage's output and, with a live widen seed there, its copies too."""
    if before is None:
        return weight
    kept = weight - before.given if before.split else weight
    return torch.cat([kept, before.out.weight], 1)


def _old_channels_only(weight: torch.Tensor, before: WidenSeed | None) -> torch.Tensor:
    """A widen seed's incoming weight, with zero columns for the previous stage's copies (it reads none)."""
    if before is None:
        return weight
    zeros = weight.new_zeros((weight.shape[0], before.conv.out_channels, *weight.shape[2:]))
    if weight.is_contiguous(memory_format=torch.channels_last):  # so that the joined weight stays channels-last
        zeros = zeros.contiguous(memory_format=torch.channels_last)
    return torch.cat([weight, zeros], 1)


def _norm(y: torch.Tensor, norm: nn.BatchNorm2d, seed_norm: nn.BatchNorm2d | None) -> torch.Tensor:
    """The stage's norm over its channels and the seed's over its copies, in one call; each keeps its statistics."""
    if seed_norm is None:
        return norm(y)
    mean = torch.cat([norm.running_mean, seed_norm.running_mean])
    var = torch.cat([norm.running_var, seed_norm.running_var])
    out = F.batch_norm(y, mean, var, torch.cat([norm.weight, seed_norm.weight]),
                       torch.cat([norm.bias, seed_norm.bias]), True, norm.momentum, norm.eps)
    old = norm.num_features
    with torch.no_grad():
        torch._foreach_copy_([norm.running_mean, seed_norm.running_mean, norm.running_var, seed_norm.running_var],
                             [mean[:old], mean[old:], var[:old], var[old:]])
        torch._foreach_add_([norm.num_batches_tracked, seed_norm.num_batches_tracked], 1)
    return out


def _blocks(blocks: nn.ModuleList, z: torch.Tensor, old: int) -> torch.Tensor:
    """The stage's residual blocks on its own channels; the widen seed's copies (past ``old``) bypass them."""
    h = z[:, :old] if z.shape[1] > old else z
    for block in blocks:
        h = block(h)
    return torch.cat([h, z[:, old:]], 1) if z.shape[1] > old else h
