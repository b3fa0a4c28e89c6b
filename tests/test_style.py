"""The size budget of STYLE.md, kept by a test: functions <= 60 lines, modules <= 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [ROOT / "esper_env", ROOT / "esper_agent", ROOT / "benchmarks", ROOT / "examples"]
SOURCES = sorted(p for package in PACKAGES if package.exists() for p in package.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_and_function_sizes(path: Path):
    source = path.read_text()
    assert source.count("\n") <= 400, f"{path.name} has {source.count(chr(10))} lines; the budget is 400"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            assert length <= 60, f"{path.name}:{node.lineno} {node.name} has {length} lines; the budget is 60"
            params = len(node.args.args) + len(node.args.kwonlyargs) - (node.args.args[:1] != []
                                                                       and node.args.args[0].arg in ("self", "cls"))
            assert params <= 8, f"{path.name}:{node.lineno} {node.name} takes {params} parameters; at most 8"
