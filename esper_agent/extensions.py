"""The trainer's four optional extensions to plain PPO, each off by default and each one class here.

- :class:`Imitation` (``imitation_updates``): the first updates let the heuristic act and fit the policy to its
  actions (:mod:`esper_agent.imitate`) in place of PPO's update; PPO then starts from fresh Adam moments.
- :class:`ReferenceKL` (``reference_kl_coef``): PPO's loss gains a KL term to a frozen copy of the policy PPO
  started from (:mod:`esper_agent.ppo`), its weight decayed over ``reference_kl_updates``.
- :class:`BestWindow` (``select_best_window``): the policy that collected the best window of rollouts is kept and
  handed out as the trained policy (:mod:`esper_agent.selection`).
- :class:`Replay` (``replay_rollouts``, ``proximal_ewma``): each PPO update also learns from the rollouts before
  the new one, re-scored by the proximal policy: the policy at the start of the update, or a running average of
  its parameters.

:class:`esper_agent.trainer.Trainer` calls them at named points of its loop (collect -> advantages -> update ->
log). With an extension off its calls change nothing, so with all four off the loop is plain PPO. Each holds the
state it adds to a checkpoint and reports the same metric keys in every update (NaN where it has nothing to say),
so that ``metrics.csv`` keeps one header.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from esper_agent.buffer import Rollout, concat_rollouts
from esper_agent.config import AgentConfig
from esper_agent.contracts import check_imitation_possible
from esper_agent.distributed import SingleProcess
from esper_agent.envs import VectorEnvDriver
from esper_agent.heuristic import HeuristicActor, env_host
from esper_agent.imitate import IMITATION_STATS, imitation_update
from esper_agent.normalize import ObservationNormalizer
from esper_agent.policy import LSTMState, RecurrentPolicy
from esper_agent.ppo import NonFiniteGuard, Reference, TrainBatch, empty_ppo_stats, replay_rows
from esper_agent.selection import BestPolicy, Snapshot, kept_policy, snapshot
from esper_env.averaging import WeightAverage


class Imitation:
    """The first ``config.imitation_updates`` updates imitate the heuristic instead of running PPO."""

    def __init__(self, config: AgentConfig, driver: VectorEnvDriver, ranks: SingleProcess) -> None:
        if config.imitation_updates:
            check_imitation_possible(config.imitation_updates, driver, ranks)
        self.config, self.updates, self.num_slots = config, config.imitation_updates, driver.num_slots
        self.host = env_host(driver.envs)  # the teacher plants from this host's blueprint catalogue

    def active(self, update_index: int) -> bool:
        """Whether update ``update_index`` (counted from 0) imitates rather than runs PPO."""
        return update_index < self.updates

    def teacher(self, update_index: int) -> HeuristicActor | None:
        """Who acts in this update's rollout: the heuristic while imitating, else None (the policy)."""
        return HeuristicActor(self.num_slots, host=self.host) if self.active(update_index) else None

    def gae_lambda(self, update_index: int) -> float:
        """While imitating, the critic is fitted to lambda-1 returns of the demonstration (see
        :mod:`esper_agent.imitate`), so the logged value and advantage statistics describe that target."""
        return 1.0 if self.active(update_index) else self.config.gae_lambda

    def learn(self, policy: RecurrentPolicy, optimizer: torch.optim.Optimizer, rollout: Rollout,
              returns: torch.Tensor, generator: torch.Generator, guard: NonFiniteGuard) -> dict[str, float]:
        """One imitation update; PPO's statistics (and the reference KL weight) are NaN in it."""
        return empty_ppo_stats(list(policy.parameter_groups())) | {"ppo/reference_kl_weight": math.nan} | (
            imitation_update(policy, optimizer, rollout, returns, self.config, generator, guard))

    def hand_over(self, optimizer: torch.optim.Optimizer, update_index: int) -> None:
        """Before the first PPO update after imitation: clear Adam's moments, which were those of another loss."""
        if self.updates > 0 and update_index == self.updates:
            optimizer.state.clear()

    @staticmethod
    def absent_stats() -> dict[str, float]:
        """What a PPO update reports for the imitation statistics."""
        return dict.fromkeys(IMITATION_STATS, math.nan)


def frozen_copy(policy: RecurrentPolicy) -> RecurrentPolicy:
    """A copy of the policy's network, without gradients. A deep copy gives the LSTM's weights separate storage;
    on CUDA, cuDNN would then warn and compact them on every call, so they are flattened into one chunk again
    (a no-op on the CPU)."""
    frozen = copy.deepcopy(policy).requires_grad_(False).eval()
    frozen.lstm.flatten_parameters()
    return frozen


