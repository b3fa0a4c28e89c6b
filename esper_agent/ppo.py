"""The PPO update on the joint factored action, over sequence minibatches.

One update = ``update_epochs`` passes; each pass shuffles the sub-envs and splits them into
``num_minibatches`` groups of *whole* env rows, replayed from their stored initial LSTM state (so the hidden
states are recomputed with the current weights, never stale). Per minibatch:

- joint log-ratio = sum over the heads relevant to the stored op (irrelevant heads add exactly 0), clamped to
  +-``LOG_RATIO_BOUND`` nats before ``exp`` so that one extreme step cannot make the minibatch's gradient NaN;
- one clipped surrogate on the joint ratio, with advantages normalised over the minibatch's valid steps;
- value loss 0.5 * MSE against the returns in normalised-reward units (no value clipping: the values are
  recomputed from scratch, so there is no stale prediction to clip against);
- entropy = sum over heads of the mean normalised entropy over the steps where that head was relevant and
  had >= 2 valid values (the availability-conditioned mean: a head that rarely matters is not diluted), or,
  with ``entropy_all_steps``, over every valid step (:func:`entropy_bonus` says why); with ``entropy_floor``,
  minus ``entropy_floor_coef`` times each head's entropy deficit below that floor (:func:`entropy_floor_bonus`);
- KL = mean((r - 1) - log r) on the joint ratio (Schulman's k3 estimator);
- given a :class:`Reference`, plus its weight times the mean over valid steps of KL(reference || policy),
  summed over heads (:func:`~esper_agent.distributions.factored_kl`); the trainer passes the frozen policy PPO
  started from and the weight ``reference_kl_coef`` (decayed over ``reference_kl_updates``). The term's
  gradient on a head's logits is the weight times (policy's probabilities - reference's): bounded, so a
  consistent advantage still moves the policy away from the reference, while advantages that only reflect the
  noise of a few episodes no longer drive a sharp policy into an absorbing choice, such as a seed that stopped
  planting right after imitation (docs/experiments/2026-11-27-best-window-and-reference-kl.md).

The host looks at each minibatch step once (loss, KL, pre-clip gradient norm in one transfer): a non-finite
loss or gradient skips the optimizer step (three in a row stop training), and a KL above ``target_kl`` ends the
update before that step is applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from esper_agent.buffer import Rollout
from esper_agent.config import AgentConfig
from esper_agent.distributed import SINGLE, SingleProcess
from esper_agent.distributions import factored_kl
from esper_agent.policy import LSTMState, RecurrentPolicy, SequenceEvaluation
from esper_env.spaces import HEAD_NAMES

SCALAR_STATS = ("loss/policy", "loss/value", "loss/entropy", "loss/total", "ppo/kl", "ppo/clip_fraction",
                "loss/reference_kl", "advantage/clipped_fraction", "ppo/ratio_max", "ppo/ratio_min")
"""Per minibatch step, averaged over the update's steps. ``ppo/clip_fraction``: the fraction of valid steps whose
joint ratio lies outside 1 +- clip_coef, on either side. ``advantage/clipped_fraction``: the fraction of valid steps
whose advantage the clip cut off, i.e. whose surrogate took the clipped branch (normalised advantage > 0 and ratio >
1 + clip_coef, or advantage < 0 and ratio < 1 - clip_coef), so that they gave no policy gradient: the share of the
rollout's learning signal the clip spent, where ``ppo/clip_fraction`` also counts ratios the clip let through."""
ADDITIVE_STATS = SCALAR_STATS[:8]
"""The scalars that are sums over steps divided by global counts: the ranks' shares add up (the ratio extremes
do not; the head entropy sums do, the head counts are global already)."""
_LOSS, _KL = SCALAR_STATS.index("loss/total"), SCALAR_STATS.index("ppo/kl")
_RATIO_MAX, _RATIO_MIN = SCALAR_STATS.index("ppo/ratio_max"), SCALAR_STATS.index("ppo/ratio_min")

