"""Training throughput of the growable host family outside the env: the baselines the v2 env is measured against.

For the seedling and the largest member of :mod:`esper_env.family`, with K models side by side (the env's
sub-envs), on CIFAR-shaped random images resident on the device:

* ``plain``: an eager PyTorch loop (bf16 autocast and channels-last on CUDA, Nesterov SGD), the K models stepped
  one after another, each reading batches augmented (crop + flip) ahead on the device;
* ``graphs``: each model's whole training step (forward, backward, optimizer) captured once as a CUDA graph and
  replayed on its own stream, round-robin, as the env's engine does;
* ``graphs+growth`` (seedling only): as ``graphs``, but every model is grown once, to the final architecture,
  partway through (Net2Net widening, deepening, momentum carried) and its graph captured again: what a growth
  policy costs in re-captures.

All three are :func:`train_trajectory`, which trains K models through any sequence of architectures (the one
implementation ``benchmarks.family_env_throughput`` also replays the env's growth with). Images per second are
summed over the K models; each row also records the seconds spent warming up and capturing (through
``torch.cuda.graph``, which synchronises the device: an upper bound on the engine's cost).

    python -m benchmarks.family_throughput --models 1 8 --out family_throughput.json
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import device_name, run_stamp, write_json
from esper_env.data import normalize, random_crop_flip
from esper_env.family import Architecture, FamilyNet, grow_to

BATCH = 512
POOL = 8  # prepared batches per model, cycled
CAPTURE_WARMUP = 3  # eager training steps before a capture: autograd, cuDNN autotuning and the allocator settle
CLASSES = 10
SEEDLING = Architecture((16, 32, 32), (0, 0, 0))
FINAL = Architecture((64, 128, 128), (0, 1, 1))
LARGEST = Architecture((64, 256, 256), (0, 1, 1))

Trajectory = Sequence[Sequence[Architecture]]
"""``trajectory[t][i]``: the architecture model ``i`` trains during step ``t``."""


class Model:
    """One model's state and its training step on fixed input buffers (so a graph can replay it)."""

    def __init__(self, arch: Architecture, images: torch.Tensor, labels: torch.Tensor, seed: int,
                 batch: int = BATCH) -> None:
        device = images.device
        self.on_cuda = device.type == "cuda"
        # As the env's trainer: channels-last (and bf16, in step) only where the GPU's convolutions want them.
        self.memory_format = torch.channels_last if self.on_cuda else torch.contiguous_format
        torch.manual_seed(seed)
        self.net = FamilyNet(arch, CLASSES).to(device, memory_format=self.memory_format)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
        # Batches are augmented ahead, outside any graph, as the env prepares an epoch's batches: random draws
        # inside a captured graph would replay the same numbers.
        gen = torch.Generator(device=device).manual_seed(seed)
        rows = torch.randint(len(images), (POOL, batch), device=device, generator=gen)
        offsets = torch.randint(0, 5, (POOL * batch, 2), device=device, generator=gen)
        flips = torch.rand(POOL * batch, device=device, generator=gen) < 0.5
        mean, std = torch.full((3,), 0.5, device=device), torch.full((3,), 0.25, device=device)
        pool = normalize(random_crop_flip(images[rows.view(-1)], offsets, flips, 2), mean, std)
        self.pool_x = pool.view(POOL, batch, *pool.shape[1:])
        self.pool_y = labels[rows]
        self.x = torch.empty_like(self.pool_x[0]).contiguous(memory_format=self.memory_format)
        self.y = torch.empty_like(self.pool_y[0])
        self.graph: torch.cuda.CUDAGraph | None = None

    @property
    def arch(self) -> Architecture:
        return self.net.arch

    def load(self, step: int) -> None:
        """Copy batch ``step`` of the prepared pool into the fixed input buffers (one kernel each)."""
        self.x.copy_(self.pool_x[step % POOL])
        self.y.copy_(self.pool_y[step % POOL])

    def step(self) -> None:
        with torch.autocast(self.x.device.type, torch.bfloat16, enabled=self.on_cuda):
            loss = F.cross_entropy(self.net(self.x), self.y, label_smoothing=0.2)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=False)  # graphs need the .grad buffers to stay where they were captured

    def capture(self, stream: torch.cuda.Stream) -> float:
        """Warm up on ``stream`` and capture one step; returns the seconds it took."""
        start = time.perf_counter()
        with torch.cuda.stream(stream):
            self.load(0)
            for _ in range(CAPTURE_WARMUP):
                self.step()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=stream):
                self.step()
        torch.cuda.synchronize()  # sync: setup only
        return time.perf_counter() - start

    def grow(self, final: Architecture, generator: torch.Generator) -> None:
        self.graph = None
        grow_to(self.net, final, self.opt, generator=generator)
        self.net.to(memory_format=self.memory_format)
        self.opt.zero_grad(set_to_none=True)  # new parameters: their .grad buffers are made on the next step


