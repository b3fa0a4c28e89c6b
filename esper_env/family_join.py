"""Joining a widen seed to the family host: its channels concatenated to its stage, exactly.

``family_host.FamilyHost.join`` calls :func:`join_widen`. Joining changes parameter shapes, so it returns, for each
new parameter, how it was assembled from old ones (:class:`Piece`); the optimizer assembles momentum the same
way (``optim.NesterovSGD.regroup``), and gives the pieces that came from the seed its learning rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from esper_env.family import ResidualBlock, sync_shape_attributes

if TYPE_CHECKING:
    from esper_env.family_host import FamilyHost, WidenSeed


@dataclass(frozen=True)
class Piece:
    """Where in a new tensor a part comes from: ``source`` (an old parameter, copied whole) or ``fresh`` (new
    values; an optimizer starts their state at zero)."""

    where: tuple[slice, ...]
    source: nn.Parameter | None = None
    fresh: torch.Tensor | None = None


Assembly = dict[nn.Parameter, list[Piece]]
"""New parameter -> the pieces it was assembled from."""


def join_widen(host: FamilyHost, k: int, seed: WidenSeed) -> Assembly:
    net, assembly = host.net, {}
    stage, old, extra = net.stages[k], host.arch.widths[k], seed.conv.out_channels
    new = old + extra
    _set(stage.conv, "weight", _rows(stage.conv.weight, seed.conv.weight), assembly)
    _join_norm(stage.norm, seed.norm, assembly)
    for block in stage.blocks:
        _widen_block(block, old, new, assembly)
    consumer = net.stages[k + 1].conv if k + 1 < len(net.stages) else net.head
    _set(consumer, "weight", _give_up_cols(consumer.weight, seed.given, seed.out.weight), assembly)
    _widen_neighbours(host, k, seed, assembly)
    for module in (stage.conv, stage.norm, consumer):
        sync_shape_attributes(module)
    net.arch = net.arch.widened(k, new)
    host.slots[k].channels = new
    return assembly


def _widen_neighbours(host: FamilyHost, k: int, seed: WidenSeed, assembly: Assembly) -> None:
    """Live widen seeds beside stage ``k`` follow its join exactly, with zero weights for the new channels: the
    next stage's copies read them through zero input columns (before the join they did not read them at all),
    and the previous stage's seed writes into the next stage's new rows through zero outgoing weights. Giving
    the copies their sources' weights there instead (an exact, consistent split) made every widening plan a
    little worse on CIFAR-10 (``benchmarks/results/screen_probe/growth-a2b77d9`` against the screen at 01e41f9),
    and subtracting the sources' share from them cost a convolution a step that the joined network does not run."""
    extra = seed.conv.out_channels
    if k + 1 < len(host.slots) and host.slots[k + 1].widens:
        after = host.slots[k + 1].seed
        _set(after.conv, "weight", _zero_cols(after.conv.weight, extra), assembly)
        sync_shape_attributes(after.conv)
    if k > 0 and host.slots[k - 1].widens:
        before = host.slots[k - 1].seed
        _set(before.out, "weight", _zero_rows(before.out.weight, extra), assembly)
        before.given = torch.cat([before.given, before.given.new_zeros((extra, *before.given.shape[1:]))])
        sync_shape_attributes(before.out)


def _widen_block(block: ResidualBlock, old: int, new: int, assembly: Assembly) -> None:
    """Give a residual block identity channels: new hidden and output rows are freshly drawn, but every weight
    from a new channel into an old one is zero and the new output channels' last norm is zero."""
    for conv in (block.conv1, block.conv2):
        fresh = nn.Conv2d(new, new - old, 3, padding=1, bias=False).to(conv.weight.device, conv.weight.dtype)
        weight = torch.zeros(new, new, 3, 3, device=conv.weight.device, dtype=conv.weight.dtype)
        pieces = [Piece((slice(0, old), slice(0, old)), source=conv.weight),
                  Piece((slice(0, old), slice(old, new)), fresh=weight[:old, old:].clone()),  # new into old: 0
                  Piece((slice(old, new),), fresh=fresh.weight.detach())]
        _set(conv, "weight", _assemble(weight, pieces), assembly)
        sync_shape_attributes(conv)
    _grow_norm(block.norm1, new - old, zero=False, assembly=assembly)
    _grow_norm(block.norm2, new - old, zero=True, assembly=assembly)


