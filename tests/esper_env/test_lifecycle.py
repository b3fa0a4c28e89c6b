"""The lifecycle table, every stage set derived from it, the ops, gates and timers."""

from __future__ import annotations

import dataclasses

import pytest

from esper_env import lifecycle as L
from esper_env.config import EnvConfig
from esper_env.lifecycle import Stage as S

CFG = EnvConfig(dataset="synthetic")


def test_table_is_the_designed_one():
    assert dict(L.TRANSITIONS) == {
        S.DORMANT: (S.GERMINATED,),
        S.GERMINATED: (S.TRAINING, S.PRUNED),
        S.TRAINING: (S.BLENDING, S.PRUNED),
        S.BLENDING: (S.HOLDING, S.PRUNED),
        S.HOLDING: (S.FOSSILIZED, S.PRUNED),
        S.FOSSILIZED: (),
        S.PRUNED: (S.EMBARGOED,),
        S.EMBARGOED: (S.DORMANT,),
    }


def test_every_stage_set_follows_from_the_table():
    """Recompute each set by brute force over the table; a new stage or edge would change both sides."""
    table = L.TRANSITIONS
    into = lambda target: {s for s, nxt in table.items() if target in nxt}
    assert into(S.GERMINATED) == L.GERMINABLE
    assert into(S.PRUNED) == L.PRUNABLE
    assert into(S.FOSSILIZED) == L.FOSSILIZABLE
    assert {s for s, nxt in table.items() if not nxt} == L.TERMINAL
    # seeded: reachable from germination without passing through a prune or back to DORMANT
    assert L.reachable_from(S.GERMINATED, frozenset({S.PRUNED, S.EMBARGOED})) == L.SEEDED
    assert L.LIVE == L.SEEDED - L.TERMINAL
    assert L.reachable_from(S.PRUNED, frozenset({S.DORMANT})) == L.COOLDOWN
    assert L.GROWTH_PATH[0] in table[next(iter(L.GERMINABLE))]
    for a, b in zip(L.GROWTH_PATH, L.GROWTH_PATH[1:], strict=False):
        assert b in table[a] and L.ADVANCE_TARGET[a] == b
    assert set(L.INCUBATING) | {L.BLEND_STAGE} | set(L.FULLY_BLENDED) == set(L.SEEDED)


def test_forward_modes_cover_every_stage():
    modes = {s: L.forward_mode(s) for s in S}
    assert {s for s, m in modes.items() if m == L.ForwardMode.OFF} == set(S) - L.SEEDED
    assert modes[S.GERMINATED] == modes[S.TRAINING] == L.ForwardMode.INCUBATE
    assert modes[S.BLENDING] == L.ForwardMode.BLEND
    assert modes[S.HOLDING] == modes[S.FOSSILIZED] == L.ForwardMode.FULL


@pytest.mark.parametrize("op", [L.prune, L.fossilize, L.advance])
def test_ops_refuse_moves_outside_the_table(op):
    with pytest.raises(ValueError, match="DORMANT"):
        op(L.EMPTY)


def _run_seed(cfg: EnvConfig, blend: int = 0, tempo_index: int = 0, grad: float = 1.0, epochs: int = 30):
    """Germinate, then tick with a healthy gradient and a positive contribution; return the stage history."""
    state = L.germinate(L.EMPTY, blueprint=2, blend=blend, tempo_index=tempo_index)
    history = [(state.stage, state.alpha)]
    for _ in range(epochs):
        contribution = 1.0 if state.alpha > 0 else None
        state, _ = L.tick(L.record_epoch(state, contribution, grad, 0.5), cfg)
        history.append((state.stage, round(state.alpha, 6)))
    return history


def test_auto_advance_timeline():
    history = _run_seed(CFG, blend=0, tempo_index=0)
    stages = [s for s, _ in history]
    assert stages[:2] == [S.GERMINATED, S.TRAINING]
    assert stages[1:4] == [S.TRAINING] * 3 and stages[4] == S.BLENDING  # trains min_training_epochs = 3
    assert [a for s, a in history if s == S.BLENDING] == [round(1 / 3, 6), round(2 / 3, 6), 1.0]  # tempo 3
    holding = [s for s in stages if s == S.HOLDING]
    assert len(holding) == CFG.max_holding_epochs  # then the timeout prunes it
    after = stages[stages.index(S.HOLDING) + len(holding):]
    assert after[0] == S.PRUNED and after[1:1 + CFG.embargo_epochs] == [S.EMBARGOED] * CFG.embargo_epochs
    assert after[1 + CFG.embargo_epochs] == S.DORMANT


