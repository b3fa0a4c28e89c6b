"""Per-update metrics and where they go: TensorBoard, metrics.jsonl, metrics.csv, and the terminal.

Every update produces the same set of keys (a statistic that is not available that update is NaN, written
as ``null`` in JSONL and an empty cell in CSV), so the CSV keeps one header. Keys under ``time/`` depend on
the wall clock; everything else is a deterministic function of the seeds on CPU.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from esper_agent.collect import RolloutStats
from esper_env.spaces import BLUEPRINT_NAMES, Op


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def rollout_metrics(stats: RolloutStats, seconds: float,
                    blueprint_names: Sequence[str] = BLUEPRINT_NAMES) -> dict[str, float]:
    """Episode, action and throughput statistics of one rollout. ``blueprint_names`` names the blueprint head's
    values in the ``plant/`` keys: the env's catalogue (``esper_env.blueprints.catalogue(host)``), whose values
    mean other blueprints on the family host."""
    episodes = stats.episodes
    out = {
        "episode/count": float(len(episodes)),
        "episode/return_mean": _mean([e.episode_return for e in episodes]),
        "episode/length_mean": _mean([float(e.length) for e in episodes]),
        "episode/final_accuracy": _mean([e.final_accuracy for e in episodes]),
        "episode/seed_params": _mean([e.seed_params for e in episodes]),
        "episode/test_accuracy": _mean([e.test_accuracy for e in episodes]),
        "episode/rollbacks": float(sum(e.rollback for e in episodes)),
    }
    total = max(int(stats.op_counts.sum()), 1)
    out |= {f"actions/op_{op.name.lower()}": stats.op_counts[op] / total for op in Op}
    out["actions/invalid_rate"] = stats.invalid / stats.invalid_reported if stats.invalid_reported else math.nan
    out["lifecycle/fossilize_count"] = float(stats.executed_counts[Op.FOSSILIZE])
    out["lifecycle/prune_count"] = float(stats.executed_counts[Op.PRUNE])
    if stats.planted is not None:  # a fixed set of keys (every slot and blueprint), so the CSV keeps them all
        out |= {f"plant/slot{slot}_{name}": float(stats.planted[slot, b])
                for slot in range(stats.planted.shape[0]) for b, name in enumerate(blueprint_names)}
    out["time/rollout_s"] = seconds
    out["time/env_steps_per_s"] = stats.transitions / seconds if seconds > 0 else math.nan
    out["time/host_images_per_s"] = stats.images / seconds if seconds > 0 and stats.images > 0 else math.nan
    return out


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _truncate_jsonl(path: Path, keep_up_to: int) -> None:
    """Drop rows logged after the checkpoint a run resumes from (they will be produced again)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line torn by a crash mid-append: it is logged again after resume
            continue
        if row.get("update", 0) <= keep_up_to:
            kept.append(line)
    path.write_text("".join(line + "\n" for line in kept))


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.inf


def _truncate_csv(path: Path, keep_up_to: int) -> None:
    if not path.exists():
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return
    column = rows[0].index("update") if "update" in rows[0] else None
    kept = [rows[0]] + [r for r in rows[1:] if len(r) == len(rows[0])  # a torn row is dropped
                        and (column is None or _number(r[column]) <= keep_up_to)]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(kept)


class RunLogger:
    """Writes each update's metrics to TensorBoard (``tb/``), ``metrics.jsonl`` and ``metrics.csv``."""

    def __init__(self, run_dir: Path, total_updates: int, start_update: int = 0, stream: TextIO | None = None):
        from torch.utils.tensorboard import SummaryWriter  # imported here: it is slow and only runs need it

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        jsonl, csv_path = self.run_dir / "metrics.jsonl", self.run_dir / "metrics.csv"
        _truncate_jsonl(jsonl, start_update)
        _truncate_csv(csv_path, start_update)
        # purge_step drops TensorBoard events from updates after the checkpoint being resumed.
        self.writer = SummaryWriter(str(self.run_dir / "tb"), purge_step=start_update + 1 if start_update else None)
        self.jsonl_path, self.csv_path = jsonl, csv_path
        csv_path.touch()
        self.csv_columns: list[str] | None = self._existing_columns(csv_path)
        self.stream = stream if stream is not None else sys.stdout
        self.progress = self._progress_bar(total_updates, start_update)

    @staticmethod
    def _existing_columns(path: Path) -> list[str] | None:
        with open(path, newline="") as f:
            header = next(csv.reader(f), None)
        return header or None

    def _progress_bar(self, total: int, start: int) -> Any:
        if not self.stream.isatty():
            return None
        from tqdm import tqdm

        return tqdm(total=total, initial=start, unit="update", file=self.stream, dynamic_ncols=True)

    def log(self, metrics: dict[str, Any]) -> None:
        step = int(metrics["update"])
        anomalies = list(metrics.get("anomalies", []))
        scalars = {k: v for k, v in metrics.items() if isinstance(v, int | float) and k != "update"}
        for key, value in scalars.items():
            if math.isfinite(value):
                self.writer.add_scalar(key, value, step)
        if anomalies:
            self.writer.add_text("anomalies", "\n".join(anomalies), step)
        # Opened per update: a crash loses at most the line being written, and nothing stays open.
        with open(self.jsonl_path, "a") as f:
            f.write(json.dumps({k: _json_value(v) for k, v in metrics.items()}) + "\n")
        self._write_csv(metrics, anomalies)
        self._report(metrics, anomalies)

    def _write_csv(self, metrics: dict[str, Any], anomalies: list[str]) -> None:
        row = {k: v for k, v in metrics.items() if k != "anomalies"} | {"anomalies": "; ".join(anomalies)}
        with open(self.csv_path, "a", newline="") as f:
            writer = csv.writer(f)
            if self.csv_columns is None:
                self.csv_columns = list(row)
                writer.writerow(self.csv_columns)
            writer.writerow(["" if _json_value(row.get(c)) is None else row.get(c) for c in self.csv_columns])

    def _report(self, metrics: dict[str, Any], anomalies: list[str]) -> None:
        summary = {"return": metrics.get("episode/return_mean"), "kl": metrics.get("ppo/kl"),
                   "ev": metrics.get("value/explained_variance"), "sps": metrics.get("time/env_steps_per_s")}
        text = " ".join(f"{k}={v:.4g}" for k, v in summary.items() if isinstance(v, float) and math.isfinite(v))
        if self.progress is not None:
            self.progress.update(1)
            self.progress.set_postfix_str(text)
            for anomaly in anomalies:
                self.progress.write(f"anomaly at update {metrics['update']}: {anomaly}")
            return
        print(f"update {metrics['update']} | {text}", file=self.stream, flush=True)
        for anomaly in anomalies:
            print(f"anomaly at update {metrics['update']}: {anomaly}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
        self.writer.close()


__all__ = ["RunLogger", "rollout_metrics"]
