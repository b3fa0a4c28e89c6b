"""benchmarks.common: the environment its child processes start with."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks.common import ROOT, child_env


def test_a_child_process_imports_benchmarks_from_any_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    env = child_env(OMP_NUM_THREADS="2")
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT) and env["PYTHONUNBUFFERED"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["OMP_NUM_THREADS"] == "2"  # no gpu: left as it was
    assert child_env("0")["CUDA_VISIBLE_DEVICES"] == "0"
    code = "import os, benchmarks; print(os.getcwd())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(tmp_path)  # it runs where it was started, so relative paths keep meaning
