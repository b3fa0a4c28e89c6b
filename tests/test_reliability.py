"""Reliability on CPU: crash safety of the training CLI, host memory over 1,000 episodes, bad env
arguments refused by name, faults during an agent rollout, and same seed -> same run.

Faults go in through ``EsperVectorEnv.inject_fault`` via ``benchmarks/soak.py``'s :class:`FaultInjector`, the
wrapper the soak benchmark uses; its smoke test is here too.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import inspect
import json
import math
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import esper_env  # noqa: F401  (registers the Esper ids)
from benchmarks.common import child_env
from esper_agent import train
from esper_agent.baselines import RandomValidActor
from esper_agent.checkpoint import load_checkpoint
from esper_agent.config import AgentConfig
from esper_agent.distributions import ActionMasks
from esper_agent.trainer import Trainer
from esper_env import spaces
from esper_env.config import EnvConfig

torch.set_num_threads(1)  # the CI CPU has 2 cores: see tests/conftest.py

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("soak", ROOT / "benchmarks" / "soak.py")
soak = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("soak", soak)  # dataclasses look their module up there
_SPEC.loader.exec_module(soak)

ENV_KWARGS = {"device": "cpu", "batch_size": 64, "synthetic_train_size": 256, "synthetic_val_size": 128,
              "synthetic_image_size": 16, "max_epochs": 4}
"""A 4-epoch episode of a few tens of milliseconds per sub-env step."""
AGENT = AgentConfig(rollout_steps=4, hidden_size=16)
ROLLBACK_PENALTY = EnvConfig().rollback_penalty


# --- crash safety -----------------------------------------------------------------------------------------
def cli_args(run_dir: Path, updates: int) -> list[str]:
    return ["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(ENV_KWARGS), "--num-envs", "2",
            "--device", "cpu", "--seed", "7", "--total-updates", str(updates), "--run-dir", str(run_dir),
            "--rollout-steps", "4", "--checkpoint-interval", "1", "--hidden-size", "16"]


def start_cli(args: list[str], stderr: Path, code: str | None = None) -> subprocess.Popen:
    """``python -m esper_agent.train ARGS`` (or ``python -c CODE ARGS``) in a child process, one torch thread."""
    env = child_env(OMP_NUM_THREADS="1")
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "esper_agent.train"]
    with open(stderr, "w") as err:
        return subprocess.Popen([*command, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)


def assert_equal_nested(a: Any, b: Any, where: str = "") -> None:
    """Exact equality of checkpoint payloads: tensors bit for bit, containers item by item."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_equal_nested(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_equal_nested(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def metric_rows(run_dir: Path) -> list[dict]:
    """``metrics.jsonl`` without the wall-clock keys (``time/...``)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def assert_same_run(resumed: Path, straight: Path) -> None:
    """Network, optimizer, normalisers, RNG states, counters and every non-time metric are identical."""
    a, b = load_checkpoint(resumed / "checkpoint.pt"), load_checkpoint(straight / "checkpoint.pt")
    for key in ("counters", "policy", "optimizer", "normalizers", "rng", "config", "shape"):
        assert_equal_nested(a[key], b[key], key)
    assert metric_rows(resumed) == metric_rows(straight)


def temp_files(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.glob(".checkpoint.pt.tmp*"))


def test_sigkill_at_a_random_point_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    """SIGKILL (no cleanup runs) at a random moment after the first checkpoint: the last checkpoint loads, and
    resuming it to N updates ends bit-identical to an uninterrupted run of N updates from scratch."""
    run_dir = tmp_path / "killed"
    proc = start_cli(cli_args(run_dir, 1000), tmp_path / "stderr.txt")
    delay = random.Random().uniform(0.0, 1.0)  # a random point, reported on failure
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "checkpoint.pt").exists():
            assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.02)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"the run ended by itself: {(tmp_path / 'stderr.txt').read_text()}"
    done = load_checkpoint(run_dir / "checkpoint.pt")["counters"]["update"]
    print(f"SIGKILL {delay:.3f} s after the first checkpoint; the last checkpoint holds update {done}")
    # A temporary file remains only when the kill landed inside a checkpoint write (the previous checkpoint is
    # then intact, as just loaded); the resumed run's next save removes it (tested below).
    assert temp_files(run_dir) in ([], [f".checkpoint.pt.tmp{proc.pid}"]), f"killed {delay:.3f} s after update 1"
    total = done + 2
    assert train.main(["--resume", str(run_dir), "--total-updates", str(total)]) == 0
    assert train.main(cli_args(tmp_path / "straight", total)) == 0
    assert_same_run(run_dir, tmp_path / "straight")


KILL_ON_THIRD_CHECKPOINT_RENAME = """
import os, signal, sys
from esper_agent import train
real_replace, renames = os.replace, []
def replace(src, dst):
    if str(dst).endswith("checkpoint.pt"):
        renames.append(dst)
        if len(renames) == 3:  # the new checkpoint is written and synced, not yet renamed over the old one
            os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst)
