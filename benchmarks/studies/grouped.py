"""Two ways to train K hosts at once, measured in one run on one device: graphs on streams vs grouped kernels.

The GPU engine issue asks to measure both and ship the faster *if it is as clean*. Rows, each for ``K`` hosts:

* ``graphs-streams``: K separate :class:`~esper_env.host.HostModel`\\ s, each training step (forward, backward,
  SGD) captured as its own CUDA graph and replayed on its own stream: the scheme ``esper_env.engine`` ships;
* ``grouped-eager`` / ``grouped-graph``: the K hosts fused into one :class:`GroupedHost` (every convolution with
  ``groups=K``, BatchNorm over the K*C channels, the K classifiers as one batched matmul), run eagerly or as
  one CUDA graph;
* ``env-wait``: the shipped vector env with K sub-envs under a WAIT-only policy (the host alone), whole steps
  (validation, counterfactuals, lifecycle, observation) counted, for scale.

The first three time training steps only (each host its own batch of the same pre-augmented epoch data, bf16
autocast, channels_last, SGD with Nesterov momentum), so they compare the execution schemes alone.
:class:`GroupedHost` is the same function as K hosts (``tests/test_benchmarks_studies.py`` checks it against K
``HostModel``\\ s); what it cannot express is a *different* module set per host, and that is what seeds are.

    python -m benchmarks.studies.grouped --num-envs 8 16 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.common import device_name, write_rows
from benchmarks.throughput import CIFAR_SHAPED, env_run
from esper_env.config import EnvConfig
from esper_env.dataset_spec import DatasetSpec
from esper_env.host import HostModel, build_host

WIDTHS = (8, 16, 32)
BATCH = 512
# The timed batches: CIFAR-shaped, standard-normal pixels, 10 classes (timing reads only shapes and layout).
RANDOM_DATA = DatasetSpec(name="random", num_classes=10, image_size=32, channels=3, train_size=BATCH,
                          val_size=BATCH, test_size=BATCH, chance_accuracy=0.1, mean=(0.0,) * 3, std=(1.0,) * 3)
NUM_CLASSES = RANDOM_DATA.num_classes
LR, MOMENTUM, WEIGHT_DECAY = 0.05, 0.9, 5e-4


class GroupedHost(nn.Module):
    """K hosts of the same widths as one module: input ``(B, K*3, H, W)`` (host k reads channels 3k..3k+2),
    logits ``(B, K, 10)``. Host k's parameters are the k-th slices; no host's output depends on another's."""

    def __init__(self, num_hosts: int, widths: tuple[int, ...] = WIDTHS, in_channels: int = 3) -> None:
        super().__init__()
        k, channels = num_hosts, [in_channels, *widths]
        self.num_hosts = k
        self.features = nn.Sequential(*[
            layer for c_in, c_out in zip(channels, channels[1:], strict=False) for layer in (
                nn.Conv2d(k * c_in, k * c_out, 3, padding=1, groups=k, bias=False), nn.BatchNorm2d(k * c_out),
                nn.ReLU(), nn.MaxPool2d(2))])
        bound = widths[-1] ** -0.5  # nn.Linear's default init, per host
        self.weight = nn.Parameter(torch.empty(k, widths[-1], NUM_CLASSES).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(k, NUM_CLASSES).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.features(x).mean(dim=(2, 3)).unflatten(1, (self.num_hosts, -1))  # (B, K, C)
        return torch.einsum("bkc,kcn->bkn", pooled, self.weight) + self.bias

    @torch.no_grad()
    def load_hosts(self, hosts: list[HostModel]) -> None:
        """Copy K seedless hosts' weights in (for the equivalence check)."""
        convs = [m for m in self.features if isinstance(m, nn.Conv2d)]
        norms = [m for m in self.features if isinstance(m, nn.BatchNorm2d)]
        for index, (conv, norm) in enumerate(zip(convs, norms, strict=True)):
            blocks = [host.blocks[index] for host in hosts]
            conv.weight.copy_(torch.cat([b[0].weight for b in blocks]))
            for name in ("weight", "bias", "running_mean", "running_var"):
                getattr(norm, name).copy_(torch.cat([getattr(b[1], name) for b in blocks]))
        self.weight.copy_(torch.stack([host.classifier.weight.T for host in hosts]))
        self.bias.copy_(torch.stack([host.classifier.bias for host in hosts]))


def interleave(images: torch.Tensor) -> torch.Tensor:
    """``(K, B, C, H, W)`` -> ``(B, K*C, H, W)``: host k's images become channel group k."""
    k, b, c, h, w = images.shape
    return images.transpose(0, 1).reshape(b, k * c, h, w)


def _sgd(params: list[nn.Parameter]) -> torch.optim.SGD:
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY)