def test_cosine_ramp_and_slow_tempo():
    alphas = [a for s, a in _run_seed(CFG, blend=1, tempo_index=2) if s == S.BLENDING]
    assert len(alphas) == 8 and alphas[-1] == 1.0
    assert alphas == sorted(alphas) and alphas[0] < 1 / 8  # cosine starts slower than linear


def test_unhealthy_gradient_blocks_blending():
    stages = [s for s, _ in _run_seed(CFG, grad=0.0, epochs=10)]
    assert S.BLENDING not in stages and stages[-1] == S.TRAINING


def test_holding_timeout_reports_an_event():
    state = dataclasses.replace(L.EMPTY, stage=S.HOLDING, blueprint=0, blend=0, tempo=3, alpha=1.0,
                                epochs_in_stage=CFG.max_holding_epochs - 1, age=10)
    state, event = L.tick(state, CFG)
    assert state.stage == S.PRUNED and event == "holding_timeout"


def test_holding_steps_left_counts_down_to_the_timeout():
    state = dataclasses.replace(L.EMPTY, stage=S.HOLDING, blueprint=0, blend=0, tempo=3, alpha=1.0, age=10)
    left = []
    while state.stage == S.HOLDING:
        left.append(L.holding_steps_left(state, CFG))
        state, event = L.tick(state, CFG)
    assert left == list(range(CFG.max_holding_epochs, 0, -1))  # 1: the tick after it prunes
    assert event == "holding_timeout"
    for stage in (S.DORMANT, S.TRAINING, S.BLENDING, S.FOSSILIZED, S.PRUNED):
        assert L.holding_steps_left(dataclasses.replace(state, stage=stage, epochs_in_stage=0), CFG) == 0


def test_manual_advance_gates():
    cfg = dataclasses.replace(CFG, auto_advance=False)
    state = L.germinate(L.EMPTY, 0, 0, 0)
    state, _ = L.tick(L.record_epoch(state, None, 1.0, 1.0), cfg)
    assert state.stage == S.GERMINATED  # no timer moves it
    assert L.may_advance(state, cfg) and not L.may_advance(state, CFG)  # ADVANCE is an op only without auto
    state = L.advance(state)
    assert state.stage == S.TRAINING and not L.may_advance(state, cfg)  # needs min_training_epochs
    for _ in range(cfg.min_training_epochs):
        state, _ = L.tick(L.record_epoch(state, None, 1.0, 1.0), cfg)
    assert L.may_advance(state, cfg)
    state = L.advance(state)
    assert state.stage == S.BLENDING and state.alpha == pytest.approx(1 / 3)
    assert not L.may_advance(state, cfg)  # the ramp is not done
    for _ in range(2):
        state, _ = L.tick(state, cfg)
    assert state.alpha == 1.0 and L.may_advance(state, cfg)
    assert L.advance(state).stage == S.HOLDING


def test_gates():
    seeded = L.germinate(L.EMPTY, 0, 0, 0)
    empty = (L.EMPTY, L.EMPTY, L.EMPTY)
    assert L.may_germinate(empty, 0, CFG)
    assert not L.may_germinate((seeded, L.EMPTY, L.EMPTY), 1, CFG)  # one seed incubating at a time
    relaxed = dataclasses.replace(CFG, one_seed_incubating=False, max_seeds=1)
    assert not L.may_germinate((seeded, L.EMPTY, L.EMPTY), 1, relaxed)  # max_seeds reached
    assert not L.may_prune(seeded, CFG)  # younger than min_prune_age
    assert L.may_prune(dataclasses.replace(seeded, age=1), CFG)
    holding = dataclasses.replace(seeded, stage=S.HOLDING, alpha=1.0)
    assert not L.may_fossilize(holding, CFG)  # contribution not measured yet
    assert L.may_fossilize(dataclasses.replace(holding, contribution=0.0), CFG)
    assert not L.may_fossilize(dataclasses.replace(holding, contribution=-0.1), CFG)
    fossil = L.fossilize(dataclasses.replace(holding, contribution=1.0))
    assert fossil.stage == S.FOSSILIZED and not L.may_prune(fossil, CFG)
