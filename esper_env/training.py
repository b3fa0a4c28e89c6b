"""One sub-env's host training on its device: weights, optimizer state, data order and metrics.

The per-batch :meth:`HostTrainer.train_step` and the validation pass :meth:`HostTrainer.evaluate` are plain
tensor code with fixed shapes, no host syncs and no Python branching on tensor values, so the engine can run
them eagerly or capture them as CUDA graphs unchanged. Everything that varies between replays lives in device
tensors the graphs read: the batch counter, the epoch's permutation and augmentation draws, alpha, the learning
rates and the fault-injection factors. Streams, graphs and the host sync belong to ``engine``, not here.

Metrics accumulate into ``metrics``, this sub-env's row of the engine's shared buffer (layout:
:class:`MetricLayout`), which the engine copies to the host once per step.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn.functional as F

from esper_env.config import EnvConfig
from esper_env.data import Dataset, normalize, random_crop_flip
from esper_env.episode import Measurement
from esper_env.host import HostModel, seed_parameters
from esper_env.lifecycle import ForwardMode
from esper_env.optim import NesterovSGD

CROP_PAD = 4  # pixels of zero padding for the random-crop augmentation


class MetricLayout:
    """Where each measurement sits in a sub-env's metrics row."""

    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self.train_loss, self.train_correct, self.train_seen = 0, 1, 2
        self.grad_sq = slice(3, 4 + num_slots)  # host, then one per slot: summed squared gradient norms
        self.num_configs = 2 + num_slots  # full model, host only, then each slot switched off
        start = 4 + num_slots
        self.eval = slice(start, start + 2 * self.num_configs)  # (loss sum, correct) per configuration
        self.val_seen = start + 2 * self.num_configs
        self.test = slice(self.val_seen + 1, self.val_seen + 4)  # loss sum, correct, seen
        self.size = self.val_seen + 4


def eval_plan(modes: tuple[ForwardMode, ...]) -> tuple[tuple[str, int], ...]:
    """The validation configurations worth running: the full model; when any seed is blended in (alpha > 0),
    the host alone; and, with two or more such seeds, each of them switched off (with one, that equals the host
    alone). Each entry is ``(kind, slot)`` with kind "full", "host" or "off"."""
    blended = [i for i, mode in enumerate(modes) if mode in (ForwardMode.BLEND, ForwardMode.FULL)]
    plan: list[tuple[str, int]] = [("full", -1)]
    if blended:
        plan.append(("host", -1))
    if len(blended) > 1:
        plan += [("off", i) for i in blended]
    return tuple(plan)


def plan_table(plan: tuple[tuple[str, int], ...], num_slots: int) -> np.ndarray:
    """0/1 alpha multipliers ``(num_slots, len(plan))`` for the configurations of ``plan``."""
    table = np.ones((num_slots, len(plan)), dtype=np.float32)
    for k, (kind, slot) in enumerate(plan):
        if kind == "host":
            table[:, k] = 0.0
        elif kind == "off":
            table[slot, k] = 0.0
    return table


