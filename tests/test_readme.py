"""The README's commands run, at CPU scale, so that the README cannot rot.

Every ```` ```bash ```` and ```` ```python ```` block of README.md sits under a tag line, and an untagged one fails:

- ``<!-- readme-test: run -->``: run as written (its code is CPU-sized already);
- ``<!-- readme-test: cpu-scale -->``: each command runs with the flags of :data:`CPU_SCALE` appended (argparse
  keeps the last value of a flag, so they replace the GPU-sized budgets), on ``Esper-Synthetic-v0``;
- ``<!-- readme-test: skip (reason) -->``: not run; the reason says what covers it instead.

The commands of the results table (inline code starting with ``python -m`` in a table row) run as cpu-scale
commands; inline code elsewhere may not be a command, so that every command is in a block or the table. Within a
line, ``&&`` separates commands; the setup steps (``python3 -m venv``, ``. .venv/bin/activate``, ``pip install``)
and the test suite itself (``python -m pytest``) are not run. ``python -m M ARGS`` runs ``M.main(ARGS)`` in this
process, in a temporary working directory (so ``runs/`` lands there) that links the checkout's ``benchmarks/``, so
that a command reads committed files (a campaign's plan, a screen's summary) by the path a user types.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TAG = re.compile(r"<!-- readme-test: (run|cpu-scale|skip \(.+\)) -->")
SETUP = ("python3 -m venv", ". .venv/bin/activate", "source .venv/bin/activate", "pip install", "python -m pytest")
TINY_ENV = {"max_epochs": 2, "device": "cpu", "synthetic_train_size": 64, "synthetic_val_size": 32,
            "synthetic_test_size": 32, "batch_size": 32, "host_widths": [4, 8], "val_images": None,
            "train_images_per_epoch": None}
TINY_TRAIN = ["--env", "Esper-Synthetic-v0", "--device", "cpu", "--num-envs", "2", "--total-updates", "1",
              "--rollout-steps", "2", "--hidden-size", "8", "--env-kwargs", json.dumps(TINY_ENV)]
CPU_SCALE = {
    "esper_agent.train": TINY_TRAIN,
    "esper_agent.train --resume": ["--total-updates", "2"],  # the run it resumes is CPU-sized already
    "esper_agent.evaluate": ["--episodes", "2"],  # a checkpoint brings its own (CPU-sized) env
    "esper_agent.evaluate --policy": ["--episodes", "2", "--env", "Esper-Synthetic-v0", "--num-envs", "2",
                                      "--env-kwargs", json.dumps(TINY_ENV)],
    # A campaign is planned, not run: compare_agents' parser checks every flag it passes and the preset resolves;
    # tests/test_benchmarks_campaign.py runs a campaign end to end.
    "benchmarks.campaign": ["--dry-run"],
}
"""Flags appended to a cpu-scale command, by its module (and the flag that picks a variant)."""


@dataclass(frozen=True)
class Block:
    tag: str
    language: str
    code: str
    line: int

    @property
    def name(self) -> str:
        return f"README.md:{self.line} ({self.language}, {self.tag.split(' ')[0]})"


def blocks(text: str) -> list[Block]:
    """Every bash and python block with the tag line above it ("" when there is none)."""
    lines, found = text.splitlines(), []
    k = 0
    while k < len(lines):
        fence = re.fullmatch(r"```(\w*)", lines[k])
        if fence is None:
            k += 1
            continue
        end = lines.index("```", k + 1)
        above = next((line for line in reversed(lines[:k]) if line.strip()), "")
        tag = m.group(1) if (m := TAG.fullmatch(above.strip())) else ""
        if fence.group(1) in ("bash", "python"):
            found.append(Block(tag, fence.group(1), "\n".join(lines[k + 1:end]), k + 1))
        k = end + 1
    return found


def table_commands(text: str) -> list[str]:
    return [c for line in text.splitlines() if line.startswith("|") for c in re.findall(r"`(python -m [^`]+)`", line)]


def prose_commands(text: str) -> list[str]:
    """Inline code outside blocks and tables that reads as a command (not allowed: it would not be run)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    spans = [c for line in prose.splitlines() if not line.startswith("|") for c in re.findall(r"`([^`]+)`", line)]
    return [c for c in spans if re.match(r"(python3?|torchrun|pip|bash) ", c)]


