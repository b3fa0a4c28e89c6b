"""Host-training throughput of the env against a plain PyTorch loop, in one run on one device.

For each ``num_envs`` it measures:

* ``plain``: a plain PyTorch loop training ``num_envs`` copies of the same host round-robin (same data on the
  device, same augmentation, batch, precision and memory format; ``torch.optim.SGD``; no validation);
* ``env-eager``: the vector env with ``execution="eager"`` (every sub-env on the default stream, no graphs);
* ``env``: the vector env as shipped (``execution="auto"``: CUDA graphs on one stream per sub-env);
* ``env-wait``: the same under a policy that only ever WAITs: the host alone, no seeds, no re-captures.

Env rows time whole vector steps (validation, counterfactuals, lifecycle, observation, masks and the resets at
episode ends included) after 3 warm-up steps, while a fixed random policy (WAIT with probability 0.7, else a
uniformly chosen valid op) plants, blends, fossilizes and prunes seeds: a full episode for ``env``, a few steps
for ``env-eager``, whose rate does not depend on the policy. ``overhead_fraction`` is the share of step time
spent outside the engine's training and validation.

    python -m benchmarks.throughput --num-envs 1 4 8 16 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

import esper_env  # noqa: F401
from benchmarks.common import device_name, write_rows
from esper_env.config import EnvConfig
from esper_env.data import load_dataset, normalize, random_crop_flip
from esper_env.host import build_host
from esper_env.masks import fill_heads

CIFAR_SHAPED = {"dataset": "synthetic", "synthetic_train_size": 45_000, "synthetic_val_size": 5_000,
                "synthetic_test_size": 1_000, "synthetic_image_size": 32}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()  # sync: timing boundary


def plain_loop(num_envs: int, kwargs: dict, epochs: int) -> dict:
    """The same host trained by a straightforward eager loop; images/s over ``epochs`` epochs after a warm-up."""
    cfg = EnvConfig(**{**kwargs, "execution": "eager"})
    device = kwargs["device"]
    data = load_dataset(cfg, torch.device(device))
    on_cuda = device.startswith("cuda")
    fmt = torch.channels_last if on_cuda else torch.contiguous_format
    models = [build_host(cfg, data.spec).to(device, memory_format=fmt) for _ in range(num_envs)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4) for m in models]
    alphas = torch.zeros(cfg.num_slots, 1, device=device)
    flags = torch.zeros(2, cfg.num_slots, device=device)
    n, b = data.train_x.shape[0], cfg.batch_size
    limit = cfg.train_images_per_epoch or n

    def epoch() -> int:
        perms = [torch.randperm(n, device=device)[:limit] for _ in models]
        seen = 0
        for start in range(0, limit - b + 1, b):
            for model, opt, perm in zip(models, opts, perms, strict=True):
                rows = perm[start:start + b]
                offsets = torch.randint(0, 9, (b, 2), device=device)
                flips = torch.randint(0, 2, (b,), device=device) != 0
                x = normalize(random_crop_flip(data.train_x[rows], offsets, flips), data.mean, data.std)
                with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=on_cuda):
                    logits = model(x.contiguous(memory_format=fmt), alphas, flags)
                loss = F.cross_entropy(logits.float(), data.train_y[rows])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                seen += b
        return seen

    epoch()
    _sync(device)
    start, images = time.perf_counter(), 0
    for _ in range(epochs):
        images += epoch()
    _sync(device)
    elapsed = time.perf_counter() - start
    return {"images_per_s": images / elapsed, "env_steps_per_s": num_envs * epochs / elapsed,
            "overhead_fraction": 0.0}


def random_policy(op_slot: np.ndarray, nvec: np.ndarray, rng: np.random.Generator, wait: float,
                  blueprint_mask: np.ndarray | None = None, blend_mask: np.ndarray | None = None) -> np.ndarray:
    """A valid action: WAIT with probability ``wait``, else a uniformly chosen valid op other than WAIT and
    :func:`esper_env.masks.fill_heads` for it (the masks, when given, are a hard parameter budget's)."""
    ops = np.flatnonzero(op_slot[1:].any(axis=1)) + 1
    if ops.size == 0 or rng.random() < wait:
        return np.zeros(len(nvec), dtype=np.int64)
    return fill_heads(int(rng.choice(ops)), op_slot, nvec, rng, blueprint_mask, blend_mask)


def random_actions(info: dict, nvec: np.ndarray, rng: np.random.Generator, wait: float) -> np.ndarray:
    """:func:`random_policy` for every sub-env of a vector ``info``."""
    blueprints = info.get("blueprint_mask", [None] * len(info["op_slot_mask"]))
    blends = info.get("blend_mask", [None] * len(info["op_slot_mask"]))
    return np.stack([random_policy(m, nvec, rng, wait, b, k) for m, b, k in zip(info["op_slot_mask"], blueprints,
                                                                                 blends, strict=True)])


def env_run(num_envs: int, kwargs: dict, execution: str, steps: int, wait: float = 0.7) -> dict:
    """Images/s and steps/s of ``steps`` whole vector steps, after 3 warm-up steps (``wait=1``: WAIT only)."""
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=num_envs, execution=execution,
                        autoreset_mode="SameStep", **kwargs)
    env = envs.unwrapped
    rng = np.random.default_rng(0)
    _, info = envs.reset(seed=0)
    stats = {}
    for phase, count in (("warmup", 3), ("measure", steps)):
        env.timings.clear()
        captures = env.graph_captures
        _sync(kwargs["device"])
        start, images = time.perf_counter(), 0
        for _ in range(count):
            actions = random_actions(info, env.single_action_space.nvec, rng, wait=wait)
            _, _, _, _, info = envs.step(actions)
            trained = info.get("final_info", info)["images_trained"]
            images += int(np.asarray(trained).sum())
        elapsed = time.perf_counter() - start
        stats[phase] = {"images_per_s": images / elapsed, "env_steps_per_s": num_envs * count / elapsed,
                        "overhead_fraction": 1.0 - env.timings["engine"] / env.timings["step"],
                        "graph_captures": env.graph_captures - captures, "steps": count}
    envs.close()
    return stats["measure"]


