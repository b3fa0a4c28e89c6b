"""The recurrent policy: initialisation and sequence replay == step-by-step rollout."""

from __future__ import annotations

import math

import pytest
import torch
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.config import AgentConfig
from esper_agent.distributions import ActionMasks
from esper_agent.policy import RecurrentPolicy
from esper_env import spaces

OBS_DIM, NUM_SLOTS, HIDDEN = 11, 3, 32


def make_policy(seed: int = 0, slot_conditioned: bool = False, lstm_skip: bool = False) -> RecurrentPolicy:
    torch.manual_seed(seed)
    return RecurrentPolicy(OBS_DIM, NUM_SLOTS, HIDDEN, slot_conditioned=slot_conditioned, lstm_skip=lstm_skip)


def all_valid(batch: int) -> ActionMasks:
    return ActionMasks(torch.ones(batch, 5, NUM_SLOTS, dtype=torch.bool),
                       torch.ones(batch, sum(spaces.head_sizes(NUM_SLOTS)), dtype=torch.bool))


def test_initialisation() -> None:
    policy = make_policy()
    h = HIDDEN
    # Forget-gate bias 1 applied once: bias_ih + bias_hh on the forget slice sums to exactly 1.
    forget = policy.lstm.bias_ih_l0[h : 2 * h] + policy.lstm.bias_hh_l0[h : 2 * h]
    assert torch.equal(forget, torch.ones(h))
    others = torch.cat([policy.lstm.bias_ih_l0[:h], policy.lstm.bias_ih_l0[2 * h :], policy.lstm.bias_hh_l0])
    assert torch.equal(others, torch.zeros_like(others))
    # Orthogonal with gain g: W W^T = g^2 I for the (out <= in) output layers.
    for head in policy.heads:
        w = head[-1].weight
        assert torch.allclose(w @ w.T, 0.01**2 * torch.eye(w.shape[0]), atol=1e-6)
    w = policy.value_head[-1].weight
    assert torch.allclose(w @ w.T, torch.eye(1), atol=1e-5)
    w = policy.encoder[0].weight  # (hidden, obs_dim): columns orthogonal with gain sqrt(2)
    assert torch.allclose(w.T @ w, 2 * torch.eye(OBS_DIM), atol=1e-4)


def test_op_priors_bias_only_the_initial_op_head() -> None:
    torch.manual_seed(0)
    biased = RecurrentPolicy(OBS_DIM, NUM_SLOTS, HIDDEN, wait_prior=2.0, prune_prior=1.0)
    torch.manual_seed(0)
    plain = RecurrentPolicy(OBS_DIM, NUM_SLOTS, HIDDEN)
    obs, start = torch.randn(256, OBS_DIM), torch.ones(256, dtype=torch.bool)
    core, _ = biased.core_step(obs, biased.initial_state(256), start)
    probs = torch.softmax(biased.head_logits(core)[spaces.Head.OP], -1).mean(0)
    # Output weights of gain 0.01 leave the logits at their biases: exp(2) for WAIT, exp(-1) for PRUNE, 1 otherwise.
    weights = torch.tensor([math.e**2, 1.0, 1.0, math.e**-1, 1.0])
    expected = weights / weights.sum()
    assert torch.allclose(probs, expected, atol=0.02)
    differing = [name for (name, a), b in zip(biased.state_dict().items(), plain.state_dict().values(), strict=True)
                 if not torch.equal(a, b)]
    assert differing == ["heads.0.2.bias"]
    for name in ("wait_prior", "prune_prior"):
        with pytest.raises(ValueError, match=name):
            AgentConfig(**{name: -1.0})


def test_hidden_size_is_one_validated_field() -> None:
    with pytest.raises(ValueError, match="hidden_size"):
        AgentConfig(hidden_size=7)
    with pytest.raises(ValueError, match="hidden_size"):
        AgentConfig(hidden_size=4)
    from esper_agent.buffer import RolloutStorage

    storage = RolloutStorage(2, 3, OBS_DIM, spaces.head_sizes(NUM_SLOTS), HIDDEN + 2, "cpu")
    with pytest.raises(ValueError, match="hidden_size"):
        storage.begin(make_policy().initial_state(2))


@pytest.mark.parametrize(("slot_conditioned", "lstm_skip"), [(False, False), (True, False), (False, True)])
def test_sequence_forward_equals_step_by_step(slot_conditioned: bool, lstm_skip: bool) -> None:
    """Replaying stored sequences from the stored initial state, with episode starts inside, reproduces the
    rollout's per-step values and log-probs (with one row of logits per slot for the heads after the slot too,
    and with the residual path around the LSTM)."""
    policy = make_policy(1, slot_conditioned, lstm_skip)
    batch, steps = 5, 9
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(batch, steps, OBS_DIM, generator=g)
    starts = torch.rand(batch, steps, generator=g) < 0.25
    starts[:, 0] = torch.tensor([True, False, True, False, False])
    state0 = policy.initial_state(batch)
    state0 = state0._replace(h=torch.randn(batch, HIDDEN, generator=g), c=torch.randn(batch, HIDDEN, generator=g))
    masks = all_valid(batch)

    state, actions, masks_used, log_probs, values = state0, [], [], [], []
    for t in range(steps):
        out = policy.step(obs[:, t], masks, state, starts[:, t], g)
        state = out.state
        actions.append(out.action)
        masks_used.append(out.used_mask)
        log_probs.append(out.log_prob)
        values.append(out.value)
    ev = policy.sequence(obs, starts, state0, torch.stack(actions, 1), torch.stack(masks_used, 1))
    assert torch.allclose(ev.log_prob, torch.stack(log_probs, 1), atol=1e-5)
    assert torch.allclose(ev.value, torch.stack(values, 1), atol=1e-5)
    core, final = policy.core_sequence(obs, starts, state0)
    assert torch.allclose(final.h, state.h, atol=1e-6) and torch.allclose(final.c, state.c, atol=1e-6)


