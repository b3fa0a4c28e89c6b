"""Rollout storage on the agent's device, and GAE.

Storage is env-major ``(num_envs, rollout_steps, ...)``, one row per sub-env holding its transitions in order
and contiguously: a NEXT_STEP reset step is never stored, so a row can end before ``rollout_steps`` and the
rest of it is padding (``valid`` False). The PPO update replays each row from the stored initial LSTM state
and resets the state at every stored ``episode_start``, which reproduces the rollout's forward exactly:
padding sits only at the end of a row, after every real step.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from esper_agent.policy import ActOutput, LSTMState


class Rollout(NamedTuple):
    obs: Tensor  # (N, T, obs_dim) float32: normalised observations the policy acted on
    actions: Tensor  # (N, T, num_heads) int64
    used_masks: Tensor  # (N, T, sum(head_sizes)) bool: the masks each head's distribution used
    log_probs: Tensor  # (N, T) joint log-prob at collection time
    values: Tensor  # (N, T) V(s) at collection time
    rewards: Tensor  # (N, T) raw env rewards
    terminated: Tensor  # (N, T) bool
    truncated: Tensor  # (N, T) bool
    episode_start: Tensor  # (N, T) bool: the LSTM state was reset before this step
    valid: Tensor  # (N, T) bool: a stored transition (False: padding at the end of a row)
    bootstrap_values: Tensor  # (N, T) V(terminal observation) where truncated, else 0
    last_values: Tensor  # (N,) V(observation after the row's last transition), used if it did not end
    initial_state: LSTMState  # (N, hidden) each: the state the rollout started from
    resets_inside: np.ndarray  # (N,) host bool: the row has an episode start after its first step


class Advantages(NamedTuple):
    advantages: Tensor  # (N, T), 0 on padding
    returns: Tensor  # (N, T): advantages + values, the critic's target


class RolloutStorage:
    """Preallocated per-env rows; ``add`` appends one transition to each selected row."""

    def __init__(self, num_envs: int, steps: int, obs_dim: int, head_sizes: tuple[int, ...], hidden_size: int,
                 device: torch.device | str) -> None:
        n, t, dev = num_envs, steps, torch.device(device)
        self.num_envs, self.steps, self.hidden_size, self.device = n, steps, hidden_size, dev
        self.obs = torch.zeros(n, t, obs_dim, device=dev)
        self.actions = torch.zeros(n, t, len(head_sizes), dtype=torch.long, device=dev)
        self.used_masks = torch.zeros(n, t, sum(head_sizes), dtype=torch.bool, device=dev)
        self.log_probs, self.values, self.rewards, self.bootstrap_values = (
            torch.zeros(n, t, device=dev) for _ in range(4))
        self.terminated, self.truncated, self.episode_start, self.valid = (
            torch.zeros(n, t, dtype=torch.bool, device=dev) for _ in range(4))
        self.initial_state = LSTMState(torch.zeros(n, hidden_size, device=dev), torch.zeros(n, hidden_size, device=dev))
        self.lengths = np.zeros(n, np.int64)  # host-side write positions: they come from host-side env flags
        self.resets_inside = np.zeros(n, bool)  # host: a row has an episode start after its first step

    def begin(self, initial_state: LSTMState) -> None:
        if initial_state.h.shape != (self.num_envs, self.hidden_size):
            raise ValueError(f"initial state shape {tuple(initial_state.h.shape)} does not match the storage's "
                             f"({self.num_envs}, {self.hidden_size}); hidden_size must be one value for both")
        self.initial_state.h.copy_(initial_state.h)
        self.initial_state.c.copy_(initial_state.c)
        # Zero everything, so that padding never carries a previous rollout's numbers.
        for tensor in (self.obs, self.actions, self.used_masks, self.log_probs, self.values, self.rewards,
                       self.bootstrap_values, self.terminated, self.truncated, self.episode_start, self.valid):
            tensor.zero_()
        self.lengths[:] = 0
        self.resets_inside[:] = False

    def add(self, rows: np.ndarray, obs: Tensor, out: ActOutput, flags: np.ndarray) -> None:
        """Append a transition to every row in ``rows`` (host bool (N,)).

        ``obs`` (N, obs_dim) and ``out`` are the step's full-batch device tensors; ``flags`` (N, 4) is the host
        array of reward, terminated, truncated and episode_start (the state was reset before this step).
        """
        index = np.flatnonzero(rows)
        if (self.lengths[index] >= self.steps).any():
            raise RuntimeError(f"rollout storage rows are full ({self.steps} steps)")
        self.resets_inside[index] |= (flags[index, 3] > 0) & (self.lengths[index] > 0)
        r = torch.as_tensor(index, device=self.device)
        c = torch.as_tensor(self.lengths[index], device=self.device)
        env = torch.as_tensor(flags[index], dtype=torch.float32, device=self.device)
        self.obs[r, c] = obs[r]
        self.actions[r, c] = out.action[r]
        self.used_masks[r, c] = out.used_mask[r]
        self.log_probs[r, c] = out.log_prob[r]
        self.values[r, c] = out.value[r]
        self.rewards[r, c] = env[:, 0]
        self.terminated[r, c] = env[:, 1] > 0
        self.truncated[r, c] = env[:, 2] > 0
        self.episode_start[r, c] = env[:, 3] > 0
        self.valid[r, c] = True
        self.lengths[index] += 1

    def set_bootstrap(self, rows: np.ndarray, values: Tensor) -> None:
        """Record V(terminal observation) for the last transition of each row in ``rows`` (host bool (N,))."""
        index = np.flatnonzero(rows)
        r = torch.as_tensor(index, device=self.device)
        c = torch.as_tensor(self.lengths[index] - 1, device=self.device)
        self.bootstrap_values[r, c] = values[r]

    def finish(self, last_values: Tensor) -> Rollout:
        """The stored rollout (views of the storage: valid until the next :meth:`begin`)."""
        return Rollout(self.obs, self.actions, self.used_masks, self.log_probs, self.values, self.rewards,
                       self.terminated, self.truncated, self.episode_start, self.valid, self.bootstrap_values,
                       last_values, self.initial_state, self.resets_inside.copy())


def next_values(rollout: Rollout) -> Tensor:
    """V(s_{t+1}) as seen by each transition: the next stored value, ``bootstrap_values`` on truncation (V(terminal
    obs) when the agent bootstraps truncations, else 0), 0 on termination, and the rollout's end value after a
    row's last transition."""
    values, valid = rollout.values, rollout.valid
    shifted = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], 1)
    next_valid = torch.cat([valid[:, 1:], torch.zeros_like(valid[:, :1])], 1)
    nxt = torch.where(next_valid, shifted, rollout.last_values.unsqueeze(1).expand_as(values))
    nxt = torch.where(rollout.truncated, rollout.bootstrap_values, nxt)
    return torch.where(rollout.terminated, torch.zeros_like(nxt), nxt)


