"""Agent candidates against a reference configuration on the same tuning seeds, read in more detail than
:mod:`benchmarks.sweep_select`'s one score: return differences paired by reset seed, what each candidate plants,
keeps and prunes, each hidden condition's test accuracy and what became of the seeds planted there, and whether
each grows more where growth pays.

    python -m benchmarks.studies.pilot_paired benchmarks/results/h2h_v2_sweep/Esper-CIFAR10-Fast-v0 \\
        esper_agent-e3 benchmarks/results/replay_pilot/Esper-CIFAR10-Fast-v0 \\
        --out benchmarks/results/replay_pilot/Esper-CIFAR10-Fast-v0/paired.md

Argmax episodes only. The candidates are the learner folders of the candidate folder (``esper_agent-<label>``
and the other learners of :data:`benchmarks.compare_agents.LEARNING_ARMS`). Two intervals, and what each says:

- *per learner seed*: each seed's mean over its episodes of (candidate - reference). With two tuning seeds there
  is no CI; these are the units a configuration's training noise lives in.
- *over episodes*: the mean of every episode's difference with a Student-t 95% CI over episodes. It treats the
  two sets of trained policies as given, so it says whether *these runs* differ on the evaluation's reset
  seeds, not whether the configurations would on a rerun.

Per condition the episode counts are small (1-6 on two seeds); those tables are for spotting a sign, not reading
one. What growth pays per condition is :func:`benchmarks.studies.h2h_diagnosis.pays` over the reference folder's
growth arms among :data:`~benchmarks.studies.h2h_diagnosis.GROWTH_ARMS` (the section is left out when it has none).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import fmean

from benchmarks import compare_report
from benchmarks.common import write_or_print
from benchmarks.compare_agents import LEARNING_ARMS
from benchmarks.studies.h2h_diagnosis import GROWTH_ARMS, SEEDLING, by_condition, correlation_table, episodes, pays
from esper_agent.report import mean_ci95

OPS = ("germinate", "fossilize", "prune")


def paired_returns(candidate: list[dict], reference: list[dict]) -> dict[int, list[float]]:
    """Per learner seed, candidate minus reference return (points) on each reset seed both played."""
    theirs = {e["env_seed"]: e["return"] for e in reference}
    out: dict[int, list[float]] = {}
    for e in candidate:
        if e["env_seed"] in theirs:
            out.setdefault(e["seed"], []).append(100 * (e["return"] - theirs[e["env_seed"]]))
    return dict(sorted(out.items()))


def op_counts(rows: list[dict]) -> str:
    """GERMINATE / FOSSILIZE / PRUNE counts over the episodes' timelines."""
    counts = Counter(op for e in rows for _, op, *_ in e["ops"])
    return " / ".join(str(counts[op]) for op in OPS)


def return_table(reference_name: str, reference: list[dict], candidates: dict[str, list[dict]]) -> list[str]:
    lines = [f"| configuration | episodes | return | − {reference_name}, per learner seed | − {reference_name}, "
             "over episodes (95% CI) | GERMINATE / FOSSILIZE / PRUNE | test accuracy (%) |",
             "|---|---:|---:|---|---:|---|---:|",
             f"| {reference_name} (reference) | {len(reference)} | {100 * fmean([e['return'] for e in reference]):.2f}"
             f" | | | {op_counts(reference)} | {100 * fmean([e['test_accuracy'] for e in reference]):.2f} |"]
    for name, rows in candidates.items():
        per_seed = paired_returns(rows, reference)
        mean, half = mean_ci95([d for diffs in per_seed.values() for d in diffs])
        seeds = ", ".join(f"{seed}: {fmean(d):+.2f}" for seed, d in per_seed.items())
        lines.append(f"| {name} | {len(rows)} | {100 * fmean([e['return'] for e in rows]):.2f} | {seeds} | "
                     f"{mean:+.2f} ± {half:.2f} | {op_counts(rows)} | "
                     f"{100 * fmean([e['test_accuracy'] for e in rows]):.2f} |")
    return lines


