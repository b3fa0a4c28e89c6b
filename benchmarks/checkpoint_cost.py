"""What it costs that ``compare_agents`` saves every learning slice's training state after each update: the
median time of saving a committed esper_agent checkpoint, and of saving a MaskablePPO model with its curve
(``Esper-Synthetic-v0``, 8 sub-envs), each written as ``compare_agents`` writes it (atomically, beside the slice).

    python -m benchmarks.checkpoint_cost benchmarks/results/compare_val5k/Esper-CIFAR10-Fast-v0/\\
        esper_agent-imitate8-entall-refkl0.1-decay36-best8/seed15.ckpt --out benchmarks/results/checkpoint_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import device_name, run_stamp, write_json
from benchmarks.compare_agents import save_maskable
from esper_agent.checkpoint import load_checkpoint, save_checkpoint


def median_ms(save: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        save()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def maskable_save(folder: Path) -> tuple[Callable[[], None], Path]:
    """A save of a fresh MaskablePPO model on the synthetic env, as ``train_maskable`` saves after each rollout."""
    from sb3_contrib import MaskablePPO

    from esper_env.sb3 import make_sb3_env

    env = make_sb3_env("Esper-Synthetic-v0", 8, flatten=False, device="cpu")
    model = MaskablePPO("MlpPolicy", env, n_steps=8, batch_size=16, device="cpu", verbose=0)
    saved, curve = folder / "seed0.sb3.zip", folder / "seed0.curve.json"
    return (lambda: save_maskable(model, saved, curve, {"curve": [], "host_epochs": 0})), saved


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, help="a committed esper_agent seed<k>.ckpt")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the result (default: print only)")
    args = parser.parse_args(argv)
    state = load_checkpoint(args.checkpoint)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        agent_ms = median_ms(lambda: save_checkpoint(folder / "seed0.ckpt", state), args.repeats)
        save, saved = maskable_save(folder)
        maskable_ms = median_ms(save, args.repeats)
        result = {"device": device_name("cpu"), **run_stamp(), "repeats": args.repeats,
                  "esper_agent": {"checkpoint": str(args.checkpoint), "bytes": (folder / "seed0.ckpt").stat().st_size,
                                  "median_save_ms": agent_ms},
                  "maskable_multidiscrete": {"env": "Esper-Synthetic-v0", "num_envs": 8,
                                             "bytes": saved.stat().st_size, "median_save_ms": maskable_ms}}
    print(json.dumps(result, indent=1))
    if args.out is not None:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