def compute_gae(rollout: Rollout, rewards: Tensor, gamma: float, lam: float) -> Advantages:
    """Generalised advantage estimation (Schulman et al. 2016) over env-major rows with padding.

    ``rewards`` (N, T) are the (scaled) rewards to use. The recursion is cut at every episode end, whether
    terminated (no future) or truncated (the future is ``bootstrap_values``, already in ``next_values``).
    """
    deltas = rewards + gamma * next_values(rollout) - rollout.values
    deltas = torch.where(rollout.valid, deltas, torch.zeros_like(deltas))
    carry_on = (~(rollout.terminated | rollout.truncated)).float()
    advantages = torch.zeros_like(deltas)
    running = torch.zeros_like(deltas[:, 0])
    for t in reversed(range(deltas.shape[1])):
        running = deltas[:, t] + gamma * lam * carry_on[:, t] * running
        advantages[:, t] = running
    advantages = torch.where(rollout.valid, advantages, torch.zeros_like(advantages))
    return Advantages(advantages, advantages + rollout.values)


def concat_rollouts(rollouts: list[Rollout]) -> Rollout:
    """The rollouts' rows stacked into one new rollout (``N`` = the sum of theirs; each row keeps its own steps).
    Of one rollout, a copy that owns its memory: :meth:`RolloutStorage.finish` hands out views of the storage."""
    fields = []
    for parts in zip(*rollouts, strict=True):
        if isinstance(parts[0], LSTMState):
            fields.append(LSTMState(torch.cat([p.h for p in parts]), torch.cat([p.c for p in parts])))
        elif isinstance(parts[0], np.ndarray):
            fields.append(np.concatenate(parts))
        else:
            fields.append(torch.cat(parts))
    return Rollout(*fields)


def first_episode(rollout: Rollout) -> Tensor:
    """(N, T) bool: the stored steps of each row's first episode, the one its rollout reset started."""
    later_starts = rollout.episode_start.long().cumsum(1) - rollout.episode_start[:, :1].long()
    return rollout.valid & (later_starts == 0)


def subtract_group_baseline(advantages: Advantages, rollout: Rollout, group_size: int) -> Advantages:
    """Advantages relative to the other episodes of the same seed group, step by step.

    Rows ``g * group_size`` to ``(g + 1) * group_size - 1`` are episodes reset with one seed (the trainer's
    ``seed_group_size``); their first episodes start together, so step ``t`` of one is step ``t`` of the others.
    Each first-episode advantage loses the mean advantage of the group's other rows at the same step (leave one
    out: the others' episodes do not depend on this row's actions, so the gradient stays unbiased, while the
    seed's luck, common to the group, cancels). Steps of a later episode, or with no other row at that step,
    keep their advantage. The critic's targets (``returns``) are unchanged.
    """
    n, t = advantages.advantages.shape
    if group_size == 1:
        return advantages
    if group_size < 1 or n % group_size:
        raise ValueError(f"seed_group_size={group_size} must be >= 1 and divide the rollout's {n} rows")
    inside = first_episode(rollout).reshape(n // group_size, group_size, t)
    adv = advantages.advantages.reshape(n // group_size, group_size, t)
    own = torch.where(inside, adv, torch.zeros_like(adv))
    others_sum = own.sum(1, keepdim=True) - own
    others_count = inside.sum(1, keepdim=True) - inside.long()
    usable = inside & (others_count > 0)
    baseline = torch.where(usable, others_sum / others_count.clamp(min=1), torch.zeros_like(adv))
    return Advantages((adv - baseline).reshape(n, t), advantages.returns)


__all__ = ["Rollout", "Advantages", "RolloutStorage", "compute_gae", "concat_rollouts", "first_episode",
           "next_values", "subtract_group_baseline"]
