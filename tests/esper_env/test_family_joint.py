"""The family host's two fast paths compute what its general path computes: training with every live seed at
FULL's controls (``family_joint.forward_full``), and validation of stacked configurations whose shared prefix
runs once."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import torch

from esper_env import family_host
from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.family import Architecture
from esper_env.family_host import FamilyHost
from esper_env.host import full_slots
from esper_env.training import plan_table

INDEX = {bp.name: i for i, bp in enumerate(FAMILY_BLUEPRINTS)}
FULL = (torch.ones(3, dtype=torch.float64), torch.tensor([[0.0] * 3, [1.0] * 3], dtype=torch.float64))

# Residual blocks per stage, then (slot, blueprint) plantings with joins (slot, "join") between them: every way a
# stage's channels can be laid out in the joint path (a split at each stage, side by side, into the head with and
# without a block before it, beside residual blocks, after joins, and deepen).
LAYOUTS = {
    "widen-0": ((0, 0, 1), [(0, "widen_l")]),
    "widen-1": ((0, 0, 1), [(1, "widen_s")]),
    "widen-head": ((0, 0, 1), [(2, "widen_l")]),
    "widen-head-split": ((0, 0, 0), [(1, "widen_s"), (2, "widen_l")]),
    "widen-all": ((0, 0, 1), [(0, "widen_s"), (1, "widen_l"), (2, "widen_s")]),
    "widen-beside-blocks": ((0, 0, 1), [(1, "deepen"), (1, "join"), (1, "widen_l"), (0, "widen_s")]),
    "deepen-and-widen": ((0, 0, 1), [(0, "deepen"), (1, "widen_l"), (2, "deepen")]),
    "after-joins": ((0, 0, 1), [(0, "widen_l"), (0, "join"), (1, "widen_s"), (2, "widen_s"), (2, "join"),
                                (0, "widen_s")]),
}


@pytest.fixture(autouse=True)
def _float64() -> Iterator[None]:
    """Seeds are built in the default dtype: float64 throughout, so that only round-off of 1e-16 remains."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def _grown(layout: str) -> FamilyHost:
    torch.manual_seed(0)
    blocks, steps = LAYOUTS[layout]
    host = FamilyHost(Architecture((6, 8, 10), blocks, stem=4), num_classes=5, in_channels=3)
    for step, (slot, what) in enumerate(steps):
        torch.manual_seed(step + 1)
        if what == "join":
            host.join(slot)
        else:
            host.plant(slot, INDEX[what], gated=False)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():  # far from the identity at birth: every weight, zero outgoing ones included, matters
        for p in host.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
        for seed in (s.seed for s in host.slots if s.widens):
            seed.given.add_(0.3 * torch.randn(seed.given.shape, generator=generator, dtype=seed.given.dtype))
    return host


def _step(host: FamilyHost, x: torch.Tensor, full: frozenset[int]) -> tuple[torch.Tensor, dict, dict]:
    host.train()
    host.zero_grad()
    logits = host(x, *FULL, full=full)
    logits.square().sum().backward()
    grads = {n: p.grad.clone() for n, p in host.named_parameters()}
    return logits.detach(), grads, {n: b.clone() for n, b in host.named_buffers()}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_training_at_full_controls_runs_the_grown_network_exactly(layout: str) -> None:
    host = _grown(layout)
    live = frozenset(k for k, s in enumerate(host.slots) if s.seed is not None)
    x = torch.randn(6, 3, 16, 16, dtype=torch.float64)
    general = _step(copy.deepcopy(host), x, frozenset())
    joint = _step(host, x, live)
    assert torch.allclose(joint[0], general[0], rtol=1e-10, atol=1e-10)
    for name, grad in general[1].items():
        assert torch.allclose(joint[1][name], grad, rtol=1e-9, atol=1e-9), name
    for name, buffer in general[2].items():  # running statistics and counts, as the modules keep them
        assert torch.equal(joint[2][name], buffer) or torch.allclose(joint[2][name], buffer, atol=1e-12), name


def test_channels_last_weights_and_inputs_give_the_same_step() -> None:
    # On CUDA the engine keeps hosts and batches channels-last; the joint weights must compute the same there.
    host = _grown("after-joins").to(memory_format=torch.channels_last)
    live = frozenset(k for k, s in enumerate(host.slots) if s.seed is not None)
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    general, joint = _step(copy.deepcopy(host), x, frozenset()), _step(host, x, live)
    assert torch.allclose(joint[0], general[0], rtol=1e-10, atol=1e-10)
    for name, grad in general[1].items():
        assert torch.allclose(joint[1][name], grad, rtol=1e-9, atol=1e-9), name


def test_the_joint_path_runs_in_training_with_every_live_seed_full(monkeypatch: pytest.MonkeyPatch) -> None:
    host = _grown("widen-all").train()
    x = torch.randn(2, 3, 16, 16, dtype=torch.float64)
    called = []
    monkeypatch.setattr(family_host, "forward_full", lambda model, images: called.append(1) or torch.zeros(()))
    host(x, *FULL, full=frozenset({0, 1}))  # slot 2's seed is not at FULL's controls: the general path
    assert not called
    host(x, *FULL, skip=(False, False, True), full=frozenset({0, 1}))  # nor when it is skipped: it would run
    assert not called
    host(x, *FULL, full=frozenset({0, 1, 2}))
    assert called
    called.clear()
    host.eval()(x, *FULL, full=frozenset({0, 1, 2}))  # validation reads the running statistics: general path
    assert not called


