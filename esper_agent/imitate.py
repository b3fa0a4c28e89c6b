"""Imitation before PPO: fit the policy to a teacher's play and the critic to the teacher's returns.

Why it exists: on the head-to-head's host, PPO from scratch found the heuristic's kind of plan (a `conv_light`
seed blended in and fossilized) in 1 or 2 seeds of 5 within 16,000 host epochs
(docs/experiments/2026-11-27-compare-mask3424.md, 2026-11-27-compare-val5k-from-scratch.md), and the plans that
beat the heuristic differ from it only in timing and in what goes into the second slot
(2026-11-27-plans-at-the-heuristics-size.md). With
``AgentConfig.imitation_updates = n`` the first ``n`` updates of a run are imitation updates: the agent starts
from the heuristic's play, and PPO then has its whole remaining budget to improve on it rather than to find it.

One imitation update is one rollout in which ``esper_agent.heuristic`` acts and the policy only scores its actions
(the rollout is collected, normalised and counted in env steps exactly as PPO's are, so a budget in host epochs
includes the demonstrations), then ``imitation_epochs`` passes over it, each in ``num_minibatches`` minibatches of
whole env rows replayed from their initial LSTM state. Per minibatch:

- loss = mean over steps of -log pi(teacher's joint action | history) - ``ent_coef`` x entropy
  + ``vf_coef`` x 0.5 x (V - return)^2;
- the return is the lambda-1 return of the demonstration in scaled reward units (GAE with lambda 1: the
  Monte-Carlo discounted return when the rollout holds whole episodes, as with the default ``rollout_steps``;
  bootstrapped from the critic where the rollout cuts an episode), so PPO starts with a critic that already values
  the teacher's kind of play, and the first PPO advantages are not those of an untrained critic (which would push
  the imitated policy around at random);
- the entropy term is the one PPO uses. It does not keep a head whose teacher is deterministic from near-certainty:
  on the head-to-head's host the blueprint head's normalised entropy was 0.01-0.02 after 8 imitation updates, and
  PPO's bonus pulled it back up (docs/experiments/2026-11-27-imitation.md).

A minibatch step with a non-finite loss or gradient is skipped and counted by the same guard as PPO's
(``max_nonfinite_steps`` in a row stop training) and reported as ``ppo/nonfinite_steps``, which the anomaly check
reads. The optimizer's moments are cleared when PPO takes over (:class:`esper_agent.extensions.Imitation`): they are
those of another loss. Imitation runs in one process; under torchrun the trainer refuses it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from esper_agent.buffer import Rollout
from esper_agent.config import AgentConfig
from esper_agent.policy import RecurrentPolicy
from esper_agent.ppo import NonFiniteGuard, entropy_bonus, head_entropy_sums, masked_mean, replay_rows
from esper_env.spaces import HEAD_NAMES

IMITATION_STATS = ("imitation/nll", "imitation/action_prob", "imitation/value_loss")
"""The statistics an imitation update reports (NaN in PPO updates, so that every update has the same keys)."""


def _minibatch_loss(policy: RecurrentPolicy, rollout: Rollout, returns: Tensor, rows: Tensor, cfg: AgentConfig
                    ) -> tuple[Tensor, Tensor]:
    """The loss on env rows ``rows`` (CPU index) and its statistics: nll, action prob, value loss, then each
    head's entropy sum and count (over the steps where the head mattered and had a choice)."""
    index, valid, ev = replay_rows(policy, rollout, rows)
    nll = masked_mean(-ev.log_prob, valid)
    value_loss = 0.5 * masked_mean((ev.value - returns[index]) ** 2, valid)
    head_sum, head_count = head_entropy_sums(ev, valid)
    entropy = entropy_bonus(head_sum, head_count, valid.sum().float(), cfg)
    loss = nll - cfg.ent_coef * entropy + cfg.vf_coef * value_loss
    with torch.no_grad():
        stats = torch.cat([torch.stack([nll, masked_mean(ev.log_prob.exp(), valid), value_loss]), head_sum,
                           head_count])
    return loss, stats.detach()


def imitation_update(policy: RecurrentPolicy, optimizer: torch.optim.Optimizer, rollout: Rollout, returns: Tensor,
                     cfg: AgentConfig, generator: torch.Generator, guard: NonFiniteGuard) -> dict[str, float]:
    """``cfg.imitation_epochs`` passes of maximum likelihood on a demonstration rollout (the teacher's actions
    stored in ``rollout.actions``) and regression of V on ``returns`` (N, T); returns the mean statistics."""
    params = [p for p in policy.parameters() if p.requires_grad]
    num_envs, heads = rollout.valid.shape[0], len(HEAD_NAMES)
    records, skipped = [], 0
    for _ in range(cfg.imitation_epochs):
        order = torch.randperm(num_envs, generator=generator)
        for rows in torch.tensor_split(order, cfg.num_minibatches):
            loss, stats = _minibatch_loss(policy, rollout, returns, rows, cfg)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            finite = math.isfinite(float(loss.detach())) and math.isfinite(float(norm))  # sync: once per step
            guard.record(finite)
            if not finite:
                skipped += 1
                continue
            optimizer.step()
            records.append(torch.cat([stats, norm.detach().view(1)]))
    optimizer.zero_grad(set_to_none=True)
    out = dict.fromkeys(IMITATION_STATS, math.nan) | {"ppo/nonfinite_steps": float(skipped)}
    if not records:
        return out | {f"entropy/{h}": math.nan for h in HEAD_NAMES}
    table = torch.stack(records)
    means = table[:, :3].mean(0).tolist()
    entropy = (table[:, 3 : 3 + heads].sum(0) / table[:, 3 + heads : 3 + 2 * heads].sum(0)).tolist()  # NaN: unused
    return out | dict(zip(IMITATION_STATS, means, strict=True)) | {"grad/norm_preclip": float(table[:, -1].mean())} | {
        f"entropy/{h}": v for h, v in zip(HEAD_NAMES, entropy, strict=True)}


__all__ = ["imitation_update", "IMITATION_STATS"]
