"""step_traffic counts a training step's operators, bytes and FLOPs: the joint step writes about what the joined
network does, and less than the general path."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import step_traffic


def test_the_joint_step_writes_what_the_joined_network_does(tmp_path: Path) -> None:
    # Batch 16 of 16 px: the activations outweigh the weights, whose concatenation is the joint step's only
    # extra traffic (a fixed amount per step, small beside the env's batches of 512 at 32 px).
    case = step_traffic.measure([(0, "widen_l")], batch=16, image_size=16)
    general, joint, joined = (case[path]["mib_written"] for path in ("general", "joint", "joined"))
    assert case["joint"]["gflops"] == case["joined"]["gflops"] == case["general"]["gflops"] > 0
    assert joined <= joint < general and joint - joined < 0.25 * (general - joined)
    deep = step_traffic.measure([(1, "deepen")], batch=4, image_size=8)
    assert deep["joint"]["operators"] == deep["joined"]["operators"] < deep["general"]["operators"]


def test_the_cli_writes_every_case(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(step_traffic, "CASES", {"deepen@2": [(2, "deepen")]})
    step_traffic.main(["--batch", "2", "--image-size", "8", "--out", str(tmp_path / "t.json")])
    result = json.loads((tmp_path / "t.json").read_text())
    assert set(result["cases"]) == {"deepen@2"} and set(result["cases"]["deepen@2"]) == {"general", "joint", "joined"}
