"""Several processes, one agent: everything the agent does with ``torch.distributed``.

Launched by ``torchrun --nproc-per-node N -m esper_agent.train ...`` (which sets ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK``), every process (*rank*) owns one vector env on its GPU and collects its rollouts locally; what
the ranks must agree on goes through the few collectives below, so that every rank ends every update with
bit-identical network, optimizer and normalisers (no broadcast after the first one):

- the PPO update is data parallel, but *exactly* the update of one process over the union of the ranks'
  minibatches, not merely its average: each rank's loss divides its sums by the *global* counts (valid steps,
  heads available), advantages are normalised with the global mean and std, and the gradients are then
  **summed** across ranks (``reduce_gradients``; with equal counts per rank this is DDP's average). The same
  all-reduce carries the loss, KL and other statistics, so the non-finite skip and the KL early stop are
  decided from the same numbers on every rank: a rank deciding alone would leave the others waiting in a
  collective it never joins;
- the normalisers merge every rank's rollout statistics in rank order with Chan's parallel merge
  (``gather_moments``), so all ranks hold identical statistics;
- episode and throughput statistics are gathered so that rank 0 logs global numbers;
- rank 0 alone reads the checkpoint to resume and chooses the run folder (``on_main`` hands the result, or the
  error, to every rank), and alone writes logs and checkpoints.

:class:`SingleProcess` is the same interface for one process: every method is the identity, so a run without
torchrun takes exactly the code path (and the numbers) it always did. :class:`ProcessGroup` is the
torch.distributed implementation: NCCL for CUDA, gloo for CPU. NCCL's NVLink multicast (NVLS) is switched off
(``NCCL_NVLS_ENABLE=0`` unless set): our all-reduces are a few hundred kB, far below what multicast helps, and
NVLS needs multicast objects and memory that some drivers and shared machines do not provide.
"""

from __future__ import annotations

import atexit
import os
import pickle
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

T = TypeVar("T")
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


class Moments(NamedTuple):
    mean: np.ndarray  # float64, the statistic's shape
    var: np.ndarray  # float64, population variance
    count: float  # samples


def local_moments(batch: np.ndarray) -> Moments:
    batch = np.asarray(batch, np.float64)
    return Moments(batch.mean(0), batch.var(0), float(batch.shape[0]))