def test_slot_conditioned_heads_give_one_row_per_slot() -> None:
    conditioned, plain = make_policy(5, slot_conditioned=True), make_policy(5)
    core = torch.randn(4, HIDDEN)
    shapes = [tuple(lg.shape) for lg in conditioned.head_logits(core)]
    sizes = spaces.head_sizes(NUM_SLOTS)
    assert shapes == [(4, sizes[0]), (4, sizes[1])] + [(4, NUM_SLOTS, n) for n in sizes[2:]]
    assert [tuple(lg.shape) for lg in plain.head_logits(core)] == [(4, n) for n in sizes]


@pytest.mark.parametrize("lstm_skip", [False, True])
def test_one_call_replay_equals_the_stepwise_replay_without_inner_resets(lstm_skip: bool) -> None:
    policy = make_policy(4, lstm_skip=lstm_skip)
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(3, 7, OBS_DIM, generator=g)
    starts = torch.zeros(3, 7, dtype=torch.bool)
    starts[0, 0] = True  # a reset at t=0 only
    state = policy.initial_state(3)._replace(h=torch.randn(3, HIDDEN, generator=g))
    stepwise, last = policy.core_sequence(obs, starts, state, resets_inside=True)
    one_call, last_fast = policy.core_sequence(obs, starts, state, resets_inside=False)
    assert torch.allclose(stepwise, one_call, atol=1e-5) and torch.allclose(last.h, last_fast.h, atol=1e-5)


def test_lstm_skip_adds_the_encoded_observation_before_the_core_norm() -> None:
    """Same weights, same state: with the skip the core is LayerNorm(LSTM output + encoded observation), without
    it LayerNorm(LSTM output); the recurrent state is the same either way, and no parameter is added."""
    plain, skip = make_policy(3), make_policy(3, lstm_skip=True)
    assert [n for n, _ in plain.named_parameters()] == [n for n, _ in skip.named_parameters()]
    g = torch.Generator().manual_seed(2)
    obs, start = torch.randn(4, OBS_DIM, generator=g), torch.zeros(4, dtype=torch.bool)
    state = plain.initial_state(4)._replace(h=torch.randn(4, HIDDEN, generator=g))
    core_plain, next_plain = plain.core_step(obs, state, start)
    core_skip, next_skip = skip.core_step(obs, state, start)
    encoded = plain.encoder(obs)
    lstm_out, _ = plain._cell(encoded, state, start)
    assert torch.allclose(core_plain, plain.core_norm(lstm_out), atol=1e-6)
    assert torch.allclose(core_skip, plain.core_norm(lstm_out + encoded), atol=1e-6)
    assert not torch.allclose(core_plain, core_skip, atol=1e-3)
    assert torch.equal(next_plain.h, next_skip.h) and torch.equal(next_plain.c, next_skip.c)


def test_the_config_builds_the_skip() -> None:
    assert RecurrentPolicy.from_config(OBS_DIM, NUM_SLOTS, AgentConfig(hidden_size=HIDDEN, lstm_skip=True)).lstm_skip
    assert not RecurrentPolicy.from_config(OBS_DIM, NUM_SLOTS, AgentConfig(hidden_size=HIDDEN)).lstm_skip
    assert AgentConfig.from_dict({}).lstm_skip is False  # a config recorded before the field reads as before


def test_episode_start_resets_the_state_exactly() -> None:
    policy = make_policy(2)
    obs = torch.randn(2, OBS_DIM)
    zero = policy.initial_state(2)
    dirty = zero._replace(h=torch.full((2, HIDDEN), math.nan), c=torch.full((2, HIDDEN), 5.0))
    start = torch.ones(2, dtype=torch.bool)
    a, _ = policy.core_step(obs, zero, start)
    b, _ = policy.core_step(obs, dirty, start)  # even a NaN state is dropped at an episode start
    assert torch.equal(a, b)


def test_deterministic_act_is_argmax_and_repeatable() -> None:
    policy = make_policy(3)
    obs = torch.randn(4, OBS_DIM)
    start = torch.ones(4, dtype=torch.bool)
    first = policy.step(obs, all_valid(4), policy.initial_state(4), start, deterministic=True)
    second = policy.step(obs, all_valid(4), policy.initial_state(4), start, deterministic=True)
    assert torch.equal(first.action, second.action)
    core, _ = policy.core_step(obs, policy.initial_state(4), start)
    assert torch.equal(first.action[:, 0], policy.head_logits(core)[0].argmax(-1))
