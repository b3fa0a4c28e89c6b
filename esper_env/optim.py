"""Nesterov SGD whose learning rates live in a device tensor, so a CUDA graph can replay it across epochs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn


class NesterovSGD:
    """SGD with Nesterov momentum for the host (with weight decay) and one group per seed (without).

    Same update as ``torch.optim.SGD(nesterov=True, dampening=0)``; the difference is that the learning rate is
    read from ``lr[0]`` (host) and ``lr[1]`` (seeds) at run time, and that a seed's momentum buffers are dropped
    with :meth:`remove_group` when the seed is pruned.

    Where a seed joins the host (:meth:`regroup`), the host's entries that came from it (or were freshly made
    for it) keep learning ``joined_gain`` times faster than the host's own, their gradients scaled by that
    factor: new weights that arrive late must catch up with a network that has trained for longer, and the
    growth probes (``benchmarks/grow_cost.py``) found that doubling new entries' gradients for the rest of the
    run narrows the gap to the same network trained static.
    """

    def __init__(self, host_params: list[nn.Parameter], momentum: float, weight_decay: float,
                 joined_gain: float = 1.0) -> None:
        self.momentum, self.weight_decay, self.joined_gain = momentum, weight_decay, joined_gain
        self.host = (list(host_params), [torch.zeros_like(p) for p in host_params])
        self.gains: list[torch.Tensor | None] = [None] * len(self.host[0])  # per host parameter; None: all 1
        self.seeds: dict[int, tuple[list[nn.Parameter], list[torch.Tensor]]] = {}
        self.fused = _fused_available(host_params[0].device)

    def add_group(self, slot: int, params: list[nn.Parameter]) -> None:
        """Make ``params`` the seed group of ``slot``; parameters the group already held keep their momentum."""
        held = dict(zip(map(id, self.seeds[slot][0]), self.seeds[slot][1], strict=True)) if slot in self.seeds else {}
        self.seeds[slot] = (list(params), [held[id(p)] if id(p) in held else torch.zeros_like(p) for p in params])

    def remove_group(self, slot: int) -> None:
        self.seeds.pop(slot, None)

    @torch.no_grad()
    def regroup(self, host_params: list[nn.Parameter], seed_groups: dict[int, list[nn.Parameter]],
                assembly: Mapping[nn.Parameter, Sequence[Any]]) -> None:
        """Point the optimizer at new parameter lists after the host's shapes changed (a seed joined it).

        A parameter the optimizer already holds keeps its momentum, wherever it moves (a joined seed's block
        moves from its seed group to the host). A new one gets momentum assembled as the parameter was
        (``assembly``: new parameter -> pieces with ``where`` and ``source``, see ``family_join.Piece``): the
        old parameters' momentum where it copied them, zero where its values are fresh.
        """
        old = {id(p): b for params, buffers in self._all() for p, b in zip(params, buffers, strict=True)}

        def buffer(param: nn.Parameter) -> torch.Tensor:
            if id(param) in old:
                return old[id(param)]
            out = torch.zeros_like(param)
            for piece in assembly.get(param, ()):
                if piece.source is not None and id(piece.source) in old:
                    out[piece.where] = old[id(piece.source)]
            return out

        seeded = {id(p) for params, _ in self.seeds.values() for p in params}
        gains = {id(p): g for p, g in zip(self.host[0], self.gains, strict=True) if g is not None}
        self.gains = [self._gain(p, seeded, gains, assembly) for p in host_params]
        self.host = (list(host_params), [buffer(p) for p in host_params])
        self.seeds = {slot: (list(params), [buffer(p) for p in params]) for slot, params in seed_groups.items()}

    def _gain(self, param: nn.Parameter, seeded: set[int], gains: dict[int, torch.Tensor],
              assembly: Mapping[nn.Parameter, Sequence[Any]]) -> torch.Tensor | None:
        """``param``'s per-entry gradient gain after a join: ``joined_gain`` where its values came from a seed or
        are fresh, the old host parameter's gains (``gains``, by id) where it copied one; None where all are 1."""
        if self.joined_gain == 1.0:
            return None
        if id(param) in gains or id(param) in seeded:
            return gains.get(id(param), torch.full_like(param, self.joined_gain))
        gain, boosted = torch.ones_like(param), False  # known from the pieces: no device sync to find out
        for piece in assembly.get(param, ()):
            source = piece.source
            if source is None or id(source) in seeded:
                gain[piece.where], boosted = self.joined_gain, True
            elif id(source) in gains:
                gain[piece.where], boosted = gains[id(source)], True
        return gain if boosted else None

    def _all(self) -> list[tuple[list[nn.Parameter], list[torch.Tensor]]]:
        return [self.host, *self.seeds.values()]

    def zero_grad(self) -> None:
        for params, _ in self._all():
            for p in params:
                p.grad = None

    @torch.no_grad()
    def reset_state(self) -> None:
        for _, buffers in self._all():
            torch._foreach_zero_(buffers)

    @torch.no_grad()
    def step(self, lr: torch.Tensor) -> None:
        # Joined entries' gains scale a copy of the gradients (the gradients themselves stay as measured), in one
        # multi-tensor kernel rather than one per joined parameter.
        params, buffers = self.host
        grads: list[torch.Tensor | None] = [p.grad for p in params]
        boosted = [i for i, (gain, grad) in enumerate(zip(self.gains, grads, strict=True))
                   if gain is not None and grad is not None]
        if boosted:
            scaled = torch._foreach_mul([grads[i] for i in boosted], [self.gains[i] for i in boosted])
            for i, grad in zip(boosted, scaled, strict=True):
                grads[i] = grad
        self._update(params, buffers, grads, lr[0], self.weight_decay)
        seed_params = [p for params, _ in self.seeds.values() for p in params]
        seed_buffers = [b for _, buffers in self.seeds.values() for b in buffers]
        self._update(seed_params, seed_buffers, [p.grad for p in seed_params], lr[1], 0.0)

    def _update(self, params: list[nn.Parameter], buffers: list[torch.Tensor], grads: list[torch.Tensor | None],
                lr: torch.Tensor, weight_decay: float) -> None:
        kept = [(p, b, g) for p, b, g in zip(params, buffers, grads, strict=True) if g is not None]
        if not kept:
            return
        params, buffers, grads = [p for p, _, _ in kept], [b for _, b, _ in kept], [g for _, _, g in kept]
        if self.fused:  # one kernel per group instead of six; zero buffers make "first step" irrelevant
            torch._fused_sgd_(params, grads, buffers, weight_decay=weight_decay, momentum=self.momentum, lr=lr,
                              dampening=0.0, nesterov=True, maximize=False, is_first_step=False)
            return
        if weight_decay:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
        torch._foreach_mul_(buffers, self.momentum)
        torch._foreach_add_(buffers, grads)
        update = torch._foreach_add(grads, buffers, alpha=self.momentum)
        torch._foreach_mul_(update, lr)
        torch._foreach_sub_(params, update)


def _fused_available(device: torch.device) -> bool:
    """Whether ``torch._fused_sgd_`` with a tensor learning rate runs on ``device`` (probed once, eagerly, so
    that a missing kernel never surfaces inside a CUDA-graph capture)."""
    try:
        p, g, b = torch.ones(2, device=device), torch.ones(2, device=device), torch.zeros(2, device=device)
        torch._fused_sgd_([p], [g], [b], weight_decay=0.0, momentum=0.9, lr=torch.tensor(0.5, device=device),
                          dampening=0.0, nesterov=True, maximize=False, is_first_step=False)
        return bool(torch.allclose(p.cpu(), torch.tensor([0.05, 0.05])))  # sync: once, at construction
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
