"""Masked categorical distributions and the factored, op-first action.

Masking uses a large *finite* negative fill in float32 rather than -inf: exp() of it underflows to exactly 0,
so a masked value is never sampled, while ``0 * log p`` stays 0 instead of NaN and gradients stay finite.

The factored action follows ``esper_env.spaces``: the op is sampled first; the slot head is then masked by
``op_slot_mask[op]``; blueprint, blend and tempo read their slices of the flat mask, the blueprint also the
``blueprint_mask`` row of the sampled slot and the blend the ``blend_mask`` row of the sampled slot and blueprint,
when the env gives them (a hard parameter budget: a blueprint may fit where the same seed with a gate does not).
A head that does not matter for the sampled op (``HEAD_RELEVANCE``) gets a one-hot mask on the placeholder value
0: a distribution with one valid value has log-prob, entropy and KL exactly 0, and the head's terms are also
zeroed by the relevance table, so it contributes exactly nothing. The masks actually used are returned so that
the PPO update rebuilds the same distributions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from esper_env.spaces import Head, Op

MASK_FILL = -1e9
"""Logit given to masked values: finite, and far enough below any real logit that exp() underflows to 0."""
PLACEHOLDER = 0
"""Value emitted for a head that does not matter for the sampled op."""


def check_mask(mask: Tensor, name: str) -> None:
    """Raise if a row of ``mask`` allows nothing (a softmax over an all-masked row is silently uniform)."""
    empty = ~mask.any(-1)
    if bool(empty.any()):  # sync: validation on demand, never called on the per-step hot path
        rows = torch.nonzero(empty).flatten().tolist()[:8]  # sync: error path only
        raise ValueError(f"{name} mask allows no value in row(s) {rows}; every row needs at least one True")


class MaskedCategorical:
    """A categorical distribution over the True entries of a bool mask, computed in float32."""

    def __init__(self, logits: Tensor, mask: Tensor, *, validate: bool = True) -> None:
        if logits.shape != mask.shape:
            raise ValueError(f"logits shape {tuple(logits.shape)} != mask shape {tuple(mask.shape)}")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask dtype is {mask.dtype}; expected torch.bool")
        if validate:
            check_mask(mask, "action")
        self.mask = mask
        # float32 whatever the caller's dtype: low-precision softmax loses both probability mass and gradients.
        masked = torch.where(mask, logits.float(), torch.full_like(logits, MASK_FILL, dtype=torch.float32))
        self.log_probs = torch.log_softmax(masked, dim=-1)
        self.num_valid = mask.sum(-1)

    def log_prob(self, value: Tensor) -> Tensor:
        return self.log_probs.gather(-1, value.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> Tensor:
        """Entropy in nats over the valid values (masked ones have p = 0 and add exactly 0)."""
        plogp = torch.where(self.mask, self.log_probs.exp() * self.log_probs, torch.zeros_like(self.log_probs))
        return -plogp.sum(-1)

    def normalized_entropy(self) -> Tensor:
        """Entropy divided by log(#valid), in [0, 1]; exactly 0 when one value (or none) is valid."""
        several = self.num_valid >= 2
        log_n = torch.log(self.num_valid.clamp(min=2).float())
        return torch.where(several, self.entropy() / log_n, torch.zeros_like(log_n))

    def sample(self, generator: torch.Generator | None = None) -> Tensor:
        return torch.multinomial(self.log_probs.exp(), 1, generator=generator).squeeze(-1)

    def mode(self) -> Tensor:
        return self.log_probs.argmax(-1)


class ActionMasks(NamedTuple):
    """The masks an Esper env puts in ``info`` (numpy on the host, tensors on the agent's device)."""

    op_slot: Tensor  # (B, num_ops, num_slots) bool: which slots each op may target
    flat: Tensor  # (B, sum(head_sizes)) bool: op mask, then each other head's marginal mask
    blueprint: Tensor | None = None  # (B, num_slots, num_blueprints) bool: what GERMINATE may plant where; None = all
    blend: Tensor | None = None  # (B, num_slots, num_blueprints, num_blends) bool: the blends of each; None = all
    # (B, num_slots) bool: the slot's HOLDING seed may be kept now or never (info["holding_steps_left"] == 1);
    # None = the env does not say. Not a mask of the env's: AgentConfig.defer_keep narrows FOSSILIZE to it.
    keep_deadline: Tensor | None = None


def defer_keep(masks: ActionMasks) -> ActionMasks:
    """``masks`` with FOSSILIZE allowed only at each seed's keep deadline (``AgentConfig.defer_keep``). WAIT stays
    valid, so every row keeps a valid op."""
    if masks.keep_deadline is None:
        raise ValueError("defer_keep needs each slot's keep deadline, info['holding_steps_left'], which this env "
                         "does not report; expected an Esper env (or defer_keep=False)")
    op_slot = masks.op_slot.clone()
    op_slot[:, Op.FOSSILIZE] &= masks.keep_deadline
    return masks._replace(op_slot=op_slot)


class FactoredSample(NamedTuple):
    action: Tensor  # (B, num_heads) int64; irrelevant heads hold PLACEHOLDER
    used_mask: Tensor  # (B, sum(head_sizes)) bool: the mask each head's distribution actually used
    log_prob: Tensor  # (B,) joint log-prob: sum over the heads relevant to the sampled op


class FactoredEvaluation(NamedTuple):
    log_prob: Tensor  # (...,) joint log-prob of the given actions
    entropy: Tensor  # (..., num_heads) normalised entropy per head, 0 where the head is irrelevant
    available: Tensor  # (..., num_heads) bool: head relevant to the op and with >= 2 valid values
    log_probs: list[Tensor]  # per head (..., size_h): the log-probabilities of the distribution it used


def _one_hot_placeholder(batch: int, size: int, device: torch.device) -> Tensor:
    mask = torch.zeros(batch, size, dtype=torch.bool, device=device)
    mask[:, PLACEHOLDER] = True
    return mask


def slot_row(logits: Tensor, slot: Tensor) -> Tensor:
    """A head's logits for the chosen slot. A slot-conditioned head (``AgentConfig.slot_conditioned_heads``) gives
    ``logits`` (..., num_slots, size), one row per slot, and ``slot`` (...) picks the row; an unconditioned
    head's logits (..., size) pass through unchanged."""
    if logits.dim() == slot.dim() + 1:
        return logits
    index = slot.long()[..., None, None].expand(*slot.shape, 1, logits.shape[-1])
    return logits.gather(-2, index).squeeze(-2)


def sample_factored(
    logits: Sequence[Tensor],
    masks: ActionMasks,
    relevance: Tensor,
    generator: torch.Generator | None = None,
    deterministic: bool = False,
    given: Tensor | None = None,
) -> FactoredSample:
    """Sample op first, then the other heads under the masks the op implies.

    ``logits[h]`` is (B, size_h), or (B, num_slots, size_h) for a head after the slot head that has one row per
    slot (:func:`slot_row`), and ``relevance`` (num_ops, num_heads) bool. With ``given`` (B, num_heads), a
    teacher's actions, nothing is sampled: each head takes the given value (the placeholder where the given op
    ignores the head), under the masks the given op and slot imply, and the result scores it (used masks and
    joint log-prob), for imitation; a given value a mask rules out raises. The masks are assumed validated
    on the host (at least one op valid; a head's slice non-empty wherever an op that reads it is valid; for
    every slot GERMINATE may target, some blueprint allowed by both the flat slice and ``masks.blueprint``, and for
    each such blueprint some blend allowed by both the flat slice and ``masks.blend``).
    """
    sizes = [lg.shape[-1] for lg in logits]
    if given is not None:
        _check_given_range(given, sizes)
    flat = torch.split(masks.flat, sizes, dim=-1)
    batch, device = logits[0].shape[0], logits[0].device
    rows = torch.arange(batch, device=device)

    op_mask = masks.op_slot.any(-1) & flat[Head.OP]
    op_dist = MaskedCategorical(logits[Head.OP], op_mask, validate=False)
    op = _choose(op_dist, deterministic, generator, given, Head.OP)
    relevant = relevance[op]  # (B, num_heads)

    op_slot_of_op = masks.op_slot[rows, op]  # (B, num_slots): exactly the slots the sampled op may target
    actions, used, log_prob = [op], [op_mask], op_dist.log_prob(op)
    for head in range(1, len(logits)):
        wanted = op_slot_of_op if head == Head.SLOT else flat[head]
        if head == Head.BLUEPRINT and masks.blueprint is not None:
            # The slot head comes first, so the blueprint can be masked for the slot actually sampled. The mask
            # goes into ``used`` as it is, so evaluate_factored rebuilds this very distribution.
            wanted = wanted & masks.blueprint[rows, actions[Head.SLOT]]
        if head == Head.BLEND and masks.blend is not None:
            # Likewise the blend, for the slot and blueprint sampled: a gate adds parameters a budget may not hold.
            wanted = wanted & masks.blend[rows, actions[Head.SLOT], actions[Head.BLUEPRINT]]
        mask = torch.where(relevant[:, head : head + 1], wanted, _one_hot_placeholder(batch, sizes[head], device))
        head_logits = logits[head] if head <= Head.SLOT else slot_row(logits[head], actions[Head.SLOT])
        dist = MaskedCategorical(head_logits, mask, validate=False)
        value = _choose(dist, deterministic, generator, given, head)
        value = torch.where(relevant[:, head], value, torch.full_like(value, PLACEHOLDER))
        log_prob = log_prob + torch.where(relevant[:, head], dist.log_prob(value), torch.zeros_like(log_prob))
        actions.append(value)
        used.append(mask)
    action, used_mask = torch.stack(actions, -1), torch.cat(used, -1)
    if given is not None:
        _check_given(action, used_mask, sizes)
    return FactoredSample(action, used_mask, log_prob)


def _choose(dist: MaskedCategorical, deterministic: bool, generator: torch.Generator | None, given: Tensor | None,
            head: int) -> Tensor:
    if given is not None:
        return given[:, head].long()
    return dist.mode() if deterministic else dist.sample(generator)


def _check_given_range(given: Tensor, sizes: Sequence[int]) -> None:
    """Raise where a teacher's action has a value outside its head (it would index out of range, on CUDA fatally)."""
    high = torch.as_tensor(list(sizes), device=given.device)
    if given.shape[-1] != len(sizes) or not bool(((given >= 0) & (given < high)).all()):  # sync: imitation only
        raise ValueError(f"given actions of shape {tuple(given.shape)} must hold, per row, one value per head in "
                         f"[0, size) for head sizes {list(sizes)}; got rows such as {given[0].tolist()}")


def _check_given(action: Tensor, used_mask: Tensor, sizes: Sequence[int]) -> None:
    """Raise where a teacher's action has a value its head's mask rules out (it would score about -1e9)."""
    masks = torch.split(used_mask, list(sizes), dim=-1)
    allowed = torch.stack([m.gather(-1, action[:, h : h + 1]).squeeze(-1) for h, m in enumerate(masks)], -1)
    if not bool(allowed.all()):  # sync: only when imitating, where the actions come from the host anyway
        row, head = (int(i) for i in torch.nonzero(~allowed)[0].tolist())
        raise ValueError(f"the given action {action[row].tolist()} of row {row} has head {Head(head).name} = "
                         f"{int(action[row, head])}, which the action masks rule out; expected a valid action")


def evaluate_factored(
    logits: Sequence[Tensor], used_mask: Tensor, action: Tensor, relevance: Tensor
) -> FactoredEvaluation:
    """Joint log-prob, per-head normalised entropy and availability of stored actions under stored masks.

    Shapes: ``logits[h]`` (..., size_h) or, slot-conditioned, (..., num_slots, size_h); ``used_mask``
    (..., sum sizes); ``action`` (..., num_heads).
    """
    relevant = relevance[action[..., Head.OP]]  # (..., num_heads)
    log_prob = torch.zeros(action.shape[:-1], device=action.device)
    entropies, available = [], []
    dists = stored_distributions(logits, used_mask, action)
    for head, dist in enumerate(dists):
        rel = relevant[..., head]
        log_prob = log_prob + torch.where(rel, dist.log_prob(action[..., head]), torch.zeros_like(log_prob))
        entropies.append(torch.where(rel, dist.normalized_entropy(), torch.zeros_like(log_prob)))
        available.append(rel & (dist.num_valid >= 2))
    return FactoredEvaluation(log_prob, torch.stack(entropies, -1), torch.stack(available, -1),
                              [d.log_probs for d in dists])


def stored_distributions(logits: Sequence[Tensor], used_mask: Tensor, action: Tensor) -> list[MaskedCategorical]:
    """Each head's distribution along stored actions: under its stored mask and, for a slot-conditioned head, from
    the stored slot's row of logits. Shapes as in :func:`evaluate_factored`."""
    masks = torch.split(used_mask, [lg.shape[-1] for lg in logits], dim=-1)
    dists = []
    for head, (head_logits, mask) in enumerate(zip(logits, masks, strict=True)):
        if head > Head.SLOT:
            head_logits = slot_row(head_logits, action[..., Head.SLOT])
        dists.append(MaskedCategorical(head_logits, mask, validate=False))
    return dists


def factored_kl(reference_logits: Sequence[Tensor], evaluation: FactoredEvaluation, used_mask: Tensor,
                action: Tensor, relevance: Tensor) -> Tensor:
    """Per head, KL(reference || policy) in nats, the policy's distributions being those ``evaluation``
    (:func:`evaluate_factored` of the same stored actions and masks) used: (..., num_heads), 0 where a head does
    not matter for the stored op.

    The op head's term is the whole KL of the op distributions at every step; the other heads' are those of their
    distributions given the stored op (and, for a slot-conditioned head, the stored slot's row), i.e. the terms of
    the joint KL along the path the rollout took, as its log-ratio is.
    """
    relevant = relevance[action[..., Head.OP]]
    terms = []
    for head, (ref, q) in enumerate(zip(stored_distributions(reference_logits, used_mask, action),
                                        evaluation.log_probs, strict=True)):
        p = ref.log_probs
        kl = torch.where(ref.mask, p.exp() * (p - q), torch.zeros_like(p)).sum(-1)
        terms.append(torch.where(relevant[..., head], kl, torch.zeros_like(kl)))
    return torch.stack(terms, -1)


__all__ = [
    "MASK_FILL",
    "PLACEHOLDER",
    "MaskedCategorical",
    "ActionMasks",
    "defer_keep",
    "FactoredSample",
    "FactoredEvaluation",
    "check_mask",
    "sample_factored",
    "evaluate_factored",
    "factored_kl",
    "stored_distributions",
    "slot_row",
]
