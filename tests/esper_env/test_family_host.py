"""The family host: seeds are the identity at birth, joining keeps the function exactly, momentum follows."""

from __future__ import annotations

import copy

import pytest
import torch

from esper_env import family_host
from esper_env.architecture import widen_extra
from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.family import Architecture, param_count
from esper_env.family_host import FamilyHost
from esper_env.optim import NesterovSGD

INDEX = {bp.name: i for i, bp in enumerate(FAMILY_BLUEPRINTS)}
ARCH = Architecture((8, 12, 16), (0, 1, 0), stem=6)


def _host(seed: int = 0) -> FamilyHost:
    torch.manual_seed(seed)
    return FamilyHost(ARCH, num_classes=5, in_channels=3)


def _planted(name: str, slot: int) -> FamilyHost:
    """A fresh host with blueprint ``name`` planted in ``slot`` from a fixed seed."""
    host = _host()
    torch.manual_seed(1)
    host.plant(slot, INDEX[name], gated=False)
    return host


def _controls(alpha: float, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """alphas and flags for every slot in one forward mode (see host.py's table)."""
    straight, upstream = {"incubate": (1.0, 0.0), "blend": (0.0, 0.0), "full": (0.0, 1.0)}[mode]
    return torch.full((3,), alpha), torch.tensor([[straight] * 3, [upstream] * 3])


def _train_a_little(host: FamilyHost) -> None:
    """Move every weight and BatchNorm statistic well away from its initial value, as training would (zero
    outgoing weights and zero last norms included), so that exactness is tested on a general network."""
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in host.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=generator))
        for name, b in host.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.3 * torch.randn(b.shape, generator=generator))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=generator))


