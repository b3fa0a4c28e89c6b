"""What one training step of a family host with live seeds does, counted rather than timed: operators dispatched,
bytes their outputs write and FLOPs, for the general path, the joint path (``esper_env.family_joint``) and the
network the seeds grow (joined), at the same weights and batch.

Counting runs anywhere (a CPU is enough) and is deterministic, so it shows what a change to the step's
computation does before a GPU times it: bytes written track the memory traffic of the many small kernels a
growing host runs, operators the kernels a CUDA graph replays (views included, so an upper bound).

    python -m benchmarks.step_traffic --out benchmarks/results/step_traffic-cpu.json
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.common import write_json
from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.family import Architecture
from esper_env.family_host import FamilyHost

BLUEPRINT = {bp.name: i for i, bp in enumerate(FAMILY_BLUEPRINTS)}
CASES = {  # (slot, blueprint) live seeds on the seedling
    "widen_l@0": [(0, "widen_l")],
    "widen_s@0+1": [(0, "widen_s"), (1, "widen_s")],
    "widen_l@2": [(2, "widen_l")],
    "deepen@1+2": [(1, "deepen"), (2, "deepen")],
    "widen_l@0+deepen@2": [(0, "widen_l"), (2, "deepen")],
}


class _Counter(TorchDispatchMode):
    """Counts the operators dispatched and the bytes of the tensors they return."""

    def __init__(self) -> None:
        super().__init__()
        self.operators, self.bytes = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.operators += 1
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.bytes += t.numel() * t.element_size()
        return out


def count_step(host: FamilyHost, x: torch.Tensor, full: frozenset[int]) -> dict[str, float]:
    """Operators, MiB written and GFLOPs of one forward and backward of ``host`` in training mode."""
    host.train()
    host.zero_grad()
    alphas = torch.ones(len(host.slots))
    flags = torch.tensor([[0.0] * len(host.slots), [1.0] * len(host.slots)])
    with _Counter() as counter, FlopCounterMode(display=False) as flops:
        host(x, alphas, flags, full=full).square().sum().backward()
    return {"operators": counter.operators, "mib_written": counter.bytes / 2**20,
            "gflops": flops.get_total_flops() / 1e9}


def measure(seeds: Sequence[tuple[int, str]], batch: int, image_size: int) -> dict[str, Any]:
    """The three counts for one case: live ``seeds`` on the seedling, one batch of random images."""
    torch.manual_seed(0)
    host = FamilyHost(Architecture(), num_classes=10, in_channels=3)
    for step, (slot, name) in enumerate(seeds):
        torch.manual_seed(step + 1)
        host.plant(slot, BLUEPRINT[name], gated=False)
    x = torch.randn(batch, 3, image_size, image_size)
    live = frozenset(slot for slot, _ in seeds)
    joined = copy.deepcopy(host)
    for slot in sorted(live):
        joined.join(slot)
    return {"general": count_step(copy.deepcopy(host), x, frozenset()),
            "joint": count_step(copy.deepcopy(host), x, live), "joined": count_step(joined, x, frozenset())}


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.step_traffic", description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64, help="images per training batch (count)")
    p.add_argument("--image-size", type=int, default=32, help="image side (pixels)")
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = p.parse_args(argv)
    cases = {name: measure(seeds, args.batch, args.image_size) for name, seeds in CASES.items()}
    for name, case in cases.items():
        print(name, "  ".join(f"{path}: {c['operators']} ops, {c['mib_written']:.1f} MiB, {c['gflops']:.2f} GFLOP"
                              for path, c in case.items()))
    write_json(args.out, {"device": "cpu (counts, not timings)", "torch": torch.__version__, "batch": args.batch,
                          "image_size": args.image_size, "seedling": str(Architecture()), "cases": cases})


if __name__ == "__main__":
    main()
