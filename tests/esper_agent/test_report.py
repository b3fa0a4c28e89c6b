"""The evaluation report: seed fates counted from stage changes, and the evaluate CLI writing timelines, a contact
sheet and report.md for a checkpoint and for the baselines, in every autoreset mode."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)
from PIL import Image

import esper_env  # noqa: F401  (registers the Esper ids)
from esper_agent import evaluate, train
from esper_agent.baselines import RandomValidActor
from esper_agent.collect import EpisodeRecord
from esper_agent.contracts import episode_length
from esper_agent.envs import VectorEnvDriver
from esper_agent.report import SeedCounts, build_report, count_seeds, op_summary, seed_events
from esper_env.lifecycle import Stage
from esper_env.render import EpisodeRecord as Timeline
from esper_env.spaces import BLUEPRINT_NAMES, Op

TINY = {"device": "cpu", "batch_size": 64, "synthetic_train_size": 256, "synthetic_val_size": 128,
        "synthetic_image_size": 16, "max_epochs": 6}
SECTIONS = ("## Episodes", "## Seeds by blueprint", "## Seeds by slot", "## Parameters added", "## Ops")
S = Stage
D, G, T, B, H, F, P, E = S.DORMANT, S.GERMINATED, S.TRAINING, S.BLENDING, S.HOLDING, S.FOSSILIZED, S.PRUNED, S.EMBARGOED
BP = {name: i for i, name in enumerate(BLUEPRINT_NAMES)}


def timeline(steps: list[tuple[Any, ...]]) -> Timeline:
    """Two slots; each step is (op, stages, blueprint names or None, extras)."""
    record = Timeline.start(num_slots=2, max_epochs=len(steps))
    for k, (op, stages, names, extra) in enumerate(steps):
        info = {"epoch": k + 1, "executed_op": int(op), "stage": [int(s) for s in stages], "alpha": [0.0, 0.0],
                "blueprint": [-1 if n is None else BP[n] for n in names], "val_accuracy": 0.5,
                "seed_params": 0.0, **extra}
        record.add(info)
    return record


def hand_built() -> list[Timeline]:
    first = timeline([
        (Op.GERMINATE, (G, D), ("conv_small", None), {}),
        (Op.GERMINATE, (T, G), ("conv_small", "attention"), {}),
        (Op.WAIT, (B, T), ("conv_small", "attention"), {}),
        (Op.PRUNE, (H, E), ("conv_small", None), {}),  # the agent prunes attention from slot 1
        (Op.FOSSILIZE, (F, E), ("conv_small", None), {}),
        (Op.GERMINATE, (F, G), ("conv_small", "norm"), {}),
        (Op.WAIT, (F, T), ("conv_small", "norm"), {"invalid_action": True, "seed_params": 1234.0}),
    ])
    second = timeline([
        (Op.GERMINATE, (G, D), ("conv_light", None), {}),
        (Op.GERMINATE, (T, G), ("conv_light", "conv_heavy"), {}),
        (Op.WAIT, (H, T), ("conv_light", "conv_heavy"), {}),
        (Op.WAIT, (P, T), (None, "conv_heavy"), {"holding_timeout": [True, False]}),
        (Op.WAIT, (P, P), (None, None), {"rollback": True}),  # the governor removes conv_heavy
    ])
    # Planted in the step that rolls back: the info shows the slot pruned and no blueprint.
    third = timeline([(Op.GERMINATE, (P, D), (None, None), {"rollback": True})])
    return [first, second, third]


def test_seed_fates_are_counted_by_blueprint_and_slot() -> None:
    timelines = hand_built()
    assert [(e.slot, e.blueprint, e.kind) for e in seed_events(timelines[1])] == [
        (0, "conv_light", "planted"), (1, "conv_heavy", "planted"), (0, "conv_light", "holding_timeout"),
        (1, "conv_heavy", "rolled_back")]
    counts = count_seeds(timelines)
    assert counts.total == SeedCounts(planted=6, fossilized=1, pruned=2, holding_timeouts=1, rolled_back=2)
    assert counts.by_blueprint["conv_small"] == SeedCounts(planted=1, fossilized=1)
    assert counts.by_blueprint["attention"] == SeedCounts(planted=1, pruned=1)
    assert counts.by_blueprint["norm"] == SeedCounts(planted=1)
    assert counts.by_blueprint["conv_light"] == SeedCounts(planted=1, pruned=1, holding_timeouts=1)
    assert counts.by_blueprint["conv_heavy"] == SeedCounts(planted=1, rolled_back=1)
    assert counts.by_blueprint["unknown"] == SeedCounts(planted=1, rolled_back=1)
    assert counts.by_blueprint["depthwise"] == counts.by_blueprint["bottleneck"] == SeedCounts()
    assert counts.by_slot == {0: SeedCounts(planted=3, fossilized=1, pruned=1, holding_timeouts=1, rolled_back=1),
                              1: SeedCounts(planted=3, pruned=1, rolled_back=1)}
    ops = op_summary(timelines)
    assert ops.executed == {"WAIT": 5, "GERMINATE": 6, "ADVANCE": 0, "PRUNE": 1, "FOSSILIZE": 1}
    assert (ops.steps, ops.invalid) == (13, 1)


def test_report_lists_episodes_seeds_parameters_and_ops() -> None:
    timelines = hand_built()
    episodes = [EpisodeRecord(0, 1.5, 7, 0.5, 1234.0, float("nan"), False),
                EpisodeRecord(1, -0.5, 5, 0.5, 0.0, float("nan"), True),
                EpisodeRecord(0, -1.0, 1, 0.5, 0.0, float("nan"), True)]
    text = build_report("hand-built", episodes, timelines, settings=["policy: none"],
                        images=["episode-0.png", "episode-1.png", "episode-2.png"], contact_sheet="contact-sheet.png")
    assert text.startswith("# hand-built\n\n- policy: none\n") and "![every episode](contact-sheet.png)" in text
    assert all(section in text for section in SECTIONS)
    assert "| 0 | 0 | 1.5000 | 0.5000 | n/a | 1,234 | no | 7 | 3 / 1 / 1 | [png](episode-0.png) |" in text
    assert "| 1 | 1 | -0.5000 | 0.5000 | n/a | 0 | yes | 5 | 2 / 0 / 1 | [png](episode-1.png) |" in text
    assert "| conv_light | 1 | 0 | 1 | 1 | 0 |" in text and "| 1 | 3 | 0 | 1 | 0 | 1 |" in text
    assert "| unknown | 1 | 0 | 0 | 0 | 1 |" in text and text.count("| **total** | 6 | 1 | 2 | 1 | 2 |") == 2
    assert "over 3 episodes: mean 411, min 0, max 1,234" in text
    assert "| GERMINATE | 6 | 46.2% |" in text and "1 of 13 steps (7.7%)" in text
    assert "test accuracy: not measured" in text and "rollbacks: 2 of 3 episodes" in text
    with pytest.raises(ValueError, match="episode 1 .* has length 4 but its timeline 5 steps"):
        build_report("x", [episodes[0], episodes[1]._replace(length=4), episodes[2]], timelines)
    with pytest.raises(ValueError, match="1 episodes, 3 timelines"):
        build_report("x", episodes[:1], timelines)


def assert_png(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        image.load()
        assert image.format == "PNG" and image.mode == "RGB", (path, image.format, image.mode)
        return image.size


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_heuristic_writes_timelines_a_contact_sheet_and_a_report(mode: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a baseline's default outputs go to the working directory
    kwargs = {**TINY, "autoreset_mode": mode, "report_test_accuracy": mode == "SameStep"}
    assert evaluate.main(["--policy", "heuristic", "--env", "Esper-Synthetic-v0", "--env-kwargs",
                          json.dumps(kwargs), "--num-envs", "2", "--episodes", "3", "--seed", "7"]) == 0
    folder = tmp_path / "Esper-Synthetic-v0.heuristic.eval"
    assert sorted(p.name for p in folder.iterdir()) == ["contact-sheet.png", "episode-0.png", "episode-1.png",
                                                       "episode-2.png", "episodes.json", "report.md"]
    sizes = {assert_png(folder / f"episode-{k}.png") for k in range(3)}
    assert len(sizes) == 1  # one layout for every episode of one env
    sheet_width, _ = assert_png(folder / "contact-sheet.png")
    assert sheet_width > next(iter(sizes))[0]  # three tiles side by side
    report = (folder / "report.md").read_text()
    assert report.startswith("# the heuristic policy on Esper-Synthetic-v0\n")
    assert all(section in report for section in SECTIONS)
    rows = re.findall(r"^\| (\d) \| (\d) \| .* \| 6 \| (\d+) / (\d+) / (\d+) \| \[png\]\(episode-\1\.png\) \|$",
                      report, re.M)
    assert [r[0] for r in rows] == ["0", "1", "2"] and [r[1] for r in rows] == ["0", "0", "1"]
    assert "Invalid actions (executed as WAIT): 0 of 18 steps" in report  # the heuristic reads the masks
    assert ("test accuracy: mean" in report) == (mode == "SameStep")
    timelines = json.loads((folder / "episodes.json").read_text())["episodes"]
    assert [len(t["epoch"]) for t in timelines] == [6, 6, 6] and timelines[0]["epoch"] == [1, 2, 3, 4, 5, 6]
    table = json.loads((tmp_path / "Esper-Synthetic-v0.heuristic.eval.json").read_text())
    assert table["policy"] == "heuristic" and table["checkpoint"] is None and len(table["episodes"]) == 3
    assert table["env_kwargs"] == kwargs and table["num_envs"] == 2 and table["seed"] == 7
    # each episode's seed fates, as the report counts them
    assert [tuple(str(e["seeds"][k]) for k in ("planted", "fossilized", "pruned")) for e in table["episodes"]] == [
        r[2:] for r in rows]
    assert sum(e["seeds"]["planted"] for e in table["episodes"]) > 0  # the heuristic plants


def test_timelines_know_the_episode_length_of_a_gymnasium_sync_vector_env(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A SyncVectorEnv has no config of its own: the length is read from its sub-envs, as training reads it."""
    monkeypatch.chdir(tmp_path)
    kwargs = {**TINY, "vectorization_mode": "sync"}
    assert evaluate.main(["--policy", "static", "--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(kwargs),
                          "--num-envs", "2", "--episodes", "2"]) == 0
    timelines = json.loads((tmp_path / "Esper-Synthetic-v0.static.eval" / "episodes.json").read_text())["episodes"]
    assert [t["max_epochs"] for t in timelines] == [TINY["max_epochs"]] * 2


