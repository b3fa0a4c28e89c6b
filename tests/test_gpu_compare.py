"""benchmarks/gpu_compare.sh deals one process per (arm, seed) over the GPUs: checked with stand-ins for python3
and nvidia-smi that record which GPU each process was given (no GPU or training needed)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_compare.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _stand_in(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def placements(tmp_path: Path, **settings: str) -> dict[str, str]:
    """Run a spread with four stand-in GPUs; {"<arm>-<seed>": GPU index} from the processes' logs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stand_in(bin_dir, "python3", 'echo "gpu=$CUDA_VISIBLE_DEVICES $*"\n')
    _stand_in(bin_dir, "nvidia-smi", 'for i in 0 1 2 3; do echo "GPU $i: stand-in"; done\n')
    results = tmp_path / "results"
    env = os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "ESPER_DATA_DIR": str(tmp_path),
                        "R": str(results)} | settings
    subprocess.run(["bash", str(SCRIPT), "spread"], env=env, check=True, capture_output=True, text=True)
    found = {}
    for log in (results / "logs").glob("*.log"):
        gpu, seed = re.search(r"gpu=(\d+) .*--seeds (\d+)", log.read_text()).groups()
        arm = re.search(r"--arms (\S+)", log.read_text()).group(1)
        found[f"{arm}-{seed}"] = gpu
    return found


def test_spread_deals_round_robin_from_the_offset(tmp_path: Path) -> None:
    found = placements(tmp_path, ARMS="maskable_flat", GPU_OFFSET="1")
    assert found == {"maskable_flat-0": "1", "maskable_flat-1": "2", "maskable_flat-2": "3", "maskable_flat-3": "0",
                     "maskable_flat-4": "1"}


def test_spread_places_each_process_on_the_gpus_named(tmp_path: Path) -> None:
    found = placements(tmp_path, ARMS="maskable_flat maskable_multidiscrete", SEEDS="0 1", GPUS="3 3 0")
    # dealt in order (flat 0, flat 1, multidiscrete 0, multidiscrete 1); GPUS repeats from its start
    assert found == {"maskable_flat-0": "3", "maskable_flat-1": "3", "maskable_multidiscrete-0": "0",
                     "maskable_multidiscrete-1": "3"}


def test_eval_sampled_is_passed_on_only_when_set_to_1(tmp_path: Path) -> None:
    for value, passed in (("1", True), ("0", False)):
        folder = tmp_path / value
        folder.mkdir()
        placements(folder, ARMS="maskable_flat", SEEDS="0", EVAL_SAMPLED=value)
        log = (folder / "results" / "logs" / "maskable_flat-0.log").read_text()
        assert ("--eval-sampled" in log) == passed