class SingleProcess:
    """A world of one process: every collective is the identity."""

    rank, world_size, local_rank = 0, 1, 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes logs and checkpoints."""
        return self.rank == 0

    def sum(self, tensor: Tensor) -> Tensor:
        """The element-wise sum over ranks (a new tensor; the input is not modified)."""
        return tensor

    def max(self, tensor: Tensor) -> Tensor:
        """The element-wise maximum over ranks."""
        return tensor

    def reduce_gradients(self, params: Sequence[nn.Parameter], extra: Tensor) -> Tensor:
        """Replace every gradient by its sum over ranks; returns ``extra`` (1-D float) summed over ranks too."""
        return extra

    def gather_moments(self, batch: np.ndarray) -> list[Moments]:
        """Mean, variance and count of every rank's ``batch`` (rows are samples), in rank order; empty ones left
        out."""
        return [local_moments(batch)] if len(batch) else []

    def gather_objects(self, obj: T) -> list[T]:
        """Every rank's ``obj`` (picklable), in rank order."""
        return [obj]

    def on_main(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on rank 0 and hand its result to every rank; an exception it raises is raised on every rank."""
        return fn()

    def broadcast_module(self, module: nn.Module) -> None:
        """Copy rank 0's parameters into every rank's ``module``."""

    def barrier(self) -> None:
        """Wait until every rank gets here."""


SINGLE = SingleProcess()


class ProcessGroup(SingleProcess):
    """The ranks of a torch.distributed process group; collectives run on ``device``."""

    def __init__(self, rank: int, world_size: int, local_rank: int, device: torch.device) -> None:
        self.rank, self.world_size, self.local_rank, self.device = rank, world_size, local_rank, device

    def sum(self, tensor: Tensor) -> Tensor:
        out = tensor.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def max(self, tensor: Tensor) -> Tensor:
        out = tensor.clone()
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
        return out

    def reduce_gradients(self, params: Sequence[nn.Parameter], extra: Tensor) -> Tensor:
        # One flat bucket, one all-reduce: gradients, a "has a gradient" flag per parameter (a parameter without
        # a gradient on every rank keeps None, as in one process, so Adam skips it), then ``extra``.
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        present = torch.tensor([p.grad is not None for p in params], dtype=extra.dtype, device=extra.device)
        bucket = torch.cat([g.reshape(-1) for g in grads] + [present, extra.reshape(-1)])
        dist.all_reduce(bucket, op=dist.ReduceOp.SUM)
        offset, sizes = 0, [p.numel() for p in params]
        flags = bucket[sum(sizes) : sum(sizes) + len(params)]
        has_grad = (flags > 0).tolist()  # sync: one per minibatch step, next to the step's own
        for param, size, keep in zip(params, sizes, has_grad, strict=True):
            param.grad = bucket[offset : offset + size].view_as(param) if keep else None
            offset += size
        return bucket[offset + len(params) :]

    def gather_moments(self, batch: np.ndarray) -> list[Moments]:
        batch = np.asarray(batch, np.float64)
        shape = batch.shape[1:]
        mine = local_moments(batch) if len(batch) else Moments(np.zeros(shape), np.ones(shape), 0.0)
        packed = np.concatenate([[mine.count], np.reshape(mine.mean, -1), np.reshape(mine.var, -1)])
        local = torch.as_tensor(packed, dtype=torch.float64, device=self.device)
        gathered = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(gathered, local)
        size = int(np.prod(shape))
        out = []
        for row in torch.stack(gathered).cpu().numpy():  # sync: once per rollout
            if row[0] > 0:
                out.append(Moments(row[1 : 1 + size].reshape(shape), row[1 + size :].reshape(shape), float(row[0])))
        return out

    def gather_objects(self, obj: T) -> list[T]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def on_main(self, fn: Callable[[], T]) -> T:
        box: list[Any] = [None]
        if self.is_main:
            try:
                box[0] = (True, fn())
            except BaseException as error:  # SystemExit too: every rank must leave alike
                box[0] = (False, _picklable(error))
        dist.broadcast_object_list(box, src=0)
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def broadcast_module(self, module: nn.Module) -> None:
        for param in module.parameters():
            dist.broadcast(param.data, src=0)

    def barrier(self) -> None:
        dist.barrier()


def _picklable(error: BaseException) -> BaseException:
    try:
        pickle.dumps(error)
        return error
    except Exception:  # any pickling failure: send the message instead
        return RuntimeError(f"rank 0 failed: {type(error).__name__}: {error}")


def launched_by_torchrun() -> bool:
    return all(name in os.environ for name in TORCHRUN_VARS)


def rank_device(device: str, local_rank: int, world_size: int) -> torch.device:
    """The agent's device on one rank: ``cuda`` (or ``auto`` with CUDA) means ``cuda:LOCAL_RANK``."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    chosen = torch.device(device)
    if chosen.type != "cuda":
        return chosen
    count = torch.cuda.device_count()
    if chosen.index is not None and world_size > 1 and chosen.index != local_rank:
        raise ValueError(f"--device {device} under torchrun with {world_size} processes: every rank would use GPU "
                         f"{chosen.index}; pass --device cuda, and each rank uses cuda:LOCAL_RANK")
    if local_rank >= count:
        raise ValueError(f"LOCAL_RANK={local_rank} but this machine has {count} CUDA device(s); start at most "
                         f"{count} processes per node (torchrun --nproc-per-node {max(count, 1)})")
    return torch.device("cuda", local_rank)


def init(device: str = "auto") -> SingleProcess:
    """The ranks of this run: a :class:`ProcessGroup` under torchrun (joined here), else :data:`SINGLE`.

    ``device`` is the agent's device as the user gave it; it picks the backend (NCCL for CUDA, gloo for CPU).
    Calling it again in the same process returns the group already joined.
    """
    if not launched_by_torchrun():
        return SINGLE
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    chosen = rank_device(device, local_rank, world_size)
    if torch.cuda.is_available() and local_rank < torch.cuda.device_count():
        torch.cuda.set_device(local_rank)  # "cuda" without an index, anywhere in this process, is this rank's GPU
    if not dist.is_initialized():
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # read when NCCL creates its communicator, below
        if chosen.type == "cuda":
            dist.init_process_group("nccl", device_id=chosen)
        else:
            dist.init_process_group("gloo")
        atexit.register(_destroy)
    elif (dist.get_backend() == "nccl") != (chosen.type == "cuda"):
        raise ValueError(f"this process already joined a {dist.get_backend()} group; device {device} needs "
                         f"{'nccl' if chosen.type == 'cuda' else 'gloo'}")
    return ProcessGroup(rank, world_size, local_rank, chosen)


GLOO_SETTLE_S = 0.2
"""How long the exit handler lets gloo's worker threads drop their last tensors (see :func:`_destroy`)."""


def _destroy() -> None:
    """Leaves the process group at interpreter exit.

    A gloo worker thread may still hold the last reference to a finished collective's tensors when the
    collective has returned; dropping a tensor that Python has seen takes the GIL, and a thread that takes the
    GIL while the interpreter finalizes is killed, which aborts the process ("terminate called without an
    active exception", SIGABRT after a run that succeeded; about one launch in three of the 2-process CPU
    test). ``destroy_process_group`` does not join those threads, so we sleep a moment with the GIL released
    to let them finish while the interpreter is whole (pytorch/pytorch#190489 tracks the race upstream).
    """
    if not dist.is_initialized():
        return
    gloo = dist.get_backend() == "gloo"
    dist.destroy_process_group()
    if gloo:
        time.sleep(GLOO_SETTLE_S)


def sample_seed(seed: int, rank: int) -> int:
    """Seed of a rank's action-sampling generator: the run seed on rank 0 (a one-process run is unchanged),
    an independent stream derived from (seed, rank) on the others."""
    if rank == 0:
        return seed
    return int(np.random.SeedSequence([seed, rank]).generate_state(1, np.uint64)[0] & 0x7FFF_FFFF_FFFF_FFFF)


def rank_env_kwargs(env_id: str, env_kwargs: dict[str, Any], ranks: SingleProcess) -> dict[str, Any]:
    """The env keyword arguments one rank uses: an Esper env's ``device`` (``auto``/``cuda``/absent) becomes
    the rank's own GPU. ``devices=[...]`` (one process spreading its sub-envs over GPUs) is refused under
    torchrun, where every rank has its GPU already."""
    if ranks.world_size == 1 or not torch.cuda.is_available():
        return env_kwargs
    if env_kwargs.get("devices"):
        raise ValueError(f"env kwarg devices={env_kwargs['devices']} under torchrun with {ranks.world_size} "
                         "processes: each rank already has its own GPU; drop devices (or run one process)")
    device = env_kwargs.get("device")
    if device is not None and device not in ("auto", "cuda"):
        if torch.device(device).type == "cuda":
            raise ValueError(f"env kwarg device={device!r} under torchrun would put every rank's env on the same "
                             "GPU; use device='cuda' (each rank's env then runs on cuda:LOCAL_RANK)")
        return env_kwargs
    if device is None and not _is_esper(env_id):
        return env_kwargs
    return env_kwargs | {"device": f"cuda:{ranks.local_rank}"}


def _is_esper(env_id: str) -> bool:
    import gymnasium as gym

    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        return False
    return str(spec.vector_entry_point or spec.entry_point).startswith("esper_env.")


def warn_main(ranks: SingleProcess, message: str) -> None:
    """A warning from rank 0 only (the same warning from every rank is noise)."""
    if ranks.is_main:
        warnings.warn(message, stacklevel=3)


__all__ = ["SingleProcess", "ProcessGroup", "SINGLE", "Moments", "init", "launched_by_torchrun", "rank_device",
           "rank_env_kwargs", "sample_seed", "local_moments", "warn_main"]