def test_timelines_agree_with_the_executed_ops_and_the_episode_records() -> None:
    """Every GERMINATE, PRUNE and FOSSILIZE the env executed shows up as a stage change in the timeline of the
    same episode (a tiny host diverges now and then on its first epoch: rollbacks are in the sample)."""
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=2, **{**TINY, "autoreset_mode": "SameStep"})
    try:
        driver = VectorEnvDriver(envs)
        recorder = evaluate.TimelineRecorder(driver, episode_length(envs))
        records = evaluate.run_episodes(driver, RandomValidActor(driver.head_sizes, seed=1), 5, 3, recorder)
    finally:
        envs.close()
    timelines = recorder.timelines_of(records)
    assert [r.length for r in records] == [len(t.epoch) for t in timelines]
    assert [r.rollback for r in records] == [t.rollback[-1] for t in timelines]
    assert [r.final_accuracy for r in records] == [t.val_accuracy[-1] for t in timelines]
    for timeline in timelines:
        counts, ops = count_seeds([timeline]).total, op_summary([timeline]).executed
        assert counts.planted == ops["GERMINATE"] > 0
        # A seed pruned in the step that rolls back counts as removed by the rollback.
        prunes = sum(op == Op.PRUNE and not rb for op, rb in zip(timeline.executed_op, timeline.rollback, strict=True))
        assert counts.pruned - counts.holding_timeouts == prunes
        assert counts.fossilized == ops["FOSSILIZE"]