def measure(args: argparse.Namespace) -> list[dict]:
    kwargs = {**CIFAR_SHAPED, "device": args.device, "max_epochs": args.episode_epochs}
    if args.train_images:
        kwargs["train_images_per_epoch"] = args.train_images
    device = device_name(args.device)
    rows = []
    for n in args.num_envs:
        runs = {"plain": lambda n=n: plain_loop(n, kwargs, epochs=2)}
        runs["env-eager"] = lambda n=n: env_run(n, kwargs, "eager", steps=args.baseline_steps)
        if args.device.startswith("cuda"):
            runs["env"] = lambda n=n: env_run(n, kwargs, "auto", steps=args.episode_epochs)
            runs["env-wait"] = lambda n=n: env_run(n, kwargs, "auto", steps=args.baseline_steps, wait=1.0)
        for mode, run in runs.items():
            row = {"device": device, "mode": mode, "num_envs": n, **run()}
            rows.append(row)
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [f"Device: {rows[0]['device']}, torch {torch.__version__}. Host widths 8/16/32, batch 512, "
             "45k training images per sub-env epoch (CIFAR-10-shaped), 5k validation images.", "",
             "| num_envs | mode | host-training images/s | env steps/s | overhead | vs env-eager |",
             "|---:|---|---:|---:|---:|---:|"]
    eager = {r["num_envs"]: r["images_per_s"] for r in rows if r["mode"] == "env-eager"}
    for r in rows:
        ratio = r["images_per_s"] / eager[r["num_envs"]] if r["num_envs"] in eager else float("nan")
        lines.append(f"| {r['num_envs']} | {r['mode']} | {r['images_per_s']:,.0f} | {r['env_steps_per_s']:.2f} | "
                     f"{100 * r['overhead_fraction']:.1f}% | {ratio:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--episode-epochs", type=int, default=25, help="epochs per episode = steps timed (env)")
    parser.add_argument("--baseline-steps", type=int, default=5, help="steps timed for env-eager")
    parser.add_argument("--train-images", type=int, default=None, help="training images per epoch (default all)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--tag", default=None, help="file name tag (default: the device name)")
    args = parser.parse_args(argv)
    rows = measure(args)
    write_rows(rows, args.out, "throughput", markdown(rows), args.tag)


if __name__ == "__main__":
    main()
