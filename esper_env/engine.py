"""Execution of one vector step's host training and validation: streams, CUDA graphs and the one host sync.

Measured on an H200 (see ``benchmarks/results``): a small host's training step is bound by kernel launches from
the one Python thread, so CUDA streams alone overlap nothing; captured as a CUDA graph, a step costs one launch,
and graphs replayed on one stream per sub-env let several small hosts share the GPU. So, on CUDA:

* each sub-env owns a stream; its training step and its validation pass (with all counterfactual
  configurations) are captured as CUDA graphs and replayed on that stream, round-robin over sub-envs batch by
  batch;
* the training graph is re-captured only when a seed is planted or removed, joins a growable host, or enters
  or leaves FULL's controls (other stage changes only change device tensors: see ``host``), the validation graph
  also when the set of blended seeds changes its configurations; the first batch after a change runs eagerly as
  warm-up, and it is a real training step, so capturing changes nothing in the trajectory;
* capture uses ``CUDAGraph.capture_begin/end`` directly: ``torch.cuda.graph`` would synchronise the device
  and run the garbage collector at every capture;
* a graph does not keep alive the tensors it reads, so each graph is stored with the modules it was captured
  from and dropped only together with them;
* each sub-env captures into one memory pool for its whole life, kept open by a tiny anchor graph: a pool whose
  last graph is dropped is only returned to the device at the allocator's next cache flush, so fresh pools
  per re-capture made reserved memory grow by megabytes per capture.

On CPU (and with ``execution="eager"``) the same :class:`~esper_env.training.HostTrainer` methods run eagerly on
the current stream. Either way the step ends with exactly one device-to-host copy of all sub-envs' metrics per
device. Nothing outside this module touches streams or graphs.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from esper_env.config import EnvConfig
from esper_env.data import load_dataset
from esper_env.training import HostTrainer, MetricLayout

WARMUP_BATCHES = 1  # eager steps before a capture: lets autograd, cuDNN and the allocator settle
# Batches queued per sub-env before moving to the next: deep enough that the GPU stays busy with the other
# streams while the host captures a graph, shallow enough that streams sharing a hardware queue interleave.
ISSUE_CHUNK = 8


@dataclass
class EpochControl:
    """What one sub-env's next epoch needs from the rules: slot controls, learning rates, fault injection."""

    controls: list[float]  # alpha, straight-through and upstream flag per slot (``host.slot_controls``)
    learning_rates: np.ndarray  # (batches per epoch, 2): host and seed lr at each step (``esper_env.schedule``)
    fault: str | None = None  # testing aid: see ``EsperVectorEnv.inject_fault``


@dataclass
class GraphSet:
    """A sub-env's captured graphs and what they were captured from."""

    modules: tuple  # the seed modules the graphs read, kept alive with them (see the module docstring)
    warm: int = 0
    train: torch.cuda.CUDAGraph | None = None
    eval: torch.cuda.CUDAGraph | None = None
    eval_plan: tuple = ()


def resolve_devices(cfg: EnvConfig, num_envs: int) -> list[torch.device]:
    """The device of each sub-env: round-robin over ``cfg.devices``, else ``cfg.device``."""
    field = "devices" if cfg.devices else "device"
    names = list(cfg.devices) if cfg.devices else [cfg.device]
    devices = [torch.device(_resolve(name, field)) for name in names]
    for device in devices:
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"{field}={device} requested but CUDA is not available; expected 'cpu' or 'auto'")
    return [devices[i % len(devices)] for i in range(num_envs)]


def _resolve(name: str, field: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    expected = "expected 'auto', 'cpu', 'cuda' or 'cuda:N'"
    try:
        kind = torch.device(name).type
    except RuntimeError as error:
        raise ValueError(f"{field}={name!r} is not a torch device; {expected}") from error
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"{field}={name!r}: the env runs on CPU or CUDA devices only; {expected}")
    return name


def _release_cublas_workspaces() -> None:
    # a private torch call (torch's own CUDA-graph trees use it); absent in some build, the workspaces just stay
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


