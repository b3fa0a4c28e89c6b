"""What growing late costs in the growable host family, and how much the learning-rate schedule decides it.

Trains members of :mod:`esper_env.family` on real CIFAR-10 (45k training split, scored on the 10k test set with
flip test-time augmentation), static or grown from the seedling mid-run by :func:`~esper_env.family.widen`
(Net2Net channel splitting) and :func:`~esper_env.family.deepen` with the optimizer's momentum carried through
the growth. Two schedules of the peak learning rate, both with one epoch of linear warm-up:

* ``linear``: linear decay to 0 over the rest of the run (the fast CIFAR recipes' schedule);
* ``wsd``: warm-up, stable at the peak, then linear decay to 0 over the last ``--decay-frac`` of the run.
  A network grown during the stable phase loses no "high learning-rate time" to arriving late; only the
  epochs before its birth.

The recipe's hyperparameters are the fast-recipe family's (batch 512, Nesterov SGD at peak 0.2, momentum 0.9,
weight decay 5e-4, label smoothing 0.2, flip + 2-pixel translate): facts from the recipes, code our own.

    python -m benchmarks.grow_cost --data-dir DIR --set schedules --seeds 0 1 2 --out slice.jsonl [--shard 0/4]
    python -m benchmarks.grow_cost --report benchmarks/results/grow_cost   # benchmarks.grow_report

Each finished run appends one JSON line (arm, seed, test accuracy of the raw and of the EMA weights, params,
training FLOPs, the validation accuracy after every epoch, seconds); ``--shard i/n`` runs every n-th (arm, seed)
pair so several processes can share one GPU.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from benchmarks import grow_report
from esper_env import episode_data
from esper_env.conditions import CONDITIONS, Condition, condition_named
from esper_env.config import EnvConfig
from esper_env.data import Dataset, load_dataset, normalize, random_crop_flip
from esper_env.family import Architecture, FamilyNet, boost_fresh, forward_flops, grow_to, param_count

BATCH = 512  # images
PEAK_LR = 0.2  # per step, batch 512
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
LABEL_SMOOTHING = 0.2
TRANSLATE = 2  # pixels
EMA_DECAY = 0.99  # per step: the average's time constant is 100 steps, about one epoch of 87

SEEDLING = Architecture((16, 32, 32), (0, 0, 0))
MEDIUM = Architecture((32, 64, 64), (0, 1, 1))
FINAL = Architecture((64, 128, 128), (0, 1, 1))
LARGEST = Architecture((64, 256, 256), (0, 1, 1))


@dataclass(frozen=True)
class Arm:
    name: str
    start: Architecture
    final: Architecture
    grow_epoch: int | None  # None: trained static as ``final``
    schedule: str
    decay_frac: float = 0.3  # wsd: fraction of the run spent decaying
    boost: float = 1.0  # gradient multiplier of the entries new at growth (a per-entry lr factor)
    noise: float = 0.01  # symmetry-breaking noise of split channels, relative to the weight's std
    condition: str = "full"  # the training condition (esper_env.conditions)

    @property
    def plan(self) -> str:
        """The arm's name without its condition: the fixed plan it runs."""
        return self.name.removesuffix(_suffix(self.condition))

    @property
    def static_twin(self) -> str:
        """The arm that trains this arm's final architecture static, with the same schedule and condition."""
        label = next(k for k, a in ARCHITECTURES.items() if a == self.final)
        decay = "" if self.decay_frac == 0.3 else f"-decay{self.decay_frac}"
        return f"static-{label}-{self.schedule}{decay}" + _suffix(self.condition)


def _suffix(condition: str) -> str:
    return "" if condition == "full" else f"-{condition}"


SMALL = Architecture((32, 64, 64), (0, 0, 0))
ARCHITECTURES = {"seedling": SEEDLING, "small": SMALL, "medium": MEDIUM, "final": FINAL, "largest": LARGEST}
HARSH = tuple(condition_named(name) for name in ("pool2k", "noise60", "pool5k-noise40"))
"""The harshest conditions, screened by the 'harsh' arm set before they joined the env's catalogue (screen v4)."""
AXES = tuple(c for c in CONDITIONS if c.classes is not None or c.resolution is not None)
"""The catalogue's conditions on the classes-in-play and resolution axes, screened by the 'axes' arm set."""
POOL_NOISE = tuple(c for c in CONDITIONS if c not in AXES and c not in HARSH)
"""The catalogue's other conditions on the pool and label-noise axes, screened by the 'conditions' arm set."""
PROBE_CONDITIONS = {c.name: c for c in CONDITIONS}


