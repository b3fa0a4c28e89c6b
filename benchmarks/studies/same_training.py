"""Whether two slices of one learning configuration trained alike: update by update, the same telemetry (timings
aside) and the same evaluation returns. Run at two commits on one device, it says whether the code between them
changed what the agent computes there::

    python -m benchmarks.studies.same_training OLD/seed0.json NEW/seed0.json

Prints the first differences (at most ten) and exits 1 if there are any, 0 if the two trained alike.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _update_rows(slice_: dict[str, Any]) -> list[dict[str, Any]]:
    """Each update's telemetry without its timings, with its return and final accuracy."""
    return [{k: v for k, v in point["telemetry"].items() if not k.startswith("time/")}
            | {"return": point["return"], "final_accuracy": point["final_accuracy"]} for point in slice_["curve"]]


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between two slices' training and evaluation, in words."""
    out = [f"{key}: {a.get(key)!r} against {b.get(key)!r}" for key in ("env", "env_kwargs", "agent_kwargs", "seed")
           if a.get(key) != b.get(key)]
    rows_a, rows_b = _update_rows(a), _update_rows(b)
    if len(rows_a) != len(rows_b):
        out.append(f"{len(rows_a)} updates against {len(rows_b)}")
    for update, (x, y) in enumerate(zip(rows_a, rows_b, strict=False), start=1):  # a length mismatch is named above
        out += [f"update {update}, {k}: {x.get(k)!r} against {y.get(k)!r}" for k in sorted(set(x) | set(y))
                if x.get(k) != y.get(k)]
    for key in ("episodes", "sampled_episodes"):
        returns_a = [e["return"] for e in a.get(key, [])]
        returns_b = [e["return"] for e in b.get(key, [])]
        if returns_a != returns_b:
            out.append(f"{key}' returns: {returns_a} against {returns_b}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.same_training",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("slices", type=Path, nargs=2, help="two slice files (compare_agents' seed<k>.json)")
    a, b = (json.loads(p.read_text()) for p in parser.parse_args(argv).slices)
    found = differences(a, b)
    stamps = ", ".join(f"{s['git_commit'][:7]} on {s['device']}" for s in (a, b))
    print(f"{len(a['curve'])} updates ({stamps}): " + ("trained alike" if not found else "differ:\n" +
                                                         "\n".join(found[:10])))
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