class Engine:
    """Owns every sub-env's :class:`HostTrainer`, their streams and graphs, and the per-step metrics sync."""

    _open_graph_engines = 0
    """Graph engines made and not yet closed in this process (see :meth:`close` for why it is counted)."""

    def __init__(self, cfg: EnvConfig, num_envs: int) -> None:
        self.cfg, self.num_envs = cfg, num_envs
        self.layout = MetricLayout(cfg.num_slots)
        self.devices = resolve_devices(cfg, num_envs)
        on_cuda = all(d.type == "cuda" for d in self.devices)
        self.use_graphs = cfg.execution == "graph" or (cfg.execution == "auto" and on_cuda)
        if self.use_graphs and not on_cuda:
            raise ValueError(f"execution='graph' needs CUDA devices, got {sorted({str(d) for d in self.devices})}")
        amp = torch.bfloat16 if cfg.precision == "bfloat16" or (cfg.precision == "auto" and on_cuda) else None
        if on_cuda:
            torch.backends.cudnn.benchmark = True  # fixed shapes: autotune each conv once
        self._buffers = {d: torch.zeros(self.devices.count(d), self.layout.size, device=d) for d in set(self.devices)}
        self._rows = self._assign_rows()
        self.trainers = [
            HostTrainer(cfg, load_dataset(cfg, d), self._buffers[d][row], amp)
            for d, row in zip(self.devices, self._rows, strict=True)
        ]
        self.streams = [torch.cuda.Stream(d) if self.use_graphs else None for d in self.devices]
        if on_cuda:
            torch.cuda.synchronize()  # sync: setup only; shared tensors are ready before any stream reads them
        self._graphs: list[GraphSet | None] = [None] * num_envs
        self.captures = 0
        self.capture_seconds = 0.0  # host time spent capturing graphs (the eager warm-up batch not included)
        self._pools = [self._open_pool(i) for i in range(num_envs)] if self.use_graphs else []
        self._closed = False
        Engine._open_graph_engines += self.use_graphs

    def __getstate__(self) -> dict:
        """Pickle (and deep-copy) support. Each trainer's ``metrics`` is a view of this engine's shared buffer and
        its control tensors are views of one another; pickled one by one, every view would become a tensor of its
        own, and a copy would keep training while reading stale learning rates and writing metrics nobody reads.
        One ``torch.save`` of the whole state keeps every view a view. Streams, graphs and their memory pools
        cannot be pickled: a copy makes its own and re-captures its graphs (a capture changes no result)."""
        state = dict(self.__dict__)
        if self.use_graphs:
            state.update(streams=[None] * self.num_envs, _graphs=[None] * self.num_envs, _pools=[])
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return {"torch_state": buffer.getvalue()}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(torch.load(io.BytesIO(state["torch_state"]), weights_only=False))
        if self.use_graphs and not self._closed:
            self.streams = [torch.cuda.Stream(d) for d in self.devices]
            self._pools = [self._open_pool(i) for i in range(self.num_envs)]
            Engine._open_graph_engines += 1
            torch.cuda.synchronize()  # sync: unpickling only; the loaded tensors are ready before streams read them

    def _open_pool(self, i: int) -> tuple:
        """A private memory pool for sub-env ``i``'s graphs, held open by an anchor graph (module docstring)."""
        pool = torch.cuda.graph_pool_handle()
        anchor_input = torch.zeros(1, device=self.devices[i])
        with self.on_stream(i, join=True):
            anchor = torch.cuda.CUDAGraph()
            anchor.capture_begin(pool=pool, capture_error_mode="thread_local")
            anchor_input.add_(0)
            anchor.capture_end()
        return pool, anchor, anchor_input

    def _assign_rows(self) -> list[int]:
        seen: dict[torch.device, int] = {}
        rows = []
        for d in self.devices:
            rows.append(seen.get(d, 0))
            seen[d] = rows[-1] + 1
        return rows

    @contextlib.contextmanager
    def on_stream(self, index: int, join: bool = False) -> Iterator[None]:
        """Issue sub-env ``index``'s work on its own stream (a no-op without streams). ``join`` first makes the
        stream wait for what the default stream has queued (resets, new seeds, control uploads)."""
        stream = self.streams[index]
        if stream is None:
            yield
            return
        if join:
            stream.wait_stream(torch.cuda.current_stream(stream.device))
        with torch.cuda.stream(stream):
            yield

    def run_epoch(self, controls: dict[int, EpochControl], test: Sequence[int] = ()) -> np.ndarray:
        """Train and validate the sub-envs in ``controls`` for one epoch; return all metrics ``(N, M)``.

        Rows of sub-envs not in ``controls`` hold stale values. ``test`` lists sub-envs to measure on the test set.
        """
        active = sorted(controls)
        for i in active:
            with self.on_stream(i, join=True):
                control = controls[i]
                self.trainers[i].begin_epoch(control.controls, control.learning_rates, control.fault)
                self._refresh_graphs(i)
        batches = self.trainers[0].batches_per_epoch
        for first in range(0, batches, ISSUE_CHUNK):
            for i in active:
                with self.on_stream(i):
                    for _ in range(min(ISSUE_CHUNK, batches - first)):
                        self._train_batch(i)
        for i in active:
            with self.on_stream(i):
                self.trainers[i].measure_gradients()
                self._evaluate(i)
                if i in test:
                    self.trainers[i].evaluate_test()
        return self.fetch_metrics()

    def fetch_metrics(self) -> np.ndarray:
        """Wait for every stream and copy all metrics to the host: the step's one sync (per device)."""
        for stream in self.streams:
            if stream is not None:
                torch.cuda.current_stream(stream.device).wait_stream(stream)
        host = {d: buf.cpu().numpy() for d, buf in self._buffers.items()}  # sync: once per step and device
        return np.stack([host[d][row] for d, row in zip(self.devices, self._rows, strict=True)])

    # --- graphs ------------------------------------------------------------------------------------------
    def _refresh_graphs(self, i: int) -> None:
        """Drop sub-env ``i``'s graphs if its seed modules, or the slots its training step runs as FULL
        (``host.full_slots``), changed since they were captured."""
        if not self.use_graphs:
            return
        trainer = self.trainers[i]
        model = trainer.model
        # A growable host's own tensors change shape when a seed joins it: its ``version`` then moves on.
        modules = (*(m for s in model.slots for m in (s.seed, s.gate)), getattr(model, "version", 0), trainer.full)
        current = self._graphs[i]
        if current is None or len(current.modules) != len(modules) or any(
                a is not b and a != b for a, b in zip(current.modules, modules, strict=True)):
            self._graphs[i] = GraphSet(modules)

    def _train_batch(self, i: int) -> None:
        trainer, graphs = self.trainers[i], self._graphs[i]
        if graphs is None:
            trainer.train_step()
            return
        if graphs.train is None:
            if graphs.warm < WARMUP_BATCHES:
                graphs.warm += 1
                trainer.train_step()
                return
            graphs.train = self._capture(trainer.train_step, i)
        graphs.train.replay()

    def _evaluate(self, i: int) -> None:
        trainer, graphs = self.trainers[i], self._graphs[i]
        if graphs is not None and graphs.eval is not None and graphs.eval_plan == trainer.plan:
            graphs.eval.replay()
            return
        trainer.evaluate()
        if graphs is not None:
            graphs.eval, graphs.eval_plan = self._capture(trainer.evaluate, i), trainer.plan

    def _capture(self, fn: Callable[[], None], index: int) -> torch.cuda.CUDAGraph:
        self.captures += 1
        start = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(pool=self._pools[index][0], capture_error_mode="thread_local")
        try:
            fn()
        finally:
            graph.capture_end()
            self.capture_seconds += time.perf_counter() - start
        return graph

    def release_graphs(self, i: int) -> None:
        """Drop sub-env ``i``'s graphs (before its modules are freed, e.g. at reset)."""
        self._graphs[i] = None

    def close(self) -> None:
        """Drop every graph, graph pool and trainer and hand their memory back to the device; idempotent.

        A private pool whose last graph is gone stays reserved by the caching allocator until its next cache
        flush, and a new env's pools cannot reuse it: without the flush, a process that makes and closes one env
        per evaluation seed keeps every closed env's pools (one heuristic process grew to 38 GiB over five seeds
        and ran out of memory beside other processes on the same GPU). The trainers go first because their
        gradients were allocated inside the captured training step, in the pools. The engine is unusable after.

        cuBLAS keeps one workspace per (handle, stream), allocated on a stream's first matmul and never freed:
        measured on an H200, each closed two-sub-env engine left 130 MiB allocated that no Python tensor held, and
        clearing the workspaces brought it back to the dataset's 25 MiB. A captured graph has its workspace's
        address baked in, so the workspaces (torch clears them all at once) may only go when no graph engine of
        this process is left open. CUDA graphs of your own that run matmuls are not counted: capture them after
        the last env is closed, or keep an env open while they run.
        """
        if self._closed:
            return
        self._closed = True
        if self.use_graphs:
            for device in set(self.devices):
                torch.cuda.synchronize(device)  # sync: close only; no replay may still run on a dropped graph
        self._graphs = [None] * len(self._graphs)
        self._pools = []
        self.trainers = []
        if self.use_graphs:
            Engine._open_graph_engines -= 1
            if Engine._open_graph_engines == 0:
                _release_cublas_workspaces()
            torch.cuda.empty_cache()