@pytest.mark.parametrize("name", ["deepen", "widen_s", "widen_l"])
@pytest.mark.parametrize("slot", [0, 1, 2])
def test_a_planted_seed_changes_nothing_at_birth(name: str, slot: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(family_host, "SPLIT_NOISE", 0.0)  # exact copies: the split then keeps the function exactly
    host = _host()
    _train_a_little(host)
    host.eval()
    x = torch.randn(4, 3, 16, 16)
    before = host(x, *_controls(1.0, "full"))
    torch.manual_seed(1)
    host.plant(slot, INDEX[name], gated=False)
    host.eval()  # the new seed's norm too
    scale = float(before.detach().abs().max())  # exact but for rounding, which scales with the logits (hundreds here)
    for mode in ("incubate", "blend", "full"):
        assert torch.allclose(host(x, *_controls(1.0, mode)), before, rtol=0.0, atol=1e-6 * scale), mode


@pytest.mark.parametrize("name", ["deepen", "widen_s", "widen_l"])
@pytest.mark.parametrize("slot", [0, 1, 2])
def test_joining_keeps_the_function_and_grows_the_architecture(name: str, slot: int) -> None:
    host = _planted(name, slot)
    _train_a_little(host)  # the seed's outgoing weights and its block's last norm are no longer zero
    host.eval()
    x = torch.randn(4, 3, 16, 16)
    alphas, flags = _controls(1.0, "full")
    with_seed = host(x, alphas, flags)
    host.join(slot)
    assert host.slots[slot].seed is None and host.version == 1
    assert torch.allclose(host(x, alphas, flags), with_seed, rtol=1e-4, atol=1e-5)
    expected = (ARCH.deepened(slot) if name == "deepen"
                else ARCH.widened(slot, ARCH.widths[slot] + widen_extra(ARCH.widths[slot], name)))
    assert host.arch == expected
    assert sum(p.numel() for p in host.host_parameters()) == param_count(expected, 5, 3)


def test_joining_keeps_live_neighbours_exact() -> None:
    host = _host()
    torch.manual_seed(1)
    for slot in range(3):
        host.plant(slot, INDEX["widen_s"], gated=False)
    _train_a_little(host)
    host.eval()
    x = torch.randn(4, 3, 16, 16)
    alphas, flags = _controls(0.6, "blend")
    before = host(x, alphas, flags)
    host.join(1)  # slot 0's seed writes into stage 1's conv, slot 2's reads stage 1's output
    assert host.slots[1].seed is None
    alphas[1] = 0.0  # the joined seed's slot is empty; its alpha no longer matters, but its channels are full
    with_joined = host(x, alphas, flags)
    alphas_before = alphas.clone()
    alphas_before[1] = 1.0
    assert torch.allclose(with_joined, host(x, alphas_before, flags), atol=1e-6)
    assert with_joined.shape == before.shape


def test_growth_compounds_in_one_slot() -> None:
    host = _host()
    for round_ in range(2):
        torch.manual_seed(round_)
        host.plant(2, INDEX["widen_l"], gated=False)
        host.join(2)
    assert host.arch.widths[2] == 16 * 4 * 4
    torch.manual_seed(5)
    host.plant(2, INDEX["deepen"], gated=False)
    host.join(2)
    assert host.arch.blocks[2] == 1 and host.version == 3


def test_momentum_follows_the_join() -> None:
    host = _host()
    torch.manual_seed(1)
    params = host.plant(1, INDEX["widen_s"], gated=False)
    opt = NesterovSGD(host.host_parameters(), momentum=0.9, weight_decay=0.0)
    opt.add_group(1, params)
    alphas, flags = _controls(0.5, "blend")
    for _ in range(2):
        loss = host(torch.randn(8, 3, 16, 16), alphas, flags).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step(torch.tensor([0.1, 0.1]))
    stage_conv, seed_conv = host.net.stages[1].conv.weight, host.slots[1].seed.conv.weight
    old_stage_momentum = dict(zip(map(id, opt.host[0]), opt.host[1], strict=True))[id(stage_conv)].clone()
    seed_momentum = opt.seeds[1][1][params.index(seed_conv)].clone()
    assembly = host.join(1)
    opt.regroup(host.host_parameters(), {}, assembly)
    grown = host.net.stages[1].conv.weight
    momentum = dict(zip(map(id, opt.host[0]), opt.host[1], strict=True))[id(grown)]
    rows = stage_conv.shape[0]
    assert torch.equal(momentum[:rows], old_stage_momentum) and torch.equal(momentum[rows:], seed_momentum)
    block = host.net.stages[1].blocks[0]  # stage 1 had one block: it gained identity channels, zero momentum
    grown_block = dict(zip(map(id, opt.host[0]), opt.host[1], strict=True))[id(block.conv1.weight)]
    assert grown_block[rows:].abs().sum() == 0 and grown_block[:rows, :rows].abs().sum() > 0
    assert not opt.seeds


def test_the_family_host_refuses_what_it_cannot_grow() -> None:
    host = _host()
    with pytest.raises(ValueError, match="cannot grow the family host"):
        host.plant(0, len(FAMILY_BLUEPRINTS), gated=False)
    with pytest.raises(ValueError, match="no gated blend"):
        host.plant(0, INDEX["deepen"], gated=True)
    with pytest.raises(ValueError, match="holds no seed"):
        host.join(0)


@pytest.mark.parametrize("name", ["deepen", "widen_s", "widen_l"])
@pytest.mark.parametrize("slot", [0, 1, 2])
def test_seed_counts_are_what_the_seed_adds_once_joined(name: str, slot: int) -> None:
    from esper_env.family import forward_flops

    host = _planted(name, slot)
    params, flops = host.seed_counts(slot, image_size=16)
    before = host.arch
    host.join(slot)
    # a widen seed's channels also gain identity weights in the stage's blocks when they join: not the seed's
    blocks_growth = param_count(host.arch, 5, 3) - param_count(before, 5, 3) - params
    assert params > 0 and (blocks_growth == 0 or (name != "deepen" and before.blocks[slot] > 0))
    grown = forward_flops(host.arch, 16, 5, 3) - forward_flops(before, 16, 5, 3)
    if blocks_growth == 0:
        assert flops == grown
    assert host.seed_counts(slot, 16) == (0, 0)


def test_a_split_shares_the_outgoing_weights_where_the_stage_has_no_blocks() -> None:
    host = _host()
    torch.manual_seed(1)
    host.plant(0, INDEX["widen_s"], gated=False)  # stage 0 has no block: split
    host.plant(1, INDEX["widen_s"], gated=False)  # stage 1 has one: outgoing weights start at zero
    split, fresh = host.slots[0].seed, host.slots[1].seed
    consumer = host.net.stages[1].conv.weight
    assert torch.allclose(split.out.weight, consumer[:, split.sources] / 2)  # one copy per source: halves
    given = torch.zeros_like(consumer).index_add_(1, split.sources, split.out.weight)  # at the sources' columns
    assert torch.equal(split.given, given) and fresh.given.abs().sum() == 0
    assert fresh.out.weight.abs().sum() == 0
    x = torch.randn(4, 3, 16, 16)
    host.eval()
    before = host(x, *_controls(0.0, "full"))
    after = host(x, *_controls(1.0, "full"))
    assert torch.allclose(before, after, rtol=0.05, atol=1e-3)  # the copies' noise is small


@pytest.mark.parametrize("slot", [0, 2])  # into the next stage's conv; into the head
def test_a_split_learns_as_the_joined_layer_would(slot: int) -> None:
    # At alpha 1 the sources' effective outgoing weights (W - S) and the copies' (V) get the joined layer's
    # gradients, so a step then a join equals a join then the same step (with d = V (e - h[sources]) the copies'
    # outgoing weights would learn from e - h[sources] only, near zero at birth).
    x, labels = torch.randn(8, 3, 16, 16), torch.randint(0, 5, (8,))
    alphas, flags = _controls(1.0, "full")

    def step(host: FamilyHost) -> None:
        loss = torch.nn.functional.cross_entropy(host(x, alphas, flags), labels)
        params = [p for p in host.parameters() if p.requires_grad]
        for p, g in zip(params, torch.autograd.grad(loss, params), strict=True):
            p.data.sub_(0.1 * g)

    hosts = [_planted("widen_s", slot) for _ in range(2)]
    for host in hosts:
        host.eval()  # fixed norm statistics: the step then depends on the weights alone
    before = hosts[0](x, alphas, flags)
    step(hosts[0])
    hosts[0].join(slot)
    hosts[1].join(slot)
    step(hosts[1])
    moved = [host(x, alphas, flags) - before for host in hosts]  # one step moves the logits little: compare moves
    assert (moved[0] - moved[1]).abs().max() < 1e-3 * moved[0].abs().max()


def test_joined_entries_keep_learning_faster() -> None:
    host = _host()
    opt = NesterovSGD(host.host_parameters(), momentum=0.5, weight_decay=0.0, joined_gain=2.0)
    torch.manual_seed(1)
    opt.add_group(1, host.plant(1, INDEX["widen_s"], gated=False))
    assembly = host.join(1)
    opt.regroup(host.host_parameters(), {}, assembly)
    torch.manual_seed(2)
    opt.add_group(2, host.plant(2, INDEX["deepen"], gated=False))
    assembly = host.join(2)
    opt.regroup(host.host_parameters(), {}, assembly)  # the first join's gains survive a second one
    host, opt = copy.deepcopy((host, opt))  # as pickling does: new tensors, new ids
    before = {name: p.detach().clone() for name, p in host.named_parameters()}
    for p in host.parameters():
        p.grad = torch.ones_like(p)
    opt.step(torch.tensor([0.1, 0.1]))
    # a first Nesterov step from zero momentum moves lr x (1 + momentum) x the gradient
    moved = {name: (before[name] - p.detach()) / (0.1 * 1.5) for name, p in host.named_parameters()}
    rows = ARCH.widths[1]
    conv, nxt = moved["net.stages.1.conv.weight"], moved["net.stages.2.conv.weight"]
    assert torch.allclose(conv[:rows], torch.ones(())) and torch.allclose(conv[rows:], torch.full((), 2.0))
    assert torch.allclose(nxt[:, :rows], torch.ones(())) and torch.allclose(nxt[:, rows:], torch.full((), 2.0))
    block = moved["net.stages.1.blocks.0.conv1.weight"]
    assert torch.allclose(block[rows:], torch.full((), 2.0))  # fresh rows
    assert torch.allclose(block[:rows, rows:], torch.full((), 2.0))  # and the zeros from new channels into old
    assert all(torch.equal(p.grad, torch.ones_like(p)) for p in host.parameters())  # the gradients as measured
    assert torch.allclose(moved["net.stages.2.blocks.0.conv1.weight"], torch.full((), 2.0))  # a joined block
    assert torch.allclose(moved["net.stages.0.conv.weight"], torch.ones(()))  # untouched by growth


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_splits_side_by_side_keep_the_function_at_each_join(order: tuple[int, int]) -> None:
    # The later of two live widen seeds side by side reads only the earlier stage's old channels; joined in
    # either order, each join keeps the function (the copies read the new channels through zero weights, the
    # earlier seed writes into the new rows through zero weights).
    host = _host()
    x, (alphas, flags) = torch.randn(4, 3, 16, 16), _controls(1.0, "full")
    for slot in order:
        torch.manual_seed(slot + 1)
        host.plant(slot, INDEX["widen_l"], gated=False)
    _train_a_little(host)  # the live seeds' contributions are far from zero
    for slot in reversed(order):
        host.eval()
        before = host(x, alphas, flags)
        host.join(slot)
        assert torch.allclose(host(x, alphas, flags), before, rtol=1e-4, atol=1e-5), f"joining {slot}"
    assert host.arch.widths[:2] == (4 * ARCH.widths[0], 4 * ARCH.widths[1])


def test_one_amplitude_folds_the_given_share_into_the_next_conv() -> None:
    # Training runs one amplitude for the whole batch: the next conv then reads W - a given, which must compute
    # what the general path (per-sample amplitudes) computes, values and gradients alike. Stage 0 has no block,
    # so its widen seed is split (a stage with blocks gives nothing up, and takes the general path).
    host = _host()
    torch.manual_seed(1)
    host.plant(0, INDEX["widen_l"], gated=False)
    assert host.slots[0].seed.split
    _train_a_little(host)
    x = torch.randn(4, 3, 16, 16)
    alphas, flags = _controls(0.7, "full")
    results = []
    for per_sample in (False, True):
        host.zero_grad()
        a = alphas.view(3, 1).expand(3, 2).contiguous() if per_sample else alphas  # 2 configurations of 4
        out = host(x, a, flags)[:4] if per_sample else host(x, a, flags)
        out.square().sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in host.parameters()]))
    (folded, folded_grads), (general, general_grads) = results
    scale = float(general.abs().max())
    assert torch.allclose(folded, general, rtol=0.0, atol=1e-5 * scale)
    for a, b in zip(folded_grads, general_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max() + 1e-12))
