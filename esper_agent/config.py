"""The agent's one configuration object.

Every knob of the PPO agent is a field of the frozen :class:`AgentConfig`, documented by the docstring that
follows it (with its unit). ``python -m esper_agent.train`` turns each field into one CLI flag whose help text
is that docstring (:func:`field_help`), so a default or a description lives in exactly one place.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
from dataclasses import dataclass
from functools import cache
from typing import Any

# The env's config already turns numpy scalars into Python values by field annotation; one rule for both configs.
from esper_env.config_types import matches, plain_value


@dataclass(frozen=True)
class AgentConfig:
    """Configuration of the factored recurrent PPO agent."""

    # --- returns and advantages -------------------------------------------------------------------------
    gamma: float = 0.995
    """Discount per env step (unitless, in (0, 1]); must equal the env's pbrs_gamma when PBRS is on."""
    gae_lambda: float = 0.95
    """GAE lambda (unitless, in [0, 1]): 0 = one-step TD advantages, 1 = Monte-Carlo returns."""
    seed_group_size: int = 1
    """Sub-envs that share one reset seed in each rollout (count, >= 1, dividing num_envs; 1 = every sub-env
    its own seed). With G > 1 the G episodes of a group start from the same host weights, data order and hidden
    condition and differ only by the actions sampled, and each step of those first episodes has its advantage
    taken relative to the mean advantage of the group's other episodes at the same step (a leave-one-out
    baseline, as in RLOO or GRPO): the luck of the seed and the condition, which the critic cannot see at the
    start, cancels, at the price of adding the others' own noise (its variance times 1/(G-1)), and there are
    num_envs/G distinct seeds per rollout instead of num_envs. The policy never sees the seed; only training
    groups by it. Demonstrations (imitation_updates) keep one seed per sub-env."""
    bootstrap_truncation: bool = False
    """Bootstrap a truncated episode from V(final observation), as for a time limit cutting an endless task.
    Off by default: an Esper episode is truncated at its fixed, observed horizon (max_epochs), after which the
    task has no future, and the critic, never trained on a state past the end, only extrapolates there; with
    it on, agents on Esper-Synthetic-v0 learned to grow and then unlearned it
    (docs/experiments/2026-11-26-agent-learns-to-grow-synthetic.md)."""

    # --- rollout and network ----------------------------------------------------------------------------
    rollout_steps: int = 25
    """Env steps per sub-env per update (steps); equal to the episode length, a rollout holds whole episodes
    (``python -m esper_agent.train`` sets it to an Esper env's ``max_epochs`` unless given; 25 is the small task's)."""
    hidden_size: int = 128
    """Width of the encoder, the LSTM state and the head MLPs (units, even, >= 8; 128-256 recommended)."""
    slot_conditioned_heads: bool = False
    """Give the blueprint, blend and tempo heads one row of logits per slot and use the chosen slot's row, so
    what to plant can depend on where; off, they give one row for every slot (only the masks depend on it)."""
    lstm_skip: bool = False
    """Add the encoded observation to the LSTM's output before the post-LSTM LayerNorm (a residual path around
    the LSTM), so that the heads and the critic read the current observation directly. On the hidden-condition
    toy with GERMINATE allowed only once the condition shows, the argmax policy read it after 20 updates instead
    of 60 (medians of 10 seeds); with free timing, no sooner (the toy's notebook, 2026-12-06). With the condition
    that needs the decision one episode in twelve it did worse than without: 3 of 10 seeds read in 300 updates
    against 10 (docs/experiments/2026-12-06-informed-undo.md). Off by default: not measured on the growth task."""
    wait_prior: float = 0.0
    """Initial bias added to WAIT's logit in the op head (nats, >= 0); 0 = uniform over the valid ops."""
    prune_prior: float = 0.0
    """Initial bias subtracted from PRUNE's logit in the op head (nats, >= 0): 2 (with wait_prior 0) makes PRUNE
    about e^2 times less likely than each other op, so a planted seed usually lives long enough to be judged."""
    defer_keep: bool = False
    """Let the policy FOSSILIZE a seed only at its keep deadline, the last step before the holding timeout would
    prune it (the env's ``info["holding_steps_left"]`` is 1). Until then a HOLDING seed trains on at full
    strength and the choices are WAIT and PRUNE; at the deadline, FOSSILIZE or let it go. A keep cannot be undone,
    and on the growth task the harm of capacity where it costs (``pool5k-noise40``) shows only after the keeps
    esper_agent-e3 makes: its validation curve turns after epoch 6, and it kept after epochs 3 to 8, most after 4
    and 5 (docs/experiments/2026-12-06-replay.md, section 7). Deferring lets the policy see the turn before it
    commits, at the price of a slot that stays busy longer (a family slot grows again only after its seed
    joins). A prior in the masks, as ``wait_prior`` is one in the logits. On the hidden-condition toy that allows
    the keep before the condition shows, with the costing condition one episode in twelve, e3 learned to hold back
    on 0 of 10 held-out seeds in 100 updates, and with ``defer_keep`` and ``replay_rollouts`` 8 on 10 of 10 by
    update 50 (declared; docs/experiments/2026-12-06-deferred-keep.md). On the growth task's tuning seeds
    (``Esper-CIFAR10-Fast-v0``) it scored 1.22 points of return under a same-card e3 rerun, about what two runs of
    e3 differ by (the same notebook, section 6). Needs an env that reports ``holding_steps_left`` (Esper's do); not
    with ``imitation_updates`` (the heuristic keeps earlier)."""

    # --- PPO update -------------------------------------------------------------------------------------
    update_epochs: int = 4
    """Passes over each rollout per update (epochs, K)."""
    num_minibatches: int = 2
    """Minibatches per epoch (count); each is a subset of whole env sequences, so at most num_envs."""
    clip_coef: float = 0.2
    """Clip range of the joint probability ratio (unitless)."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus (per unit of normalised entropy, summed over the five heads)."""
    entropy_all_steps: bool = False
    """Average each head's normalised entropy in the bonus over all steps (0 where the head does not matter),
    so a head's bonus is in proportion to how often it acts, like its policy-gradient term; off, over only the
    steps where the head matters (a rarely used head's entropy is not diluted by steps where it has no say), so a
    head used on one step in twelve gets as much bonus as the op head. With it on, PPO kept what imitation taught
    (docs/experiments/2026-11-27-entropy-all-steps.md)."""
    entropy_floor: float = 0.0
    """Each head's normalised entropy over the steps where it had a choice (``entropy/<head>`` in the telemetry)
    is held at or above this floor (0..1; 0 = off): while a head is below it, the loss gains
    ``entropy_floor_coef`` times that head's entropy deficit. Unlike a larger ``ent_coef``, it leaves a head
    that still explores alone and only stops a collapse: on the CPU stand-in with a hidden mixture
    (``condition="mixture:full,classes2"``), one seed's op head fell from 0.79 to 0.02 normalised entropy in 13
    updates and never germinated again, so the returns could no longer show which growth pays where
    (docs/experiments/2026-11-29-h2h-v2-pilot.md)."""
    entropy_floor_coef: float = 1.0
    """Weight of the entropy floor's hinge (per unit of normalised entropy below ``entropy_floor``, per head)."""
    reference_kl_coef: float = 0.0
    """Weight of KL(reference || policy) in the PPO loss (per nat, summed over heads, averaged over valid steps;
    0 = off). The reference is the policy PPO started from, frozen: with imitation_updates, the imitated
    heuristic. Like the KL to the supervised model in RLHF's PPO, or kickstarting's distillation term, it holds
    PPO near what imitation taught wherever the returns give no consistent reason to move (esper_agent.ppo)."""
    reference_kl_updates: int = 0
    """PPO updates over which the KL term's weight falls linearly from reference_kl_coef to 0 (updates, >= 0;
    0 = constant), as kickstarting's distillation weight decays: the reference then guards the first updates
    after imitation, where seeds stopped planting, and leaves the rest of training to the returns."""
    vf_coef: float = 0.5
    """Weight of the value loss, 0.5 * MSE on normalised returns (unitless)."""
    learning_rate: float = 3e-4
    """Adam step size (per update step)."""
    anneal_lr: bool = False
    """Anneal the learning rate linearly to 0 over --total-updates."""
    adam_eps: float = 1e-5
    """Adam epsilon (unitless)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip (L2 norm of all gradients); the pre-clip norm is logged."""
    target_kl: float = 0.02
    """Stop the update once the joint KL of a minibatch exceeds this (nats per step); 0 = never stop."""
    replay_rollouts: int = 1
    """Rollouts each PPO update learns from: the new one and the ``replay_rollouts - 1`` before it (count, >= 1;
    1 = plain PPO). At the start of an update the policy as it stands (the proximal policy) re-scores the older
    rollouts' actions: their clipped ratio is taken against it, and each of their steps' advantages is weighted
    by min(1, pi_proximal / pi_behaviour), the truncated importance weight against the policy that collected
    the step (the decoupled objective of Hilton, Cobbe and Schulman, 2022, for sample reuse as in GePPO,
    Queeney et al., 2021). A rollout keeps the advantages, critic targets and normalised observations it had
    when collected. Each epoch has ``num_minibatches`` minibatches per rollout held, so a minibatch keeps its
    size. A decision that matters in one episode in twelve then keeps shaping the policy for several updates
    instead of one. On the hidden-condition toy with the costing condition one episode in twelve
    (``undo-deadline-rare9``), 8 rollouts with ``target_kl`` 0 read it by update 50 on 10 of 10 held-out seeds,
    against 0 of 10 without. On the growth task's tuning seeds (``Esper-CIFAR10-Fast-v0``, 100 and 101) the same
    configuration's op head collapsed by update 20 and it scored 49.87 against e3's 54.84 (52.01 with
    ``target_kl`` kept; 52.35 and 51.10 with ``entropy_floor`` 0.3 and 0.5, which stop the collapse but not the
    plant-and-prune churn): off by default (docs/experiments/2026-12-06-replay.md)."""
    proximal_ewma: float = 0.0
    """Decay per PPO update of an exponentially weighted average of the policy's parameters that serves as the
    proximal policy (in [0, 1); 0 = off: the policy at the update's start, as in plain PPO). At the start of each
    update the average moves towards the policy (average = decay * average + (1 - decay) * policy; at the first
    update it is a copy) and re-scores every rollout of the update, the new one too: each ratio is clipped
    around the average, and each step's advantage is weighted by min(1, pi_average / pi_behaviour). This is
    PPO-EWMA (Hilton, Cobbe and Schulman, 2022): however many optimiser steps an update takes, the clipped
    objective stops rewarding moves further than the clip range from the policy's recent average. It is meant
    for ``replay_rollouts`` with ``target_kl`` 0, whose 64 steps per update churned on the growth task; a
    ``target_kl`` above 0 also measures from the average, so an update can stop before its first step. On the
    hidden-condition toy (``undo-deadline-rare9``) replay of 8 with decay 0.75 read the costing condition by
    update 50 on 9 of 10 held-out seeds, as replay alone did. On the task's tuning seeds it curbed replay's churn
    without removing it, and scored below esper_agent-e3, with replay and without
    (docs/experiments/2026-12-06-replay.md, section 6)."""

    # --- imitation before PPO (esper_agent.imitate) ---------------------------------------------------------
    imitation_updates: int = 0
    """Updates that imitate esper_agent.heuristic before PPO takes over (updates, >= 0; 0 = learn from scratch):
    each collects a rollout in which the heuristic acts, counted in env steps like any other, and fits the policy
    to its actions and the critic to its returns."""
    imitation_epochs: int = 10
    """Passes over each imitation rollout (epochs)."""

    # --- normalisers ------------------------------------------------------------------------------------
    normalize_obs: bool = True
    """Normalise observations by a running mean/std, frozen within a rollout, updated once per rollout."""
    obs_clip: float = 10.0
    """Clip of normalised observations (standard deviations)."""
    normalize_reward: bool = True
    """Divide rewards by the running std of discounted returns (updated once per rollout)."""
    reward_clip: float = 10.0
    """Clip of scaled rewards (reward units after scaling)."""

    # --- anomaly checks ---------------------------------------------------------------------------------
    anomaly_ratio_max: float = 10.0
    """Flag ratio explosion when a joint probability ratio exceeds this (unitless)."""
    anomaly_ratio_min: float = 0.1
    """Flag ratio collapse when a joint probability ratio falls below this (unitless)."""
    anomaly_entropy_min: float = 0.01
    """Flag entropy collapse of a head whose conditional normalised entropy is below this (0..1)."""
    anomaly_kl_max: float = 0.2
    """Flag a KL spike when a minibatch's joint KL exceeds this (nats per step)."""
    anomaly_value_std_ratio: float = 0.01
    """Flag value collapse when std(values) < this * std(returns) (unitless)."""
    max_nonfinite_steps: int = 3
    """Stop training after this many non-finite minibatch losses in a row (count)."""

    # --- which policy training hands out (esper_agent.selection) ------------------------------------------
    select_best_window: int = 0
    """Also keep the policy that collected the best mean episode return over this many consecutive PPO rollouts
    (updates, >= 0; 0 = off), and hand it out as the trained policy (checkpoints hold both): the returns are
    the training episodes', so choosing costs no env steps and never sees test data."""

    # --- run --------------------------------------------------------------------------------------------
    checkpoint_interval: int = 10
    """Write a checkpoint every this many updates (updates); the last update is always saved."""

    def __post_init__(self) -> None:
        _plain_numbers(self)
        _validate(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> AgentConfig:
        """Build a config from a plain dict (a checkpoint's or config.json's), rejecting unknown keys. A field
        missing from the dict takes the value it had before it existed (:data:`LEGACY_VALUES`): dicts are
        written whole by :meth:`to_dict`, so a missing key means an older file."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown AgentConfig field(s) {unknown}; expected some of {sorted(known)}")
        return cls(**(LEGACY_VALUES | values))


LEGACY_VALUES: dict[str, Any] = {"bootstrap_truncation": True}
"""What a run did before the field existed, for fields whose default is not that: runs before
``bootstrap_truncation`` bootstrapped every truncation."""


_UNIT_INTERVAL_OPEN_LOW = ("gamma",)
_UNIT_INTERVAL = ("gae_lambda", "anomaly_entropy_min", "entropy_floor")
_POSITIVE_INT = ("seed_group_size", "rollout_steps", "update_epochs", "num_minibatches", "max_nonfinite_steps",
                 "checkpoint_interval", "imitation_epochs", "replay_rollouts")
_POSITIVE = ("clip_coef", "learning_rate", "adam_eps", "max_grad_norm", "obs_clip", "reward_clip",
             "anomaly_ratio_max", "anomaly_kl_max")
_NON_NEGATIVE = ("ent_coef", "entropy_floor_coef", "reference_kl_coef", "vf_coef", "target_kl", "anomaly_ratio_min",
                 "anomaly_value_std_ratio", "wait_prior", "prune_prior")
_NON_NEGATIVE_INT = ("imitation_updates", "select_best_window", "reference_kl_updates")


def _plain_numbers(cfg: AgentConfig) -> None:
    """Numpy scalars of a field's kind become Python values, so that sweeps built with numpy work and config.json
    and checkpoints hold plain JSON types: an int field takes numpy integers, a float field numpy integers and
    floats; a bool field takes no numpy scalar (``np.bool_`` is then refused by the type check)."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        plain = plain_value(value, str(f.type))
        if plain is not value:
            object.__setattr__(cfg, f.name, plain)  # frozen: __post_init__ is the one place a field is normalised


def _validate(cfg: AgentConfig) -> None:
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if not matches(value, str(f.type)):
            raise TypeError(f"{f.name}={value!r} has type {type(value).__name__}; expected {f.type}")
    for name in _UNIT_INTERVAL_OPEN_LOW:
        _require(cfg, name, 0.0 < getattr(cfg, name) <= 1.0, "a float in (0, 1]")
    for name in _UNIT_INTERVAL:
        _require(cfg, name, 0.0 <= getattr(cfg, name) <= 1.0, "a float in [0, 1]")
    for name in _POSITIVE_INT:
        _require(cfg, name, getattr(cfg, name) >= 1, "an integer >= 1")
    for name in _POSITIVE:
        _require(cfg, name, math.isfinite(getattr(cfg, name)) and getattr(cfg, name) > 0, "a finite float > 0")
    for name in _NON_NEGATIVE_INT:
        _require(cfg, name, getattr(cfg, name) >= 0, "an integer >= 0")
    for name in _NON_NEGATIVE:
        _require(cfg, name, math.isfinite(getattr(cfg, name)) and getattr(cfg, name) >= 0, "a finite float >= 0")
    # The rollout storage's hidden state and the network share this one field; the LSTM and the head MLPs need
    # a width that is even and not degenerate.
    _require(cfg, "hidden_size", cfg.hidden_size >= 8 and cfg.hidden_size % 2 == 0, "an even integer >= 8")
    _require(cfg, "anomaly_ratio_min", cfg.anomaly_ratio_min < 1.0 < cfg.anomaly_ratio_max,
             "anomaly_ratio_min < 1 < anomaly_ratio_max")
    _require(cfg, "proximal_ewma", 0.0 <= cfg.proximal_ewma < 1.0, "a float in [0, 1)")
    _require(cfg, "defer_keep", not (cfg.defer_keep and cfg.imitation_updates),
             "False while imitation_updates > 0 (the heuristic it imitates keeps before the deadline)")
    _require(cfg, "reference_kl_updates", cfg.reference_kl_updates == 0 or cfg.reference_kl_coef > 0,
             "0 while reference_kl_coef is 0 (there is no KL term to decay)")


def _require(cfg: AgentConfig, name: str, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"AgentConfig.{name}={getattr(cfg, name)!r} is out of range; expected {expected}")


@cache
def field_help() -> dict[str, str]:
    """The docstring written under each field of :class:`AgentConfig`, keyed by field name."""
    tree = ast.parse(inspect.getsource(AgentConfig))
    body = tree.body[0].body  # type: ignore[attr-defined]
    helps: dict[str, str] = {}
    for node, following in zip(body, body[1:], strict=False):
        is_field = isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
        is_doc = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
        if is_field and is_doc:
            helps[node.target.id] = " ".join(str(following.value.value).split())  # type: ignore[union-attr]
    return helps


__all__ = ["AgentConfig", "LEGACY_VALUES", "field_help"]