def schedule_arms(epochs: int) -> list[Arm]:
    """Statics on both schedules, and seedling -> FINAL at 10%, 25% and 50% of the run on both."""
    out = []
    for schedule in ("linear", "wsd"):
        out += [Arm(f"static-{label}-{schedule}", arch, arch, None, schedule)
                for label, arch in ARCHITECTURES.items() if arch != SMALL]
        for fraction in (0.1, 0.25, 0.5):
            at = round(fraction * epochs)
            out.append(Arm(f"grow{int(fraction * 100)}-final-{schedule}", SEEDLING, FINAL, at, schedule))
    return out


def catchup_arms(epochs: int) -> list[Arm]:
    """Under wsd: boosting the new entries' learning rate, more split noise, and a longer decay."""
    at = {f: round(f * epochs) for f in (0.1, 0.25, 0.5)}
    out = [Arm(f"grow{int(f * 100)}-final-wsd-boost2", SEEDLING, FINAL, e, "wsd", boost=2.0) for f, e in at.items()]
    out.append(Arm("grow25-final-wsd-boost3", SEEDLING, FINAL, at[0.25], "wsd", boost=3.0))
    out.append(Arm("grow25-final-wsd-noise0.1", SEEDLING, FINAL, at[0.25], "wsd", noise=0.1))
    out.append(Arm("static-final-wsd-decay0.5", FINAL, FINAL, None, "wsd", decay_frac=0.5))
    out.append(Arm("grow25-final-wsd-boost2-decay0.5", SEEDLING, FINAL, at[0.25], "wsd", decay_frac=0.5, boost=2.0))
    return out


def condition_arms(epochs: int) -> list[Arm]:
    """Under wsd, on every pool and noise condition but the full one: each static size, and seedling -> FINAL
    at 25%."""
    out = []
    for condition in (c.name for c in POOL_NOISE if c.name != "full"):
        out += [Arm(f"static-{label}-wsd-{condition}", arch, arch, None, "wsd", condition=condition)
                for label, arch in ARCHITECTURES.items() if arch != SMALL]
        out.append(Arm(f"grow25-final-wsd-boost2-{condition}", SEEDLING, FINAL, round(0.25 * epochs), "wsd",
                       boost=2.0, condition=condition))
    return out


def harsh_arms(epochs: int) -> list[Arm]:
    """Under wsd: every static size on the harsh conditions, and the small size on every pool and noise
    condition of the catalogue."""
    out = [Arm(f"static-{label}-wsd{_suffix(c.name)}", arch, arch, None, "wsd", condition=c.name)
           for c in HARSH for label, arch in ARCHITECTURES.items()]
    out += [Arm(f"static-small-wsd{_suffix(c.name)}", SMALL, SMALL, None, "wsd", condition=c.name) for c in POOL_NOISE]
    return out


def axes_arms(epochs: int) -> list[Arm]:
    """Under wsd, on the new axes' conditions: every static size, and seedling -> FINAL at 25% (boosted)."""
    out = []
    for c in AXES:
        out += [Arm(f"static-{label}-wsd-{c.name}", arch, arch, None, "wsd", condition=c.name)
                for label, arch in ARCHITECTURES.items()]
        out.append(Arm(f"grow25-final-wsd-boost2-{c.name}", SEEDLING, FINAL, round(0.25 * epochs), "wsd",
                       boost=2.0, condition=c.name))
    return out


ARM_SETS = {"schedules": schedule_arms, "catchup": catchup_arms, "conditions": condition_arms, "harsh": harsh_arms,
            "axes": axes_arms}


def learning_rate(step: int, total: int, warmup: int, schedule: str, decay_frac: float) -> float:
    """Peak-relative learning rate at ``step`` of ``total`` (both in batches)."""
    if step < warmup:
        return PEAK_LR * (step + 1) / warmup
    decay_start = warmup if schedule == "linear" else max(warmup, round(total * (1 - decay_frac)))
    if step < decay_start:
        return PEAK_LR
    return PEAK_LR * max(0.0, (total - step) / (total - decay_start))