def _training_step(model: nn.Module, optimizer: torch.optim.Optimizer, forward: Callable[[], torch.Tensor],
                   labels: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = forward()
        loss = F.cross_entropy(logits.float().flatten(0, -2), labels.flatten()) * (labels.numel() // BATCH)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
    return step


def _capture(step: Callable[[], None], stream: torch.cuda.Stream) -> torch.cuda.CUDAGraph:
    """Warm ``step`` up on ``stream`` (cuDNN choice, momentum buffers), then capture it there."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    return graph


def epoch_data(num_hosts: int, batches: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Random pre-augmented images ``(batches, K, B, 3, 32, 32)`` bf16 and labels ``(batches, K, B)``:
    timing does not depend on the pixel values, only on shapes and layout."""
    gen = torch.Generator(device).manual_seed(0)
    images = torch.randn(batches, num_hosts, BATCH, 3, 32, 32, device=device, generator=gen).to(torch.bfloat16)
    labels = torch.randint(0, NUM_CLASSES, (batches, num_hosts, BATCH), device=device, generator=gen)
    return images, labels


def _time(run_batch: Callable[[int], None], batches: int, repeats: int) -> float:
    """Seconds per pass over ``batches`` batches, after one untimed pass."""
    for index in range(batches):
        run_batch(index)
    torch.cuda.synchronize()  # sync: timing boundary
    start = time.perf_counter()
    for _ in range(repeats):
        for index in range(batches):
            run_batch(index)
    torch.cuda.synchronize()  # sync: timing boundary
    return (time.perf_counter() - start) / repeats


def graphs_on_streams(num_hosts: int, images: torch.Tensor, labels: torch.Tensor, repeats: int) -> float:
    """Images/s of K hosts, one graph per host replayed on one stream per host."""
    device = images.device
    cfg = EnvConfig(host_widths=WIDTHS)
    hosts = [build_host(cfg, RANDOM_DATA).to(device, memory_format=torch.channels_last) for _ in range(num_hosts)]
    no_slots = torch.zeros(cfg.num_slots, device=device), torch.zeros(2, cfg.num_slots, device=device)
    inputs = [torch.zeros_like(images[0, 0]).contiguous(memory_format=torch.channels_last) for _ in hosts]
    targets = [torch.zeros_like(labels[0, 0]) for _ in hosts]
    streams = [torch.cuda.Stream(device) for _ in hosts]
    # The steps hold the optimizers (momentum buffers): they must live as long as the graphs that replay them.
    steps = [_training_step(host, _sgd(list(host.parameters())), lambda h=host, x=x: h(x, *no_slots), y)
             for host, x, y in zip(hosts, inputs, targets, strict=True)]
    graphs = [_capture(step, stream) for step, stream in zip(steps, streams, strict=True)]

    for stream in streams:  # the data was made on the default stream
        stream.wait_stream(torch.cuda.current_stream())

    def run_batch(index: int) -> None:
        # No joins between hosts (that would serialise the streams): each stream owns its host's buffers, and
        # _time's synchronize is the only join.
        for k, (graph, stream) in enumerate(zip(graphs, streams, strict=True)):
            with torch.cuda.stream(stream):
                inputs[k].copy_(images[index, k])
                targets[k].copy_(labels[index, k])
                graph.replay()

    return images.shape[:3].numel() / _time(run_batch, images.shape[0], repeats)


def grouped(num_hosts: int, images: torch.Tensor, labels: torch.Tensor, repeats: int, graph: bool) -> float:
    """Images/s of K hosts as one :class:`GroupedHost`, eager or as one CUDA graph."""
    device = images.device
    model = GroupedHost(num_hosts).to(device, memory_format=torch.channels_last)
    x = torch.zeros_like(interleave(images[0])).contiguous(memory_format=torch.channels_last)
    y = torch.zeros_like(labels[0].T)  # (B, K), matching the logits' (B, K, 10)
    step = _training_step(model, _sgd(list(model.parameters())), lambda: model(x), y)
    replay = _capture(step, torch.cuda.Stream(device)).replay if graph else step

    def run_batch(index: int) -> None:
        x.copy_(interleave(images[index]))
        y.copy_(labels[index].T)
        replay()

    return images.shape[:3].numel() / _time(run_batch, images.shape[0], repeats)


def measure(args: argparse.Namespace) -> list[dict]:
    device, rows = device_name(args.device), []
    torch.backends.cudnn.benchmark = True
    for k in args.num_envs:
        images, labels = epoch_data(k, args.batches, args.device)
        rates = {"graphs-streams": graphs_on_streams(k, images, labels, args.repeats),
                 "grouped-eager": grouped(k, images, labels, args.repeats, graph=False),
                 "grouped-graph": grouped(k, images, labels, args.repeats, graph=True)}
        del images, labels
        env_kwargs = {**CIFAR_SHAPED, "device": args.device, "max_epochs": 25}
        rates["env-wait"] = env_run(k, env_kwargs, "auto", steps=args.env_steps, wait=1.0)["images_per_s"]
        for mode, rate in rates.items():
            rows.append({"device": device, "mode": mode, "num_envs": k, "images_per_s": rate,
                         "vs_graphs_streams": rate / rates["graphs-streams"]})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [f"Device: {rows[0]['device']}, torch {torch.__version__}. Host widths 8/16/32, batch 512 per host, "
             "bf16 autocast, channels_last. Training steps only, except `env-wait` (whole env steps).", "",
             "| K hosts | mode | images/s | vs graphs-streams |", "|---:|---|---:|---:|"]
    lines += [f"| {r['num_envs']} | {r['mode']} | {r['images_per_s']:,.0f} | {r['vs_graphs_streams']:.2f}x |"
              for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="a CUDA device (the schemes compared are CUDA-only)")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 16], help="hosts trained at once (K)")
    parser.add_argument("--batches", type=int, default=40, help="batches per timed pass (count)")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes (count)")
    parser.add_argument("--env-steps", type=int, default=5, help="vector steps timed for env-wait (count)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    if not (args.device.startswith("cuda") and torch.cuda.is_available()):
        parser.error(f"--device {args.device!r}: this benchmark compares CUDA execution schemes; it needs a GPU")
    rows = measure(args)
    write_rows(rows, args.out, "grouped", markdown(rows))


if __name__ == "__main__":
    main()
