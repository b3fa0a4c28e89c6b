"""Metrics outputs: progress bar on a TTY, plain lines otherwise, NaN handling, truncation on resume."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

from esper_agent.telemetry import RunLogger


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def metrics(update: int) -> dict:
    return {"update": update, "episode/return_mean": 0.5 * update, "ppo/kl": math.nan,
            "anomalies": ["kl_spike: test"] if update == 2 else []}


def test_plain_lines_when_not_a_tty_and_nan_as_null(tmp_path: Path) -> None:
    stream = io.StringIO()
    logger = RunLogger(tmp_path, total_updates=3, stream=stream)
    for u in (1, 2):
        logger.log(metrics(u))
    logger.close()
    text = stream.getvalue()
    assert "update 1 | return=0.5" in text and "anomaly at update 2: kl_spike: test" in text
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["ppo/kl"] is None and rows[1]["anomalies"] == ["kl_spike: test"]
    csv_lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert csv_lines[0] == "update,episode/return_mean,ppo/kl,anomalies"
    assert csv_lines[1] == "1,0.5,," and csv_lines[2] == "2,1.0,,kl_spike: test"


def test_progress_bar_on_a_tty(tmp_path: Path) -> None:
    stream = FakeTTY()
    logger = RunLogger(tmp_path, total_updates=3, stream=stream)
    logger.log(metrics(1))
    logger.close()
    assert "1/3" in stream.getvalue() and "update |" not in stream.getvalue()


def test_resume_truncates_rows_after_the_checkpoint(tmp_path: Path) -> None:
    logger = RunLogger(tmp_path, total_updates=3, stream=io.StringIO())
    for u in (1, 2, 3):
        logger.log(metrics(u))
    logger.close()
    logger = RunLogger(tmp_path, total_updates=3, start_update=1, stream=io.StringIO())
    logger.log(metrics(2))
    logger.close()
    rows = [json.loads(line)["update"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [1, 2]
    assert [line.split(",")[0] for line in (tmp_path / "metrics.csv").read_text().splitlines()] == ["update", "1", "2"]
