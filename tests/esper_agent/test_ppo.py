"""The PPO update and the anomaly checks, on crafted metrics and on crafted rollouts."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.anomalies import detect_anomalies
from esper_agent.buffer import compute_gae
from esper_agent.config import AgentConfig
from esper_agent.ppo import (
    LOG_RATIO_BOUND,
    SCALAR_STATS,
    NonFiniteGuard,
    Reference,
    TrainBatch,
    minibatch_terms,
    ppo_update,
)
from esper_env.spaces import HEAD_NAMES, Head, Op

HEALTHY = {"ppo/ratio_max": 1.3, "ppo/ratio_min": 0.8, "ppo/nonfinite_steps": 0.0, "ppo/kl_max": 0.01,
           "value/std": 0.5, "value/returns_std": 1.0} | {f"entropy/{h}": 0.7 for h in HEAD_NAMES}


def names(anomalies: list[str]) -> set[str]:
    return {a.split(":")[0] for a in anomalies}


@pytest.mark.parametrize(("change", "expected"), [
    ({"ppo/ratio_max": 25.0}, "ratio_explosion"),
    ({"ppo/ratio_min": 0.01}, "ratio_collapse"),
    ({"ppo/nonfinite_steps": 2.0}, "nonfinite_loss"),
    ({"entropy/slot": 0.001}, "entropy_collapse/slot"),
    ({"entropy/op": 0.0}, "entropy_collapse/op"),
    ({"ppo/kl_max": 0.5}, "kl_spike"),
    ({"value/std": 1e-4}, "value_collapse"),
])
def test_each_detector_fires_alone_on_crafted_metrics(change: dict[str, float], expected: str) -> None:
    cfg = AgentConfig()
    assert detect_anomalies(HEALTHY, cfg) == []
    assert names(detect_anomalies(HEALTHY | change, cfg)) == {expected}


def test_missing_statistics_raise_no_alarm() -> None:
    """A head never available has NaN conditional entropy: not a collapse; no returns spread: no value alarm."""
    quiet = HEALTHY | {"entropy/blueprint": math.nan, "value/returns_std": 0.0, "value/std": 0.0}
    assert detect_anomalies(quiet, AgentConfig()) == []
    assert detect_anomalies({}, AgentConfig()) == []


def collected_batch(trainer, target_kl: float = 0.0) -> TrainBatch:
    rollout, _ = trainer.collector.collect(3, trainer.sample_generator)
    advantages = compute_gae(rollout, trainer.reward_scaler.scale_rewards(rollout.rewards), 0.99, 0.95)
    return TrainBatch(rollout, advantages.advantages, advantages.returns)


def run_update(trainer, batch: TrainBatch, guard: NonFiniteGuard | None = None, **changes: float) -> dict:
    cfg = AgentConfig(**(trainer.config.to_dict() | changes))
    guard = guard or NonFiniteGuard(cfg.max_nonfinite_steps)
    stats = ppo_update(trainer.policy, trainer.optimizer, batch, cfg, trainer.minibatch_generator, guard)
    return stats | {"anomalies": detect_anomalies(stats, cfg)}


@pytest.mark.parametrize(("shift", "expected"), [(-6.0, "ratio_explosion"), (6.0, "ratio_collapse")])
def test_ratio_anomalies_through_the_update(shift: float, expected: str) -> None:
    """Stored log-probs far from the current policy's make the joint ratio explode (or collapse)."""
    trainer = toy_env.make_toy_trainer()
    batch = collected_batch(trainer)
    batch.rollout.log_probs[:, ::2] += shift
    stats = run_update(trainer, batch, target_kl=0.0)
    assert expected in names(stats["anomalies"])
    assert "kl_spike" in names(stats["anomalies"])


def test_nonfinite_loss_skips_the_step_and_stops_after_three_in_a_row() -> None:
    trainer = toy_env.make_toy_trainer()
    batch = collected_batch(trainer)
    batch.advantages[:] = math.nan
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    with pytest.raises(RuntimeError, match="3 PPO minibatch steps in a row had a non-finite loss"):
        run_update(trainer, batch)
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters(), strict=True))


