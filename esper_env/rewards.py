"""Rewards: pure functions of one step's measured consequences. No torch.

Mode ``"accuracy"`` (default), with A_t the validation accuracy (fraction), P_t the alpha-weighted parameters
of live and fossilized seeds, P_host the host's parameters and Phi the summed stage potentials of the slots::

    r_t = (A_t - A_{t-1}) - param_penalty * (P_t - P_{t-1}) / P_host
          + pbrs_weight * (pbrs_gamma * Phi_t - Phi_{t-1}) - op_cost * [op != WAIT] - invalid_action_penalty * [invalid]

so an episode's return telescopes to ``(A_T - A_0) - param_penalty * P_T / P_host`` plus the shaping sum (which
does not change the optimal policy when the agent's gamma equals ``pbrs_gamma``: Phi is taken as 0 after the
last step, so the discounted shaping sums to -Phi_0 = 0) minus the op costs. A_0 is the dataset's chance accuracy
(``DatasetSpec.chance_accuracy``, 0.1 on CIFAR-10), the first step's ``previous_accuracy``: the untrained host is
not measured at reset. With a ``param_budget`` B, the parameter cost ``param_penalty * P / P_host`` becomes
``(param_penalty * P + over_budget_penalty * max(0, P - B)) / P_host`` in every mode; it still telescopes.

Mode ``"contribution"`` replaces the accuracy delta by the counterfactual contributions of the seeds measured
this step (sum, in fractions) and, on the step a seed is pruned, minus its last measured contribution (pruning
a harmful seed earns what it was costing). Mode ``"sparse"`` pays only at the last step:
``clip(sparse_scale * (A_T - param_penalty * P_T / P_host), -sparse_clip, sparse_clip)`` (clipped *after*
scaling). The config requires ``sparse_clip >= sparse_scale`` in this mode: since A_T <= 1 the clip then bounds
only the parameter cost's side, and two final accuracies never earn the same saturated reward.

On the family host (``host="family"``) every mode also charges the growth cost ``cost_t`` of
:mod:`esper_env.costs` (training FLOPs and parameters, each priced per doubling over the static seedling's, by
``flops_price`` and ``params_price``): the dense modes subtract ``cost_t - cost_{t-1}`` each step, so the return
telescopes to ``(A_T - A_0) - cost_T`` (plus the terms above), and the sparse mode subtracts ``cost_T`` inside
the score. A_0 is then the chance accuracy of the classes in play (``EpisodeData.chance_accuracy``).

A governor rollback replaces the step's reward by ``-rollback_penalty`` in every mode, plus, in the dense modes,
the shaping term of a transition into a terminal state, ``-pbrs_weight * Phi_{t-1}``: the rollback ends the
episode, so without it the shaping of an episode with a rollback would no longer telescope to -Phi_0.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from esper_env.config import EnvConfig


class RewardInputs(NamedTuple):
    accuracy: float  # A_t, fraction
    previous_accuracy: float  # A_{t-1}
    seed_params: float  # P_t
    previous_seed_params: float  # P_{t-1}
    host_params: int  # P_host
    potential: float  # Phi_t
    previous_potential: float  # Phi_{t-1}
    contributions: tuple[float, ...]  # contributions measured this step (percentage points)
    pruned_contribution: float  # last contribution of a seed pruned by this step's op, 0 if none (pp)
    executed_op: bool  # a non-WAIT op was executed
    invalid: bool  # the action was invalid and executed as WAIT
    last_step: bool  # this step ends the episode by truncation
    rollback: bool  # the governor rolled the host back on this step
    cost: float = 0.0  # the family host's compute and size cost after this step (esper_env.costs; fraction)
    previous_cost: float = 0.0  # the same after the previous step (0 at reset)


def potential(stages: tuple[int, ...], cfg: EnvConfig) -> float:
    return float(sum(cfg.stage_potentials[s] for s in stages))


def step_reward(x: RewardInputs, cfg: EnvConfig) -> float:
    """The reward of one sub-env's step; finite for every config and every finite input."""
    if x.rollback:
        # the rollback ends the episode: Phi of the terminal state is 0 (see below), so only -Phi_{t-1} remains
        shaping = 0.0 if cfg.reward_mode == "sparse" else -cfg.pbrs_weight * x.previous_potential
        return _finite(shaping - cfg.rollback_penalty)
    param_cost = parameter_cost(x.seed_params, x.host_params, cfg)
    if cfg.reward_mode == "sparse":
        if not x.last_step:
            return 0.0
        score = cfg.sparse_scale * (x.accuracy - param_cost - x.cost)
        return _clip(score, cfg.sparse_clip)
    if cfg.reward_mode == "contribution":
        progress = (sum(x.contributions) - x.pruned_contribution) / 100.0
    else:
        progress = x.accuracy - x.previous_accuracy
    param_delta = param_cost - parameter_cost(x.previous_seed_params, x.host_params, cfg)
    # The episode's end is terminal for the task (its horizon is the host's training budget), and a terminal
    # state's potential is 0: otherwise the shaping would pay a bonus for the stages the seeds end in and would
    # no longer leave the optimal policy unchanged (Ng et al. 1999; the agent does not bootstrap truncations).
    potential_now = 0.0 if x.last_step else x.potential
    shaping = cfg.pbrs_weight * (cfg.pbrs_gamma * potential_now - x.previous_potential)
    costs = cfg.op_cost * x.executed_op + cfg.invalid_action_penalty * x.invalid
    growth = x.cost - x.previous_cost  # telescopes to the episode's compute and size cost
    return _finite(progress - param_delta - growth + shaping - costs)


def parameter_cost(seed_params: float, host_params: int, cfg: EnvConfig) -> float:
    """The reward's price of ``seed_params`` seed parameters (fraction of accuracy), budget hinge included."""
    over = 0.0 if cfg.param_budget is None else max(0.0, seed_params - cfg.param_budget)
    return _ratio(cfg.param_penalty * seed_params + cfg.over_budget_penalty * over, host_params)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else 0.0


def _clip(value: float, bound: float) -> float:
    return _finite(min(max(value, -bound), bound))


def _finite(value: float) -> float:
    """Guard against a non-finite measurement leaking into the reward (the governor handles the cause)."""
    return value if math.isfinite(value) else 0.0
