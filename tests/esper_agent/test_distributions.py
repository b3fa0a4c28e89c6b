"""Masked categorical and the factored op-first action."""

from __future__ import annotations

import math

import pytest
import torch
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.distributions import (
    MASK_FILL,
    PLACEHOLDER,
    ActionMasks,
    MaskedCategorical,
    evaluate_factored,
    factored_kl,
    sample_factored,
)
from esper_env import spaces
from esper_env.spaces import Head, Op

NUM_SLOTS = 3
SIZES = spaces.head_sizes(NUM_SLOTS)
RELEVANCE = torch.as_tensor(spaces.relevance_matrix())


def random_masks(batch: int, generator: torch.Generator) -> ActionMasks:
    """Random op_slot tables with WAIT always valid and the flat mask derived like the env's."""
    op_slot = torch.rand(batch, len(Op), NUM_SLOTS, generator=generator) < 0.4
    op_slot[:, Op.WAIT] = True
    flat = torch.ones(batch, sum(SIZES), dtype=torch.bool)
    flat[:, : len(Op)] = op_slot.any(-1)
    return ActionMasks(op_slot, flat)


def test_masked_values_are_never_sampled() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 7, generator=g) * 5
    mask = torch.rand(64, 7, generator=g) < 0.5
    mask[:, 3] = True
    # Make the masked values the most attractive ones: masking must win over any logit.
    logits = torch.where(mask, logits, torch.full_like(logits, 50.0))
    dist = MaskedCategorical(logits, mask)
    for _ in range(200):
        draws = dist.sample(g)
        assert mask.gather(1, draws[:, None]).all()
    assert mask.gather(1, dist.mode()[:, None]).all()


def test_policy_never_samples_a_masked_factored_action() -> None:
    g = torch.Generator().manual_seed(1)
    batch = 256
    masks = random_masks(batch, g)
    masks.flat[:, sum(SIZES[:2]) + 2] = False  # forbid blueprint 2 as a future env might
    logits = [torch.randn(batch, n, generator=g) * 3 for n in SIZES]
    rows = torch.arange(batch)
    for _ in range(50):
        sample = sample_factored(logits, masks, RELEVANCE, g)
        op, slot = sample.action[:, Head.OP], sample.action[:, Head.SLOT]
        assert masks.op_slot.any(-1)[rows, op].all()
        slot_relevant = RELEVANCE[op, Head.SLOT]
        assert masks.op_slot[rows, op, slot][slot_relevant].all()
        germinate = op == Op.GERMINATE
        assert (sample.action[germinate, Head.BLUEPRINT] != 2).all()
        irrelevant = ~RELEVANCE[op]
        assert (sample.action[irrelevant] == PLACEHOLDER).all()


def test_normalized_entropy_and_single_valid_value() -> None:
    logits = torch.zeros(3, 4)
    mask = torch.tensor([[True, True, True, True], [True, True, False, False], [False, True, False, False]])
    dist = MaskedCategorical(logits, mask)
    assert torch.allclose(dist.entropy(), torch.tensor([math.log(4), math.log(2), 0.0]))
    assert torch.allclose(dist.normalized_entropy(), torch.tensor([1.0, 1.0, 0.0]))
    assert dist.log_prob(torch.tensor([0, 1, 1]))[2].item() == 0.0
    assert dist.normalized_entropy()[2].item() == 0.0


def test_all_false_mask_raises() -> None:
    mask = torch.tensor([[True, False], [False, False]])
    with pytest.raises(ValueError, match="row"):
        MaskedCategorical(torch.zeros(2, 2), mask)


def test_float32_whatever_the_logits_dtype() -> None:
    logits = torch.randn(4, 5).to(torch.bfloat16)
    dist = MaskedCategorical(logits, torch.ones(4, 5, dtype=torch.bool))
    assert dist.log_probs.dtype == torch.float32
    assert torch.isfinite(dist.log_probs).all()


def test_irrelevant_heads_contribute_exactly_zero() -> None:
    """WAIT and ADVANCE/PRUNE/FOSSILIZE steps: the heads they ignore add exactly 0 to log-prob, entropy and KL,
    whatever those heads' logits are, before and after a parameter change."""
    g = torch.Generator().manual_seed(2)
    batch = 128
    masks = random_masks(batch, g)
    old_logits = [torch.randn(batch, n, generator=g) for n in SIZES]
    sample = sample_factored(old_logits, masks, RELEVANCE, g)
    # New logits: only the irrelevant heads' logits change, wildly.
    relevant = RELEVANCE[sample.action[:, Head.OP]]
    new_logits = [lg.clone() for lg in old_logits]
    for head in range(1, len(SIZES)):
        noise = torch.randn(batch, SIZES[head], generator=g) * 100
        new_logits[head] = torch.where(relevant[:, head : head + 1], new_logits[head], noise)
    old = evaluate_factored(old_logits, sample.used_mask, sample.action, RELEVANCE)
    new = evaluate_factored(new_logits, sample.used_mask, sample.action, RELEVANCE)
    assert torch.equal(old.log_prob, new.log_prob)  # joint KL/ratio therefore unchanged: exactly
    log_ratio = new.log_prob - old.log_prob
    assert torch.equal((log_ratio.exp() - 1) - log_ratio, torch.zeros(batch))
    assert (old.entropy[~relevant] == 0).all() and (new.entropy[~relevant] == 0).all()
    assert not old.available[~relevant].any()
    assert torch.allclose(old.log_prob, sample.log_prob)


