"""``EsperEnv``: the single-environment face of :class:`~esper_env.vector_env.EsperVectorEnv` (width 1)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from esper_env import masks
from esper_env.env_spec import SpecAttribute, id_kwargs
from esper_env.render import RENDER_METADATA
from esper_env.spaces import fill_env_doc
from esper_env.vector_env import EsperVectorEnv


class EsperEnv(gym.Env):
    """
    ## Description
    A host CNN trains on CIFAR-10 (or a synthetic stand-in) inside the environment, and the agent grows it. Once
    per host epoch the agent may plant a *seed* (a module from a catalogue of *blueprints*) in one of the host's
    *slots*, let it blend in, keep it (*fossilize*) or remove it (*prune*). One step = one host training epoch
    plus validation with counterfactual measurements (each blended seed's accuracy contribution). ``host`` picks
    one of two hosts:

    * ``"family"``, the CIFAR-10 ids' default (the task's version 2, ``esper_env.FAMILY_TASK``): a fast modern CNN
      (stem, three pooled conv stages with residual blocks, max-pooled head; ``esper_env.family``) that starts
      from a seedling (``family_widths`` 16/32/32, ``family_stem`` 24, no blocks: 18,456 parameters on CIFAR-10)
      and grows in width and depth up to ``max_widths`` (64/256/256) and ``max_blocks`` (0/1/1), one slot per
      stage. FOSSILIZE joins the seed into the host and frees its slot, so a stage can grow again. The reward
      prices the training FLOPs and the parameters growth costs, and each episode trains under a hidden
      condition (``condition="mixture"``: the pool of training images, label noise, classes in play,
      resolution) that changes how much capacity pays. The goal: the best final accuracy net of those costs.
    * ``"small"``, ``EnvConfig``'s and ``Esper-Synthetic-v0``'s default (and the CIFAR-10 ids' with
      ``**esper_env.SMALL_TASK``: the task of every result committed before version 2): conv blocks of
      ``host_widths`` with a slot after each, seeds that are small residual modules and stay in their slots for
      good. The goal: the best final validation accuracy for the fewest added parameters.

    ## Action Space
    ``MultiDiscrete([5, num_slots, ${num_blueprints}, 3, 3])`` on both hosts, heads in this order:

    | head | values |
    |------|--------|
    | op | 0 WAIT, 1 GERMINATE, 2 ADVANCE, 3 PRUNE, 4 FOSSILIZE |
    | slot | slot index, in forward order (small: one after each block, default 3; family: one per stage) |
    | blueprint | small: ${blueprint_values}; family: 0 deepen, 1 widen_s, 2 widen_l (below) |
    | blend | 0 linear, 1 cosine, 2 gated (masked on the family host) |
    | tempo | blending ramp of 0: 3, 1: 5, 2: 8 epochs |

    Small-host blueprints (``esper_env.blueprints.BLUEPRINTS``), each the identity when planted; ``C`` is the
    slot's channels:

    ${blueprint_list}

    Family blueprints (``esper_env.blueprints.FAMILY_BLUEPRINTS``), each keeping the network's function when
    planted (up to a widen split's small noise); ``C`` is the stage's width. The head's other values are masked
    there, and so is a blueprint that would take its stage past ``max_widths`` or ``max_blocks`` (by default
    deepen only in stages 1 and 2):

    * 0 ``deepen``: a residual block x + BN0(conv3x3(GELU(BN(conv3x3(x))))) after the stage's blocks, BN0 zero
    * 1 ``widen_s``: the stage gains C channels (twice as wide), split from existing channels with noise
    * 2 ``widen_l``: the stage gains 3C channels (four times as wide), split from existing channels with noise

    A seed's life (``esper_env.lifecycle``): GERMINATE plants it; it incubates for ``min_training_epochs``
    (learning beside the host by straight-through while the slot's output stays the host's), blends in over the
    tempo, then holds at alpha 1 until FOSSILIZE keeps it or PRUNE removes it (after ``max_holding_epochs`` it is
    pruned automatically); timers move it along, or the ADVANCE op with ``auto_advance=False``. A family seed
    keeps the function at any amplitude (a widen seed is a split, a deepen seed's last norm starts at zero): it
    is at alpha 1 from germination and its ramp is complete on entering BLENDING (``lifecycle.blends_at_birth``).
    On the small host a fossilized seed stays in its slot for good. On the family host FOSSILIZE joins it: its
    weights become part of the host's layers and optimizer (where they keep the seeds' learning rate), and the
    slot is DORMANT again at once (``lifecycle.JOINING``), free to grow the stage again.

    WAIT reads only ``op``; GERMINATE reads every head; ADVANCE, PRUNE and FOSSILIZE read ``op`` and ``slot``
    (``esper_env.spaces.HEAD_RELEVANCE``). Heads an op does not read are ignored. Masks after every reset and
    step (the methods are on the env itself: Gymnasium 1.x wrappers such as ``gym.make``'s ``OrderEnforcing`` do
    not forward them, so call ``env.unwrapped.action_masks()`` or ``env.get_wrapper_attr("action_masks")()``; the
    vector env has the same methods, batched): ``info["action_mask"]`` (flat bool, the op mask then each head's
    marginal; also ``action_masks()``),
    ``info["op_slot_mask"]`` (bool ``(5, num_slots)``, exact; also ``op_slot_mask()``) and
    ``info["blueprint_mask"]`` (bool ``(num_slots, ${num_blueprints})``: the blueprints GERMINATE may plant in
    each slot; on the small host all True unless ``param_budget_mask`` makes ``param_budget`` a hard limit, on
    the family host the family blueprints that fit their stage's limits; also ``blueprint_mask()``) and
    ``info["blend_mask"]`` (bool ``(num_slots, ${num_blueprints}, 3)``: the blends
    GERMINATE may use for each blueprint in each slot; under a hard budget the gated blend only where the seed
    fits with its gate, on the family host never the gated blend; also ``blend_mask()``). An
    action the masks forbid is executed as WAIT with ``info["invalid_action"] = True``; a malformed action (shape,
    dtype, range, NaN) raises ``ValueError`` and changes nothing.

    ## Observation Space
    ``Box(-1, 1, (${global_size} + ${slot_size} * num_slots,), float32)``; ${default_size} values with the
    default ${default_slots} slots. Unknown values are -1. Global part:

    | index | name | meaning |
    |-------|------|---------|
    | 0 | progress | epochs done / max_epochs |
    | 1 | val_accuracy | validation accuracy (fraction) |
    | 2 | val_loss | symlog(validation loss) / 4 |
    | 3 | train_accuracy | training accuracy over the epoch (fraction) |
    | 4 | train_loss | symlog(training loss) / 4 |
    | 5-9 | val_accuracy_history | previous validation accuracies, newest first (-1: none) |
    | 10-14 | val_loss_history | previous symlog(validation loss) / 4, newest first (-1: none) |
    | 15 | accuracy_delta | clip(10 * change of validation accuracy, -1, 1) |
    | 16 | seed_param_ratio | clip(alpha-weighted seed parameters / host parameters, 0, 4) / 4 |
    | 17-24 | stage_counts | slots in each stage / number of slots |
    | 25-29 | last_op | one-hot of the op executed last step (all 0 at reset) |
    | 30 | last_action_valid | 1 if the last action was valid, 0 if it was executed as WAIT |
    | 31 | params_fraction | family: parameters / the largest architecture's (0 on the small host) |
    | 32 | train_flops_fraction | family: training FLOPs / the largest's, static as long (0 on the small host) |

    Then, for slot ``i``, ${slot_size} values starting at ``${global_size} + ${slot_size} * i``:

    | offset | name | meaning |
    |--------|------|---------|
    ${slot_rows}

    The hidden condition is in none of them.

    ## Rewards
    Default ``reward_mode="accuracy"``: the change of validation accuracy (fraction) minus ``param_penalty``
    times the change of alpha-weighted seed parameters relative to the host (plus ``over_budget_penalty`` on the
    part past ``param_budget``, when one is set), plus optional stage shaping
    (``pbrs_weight``, discount ``pbrs_gamma``) and op costs; the return telescopes to final accuracy minus
    chance minus the parameter cost. ``"contribution"`` and ``"sparse"`` modes: see ``esper_env.rewards``.

    On the family host every mode also charges what growth costs (``esper_env.costs``). With ``P_t`` the network's
    parameters after step ``t`` (the host's plus each live seed's weighted by its alpha), ``C_t`` the training
    FLOPs summed over the epochs so far (incubating seeds included), and the static seedling's parameters
    ``P_ref`` and training FLOPs per epoch ``c_ref``::

        cost_t = flops_price * log2(C_t / (t * c_ref)) + params_price * log2(P_t / P_ref)

    Each step subtracts ``cost_t - cost_{t-1}`` (the sparse mode subtracts ``cost_T`` from its score), so the return
    telescopes to ``(A_T - A_0) - cost_T``, with ``A_0`` the chance accuracy of the classes in play. The static
    seedling pays nothing; growing late costs less than growing early, since ``C_t`` counts the epochs trained
    small. On the CIFAR-10 ids (``flops_price=0.02``, ``params_price=0.01``, ``param_penalty=0``) twice the
    seedling's training compute costs 2 points of accuracy and twice its parameters 1.

    A governor rollback gives ``-rollback_penalty - pbrs_weight * Phi_{t-1}`` (``-rollback_penalty`` alone in
    ``"sparse"`` mode), where ``Phi_{t-1}`` is the slots' summed ``stage_potentials`` before the step: the shaping
    of a move into a terminal state, so that the shaping of an episode with a rollback still telescopes.

    ## Starting State
    Fresh host weights (from the reset seed): the small host, or the family's seedling (``start_widths`` and
    ``start_blocks`` start it at another size, its costs still relative to the seedling); every slot DORMANT; the
    observation's measurements unknown (-1); under ``condition="mixture"`` the episode's condition drawn from the
    reset seed.

    ## Episode End
    ``truncated=True`` after ``max_epochs`` steps (default 25; 20 on the CIFAR-10 ids), which
    ``env.spec.max_episode_steps`` reports.
    ``terminated=True`` only when the governor rolls the host back: a diverged host (non-finite loss, or above
    ``divergence_loss``) or a collapsed one (at chance for ``collapse_patience`` epochs after being clearly above
    it, or with the validation loss stuck at ln(number of classes) while the training loss has stopped falling;
    ``esper_env.episode.collapsed``);
    ``info["rollback"]`` says so. Gymnasium's ``gym.make(..., max_episode_steps=N)`` wraps the env in a
    ``TimeLimit`` the env cannot see: an ``N`` below ``max_epochs`` cuts episodes before the host's learning-rate
    schedule ends, so set ``max_epochs`` instead (``gym.make_vec`` refuses such an ``N``).

    ## Determinism
    On the CPU a seeded episode repeats bit for bit (same machine, torch version and thread count); on CUDA (bf16
    autocast, cuDNN autotuning, atomic reductions) runs with the same seed agree only statistically. The spec's
    ``nondeterministic`` is True for both: ``esper_env.env_spec`` says why.

    ## Info
    After every reset: ``action_mask``, ``op_slot_mask``, ``blueprint_mask``, ``blend_mask``,
    ``holding_steps_left`` (per slot: for a HOLDING seed, at how many more steps, this one included, FOSSILIZE may
    still keep it before the holding timeout prunes it, ``max_holding_epochs`` minus its epochs held, so 1 means
    now or never; 0 elsewhere), ``reset``. After
    every step, the same and ``invalid_action``, ``executed_op``, ``executed_slot`` (-1 for WAIT), ``epoch``,
    ``val_accuracy``, ``val_loss``, ``train_accuracy``, ``train_loss``, ``host_only_accuracy``,
    ``seed_params``, ``images_trained``, per slot ``stage``, ``alpha``, ``blueprint``, ``contribution`` (pp,
    NaN when not measured this step) and ``holding_timeout``; ``rollback``; ``condition`` (the name of the
    episode's hidden training condition, for grouping results; never in the observation); ``test_accuracy`` at
    the last step when ``report_test_accuracy=True``. On the family host also ``params`` (``P_t`` of the
    rewards), ``train_flops`` (``C_t``, cumulative), ``params_reference`` (the seedling's parameters) and
    ``train_flops_reference`` (the seedling's training FLOPs over as many epochs).

    ## Arguments
    Every field of :class:`esper_env.config.EnvConfig` is a keyword argument of ``gym.make`` and
    ``gym.make_vec``, e.g. ``gym.make("Esper-CIFAR10-v0", max_epochs=25, device="cuda")``; numpy scalars of a
    field's kind are accepted and stored as Python values. ``dataset`` must match the id (``Esper-Synthetic-v0``:
    ``"synthetic"``; ``Esper-CIFAR10-*``: ``"cifar10"``). ``autoreset_mode`` belongs to the vector face and is
    refused here: ``gym.make_vec(..., autoreset_mode=...)`` honours it on the native vector env, and Gymnasium's
    ``SyncVectorEnv`` takes it as ``vector_kwargs={"autoreset_mode": ...}``. ``reset(seed=...)`` takes None or an
    integer >= 0, ``reset(options=...)`` None or an empty dict. ``step()`` before ``reset()`` or after the
    episode ended raises ``RuntimeError``; after ``close()``, ``step()`` and ``reset()`` do. The env pickles (and
    deep-copies): the copy continues exactly as the original would.

    The ids add defaults on top of ``EnvConfig``'s, and a kwarg overrides them. Both CIFAR-10 ids take
    ``esper_env.FAMILY_TASK``: ``host="family"``, ``condition="mixture"``, ``max_epochs=20``,
    ``lr_schedule="wsd"``, ``host_lr=0.2``, ``seed_lr=0.4``, ``label_smoothing=0.2``, ``crop_pad=2``,
    ``param_penalty=0.0``, ``flops_price=0.02``, ``params_price=0.01``, ``min_training_epochs=1``,
    ``one_seed_incubating=False``, ``test_flip=True``, ``ema_epochs=1.0``; ``Esper-CIFAR10-Fast-v0`` also sets
    ``train_images_per_epoch=10000`` and ``val_images=2000``. ``gym.make(id, **esper_env.SMALL_TASK)`` gives a
    CIFAR-10 id back the small-host task. ``Esper-Synthetic-v0`` keeps the small host; ``host="family"`` works on
    it too. The family host refuses ``param_budget`` (``params_price`` prices its size); the small host refuses a
    nonzero ``flops_price`` or ``params_price``.

    ``condition`` fixes the episode's hidden training condition to one of ``esper_env.conditions.CONDITIONS`` (a
    pool of distinct training images, label noise on it, classes in play, reduced resolution; every epoch
    trains on as many images whatever the condition, so the step's cost gives nothing away) or, with
    ``"mixture"`` (the CIFAR-10 ids' default), draws one uniformly per episode from the reset seed; ``EnvConfig``'s
    default ``"full"`` trains on the whole split with clean labels. Validation and test accuracy count the images
    of the classes in play only.

    ## Version History
    * v0: initial release. Changed before it was released: under ``autoreset_mode="SameStep"`` a finished
      sub-env's top-level info is its reset info alone and the finished step's info is in ``info["final_info"]``;
      a rollback's reward carries the shaping term; a host collapsed to chance is rolled back like a diverged one
      (the ``collapse_*`` arguments); ``reward_mode="sparse"`` refuses a ``sparse_clip`` below ``sparse_scale``,
      which would pay the same saturated reward for different final accuracies; the CIFAR-10 ids became the
      task's version 2 (the family host, its growth costs and the hidden condition mixture;
      ``esper_env.FAMILY_TASK``), and ``esper_env.SMALL_TASK`` gives them back the task before it; the
      observation gained ``params_fraction`` and ``train_flops_fraction``, and then per slot ``host_width`` and
      ``host_blocks`` (the family host's shape, which a memoryless policy cannot otherwise recover after a
      join); the condition catalogue grew from
      five to nine and then twelve conditions, so under ``"mixture"`` a reset seed may draw another condition
      than it did before each change (a named condition trains as it did); the collapse rule's "validation loss
      stuck at ln(number of classes)" also needs the training loss to have stopped falling, so a slow start is
      no longer rolled back (none of the 2,730 episodes in the CIFAR-10 ids' screen folders had rolled back).
    """

    __doc__ = fill_env_doc(__doc__)  # the catalogue and layout parts of the text above, from esper_env.spaces
    metadata: dict[str, Any] = dict(RENDER_METADATA)
    spec = SpecAttribute()

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        if "autoreset_mode" in kwargs:  # the single env only resets when told: the argument would be ignored
            raise TypeError(f"autoreset_mode={kwargs['autoreset_mode']!r} is an argument of the vector env; a "
                            "single env resets only when reset() is called. Expected it in gym.make_vec(...) for "
                            "the native vector env, or vector_kwargs={'autoreset_mode': ...} with "
                            "vectorization_mode='sync' or 'async'")
        self._vector = EsperVectorEnv(num_envs=1, render_mode=render_mode, autoreset_mode="Disabled", **kwargs)
        self.config = self._vector.config
        self.render_mode = render_mode
        self.action_space = self._vector.single_action_space
        self.observation_space = self._vector.single_observation_space
        self._masks = self._vector.action_masks()[0]

    @property
    def pbrs_gamma(self) -> float:
        return self._vector.pbrs_gamma

    @property
    def pbrs_weight(self) -> float:
        return self._vector.pbrs_weight

    @property
    def vector_env(self) -> EsperVectorEnv:
        return self._vector

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0):
            raise ValueError(f"seed={seed!r}; expected None or an integer >= 0")
        if options is not None and not isinstance(options, dict):
            raise ValueError(f"options={options!r}; expected None or a dict (the single env takes no options)")
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; the single env takes none")
        seed = None if seed is None else int(seed)
        super().reset(seed=seed)
        if seed is None and self._vector._rngs[0] is None:
            seed = int(self.np_random.integers(2**63))
        obs, info = self._vector.reset(seed=seed, options=options)
        return obs[0].copy(), self._unbatch(info)

    def step(self, action: Any):
        self._vector._require_open("step()")
        if self._vector._finished[0]:  # before the first reset or once an episode ended (autoreset is off here)
            raise RuntimeError("step() before reset() or after the episode ended; call reset()")
        actions = masks.validate_actions(action, None, self.action_space.nvec)  # errors in this env's terms
        obs, reward, terminated, truncated, info = self._vector.step(actions)
        return obs[0].copy(), float(reward[0]), bool(terminated[0]), bool(truncated[0]), self._unbatch(info)

    def render(self) -> np.ndarray | None:
        """With ``render_mode="rgb_array"``: an RGB frame of the episode so far (accuracy curve, slot timelines)."""
        frames = self._vector.render()
        return None if frames is None else frames[0]

    def action_masks(self) -> np.ndarray:
        """The current flat (marginal) mask: what sb3-contrib's MaskablePPO reads."""
        return self._masks.copy()

    def op_slot_mask(self) -> np.ndarray:
        return self._vector.op_slot_masks()[0]

    def blueprint_mask(self) -> np.ndarray:
        return self._vector.blueprint_masks()[0]

    def blend_mask(self) -> np.ndarray:
        return self._vector.blend_masks()[0]

    def _unbatch(self, info: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, value in info.items():
            if key.startswith("_") or not info.get(f"_{key}", np.ones(1, dtype=bool))[0]:
                continue
            if isinstance(value, dict):
                out[key] = self._unbatch(value)
            else:
                item = value[0]
                # a Python bool, so that Gymnasium's SyncVectorEnv batches it as bool (np.bool_ becomes object)
                out[key] = item.copy() if isinstance(item, np.ndarray) else bool(item) if isinstance(item, np.bool_) \
                    else item
        self._masks = out.get("action_mask", self._masks)
        return out

    def close(self) -> None:
        self._vector.close()


def _id_entry_point(dataset: str) -> Any:
    def make(**kwargs: Any) -> EsperEnv:
        return EsperEnv(**id_kwargs(dataset, kwargs))

    make.__doc__ = f"Entry point of the ids whose images are {dataset!r}: an EsperEnv that refuses another dataset."
    make.metadata = EsperEnv.metadata  # gym.make reads the creator's render modes
    return make


cifar10_env = _id_entry_point("cifar10")
synthetic_env = _id_entry_point("synthetic")
