"""Checkpoint files: written atomically, checked on load, versioned.

Format: one header line ``ESPER-AGENT-CHECKPOINT <schema version> <sha256 of the payload>``, then the payload,
a ``torch.save`` dict of tensors and plain values (loaded with ``weights_only=True``, so loading runs no
pickled code). The digest turns a truncated or corrupted file into a clear error instead of a confusing one
deep inside torch. A write goes to a temporary file in the same folder, is flushed to disk and then renamed
over the target (``os.replace``), so a crash mid-write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import torch

SCHEMA_VERSION = 1
MAGIC = b"ESPER-AGENT-CHECKPOINT"
REQUIRED_KEYS = frozenset({"config", "policy", "optimizer", "normalizers", "rng", "counters", "shape"})


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be used; the message names the file and what is wrong."""


def save_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    path = Path(path)
    missing = REQUIRED_KEYS - payload.keys()
    if missing:
        raise ValueError(f"checkpoint payload lacks {sorted(missing)}")
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getvalue()
    header = b"%s %d %s\n" % (MAGIC, SCHEMA_VERSION, hashlib.sha256(data).hexdigest().encode())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(header)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    # A writer killed mid-save leaves its own temp file (named by its pid); the next good save removes it.
    for stale in path.parent.glob(f".{path.name}.tmp*"):
        stale.unlink(missing_ok=True)
    return path


def _parse_header(path: Path, raw: bytes) -> tuple[int, bytes, bytes]:
    end = raw.find(b"\n", 0, 256)
    parts = raw[:end].split(b" ") if end > 0 else []
    if len(parts) != 3 or parts[0] != MAGIC or not parts[1].isdigit():
        raise CheckpointError(f"{path}: not an esper_agent checkpoint (its first line is not a "
                              f"'{MAGIC.decode()} <version> <sha256>' header)")
    return int(parts[1]), parts[2], raw[end + 1 :]


def load_checkpoint(path: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read and check a checkpoint; raises :class:`CheckpointError` naming ``path`` if it is unusable."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    version, digest, data = _parse_header(path, path.read_bytes())
    if version != SCHEMA_VERSION:
        raise CheckpointError(f"{path}: checkpoint schema version {version}, but this esper_agent reads version "
                              f"{SCHEMA_VERSION}; use the esper_agent that wrote it")
    if hashlib.sha256(data).hexdigest().encode() != digest:
        raise CheckpointError(f"{path}: checksum mismatch, the file is truncated or corrupted "
                              f"({len(data)} payload bytes read)")
    try:
        payload = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for a bad archive; all mean the same here
        raise CheckpointError(f"{path}: the payload cannot be read ({type(exc).__name__}: {exc})") from exc
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: the payload is a {type(payload).__name__}, not a dict")
    missing = REQUIRED_KEYS - payload.keys()
    if missing:
        raise CheckpointError(f"{path}: the payload lacks {sorted(missing)}; found {sorted(payload)}")
    return payload


__all__ = ["save_checkpoint", "load_checkpoint", "CheckpointError", "SCHEMA_VERSION"]