def test_isolated_nonfinite_steps_are_skipped_counted_and_reported() -> None:
    trainer = toy_env.make_toy_trainer(num_minibatches=6)  # one env row per minibatch
    batch = collected_batch(trainer)
    batch.advantages[0, 0] = math.inf
    stats = run_update(trainer, batch, guard=NonFiniteGuard(limit=100), target_kl=0.0)
    assert stats["ppo/nonfinite_steps"] == trainer.config.update_epochs  # env 0's minibatch, once per epoch
    assert stats["ppo/steps_applied"] == trainer.config.update_epochs * 5
    assert "nonfinite_loss" in names(stats["anomalies"])
    assert all(torch.isfinite(p).all() for p in trainer.policy.parameters())
    assert math.isfinite(stats["loss/total"])


def test_kl_early_stop_after_a_minibatch_step() -> None:
    trainer = toy_env.make_toy_trainer(num_minibatches=3)
    batch = collected_batch(trainer)
    stats = run_update(trainer, batch, target_kl=1e-12, learning_rate=1e-2)
    # The first step sees KL 0 (nothing changed yet) and is applied; the next one measures the moved policy.
    assert stats["ppo/steps_applied"] == 1 and stats["ppo/early_stop"] == 1.0
    full = run_update(trainer, collected_batch(trainer), target_kl=0.0)
    assert full["ppo/steps_applied"] == trainer.config.update_epochs * 3 and full["ppo/early_stop"] == 0.0


def test_entropy_collapse_detected_through_the_update() -> None:
    trainer = toy_env.make_toy_trainer()
    with torch.no_grad():
        trainer.policy.heads[0][-1].bias[Op.WAIT] = 60.0  # the op head always says WAIT
    stats = run_update(trainer, collected_batch(trainer), target_kl=0.0)
    assert "entropy_collapse/op" in names(stats["anomalies"])
    assert math.isnan(stats["entropy/blueprint"])  # never GERMINATE: blueprint never available, no alarm
    assert "entropy_collapse/blueprint" not in names(stats["anomalies"])


def test_value_collapse_detected_through_a_training_update() -> None:
    trainer = toy_env.make_toy_trainer()
    with torch.no_grad():
        trainer.policy.value_head[-1].weight.zero_()  # V(s) is a constant
    metrics = trainer.update()
    assert "value_collapse" in names(metrics["anomalies"])
    assert metrics["value/std"] == 0.0 and metrics["value/returns_std"] > 0


def test_loss_is_finite_on_adversarial_inputs() -> None:
    """Huge logits (near-deterministic heads), single-valid masks from the env, padding: loss and gradients
    stay finite."""
    trainer = toy_env.make_toy_trainer(mode="NextStep")
    with torch.no_grad():
        for head in trainer.policy.heads:
            head[-1].weight.mul_(1e6)
    batch = collected_batch(trainer)
    batch.rollout.valid[0, -3:] = False  # a row that ends early, as after a NEXT_STEP reset step
    index = torch.arange(batch.rollout.valid.shape[0])
    terms = minibatch_terms(trainer.policy, batch, index, trainer.config)
    terms.loss.backward()
    assert torch.isfinite(terms.loss) and torch.isfinite(terms.stats).all()
    assert all(torch.isfinite(p.grad).all() for p in trainer.policy.parameters() if p.grad is not None)


@pytest.mark.parametrize("all_steps", [False, True])
def test_entropy_term_averages_each_head_over_its_steps_or_all_steps(all_steps: bool) -> None:
    """The bonus in the loss is, per head, the entropy sum over the steps where the head mattered divided by
    that head's count (the default) or, with entropy_all_steps, by the number of valid steps."""
    trainer = toy_env.make_toy_trainer()
    batch = collected_batch(trainer)
    index = torch.arange(batch.rollout.valid.shape[0])
    cfg = AgentConfig(**(trainer.config.to_dict() | {"entropy_all_steps": all_steps}))
    terms = minibatch_terms(trainer.policy, batch, index, cfg)
    heads = len(HEAD_NAMES)
    head_sum, head_count = terms.stats[-2 * heads:-heads], terms.stats[-heads:]
    steps = batch.rollout.valid.sum()
    assert (head_count < steps).any()  # some head is not available on every step, so the two differ
    expected = (head_sum / (steps if all_steps else head_count.clamp(min=1))).sum()
    assert terms.stats[2].item() == pytest.approx(expected.item(), rel=1e-6)  # "loss/entropy"