def random_data(count: int, size: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` random uint8 images of ``size`` x ``size`` pixels and their labels, on ``device``: the speed of
    a training step does not depend on what the pixels show."""
    images = torch.randint(0, 256, (count, 3, size, size), dtype=torch.uint8, device=device)
    return images, torch.randint(0, CLASSES, (count,), device=device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # sync: timing boundary


def _follow(model: Model, arch: Architecture, generator: torch.Generator, seed: int,
            data: tuple[torch.Tensor, torch.Tensor], batch: int) -> Model:
    """``model`` grown in place to ``arch`` (momentum carried), or a fresh model where ``arch`` is narrower or
    shallower somewhere (an episode's reset, a pruned seed): a net cannot shrink."""
    old, new = model.arch, arch
    if new.stem == old.stem and all(n >= o for n, o in zip((*new.widths, *new.blocks), (*old.widths, *old.blocks),
                                                          strict=True)):
        model.grow(arch, generator)
        return model
    return Model(arch, *data, seed=seed, batch=batch)


def train_trajectory(trajectory: Trajectory, graphs: bool, batches: int, data: tuple[torch.Tensor, torch.Tensor],
                     batch: int = BATCH) -> dict:
    """Train K models side by side through ``trajectory``, ``batches`` batches per model and step, round-robin
    batch by batch; images per second over the whole trajectory, after a warm-up.

    ``graphs``: each model's step is a CUDA graph on its own stream, captured again whenever its architecture
    changes (inside the timed region: that is what growth costs); else every step runs eagerly on the current
    stream. A model whose architecture grows is grown in place, one that shrinks is made afresh. The warm-up
    steps of a capture in the timed region train too, and are counted (``warmup_batches``)."""
    device = data[0].device
    models = [Model(arch, *data, seed=i, batch=batch) for i, arch in enumerate(trajectory[0])]
    streams = [torch.cuda.Stream(device) if graphs else None for _ in models]
    capture_s, captures, warmup_batches = 0.0, 0, 0
    for m, stream in zip(models, streams, strict=True):
        if stream is not None:
            capture_s, captures = capture_s + m.capture(stream), captures + 1
        else:
            m.load(0)
            m.step()
    _sync(device)
    generator = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for t, archs in enumerate(trajectory):
        for b in range(batches):
            for i, stream in enumerate(streams):
                with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                    if b == 0 and archs[i] != models[i].arch:
                        models[i] = _follow(models[i], archs[i], generator, i, data, batch)
                        if stream is not None:
                            capture_s, captures = capture_s + models[i].capture(stream), captures + 1
                            warmup_batches += CAPTURE_WARMUP
                    models[i].load(t * batches + b)
                    if models[i].graph is not None:
                        models[i].graph.replay()
                    else:
                        models[i].step()
    _sync(device)
    seconds = time.perf_counter() - start
    steps = len(trajectory) * batches
    first = trajectory[0][0]
    return {"arch": {"widths": list(first.widths), "blocks": list(first.blocks)}, "models": len(models),
            "mode": "graphs" if graphs else "plain", "steps": steps,
            "warmup_batches": warmup_batches, "images_per_s": (len(models) * steps + warmup_batches) * batch / seconds,
            "seconds": seconds, "capture_s": capture_s, "captures": captures}


def measure(arch: Architecture, count: int, mode: str, steps: int, data: tuple[torch.Tensor, torch.Tensor]) -> dict:
    """Images per second over ``steps`` batches per model of ``mode`` (``plain``, ``graphs`` or
    ``graphs+growth``: grown to :data:`FINAL` a quarter of the way through)."""
    grow_at = steps // 4 if mode == "graphs+growth" else steps
    trajectory = [[arch] * count] * grow_at + [[FINAL] * count] * (steps - grow_at)
    return {**train_trajectory(trajectory, mode != "plain", 1, data), "mode": mode}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.family_throughput", description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, nargs="+", default=[1, 8], help="models side by side (count)")
    parser.add_argument("--steps", type=int, default=120, help="timed batches per model (count)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device: it measures CUDA graphs")
    torch.backends.cudnn.benchmark = True
    data = random_data(50_000, 32, "cuda")
    rows = []
    for arch, modes in ((SEEDLING, ("plain", "graphs", "graphs+growth")), (LARGEST, ("plain", "graphs"))):
        for count in args.models:
            for mode in modes:
                rows.append(measure(arch, count, mode, args.steps, data))
                print(rows[-1], flush=True)
    write_json(args.out, {**run_stamp(), "device": device_name("cuda"), "rows": rows})


if __name__ == "__main__":
    main()