class HostTrainer:
    """Host model, seeds, optimizer state and data order of one sub-env, on one device."""

    def __init__(self, cfg: EnvConfig, dataset: Dataset, metrics: torch.Tensor, amp: torch.dtype | None,
                 channels_last: bool) -> None:
        self.cfg, self.data, self.metrics, self.amp = cfg, dataset, metrics, amp
        self.device = metrics.device
        self.layout = MetricLayout(cfg.num_slots)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        model = HostModel(cfg.host_widths, cfg.slot_block_indices)
        self.model = model.to(self.device, memory_format=self.memory_format)
        self.optimizer = NesterovSGD(self.model.host_parameters(), cfg.momentum, cfg.weight_decay)
        n = cfg.num_slots
        self.control = torch.zeros(n + 4, device=self.device)  # alpha per slot, host lr, seed lr, fault scale, shift
        self.control_staging = torch.zeros(n + 4, pin_memory=self.device.type == "cuda")
        self.alpha, self.lr, self.fault = self.control[:n], self.control[n:n + 2], self.control[n + 2:]
        self.plan = eval_plan((ForwardMode.OFF,) * n)
        self.config_mask = torch.ones(n, 1, device=self.device)
        self.generator = torch.Generator(device=self.device)
        self._allocate_epoch_buffers()
        self._snapshot = [t.detach().clone() for t in self._host_state()]

    # --- data order --------------------------------------------------------------------------------------
    @property
    def batches_per_epoch(self) -> int:
        available = self.data.train_x.shape[0]
        per_epoch = min(self.cfg.train_images_per_epoch or available, available)
        return max(1, per_epoch // self.cfg.batch_size)

    def _allocate_epoch_buffers(self) -> None:
        nb, b = self.batches_per_epoch, min(self.cfg.batch_size, self.data.train_x.shape[0])
        self.perm = torch.empty(self.data.train_x.shape[0], dtype=torch.long, device=self.device)
        self.offsets = torch.empty(nb, b, 2, dtype=torch.long, device=self.device)
        self.flips = torch.empty(nb, b, dtype=torch.long, device=self.device)
        self.counter = torch.zeros(1, dtype=torch.long, device=self.device)
        self.batch_rows = self.perm[: nb * b].view(nb, b)

    def begin_epoch(self, alphas: list[float], lrs: tuple[float, float], fault: tuple[float, float]) -> None:
        """Draw this epoch's data order and augmentation, upload the control values, zero the metrics."""
        torch.randperm(self.perm.shape[0], generator=self.generator, out=self.perm)
        torch.randint(0, 2 * CROP_PAD + 1, self.offsets.shape, generator=self.generator, out=self.offsets)
        torch.randint(0, 2, self.flips.shape, generator=self.generator, out=self.flips)
        self.counter.zero_()
        self.metrics.zero_()
        # Staged through pinned memory so the copy does not make the host wait for the device.
        self.control_staging.copy_(torch.tensor([*alphas, *lrs, *fault], dtype=torch.float32))
        self.control.copy_(self.control_staging, non_blocking=True)

    # --- the per-batch step (graph-capturable) -----------------------------------------------------------
    def train_step(self) -> None:
        rows = self.batch_rows.index_select(0, self.counter).view(-1)
        images = self.data.train_x.index_select(0, rows)
        labels = self.data.train_y.index_select(0, rows)
        offsets = self.offsets.index_select(0, self.counter).view(-1, 2)
        flips = self.flips.index_select(0, self.counter).view(-1) != 0
        x = normalize(random_crop_flip(images, offsets, flips, CROP_PAD), self.data.mean, self.data.std)
        self.model.train()
        with self._autocast():
            logits = self.model(x.contiguous(memory_format=self.memory_format), self.alpha.view(-1, 1))
        loss = F.cross_entropy(logits.float(), labels) * self.fault[0] + self.fault[1]
        self.optimizer.zero_grad()
        loss.backward()
        self.metrics[self.layout.grad_sq].add_(self._squared_grad_norms())
        self.optimizer.step(self.lr)
        lay = self.layout
        self.metrics[lay.train_loss].add_(loss.detach())
        self.metrics[lay.train_correct].add_((logits.argmax(1) == labels).sum())
        self.metrics[lay.train_seen].add_(labels.shape[0])
        self.counter.add_(1)

    def _squared_grad_norms(self) -> torch.Tensor:
        groups = [self.model.host_parameters()] + [seed_parameters(s) for s in self.model.slots]
        sums = []
        for params in groups:
            grads = [p.grad for p in params if p.grad is not None]
            sums.append(torch.stack(torch._foreach_norm(grads)).square().sum() if grads else self._zero())
        return torch.stack(sums)

    def _zero(self) -> torch.Tensor:
        return torch.zeros((), device=self.device)

    def _autocast(self) -> torch.autocast | nullcontext:
        if self.amp is None:
            return nullcontext()
        # Graph capture forbids autocast's weight cache (it would be freed between replays).
        return torch.autocast(self.device.type, dtype=self.amp, cache_enabled=False)

    # --- validation with counterfactual configurations (graph-capturable) -------------------------------
    @torch.no_grad()
    def evaluate(self) -> None:
        """Loss and accuracy of every configuration on the validation images, in one stacked forward per chunk."""
        lay = self.layout
        out = self.metrics[lay.eval].view(lay.num_configs, 2)[: len(self.plan)]
        out.zero_()
        alphas = self.alpha.view(-1, 1) * self.config_mask
        self._measure(self.data.val_x, self.data.val_y, alphas, out)
        self.metrics[lay.val_seen].fill_(self.data.val_x.shape[0])

    @torch.no_grad()
    def evaluate_test(self) -> None:
        lay = self.layout
        out = self.metrics[lay.test][:2].view(1, 2)
        out.zero_()
        self._measure(self.data.test_x, self.data.test_y, self.alpha.view(-1, 1), out)
        self.metrics[lay.test.stop - 1].fill_(self.data.test_x.shape[0])

    def _measure(self, images: torch.Tensor, labels: torch.Tensor, alphas: torch.Tensor, out: torch.Tensor) -> None:
        self.model.eval()
        configs, chunk = alphas.shape[1], self.cfg.eval_batch_size
        for start in range(0, images.shape[0], chunk):
            x = normalize(images[start:start + chunk], self.data.mean, self.data.std)
            y = labels[start:start + chunk].repeat(configs)
            x = x.repeat(configs, 1, 1, 1).contiguous(memory_format=self.memory_format)
            with self._autocast():
                logits = self.model(x, alphas).float()
            loss = F.cross_entropy(logits, y, reduction="none").view(configs, -1).sum(1)
            correct = (logits.argmax(1) == y).view(configs, -1).sum(1)
            out.add_(torch.stack([loss, correct.float()], dim=1))

    def read_measurement(self, row: np.ndarray, tested: bool) -> Measurement:
        """Turn this sub-env's metrics row (already on the host) into a :class:`Measurement`."""
        lay = self.layout
        seen = max(row[lay.train_seen], 1.0)
        batches = max(round(seen / min(self.cfg.batch_size, self.data.train_x.shape[0])), 1)
        grad_rms = np.sqrt(np.maximum(row[lay.grad_sq], 0.0) / batches)
        evals = row[lay.eval].reshape(lay.num_configs, 2)[: len(self.plan)] / max(row[lay.val_seen], 1.0)
        accuracy = evals[0, 1]
        without = [accuracy] * lay.num_slots
        host_only = accuracy
        for k, (kind, slot) in enumerate(self.plan):
            if kind == "host":
                host_only = evals[k, 1]
                without = [host_only if m in (ForwardMode.BLEND, ForwardMode.FULL) else accuracy
                           for m in self.modes()]
            elif kind == "off":
                without[slot] = evals[k, 1]
        test = row[lay.test]
        return Measurement(
            train_loss=float(row[lay.train_loss] / batches), train_accuracy=float(row[lay.train_correct] / seen),
            val_loss=float(evals[0, 0]), val_accuracy=float(accuracy), host_only_accuracy=float(host_only),
            accuracy_without=tuple(float(v) for v in without), host_grad_norm=float(grad_rms[0]),
            seed_grad_norms=tuple(float(v) for v in grad_rms[1:]),
            test_accuracy=float(test[1] / max(test[2], 1.0)) if tested else None, images_trained=int(seen),
        )

    # --- weights: reset, seeds, snapshot -----------------------------------------------------------------
    def reset(self, init_seed: int, data_seed: int) -> None:
        """Fresh host weights in place (no re-allocation), no seeds, zero optimizer state, new data stream."""
        for slot in range(len(self.model.slots)):
            self.remove_seed(slot)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            fresh = HostModel(self.cfg.host_widths, self.cfg.slot_block_indices)
        with torch.no_grad():
            torch._foreach_copy_(self._host_state(), [*fresh.host_parameters(), *fresh.host_buffers()])
        self.optimizer.reset_state()
        self.generator.manual_seed(data_seed)
        self.save_snapshot()

    def plant_seed(self, slot: int, blueprint: int, gated: bool, init_seed: int) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            self.model.plant(slot, blueprint, gated)
        module = self.model.slots[slot].to(memory_format=self.memory_format)
        self.optimizer.add_group(slot, seed_parameters(module))

    def remove_seed(self, slot: int) -> None:
        self.optimizer.remove_group(slot)
        self.model.slots[slot].clear()

    def set_modes(self, modes: tuple[ForwardMode, ...]) -> None:
        """Set each slot's forward mode and the validation configurations that follow from them."""
        for module, mode in zip(self.model.slots, modes, strict=True):
            module.mode = mode if module.seed is not None else ForwardMode.OFF
        plan = eval_plan(self.modes())
        if plan != self.plan:
            self.plan = plan
            self.config_mask = torch.from_numpy(plan_table(plan, len(modes))).to(self.device)

    def modes(self) -> tuple[ForwardMode, ...]:
        return tuple(s.mode for s in self.model.slots)

    def _host_state(self) -> list[torch.Tensor]:
        return [*self.model.host_parameters(), *self.model.host_buffers()]

    @torch.no_grad()
    def save_snapshot(self) -> None:
        torch._foreach_copy_(self._snapshot, [t.detach() for t in self._host_state()])

    @torch.no_grad()
    def restore_snapshot(self) -> None:
        torch._foreach_copy_(self._host_state(), self._snapshot)
        self.optimizer.reset_state()

    @torch.no_grad()
    def seed_is_finite(self, slot: int) -> bool:
        params = seed_parameters(self.model.slots[slot])
        return all(bool(torch.isfinite(p).all()) for p in params)  # sync: only after a rollback

    @torch.no_grad()
    def poison_parameters(self, slot: int | None) -> None:
        """Fault injection: write NaN into the first parameter of a seed (or of the host)."""
        params = self.model.host_parameters() if slot is None else seed_parameters(self.model.slots[slot])
        params[0].view(-1)[0] = math.nan