def test_the_reference_kl_term_adds_its_weight_times_the_mean_kl() -> None:
    trainer = toy_env.make_toy_trainer()
    batch = collected_batch(trainer)
    index = torch.arange(batch.rollout.valid.shape[0])
    reference = copy.deepcopy(trainer.policy).requires_grad_(False)
    cfg = trainer.config
    base = minibatch_terms(trainer.policy, batch, index, cfg)
    same = minibatch_terms(trainer.policy, batch, index, cfg, reference=Reference(reference, 0.5))
    kl_column = SCALAR_STATS.index("loss/reference_kl")
    assert same.stats[kl_column].item() == pytest.approx(0.0, abs=1e-6)
    assert same.loss.item() == pytest.approx(base.loss.item())
    with torch.no_grad():
        for param in reference.heads[0].parameters():
            param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(0)))
    moved = minibatch_terms(trainer.policy, batch, index, cfg, reference=Reference(reference, 0.5))
    kl = moved.stats[kl_column].item()
    assert kl > 0 and moved.loss.item() == pytest.approx(base.loss.item() + 0.5 * kl, rel=1e-6)
    off = minibatch_terms(trainer.policy, batch, index, cfg, reference=Reference(reference, 0.0))
    assert off.stats[kl_column].item() == 0.0 and off.loss.item() == pytest.approx(base.loss.item())


def test_updates_on_the_reference_kl_alone_pull_the_policy_toward_the_reference() -> None:
    trainer = toy_env.make_toy_trainer()
    batch = collected_batch(trainer)
    batch = TrainBatch(batch.rollout, torch.zeros_like(batch.advantages), batch.returns)  # no policy gradient
    reference = copy.deepcopy(trainer.policy).requires_grad_(False)
    with torch.no_grad():
        for param in reference.heads[0].parameters():
            param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(1)))
    cfg = AgentConfig(**(trainer.config.to_dict() | {"ent_coef": 0.0, "target_kl": 0.0}))
    guard = NonFiniteGuard(3)
    for group in trainer.optimizer.param_groups:
        group["lr"] = 3e-3
    first = ppo_update(trainer.policy, trainer.optimizer, batch, cfg, trainer.minibatch_generator, guard,
                       reference=Reference(reference, 1.0))["loss/reference_kl"]
    for _ in range(5):
        last = ppo_update(trainer.policy, trainer.optimizer, batch, cfg, trainer.minibatch_generator, guard,
                          reference=Reference(reference, 1.0))["loss/reference_kl"]
    assert last < 0.5 * first


def test_one_extreme_ratio_no_longer_makes_the_minibatch_nonfinite() -> None:
    """A stored log-prob 200 nats below the current one: exp of the raw log-ratio is inf in float32, and inf * 0 in
    the backward pass made the minibatch's gradient NaN. Clamped, the step's ratio is the bound and gives no
    gradient, and every other step of the minibatch still trains."""
    trainer = toy_env.make_toy_trainer(num_minibatches=1)
    batch = collected_batch(trainer)
    batch.rollout.log_probs[0, 0] -= 200.0
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    stats = run_update(trainer, batch, guard=NonFiniteGuard(limit=100), target_kl=0.0)
    assert stats["ppo/nonfinite_steps"] == 0 and stats["ppo/steps_applied"] == trainer.config.update_epochs
    assert stats["ppo/ratio_max"] == pytest.approx(math.exp(LOG_RATIO_BOUND), rel=1e-5)
    assert "ratio_explosion" in names(stats["anomalies"])  # still reported
    assert all(torch.isfinite(p).all() for p in trainer.policy.parameters())
    assert not all(torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters(), strict=True))


