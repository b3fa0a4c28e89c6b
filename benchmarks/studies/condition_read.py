"""Trained policies against a baseline on one hidden condition, paired by reset seed.

The head-to-head's evaluation draws the hidden condition per episode, so a rare one (``pool5k-noise40``, one
episode in twelve) gets a handful of episodes per learner seed. Here each policy plays that condition alone with
``esper_agent.evaluate`` and the baseline plays the same reset seeds::

    KW='{"condition": "pool5k-noise40", "autoreset_mode": "SameStep", "report_test_accuracy": true}'
    python -m esper_agent.evaluate --policy static --env Esper-CIFAR10-v0 --env-kwargs "$KW" \\
        --num-envs 16 --episodes 16 --seed 7 --output static.md
    python -m esper_agent.evaluate --checkpoint seed100-trained.ckpt --env Esper-CIFAR10-v0 --env-kwargs "$KW" \\
        --num-envs 16 --episodes 16 --seed 7 --output s100.md
    python -m benchmarks.studies.condition_read static.json s100.json [...] --out read.md

One episode per sub-env makes episode k of every run start from reset seed ``seed + k``; the read refuses files
whose env, kwargs, sub-envs or seed differ, or that played more or fewer episodes than sub-envs. Each row is one
policy (one learner seed): its mean difference to the baseline in test accuracy and return (points), with a
Student-t 95% CI over the episodes (which holds the episodes' noise, not the training's: that shows only across
rows), its seeds' fates per episode (as ``benchmarks.studies.pilot_paired`` counts them) and its episodes that a
rollback ended.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import write_or_print
from benchmarks.studies.pilot_paired import fate_cell
from esper_agent.report import mean_ci95

SETTINGS = ("env_id", "env_kwargs", "num_envs", "seed")


def load_run(path: Path) -> dict[str, Any]:
    """One ``esper_agent.evaluate`` results file, checked to hold one episode per sub-env."""
    try:
        run = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: {error}; expected the .json that esper_agent.evaluate writes beside its "
                         "--output (did that run finish?)") from None
    missing = [k for k in (*SETTINGS, "policy", "episodes") if k not in run]
    if missing:
        raise ValueError(f"{path} lacks {missing}: expected a results file of esper_agent.evaluate")
    envs = sorted(e["env"] for e in run["episodes"])
    if envs != list(range(run["num_envs"])):
        raise ValueError(f"{path} played sub-envs {envs}; expected one episode on each of its {run['num_envs']} "
                         "(--episodes equal to --num-envs), so that episodes pair by reset seed")
    return run


def check_same_settings(reference: dict[str, Any], run: dict[str, Any], name: str) -> None:
    """Refuse a run whose episodes did not start where the reference's did."""
    differ = {k: (reference[k], run[k]) for k in SETTINGS if reference[k] != run[k]}
    if differ:
        raise ValueError(f"{name} differs from the reference in {differ} (reference, this run): the episodes "
                         "would not pair by reset seed")


def _points(episode: dict[str, Any], key: str) -> float:
    value = episode[key]
    return math.nan if value is None else 100.0 * value


def paired_row(reference: dict[str, Any], run: dict[str, Any], name: str) -> dict[str, Any]:
    """``run`` minus ``reference``, episode by episode, in test accuracy and return (points)."""
    check_same_settings(reference, run, name)
    ours = {e["env"]: e for e in run["episodes"]}
    row: dict[str, Any] = {"policy": name, "episodes": len(ours), "rollbacks": _rollbacks(run)}
    for key, label in (("test_accuracy", "test"), ("episode_return", "return")):
        differences = [_points(ours[e["env"]], key) - _points(e, key) for e in reference["episodes"]]
        row[label] = mean_ci95(differences)  # an episode without the value (NaN) drops out
        row[f"{label}_mean"] = mean_ci95([_points(e, key) for e in run["episodes"]])[0]
    if all("seeds" in e for e in run["episodes"]):  # esper_agent.evaluate records them where the env has timelines
        row["fates"] = fate_cell(run["episodes"])
    return row


def _rollbacks(run: dict[str, Any]) -> int:
    return sum(bool(e["rollback"]) for e in run["episodes"])


def read_table(reference: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str:
    """The read as markdown."""
    kwargs = json.dumps(reference["env_kwargs"], sort_keys=True)
    lines = [f"# Against {reference['policy']} on {reference['env_id']} {kwargs}, paired by reset seed",
             "",
             f"{reference['num_envs']} episodes per policy from reset seed {reference['seed']}; test accuracy and "
             "return in points; the CIs are over episodes (the training's noise shows across policies only); an "
             "episode the env gave no value drops out of that column.",
             "",
             "| policy | episodes | test accuracy | − reference (95% CI) | return | − reference (95% CI) | "
             "seeds kept / pruned / let go per episode | rollbacks |",
             "|---|---:|---:|---:|---:|---:|---|---:|"]
    base_test = mean_ci95([_points(e, "test_accuracy") for e in reference["episodes"]])[0]
    base_return = mean_ci95([_points(e, "episode_return") for e in reference["episodes"]])[0]
    lines.append(f"| {reference['policy']} (reference) | {reference['num_envs']} | {_value(base_test)} | | "
                 f"{_value(base_return)} | | | {_rollbacks(reference)} |")
    for r in rows:
        lines.append(f"| {r['policy']} | {r['episodes']} | {_value(r['test_mean'])} | {_signed(*r['test'])} | "
                     f"{_value(r['return_mean'])} | {_signed(*r['return'])} | {r.get('fates', '')} | "
                     f"{r['rollbacks']} |")
    return "\n".join(lines) + "\n"


def _value(x: float) -> str:
    return f"{x:.2f}" if math.isfinite(x) else "—"  # NaN: the env reported no such value


def _signed(mean: float, half: float) -> str:
    if not math.isfinite(mean):
        return "—"  # the env reported no such value
    return f"{mean:+.2f} ± {half:.2f}" if math.isfinite(half) else f"{mean:+.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.condition_read",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", type=Path, help="the baseline's results file (esper_agent.evaluate's .json)")
    parser.add_argument("runs", type=Path, nargs="+", help="the trained policies' results files, same settings")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here (default: print it)")
    args = parser.parse_args(argv)
    try:
        reference = load_run(args.reference)
        rows = [paired_row(reference, load_run(p), p.stem) for p in args.runs]
    except ValueError as error:
        parser.error(str(error))
    write_or_print(read_table(reference, rows), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