os.replace = replace
sys.exit(train.main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def killed_mid_write(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A CLI run SIGKILLed inside its third checkpoint write, then resumed to 4 updates; and a straight run."""
    root = tmp_path_factory.mktemp("mid_write")
    proc = start_cli(cli_args(root / "killed", 4), root / "stderr.txt", code=KILL_ON_THIRD_CHECKPOINT_RENAME)
    proc.wait(timeout=300)
    after_kill = {"returncode": proc.returncode, "pid": proc.pid, "temp_files": temp_files(root / "killed"),
                  "update": load_checkpoint(root / "killed" / "checkpoint.pt")["counters"]["update"],
                  "stderr": (root / "stderr.txt").read_text()}
    assert train.main(["--resume", str(root / "killed")]) == 0
    assert train.main(cli_args(root / "straight", 4)) == 0
    return {"root": root, "after_kill": after_kill}


def test_a_kill_inside_a_checkpoint_write_keeps_the_previous_one_and_resumes_exactly(killed_mid_write: dict) -> None:
    after = killed_mid_write["after_kill"]
    assert after["returncode"] == -signal.SIGKILL, after["stderr"]
    assert after["temp_files"] == [f".checkpoint.pt.tmp{after['pid']}"]  # the kill did land mid-write
    assert after["update"] == 2  # update 3's checkpoint never replaced update 2's
    assert_same_run(killed_mid_write["root"] / "killed", killed_mid_write["root"] / "straight")


def test_a_kill_inside_a_checkpoint_write_leaves_no_temp_file_after_resume(killed_mid_write: dict) -> None:
    assert temp_files(killed_mid_write["root"] / "killed") == []


def test_resume_survives_a_torn_last_metrics_line(killed_mid_write: dict, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(killed_mid_write["root"] / "straight", run_dir)
    line = (run_dir / "metrics.jsonl").read_text().splitlines()[-1]
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(line[: len(line) // 2])  # what a crash during the append of update 5's line leaves
    assert train.main(["--resume", str(run_dir), "--total-updates", "5"]) == 0


# --- host memory over many episodes -----------------------------------------------------------------------
RSS_TOLERANCE_MIB = 20.0
"""Allowed host RSS growth over 900 episodes: a leaked seed module with its optimizer state is 10-150 KiB, so a
leak per episode shows as tens of MiB at least; the allocator's own noise here is about 1-2 MiB."""


def live_torch_objects() -> tuple[int, int]:
    gc.collect()
    objects = gc.get_objects()
    # type(), not isinstance(): isinstance reads __class__, which deprecated torch objects warn about.
    return (sum(issubclass(type(o), torch.Tensor) for o in objects),
            sum(issubclass(type(o), torch.nn.Module) for o in objects))


def test_host_memory_is_flat_over_1000_episodes() -> None:
    """A random valid policy plants a seed in (almost) every 1-epoch episode, 5% of steps get a fault (rollback:
    snapshot restore and prune), and every episode ends in a reset that frees the seeds. After 100 warm-up
    episodes, 900 more must not grow the RSS beyond the tolerance nor the count of live tensors and modules."""
    kwargs = {"device": "cpu", "max_epochs": 1, "synthetic_train_size": 64, "synthetic_val_size": 32,
              "synthetic_test_size": 16, "batch_size": 32, "eval_batch_size": 32, "synthetic_image_size": 8,
              "autoreset_mode": "SameStep"}  # SameStep: no reset-only steps, one episode per sub-env step
    envs = soak.FaultInjector(gym.make_vec("Esper-Synthetic-v0", num_envs=2, **kwargs), rate=0.05, seed=0)
    actor = RandomValidActor(spaces.head_sizes(3), seed=0)
    obs, info = envs.reset(seed=0)
    episodes, planted, start = 0, 0, None
    while episodes < 1000:
        actions = actor.act(obs, ActionMasks(info["op_slot_mask"], info["action_mask"]), np.ones(2, bool))
        obs, _, terminated, truncated, info = envs.step(actions)
        episodes += int((terminated | truncated).sum())
        planted += int((info.get("final_info", info)["executed_op"] == spaces.Op.GERMINATE).sum())
        if start is None and episodes >= 100:
            start = (soak.current_rss_bytes(), live_torch_objects())
    end = (soak.current_rss_bytes(), live_torch_objects())
    envs.close()
    growth = (end[0] - start[0]) / 2**20
    print(f"host RSS after 100 episodes {start[0] / 2**20:.1f} MiB, after {episodes}: {end[0] / 2**20:.1f} MiB "
          f"(+{growth:.2f} MiB); live tensors/modules {start[1]} -> {end[1]}; {planted} seeds planted, "
          f"{envs.counts.rollbacks} rollbacks")
    assert planted > 900 and envs.counts.rollbacks > 20 and envs.counts.faults_survived > 20
    assert growth < RSS_TOLERANCE_MIB
    assert end[1][0] <= start[1][0] + 16 and end[1][1] <= start[1][1] + 4


# --- bad arguments to gym.make ----------------------------------------------------------------------------
NEGATIVE = st.floats(max_value=-sys.float_info.min)  # a bound, not a filter: -0.0 is >= 0 and valid
NON_POSITIVE = st.floats(max_value=0.0, allow_nan=False)
NOT_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
OUT_OF_RANGE: dict[str, st.SearchStrategy] = {
    **{name: st.integers(max_value=low - 1) for name, low in {
        "synthetic_train_size": 64, "synthetic_val_size": 16, "synthetic_test_size": 16, "synthetic_image_size": 8,
        "synthetic_num_classes": 2, "batch_size": 1, "eval_batch_size": 1, "max_epochs": 1,
        "min_training_epochs": 0, "max_holding_epochs": 1,
        "embargo_epochs": 0, "min_prune_age": 0, "snapshot_interval": 1, "train_images_per_epoch": 1,
        "val_images": 1}.items()},
    **{name: st.text(max_size=12).filter(lambda s, ok=ok: s not in ok) for name, ok in {
        "dataset": ("cifar10", "synthetic"), "reward_mode": ("accuracy", "contribution", "sparse"),
        "autoreset_mode": ("NextStep", "SameStep", "Disabled"), "execution": ("auto", "eager", "graph"),
        "precision": ("auto", "float32", "bfloat16")}.items()},
    **{name: NEGATIVE | NOT_FINITE for name in (
        "param_penalty", "over_budget_penalty", "op_cost", "invalid_action_penalty", "rollback_penalty",
        "weight_decay")},
    **{name: NON_POSITIVE | NOT_FINITE for name in ("host_lr", "seed_lr", "divergence_loss", "sparse_scale",
                                                     "sparse_clip")},
    "momentum": NEGATIVE | st.floats(min_value=1.0) | st.just(math.nan),
    "pbrs_gamma": NON_POSITIVE | st.floats(min_value=1.0, exclude_min=True) | st.just(math.nan),
    "pbrs_weight": NOT_FINITE, "fossilize_min_contribution": NOT_FINITE,
    "max_seeds": st.integers(max_value=0) | st.integers(min_value=4),
    "param_budget": st.integers(max_value=-1),
    "collapse_patience": st.integers(max_value=-1),
    **{name: NEGATIVE | st.floats(min_value=1.0, exclude_min=True) | st.just(math.nan)
       for name in ("collapse_accuracy_margin", "collapse_peak")},
    "collapse_loss_tolerance": NEGATIVE | NOT_FINITE,
    "ema_epochs": NEGATIVE | NOT_FINITE,
    "param_budget_mask": st.just(True),  # alone, i.e. with the default param_budget=None: nothing to enforce
    "host_widths": st.lists(st.integers(max_value=0), min_size=1, max_size=3) | st.just([]),
    "slot_blocks": st.sampled_from([[], [0, 0], [2, 1], [3], [-1]]),
    "stage_potentials": st.lists(st.floats(-1, 1), max_size=12).filter(lambda p: len(p) != 8)
    | st.just([0.0] * 7 + [math.nan]),
    "device": st.sampled_from(["", "gpu", "banana", "cuda:x"]),
    "devices": st.just([]),
    "condition": st.sampled_from(["", "Full", "pool1k"]),
    "host": st.sampled_from(["", "large", "Family"]),
    "lr_schedule": st.sampled_from(["", "linear", "WSD"]),
    "label_smoothing": NEGATIVE | st.floats(min_value=1.0, exclude_min=True) | st.just(math.nan),
    "crop_pad": st.integers(max_value=-1),
    "family_stem": st.integers(max_value=0),
    # on the default small host any growth price is refused: only the family host counts FLOPs
    **{name: NEGATIVE | NOT_FINITE | st.floats(min_value=1e-3, max_value=10.0) for name in ("flops_price",
                                                                                        "params_price")},
    "family_widths": st.just([]) | st.lists(st.integers(max_value=0), min_size=3, max_size=3)
    | st.lists(st.integers(300, 999), min_size=3, max_size=3),
    "family_blocks": st.lists(st.integers(max_value=-1), min_size=3, max_size=3)
    | st.lists(st.integers(0, 0), min_size=1, max_size=2) | st.lists(st.integers(2, 5), min_size=3, max_size=3),
    "max_widths": st.lists(st.integers(max_value=0), min_size=3, max_size=3) | st.lists(st.integers(64, 99),
                                                                                          max_size=2),
    "max_blocks": st.lists(st.integers(max_value=-1), min_size=3, max_size=3) | st.lists(st.integers(1, 2),
                                                                                            max_size=2),
    "start_widths": st.lists(st.integers(300, 999), min_size=3, max_size=3)
    | st.lists(st.integers(16, 32), min_size=1, max_size=2),
    "start_blocks": st.lists(st.integers(2, 5), min_size=3, max_size=3) | st.lists(st.integers(0, 0), min_size=1,
                                                                                      max_size=2),
}
"""A value of the right type but out of range, per field (the ranges the field docstrings and DESIGN give)."""
ANY_VALUE_OK = {"data_dir", "download", "report_test_accuracy", "test_flip", "auto_advance",
                "one_seed_incubating"}
FIELDS = {f.name: str(f.type).replace(" ", "") for f in dataclasses.fields(EnvConfig)}
# gym.make's own: its parameters, and render_mode, which it reads from its **kwargs before the env sees them
MAKE_PARAMETERS = set(inspect.signature(gym.make).parameters) | {"render_mode"}


def wrong_type(annotation: str) -> st.SearchStrategy:
    """A value of another JSON type than ``annotation`` allows (lists become tuples, as gym.make's do)."""
    base, optional = annotation.removesuffix("|None"), annotation.endswith("|None")
    none = st.nothing() if optional else st.none()
    text, number = st.text(max_size=5), st.floats(allow_nan=False, allow_infinity=False)
    choices = {"bool": st.integers() | text | number, "int": st.booleans() | text | number,
               "float": st.booleans() | text | st.lists(number, max_size=2), "str": st.integers() | number,
               "tuple[int,...]": st.integers() | st.lists(text, min_size=1, max_size=2),
               "tuple[float,...]": number | st.lists(text | st.booleans(), min_size=8, max_size=8),
               "tuple[str,...]": text | st.lists(st.integers(), min_size=1, max_size=2)}
    return none | choices[base]


def bad_argument(field: str) -> st.SearchStrategy:
    """(field, value, exception) with a wrong type, or (when defined) an out-of-range value."""
    typed = wrong_type(FIELDS[field]).map(lambda v: (field, v, TypeError))
    if field in OUT_OF_RANGE:
        return typed | OUT_OF_RANGE[field].map(lambda v: (field, v, ValueError))
    return typed


def test_every_field_has_a_bad_value_strategy() -> None:
    assert set(OUT_OF_RANGE) | ANY_VALUE_OK == set(FIELDS)


@settings(max_examples=300, deadline=None, database=None)
@given(st.sampled_from(sorted(FIELDS)).flatmap(bad_argument), st.booleans())
def test_bad_kwargs_are_refused_naming_the_field(case: tuple[str, Any, type], vector: bool) -> None:
    field, value, error = case
    vector = vector or field == "autoreset_mode"  # a vector-face argument: the single env refuses any value
    make = gym.make_vec if vector else gym.make
    with pytest.raises(error) as caught:
        make("Esper-Synthetic-v0", **{field: value})
    assert str(caught.value).startswith(f"{field}="), str(caught.value)


@settings(max_examples=50, deadline=None, database=None)
# Identifiers drawn directly (filtering random text for identifiers discarded so many that Hypothesis's health
# check failed now and then), plus a non-ASCII one.
@given(st.one_of(st.just("größe"), st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,19}", fullmatch=True))
       .filter(lambda k: k not in FIELDS.keys() | MAKE_PARAMETERS))
def test_unknown_kwargs_are_refused_naming_the_key(key: str) -> None:
    with pytest.raises(TypeError, match="unknown Esper env argument") as caught:
        gym.make("Esper-Synthetic-v0", **{key: 1})
    assert repr(key) in str(caught.value)


@pytest.mark.parametrize("kwargs", [{"host_lr": 10**400}, {"pbrs_weight": -(10**400)}, {"device": "meta"}],
                         ids=["huge-int-lr", "huge-int-pbrs", "meta-device"])
def test_values_outside_what_the_checks_expect_are_refused_by_name(kwargs: dict) -> None:
    field = next(iter(kwargs))
    with pytest.raises((TypeError, ValueError), match=f"^{field}="):
        gym.make("Esper-Synthetic-v0", **({"device": "cpu"} | kwargs))


# --- faults during an agent rollout, and determinism ------------------------------------------------------
ROLLOUT_KEYS = ("obs", "actions", "rewards", "terminated", "truncated", "values", "log_probs", "valid",
                "episode_start")


def first_update(schedule: dict[int, list[tuple[int, str]]], rate: float = 0.0, updates: int = 1, seed: int = 3
                 ) -> tuple[soak.FaultInjector, Trainer, dict[str, torch.Tensor], dict[str, Any]]:
    """``updates`` Trainer updates on 2 sub-envs (NEXT_STEP autoreset); the last rollout's storage, copied."""
    envs = soak.FaultInjector(gym.make_vec("Esper-Synthetic-v0", num_envs=2, **ENV_KWARGS), rate, schedule=schedule)
    trainer = Trainer(envs, AGENT, seed=seed)
    for _ in range(updates):
        metrics = trainer.update()
    storage = {key: getattr(trainer.collector.storage, key).clone() for key in ROLLOUT_KEYS}
    envs.close()
    return envs, trainer, storage, metrics


def test_a_fault_mid_rollout_ends_that_sub_env_only() -> None:
    """nan_loss injected into sub-env 1 at its third step of the first rollout (inside ``Trainer.update``): that
    transition is stored terminated with the rollback penalty, the NaN never reaches the agent, and sub-env 0's
    stored trajectory is bit-identical to a run without the fault."""
    envs, trainer, faulty, metrics = first_update({2: [(1, "nan_loss")]})
    _, _, clean, _ = first_update({})
    assert envs.counts.faults_survived == 1 and envs.counts.missed_count == 0 and envs.counts.rollbacks == 1
    assert faulty["terminated"][1].tolist() == [False, False, True, False]
    assert faulty["rewards"][1, 2].item() == -ROLLBACK_PENALTY
    # The NEXT_STEP reset step after the rollback is no transition: sub-env 1's row is one step short.
    assert faulty["valid"][1].tolist() == [True, True, True, False] and clean["valid"].all()
    for key in ROLLOUT_KEYS:
        assert torch.equal(faulty[key][0], clean[key][0]), key  # the other sub-env: untouched
        assert torch.equal(faulty[key][1, :2], clean[key][1, :2]), key  # before the fault: the same
    assert all(torch.isfinite(p).all() for p in trainer.policy.parameters())
    assert all(math.isfinite(v) for k, v in metrics.items() if k.startswith("loss/"))


def test_same_seed_same_run_on_cpu() -> None:
    """Two runs of agent + env (with seeded faults) from one seed: identical trajectories and parameters; a
    different seed gives different ones (so the comparison can fail)."""
    runs = [first_update({}, rate=0.1, updates=2, seed=seed) for seed in (5, 5, 6)]
    (envs_a, a, rollout_a, _), (envs_b, b, rollout_b, _), (_, c, _, _) = runs
    assert envs_a.counts == envs_b.counts
    for key in ROLLOUT_KEYS:
        assert torch.equal(rollout_a[key], rollout_b[key]), key
    assert_equal_nested(a.state_dict(), b.state_dict())
    assert not all(torch.equal(p, q) for p, q in zip(a.policy.parameters(), c.policy.parameters(), strict=True))


# --- the soak benchmark's smoke test ----------------------------------------------------------------------
def test_soak_benchmark_runs_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    kwargs = json.dumps({k: v for k, v in ENV_KWARGS.items() if k != "device"})
    status = soak.main(["--minutes", "0.04", "--device", "cpu", "--fault-rate", "0.2", "--num-envs", "2",
                        "--hidden-size", "16", "--env-kwargs", kwargs, "--out", str(out)])
    report = json.loads(out.read_text())
    failures = report["failures"]
    assert status == (0 if report["ok"] else 1) and report["ok"] == (not any(failures.values()))
    assert report["device"].startswith("cpu") and report["policy"] == "agent" and report["updates"] >= 1
    assert failures["nonfinite_observations"] == failures["nonfinite_rewards"] == failures["nonfinite_losses"] == 0
    # A missed fault is reported, not hidden (see the soak's docstring for when the env's faults can miss).
    assert report["faults_injected_total"] == report["faults_survived"] + report["missed_count"]
    assert report["faults_survived"] > 0 and failures["fault_mismatches"] == report["missed_count"]
    assert report["rollbacks"] == report["faults_survived"] + report["unprovoked_rollbacks"]
    assert report["episodes"] > 0 and report["env_steps_per_s"] > 0 and report["host_rss_high_water_mib"] > 0
    assert "partial" not in report  # the final report replaced the partial ones written at each memory sample
    episodes = [sample["episodes"] for sample in report["memory_samples"]]
    assert episodes == sorted(episodes) and episodes[-1] == report["episodes"]


def test_soak_writes_a_partial_report_at_each_memory_sample(tmp_path: Path) -> None:
    path = tmp_path / "partial.json"
    args = soak.build_parser().parse_args(["--minutes", "0.01", "--device", "cpu", "--policy", "random",
                                           "--num-envs", "2", "--env-kwargs", json.dumps(
                                               {k: v for k, v in ENV_KWARGS.items() if k != "device"})])
    report = soak.soak(args, partial_path=path)
    partial = json.loads(path.read_text())
    assert partial["partial"] is True and partial["memory_samples"][0]["episodes"] == 0
    assert partial["device"] == report["device"] and partial["vector_steps"] <= report["vector_steps"]
