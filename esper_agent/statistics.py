"""Per-update statistics of a rollout's values and advantages, over every rank's rollout, in one host transfer."""

from __future__ import annotations

import math

import torch

from esper_agent.buffer import Advantages, Rollout
from esper_agent.distributed import SINGLE, SingleProcess


def rollout_statistics(rollout: Rollout, advantages: Advantages, ranks: SingleProcess = SINGLE) -> dict[str, float]:
    """Over the valid steps of every rank's rollout:

    - ``value/explained_variance`` of the collection-time values, and ``value/std`` and ``value/returns_std``,
      the spreads the value-collapse check compares;
    - ``advantage/mean`` and ``advantage/std`` (population) of the GAE advantages the update learns from, in
      scaled-reward units, before PPO normalises them per minibatch: a mean far from 0 or a std that shrinks
      towards 0 says the critic, not the policy, is what the update is fitting (with ``seed_group_size`` > 1
      they are the group-relative advantages, whose mean is about 0 by construction).
    """
    valid, values, returns = rollout.valid, rollout.values, advantages.returns
    series = (returns, returns - values, values, advantages.advantages)
    zero = torch.zeros_like(values)
    first = ranks.sum(torch.stack([valid.sum().float(), *(torch.where(valid, x, zero).sum() for x in series)]))
    count = first[0].clamp(min=1)
    means = first[1:] / count
    squares = [torch.where(valid, (x - m) ** 2, zero).sum() for x, m in zip(series, means, strict=True)]
    returns_var, residual_var, values_var, advantages_var = ranks.sum(torch.stack(squares)) / count
    ev = torch.where(returns_var > 0, 1 - residual_var / returns_var, torch.full_like(returns_var, math.nan))
    summary = torch.stack([ev, values_var.sqrt(), returns_var.sqrt(), means[3], advantages_var.sqrt()])
    ev, v_std, r_std, a_mean, a_std = summary.tolist()  # sync: once per update
    return {"value/explained_variance": ev, "value/std": v_std, "value/returns_std": r_std,
            "advantage/mean": a_mean, "advantage/std": a_std}


__all__ = ["rollout_statistics"]