LOG_RATIO_BOUND = 20.0
"""Bound on the joint log-ratio before ``exp`` (nats). One step whose stored log-prob is far below the current one (a
near-deterministic head that changed its mind, or a corrupted log-prob) would otherwise give a ratio of inf, and the
backward pass's inf * 0 turns the whole minibatch's gradient into NaN. 20 nats is a ratio of 4.9e8 (or 2e-9):
PPO clips at 1 +- clip_coef, and the KL early stop and the ratio anomaly check (anomaly_ratio_max) fire orders of
magnitude earlier, so no normal update comes near it and within it the clamp is the identity, bit for bit. A step
beyond it gives no gradient through its ratio (the clamp's derivative is 0 there) and reports the bound as its ratio."""


class TrainBatch(NamedTuple):
    rollout: Rollout
    advantages: Tensor  # (N, T)
    returns: Tensor  # (N, T)


class Reference(NamedTuple):
    """The policy the KL term of the PPO loss measures against, and the term's weight (per nat)."""

    policy: RecurrentPolicy
    weight: float


class MinibatchTerms(NamedTuple):
    loss: Tensor  # scalar, with gradients (under torchrun: this rank's share; the ranks' shares sum to the loss)
    kl: Tensor  # scalar, detached (this rank's share)
    stats: Tensor  # (len(SCALAR_STATS) + 2 * num_heads,) detached: scalars, head entropy sums, head counts


@dataclass
class NonFiniteGuard:
    """Counts non-finite minibatch steps in a row and stops training at ``limit``."""

    limit: int
    streak: int = 0

    def record(self, finite: bool) -> None:
        self.streak = 0 if finite else self.streak + 1
        if self.streak >= self.limit:
            raise RuntimeError(
                f"{self.streak} PPO minibatch steps in a row had a non-finite loss or gradient (limit "
                f"max_nonfinite_steps={self.limit}); training stopped. Check the env's rewards and observations "
                "for NaN/inf, and the anomalies logged in metrics.jsonl.")


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask, x, torch.zeros_like(x)).sum() / mask.sum().clamp(min=1)


def replay_rows(policy: RecurrentPolicy, rollout: Rollout, rows: Tensor) -> tuple[Tensor, Tensor, SequenceEvaluation]:
    """Replay the env rows ``rows`` (a CPU index tensor) of a rollout with gradients, from their stored initial
    LSTM state: the rows' index on the rollout's device, their valid-step mask and the evaluation."""
    index, state, resets_inside = _rows_start(rollout, rows)
    ev = policy.sequence(rollout.obs[index], rollout.episode_start[index], state, rollout.actions[index],
                         rollout.used_masks[index], resets_inside)
    return index, rollout.valid[index], ev


def _rows_start(rollout: Rollout, rows: Tensor) -> tuple[Tensor, LSTMState, bool]:
    """The rows' index on the rollout's device, their stored initial LSTM state and whether an episode starts
    inside them after t = 0."""
    resets_inside = bool(rollout.resets_inside[rows.numpy()].any())  # host flags: no device sync
    index = rows.to(rollout.valid.device)
    return index, LSTMState(rollout.initial_state.h[index], rollout.initial_state.c[index]), resets_inside


def reference_kl(reference: RecurrentPolicy, ev: SequenceEvaluation, rollout: Rollout, rows: Tensor) -> Tensor:
    """KL(reference || policy) per valid step of the rows (B, T), summed over heads, with ``ev`` the policy's
    replay of them. The reference replays from the rows' stored initial LSTM state, its policy's: exact where a
    rollout starts with new episodes (the trainer resets its envs at every rollout), as they zero the state."""
    index, state, resets_inside = _rows_start(rollout, rows)
    with torch.no_grad():
        ref_logits = reference.sequence_logits(rollout.obs[index], rollout.episode_start[index], state, resets_inside)
    return factored_kl(ref_logits, ev.factored, rollout.used_masks[index], rollout.actions[index],
                       reference.relevance).sum(-1)