def test_irrelevant_heads_get_exactly_zero_gradient() -> None:
    g = torch.Generator().manual_seed(3)
    batch = 32
    masks = random_masks(batch, g)
    masks.op_slot[:, 1:] = False  # only WAIT valid: every other head is irrelevant
    masks.flat[:, 1 : len(Op)] = False
    logits = [torch.randn(batch, n, generator=g, requires_grad=True) for n in SIZES]
    sample = sample_factored([lg.detach() for lg in logits], masks, RELEVANCE, g)
    assert (sample.action[:, Head.OP] == Op.WAIT).all()
    ev = evaluate_factored(logits, sample.used_mask, sample.action, RELEVANCE)
    (ev.log_prob.sum() + ev.entropy.sum()).backward()
    for head in range(len(SIZES)):
        assert torch.equal(logits[head].grad, torch.zeros_like(logits[head]))  # op has a single valid value too


@pytest.mark.parametrize("scale", [0.0, 1.0, 1e4, 1e30])
def test_loss_terms_finite_on_adversarial_masks(scale: float) -> None:
    """Single-valid heads, masks that forbid the arg-max, huge logits: log-probs, entropies and their gradients
    stay finite."""
    g = torch.Generator().manual_seed(4)
    batch = 64
    masks = random_masks(batch, g)
    masks.op_slot[: batch // 2, 1:] = False
    masks.flat[: batch // 2, 1 : len(Op)] = False
    logits = [(torch.randn(batch, n, generator=g) * scale).requires_grad_() for n in SIZES]
    sample = sample_factored([lg.detach() for lg in logits], masks, RELEVANCE, g)
    ev = evaluate_factored(logits, sample.used_mask, sample.action, RELEVANCE)
    loss = -(ev.log_prob.mean()) - ev.entropy.sum(-1).mean()
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(lg.grad).all() for lg in logits)
    assert (ev.log_prob > MASK_FILL / 2).all()  # a sampled value is never a masked one


def test_the_blueprint_mask_applies_to_the_sampled_slot() -> None:
    """With ``ActionMasks.blueprint``, GERMINATE draws its blueprint among those allowed in the slot it drew, the
    stored mask says so, and evaluating the stored mask gives back the sample's log-prob."""
    g = torch.Generator().manual_seed(5)
    batch = 512
    masks = random_masks(batch, g)
    blueprint = torch.rand(batch, NUM_SLOTS, SIZES[Head.BLUEPRINT], generator=g) < 0.3
    blueprint[:, :, 1] |= ~blueprint.any(-1)  # the env never offers GERMINATE where no blueprint is allowed
    masks = masks._replace(blueprint=blueprint)
    rows, start = torch.arange(batch), sum(SIZES[:2])
    germinated = 0
    for _ in range(20):
        logits = [torch.randn(batch, n, generator=g) * 5 for n in SIZES]  # sharp: masking must win over them
        sample = sample_factored(logits, masks, RELEVANCE, g)
        germinate = sample.action[:, Head.OP] == Op.GERMINATE
        slot, drawn = sample.action[:, Head.SLOT], sample.action[:, Head.BLUEPRINT]
        assert blueprint[rows, slot, drawn][germinate].all()
        used = sample.used_mask[:, start : start + SIZES[Head.BLUEPRINT]]
        assert torch.equal(used[germinate], blueprint[rows, slot][germinate])  # the flat part is all True here
        evaluated = evaluate_factored(logits, sample.used_mask, sample.action, RELEVANCE)
        assert torch.allclose(evaluated.log_prob, sample.log_prob)
        germinated += int(germinate.sum())
    assert germinated > 500


def test_the_blend_mask_applies_to_the_sampled_slot_and_blueprint() -> None:
    """With ``ActionMasks.blend``, GERMINATE draws its blend among those allowed for the slot and blueprint it drew
    (a gate may not fit the budget), the stored mask is exactly that row, and evaluating the stored mask gives back
    the sample's log-prob bit for bit."""
    g = torch.Generator().manual_seed(6)
    batch = 512
    masks = random_masks(batch, g)
    blend = torch.rand(batch, NUM_SLOTS, SIZES[Head.BLUEPRINT], SIZES[Head.BLEND], generator=g) < 0.5
    blend[..., 0] |= ~blend.any(-1)  # the env never offers a blueprint that no blend may plant
    masks = masks._replace(blueprint=blend.any(-1), blend=blend)
    rows, start = torch.arange(batch), sum(SIZES[:3])
    germinated, restricted = 0, 0
    for _ in range(20):
        # Sharp logits: masking must win over them.
        logits = [torch.randn(batch, n, generator=g) * 5 for n in SIZES]
        sample = sample_factored(logits, masks, RELEVANCE, g)
        germinate = sample.action[:, Head.OP] == Op.GERMINATE
        slot, blueprint = sample.action[:, Head.SLOT], sample.action[:, Head.BLUEPRINT]
        allowed = blend[rows, slot, blueprint]  # (batch, num_blends)
        assert allowed[rows, sample.action[:, Head.BLEND]][germinate].all()
        used = sample.used_mask[:, start : start + SIZES[Head.BLEND]]
        assert torch.equal(used[germinate], allowed[germinate])  # the flat part is all True here
        evaluated = evaluate_factored(logits, sample.used_mask, sample.action, RELEVANCE)
        assert torch.equal(evaluated.log_prob, sample.log_prob)
        germinated += int(germinate.sum())
        restricted += int((~allowed.all(-1) & germinate).sum())
    assert germinated > 500 and restricted > 250


def test_slot_conditioned_heads_use_the_row_of_the_sampled_slot() -> None:
    """Heads after the slot head may give one row of logits per slot: GERMINATE then draws from the row of the
    slot it drew (here each slot's row all but forces a different blueprint), and evaluating the stored action
    picks the same row, giving back the sample's log-prob."""
    g = torch.Generator().manual_seed(7)
    batch = 256
    masks = random_masks(batch, g)
    logits = [torch.randn(batch, n, generator=g) for n in SIZES[:2]]
    favoured = torch.tensor([1, 4, 2])  # the blueprint each slot's row favours
    per_slot = [torch.randn(batch, NUM_SLOTS, n, generator=g) for n in SIZES[2:]]
    per_slot[0][:, torch.arange(NUM_SLOTS), favoured] += 30.0
    sample = sample_factored(logits + per_slot, masks, RELEVANCE, g)
    germinate = sample.action[:, Head.OP] == Op.GERMINATE
    assert germinate.sum() > 10
    slot = sample.action[:, Head.SLOT]
    assert torch.equal(sample.action[germinate, Head.BLUEPRINT], favoured[slot[germinate]])
    evaluated = evaluate_factored(logits + per_slot, sample.used_mask, sample.action, RELEVANCE)
    assert torch.allclose(evaluated.log_prob, sample.log_prob)
    # Over time too, (B, T, num_slots, size): the evaluation indexes each step's own slot.
    steps = [lg.unsqueeze(1).expand(-1, 2, *lg.shape[1:]) for lg in logits + per_slot]
    over_time = evaluate_factored(steps, sample.used_mask.unsqueeze(1).expand(-1, 2, -1),
                                  sample.action.unsqueeze(1).expand(-1, 2, -1), RELEVANCE)
    assert torch.allclose(over_time.log_prob, sample.log_prob.unsqueeze(1).expand(-1, 2))


def test_factored_kl_is_each_heads_kl_along_the_stored_action() -> None:
    g = torch.Generator().manual_seed(5)
    masks = random_masks(32, g)
    ref = [torch.randn(32, n, generator=g) for n in SIZES]
    cur = [torch.randn(32, n, generator=g) for n in SIZES]
    sample = sample_factored(cur, masks, RELEVANCE, g)
    current = evaluate_factored(cur, sample.used_mask, sample.action, RELEVANCE)
    kl = factored_kl(ref, current, sample.used_mask, sample.action, RELEVANCE)
    assert torch.equal(factored_kl(cur, current, sample.used_mask, sample.action, RELEVANCE), torch.zeros_like(kl))
    op_mask = sample.used_mask[:, : SIZES[0]]
    p, q = (torch.distributions.Categorical(logits=lg.masked_fill(~op_mask, -math.inf)) for lg in (ref[0], cur[0]))
    torch.testing.assert_close(kl[:, 0], torch.distributions.kl_divergence(p, q))  # the op head: its whole KL
    relevant = RELEVANCE[sample.action[:, 0]]
    assert (kl[~relevant] == 0).all() and (kl[relevant] >= -1e-6).all()
    assert (kl[:, Head.SLOT] > 0).any()  # the heads after the op differ too where they matter


def test_factored_kl_reads_the_stored_slots_row_of_a_slot_conditioned_head() -> None:
    g = torch.Generator().manual_seed(6)
    masks = random_masks(16, g)
    ref = [torch.randn(16, n, generator=g) for n in SIZES]
    cur = [lg.clone() for lg in ref]
    blueprint = Head.BLUEPRINT
    ref[blueprint] = ref[blueprint].unsqueeze(1).repeat(1, NUM_SLOTS, 1)  # one row per slot, all alike ...
    cur[blueprint] = ref[blueprint].clone()
    sample = sample_factored(cur, masks, RELEVANCE, g)
    other = (sample.action[:, Head.SLOT] + 1) % NUM_SLOTS
    cur[blueprint][torch.arange(16), other] += torch.randn(16, SIZES[blueprint], generator=g)  # ... but unused rows
    current = evaluate_factored(cur, sample.used_mask, sample.action, RELEVANCE)
    kl = factored_kl(ref, current, sample.used_mask, sample.action, RELEVANCE)
    assert torch.equal(kl, torch.zeros_like(kl))
