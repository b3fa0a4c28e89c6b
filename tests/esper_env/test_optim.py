"""NesterovSGD makes the same updates as torch.optim.SGD(nesterov=True), fused or not."""

from __future__ import annotations

import pytest
import torch

from esper_env.optim import NesterovSGD


@pytest.mark.parametrize("fused", [True, False])
def test_matches_torch_sgd_with_separate_seed_learning_rate(fused):
    torch.manual_seed(0)
    host = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    seed = [torch.nn.Parameter(torch.randn(2, 2))]
    ours = NesterovSGD(host, momentum=0.9, weight_decay=5e-4)
    if fused and not ours.fused:
        pytest.skip("torch._fused_sgd_ is not available on this device")
    ours.fused = fused
    ours.add_group(0, seed)
    ref_host = [torch.nn.Parameter(p.detach().clone()) for p in host]
    ref_seed = [torch.nn.Parameter(p.detach().clone()) for p in seed]
    reference = torch.optim.SGD([{"params": ref_host, "weight_decay": 5e-4}, {"params": ref_seed, "lr": 0.05}],
                                lr=0.1, momentum=0.9, nesterov=True)
    for _ in range(4):
        for mine, theirs in zip(host + seed, ref_host + ref_seed, strict=True):
            grad = torch.randn_like(mine)
            mine.grad, theirs.grad = grad.clone(), grad.clone()
        ours.step(torch.tensor([0.1, 0.05]))
        reference.step()
    for mine, theirs in zip(host + seed, ref_host + ref_seed, strict=True):
        assert torch.allclose(mine, theirs, atol=1e-6)
    ours.remove_group(0)
    assert not ours.seeds