def test_advantage_clipped_fraction_counts_the_steps_whose_advantage_the_clip_cut_off() -> None:
    """Every ratio pushed to about e (> 1 + clip_coef): all of them lie outside the clip range, but the clip only
    cuts the steps with a positive normalised advantage (the others keep the unclipped, smaller term)."""
    trainer = toy_env.make_toy_trainer()
    batch = collected_batch(trainer)
    batch.rollout.log_probs[:] -= 1.0
    valid, adv = batch.rollout.valid, batch.advantages
    above_mean = (adv > adv[valid].mean()) & valid  # a positive advantage once normalised over the minibatch
    terms = minibatch_terms(trainer.policy, batch, torch.arange(valid.shape[0]), trainer.config)
    stats = dict(zip(SCALAR_STATS, terms.stats.tolist(), strict=False))
    assert stats["ppo/clip_fraction"] == 1.0
    expected = above_mean.sum().item() / valid.sum().item()
    assert 0 < expected < 1 and stats["advantage/clipped_fraction"] == pytest.approx(expected)
    assert 0 < run_update(trainer, batch, target_kl=0.0)["advantage/clipped_fraction"] <= 1


def test_the_entropy_floor_pushes_only_heads_below_it() -> None:
    """With a floor above some heads' entropy, the loss gains -coef times those heads' entropy (their hinge's
    gradient) and nothing for the others; a floor of 0 (the default) leaves the loss as it was."""
    trainer = toy_env.make_toy_trainer()
    batch = collected_batch(trainer)
    index = torch.arange(batch.rollout.valid.shape[0])
    base = minibatch_terms(trainer.policy, batch, index, trainer.config)
    heads = len(HEAD_NAMES)
    head_sum, head_count = base.stats[-2 * heads:-heads], base.stats[-heads:]
    entropy = head_sum / head_count.clamp(min=1)
    chosen = (head_count > 0).nonzero().flatten()
    assert len(chosen) >= 2 and len(set(entropy[chosen].tolist())) >= 2
    floor = float(entropy[chosen].sort().values[:2].mean())  # between the two lowest entropies: one head below
    below = (head_count > 0) & (entropy < floor)
    assert below.sum() == 1
    for coef in (1.0, 2.5):
        cfg = AgentConfig(**(trainer.config.to_dict() | {"entropy_floor": floor, "entropy_floor_coef": coef}))
        floored = minibatch_terms(trainer.policy, batch, index, cfg)
        expected = base.loss.item() - coef * entropy[below].sum().item()
        assert floored.loss.item() == pytest.approx(expected, rel=1e-6)
    high = AgentConfig(**(trainer.config.to_dict() | {"entropy_floor": 1.0}))
    assert minibatch_terms(trainer.policy, batch, index, high).loss.item() == pytest.approx(
        base.loss.item() - entropy[head_count > 0].sum().item(), rel=1e-6)


def test_updates_on_the_entropy_floor_alone_raise_a_collapsed_heads_entropy() -> None:
    """With no policy gradient and no entropy bonus, updates raise a collapsed op head's entropy with a floor
    above it, and hardly move it without one."""
    trainer = toy_env.make_toy_trainer()
    batch = collected_batch(trainer)
    batch = TrainBatch(batch.rollout, torch.zeros_like(batch.advantages), batch.returns)  # no policy gradient
    index = torch.arange(batch.rollout.valid.shape[0])
    op, heads = int(Head.OP), len(HEAD_NAMES)
    with torch.no_grad():  # the op head collapses onto WAIT
        trainer.policy.heads[op][-1].bias[Op.WAIT] += 8.0
    start = copy.deepcopy(trainer.policy.state_dict())

    def op_entropy() -> float:
        stats = minibatch_terms(trainer.policy, batch, index, trainer.config).stats
        return float(stats[-2 * heads + op] / stats[-heads + op])

    def after_updates(floor: float) -> float:
        trainer.policy.load_state_dict(start)
        optimizer = torch.optim.Adam(trainer.policy.parameters(), lr=3e-3)
        cfg = AgentConfig(**(trainer.config.to_dict() | {"ent_coef": 0.0, "target_kl": 0.0, "entropy_floor": floor}))
        for _ in range(5):
            ppo_update(trainer.policy, optimizer, batch, cfg, trainer.minibatch_generator, NonFiniteGuard(3))
        return op_entropy()

    collapsed = op_entropy()
    assert collapsed < 0.1
    assert after_updates(collapsed + 0.2) > collapsed + 0.05
    assert abs(after_updates(0.0) - collapsed) < 0.01
