"""The reference pages in docs/ stay what the code says: their generated blocks are rebuilt and compared.

A generated block sits between ``<!-- generated: NAME -->`` and ``<!-- end: NAME -->`` in a docs/ page; its text
is made here from the code (config field docstrings, the env's docstring sections). When a test fails, the code
changed: ``python tests/test_docs.py`` rewrites every block, and the diff shows what the page now says.
Links between docs pages and to repository files are checked too.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end: (?P=name) -->)", re.S)


def field_docs(cls: type) -> list[tuple[str, str, str]]:
    """(section, field name, first paragraph of its docstring) for every field of a config dataclass, in order;
    the section is the ``# --- name ---`` comment above the field."""
    source = inspect.getsource(cls)
    lines = source.splitlines()
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    rows, section, previous_end = [], "", 0
    for node, following in zip(body, body[1:], strict=False):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        for line in lines[previous_end:node.lineno - 1]:
            if match := re.match(r"\s*# --- (.+?) -+\s*$", line):
                section = match.group(1)
        previous_end = (following.end_lineno or node.lineno) if isinstance(following, ast.Expr) else node.lineno
        doc = str(following.value.value) if isinstance(following, ast.Expr) else ""  # type: ignore[attr-defined]
        rows.append((section, node.target.id, " ".join(doc.split("\n\n")[0].split())))
    return rows


def default_text(cls: type, name: str) -> str:
    value = {f.name: f.default for f in dataclasses.fields(cls)}[name]
    return json.dumps(value) if isinstance(value, str) else repr(value)


def options_table(cls: type, flags: bool) -> str:
    """One markdown table per config section: field (and its CLI flag), default, and what it does."""
    out, section = [], None
    for sec, name, doc in field_docs(cls):
        if sec != section:
            section = sec
            out += [f"\n**{sec}**\n", "| field | default | meaning |", "|---|---|---|"]
        flag = f" (`--{name.replace('_', '-')}`)" if flags else ""
        out.append(f"| `{name}`{flag} | `{default_text(cls, name)}` | {doc.replace('|', chr(92) + '|')} |")
    return "\n".join(out).lstrip("\n") + "\n"


def env_doc_section(title: str) -> str:
    """The body of one ``## title`` section of the rendered ``EsperEnv`` docstring."""
    from esper_env.env import EsperEnv

    text = inspect.cleandoc(EsperEnv.__doc__ or "")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match is not None, f"EsperEnv's docstring has no '## {title}' section"
    return match.group(1).strip() + "\n"


def agent_options() -> str:
    from esper_agent.config import AgentConfig

    return options_table(AgentConfig, flags=True)


def env_arguments() -> str:
    from esper_env.config import EnvConfig

    return options_table(EnvConfig, flags=False)


GENERATORS: dict[str, Callable[[], str]] = {
    "agent-options": agent_options,
    "env-arguments": env_arguments,
    "env-actions": lambda: env_doc_section("Action Space"),
    "env-observation": lambda: env_doc_section("Observation Space"),
    "env-rewards": lambda: env_doc_section("Rewards"),
    "env-episode-end": lambda: env_doc_section("Episode End"),
    "env-info": lambda: env_doc_section("Info"),
}


def blocks(path: Path) -> dict[str, str]:
    return {m.group("name"): m.group("body") for m in BLOCK.finditer(path.read_text())}


def rewrite(path: Path) -> bool:
    """Rebuild every generated block of one page; True when the page changed."""
    text = path.read_text()
    new = BLOCK.sub(lambda m: m.group(1) + GENERATORS[m.group("name")]() + m.group(4), text)
    if new != text:
        path.write_text(new)
    return new != text


PAGES = sorted(DOCS.rglob("*.md"))


def test_every_generator_has_a_block_somewhere() -> None:
    used = {name for page in PAGES for name in blocks(page)}
    assert used == set(GENERATORS), f"blocks in docs/ {sorted(used)}; generators {sorted(GENERATORS)}"


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_generated_blocks_are_current(page: Path) -> None:
    for name, body in blocks(page).items():
        assert name in GENERATORS, f"{page}: unknown generated block {name!r}"
        assert body == GENERATORS[name](), (f"{page.relative_to(ROOT)}: block {name!r} no longer matches the "
                                            "code; run `python tests/test_docs.py` and review the diff")


def link_targets(page: Path) -> list[tuple[str, Path]]:
    """Relative links of a page (markdown links and images), resolved from its folder, without anchors."""
    found = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    return [(link, (page.parent / link).resolve()) for link in found if "://" not in link]


@pytest.mark.parametrize("page", [*PAGES, ROOT / "README.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files(page: Path) -> None:
    missing = [link for link, target in link_targets(page) if not target.exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_a_changed_field_docstring_makes_its_block_stale(tmp_path: Path) -> None:
    """The check can fail: a page whose block is out of date is rewritten to the current text."""
    page = tmp_path / "page.md"
    page.write_text("x\n<!-- generated: agent-options -->\nold text\n<!-- end: agent-options -->\ny\n")
    assert blocks(page)["agent-options"] != GENERATORS["agent-options"]()
    assert rewrite(page) and blocks(page)["agent-options"] == GENERATORS["agent-options"]()
    assert not rewrite(page)


def main(argv: list[str]) -> int:
    changed = [str(p.relative_to(ROOT)) for p in PAGES if blocks(p) and rewrite(p)]
    print("rewrote " + ", ".join(changed) if changed else "every generated block is current")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))

