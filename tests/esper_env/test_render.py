"""Episode pictures: fixed frame sizes, frames that follow the lifecycle, readable PNGs, JSON round trips."""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from PIL import Image

import esper_env  # noqa: F401  (registers the ids)
from esper_env.env import EsperEnv
from esper_env.info import split_vector_info
from esper_env.lifecycle import Stage
from esper_env.render import (
    RENDER_METADATA,
    EpisodeRecord,
    Renderer,
    draw_episode,
    episode_events,
    frame_size,
    write_contact_sheet,
    write_episode_png,
)
from esper_env.spaces import BLUEPRINT_NAMES, Op

ID = "Esper-Synthetic-v0"
REAL = {"device": "cpu", "batch_size": 64, "synthetic_train_size": 256, "synthetic_val_size": 128,
        "synthetic_image_size": 16, "max_epochs": 6}
GERMINATE = np.array([Op.GERMINATE, 1, BLUEPRINT_NAMES.index("conv_light"), 0, 0], dtype=np.int64)
WAIT = np.zeros(5, dtype=np.int64)
D, T, B, H, F, P, E = (Stage.DORMANT, Stage.TRAINING, Stage.BLENDING, Stage.HOLDING, Stage.FOSSILIZED,
                       Stage.PRUNED, Stage.EMBARGOED)


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """The tiny host trains fastest on one thread; two threads on a busy 2-core CI machine take 10x longer."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _info(epoch: int, stages: list[Stage], blueprints: list[int], **extra) -> dict:
    alpha = [1.0 if s in (H, F) else 0.5 if s == B else 0.0 for s in stages]
    info = {"epoch": epoch, "val_accuracy": 0.1 + 0.02 * epoch, "host_only_accuracy": 0.1 + 0.019 * epoch,
            "executed_op": 0, "invalid_action": False, "rollback": False, "stage": np.array(stages),
            "alpha": np.array(alpha), "blueprint": np.array(blueprints), "seed_params": 100.0 * epoch,
            "contribution": np.full(len(stages), np.nan), "holding_timeout": np.zeros(len(stages), dtype=bool)}
    return {**info, **extra}


def _hand_record() -> EpisodeRecord:
    """Slot 0: conv_small germinated, blended, fossilized. Slot 1: attention pruned by the agent. Slot 2:
    depthwise pruned by the holding timeout. Then an invalid action and a rollback that prunes nothing."""
    rows = [
        ([T, D, D], [3, -1, -1], {"executed_op": Op.GERMINATE}),
        ([B, T, D], [3, 1, -1], {"executed_op": Op.GERMINATE}),
        ([H, B, T], [3, 1, 2], {"executed_op": Op.GERMINATE, "contribution": np.array([0.7, np.nan, np.nan])}),
        ([F, E, B], [3, -1, 2], {"executed_op": Op.PRUNE, "contribution": np.array([np.nan, np.nan, -0.2])}),
        ([F, E, H], [3, -1, 2], {"executed_op": Op.FOSSILIZE, "invalid_action": True}),
        ([F, D, P], [3, -1, -1], {"holding_timeout": np.array([False, False, True])}),
        ([F, D, E], [3, -1, -1], {"rollback": True}),
    ]
    record = EpisodeRecord.start(3, max_epochs=10)
    for epoch, (stages, blueprints, extra) in enumerate(rows, start=1):
        record.add(_info(epoch, stages, blueprints, **extra))
    return record


@pytest.fixture(scope="module")
def real_episode() -> tuple[list[dict], list[np.ndarray], EpisodeRecord]:
    """A recorded Esper-Synthetic-v0 episode (germinate at step 0, then WAIT): infos, frames after reset and
    after every step, and the record the renderer kept."""
    with _one_torch_thread():
        return _record_real_episode()


def _record_real_episode() -> tuple[list[dict], list[np.ndarray], EpisodeRecord]:
    env = gym.make(ID, **REAL)
    env.reset(seed=3)
    renderer = Renderer(env.unwrapped.config.num_slots, REAL["max_epochs"], title="scripted")
    infos, frames = [], [renderer.frame()]
    for step in range(REAL["max_epochs"]):
        _, _, terminated, truncated, info = env.step(GERMINATE if step == 0 else WAIT)
        renderer.step(info)
        infos.append(info)
        frames.append(renderer.frame())
        if terminated or truncated:
            break
    env.close()
    return infos, frames, renderer.record


def test_metadata_declares_rgb_array_at_a_few_frames_per_second():
    assert RENDER_METADATA == {"render_modes": ["rgb_array"], "render_fps": 4}


def test_events_are_read_off_the_stages_with_blueprint_names():
    events = [(e.step, e.slot, e.kind, e.label) for e in episode_events(_hand_record())]
    assert events == [
        (0, 0, "germinate", "conv_small"),
        (1, 1, "germinate", "attention"),
        (2, 2, "germinate", "depthwise"),
        (3, 0, "fossilize", "conv_small +0.7pp"),
        (3, 1, "prune", "attention"),
        (5, 2, "holding_timeout", "depthwise -0.2pp"),
    ]


def test_a_seed_joining_a_family_host_is_a_fossilize_event():
    """HOLDING -> DORMANT in one step without a rollback: the seed joined the host (a family host's FOSSILIZE)."""
    record = EpisodeRecord.start(3, max_epochs=10)
    rows = [([T, D, D], [3, -1, -1], {"executed_op": Op.GERMINATE}),
            ([H, D, D], [3, -1, -1], {"contribution": np.array([1.5, np.nan, np.nan])}),
            ([D, D, D], [-1, -1, -1], {"executed_op": Op.FOSSILIZE})]
    for epoch, (stages, blueprints, extra) in enumerate(rows, start=1):
        record.add(_info(epoch, stages, blueprints, **extra))
    events = [(e.step, e.slot, e.kind, e.label) for e in episode_events(record)]
    assert events == [(0, 0, "germinate", "conv_small"), (2, 0, "fossilize", "conv_small +1.5pp")]


def test_frame_size_is_fixed_from_the_first_step_and_declared():
    record, full = EpisodeRecord.start(3, max_epochs=10), _hand_record()
    shapes = {draw_episode(record).shape}
    for step in range(len(full.epoch)):
        record.add(_step_info(full, step))
        shapes.add(draw_episode(record).shape)
    assert shapes == {(*frame_size(3), 3)}
    assert draw_episode(full, width=480, legend=False).shape == (*frame_size(3, 480, legend=False), 3)
    assert draw_episode(full, height=700).shape == (700, 960, 3)


def test_frame_changes_when_only_the_lifecycle_changes():
    record = _hand_record()
    erased = EpisodeRecord.from_json(record.to_json())
    erased.stage[2][2], erased.blueprint[2][2], erased.alpha[2][2] = int(Stage.DORMANT), -1, 0.0
    assert np.any(draw_episode(record) != draw_episode(erased))


def test_real_episode_frames_are_constant_in_size_and_follow_the_germinate_step(real_episode):
    infos, frames, record = real_episode
    assert {f.shape for f in frames} == {(*frame_size(record.num_slots), 3)}
    assert all(f.dtype == np.uint8 for f in frames)
    assert np.any(frames[0] != frames[1])
    assert record.blueprint[0][1] == BLUEPRINT_NAMES.index("conv_light") and record.stage[0][1] in (1, 2)
    assert [e.kind for e in episode_events(record)] == ["germinate"]
    assert record.epoch == [int(i["epoch"]) for i in infos]


def test_record_survives_a_json_round_trip(real_episode):
    _, _, record = real_episode
    for original in (record, _hand_record()):
        text = original.to_json()
        json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
        copy = EpisodeRecord.from_json(text)
        assert copy.to_json() == text
        assert EpisodeRecord.from_json(json.loads(text)).to_json() == text
        assert math.isnan(copy.contribution[0][0])
        assert np.array_equal(draw_episode(copy), draw_episode(original))
    assert record.train_accuracy and all(0.0 <= a <= 1.0 for a in record.train_accuracy)  # kept from the step info
    older = json.loads(record.to_json())
    del older["train_accuracy"]  # a record written before the field existed still loads
    assert EpisodeRecord.from_json(older).train_accuracy == []


def test_png_writer_produces_a_readable_image(tmp_path: Path):
    path = write_episode_png(_hand_record(), tmp_path / "run" / "episode.png", title="hand-made")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.mode == "RGB"
        assert image.size == frame_size(3)[::-1]
        assert np.asarray(image).std() > 10  # not a blank page
    assert [p.name for p in path.parent.iterdir()] == ["episode.png"]  # no temp file left behind


def test_contact_sheet_tiles_every_episode(tmp_path: Path, real_episode):
    records = [_hand_record(), real_episode[2], _hand_record()]
    path = write_contact_sheet(records, tmp_path / "sheet.png", title="policy", columns=2)
    tile_h, tile_w = frame_size(3, 560, legend=False)
    with Image.open(path) as image:
        assert image.mode == "RGB" and image.width == 2 * tile_w + 8
        assert image.height > 2 * tile_h + 8
    with pytest.raises(ValueError, match="records"):
        write_contact_sheet([], tmp_path / "empty.png")


def test_split_vector_info_respects_the_masks():
    info = {"epoch": np.array([3, 0]), "_epoch": np.array([True, False]), "stage": np.array([[1, 0], [0, 0]]),
            "_stage": np.array([True, False]), "reset": np.array([False, True]), "_reset": np.array([True, True])}
    first, second = split_vector_info(info, 0), split_vector_info(info, 1)
    assert first["epoch"] == 3 and first["stage"].tolist() == [1, 0] and not first["reset"]
    assert second == {"reset": True}


def test_split_vector_info_of_the_vector_env_matches_the_single_env(real_episode):
    with _one_torch_thread():
        venv = gym.make_vec(ID, num_envs=2, **REAL)
        venv.reset(seed=3)
        _, _, _, _, info = venv.step(np.stack([GERMINATE, WAIT]))
        venv.close()
    single = real_episode[0][0]
    first = split_vector_info(info, 0)
    assert set(single) <= set(first)
    for key in ("epoch", "executed_op", "stage", "blueprint"):
        assert np.array_equal(first[key], single[key]), key
    record = EpisodeRecord.start(3)
    record.add(split_vector_info(info, 1))
    assert record.executed_op == [Op.WAIT]


def test_renderer_starts_a_new_episode_after_an_autoreset():
    renderer, record = Renderer(3, 10), _hand_record()
    for step in range(3):
        renderer.step(_step_info(record, step))
    renderer.step({"reset": True})  # NEXT_STEP: this sub-env was reset instead of stepped
    assert renderer.record.epoch == []
    for step in range(2):
        renderer.step(_step_info(record, step))
    renderer.step(_step_info(record, 0))  # SAME_STEP: epoch 1 again means a new episode
    assert renderer.record.epoch == [1]


def test_a_same_step_vector_env_renders_the_step_that_ended_the_episode(tiny):
    """The ending step's values are in final_info (the top-level info is the next episode's reset info): the frame
    drawn after that step still shows the whole episode, and the next step starts a new one."""
    tiny["max_epochs"] = 2
    venv = gym.make_vec(ID, num_envs=2, render_mode="rgb_array", autoreset_mode="SameStep", **tiny)
    venv.reset(seed=0)
    for _ in range(2):
        venv.step(np.zeros((2, 5), dtype=np.int64))
    assert [r.record.epoch for r in venv.unwrapped._renderers] == [[1, 2], [1, 2]]
    venv.step(np.zeros((2, 5), dtype=np.int64))
    assert [r.record.epoch for r in venv.unwrapped._renderers] == [[1], [1]]


def test_add_rejects_infos_that_are_not_step_infos():
    record = EpisodeRecord.start(3)
    with pytest.raises(ValueError, match="lacks"):
        record.add({"reset": True})
    with pytest.raises(ValueError, match="num_slots=3"):
        record.add(_info(1, [D, D], [-1, -1]))


def test_drawing_is_thread_safe_and_fast():
    record = EpisodeRecord.start(3, max_epochs=25)
    for epoch in range(1, 26):
        record.add(_info(epoch, [F, B, E], [3, 1, -1], invalid_action=epoch % 7 == 0))
    serial = draw_episode(record, title="serial")
    with ThreadPoolExecutor(max_workers=2) as pool:
        frames = list(pool.map(lambda _: draw_episode(record, title="serial"), range(4)))
    assert all(np.array_equal(f, serial) for f in frames)
    start = time.perf_counter()
    for _ in range(3):
        draw_episode(record)
    # The budget is 0.2 s a frame; the bound leaves room for a loaded CI machine.
    assert (time.perf_counter() - start) / 3 < 0.6


@pytest.mark.skipif("rgb_array" not in EsperEnv.metadata["render_modes"], reason="render not wired into env")
def test_env_faces_render_the_episode_so_far():
    with _one_torch_thread():
        _check_env_faces_render()


def _check_env_faces_render() -> None:
    env = gym.make(ID, render_mode="rgb_array", **REAL)
    assert env.metadata["render_fps"] == RENDER_METADATA["render_fps"]
    env.reset(seed=0)
    before = env.render()
    env.step(GERMINATE)
    after = env.render()
    assert before.shape == after.shape == (*frame_size(env.unwrapped.config.num_slots), 3)
    assert np.any(before != after)
    env.close()
    venv = gym.make_vec(ID, num_envs=2, render_mode="rgb_array", **REAL)
    venv.reset(seed=0)
    venv.step(np.stack([GERMINATE, WAIT]))
    frames = venv.render()
    assert len(frames) == 2 and frames[0].shape == before.shape
    venv.close()


def _step_info(record: EpisodeRecord, step: int) -> dict:
    """The step info ``record`` kept for ``step``, in the shape an env gives it."""
    keys = ("epoch", "val_accuracy", "host_only_accuracy", "seed_params", "executed_op", "invalid_action",
            "rollback", "stage", "alpha", "blueprint", "contribution", "holding_timeout")
    return {key: np.asarray(getattr(record, key)[step]) for key in keys}


def test_frames_collect_through_gymnasium_render_wrappers():
    """RenderCollection (what RecordVideo-style wrappers build on) gathers one same-sized frame per step."""
    from gymnasium.wrappers import RenderCollection

    with _one_torch_thread():
        env = RenderCollection(gym.make(ID, render_mode="rgb_array", **REAL))
        env.reset(seed=0)
        env.step(GERMINATE)
        env.step(WAIT)
        frames = env.render()
        env.close()
    assert len(frames) == 3 and len({f.shape for f in frames}) == 1 and frames[0].dtype == np.uint8
