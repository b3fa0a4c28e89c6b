"""The blueprint catalogue is the one source of the blueprint head, the observation's one-hot, the seeds built
and the env's docs; appending a blueprint to it is all it takes to offer a new one."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from esper_env.blueprints import BLUEPRINTS
from esper_env.env import EsperEnv
from esper_env.seeds import build_seed
from esper_env.spaces import BLUEPRINT_NAMES, SLOT_FEATURES, Head, head_sizes

RECORDED_ORDER = ("norm", "attention", "depthwise", "conv_small", "bottleneck", "conv_light", "conv_heavy")
"""The action values that trained agents and committed results used: new blueprints go after these."""


def test_the_catalogue_keeps_the_recorded_action_order():
    assert BLUEPRINT_NAMES[: len(RECORDED_ORDER)] == RECORDED_ORDER


def test_names_are_distinct_identifiers_with_one_line_docs():
    assert len(set(BLUEPRINT_NAMES)) == len(BLUEPRINTS)
    for blueprint in BLUEPRINTS:
        assert blueprint.name.isidentifier() and blueprint.doc and "\n" not in blueprint.doc


def test_the_spaces_follow_the_catalogue():
    assert head_sizes(3)[Head.BLUEPRINT] == len(BLUEPRINTS)
    assert {f.name: f.size for f in SLOT_FEATURES}["blueprint"] == len(BLUEPRINTS)


def test_the_env_docstring_lists_the_catalogue_and_leaves_no_field_unfilled():
    doc = EsperEnv.__doc__
    assert "${" not in doc and f"MultiDiscrete([5, num_slots, {len(BLUEPRINTS)}, 3, 3])" in doc
    for index, blueprint in enumerate(BLUEPRINTS):
        assert f"* {index} ``{blueprint.name}``: {blueprint.doc}" in doc
    assert ", ".join(f"{i} {name}" for i, name in enumerate(BLUEPRINT_NAMES)) in doc


@pytest.mark.parametrize("index", [-1, len(BLUEPRINTS)])
def test_build_seed_refuses_an_index_outside_the_catalogue(index: int):
    with pytest.raises(ValueError, match=rf"blueprint={index}; expected an index in \[0, {len(BLUEPRINTS)}\)"):
        build_seed(index, 8)


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_pure_modules_read_the_catalogue_without_importing_torch():
    out = _run("""
        import sys
        import esper_env.masks, esper_env.observation, esper_env.rewards, esper_env.spaces
        print("torch" in sys.modules)
    """)
    assert out.strip() == "False"


def test_a_blueprint_appended_to_the_catalogue_reaches_the_spaces_the_seeds_the_docs_and_the_env(tiny):
    """What adding a blueprint to ``esper_env/blueprints.py`` does, done in a fresh process before anything
    reads the catalogue."""
    out = _run(f"""
        import numpy as np, torch
        import esper_env.blueprints as bp

        def _extra(c):
            b = bp._blocks()
            return b.Residual(b.conv(c, c, 1), b.relu(), b.conv(c, c, 1), b.zero_group_norm(c))

        bp.BLUEPRINTS = (*bp.BLUEPRINTS, bp.Blueprint("extra", "x + GN(conv1x1(ReLU(conv1x1(x)))), GN zero", _extra))
        import gymnasium as gym
        import esper_env
        from esper_env import spaces
        from esper_env.env import EsperEnv
        from esper_env.seeds import build_seed

        assert spaces.BLUEPRINT_NAMES[-1] == "extra" and spaces.head_sizes(3)[2] == 8
        assert spaces.observation_size(3) == 117  # one more one-hot entry per slot
        assert "* 7 ``extra``: x + GN(conv1x1(ReLU(conv1x1(x)))), GN zero" in EsperEnv.__doc__
        x = torch.randn(2, 8, 4, 4)
        assert torch.equal(build_seed(7, 8)(x), x)  # the identity when planted
        env = gym.make("Esper-Synthetic-v0", **{tiny!r})
        assert env.action_space.nvec.tolist() == [5, 3, 8, 3, 3]
        env.reset(seed=0)
        info = env.step(np.array([1, 1, 7, 0, 0]))[4]
        print(info["invalid_action"], info["blueprint"].tolist())
    """)
    assert out.split("\n")[0] == "False [-1, 7, -1]"