def test_checkpoint_policy_writes_the_report_beside_the_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert train.main(["--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY), "--num-envs", "2",
                       "--device", "cpu", "--seed", "3", "--total-updates", "1", "--run-dir", str(run_dir),
                       "--rollout-steps", "6", "--hidden-size", "16", "--num-minibatches", "2"]) == 0
    checkpoint = run_dir / "checkpoint.pt"
    assert evaluate.main(["--checkpoint", str(checkpoint), "--episodes", "2"]) == 0
    assert "| episode | env | return |" in Path(f"{checkpoint}.eval.md").read_text()
    folder = Path(f"{checkpoint}.eval")
    for name in ("episode-0.png", "episode-1.png", "contact-sheet.png"):
        assert_png(folder / name)
    report = (folder / "report.md").read_text()
    assert report.startswith(f"# {checkpoint} on Esper-Synthetic-v0\n") and "argmax actions" in report
    assert all(section in report for section in SECTIONS)
    # A shorter evaluation into the same folder leaves no timeline of the longer one behind.
    assert evaluate.main(["--checkpoint", str(checkpoint), "--episodes", "1", "--report-dir", str(folder)]) == 0
    assert not (folder / "episode-1.png").exists() and (folder / "episode-0.png").exists()


def test_an_env_without_lifecycle_info_gets_the_table_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    env = f"{toy_env.__name__}:{toy_env.ENV_ID}"
    output, folder = tmp_path / "toy.md", tmp_path / "toy-report"
    assert evaluate.main(["--policy", "random", "--env", env, "--num-envs", "2", "--episodes", "3",
                          "--output", str(output), "--report-dir", str(folder)]) == 0
    assert output.exists() and not folder.exists()
    assert "no timelines or report" in capsys.readouterr().out
    episodes = json.loads(output.with_suffix(".json").read_text())["episodes"]
    assert len(episodes) == 3 and not any("seeds" in e for e in episodes)  # no timelines, no seed fates


