"""The committed results stay findable and current: every top-level entry of benchmarks/results is indexed in its
README (and every indexed entry exists), and every committed head-to-head table is what ``compare_report``
computes from the slices beside it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from benchmarks import compare_report, h2h_goals

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
INDEX = RESULTS / "README.md"


def committed_entries(results: Path) -> set[str]:
    """The top-level names under ``results`` that git tracks (every name on disk outside a git checkout), so that a
    local run's files do not count until they are committed; ``README.md`` is the index itself."""
    try:
        tracked = subprocess.run(["git", "ls-files", "--", "."], cwd=results, capture_output=True, text=True)
    except OSError:  # no git
        tracked = None
    if tracked is not None and tracked.returncode == 0:
        names = {line.split("/")[0] for line in tracked.stdout.splitlines()}
    else:
        names = {path.name for path in results.iterdir()}
    return names - {"README.md"}


def indexed_entries(index: str) -> set[str]:
    """The entries named in the first cell of the index's table rows (`` `name` ``, a folder as `` `name/` ``)."""
    cells = [line.split("|")[1] for line in index.splitlines() if line.startswith("| `")]
    return {name.rstrip("/") for cell in cells for name in re.findall(r"`([^`]+)`", cell)}


def test_every_committed_result_is_in_the_index_and_every_indexed_one_exists():
    listed, committed = indexed_entries(INDEX.read_text()), committed_entries(RESULTS)
    assert not committed - listed, f"results not in {INDEX.relative_to(ROOT)}: {sorted(committed - listed)}"
    assert not listed - committed, f"{INDEX.relative_to(ROOT)} lists what is not there: {sorted(listed - committed)}"


def test_the_index_check_sees_a_missing_and_a_stale_row(tmp_path):
    (tmp_path / "new-result.json").write_text("{}")
    (tmp_path / "campaign").mkdir()
    (tmp_path / "campaign" / "table.md").write_text("")
    assert committed_entries(tmp_path) == {"new-result.json", "campaign"}  # not a checkout: what is on disk
    index = "| entry | claim |\n|---|---|\n| `campaign/` | a claim |\n| `gone.json`, `x.md` | |\n"
    assert indexed_entries(index) == {"campaign", "gone.json", "x.md"}


# Head-to-head folders; grow_cost's table (built from JSON-lines slices) has its own check in test_grow_cost.py,
# and a screen's report kept apart from its slices (criteria.json beside it, e.g. screen v3's) is not one.
TABLES = sorted(path.parent for path in RESULTS.glob("**/table.md")
                if not any(path.parent.glob("*.jsonl")) and not (path.parent / "criteria.json").exists())


def committed_roles(folder: Path) -> h2h_goals.Roles:
    """The goal roles the folder's table was built with (``goals.json``; the defaults without one)."""
    path = folder / "goals.json"
    if not path.exists():
        return h2h_goals.DEFAULT_ROLES
    roles = json.loads(path.read_text())["roles"]
    return h2h_goals.Roles(**{k: tuple(v) if isinstance(v, list) else v for k, v in roles.items()})


@pytest.mark.parametrize("folder", TABLES, ids=lambda f: str(f.relative_to(RESULTS)))
def test_each_committed_head_to_head_table_is_what_the_report_computes_from_its_slices(folder):
    # so that a change to compare_report cannot leave a committed table (and the docs quoting it) stale
    arms = compare_report.load_slices(folder)
    rows = compare_report.summarize(compare_report.with_alternate_evaluations(arms))
    roles = committed_roles(folder)
    assert compare_report.markdown(rows, folder.name, roles) == (folder / "table.md").read_text(), (
        f"rebuild it: python -m benchmarks.compare_report {folder.relative_to(ROOT)} with the roles in goals.json")
    for table in folder.glob("table-seeds*.md"):  # a subset's table (--seeds)
        seeds = compare_report.seeds_named(table.stem.removeprefix("table-seeds"))
        rows = compare_report.summarize(compare_report.with_alternate_evaluations(
            compare_report.only_seeds(arms, seeds)))
        assert compare_report.markdown(rows, folder.name, roles) == table.read_text(), f"rebuild {table.name}"
