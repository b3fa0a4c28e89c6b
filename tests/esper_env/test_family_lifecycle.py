"""The growable host's lifecycle: FOSSILIZE joins the seed and frees its slot; nothing else may release one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from esper_env import lifecycle as L
from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.config import EnvConfig
from esper_env.episode import Episode, ModuleChange, apply_action
from esper_env.spaces import Head, Op


def _holding() -> L.SlotState:
    return dataclasses.replace(L.SlotState(stage=L.Stage.HOLDING, blueprint=1, blend=0, tempo=3), alpha=1.0,
                               contribution=0.5)


def _fossilize_action(slot: int) -> np.ndarray:
    action = np.zeros(len(Head), np.int64)
    action[Head.OP], action[Head.SLOT] = Op.FOSSILIZE, slot
    return action


def test_the_joining_table_adds_only_the_release_of_a_fossilized_slot() -> None:
    extra = {s: set(L.JOINING[s]) - set(L.TRANSITIONS[s]) for s in L.Stage}
    assert extra == {s: ({L.Stage.DORMANT} if s == L.Stage.FOSSILIZED else set()) for s in L.Stage}
    assert L.release(L.fossilize(_holding())) == L.EMPTY


@pytest.mark.parametrize("stage", [s for s in L.Stage if s != L.Stage.FOSSILIZED])
def test_only_a_fossilized_seed_is_released(stage: L.Stage) -> None:
    with pytest.raises(ValueError, match="only a fossilized seed joins"):
        L.release(L.SlotState(stage=stage))


@pytest.mark.parametrize("joins", [False, True])
def test_fossilize_joins_only_on_a_growable_host(joins: bool) -> None:
    episode = Episode(slots=(L.EMPTY, _holding()))
    changes, _ = apply_action(episode, _fossilize_action(1), valid=True, host="family" if joins else "small")
    if joins:
        assert changes == [ModuleChange("join", 1)] and episode.slots[1] == L.EMPTY
    else:
        assert changes == [] and episode.slots[1].stage == L.Stage.FOSSILIZED


WIDEN = next(b for b in FAMILY_BLUEPRINTS if b.name == "widen_l")


def test_every_family_seed_blends_at_birth_and_no_small_host_seed_does() -> None:
    # Each family seed keeps the function at any amplitude (a split, or a residual block whose last norm is zero).
    count = len(FAMILY_BLUEPRINTS)
    assert all(L.blends_at_birth(i, "family") for i in range(count))
    assert not any(L.blends_at_birth(i, "small") for i in range(count))
    assert not L.blends_at_birth(count, "family")  # not a family blueprint


def test_a_seed_born_blended_is_at_full_amplitude_through_its_stages() -> None:
    cfg = EnvConfig(host="family", min_training_epochs=1)
    state = L.germinate(L.EMPTY, FAMILY_BLUEPRINTS.index(WIDEN), blend=0, tempo_index=2, born_blended=True)
    seen = []
    for _ in range(3):
        seen.append((state.stage, L.slot_mode(state), state.alpha))
        state = L.record_epoch(state, contribution=1.0, grad_norm=1.0, grad_ratio=1.0)
        state, _ = L.tick(state, cfg)
    assert seen == [(L.Stage.GERMINATED, L.ForwardMode.FULL, 1.0), (L.Stage.TRAINING, L.ForwardMode.FULL, 1.0),
                    (L.Stage.BLENDING, L.ForwardMode.FULL, 1.0)]  # its ramp complete on entering BLENDING
    assert state.stage == L.Stage.HOLDING and L.may_fossilize(state, cfg)
    assert L.slot_mode(L.prune(state)) == L.ForwardMode.OFF
    ordinary = L.germinate(L.EMPTY, 0, blend=0, tempo_index=0)
    assert (ordinary.alpha, L.slot_mode(ordinary)) == (0.0, L.ForwardMode.INCUBATE)