@pytest.mark.parametrize(("argv", "message"), [
    (["--policy", "heuristic"], "--policy heuristic; pass --env"),
    (["--policy", "checkpoint"], "--policy checkpoint needs --checkpoint PATH"),
    (["--policy", "static", "--checkpoint", "x.pt", "--env", "Esper-Synthetic-v0"],
     "--checkpoint x.pt is read only by --policy checkpoint; got --policy static"),
    (["--policy", "static", "--env", "Esper-Synthetic-v0", "--episodes", "0"], "--episodes must be >= 1, got 0"),
])
def test_evaluate_refuses_inconsistent_flags(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=re.escape(message)):
        evaluate.main(argv)


def test_a_family_episode_names_its_blueprints_in_the_familys_catalogue(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    kwargs = {**TINY, "host": "family", "max_epochs": 4}
    assert evaluate.main(["--policy", "heuristic", "--env", "Esper-Synthetic-v0", "--env-kwargs",
                          json.dumps(kwargs), "--num-envs", "1", "--episodes", "1"]) == 0
    folder = tmp_path / "Esper-Synthetic-v0.heuristic.eval"
    report = (folder / "report.md").read_text()
    assert "| widen_l |" in report and "| conv_small |" not in report
    saved = json.loads((folder / "episodes.json").read_text())["episodes"][0]
    assert saved["host"] == "family" and Timeline.from_json(saved).blueprint_name(0) == "deepen"
    old = {k: v for k, v in saved.items() if k != "host"}  # a timeline saved before episodes named their host
    assert Timeline.from_json(old).blueprint_name(0) == BLUEPRINT_NAMES[0]
    with pytest.raises(ValueError, match="host='tiny'"):
        Timeline.start(2, host="tiny")


def test_a_seed_that_joins_the_host_counts_as_fossilized() -> None:
    """A family host's FOSSILIZE joins the seed to the host and frees its slot in the same step (HOLDING ->
    DORMANT): the report counts it fossilized, named by the step before, and the slot can grow again."""
    joined = timeline([
        (Op.GERMINATE, (G, D), ("conv_small", None), {}),
        (Op.WAIT, (H, D), ("conv_small", None), {}),
        (Op.FOSSILIZE, (D, D), (None, None), {}),
        (Op.GERMINATE, (G, D), ("attention", None), {}),
        (Op.WAIT, (D, D), (None, None), {"rollback": True}),  # the governor removes it: not a join
    ])
    assert [(e.step, e.blueprint, e.kind) for e in seed_events(joined)] == [
        (0, "conv_small", "planted"), (2, "conv_small", "fossilized"), (3, "attention", "planted")]