def per_condition(arms: dict[str, list[dict]], cell: Callable[[list[dict]], str]) -> list[str]:
    """A table with a row per hidden condition and a column per arm; ``cell`` renders an arm's episodes on the
    condition (an en dash where it has none)."""
    grouped = {name: by_condition(rows) for name, rows in arms.items()}
    conditions = sorted({c for g in grouped.values() for c in g})
    lines = ["| condition | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
    for condition in conditions:
        cells = [cell(g[condition]) if g.get(condition) else "–" for g in grouped.values()]
        lines.append(f"| {condition} | " + " | ".join(cells) + " |")
    return lines


def accuracy_cell(rows: list[dict]) -> str:
    """Mean test accuracy (%) with the number of episodes behind it."""
    return f"{100 * fmean([e['test_accuracy'] for e in rows]):.1f} ({len(rows)})"


def fates(ops: list) -> Counter:
    """What became of each seed an episode planted, read off its ``ops`` alone (slices recorded before episodes
    kept their ``seeds``): ``kept`` (FOSSILIZE), ``pruned`` (PRUNE) or ``let go`` (neither: the holding timeout or
    a rollback removed it, or it was still live at the end)."""
    open_slots: set[int] = set()
    out: Counter = Counter()
    for _, op, slot, *_ in ops:
        if op == "germinate":
            out["let go"] += slot in open_slots  # the slot was free again: the timeout took the seed before
            open_slots.add(slot)
        elif op in ("fossilize", "prune") and slot in open_slots:
            out["kept" if op == "fossilize" else "pruned"] += 1
            open_slots.discard(slot)
    out["let go"] += len(open_slots)
    return +out  # without the fates that never happened


def episode_fates(episode: dict) -> Counter:
    """:func:`fates`' categories for one episode, exact where it recorded ``seeds`` (``count_seeds``' counts, in
    which the agent's prunes and the holding timeouts are apart): then ``timed out`` is the timeouts, and ``let go``
    the rolled back and the live at the end."""
    if "seeds" not in episode:
        return fates(episode["ops"])
    seeds = episode["seeds"]
    timed_out = seeds["holding_timeouts"]
    return +Counter({"kept": seeds["fossilized"], "pruned": seeds["pruned"] - timed_out, "timed out": timed_out,
                     "let go": seeds["planted"] - seeds["fossilized"] - seeds["pruned"]})


def fate_cell(rows: list[dict]) -> str:
    """Seeds kept / pruned / let go per episode; where the episodes recorded their ``seeds``, how many of those let
    go were timed out, in brackets."""
    total = sum(map(episode_fates, rows), Counter())
    kept, pruned, let_go, timed_out = (total[k] / len(rows) for k in ("kept", "pruned", "let go", "timed out"))
    cell = f"{kept:.1f} / {pruned:.1f} / {let_go + timed_out:.1f}"
    return f"{cell} ({timed_out:.1f} timed out)" if all("seeds" in e for e in rows) else cell


def candidates_in(folder: Path) -> dict[str, list[dict]]:
    arms = compare_report.load_slices(folder)
    return {name: episodes(slices) for name, slices in arms.items() if compare_report.arm_of(name) in LEARNING_ARMS}


def report(reference_folder: Path, reference_name: str, candidate_folder: Path) -> str:
    arms = compare_report.load_slices(reference_folder)
    if reference_name not in arms:
        raise SystemExit(f"no reference {reference_name!r} in {reference_folder}; it has {sorted(arms)}")
    reference = episodes(arms[reference_name])
    candidates = candidates_in(candidate_folder)
    if not candidates:
        raise SystemExit(f"no learner folders in {candidate_folder}")
    seedling = {f"{SEEDLING} (seedling)": episodes(arms[SEEDLING])} if SEEDLING in arms else {}
    growth_arms = [a for a in GROWTH_ARMS if a in arms]
    paying = []
    if seedling and growth_arms:
        what = pays({a: episodes(arms[a]) for a in (SEEDLING, *growth_arms)}, growth_arms)
        paying = ["## Does it grow more where growth pays?", "",
                  "What growth pays: the best mean return of " + ", ".join(growth_arms) + " minus the seedling's, "
                  "points: " + ", ".join(f"{c} {v:+.2f}" for c, v in sorted(what.items())) + ".", "",
                  *correlation_table({reference_name: reference, **candidates}, what), ""]
    return "\n".join([
        f"# Candidates against {reference_name} on the tuning seeds (`{candidate_folder.name}`, argmax episodes)",
        "", f"Reference: `{reference_folder}`; candidates: `{candidate_folder}`. Returns in points; the per-seed "
        "differences carry the training noise, the CI over episodes does not (see "
        "`benchmarks/studies/pilot_paired.py`).", "",
        *return_table(reference_name, reference, candidates), "",
        "## Test accuracy (%) per hidden condition (episodes)", "",
        *per_condition({reference_name: reference, **seedling, **candidates}, accuracy_cell), "",
        "## Seeds kept / pruned / let go per episode, per hidden condition", "",
        "Let go: neither kept nor pruned (the holding timeout let it go, a rollback removed it, or it was live at "
        "the end); in brackets, of those, the timed out, where the episodes recorded their seeds' fates.", "",
        *per_condition({reference_name: reference, **candidates}, fate_cell), "", *paying])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.pilot_paired",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("reference_folder", type=Path, help="the reference's campaign folder: <out>/<env>")
    parser.add_argument("reference", help="the reference configuration's folder name, e.g. esper_agent-e3")
    parser.add_argument("candidate_folder", type=Path, help="the candidates' campaign folder: <out>/<env>")
    parser.add_argument("--out", type=Path, help="write the markdown here (default: print it)")
    args = parser.parse_args(argv)
    write_or_print(report(args.reference_folder, args.reference, args.candidate_folder), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
