"""One sub-env's host training on its device: weights, optimizer state, data order and metrics.

The per-batch :meth:`HostTrainer.train_step` and the validation pass :meth:`HostTrainer.evaluate` are plain
tensor code with fixed shapes, no host syncs and no Python branching on tensor values, so the engine can run
them eagerly or capture them as CUDA graphs unchanged. Everything that varies between replays lives in device
tensors the graphs read: the batch counter, the epoch's prepared images, alpha and the slot flags and the
epoch's table of per-step learning rates (``esper_env.schedule``), whose row each step picks by the counter.
Streams, graphs and the host sync belong to ``engine``, not here.

Per epoch, :meth:`HostTrainer.begin_epoch` draws the sub-env's permutation and augmentation and prepares the
whole epoch's batches in a few large kernels (gather, crop and flip, normalise, reduce to the episode's
resolution, cast to the compute dtype, channels-last), so that a training step only selects its batch. What the
episode's hidden condition does to the data (pool, label noise, classes in play, resolution) lives in
:class:`~esper_env.episode_data.EpisodeData`, drawn at reset; validation and test score only the images of the
classes in play, through fixed-shape per-image weights. Gradient statistics are taken once per epoch,
from the last batch's gradients (:meth:`HostTrainer.measure_gradients`).

Metrics accumulate into ``metrics``, this sub-env's row of the engine's shared buffer (layout:
:class:`MetricLayout`), which the engine copies to the host once per step.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext

import numpy as np
import torch
import torch.nn.functional as F

from esper_env.averaging import WeightAverage, step_decay
from esper_env.config import EnvConfig
from esper_env.data import Dataset, normalize, random_crop_flip
from esper_env.episode import Measurement
from esper_env.episode_data import EpisodeData
from esper_env.host import build_host, full_slots, seed_parameters
from esper_env.optim import NesterovSGD

PREPARE_CHUNK = 8192  # images prepared per kernel round at epoch start (bounds the float32 transient)


class MetricLayout:
    """Where each measurement sits in a sub-env's metrics row."""

    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self.train = slice(0, 2)  # summed batch losses, correct predictions
        self.grad_sq = slice(2, 3 + num_slots)  # squared gradient norm of the host, then of each slot's seed
        self.num_configs = 2 + num_slots  # full model, host only, then each slot switched off
        start = 3 + num_slots
        self.eval = slice(start, start + 2 * self.num_configs)  # (loss sum, correct) per configuration
        self.test = slice(self.eval.stop, self.eval.stop + 2)  # loss sum, correct
        self.size = self.test.stop


