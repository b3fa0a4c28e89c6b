"""Training throughput of the growable host family outside the env: the baselines the v2 env is measured against.

For the seedling and the largest member of :mod:`esper_env.family`, with K models side by side (the env's
sub-envs), on CIFAR-shaped random images resident on the device:

* ``plain``: an eager PyTorch loop (bf16 autocast, channels-last, Nesterov SGD), the K models stepped one after
  another, each reading batches augmented (crop + flip) ahead on the GPU;
* ``graphs``: each model's whole training step (augmentation, forward, backward, optimizer) captured once as a
  CUDA graph and replayed on its own stream, round-robin, as the env's engine does;
* ``graphs+growth`` (seedling only): as ``graphs``, but every model is grown once, to the final architecture,
  partway through (Net2Net widening, deepening, momentum carried) and its graph captured again: what a growth
  policy costs in re-captures.

Images per second are summed over the K models; each row also records the seconds spent warming up and
capturing (through ``torch.cuda.graph``, which synchronises the device: an upper bound on the engine's cost).

    python -m benchmarks.family_throughput --models 1 8 --out family_throughput.json
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import device_name, run_stamp, write_json
from esper_env.data import normalize, random_crop_flip
from esper_env.family import Architecture, FamilyNet, grow_to

BATCH = 512
POOL = 8  # prepared batches per model, cycled
SEEDLING = Architecture((16, 32, 32), (0, 0, 0))
FINAL = Architecture((64, 128, 128), (0, 1, 1))
LARGEST = Architecture((64, 256, 256), (0, 1, 1))


class Model:
    """One model's state and its training step on fixed input buffers (so a graph can replay it)."""

    def __init__(self, arch: Architecture, images: torch.Tensor, labels: torch.Tensor, seed: int) -> None:
        device = images.device
        torch.manual_seed(seed)
        self.net = FamilyNet(arch, 10).to(device, memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
        # Batches are augmented ahead, outside any graph, as the env prepares an epoch's batches: random draws
        # inside a captured graph would replay the same numbers.
        gen = torch.Generator(device=device).manual_seed(seed)
        rows = torch.randint(len(images), (POOL, BATCH), device=device, generator=gen)
        offsets = torch.randint(0, 5, (POOL * BATCH, 2), device=device, generator=gen)
        flips = torch.rand(POOL * BATCH, device=device, generator=gen) < 0.5
        mean, std = torch.full((3,), 0.5, device=device), torch.full((3,), 0.25, device=device)
        pool = normalize(random_crop_flip(images[rows.view(-1)], offsets, flips, 2), mean, std)
        self.pool_x = pool.view(POOL, BATCH, *pool.shape[1:])
        self.pool_y = labels[rows]
        self.x = torch.empty_like(self.pool_x[0]).contiguous(memory_format=torch.channels_last)
        self.y = torch.empty_like(self.pool_y[0])
        self.graph: torch.cuda.CUDAGraph | None = None

    def load(self, step: int) -> None:
        """Copy batch ``step`` of the prepared pool into the fixed input buffers (one kernel each)."""
        self.x.copy_(self.pool_x[step % POOL])
        self.y.copy_(self.pool_y[step % POOL])

    def step(self) -> None:
        with torch.autocast("cuda", torch.bfloat16):
            loss = F.cross_entropy(self.net(self.x), self.y, label_smoothing=0.2)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=False)  # graphs need the .grad buffers to stay where they were captured

    def capture(self, stream: torch.cuda.Stream) -> float:
        """Warm up on ``stream`` and capture one step; returns the seconds it took."""
        start = time.perf_counter()
        with torch.cuda.stream(stream):
            self.load(0)
            for _ in range(3):  # warm-up: autograd, cuDNN autotuning and the allocator settle
                self.step()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=stream):
                self.step()
        torch.cuda.synchronize()  # sync: setup only
        return time.perf_counter() - start

    def grow(self, final: Architecture, generator: torch.Generator) -> None:
        self.graph = None
        grow_to(self.net, final, self.opt, generator=generator)
        self.net.to(memory_format=torch.channels_last)
        self.opt.zero_grad(set_to_none=True)  # new parameters: their .grad buffers are made on the next step


def measure(arch: Architecture, count: int, mode: str, steps: int, data: tuple[torch.Tensor, torch.Tensor]) -> dict:
    """Images per second over ``steps`` batches per model, after warm-up; capture seconds counted apart."""
    models = [Model(arch, *data, seed=i) for i in range(count)]
    streams = [torch.cuda.Stream() for _ in models]
    capture_s = 0.0
    if mode != "plain":
        capture_s += sum(m.capture(s) for m, s in zip(models, streams, strict=True))
    else:
        for m in models:
            m.load(0)
            m.step()
    torch.cuda.synchronize()
    grow_at, cpu_gen = steps // 4, torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for step in range(steps):
        for m, stream in zip(models, streams, strict=True):
            with torch.cuda.stream(stream) if mode != "plain" else contextlib.nullcontext():  # plain: one stream
                m.load(step)
                if mode == "graphs+growth" and step == grow_at:
                    m.grow(FINAL, cpu_gen)
                    capture_s += m.capture(stream)
                if m.graph is not None:
                    m.graph.replay()
                else:
                    m.step()
    torch.cuda.synchronize()  # sync: end of the timed region
    seconds = time.perf_counter() - start
    return {"arch": {"widths": list(arch.widths), "blocks": list(arch.blocks)}, "models": count, "mode": mode,
            "steps": steps, "images_per_s": count * steps * BATCH / seconds, "seconds": seconds,
            "capture_s": capture_s}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.family_throughput", description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, nargs="+", default=[1, 8], help="models side by side (count)")
    parser.add_argument("--steps", type=int, default=120, help="timed batches per model (count)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device: it measures CUDA graphs")
    torch.backends.cudnn.benchmark = True
    images = torch.randint(0, 256, (50_000, 3, 32, 32), dtype=torch.uint8, device="cuda")
    labels = torch.randint(0, 10, (50_000,), device="cuda")
    rows = []
    for arch, modes in ((SEEDLING, ("plain", "graphs", "graphs+growth")), (LARGEST, ("plain", "graphs"))):
        for count in args.models:
            for mode in modes:
                rows.append(measure(arch, count, mode, args.steps, (images, labels)))
                print(rows[-1], flush=True)
    write_json(args.out, {**run_stamp(), "device": device_name("cuda"), "rows": rows})


if __name__ == "__main__":
    main()