def grow(net: FamilyNet, arm: Arm, optimizer: torch.optim.Optimizer, generator: torch.Generator) -> None:
    """Grow ``net`` to the arm's final architecture in one step, carrying momentum; boost the new entries."""
    since = net.arch
    grow_to(net, arm.final, optimizer, arm.noise, generator)
    net.to(memory_format=torch.channels_last)
    if arm.boost != 1.0:
        boost_fresh(net, since, arm.boost)


@dataclass
class RunData:
    """One run's view of the dataset under its condition."""

    data: Dataset
    condition: Condition
    pool: torch.Tensor  # indices of the training images in play
    labels: torch.Tensor  # training labels by image index (noisy inside the pool)
    val: torch.Tensor  # indices of the validation images of the classes in play
    test: torch.Tensor  # indices of the test images of the classes in play

    def inputs(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images -> the network's float input: normalised, at the condition's resolution, channels-last."""
        x = episode_data.reduce_resolution(normalize(images, self.data.mean, self.data.std), self.condition)
        return x.contiguous(memory_format=torch.channels_last)


@torch.no_grad()
def accuracy(net: FamilyNet, run: RunData, split: str, tta: bool) -> float:
    """Accuracy on the ``"val"`` or ``"test"`` images of the classes in play."""
    net.eval()
    images, labels = getattr(run.data, f"{split}_x"), getattr(run.data, f"{split}_y")
    chosen = getattr(run, split)
    correct = torch.zeros((), device=images.device)
    for start in range(0, len(chosen), 2000):
        rows = chosen[start : start + 2000]
        x = run.inputs(images[rows])
        with torch.autocast("cuda", torch.bfloat16, enabled=x.is_cuda):
            logits = net(x) + (net(x.flip(3)) if tta else 0)
        correct += (logits.argmax(1) == labels[rows]).sum()
    net.train()
    return float(correct) / len(chosen)  # sync: once per epoch


class Reads:
    """An epoch's validation reads, whose step-to-step noise the report compares: the raw weights (what the env
    reads today), the raw weights with flip test-time augmentation, and an exponential moving average of the
    weights (restarted from the grown weights at growth: its shapes change)."""

    def __init__(self, net: FamilyNet) -> None:
        self.curves: dict[str, list[float]] = {"val_curve": [], "val_curve_tta": [], "val_curve_ema": []}
        self.restart(net)

    def restart(self, net: FamilyNet) -> None:
        self.ema = AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(EMA_DECAY), use_buffers=True)

    def after_step(self, net: FamilyNet) -> None:
        self.ema.update_parameters(net)

    def read(self, net: FamilyNet, run: RunData) -> None:
        self.curves["val_curve"].append(accuracy(net, run, "val", tta=False))
        self.curves["val_curve_tta"].append(accuracy(net, run, "val", tta=True))
        self.curves["val_curve_ema"].append(accuracy(self.ema.module, run, "val", tta=False))


def run_data(arm: Arm, data: Dataset, gen: torch.Generator) -> RunData:
    """The run's classes in play, pool and (noisy) labels, drawn in that order with the run's generator."""
    condition = PROBE_CONDITIONS[arm.condition]
    classes = episode_data.draw_classes(condition, data.spec.num_classes, gen)
    candidates = episode_data.in_play(data.train_y, classes)
    # With every class in play and no pool size, nothing is drawn: those runs keep the random stream of the runs
    # made before conditions existed.
    plain = classes is None and condition.pool is None
    pool = candidates if plain else episode_data.draw_pool(condition, candidates, gen)
    labels = data.train_y.clone()
    labels[pool] = episode_data.noisy_labels(data.train_y[pool], condition, data.spec.num_classes, gen)
    val, test = episode_data.in_play(data.val_y, classes), episode_data.in_play(data.test_y, classes)
    return RunData(data, condition, pool, labels, val, test)


def train(arm: Arm, seed: int, data: Dataset, epochs: int) -> dict:
    device = data.train_x.device
    torch.manual_seed(seed)
    gen = torch.Generator(device=device).manual_seed(seed)
    cpu_gen = torch.Generator().manual_seed(seed)
    spec = data.spec
    net = FamilyNet(arm.start, spec.num_classes, spec.channels).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=PEAK_LR, momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY)
    n = len(data.train_x)
    run = run_data(arm, data, gen)
    per_epoch = n // BATCH
    total, flops, reads = epochs * per_epoch, 0, Reads(net)
    started = time.perf_counter()
    for epoch in range(epochs):
        if arm.grow_epoch == epoch:
            grow(net, arm, opt, cpu_gen)
            reads.restart(net)
        order = run.pool[episode_data.epoch_order(len(run.pool), n, gen)]
        for i in range(per_epoch):
            step = epoch * per_epoch + i
            for group in opt.param_groups:
                group["lr"] = learning_rate(step, total, per_epoch, arm.schedule, arm.decay_frac)
            idx = order[i * BATCH : (i + 1) * BATCH]
            offsets = torch.randint(0, 2 * TRANSLATE + 1, (BATCH, 2), device=device, generator=gen)
            flips = torch.rand(BATCH, device=device, generator=gen) < 0.5
            x = run.inputs(random_crop_flip(data.train_x[idx], offsets, flips, TRANSLATE))
            with torch.autocast("cuda", torch.bfloat16, enabled=x.is_cuda):
                loss = F.cross_entropy(net(x), run.labels[idx], label_smoothing=LABEL_SMOOTHING)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            reads.after_step(net)
        flops += 3 * forward_flops(net.arch, spec.image_size, spec.num_classes, spec.channels) * per_epoch * BATCH
        reads.read(net, run)
    seconds = time.perf_counter() - started
    return {**asdict(arm), "seed": seed, "epochs": epochs,
            "test_accuracy": accuracy(net, run, "test", tta=True),
            "test_accuracy_ema": accuracy(reads.ema.module, run, "test", tta=True),
            "params": param_count(net.arch), "train_flops": flops, **reads.curves, "seconds": seconds,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}


def report(folder: Path, epochs: int = 20) -> None:
    """Rebuild the folder's tables (``benchmarks.grow_report``) with every arm this module defines."""
    arms = {arm.name: arm for make in ARM_SETS.values() for arm in make(epochs)}
    catalogue = [c.name for c in POOL_NOISE]  # "catalogue" in the set names below: its pool and noise part
    condition_sets = {"catalogue": catalogue, "catalogue+harsh": [*catalogue, *(c.name for c in HARSH)],
                      "catalogue+axes": [*catalogue, *(c.name for c in AXES)],
                      "catalogue+harsh+axes": [*catalogue, *(c.name for c in HARSH), *(c.name for c in AXES)]}
    grow_report.report(folder, arms, condition_sets)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, help="rebuild summary.json and table.md in this folder and exit")
    parser.add_argument("--data-dir", help="folder with the CIFAR-10 .npz shards")
    parser.add_argument("--dataset", default="cifar10", choices=("cifar10", "synthetic"))
    parser.add_argument("--epochs", type=int, default=20, help="epochs per run (count)")
    parser.add_argument("--set", default="schedules", choices=sorted(ARM_SETS), help="which arms")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--arms", nargs="*", help="arm names to run (default: all)")
    parser.add_argument("--shard", default="0/1", help="i/n: run every n-th (arm, seed) pair, starting at i")
    parser.add_argument("--out", type=Path, help="JSON-lines file to append results to")
    args = parser.parse_args(argv)
    if args.report:
        report(args.report, args.epochs)
        return
    if args.out is None:
        parser.error("--out is required to train")
    shard, shards = (int(v) for v in args.shard.split("/"))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    cfg = EnvConfig(dataset=args.dataset, data_dir=args.data_dir, download=False)
    data = load_dataset(cfg, device)
    chosen = [arm for arm in ARM_SETS[args.set](args.epochs) if not args.arms or arm.name in args.arms]
    todo = [(arm, seed) for seed in args.seeds for arm in chosen]
    for arm, seed in todo[shard::shards]:
        row = train(arm, seed, data, args.epochs)
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{arm.name} seed {seed}: test {row['test_accuracy']:.4f} in {row['seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
