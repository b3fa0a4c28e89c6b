"""The recurrent actor-critic: encoder -> LayerNorm -> LSTM -> LayerNorm -> factored heads and V(s).

With ``lstm_skip`` the encoded observation is added to the LSTM's output before the second LayerNorm, a residual
path that lets the heads map the current observation to an action without going through the recurrent cell
(``AgentConfig.lstm_skip`` says what it did on the hidden-condition toy).

Two entry points share one recurrent cell:
- :meth:`RecurrentPolicy.step` takes one step for every sub-env during a rollout (no gradients);
- :meth:`RecurrentPolicy.sequence` replays whole stored sequences from their stored initial state for the PPO
  update, resetting the state wherever a stored step starts an episode, exactly as the rollout did.
The critic is an op-independent V(s): a baseline that depended on the sampled action would bias advantages.

With ``slot_conditioned`` the heads after the slot head (blueprint, blend, tempo) give one row of logits per
slot and the chosen slot's row is used: one autoregressive step more than the other heads take, whose masks
alone depend on the slot. Without it, every slot shares the blueprint logits of a state, so what is learned for
one slot may move the choice for another: the likely cause of one CIFAR-10 seed switching its first slot's
blueprint late in training (docs/experiments/2026-11-27-entropy-all-steps.md, seed 2). On the CPU check
(Esper-Synthetic-v0, 2 seeds; docs/experiments/2026-11-27-imitation.md) it did not help; it is off by default.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from esper_agent.config import AgentConfig
from esper_agent.distributions import (
    ActionMasks,
    FactoredEvaluation,
    defer_keep,
    evaluate_factored,
    sample_factored,
)
from esper_env import spaces


class LSTMState(NamedTuple):
    h: Tensor  # (B, hidden)
    c: Tensor  # (B, hidden)


class ActOutput(NamedTuple):
    action: Tensor  # (B, num_heads) int64
    used_mask: Tensor  # (B, sum(head_sizes)) bool
    log_prob: Tensor  # (B,) joint
    value: Tensor  # (B,)
    state: LSTMState  # after this step


class SequenceEvaluation(NamedTuple):
    log_prob: Tensor  # (B, T) joint log-prob of the stored actions
    entropy: Tensor  # (B, T, num_heads) normalised entropy, 0 for heads irrelevant to the stored op
    available: Tensor  # (B, T, num_heads) bool: head relevant and with >= 2 valid values
    value: Tensor  # (B, T)
    factored: FactoredEvaluation  # the per-head distributions behind the above (their log-probabilities)


def _mlp(width: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, out))


class RecurrentPolicy(nn.Module):
    """Factored recurrent actor-critic for ``MultiDiscrete(spaces.head_sizes(num_slots))`` actions."""

    def __init__(self, obs_dim: int, num_slots: int, hidden_size: int, wait_prior: float = 0.0,
                 prune_prior: float = 0.0, slot_conditioned: bool = False, lstm_skip: bool = False,
                 defer_keep: bool = False) -> None:
        super().__init__()
        if obs_dim < 1 or num_slots < 1:
            raise ValueError(f"obs_dim={obs_dim} and num_slots={num_slots} must both be >= 1")
        self.obs_dim, self.num_slots, self.hidden_size = obs_dim, num_slots, hidden_size
        self.head_sizes = spaces.head_sizes(num_slots)
        self.slot_conditioned, self.lstm_skip, self.defer_keep = slot_conditioned, lstm_skip, defer_keep
        self.encoder = nn.Sequential(nn.Linear(obs_dim, hidden_size), nn.LayerNorm(hidden_size), nn.ReLU())
        self.lstm = nn.LSTM(hidden_size, hidden_size, num_layers=1)
        self.core_norm = nn.LayerNorm(hidden_size)
        self.heads = nn.ModuleList(_mlp(hidden_size, size * self._rows(head))
                                   for head, size in enumerate(self.head_sizes))
        self.value_head = _mlp(hidden_size, 1)
        self.register_buffer("relevance", torch.as_tensor(spaces.relevance_matrix()), persistent=False)
        self._init_weights(wait_prior, prune_prior)

    @classmethod
    def from_config(cls, obs_dim: int, num_slots: int, config: AgentConfig) -> RecurrentPolicy:
        """The network an :class:`AgentConfig` describes: the one place that reads the config's network fields,
        so that training, resuming and evaluating a checkpoint build the same shapes."""
        return cls(obs_dim, num_slots, config.hidden_size, config.wait_prior, config.prune_prior,
                   config.slot_conditioned_heads, config.lstm_skip, config.defer_keep)

    def _init_weights(self, wait_prior: float, prune_prior: float) -> None:
        # Orthogonal init (Huang et al. 2022, "37 implementation details of PPO"): sqrt(2) for hidden layers,
        # 0.01 for policy outputs (near-uniform initial policy), 1.0 for the value output.
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.orthogonal_(module.weight, math.sqrt(2))
                nn.init.zeros_(module.bias)
        for head in self.heads:
            nn.init.orthogonal_(head[-1].weight, 0.01)
        nn.init.orthogonal_(self.value_head[-1].weight, 1.0)
        # Exploration priors (AgentConfig.wait_prior, prune_prior): a uniform op head prunes a young seed with
        # probability about 1/3 per step, so almost no planted seed lives long enough to pay, and GERMINATE
        # looks worthless before the blueprint and tempo heads can learn which plantings pay.
        with torch.no_grad():
            self.heads[spaces.Head.OP][-1].bias[spaces.Op.WAIT] = wait_prior
            self.heads[spaces.Head.OP][-1].bias[spaces.Op.PRUNE] = -prune_prior
        size = self.hidden_size
        for name, param in self.lstm.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)
        # Forget-gate bias 1 (gate order i, f, g, o), on bias_ih only: PyTorch adds bias_ih and bias_hh, so
        # filling both would make the effective bias 2.
        with torch.no_grad():
            self.lstm.bias_ih_l0[size : 2 * size].fill_(1.0)

    def initial_state(self, batch: int, device: torch.device | str | None = None) -> LSTMState:
        device = device if device is not None else self.relevance.device
        zeros = torch.zeros(batch, self.hidden_size, device=device)
        return LSTMState(zeros, zeros.clone())

    def _cell(self, features: Tensor, state: LSTMState, episode_start: Tensor) -> tuple[Tensor, LSTMState]:
        """One LSTM step from encoded ``features`` (B, hidden); the state is zeroed where an episode starts."""
        start = episode_start.unsqueeze(-1)
        # torch.where rather than a multiply by 0: a non-finite old state must not leak into a new episode.
        h = torch.where(start, torch.zeros_like(state.h), state.h)
        c = torch.where(start, torch.zeros_like(state.c), state.c)
        out, (h, c) = self.lstm(features.unsqueeze(0), (h.unsqueeze(0), c.unsqueeze(0)))
        return out[0], LSTMState(h[0], c[0])

    def core_step(self, obs: Tensor, state: LSTMState, episode_start: Tensor) -> tuple[Tensor, LSTMState]:
        """(B, obs_dim) -> core features (B, hidden) after the post-LSTM LayerNorm, and the next state."""
        encoded = self.encoder(obs)
        out, state = self._cell(encoded, state, episode_start)
        return self._core(out, encoded), state

    def _core(self, lstm_out: Tensor, encoded: Tensor) -> Tensor:
        """The heads' input: the LSTM's output, plus the encoded observation with ``lstm_skip``, normalised."""
        return self.core_norm(lstm_out + encoded if self.lstm_skip else lstm_out)

    def core_sequence(self, obs: Tensor, episode_start: Tensor, state: LSTMState, resets_inside: bool = True
                      ) -> tuple[Tensor, LSTMState]:
        """(B, T, obs_dim) -> core features (B, T, hidden), replayed from ``state``.

        With ``resets_inside`` False (no episode starts after t=0, e.g. whole-episode rollouts) the LSTM runs
        the sequence in one call; otherwise it steps through time, resetting the state where episodes start.
        """
        encoded = self.encoder(obs)
        if not resets_inside:
            start = episode_start[:, 0].unsqueeze(-1)
            h = torch.where(start, torch.zeros_like(state.h), state.h)
            c = torch.where(start, torch.zeros_like(state.c), state.c)
            out, (h, c) = self.lstm(encoded.transpose(0, 1), (h.unsqueeze(0), c.unsqueeze(0)))
            return self._core(out.transpose(0, 1), encoded), LSTMState(h[0], c[0])
        outputs = []
        for t in range(obs.shape[1]):
            out, state = self._cell(encoded[:, t], state, episode_start[:, t])
            outputs.append(out)
        return self._core(torch.stack(outputs, 1), encoded), state

    def _rows(self, head: int) -> int:
        """Rows of logits a head gives: one per slot for the heads after the slot head when slot-conditioned
        (what to plant may then depend on where), else one."""
        return self.num_slots if self.slot_conditioned and head > spaces.Head.SLOT else 1

    def head_logits(self, core: Tensor) -> list[Tensor]:
        """Each head's logits, (..., size), or (..., num_slots, size) for a slot-conditioned head (the chosen
        slot's row is taken in ``sample_factored`` and ``evaluate_factored``)."""
        out = []
        for head, (module, size) in enumerate(zip(self.heads, self.head_sizes, strict=True)):
            logits = module(core)
            out.append(logits.unflatten(-1, (self.num_slots, size)) if self._rows(head) > 1 else logits)
        return out

    def value(self, core: Tensor) -> Tensor:
        return self.value_head(core).squeeze(-1)

    @torch.no_grad()
    def step(
        self,
        obs: Tensor,
        masks: ActionMasks,
        state: LSTMState,
        episode_start: Tensor,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        given: Tensor | None = None,
    ) -> ActOutput:
        """One rollout step for a batch of sub-envs: sample (or argmax) a factored action and V(s); with ``given``
        (B, num_heads), a teacher's actions, score those instead (see ``sample_factored``). With ``defer_keep``
        FOSSILIZE is allowed only at each seed's keep deadline; the returned ``used_mask`` says so, and the
        update rebuilds the same distributions from it."""
        core, state = self.core_step(obs, state, episode_start)
        if self.defer_keep:
            masks = defer_keep(masks)
        sample = sample_factored(self.head_logits(core), masks, self.relevance, generator, deterministic, given)
        return ActOutput(sample.action, sample.used_mask, sample.log_prob, self.value(core), state)

    @torch.no_grad()
    def predict_value(self, obs: Tensor, state: LSTMState, episode_start: Tensor) -> Tensor:
        """V(obs) one step on from ``state`` (used to bootstrap truncated episodes and the rollout's end)."""
        core, _ = self.core_step(obs, state, episode_start)
        return self.value(core)

    def sequence(
        self, obs: Tensor, episode_start: Tensor, state: LSTMState, action: Tensor, used_mask: Tensor,
        resets_inside: bool = True,
    ) -> SequenceEvaluation:
        """Replay stored sequences (B, T, ...) with gradients: log-probs, entropies and values."""
        core, _ = self.core_sequence(obs, episode_start, state, resets_inside)
        factored: FactoredEvaluation = evaluate_factored(self.head_logits(core), used_mask, action, self.relevance)
        return SequenceEvaluation(factored.log_prob, factored.entropy, factored.available, self.value(core), factored)

    def sequence_logits(self, obs: Tensor, episode_start: Tensor, state: LSTMState, resets_inside: bool = True
                        ) -> list[Tensor]:
        """Each head's logits along stored sequences (B, T, ...), replayed from ``state``."""
        core, _ = self.core_sequence(obs, episode_start, state, resets_inside)
        return self.head_logits(core)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by component, for per-head gradient norms."""
        groups = {"encoder": list(self.encoder.parameters()) + list(self.core_norm.parameters()),
                  "lstm": list(self.lstm.parameters()), "value": list(self.value_head.parameters())}
        for name, head in zip(spaces.HEAD_NAMES, self.heads, strict=True):
            groups[name] = list(head.parameters())
        return groups


__all__ = ["RecurrentPolicy", "LSTMState", "ActOutput", "SequenceEvaluation"]