def _join_norm(norm: nn.BatchNorm2d, seed_norm: nn.BatchNorm2d, assembly: Assembly) -> None:
    for name in ("weight", "bias"):
        _set(norm, name, _rows(getattr(norm, name), getattr(seed_norm, name)), assembly)
    for name in ("running_mean", "running_var"):
        setattr(norm, name, torch.cat([getattr(norm, name), getattr(seed_norm, name)]))
    sync_shape_attributes(norm)


def _grow_norm(norm: nn.BatchNorm2d, extra: int, zero: bool, assembly: Assembly) -> None:
    """Append ``extra`` channels: weight 1 (0 when ``zero``), bias 0, running mean 0 and variance 1."""
    for name, value in (("weight", 0.0 if zero else 1.0), ("bias", 0.0)):
        old = getattr(norm, name)
        fresh = torch.full((extra,), value, device=old.device, dtype=old.dtype)
        _set(norm, name, _assemble(torch.empty(len(old) + extra, device=old.device, dtype=old.dtype),
                                   [Piece((slice(0, len(old)),), source=old), Piece((slice(len(old), None),),
                                                                                   fresh=fresh)]), assembly)
    for name, value in (("running_mean", 0.0), ("running_var", 1.0)):
        old = getattr(norm, name)
        setattr(norm, name, torch.cat([old, torch.full((extra,), value, device=old.device, dtype=old.dtype)]))
    sync_shape_attributes(norm)


def _rows(old: nn.Parameter, seed: nn.Parameter) -> tuple[torch.Tensor, list[Piece]]:
    n = old.shape[0]
    return (torch.cat([old.detach(), seed.detach()]),
                   [Piece((slice(0, n),), source=old), Piece((slice(n, None),), source=seed)])


def _give_up_cols(old: nn.Parameter, given: torch.Tensor, new: nn.Parameter) -> tuple[torch.Tensor, list[Piece]]:
    """A weight reading a stage after a split: the source columns give up what their copies took (``given``,
    ``WidenSeed.given``), and ``new`` becomes the copies' columns."""
    n, kept = old.shape[1], old.detach() - given
    return (torch.cat([kept, new.detach()], 1),
            [Piece((slice(None), slice(0, n)), source=old), Piece((slice(None), slice(n, None)), source=new)])


def _zero_cols(old: nn.Parameter, extra: int) -> tuple[torch.Tensor, list[Piece]]:
    zeros = torch.zeros((old.shape[0], extra, *old.shape[2:]), device=old.device, dtype=old.dtype)
    return (torch.cat([old.detach(), zeros], 1),
            [Piece((slice(None), slice(0, old.shape[1])), source=old),
             Piece((slice(None), slice(old.shape[1], None)), fresh=zeros)])


def _zero_rows(old: nn.Parameter, extra: int) -> tuple[torch.Tensor, list[Piece]]:
    zeros = torch.zeros((extra, *old.shape[1:]), device=old.device, dtype=old.dtype)
    return (torch.cat([old.detach(), zeros]),
            [Piece((slice(0, old.shape[0]),), source=old), Piece((slice(old.shape[0], None),), fresh=zeros)])


def _assemble(out: torch.Tensor, pieces: list[Piece]) -> tuple[torch.Tensor, list[Piece]]:
    with torch.no_grad():
        for piece in pieces:
            out[piece.where] = piece.source.detach() if piece.source is not None else piece.fresh
    return out, pieces


def _set(module: nn.Module, name: str, built: tuple[torch.Tensor, list[Piece]], assembly: Assembly) -> None:
    value, pieces = built
    param = nn.Parameter(value.contiguous())
    setattr(module, name, param)
    assembly[param] = pieces