class ReferenceKL:
    """The frozen policy PPO started from, and the weight of PPO's KL term to it in each update."""

    def __init__(self, config: AgentConfig) -> None:
        self.coef, self.decay_updates = config.reference_kl_coef, config.reference_kl_updates
        self.first_ppo_update = config.imitation_updates
        self.policy: RecurrentPolicy | None = None  # made at the first PPO update (never when the coef is 0)

    def weight(self, update_index: int) -> float:
        """The term's weight in PPO update ``update_index``: ``reference_kl_coef``, falling linearly to 0 over
        ``reference_kl_updates`` PPO updates when that is set."""
        if self.decay_updates == 0:
            return self.coef
        done = max(0, update_index - self.first_ppo_update)  # PPO updates before this one
        return self.coef * max(0.0, 1.0 - done / self.decay_updates)

    def for_update(self, policy: RecurrentPolicy, update_index: int) -> Reference | None:
        """The reference and its weight for this PPO update, or None when the term is off or weighs 0; the first
        call with the term on freezes ``policy`` as the reference."""
        if self.coef > 0 and self.policy is None:
            self.policy = frozen_copy(policy)
        weight = self.weight(update_index)
        return Reference(self.policy, weight) if self.policy is not None and weight > 0 else None

    def state_dict(self) -> dict[str, Any] | None:
        return None if self.policy is None else self.policy.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None, like: RecurrentPolicy) -> None:
        """Restore a saved reference (None: there was none yet) into a frozen copy of ``like``."""
        if state is not None:
            self.policy = frozen_copy(like)
            self.policy.load_state_dict(state)


class BestWindow:
    """With ``select_best_window`` > 0, a :class:`~esper_agent.selection.BestPolicy` scoring every PPO rollout;
    ``selection`` is None when the option is off."""

    def __init__(self, window: int) -> None:
        self.selection = BestPolicy(window) if window else None

    def candidate(self, policy: RecurrentPolicy, obs_norm: ObservationNormalizer, imitating: bool
                  ) -> Snapshot | None:
        """Before a rollout: a copy of the policy about to collect it, if that rollout will be scored (imitation
        rollouts are not: the heuristic acted in them)."""
        return snapshot(policy, obs_norm) if self.selection is not None and not imitating else None

    def observe(self, return_mean: float, update: int, candidate: Snapshot | None) -> None:
        """After the rollout: score it by its mean episode return (``update`` counted from 1)."""
        if self.selection is not None and candidate is not None:
            self.selection.observe(return_mean, update, candidate)

    def metrics(self) -> dict[str, float]:
        return {} if self.selection is None else self.selection.metrics()

    def handed_out(self, policy: RecurrentPolicy, obs_norm: ObservationNormalizer, device: torch.device
                   ) -> tuple[RecurrentPolicy, ObservationNormalizer]:
        """Copies of the kept policy and normaliser; without one (off, or no window finished yet) the given ones."""
        if self.selection is None or self.selection.best is None:
            return policy, obs_norm
        return kept_policy(self.selection.best, policy, obs_norm, device)

    def state_dict(self) -> dict[str, Any] | None:
        return None if self.selection is None else self.selection.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.selection is not None and state is not None:
            self.selection.load_state_dict(state)


def rescored(policy: RecurrentPolicy, batch: TrainBatch) -> tuple[TrainBatch, torch.Tensor]:
    """A batch for this update: its log-probs replaced by ``policy``'s (the proximal policy the ratio is clipped
    around) and its advantages weighted by min(1, pi_proximal / pi_behaviour) per step; and those weights
    (N, T), 0 on padding."""
    rollout = batch.rollout
    with torch.no_grad():
        _, valid, ev = replay_rows(policy, rollout, torch.arange(rollout.valid.shape[0]))
    proximal = torch.where(valid, ev.log_prob, rollout.log_probs)
    weight = torch.where(valid, (proximal - rollout.log_probs).exp().clamp(max=1.0), torch.zeros_like(proximal))
    return TrainBatch(rollout._replace(log_probs=proximal), batch.advantages * weight, batch.returns), weight


def _plain(batch: TrainBatch) -> dict[str, torch.Tensor]:
    """A held batch as named tensors on the CPU (a checkpoint loads with ``weights_only``)."""
    r = batch.rollout
    fields = {name: value for name, value in r._asdict().items() if name not in ("initial_state", "resets_inside")}
    tensors = fields | {"initial_h": r.initial_state.h, "initial_c": r.initial_state.c,
                        "resets_inside": torch.from_numpy(r.resets_inside), "advantages": batch.advantages,
                        "returns": batch.returns}
    return {name: value.detach().cpu() for name, value in tensors.items()}


