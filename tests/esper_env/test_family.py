"""The growable host family: counts, function-preserving growth, optimizer state carried through growth."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from esper_env.family import (
    Architecture,
    FamilyNet,
    boost_fresh,
    carry_momentum,
    deepen,
    forward_flops,
    fresh_masks,
    grow_to,
    param_count,
    widen,
)

SMALL = Architecture(widths=(4, 8, 8), blocks=(0, 1, 0), stem=4)


def _net(arch: Architecture = SMALL, classes: int = 10) -> FamilyNet:
    torch.manual_seed(0)
    return FamilyNet(arch, classes)


def _images(n: int = 6, size: int = 16) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("arch", [SMALL, Architecture((16, 32, 32), (0, 0, 0)), Architecture((8, 8), (2, 1), 6)])
def test_param_count_matches_the_module(arch: Architecture) -> None:
    assert param_count(arch, num_classes=7) == sum(p.numel() for p in FamilyNet(arch, 7).parameters())


def test_forward_flops_match_torch_counter_for_convs_and_head() -> None:
    net = _net(Architecture((4, 8, 8), (1, 0, 2), 4))
    with FlopCounterMode(display=False) as counter:
        net(torch.randn(1, 3, 16, 16))
    assert forward_flops(net.arch, image_size=16) == counter.get_total_flops()


def test_architecture_rejects_mismatched_blocks() -> None:
    with pytest.raises(ValueError, match="blocks=.*expected 3 block counts"):
        Architecture(widths=(4, 8, 8), blocks=(0, 1))


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("stage", [0, 1, 2])
def test_widen_without_noise_keeps_the_function(stage: int, training: bool) -> None:
    net = _net()
    x = _images()
    net.train(training)
    before = net(x)
    widen(net, stage, net.arch.widths[stage] + 5, noise=0.0, generator=torch.Generator().manual_seed(2))
    assert net.arch.widths[stage] == SMALL.widths[stage] + 5
    assert param_count(net.arch) == sum(p.numel() for p in net.parameters())
    torch.testing.assert_close(net(x), before, rtol=1e-4, atol=1e-5)


def test_widen_noise_breaks_symmetry_but_stays_close() -> None:
    net = _net().eval()
    x = _images()
    before = net(x)
    widen(net, 1, 16, noise=0.01, generator=torch.Generator().manual_seed(3))
    after = net(x)
    assert not torch.equal(after, before)
    assert (after - before).abs().max() < 0.05 * before.abs().max()


def test_deepen_keeps_the_function_and_counts() -> None:
    net = _net().eval()
    x = _images()
    before = net(x)
    growth = deepen(net, 2)
    assert net.arch.blocks == (0, 1, 1) and growth.added
    torch.testing.assert_close(net(x), before)


def test_growth_rejects_bad_stage_and_narrowing() -> None:
    net = _net()
    with pytest.raises(ValueError, match="stage=3"):
        deepen(net, 3)
    with pytest.raises(ValueError, match="width=8 for stage 1; expected more than its current 8"):
        widen(net, 1, 8)


def test_carry_momentum_expands_state_and_trains_on() -> None:
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, y = _images(), torch.arange(6) % 10
    torch.nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
    old_conv = net.stages[1].conv.weight
    old_momentum = opt.state[old_conv]["momentum_buffer"].clone()
    growth = widen(net, 1, 12, generator=torch.Generator().manual_seed(4))
    carry_momentum(opt, growth)
    carry_momentum(opt, deepen(net, 0))
    params = [p for g in opt.param_groups for p in g["params"]]
    assert {id(p) for p in params} == {id(p) for p in net.parameters()}
    new_conv = net.stages[1].conv.weight
    momentum = opt.state[new_conv]["momentum_buffer"]
    assert momentum.shape == new_conv.shape
    torch.testing.assert_close(momentum[:8], old_momentum)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
    assert all(torch.isfinite(p).all() for p in net.parameters())


def test_fresh_masks_mark_new_channels_and_blocks() -> None:
    net = _net()
    widen(net, 1, 12, generator=torch.Generator().manual_seed(5))
    deepen(net, 2)
    masks = {id(p): m for p, m in fresh_masks(net, SMALL)}
    conv1 = net.stages[1].conv.weight  # outputs of stage 1: rows 8.. are new
    assert masks[id(conv1)].amax(dim=(1, 2, 3)).tolist() == [0.0] * 8 + [1.0] * 4
    reader = net.stages[2].conv.weight  # reads stage 1: columns 8.. are new
    assert masks[id(reader)].amax(dim=(0, 2, 3)).tolist() == [0.0] * 8 + [1.0] * 4
    block = net.stages[1].blocks[0].conv1.weight  # both sides index stage 1
    assert masks[id(block)][:8, :8].sum() == 0 and masks[id(block)][8:, :].min() == 1
    assert masks[id(net.stages[2].blocks[0].conv1.weight)] == 1
    assert id(net.stages[0].conv.weight) not in masks


def test_boost_fresh_scales_only_new_gradients() -> None:
    net = _net()
    widen(net, 1, 12, generator=torch.Generator().manual_seed(6))
    x, y = _images(), torch.arange(6) % 10
    torch.nn.functional.cross_entropy(net(x), y).backward()
    plain = net.stages[1].conv.weight.grad.clone()
    net.zero_grad()
    handles = boost_fresh(net, SMALL, 3.0)
    torch.nn.functional.cross_entropy(net(x), y).backward()
    boosted = net.stages[1].conv.weight.grad
    torch.testing.assert_close(boosted[:8], plain[:8])
    torch.testing.assert_close(boosted[8:], 3.0 * plain[8:])
    for handle in handles:
        handle.remove()


def test_grow_to_reaches_the_target_and_keeps_the_function() -> None:
    net = _net().eval()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x = _images()
    before = net(x)
    target = Architecture((6, 12, 8), (1, 1, 2), stem=4)
    grow_to(net, target, opt, noise=0.0, generator=torch.Generator().manual_seed(7))
    assert net.arch == target
    assert {id(p) for g in opt.param_groups for p in g["params"]} == {id(p) for p in net.parameters()}
    torch.testing.assert_close(net(x), before, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="no stage narrower or shallower"):
        grow_to(net, Architecture((6, 8, 8), (1, 1, 2), stem=4), opt)