def head_entropy_sums(ev: SequenceEvaluation, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Per head, the sum of normalised entropy and the count of the valid steps where the head mattered and had a
    choice: the availability-conditioned entropy is their ratio, which steps where the head had no say leave
    undiluted."""
    counted = ev.available & valid.unsqueeze(-1)  # (B, T, heads)
    return torch.where(counted, ev.entropy, torch.zeros_like(ev.entropy)).sum((0, 1)), counted.sum((0, 1)).float()


def entropy_bonus(head_sum: Tensor, head_count: Tensor, step_count: Tensor, cfg: AgentConfig) -> Tensor:
    """The entropy term of the loss, from each head's entropy sum and count (:func:`head_entropy_sums`) and the
    number of valid steps.

    By default each head's sum is divided by its own count, so a head gets the same weight however rarely it
    matters. Its policy-gradient term, though, is a mean over all steps: on the head-to-head's host the
    blueprint head matters on ~8% of steps, so its bonus was ~12x stronger relative to its learning signal than
    the op head's, and it pulled the head back to near uniform after imitation
    (docs/experiments/2026-11-27-imitation.md). With
    ``cfg.entropy_all_steps`` every head's sum is divided by the number of valid steps instead (a head counts 0
    where it does not matter): each head's bonus is in proportion to how often it acts, as in PPO on one
    joint categorical.
    """
    denominator = step_count if cfg.entropy_all_steps else head_count
    return (head_sum / denominator.clamp(min=1)).sum()


def entropy_floor_bonus(head_sum: Tensor, head_count: Tensor, global_head_sum: Tensor, floor: float) -> Tensor:
    """The entropy of the heads below ``floor``, to add to the loss's bonus: its gradient is the hinge
    ``sum over heads of max(0, floor - entropy)``'s, negated (:attr:`AgentConfig.entropy_floor`).

    Which heads are below is read from every rank's entropy sum (``global_head_sum``, detached) over the global
    counts; each rank then adds its own part of those heads' entropy, so that the ranks' gradients add up to the
    gradient of one process over the union of their minibatches, as every other term's do. A head without a
    choice on any step is never below."""
    counts = head_count.clamp(min=1)
    below = (head_count > 0) & (global_head_sum / counts < floor)
    return torch.where(below, head_sum / counts, torch.zeros_like(head_sum)).sum()


def minibatch_terms(policy: RecurrentPolicy, batch: TrainBatch, rows: Tensor, cfg: AgentConfig,
                    ranks: SingleProcess = SINGLE, reference: Reference | None = None) -> MinibatchTerms:
    """Losses and statistics for the env rows ``rows`` (a CPU index tensor) of the batch, with the KL term to
    ``reference`` when one with a weight above 0 is given.

    Means divide by counts over every rank's minibatch (``ranks.sum``; the identity in one process), so that
    the ranks' losses add up to the loss of one process over the union of their minibatches.
    """
    r = batch.rollout
    index, valid, ev = replay_rows(policy, r, rows)
    adv = batch.advantages[index]
    zero = torch.zeros_like(adv)
    count, adv_sum = ranks.sum(torch.stack([valid.sum().float(), torch.where(valid, adv, zero).sum()]))
    count = count.clamp(min=1)
    adv_mean = adv_sum / count

    head_sum, local_head_count = head_entropy_sums(ev, valid)
    squares = torch.where(valid, (adv - adv_mean) ** 2, zero).sum()
    heads = local_head_count.numel()
    global_counts = ranks.sum(torch.cat([squares.view(1), local_head_count, head_sum.detach()]))
    adv = (adv - adv_mean) / ((global_counts[0] / count).sqrt() + 1e-8)

    def mean(x: Tensor) -> Tensor:
        return torch.where(valid, x, torch.zeros_like(x)).sum() / count

    log_ratio = (ev.log_prob - r.log_probs[index]).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = log_ratio.exp()
    pg_loss = mean(torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)))
    v_loss = 0.5 * mean((ev.value - batch.returns[index]) ** 2)
    head_count, global_head_sum = global_counts[1:1 + heads], global_counts[1 + heads:]
    entropy = entropy_bonus(head_sum, head_count, count, cfg)
    floor = entropy_floor_bonus(head_sum, head_count, global_head_sum, cfg.entropy_floor)
    loss = pg_loss - cfg.ent_coef * entropy - cfg.entropy_floor_coef * floor + cfg.vf_coef * v_loss
    ref_kl = torch.zeros((), device=adv.device)
    if reference is not None and reference.weight > 0:
        ref_kl = mean(reference_kl(reference.policy, ev, r, rows))
        loss = loss + reference.weight * ref_kl

    with torch.no_grad():
        kl = mean((ratio - 1) - log_ratio)
        clip_fraction = mean(((ratio - 1).abs() > cfg.clip_coef).float())
        cut = ((adv > 0) & (ratio > 1 + cfg.clip_coef)) | ((adv < 0) & (ratio < 1 - cfg.clip_coef))
        advantage_clipped = mean(cut.float())
        ratio_max = torch.where(valid, ratio, torch.full_like(ratio, -math.inf)).max()
        ratio_min = torch.where(valid, ratio, torch.full_like(ratio, math.inf)).min()
        scalars = torch.stack([pg_loss, v_loss, entropy, loss, kl, clip_fraction, ref_kl, advantage_clipped,
                               ratio_max, ratio_min]).detach()
    return MinibatchTerms(loss, kl, torch.cat([scalars, head_sum.detach(), head_count]))


def group_grad_norms(groups: dict[str, list[nn.Parameter]]) -> Tensor:
    """L2 norm of the gradients of each parameter group, stacked on the device (no host sync)."""
    norms = []
    for params in groups.values():
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            norms.append(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))))
        else:
            norms.append(torch.zeros((), device=params[0].device))
    return torch.stack(norms)


def reduce_step(params: list[nn.Parameter], stats: Tensor, ranks: SingleProcess) -> Tensor:
    """Sum the gradients and the additive statistics over ranks in one all-reduce; returns the step's statistics
    as one process over every rank's minibatch would have computed them (ratio extremes stay per rank until
    :func:`summarize`). In one process: ``stats`` itself."""
    if ranks.world_size == 1:
        return stats
    n, heads = len(SCALAR_STATS), len(HEAD_NAMES)
    additive = torch.cat([stats[: len(ADDITIVE_STATS)], stats[n : n + heads]])
    sums = ranks.reduce_gradients(params, additive)
    return torch.cat([sums[: len(ADDITIVE_STATS)], stats[len(ADDITIVE_STATS) : n], sums[len(ADDITIVE_STATS) :],
                      stats[n + heads :]])


def ppo_update(policy: RecurrentPolicy, optimizer: torch.optim.Optimizer, batch: TrainBatch, cfg: AgentConfig,
               generator: torch.Generator, guard: NonFiniteGuard, ranks: SingleProcess = SINGLE,
               reference: Reference | None = None) -> dict[str, float]:
    """Run the K-epoch minibatch update; returns named statistics averaged over the steps it looked at.

    Under torchrun every rank shuffles its own env rows with the same generator state, and one minibatch step
    is the union of the ranks' minibatches: gradients, loss and KL are summed across ranks in one all-reduce
    (``ranks.reduce_gradients``) before anything is decided, so every rank skips, stops and steps alike.
    """
    num_envs = batch.rollout.valid.shape[0]
    groups = policy.parameter_groups()
    params = [p for p in policy.parameters() if p.requires_grad]
    records: list[Tensor] = []
    applied = skipped = 0
    stopped = False
    for _ in range(cfg.update_epochs):
        order = torch.randperm(num_envs, generator=generator)
        for index in torch.tensor_split(order, cfg.num_minibatches):
            terms = minibatch_terms(policy, batch, index, cfg, ranks, reference)
            optimizer.zero_grad(set_to_none=True)
            terms.loss.backward()
            stats = reduce_step(params, terms.stats, ranks)
            head_norms = group_grad_norms(groups)
            grad_norm = nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)  # returns the pre-clip norm
            loss, kl, norm = torch.stack([stats[_LOSS], stats[_KL], grad_norm]).tolist()  # sync: one per step
            finite = math.isfinite(loss) and math.isfinite(norm)
            guard.record(finite)
            if not finite:
                skipped += 1
                optimizer.zero_grad(set_to_none=True)
                continue
            records.append(torch.cat([stats, grad_norm.detach().view(1), head_norms]))
            if cfg.target_kl > 0 and kl > cfg.target_kl:
                stopped = True  # the policy already moved past the target: do not apply this step
                break
            optimizer.step()
            applied += 1
        if stopped:
            break
    optimizer.zero_grad(set_to_none=True)
    return summarize(records, list(groups), applied, skipped, stopped, ranks)


def empty_ppo_stats(group_names: list[str]) -> dict[str, float]:
    """The keys a PPO update reports, all NaN: what an update that is not a PPO update reports for them."""
    return {key: math.nan for key in summarize([], group_names, 0, 0, False)}


def summarize(records: list[Tensor], group_names: list[str], applied: int, skipped: int, stopped: bool,
              ranks: SingleProcess = SINGLE) -> dict[str, float]:
    """Means (max/min for extremes, over every rank) over the recorded minibatch steps, with one transfer to the
    host."""
    heads = len(HEAD_NAMES)
    out = {"ppo/steps_applied": float(applied), "ppo/nonfinite_steps": float(skipped),
           "ppo/early_stop": float(stopped)}
    nan = float("nan")
    if not records:
        out |= dict.fromkeys(SCALAR_STATS, nan) | {"ppo/kl_max": nan, "grad/norm_preclip": nan,
                                                   "grad/norm_preclip_max": nan}
        out |= {f"entropy/{h}": nan for h in HEAD_NAMES} | {f"grad/{g}": nan for g in group_names}
        return out
    table = torch.stack(records)
    n_scalar = len(SCALAR_STATS)
    kl_col, max_col, min_col, norm_col = _KL, _RATIO_MAX, _RATIO_MIN, n_scalar + 2 * heads
    head_entropy = table[:, n_scalar : n_scalar + heads].sum(0) / table[:, n_scalar + heads : norm_col].sum(0)
    extremes = ranks.max(torch.stack([table[:, max_col].max(), -table[:, min_col].min()]))  # the ratio's, global
    summary = torch.cat([table.mean(0), table[:, kl_col].max().view(1), extremes[:1], -extremes[1:],
                         table[:, norm_col].max().view(1), head_entropy])
    values = summary.cpu().tolist()  # sync: once per update
    means = values[: table.shape[1]]
    kl_max, ratio_max, ratio_min, norm_max = values[table.shape[1] : table.shape[1] + 4]
    out |= dict(zip(SCALAR_STATS, means[:n_scalar], strict=True))
    out |= {"ppo/ratio_max": ratio_max, "ppo/ratio_min": ratio_min, "ppo/kl_max": kl_max,
            "grad/norm_preclip": means[norm_col], "grad/norm_preclip_max": norm_max}
    # Conditional entropy: NaN for a head that was never relevant with a choice (0/0), not a false "collapse".
    out |= {f"entropy/{h}": v for h, v in zip(HEAD_NAMES, values[-heads:], strict=True)}
    out |= {f"grad/{g}": v for g, v in zip(group_names, means[norm_col + 1 :], strict=True)}
    return out


__all__ = ["ppo_update", "empty_ppo_stats", "minibatch_terms", "replay_rows", "Reference", "reference_kl",
           "head_entropy_sums", "entropy_bonus", "entropy_floor_bonus", "reduce_step", "TrainBatch", "NonFiniteGuard",
           "masked_mean", "SCALAR_STATS", "ADDITIVE_STATS", "LOG_RATIO_BOUND"]
