"""What growth costs: the network's parameters and the episode's training FLOPs, priced per doubling.

The reward of the growable task charges ``cost_t`` below against accuracy (both as fractions), relative to a
fixed reference, the seedling trained static: with ``P_t`` the network's parameters after step ``t`` (host, plus
every live seed's weighted by its alpha: what the function uses), ``C_t`` the training FLOPs summed over the
epochs trained so far (host and every live seed, incubating ones included: they train), ``P_ref`` the seedling's
parameters and ``c_ref`` its training FLOPs per epoch::

    cost_t = flops_price * log2(C_t / (t * c_ref)) + params_price * log2(P_t / P_ref)

so the static seedling pays nothing, growing to twice the seedling's compute for the whole episode costs
``flops_price``, and each step's reward carries ``-(cost_t - cost_{t-1})`` (cost_0 = 0): the episode's return
telescopes to ``A_T - A_0 - cost_T``. A price per doubling, not per unit: accuracy grows about linearly in the
logarithm of compute across the family, and a linear price would leave the small members almost free
(``benchmarks/results/grow_cost/oracle.md`` compares both). Growing late is cheaper than growing early, because
``C_t`` counts the epochs trained small.

The observation reads the same counts as fractions of the largest reachable architecture's (params, and the
FLOPs it would have spent trained static for the steps so far), in [0, 1]. Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Reference:
    """The fixed references the costs and their observation features are relative to."""

    params: int
    """Parameters of the seedling (the episode's starting architecture)."""
    epoch_flops: float
    """Training FLOPs of one epoch of the seedling."""
    max_params: int
    """Parameters of the largest architecture the episode can grow to."""
    max_epoch_flops: float
    """Training FLOPs of one epoch of that architecture."""


def cost(params: float, train_flops: float, epochs: int, ref: Reference, flops_price: float,
         params_price: float) -> float:
    """``cost_t`` of the module docstring (accuracy fraction); 0 before the first epoch."""
    if epochs == 0:
        return 0.0
    return (flops_price * math.log2(train_flops / (epochs * ref.epoch_flops))
            + params_price * math.log2(params / ref.params))


def fractions(params: float, train_flops: float, epochs: int, ref: Reference) -> tuple[float, float]:
    """Params and training FLOPs as fractions of the largest architecture's (static for ``epochs`` epochs)."""
    flops = train_flops / (epochs * ref.max_epoch_flops) if epochs else 0.0
    return min(params / ref.max_params, 1.0), min(flops, 1.0)
