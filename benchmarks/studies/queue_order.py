"""In which order should the head-to-head's remaining learner slices start? A list schedule of per-call estimates.

The h2h_v2 campaign runs four learner slices at a time on one GPU, each call advancing every running slice by
about one call's worth; ``benchmarks.scheduler.run_jobs`` starts the queued slices in plan order, each as a slot
frees. With the paused slices first (their calls left) and the queue after them, this computes after how many
calls the last slice ends, for the order seed by seed (as declared), longest first (as ``plan-learners.json``
runs since 2026-12-05) and the best of all orders. The calls per slice are the notebook's rough estimates, so it
also draws them at random within a few calls (``--draws``) and reports the mean. Planning arithmetic, not a
measurement; ``benchmarks/results/h2h_v2/queue-order.json`` is its output.

    python -m benchmarks.studies.queue_order --out benchmarks/results/h2h_v2/queue-order.json   # about 2 min
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
from collections.abc import Sequence
from pathlib import Path

CALLS = {"m3": 14, "m2": 12, "e3": 8, "e3-imitate8": 8}  # calls a fresh slice needs (notebook, 2026-12-05)
SPREAD = {"m3": (13, 16), "m2": (9, 15), "e3": (6, 10), "e3-imitate8": (6, 10)}
PAUSED = (4, 5, 1, 10)  # calls left: e3 seed 5, m2 seed 4, m3 seed 3, m3 seed 4
PAUSED_SPREAD = ((3, 6), (4, 7), (1, 1), (9, 11))
SEED_BY_SEED = ("e3-imitate8", "m2", "m3", "e3", "e3-imitate8", "m2", "m3", "e3", "e3-imitate8", "m2", "m3")


def makespan(queue: Sequence[str], calls: dict[str, int], paused: Sequence[int], slots: int = 4) -> int:
    """Calls until the last slice ends when ``queue`` starts in order, each on the first slot to free."""
    ends = sorted(paused) + [0] * (slots - len(paused))
    heapq.heapify(ends)
    for label in queue:
        heapq.heappush(ends, heapq.heappop(ends) + calls[label])
    return max(ends)


def longest_first(queue: Sequence[str], calls: dict[str, int]) -> tuple[str, ...]:
    return tuple(sorted(queue, key=lambda label: -calls[label]))  # stable: seed order within a learner


def draws(count: int, rng: random.Random) -> list[tuple[dict[str, int], tuple[int, ...]]]:
    return [({k: rng.randint(*span) for k, span in SPREAD.items()},
             tuple(rng.randint(*span) for span in PAUSED_SPREAD)) for _ in range(count)]


def mean_makespan(queue: Sequence[str], scenarios: list[tuple[dict[str, int], tuple[int, ...]]]) -> float:
    return sum(makespan(queue, calls, paused) for calls, paused in scenarios) / len(scenarios)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=300, help="random draws of the estimates")
    parser.add_argument("--rng-seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the result here as JSON")
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error(f"--draws {args.draws}: expected at least 1")
    scenarios = draws(args.draws, random.Random(args.rng_seed))
    orders = sorted(set(itertools.permutations(SEED_BY_SEED)))
    named = {"seed by seed": SEED_BY_SEED, "longest first": longest_first(SEED_BY_SEED, CALLS)}
    best_mean, best = min((mean_makespan(queue, scenarios), queue) for queue in orders)  # ties: the first order
    result = {
        "what": "calls until the last learner slice ends, four slots on one GPU, the paused slices first",
        "calls_per_slice": CALLS, "paused_calls_left": PAUSED, "draws": args.draws, "orders_searched": len(orders),
        "estimates": {name: makespan(queue, CALLS, PAUSED) for name, queue in named.items()},
        "mean_over_draws": {name: round(mean_makespan(queue, scenarios), 2) for name, queue in named.items()}
        | {"best of all orders": round(best_mean, 2)},
        "best_order": best,
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