def commands(code: str) -> Iterator[list[str]]:
    """The argv of each command of a bash block, setup steps and the test suite left out."""
    for line in code.replace("\\\n", " ").splitlines():
        for part in line.split("&&"):
            part = part.strip()
            if part and not part.startswith("#") and not part.startswith(SETUP):
                yield shlex.split(part, comments=True)


def cpu_scale(argv: list[str]) -> tuple[str, list[str]]:
    """(module, its arguments with the CPU-scale flags appended) for ``python -m <module> ...``."""
    assert argv[:2] == ["python", "-m"], f"no CPU-scale rule for {shlex.join(argv)}: expected python -m <module>"
    module, args = argv[2], argv[3:]
    variants = [key for key in CPU_SCALE if key.split(" ")[0] == module and
                all(flag in args for flag in key.split(" ")[1:])]
    assert variants, f"no CPU-scale rule for module {module}; known: {sorted(CPU_SCALE)}"
    return module, args + CPU_SCALE[max(variants, key=len)]


def run_module(module: str, args: list[str]) -> None:
    try:
        code = importlib.import_module(module).main(args)
    except SystemExit as stop:  # argparse's --help and errors, and a main that exits
        code = stop.code
    assert code in (0, None), f"python -m {module} {shlex.join(args)} exited with {code}"


TEXT = README.read_text()
BLOCKS = blocks(TEXT)


@pytest.fixture(autouse=True)
def cpu_sized(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A temporary working directory linking the checkout's benchmarks/, the checkout importable, one torch thread
    (the CI machine has two cores)."""
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_every_block_is_tagged_and_every_command_is_in_a_block_or_the_table() -> None:
    untagged = [b.name for b in BLOCKS if not b.tag]
    assert not untagged, f"tag these blocks with <!-- readme-test: run|cpu-scale|skip (reason) -->: {untagged}"
    assert not prose_commands(TEXT), f"commands in prose are not run; move them into a block: {prose_commands(TEXT)}"
    assert len(README.read_text().splitlines()) <= 300, "the README is for users: at most 300 lines"


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.tag.startswith("skip")], ids=lambda b: b.name)
def test_block_runs(block: Block) -> None:
    if block.language == "python":
        exec(compile(block.code, block.name, "exec"), {"__name__": "__readme__"})
        return
    ran = 0
    for argv in commands(block.code):
        module, args = cpu_scale(argv) if block.tag == "cpu-scale" else (argv[2], argv[3:])
        run_module(module, args)
        ran += 1
    assert ran, f"{block.name} has no command to run"


@pytest.mark.parametrize("command", table_commands(TEXT))
def test_results_table_command_runs(command: str) -> None:
    run_module(*cpu_scale(shlex.split(command)))


def test_the_rules_refuse_what_they_do_not_know() -> None:
    """The CPU-scale rules fail on a command they cannot shrink, and the block parser on an untagged block."""
    with pytest.raises(AssertionError, match="no CPU-scale rule for module benchmarks.soak"):
        cpu_scale(["python", "-m", "benchmarks.soak", "--minutes", "20"])
    with pytest.raises(AssertionError, match="no CPU-scale rule for torchrun"):
        cpu_scale(["torchrun", "--nproc-per-node", "2", "-m", "esper_agent.train"])
    assert blocks("text\n\n```bash\npython -m x\n```\n")[0].tag == ""
    found = prose_commands("run `python -m esper_agent.train --preset x` now")
    assert found == ["python -m esper_agent.train --preset x"]
    assert list(commands("python3 -m venv .venv && . .venv/bin/activate && pip install -e . && python -m a --b\n"
                         "python -m pytest -q")) == [["python", "-m", "a", "--b"]]