def _from_plain(entry: dict[str, torch.Tensor], device: torch.device) -> TrainBatch:
    t = {name: value.to(device) for name, value in entry.items()}
    fields = {name: t[name] for name in Rollout._fields if name not in ("initial_state", "resets_inside")}
    rollout = Rollout(**fields, initial_state=LSTMState(t["initial_h"], t["initial_c"]),
                      resets_inside=entry["resets_inside"].numpy().copy())
    return TrainBatch(rollout, t["advantages"], t["returns"])


class Replay:
    """The batch each PPO update learns from, and the proximal policy its ratios are clipped around: with
    ``replay_rollouts`` > 1, the last rollouts' batches too; with ``proximal_ewma`` > 0, a running average of the
    policy's parameters (:class:`esper_env.averaging.WeightAverage`, the host's weight average) swapped into the
    policy while it re-scores."""

    def __init__(self, config: AgentConfig) -> None:
        self.size = config.replay_rollouts
        self.held: list[TrainBatch] = []  # oldest first, as collected (their own log-probs and advantages)
        self.average = WeightAverage(config.proximal_ewma) if config.proximal_ewma > 0 else None
        self.weight_mean = math.nan

    @property
    def on(self) -> bool:
        return self.size > 1 or self.average is not None

    def batch(self, policy: RecurrentPolicy, new: TrainBatch, config: AgentConfig
              ) -> tuple[TrainBatch, AgentConfig]:
        """The batch and config of this PPO update: ``new`` and ``config`` when both options are off; else the
        older held batches followed by ``new``, with ``num_minibatches`` per rollout. The proximal policy (the
        average, else ``policy``) re-scores the older batches, and ``new`` too when it is the average
        (:func:`rescored`). A copy of ``new`` is held for the next updates."""
        if not self.on:
            return new, config
        old = self.held[-(self.size - 1):] if self.size > 1 else []
        if self.size > 1:
            self.held = [*old, TrainBatch(concat_rollouts([new.rollout]), new.advantages.clone(), new.returns.clone())]
        to_score = old if self.average is None else [*old, new]  # new was collected by policy: its ratio starts at 1
        with self._proximal(policy):
            scored = [rescored(policy, b) for b in to_score]
        weights = [w[b.rollout.valid] for (_, w), b in zip(scored, to_score, strict=True)]
        self.weight_mean = float(torch.cat(weights).mean()) if weights else math.nan  # sync: once per update
        parts = [b for b, _ in scored] + ([new] if self.average is None else [])
        batch = TrainBatch(concat_rollouts([p.rollout for p in parts]), torch.cat([p.advantages for p in parts]),
                           torch.cat([p.returns for p in parts]))
        return batch, dataclasses.replace(config, num_minibatches=config.num_minibatches * len(parts))

    @contextmanager
    def _proximal(self, policy: RecurrentPolicy) -> Iterator[None]:
        """Within the block ``policy`` is the proximal policy: itself, or its average after this update's step
        towards it (the average starts at the policy at the first update)."""
        if self.average is None:
            yield
            return
        if self.average.params:
            self.average.update()
        else:
            self.average.track(list(policy.parameters()))
        with self.average.swapped_in():
            yield

    def metrics(self) -> dict[str, float]:
        """How many rollouts the last update learned from, and the mean importance weight over the valid steps
        re-scored (NaN with none)."""
        if not self.on:
            return {}
        return {"replay/rollouts": float(max(len(self.held), 1)), "replay/weight_mean": self.weight_mean}

    def state_dict(self) -> dict[str, Any] | None:
        if not self.on:
            return None
        tracking = self.average is not None and self.average.params
        average = [t.detach().cpu() for t in self.average.average] if tracking else None
        return {"held": [_plain(b) for b in self.held], "average": average}

    def load_state_dict(self, state: dict[str, Any] | None, policy: RecurrentPolicy) -> None:
        """Restore what :meth:`state_dict` saved, onto ``policy``'s device; the average tracks ``policy``'s
        parameters (already restored) again."""
        if not self.on or state is None:
            return
        if self.size > 1:
            device = next(policy.parameters()).device
            self.held = [_from_plain(entry, device) for entry in state["held"][-self.size:]]
        if self.average is not None and state["average"] is not None:
            self.average.track(list(policy.parameters()))
            with torch.no_grad():
                for mean, saved in zip(self.average.average, state["average"], strict=True):
                    mean.copy_(saved)


__all__ = ["BestWindow", "Imitation", "Replay", "ReferenceKL", "frozen_copy"]
