"""Seeds start as the identity; each forward mode has the gradients the design promises."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from esper_env.config import EnvConfig
from esper_env.dataset_spec import DatasetSpec
from esper_env.host import HostModel, build_host, host_param_count, mode_flags, seed_parameters
from esper_env.lifecycle import ForwardMode
from esper_env.seeds import build_seed, seed_param_count
from esper_env.spaces import BLUEPRINT_NAMES

WIDTHS, SLOTS = (8, 16, 32), (0, 1, 2)
CFG = EnvConfig(host_widths=WIDTHS, slot_blocks=SLOTS)


def _spec(num_classes: int = 10, channels: int = 3) -> DatasetSpec:
    return DatasetSpec(name="test", num_classes=num_classes, image_size=16, channels=channels, train_size=8,
                       val_size=8, test_size=8, chance_accuracy=1 / num_classes, mean=(0.5,) * channels,
                       std=(0.25,) * channels)


def _model(seed: int = 0) -> HostModel:
    torch.manual_seed(seed)
    return build_host(CFG, _spec())


def _flags(modes: dict[int, ForwardMode]) -> torch.Tensor:
    """(2, num_slots) straight-through and upstream flags; slots not named are OFF."""
    return torch.tensor([mode_flags(modes.get(i, ForwardMode.OFF)) for i in range(len(SLOTS))]).T.contiguous()


def _alphas(modes: dict[int, ForwardMode], alpha: float) -> torch.Tensor:
    """Blending amplitude per slot: alpha where the mode blends, 0 where it incubates."""
    values = [alpha if modes.get(i) in (ForwardMode.BLEND, ForwardMode.FULL) else 0.0 for i in range(len(SLOTS))]
    return torch.tensor(values)


def _batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)


@pytest.mark.parametrize("blueprint", range(len(BLUEPRINT_NAMES)))
@pytest.mark.parametrize("slot", range(len(SLOTS)))
@pytest.mark.parametrize("mode", [ForwardMode.INCUBATE, ForwardMode.BLEND, ForwardMode.FULL])
@pytest.mark.parametrize("gated", [False, True])
def test_planting_any_seed_leaves_the_output_unchanged(blueprint, slot, mode, gated):
    model = _model()
    x, _ = _batch()
    modes = {slot: mode}
    model.train()
    before = model(x, _alphas(modes, 0.7), _flags(modes))
    model.plant(slot, blueprint, gated)
    after = model(x, _alphas(modes, 0.7), _flags(modes))
    assert torch.allclose(before, after, atol=1e-6, rtol=0)


@pytest.mark.parametrize("blueprint", range(len(BLUEPRINT_NAMES)))
@pytest.mark.parametrize("channels", [8, 16, 32])
def test_parameter_counts_match_the_modules(blueprint, channels):
    built = sum(p.numel() for p in build_seed(blueprint, channels).parameters())
    assert seed_param_count(blueprint, channels) == built > 0
    assert seed_param_count(blueprint, channels, gated=True) > built


def test_host_parameter_count():
    assert host_param_count(CFG, _spec()) == sum(p.numel() for p in _model().host_parameters())
    # the classifier grows by one weight row and one bias per class
    assert host_param_count(CFG, _spec(num_classes=4)) == host_param_count(CFG, _spec()) - 6 * (WIDTHS[-1] + 1)


def test_the_host_reads_its_input_channels_and_classes_from_the_dataset_spec():
    model = build_host(EnvConfig(host_widths=(4, 8), slot_blocks=(1,)), _spec(num_classes=4, channels=1))
    assert model.blocks[0][0].in_channels == 1 and model.classifier.out_features == 4
    assert [slot.channels for slot in model.slots] == [8]
    no_seed = torch.zeros(1), torch.zeros(2, 1)
    assert model(torch.randn(5, 1, 16, 16), *no_seed).shape == (5, 4)


def _host_grads(model: HostModel, x, y, modes: dict[int, ForwardMode]) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x, _alphas(modes, 1.0), _flags(modes)), y).backward()
    return [p.grad.clone() for p in model.host_parameters()]


@pytest.mark.parametrize("blueprint", range(len(BLUEPRINT_NAMES)))
def test_incubation_leaves_host_gradients_identical_and_teaches_the_seed(blueprint):
    model = _model()
    x, y = _batch()
    plain = _host_grads(model, x, y, {})
    model.plant(1, blueprint, gated=False)
    incubated = _host_grads(model, x, y, {1: ForwardMode.INCUBATE})
    for a, b in zip(plain, incubated, strict=True):
        assert torch.equal(a, b)
    seed_grads = [p.grad for p in seed_parameters(model.slots[1])]
    assert any(g is not None and g.abs().sum() > 0 for g in seed_grads)


def test_fossilized_seed_passes_gradients_to_upstream_host_layers():
    """FULL mode reads h without detach: block 0 keeps learning through a seed in the last slot, and its
    gradient differs from the one it gets when the seed reads a detached input (BLEND at alpha = 1)."""
    x, y = _batch()
    grads = {}
    for mode in (ForwardMode.BLEND, ForwardMode.FULL):
        model = _model()
        model.plant(2, BLUEPRINT_NAMES.index("conv_light"), gated=False)
        with torch.no_grad():  # let the seed be something other than the identity
            for p in seed_parameters(model.slots[2]):
                p.add_(0.1)
        grads[mode] = _host_grads(model, x, y, {2: mode})[0]  # the first conv's weight
    assert grads[ForwardMode.BLEND].abs().sum() == 0  # alpha = 1 with a detached seed input cuts the path
    assert grads[ForwardMode.FULL].abs().sum() > 0


def test_stacked_configurations_apply_alpha_per_configuration():
    model = _model().eval()
    model.plant(0, BLUEPRINT_NAMES.index("conv_small"), gated=False)
    with torch.no_grad():
        for p in seed_parameters(model.slots[0]):
            p.add_(0.3)
    flags = _flags({0: ForwardMode.FULL})
    x, _ = _batch()
    with torch.no_grad():
        on = model(x, torch.ones(3), flags)
        off = model(x, torch.zeros(3), flags)
        stacked = model(x, torch.tensor([[1.0, 0.0]] * 3), flags)  # the model stacks the configurations
    assert torch.allclose(stacked[:8], on, atol=1e-5) and torch.allclose(stacked[8:], off, atol=1e-5)
    assert not torch.allclose(on, off)