def eval_plan(blended: tuple[bool, ...]) -> tuple[tuple[str, int], ...]:
    """The validation configurations worth running: the full model; when any seed is blended in (alpha > 0),
    the host alone; and, with two or more such seeds, each of them switched off (with one, that equals the host
    alone). Each entry is ``(kind, slot)`` with kind "full", "host" or "off"."""
    on = [i for i, b in enumerate(blended) if b]
    plan: list[tuple[str, int]] = [("full", -1)]
    if on:
        plan.append(("host", -1))
    if len(on) > 1:
        plan += [("off", i) for i in on]
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

    def __init__(self, cfg: EnvConfig, dataset: Dataset, metrics: torch.Tensor, amp: torch.dtype | None) -> None:
        self.cfg, self.data, self.metrics, self.amp = cfg, dataset, metrics, amp
        self.device = metrics.device
        self.layout = MetricLayout(cfg.num_slots)
        self.dtype = amp or torch.float32
        self.average = (WeightAverage(step_decay(cfg.ema_epochs, self.batches_per_epoch)) if cfg.ema_epochs > 0
                        else None)
        self._install(build_host(cfg, dataset.spec))
        n, batches = cfg.num_slots, self.batches_per_epoch
        # alpha per slot, straight-through flag per slot, upstream flag per slot, then host and seed lr per batch:
        # one buffer, so that an epoch's controls go up in one copy
        self.control = torch.zeros(3 * n + 2 * batches, device=self.device)
        self.control_staging = torch.zeros(3 * n + 2 * batches, pin_memory=self.device.type == "cuda")
        self.lr = self.control[3 * n:].view(batches, 2)
        # The slot controls again in the compute dtype, converted once per epoch, not once per use.
        self.slot_control = torch.zeros(3 * n, dtype=self.dtype, device=self.device)
        self.alpha, self.flags = self.slot_control[:n], self.slot_control[n:].view(2, n)
        self.full: frozenset[int] = frozenset()  # slots at exactly FULL's controls this epoch (:func:`full_slots`)
        self.blended = (False,) * n
        self.plan = eval_plan(self.blended)
        self.config_mask = torch.ones(n, 1, dtype=self.dtype, device=self.device)
        self.generator = torch.Generator(device=self.device)
        self.episode_data = EpisodeData(cfg.condition, dataset, self.dtype)
        self._allocate_epoch_buffers()

    def _install(self, model: torch.nn.Module) -> None:
        """Make ``model`` this trainer's host, on its device, with a fresh optimizer and snapshot."""
        self.model = model.to(self.device)
        if self.device.type == "cuda":
            self.model.to(memory_format=torch.channels_last)
        # On the growable host, what a seed brings keeps the seeds' learning rate after it joins (optim.py).
        joined_gain = self.cfg.seed_lr / self.cfg.host_lr if self.cfg.host == "family" else 1.0
        self.optimizer = NesterovSGD(self.model.host_parameters(), self.cfg.momentum, self.cfg.weight_decay,
                                     joined_gain)
        self._snapshot = [t.detach().clone() for t in self._host_state()]
        self._track_average()

    def _track_average(self) -> None:
        """Restart the weights' average (``cfg.ema_epochs``) on the model's current parameters and float buffers
        (norm statistics, gathered under the raw weights, are averaged with them), seeds included."""
        if self.average is not None:
            self.average.track(self.averaged_tensors())

    def averaged_tensors(self) -> list[torch.Tensor]:
        """What the weights' average covers, in its order: every parameter, then every float buffer."""
        return [*self.model.parameters(), *(b for b in self.model.buffers() if b.is_floating_point())]

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.device.type == "cuda":  # pinning does not survive pickling, and keeps the upload asynchronous
            self.control_staging = self.control_staging.pin_memory()

    # --- data order --------------------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return min(self.cfg.batch_size, self.data.train_x.shape[0])

    @property
    def batches_per_epoch(self) -> int:
        available = self.data.train_x.shape[0]
        per_epoch = min(self.cfg.train_images_per_epoch or available, available)
        return max(1, per_epoch // self.batch_size)

    def _allocate_epoch_buffers(self) -> None:
        nb, b, size = self.batches_per_epoch, self.batch_size, self.data.image_size
        self.perm = torch.empty(self.data.train_x.shape[0], dtype=torch.long, device=self.device)
        self.epoch_images = torch.empty(nb, b, size, size, 3, dtype=self.dtype, device=self.device)
        self.epoch_labels = torch.empty(nb, b, dtype=torch.long, device=self.device)
        self.counter = torch.zeros(1, dtype=torch.long, device=self.device)

    def begin_epoch(self, controls: list[float], learning_rates: np.ndarray, fault: str | None = None) -> None:
        """Draw and prepare this epoch's batches, upload the control values, zero the metrics.

        ``controls``: alpha, straight-through and upstream flags (one per slot each). ``learning_rates``: the host's
        and the seeds' learning rate at each training step of the epoch, ``(batches_per_epoch, 2)``.
        ``fault`` (testing aid, see ``EsperVectorEnv.inject_fault``) breaks this epoch on purpose.
        """
        flat_images = self.epoch_images.view(-1, *self.epoch_images.shape[2:])
        rows, labels = self.episode_data.epoch_rows(self.perm, flat_images.shape[0], self.generator)
        for start in range(0, rows.shape[0], PREPARE_CHUNK):
            chunk = rows[start:start + PREPARE_CHUNK]
            offsets = torch.randint(0, 2 * self.cfg.crop_pad + 1, (chunk.shape[0], 2), generator=self.generator,
                                    device=self.device)
            flips = torch.randint(0, 2, (chunk.shape[0],), generator=self.generator, device=self.device) != 0
            images = random_crop_flip(self.data.train_x.index_select(0, chunk), offsets, flips, self.cfg.crop_pad)
            images = self.episode_data.inputs(normalize(images, self.data.mean, self.data.std))
            flat_images[start:start + chunk.shape[0]] = images.permute(0, 2, 3, 1)
        self.epoch_labels.view(-1).copy_(labels)
        self.counter.zero_()
        self.metrics.zero_()
        # Staged through pinned memory so that the upload does not make the host wait for the device.
        slots = self.slot_control.shape[0]
        if learning_rates.shape != self.lr.shape:
            raise ValueError(f"learning_rates of shape {learning_rates.shape}; expected {tuple(self.lr.shape)}: "
                             "the host's and the seeds' rate at each batch of the epoch")
        self.control_staging[:slots].copy_(torch.tensor(controls, dtype=torch.float32))
        self.control_staging[slots:].view(self.lr.shape).copy_(torch.from_numpy(learning_rates))
        self.control.copy_(self.control_staging, non_blocking=True)
        self.slot_control.copy_(self.control[:slots])
        self.full = full_slots(controls)
        if fault is not None:
            self._inject(fault)

    # --- the per-batch step (graph-capturable) -----------------------------------------------------------
    def train_step(self) -> None:
        x = self.epoch_images.index_select(0, self.counter)[0].permute(0, 3, 1, 2)  # NCHW view, NHWC memory
        labels = self.epoch_labels.index_select(0, self.counter)[0]
        self.model.train()
        with self._autocast():
            logits = self.model(x, self.alpha, self.flags, full=self.full)
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=self.cfg.label_smoothing)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step(self.lr.index_select(0, self.counter)[0])  # this batch's host and seed lr
        if self.average is not None:
            self.average.update()
        correct = (logits.argmax(1) == labels).sum()
        self.metrics[self.layout.train].add_(torch.stack([loss.detach(), correct.float()]))
        self.counter.add_(1)

    def _autocast(self) -> torch.autocast | nullcontext:
        if self.amp is None:
            return nullcontext()
        # Graph capture forbids autocast's weight cache (it would be freed between replays).
        return torch.autocast(self.device.type, dtype=self.amp, cache_enabled=False)

    @torch.no_grad()
    def measure_gradients(self) -> None:
        """Squared gradient norms of the host and of each seed, from the epoch's last batch."""
        groups = [self.model.host_parameters()] + [seed_parameters(s) for s in self.model.slots]
        sums = []
        for params in groups:
            grads = [p.grad for p in params if p.grad is not None]
            sums.append(torch.stack(torch._foreach_norm(grads)).square().sum() if grads
                        else torch.zeros((), device=self.device))
        self.metrics[self.layout.grad_sq].copy_(torch.stack(sums))

    # --- validation with counterfactual configurations (graph-capturable) -------------------------------
    def set_plan(self, blended: tuple[bool, ...]) -> None:
        """Choose the validation configurations from which slots are blended in (alpha > 0)."""
        self.blended = blended
        plan = eval_plan(blended)
        if plan != self.plan:
            self.plan = plan
            self.config_mask = torch.from_numpy(plan_table(plan, len(blended))).to(self.device, self.dtype)

    @torch.no_grad()
    def evaluate(self) -> None:
        """Loss and accuracy of every configuration on the validation images, in one stacked forward per chunk."""
        lay = self.layout
        out = self.metrics[lay.eval].view(lay.num_configs, 2)[: len(self.plan)]
        out.zero_()
        alphas = self.alpha.view(-1, 1) * self.config_mask
        data = self.episode_data
        with self._reading():
            self._measure(data.val_images, self.data.val_y, data.val_weight, alphas, out)

    @torch.no_grad()
    def evaluate_test(self) -> None:
        """Loss and accuracy of the full model on the test images; with ``cfg.test_flip``, of the mean of the
        logits of each image and of its mirror image (flip test-time augmentation)."""
        out = self.metrics[self.layout.test].view(1, 2)
        out.zero_()
        data = self.episode_data
        with self._reading():
            self._measure(data.test_images, self.data.test_y, data.test_weight, self.alpha, out, self.cfg.test_flip)

    def _reading(self) -> AbstractContextManager:
        """The weights validation and test read: their average (``cfg.ema_epochs``), else the raw weights."""
        return self.average.swapped_in() if self.average is not None else nullcontext()

    def _measure(self, images: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None,
                 alphas: torch.Tensor, out: torch.Tensor, flip: bool = False) -> None:
        """Add each configuration's summed loss and correct predictions over ``images`` to ``out``; with
        ``weights`` (0/1 per image), over the images of weight 1 only, at the same shapes. With ``flip``, each
        image is scored by the mean of its logits and those of its horizontal mirror: averaged logits (as the
        fast CIFAR recipes do) rather than probabilities, so that the loss stays one cross-entropy of one logit
        vector per image."""
        self.model.eval()
        configs, chunk = (alphas.shape[1] if alphas.dim() == 2 else 1), self.cfg.eval_batch_size
        skip = tuple(not b for b in self.blended)  # incubating seeds output exactly h: no need to run them
        for start in range(0, images.shape[0], chunk):
            x = images[start:start + chunk].permute(0, 3, 1, 2)  # the model stacks the configurations
            y = labels[start:start + chunk].repeat(configs)
            with self._autocast():
                logits = self.model(x, alphas, self.flags, skip).float()
                if flip:  # the NCHW view's width axis (the NHWC storage's axis 2)
                    logits = 0.5 * (logits + self.model(x.flip(3), alphas, self.flags, skip).float())
            loss = F.cross_entropy(logits, y, reduction="none")
            correct = logits.argmax(1) == y
            if weights is not None:
                w = weights[start:start + chunk].repeat(configs)
                loss, correct = loss * w, correct * w
            out.add_(torch.stack([loss.view(configs, -1).sum(1), correct.view(configs, -1).sum(1).float()], dim=1))

    def read_measurement(self, row: np.ndarray, tested: bool) -> Measurement:
        """Turn this sub-env's metrics row (already on the host) into a :class:`Measurement`."""
        lay, batches = self.layout, self.batches_per_epoch
        seen = batches * self.batch_size
        grad = np.sqrt(np.maximum(row[lay.grad_sq], 0.0))
        evals = row[lay.eval].reshape(lay.num_configs, 2)[: len(self.plan)] / self.episode_data.val_count
        accuracy = host_only = evals[0, 1]
        without = [accuracy] * lay.num_slots
        for k, (kind, slot) in enumerate(self.plan):
            if kind == "host":
                host_only = evals[k, 1]
                without = [host_only if on else accuracy for on in self.blended]
            elif kind == "off":
                without[slot] = evals[k, 1]
        test = row[lay.test] / self.episode_data.test_count
        return Measurement(
            train_loss=float(row[lay.train][0] / batches), train_accuracy=float(row[lay.train][1] / seen),
            val_loss=float(evals[0, 0]), val_accuracy=float(accuracy), host_only_accuracy=float(host_only),
            accuracy_without=tuple(float(v) for v in without), host_grad_norm=float(grad[0]),
            seed_grad_norms=tuple(float(v) for v in grad[1:]),
            test_accuracy=float(test[1]) if tested else None, images_trained=seen,
        )

    # --- weights: reset, seeds, snapshot -----------------------------------------------------------------
    def reset(self, init_seed: int, data_seed: int) -> None:
        """Fresh host weights in place (no re-allocation), no seeds, zero optimizer state, new data stream.

        A family host that grew last episode has other shapes than the seedling: it is replaced instead (its
        ``version`` moves on, so the engine re-captures its graphs)."""
        for slot in range(len(self.model.slots)):
            self.remove_seed(slot)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            fresh = build_host(self.cfg, self.data.spec)
        if getattr(self.model, "arch", None) != getattr(fresh, "arch", None):
            fresh.version = self.model.version + 1
            self._install(fresh)
        else:
            with torch.no_grad():
                for target, source in zip(self._host_state(), [*fresh.host_parameters(), *fresh.host_buffers()],
                                          strict=True):
                    target.copy_(source)
            self.optimizer.reset_state()
            if self.average is not None:
                self.average.restart()
        self.generator.manual_seed(data_seed)
        self.episode_data.draw(self.generator)
        self.save_snapshot()

    def plant_seed(self, slot: int, blueprint: int, gated: bool, init_seed: int) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            self.model.plant(slot, blueprint, gated)
        module = self.model.slots[slot]
        if self.device.type == "cuda":
            module.to(memory_format=torch.channels_last)
        self.optimizer.add_group(slot, seed_parameters(module))
        self._track_average()

    def remove_seed(self, slot: int) -> None:
        self.optimizer.remove_group(slot)
        self.model.slots[slot].clear()
        self._track_average()

    def join_seed(self, slot: int, init_seed: int) -> None:
        """A family host takes the seed in ``slot`` into its own layers (``FamilyHost.join``): the optimizer
        follows the new shapes with their momentum, and the snapshot is taken again at the new shapes. Weights a
        join draws (a widened stage's residual blocks gain fresh rows) come from ``init_seed``."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            assembly = self.model.join(slot)
        if self.device.type == "cuda":
            self.model.to(memory_format=torch.channels_last)
        live = {i: seed_parameters(m) for i, m in enumerate(self.model.slots) if m.seed is not None}
        self.optimizer.regroup(self.model.host_parameters(), live, assembly)
        self._snapshot = [t.detach().clone() for t in self._host_state()]
        self._track_average()

    def _host_state(self) -> list[torch.Tensor]:
        return [*self.model.host_parameters(), *self.model.host_buffers()]

    @torch.no_grad()
    def save_snapshot(self) -> None:
        torch._foreach_copy_(self._snapshot, [t.detach() for t in self._host_state()])

    @torch.no_grad()
    def restore_snapshot(self) -> None:
        torch._foreach_copy_(self._host_state(), self._snapshot)
        self.optimizer.reset_state()
        if self.average is not None:
            self.average.restart()

    @torch.no_grad()
    def _inject(self, fault: str) -> None:
        """Break this epoch without adding work to every step: a NaN input image ("nan_loss"), logits blown up
        by the classifier ("exploding_loss": weights x1e4 and one class's bias +1e4, so the loss explodes even
        when the features are dead), or the first parameter of the first seed (else of the host) set to NaN
        ("nan_parameters": the whole tensor, since one element of a 3x3 kernel may never meet data)."""
        if fault == "nan_loss":
            self.epoch_images[0, 0].fill_(math.nan)
        elif fault == "exploding_loss":
            self.model.classifier.weight.mul_(1e4)
            if self.model.classifier.bias is not None:  # the family's head has none: x1e4 alone explodes it
                self.model.classifier.bias[0].add_(1e4)
        elif fault == "nan_parameters":
            seeded = [s for s in self.model.slots if s.seed is not None]
            params = seed_parameters(seeded[0]) if seeded else self.model.host_parameters()
            params[0].fill_(math.nan)
        else:
            raise ValueError(f"fault {fault!r}; expected 'nan_loss', 'exploding_loss' or 'nan_parameters'")
