"""The hidden-condition toy on the task's twelve conditions (benchmarks.studies.shaped_condition)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from benchmarks.studies import hidden_condition, shaped_condition
from benchmarks.studies.shaped_condition import TASK, ShapedConditionEnv
from esper_env.spaces import Head, Op

N = 1200
UNDO_READ = Path(__file__).resolve().parents[1] / "benchmarks/results/screen_undo_all/Esper-CIFAR10-v0/undo_read.md"


def _play(env: ShapedConditionEnv, ops_by_step: dict[int, Op]) -> np.ndarray:
    """Every sub-env plays the same op at each step (WAIT where none is given); the episode's returns."""
    returns = np.zeros(env.num_envs)
    for t in range(env.max_epochs):
        actions = np.zeros((env.num_envs, len(Head)), np.int64)
        actions[:, 0] = ops_by_step.get(t, Op.WAIT)
        returns += env.step(actions)[1]
    return returns


def test_the_shaped_toy_draws_the_twelve_conditions_alike_and_shows_two_features_from_reveal():
    env = ShapedConditionEnv(num_envs=N, seen_noise=0.0)
    obs, _ = env.reset(seed=0)
    counts = np.bincount(env.condition, minlength=len(TASK))
    assert obs.shape == (N, 6) and (counts > N / 12 * 0.7).all() and (obs[:, 1:3] == -1).all()
    for t in range(env.reveal):
        obs = env.step(np.zeros((N, len(Head)), np.int64))[0]
        assert (obs[:, 1:3] == -1).all() == (t + 1 < env.reveal)
    costly = env.condition == env.condition_names.index("pool5k-noise40")
    assert np.allclose(obs[costly, 1:3], [0.573, 0.521])  # validation and training after step 5, as measured
    noisy = ShapedConditionEnv(num_envs=N)
    noisy.reset(seed=0)
    seen = noisy.seen[noisy.condition == noisy.condition_names.index("noise40")]
    assert abs(seen[:, 0].mean() - 0.678) < 0.002 and 0.0014 < seen[:, 0].std() < 0.0023  # range 0.4 points / 2.33
    seen = noisy.seen[noisy.condition == noisy.condition_names.index("pool5k-noise40")]  # ranges 3.5 and 1.4 points
    assert 0.0135 < seen[:, 0].std() < 0.0165 and 0.0054 < seen[:, 1].std() < 0.0066  # / 2.33, within 10%
    with pytest.raises(ValueError, match="seen_noise=-1"):
        ShapedConditionEnv(seen_noise=-1)


def test_the_shaped_toy_pays_each_condition_what_keeping_rather_than_pruning_was_worth_on_the_task():
    env = ShapedConditionEnv(num_envs=N)
    env.reset(seed=1)
    kept = _play(env, {0: Op.GERMINATE, 3: Op.FOSSILIZE})
    luck = env.luck.copy()
    env.reset(seed=1)
    pruned = _play(env, {0: Op.GERMINATE, 3: Op.PRUNE})
    env.reset(seed=1)
    waited = _play(env, {})
    for c, measured in enumerate(TASK):
        rows = env.condition == c
        assert np.allclose(kept[rows] - pruned[rows], measured.keep_minus_prune / 100)
        assert np.allclose(waited[rows] - luck[rows], measured.seedling_return / 100, atol=1e-5)
        assert np.allclose(pruned[rows] - waited[rows], -env.cost)
    costing = [name for name, pays in zip(env.condition_names, env.pays_by_condition, strict=True) if not pays]
    assert costing == ["classes2", "pool5k-noise40"]
    assert [env.condition_names[c] for c in np.flatnonzero(env.costs_by_condition)] == ["pool5k-noise40"]
    fixed = hidden_condition.fixed_returns({}, ShapedConditionEnv)
    held_out = ShapedConditionEnv(num_envs=ShapedConditionEnv.eval_episodes)
    held_out.reset(seed=hidden_condition.EVAL_SEED)
    undone = np.where(held_out.pays_by_condition, 0.0, -held_out.gain)[held_out.condition]  # the oracle's prunes
    assert fixed["oracle"] - fixed["blind"] == pytest.approx(undone.mean()) and fixed["blind"] > fixed["wait"]


@pytest.mark.skipif(not UNDO_READ.exists(), reason=f"the committed undo screen's read is not at {UNDO_READ}")
def test_the_shaped_toys_numbers_are_the_committed_undo_screens():
    text = UNDO_READ.read_text()
    returns = text[text.index("## Return"):]
    for m in TASK:
        row = re.search(rf"^\| {re.escape(m.name)} \| 5 \| ([\d.]+) \| [\d.]+ \| \S+ ± \S+ \| ([-+][\d.]+) ±",
                        returns, re.MULTILINE)
        assert row and (float(row[1]), -float(row[2])) == (m.seedling_return, m.keep_minus_prune), m.name
        seen = re.search(rf"^\| {re.escape(m.name)} \| ([\d.]+) \(([\d.]+) to ([\d.]+)\) \| "
                         rf"([\d.]+) \(([\d.]+) to ([\d.]+)\) \|", text, re.MULTILINE)
        assert seen and tuple(map(float, seen.groups())) == (*m.validation, *m.training), m.name


def test_the_shaped_toy_study_trains_reads_and_keeps_its_table_apart_from_the_other_toys(tmp_path):
    out = tmp_path / "shaped.jsonl"
    shaped_condition.main(["--updates", "2", "--check-every", "1", "--seeds", "0", "--env-kwargs",
                           json.dumps({"horizon": 8}), "--config", "tiny", json.dumps({"hidden_size": 16}),
                           "--out", str(out)])
    run = json.loads(out.read_text())
    assert run["toy"] == "ShapedConditionEnv" and [c["update"] for c in run["checks"]] == [1, 2]
    check = run["checks"][-1]
    assert list(check["grows_by_condition"]) == [m.name for m in TASK]
    assert check["grows_costs"] == check["grows_by_condition"]["pool5k-noise40"]  # the read's undo: that one alone
    assert out.with_suffix(".md").read_text().startswith('Toy ShapedConditionEnv {"horizon": 8}')
    with pytest.raises(ValueError, match=r"runs of \['ShapedConditionEnv'\] in a table of HiddenConditionEnv"):
        hidden_condition.main(["--out", str(out)])
