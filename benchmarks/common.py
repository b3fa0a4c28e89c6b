"""What every benchmark shares: naming the device, stamping a result with the code and time that made it, and
writing results so that a reader (or a run cut short) never sees half a file.

A result is only worth keeping with the device it ran on and the commit of the code that produced it
(``benchmarks/results/README.md`` indexes them by both), so every tool builds its record from
:func:`run_stamp` and :func:`device_name` and writes it with :func:`write_json`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from esper_agent.train import git_commit, resolve_device

ROOT = Path(__file__).resolve().parents[1]


def child_env(gpu: str | None = None, **extra: str) -> dict[str, str]:
    """The environment for a ``python -m benchmarks...`` child process started in the caller's working directory:
    this one's, the repository first on ``PYTHONPATH`` (so the module imports from any directory), output
    unbuffered (its log shows progress as it happens), ``CUDA_VISIBLE_DEVICES`` set to ``gpu`` unless ``None``,
    then ``extra``. The child keeps the caller's directory so that relative paths in its arguments and in
    variables such as ``ESPER_DATA_DIR`` mean to it what they mean to the user."""
    env = os.environ | {"PYTHONUNBUFFERED": "1",
                        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env | extra


def device_name(device: str) -> str:
    """The hardware behind a torch device string: the GPU's product name for ``cuda``/``cuda:k``, else the CPU's
    architecture and torch's thread count (which sets CPU timings)."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def env_device(env_kwargs: dict[str, Any]) -> str:
    """The name of the device an Esper env's hosts train on: the env's own (``auto``: the GPU if there is one)."""
    return device_name(resolve_device(str(env_kwargs.get("device", "auto"))))


def device_tag(name: str) -> str:
    """A :func:`device_name` as a file-name part: ``NVIDIA H200`` -> ``nvidia-h200``, ``cpu (...)`` -> ``cpu``."""
    return name.split(" (")[0].replace(" ", "-").lower()


def run_stamp() -> dict[str, Any]:
    """Where a result came from: the commit of this checkout, whether its code had uncommitted changes (results
    under ``benchmarks/results`` do not count: ``esper_agent.train.git_commit``), the torch version and the time."""
    commit, dirty = git_commit()
    return {"git_commit": commit, "git_dirty": dirty, "torch": torch.__version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def json_safe(value: Any) -> Any:
    """``value`` as strict JSON: NaN and inf as None (not measured), numpy scalars as Python numbers, through
    dicts, lists and tuples."""
    if isinstance(value, np.integer | np.bool_):
        return value.item()
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file beside it, so that ``path`` is either absent or whole
    (a slice's existence marks it done, and a lost machine may stop a write at any byte)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data)
    tmp.replace(path)
    return path


def write_or_print(text: str, out: Path | None) -> None:
    """A study's report: written to ``out`` when given (its ``--out``), else printed."""
    if out is not None:
        out.write_text(text)
    else:
        print(text)


def write_json(path: Path, payload: Any, indent: int | None = 1) -> Path:
    """``payload`` as strict JSON (:func:`json_safe`) written atomically, with a final newline."""
    return write_atomic(path, json.dumps(json_safe(payload), indent=indent, allow_nan=False) + "\n")


def write_rows(rows: list[dict], out: Path, name: str, table: str, tag: str | None = None) -> Path:
    """``<out>/<name>-<tag>.json`` (the rows under ``"rows"``, with :func:`run_stamp`) and ``.md`` (the table);
    the tag defaults to the first row's device."""
    tag = tag or device_tag(rows[0]["device"])
    path = write_json(out / f"{name}-{tag}.json", run_stamp() | {"rows": rows})
    write_atomic(out / f"{name}-{tag}.md", table)
    print(table)
    return path


def summarized(folder: Path | None, write_summary: Callable[[Path], Path]) -> bool:
    """A study's ``--summarize FOLDER``: rebuild its summary from the reports there and say where; False when the
    flag was not given (the study runs)."""
    if folder is None:
        return False
    print(f"written to {write_summary(folder)}")
    return True