def test_full_slots_are_read_from_the_epochs_controls() -> None:
    # alpha, straight-through and upstream per slot: only (1, 0, 1) is FULL's
    controls = [1.0, 1.0, 0.5, 0.0] + [0.0, 1.0, 0.0, 0.0] + [1.0, 0.0, 0.0, 1.0]
    assert full_slots(controls) == frozenset({0})


@pytest.mark.parametrize("layout", ["widen-0", "widen-head", "widen-all", "deepen-and-widen", "after-joins"])
def test_stacked_configurations_equal_one_forward_each(layout: str) -> None:
    # Validation stacks the full model, the host alone and each blended seed switched off; the part before the
    # first amplitude runs once. Each configuration must equal its own forward.
    host = _grown(layout).eval()
    on = tuple(s.seed is not None for s in host.slots)
    plan = [("full", -1), ("host", -1), *(("off", k) for k in range(3) if on[k])]
    mask = torch.from_numpy(plan_table(tuple(plan), 3)).double()
    alphas, flags = FULL[0].view(-1, 1) * mask, FULL[1]
    x = torch.randn(5, 3, 16, 16, dtype=torch.float64)
    skip = tuple(not b for b in on)
    with torch.no_grad():
        stacked = host(x, alphas, flags, skip)
        for k in range(len(plan)):
            alone = host(x, alphas[:, k].contiguous(), flags, skip)
            assert torch.allclose(stacked[5 * k:5 * (k + 1)], alone, rtol=1e-10, atol=1e-10), plan[k]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("layout", ["after-joins", "deepen-and-widen"])
def test_the_joint_step_is_as_close_to_float32_as_the_general_one_in_bfloat16(device: str, layout: str) -> None:
    # As the engine trains: channels-last, bf16 autocast (on CUDA cuDNN's kernels). The two paths round
    # differently, so each is compared with the general path in float32: the joint one must be about as close to
    # it as the general one is. One parameter's gradient on one batch is too noisy a judge in bf16 (its cosine to
    # float32's ranges from 0.5 to 1 between batches, for either path), so each error is a mean over 8 batches:
    # the logits', the gradients' over every parameter, and each parameter's alone (with more room: on the CPU
    # the worst parameter's ratio is about 1.35, the overall ones 0.8 to 1.1).
    torch.set_default_dtype(torch.float32)
    host = _grown(layout).to(device, memory_format=torch.channels_last)
    live = frozenset(k for k, s in enumerate(host.slots) if s.seed is not None)
    controls = tuple(t.float().to(device) for t in FULL)

    def step(x: torch.Tensor, full: frozenset[int], bf16: bool) -> tuple[torch.Tensor, dict]:
        model = copy.deepcopy(host).train()
        with torch.autocast(device, dtype=torch.bfloat16, cache_enabled=False, enabled=bf16):
            logits = model(x, *controls, full=full).float()
        logits.square().mean().backward()
        return logits.detach(), {n: p.grad for n, p in model.named_parameters()}

    def errors(path: tuple[torch.Tensor, dict], reference: tuple[torch.Tensor, dict]) -> torch.Tensor:
        """Relative errors: the logits', then each parameter's gradient's."""
        grads = [(path[1][n] - g).norm() / g.norm() for n, g in reference[1].items()]
        return torch.stack([(path[0] - reference[0]).norm() / reference[0].norm(), *grads]).cpu()

    generator = torch.Generator().manual_seed(3)
    general, joint = 0.0, 0.0
    for _ in range(8):
        x = torch.randn(64, 3, 16, 16, generator=generator).to(device, memory_format=torch.channels_last)
        reference = step(x, frozenset(), False)
        general = general + errors(step(x, frozenset(), True), reference) / 8
        joint = joint + errors(step(x, live, True), reference) / 8
    assert general.min() > 0, general  # bf16 did round: the comparison means something
    assert joint[0] <= 1.25 * general[0] and joint[1:].mean() <= 1.25 * general[1:].mean(), (general, joint)
    assert (joint[1:] <= 1.6 * general[1:] + 0.01).all(), (general, joint)  # no parameter much worse


def test_stacked_configurations_ignore_full() -> None:
    # A slot marked FULL runs its seed alone; with stacked configurations the amplitudes differ, so no shortcut.
    host = _grown("deepen-and-widen").eval()
    x = torch.randn(3, 3, 16, 16, dtype=torch.float64)
    alphas = torch.tensor([[1.0, 0.0]] * 3, dtype=torch.float64)
    with torch.no_grad():
        marked = host(x, alphas, FULL[1], full=frozenset({0, 1, 2}))
        assert torch.equal(marked, host(x, alphas, FULL[1]))
