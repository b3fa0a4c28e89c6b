"""``EsperVectorEnv``: the native Gymnasium vector env. It orchestrates and owns no rule.

Each step, in order: validate the actions; apply each sub-env's lifecycle op (``episode`` and
``lifecycle`` decide, the engine plants or frees modules); train every sub-env's host one epoch and validate it
with its counterfactual configurations (``engine``, one host sync); run the governor; record measurements and
tick the lifecycle timers; compute rewards (``rewards``); build observations (``observation``) and masks
(``masks``). Spaces, observation layout, reward and info keys are documented on :class:`esper_env.env.EsperEnv`.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from esper_env import masks, spaces
from esper_env.config import EnvConfig
from esper_env.engine import Engine, EpochControl
from esper_env.env_spec import SpecAttribute, check_episode_steps, id_kwargs
from esper_env.episode import (
    Episode,
    Measurement,
    ModuleChange,
    apply_action,
    collapsed,
    diverged,
    finish_epoch,
    measured_contributions,
    rollback,
    seed_params,
)
from esper_env.growth import GrowthLedger, growth_info
from esper_env.host import host_param_count, slot_controls
from esper_env.info import StepRecord, build_step_info, only_rows, reset_info, split_vector_info
from esper_env.lifecycle import BLEND_CURVES, ForwardMode, holding_steps_left, slot_mode
from esper_env.observation import observe
from esper_env.render import RENDER_METADATA, Renderer
from esper_env.rewards import RewardInputs, potential, step_reward
from esper_env.schedule import step_factors
from esper_env.seeds import param_table

FAULTS = ("nan_loss", "exploding_loss", "nan_parameters")


class EsperVectorEnv(VectorEnv):
    """``num_envs`` sub-envs, each training its own host CNN; see :class:`esper_env.env.EsperEnv` for the spec.

    ``autoreset_mode`` takes Gymnasium's ``AutoresetMode`` or its value (``"NextStep"``, ``"SameStep"``,
    ``"Disabled"``). Under ``SameStep`` a finished sub-env's top-level info holds only its reset info (the new
    episode's masks and ``reset``), as in Gymnasium's ``SyncVectorEnv``; the finished step's info is in
    ``info["final_info"]`` and its observation in ``info["final_obs"]``. ``max_episode_steps`` (which
    ``gym.make_vec`` passes on) must be None or ``max_epochs``. Masks of every sub-env: ``action_masks()``,
    ``op_slot_mask()``, ``blueprint_mask()`` and ``blend_mask()``, as on the single env with a leading
    ``num_envs`` axis. ``num_envs`` and ``reset(seed=...)`` take Python or numpy integers. ``step()``,
    ``reset()`` and ``graph_captures`` after ``close()`` raise ``RuntimeError``.
    """

    metadata: dict[str, Any] = {**RENDER_METADATA, "autoreset_mode": AutoresetMode.NEXT_STEP}
    spec = SpecAttribute()

    def __init__(self, num_envs: int = 1, render_mode: str | None = None, max_episode_steps: int | None = None,
                 **kwargs: Any) -> None:
        if isinstance(num_envs, np.integer):  # sweeps built with numpy pass np.int64 (np.bool_ is no np.integer)
            num_envs = int(num_envs)
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r}; expected an integer >= 1")
        if isinstance(kwargs.get("autoreset_mode"), AutoresetMode):
            kwargs["autoreset_mode"] = kwargs["autoreset_mode"].value
        self.config = cfg = EnvConfig.from_kwargs(**kwargs)
        check_episode_steps(max_episode_steps, cfg)
        self.metadata = {**type(self).metadata, "autoreset_mode": AutoresetMode(cfg.autoreset_mode)}
        self.num_envs, self.render_mode = num_envs, render_mode
        if render_mode not in (None, *RENDER_METADATA["render_modes"]):
            raise ValueError(f"render_mode={render_mode!r}; expected None or one of {RENDER_METADATA['render_modes']}")
        self._renderers = [Renderer(cfg.num_slots, cfg.max_epochs, title=f"sub-env {i}" if num_envs > 1 else "",
                                    host=cfg.host) for i in range(num_envs)] if render_mode else []
        self.single_action_space = spaces.action_space(cfg.num_slots)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.single_observation_space = spaces.observation_space(cfg.num_slots)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self._engine = Engine(cfg, num_envs)
        self.dataset_spec = self._engine.trainers[0].data.spec  # every device holds the same dataset
        self.host_params = host_param_count(cfg, self.dataset_spec)
        self._param_table = param_table(cfg)
        trainers = self._engine.trainers
        # The family host's counts and costs (None on the small host, whose seeds stay in their slots).
        self._growth = [GrowthLedger(cfg, self.dataset_spec, t.batches_per_epoch * t.batch_size) for t in trainers
                        ] if cfg.host == "family" else None
        self._episodes = [Episode.fresh(cfg.num_slots) for _ in range(num_envs)]
        self._rngs: list[np.random.Generator | None] = [None] * num_envs
        self._pending_reset = np.zeros(num_envs, dtype=bool)  # NEXT_STEP: reset at the next step
        self._finished = np.ones(num_envs, dtype=bool)  # needs a reset before it may step
        self._faults: dict[int, str] = {}
        self._obs = np.zeros(self.observation_space.shape, dtype=np.float32)
        self._op_slot = np.zeros((num_envs, len(spaces.Op), cfg.num_slots), dtype=bool)
        self._blueprint_mask = np.ones((num_envs, cfg.num_slots, len(spaces.BLUEPRINT_NAMES)), dtype=bool)
        self._blend_mask = np.ones((*self._blueprint_mask.shape, len(BLEND_CURVES)), dtype=bool)
        # seconds in "step", its "engine" part (of which "capture": graph captures), "changes" (seeds planted etc.)
        self.timings: Counter[str] = Counter()

    # --- public API beyond Gymnasium's ----------------------------------------------------------------------
    @property
    def pbrs_gamma(self) -> float:
        """The discount of the shaping term: an agent's gamma must equal it when ``pbrs_weight`` != 0."""
        return self.config.pbrs_gamma

    @property
    def pbrs_weight(self) -> float:
        return self.config.pbrs_weight

    def action_masks(self) -> np.ndarray:
        """The flat (marginal) masks, bool ``(num_envs, sum(nvec))``: what MaskablePPO reads."""
        return np.stack(list(map(masks.flat_action_mask, self._op_slot, self._blueprint_mask, self._blend_mask)))

    def op_slot_masks(self) -> np.ndarray:
        """Which slots each op may target, bool ``(num_envs, num_ops, num_slots)``."""
        return self._op_slot.copy()

    # the single env's names, so that code written for one face finds the masks on the other
    op_slot_mask = op_slot_masks

    def blueprint_masks(self) -> np.ndarray:
        """Which blueprints GERMINATE may plant in each slot, bool ``(num_envs, num_slots, num_blueprints)``."""
        return self._blueprint_mask.copy()

    def blend_masks(self) -> np.ndarray:
        """Which blends GERMINATE may use for each blueprint in each slot, bool ``(num_envs, num_slots,
        num_blueprints, num_blends)``."""
        return self._blend_mask.copy()

    blueprint_mask, blend_mask = blueprint_masks, blend_masks

    def inject_fault(self, index: int, kind: str) -> None:
        """Testing aid: make sub-env ``index``'s next epoch fail (``"nan_loss"``, ``"exploding_loss"`` or
        ``"nan_parameters"``) so the governor's rollback can be exercised."""
        if kind not in FAULTS:
            raise ValueError(f"fault kind {kind!r}; expected one of {sorted(FAULTS)}")
        if not 0 <= index < self.num_envs:
            raise ValueError(f"sub-env index {index}; expected 0 <= index < {self.num_envs}")
        self._faults[index] = kind

    # --- reset ------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        self._require_open("reset()")
        seed = int(seed) if isinstance(seed, np.integer) else seed  # as the single env takes it
        mask = self._reset_mask(options)
        seeds = self._seed_list(seed)
        super().reset(seed=seed if isinstance(seed, int) else None)
        for i in np.flatnonzero(mask):
            if seeds[i] is not None:
                self._rngs[i] = np.random.default_rng(seeds[i])
            elif self._rngs[i] is None:
                self._rngs[i] = np.random.default_rng(int(self.np_random.integers(2**63)))
            self._reset_sub_env(i)
        for i, renderer in enumerate(self._renderers):
            if mask[i]:
                renderer.reset(self.config.num_slots, self.config.max_epochs)
        return self._obs.copy(), self._mask_info(mask)

    def _reset_mask(self, options: dict[str, Any] | None) -> np.ndarray:
        if not isinstance(options, dict | None):
            raise ValueError(f"options={options!r}; expected None or a dict, e.g. {{'reset_mask': ...}}")
        options = options or {}
        unknown = set(options) - {"reset_mask"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; expected only 'reset_mask'")
        mask = options.get("reset_mask")
        if mask is None:
            return np.ones(self.num_envs, dtype=bool)
        if not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.shape == (self.num_envs,)):
            raise ValueError(f"reset_mask={mask!r}; expected a numpy bool array of shape ({self.num_envs},)")
        if not mask.any():
            raise ValueError("reset_mask selects no sub-env; expected at least one True")
        return mask

    def _seed_list(self, seed: int | list[int | None] | None) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, int) and not isinstance(seed, bool):
            return [seed + i for i in range(self.num_envs)]
        if isinstance(seed, list | tuple) and len(seed) == self.num_envs:
            return list(seed)
        raise ValueError(f"seed={seed!r}; expected None, an int, or a list of {self.num_envs} ints/None")

    def _reset_sub_env(self, i: int) -> None:
        rng = self._rngs[i]
        init_seed, data_seed = (int(v) for v in rng.integers(2**63, size=2))
        self._engine.release_graphs(i)
        self._engine.trainers[i].reset(init_seed, data_seed)
        if self._growth:
            self._growth[i].reset()
        self._episodes[i] = Episode.fresh(self.config.num_slots)
        self._sync_plan(i)
        self._pending_reset[i] = self._finished[i] = False
        self._faults.pop(i, None)
        self._refresh_view(i)

    # --- step -------------------------------------------------------------------------------------------
    def step(self, actions: Any):
        self._require_open("step()")
        start = time.perf_counter()
        result = self._step(actions)
        self.timings["step"] += time.perf_counter() - start
        info, finished = result[4], result[4].get("_final_info", np.zeros(self.num_envs, dtype=bool))
        for i, renderer in enumerate(self._renderers):  # a finished SameStep episode's last step: in final_info
            renderer.step(split_vector_info(info["final_info"] if finished[i] else info, i))
        return result

    def _require_open(self, use: str) -> None:
        if self._engine is None:
            raise RuntimeError(f"{use} on a closed env: close() has released its hosts; make a new env")

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One frame per sub-env with ``render_mode="rgb_array"``: its episode so far (``esper_env.render``)."""
        return tuple(r.frame() for r in self._renderers) if self._renderers else None

    @property
    def graph_captures(self) -> int:
        """CUDA graphs captured so far (0 without graphs): each lifecycle change of the modules costs one or two."""
        self._require_open("graph_captures")
        return self._engine.captures

    def _step(self, actions: Any):
        actions = masks.validate_actions(actions, self.num_envs, self.single_action_space.nvec)
        stuck = np.flatnonzero(self._finished & ~self._pending_reset)
        if stuck.size:
            raise RuntimeError(f"sub-env(s) {stuck.tolist()} must be reset before stepping; call "
                               "reset() or reset(options={'reset_mask': ...})")
        resetting = np.flatnonzero(self._pending_reset)
        for i in resetting:
            self._reset_sub_env(i)
        active = [i for i in range(self.num_envs) if i not in set(resetting.tolist())]
        records = {i: self._begin_step(i, actions[i]) for i in active}
        test = [i for i in active if self.config.report_test_accuracy
                and self._episodes[i].epoch + 1 == self.config.max_epochs]
        controls = {i: self._epoch_control(i) for i in active}
        engine_start, captured = time.perf_counter(), self._engine.capture_seconds
        metrics = self._engine.run_epoch(controls, test)
        self.timings["engine"] += time.perf_counter() - engine_start
        self.timings["capture"] += self._engine.capture_seconds - captured
        for i in active:
            self._finish_step(i, records[i], self._engine.trainers[i].read_measurement(metrics[i], i in test))
        return self._autoreset(records)

    def _begin_step(self, i: int, action: np.ndarray) -> StepRecord:
        ep = self._episodes[i]
        valid = masks.is_valid(action, self._op_slot[i], self._blueprint_mask[i], self._blend_mask[i])
        previous = (ep.measurement.val_accuracy if ep.measurement else self._chance(i),
                    self._seed_params(i), potential(ep.stages, self.config))
        changes, pruned = apply_action(ep, action, valid, host=self.config.host)
        self._apply_changes(i, changes)
        slot = -1 if ep.last_op == spaces.Op.WAIT else int(action[spaces.Head.SLOT])
        return StepRecord(valid=valid, op=ep.last_op, slot=slot, previous=previous, pruned_contribution=pruned)

    def _epoch_control(self, i: int) -> EpochControl:
        ep, cfg = self._episodes[i], self.config
        fault = self._faults.pop(i, None)
        batches = self._engine.trainers[i].batches_per_epoch
        factors = step_factors(cfg.lr_schedule, cfg.max_epochs, ep.epoch, batches)
        modes = tuple(slot_mode(s) for s in ep.slots)
        controls = slot_controls(modes, tuple(s.alpha for s in ep.slots))
        return EpochControl(controls, np.outer(factors, (cfg.host_lr, cfg.seed_lr)), fault=fault)

    def _finish_step(self, i: int, record: StepRecord, m: Measurement) -> None:
        ep, cfg = self._episodes[i], self.config
        if self._growth:  # the epoch just trained, with the modules it trained
            self._growth[i].after_epoch(self._engine.trainers[i].model)
        if diverged(m, cfg) or collapsed(ep, m, cfg, self._chance(i)):
            self._engine.trainers[i].restore_snapshot()
            self._apply_changes(i, rollback(ep))
            record.finish(reward=step_reward(self._reward_inputs(i, record, rollback=True), cfg),
                          measurement=m, terminated=True, rollback=True)
            self._refresh_view(i)
            return
        changes, timeouts = finish_epoch(ep, m, cfg)
        self._apply_changes(i, changes)
        if ep.epoch % cfg.snapshot_interval == 0:
            self._engine.trainers[i].save_snapshot()
        ep.done = ep.epoch >= cfg.max_epochs
        reward = step_reward(self._reward_inputs(i, record, rollback=False), cfg)
        record.finish(reward=reward, measurement=m, truncated=ep.done, holding_timeout=timeouts)
        self._refresh_view(i)

    def _reward_inputs(self, i: int, record: StepRecord, rollback: bool) -> RewardInputs:
        ep, m = self._episodes[i], self._episodes[i].measurement
        previous_accuracy, previous_params, previous_potential = record.previous
        growth = self._growth and not rollback
        previous_cost, cost = self._growth[i].charge(self._params(i)) if growth else (0.0, 0.0)
        return RewardInputs(
            accuracy=m.val_accuracy if m else self._chance(i), previous_accuracy=previous_accuracy,
            seed_params=self._seed_params(i), previous_seed_params=previous_params,
            host_params=self.host_params, potential=potential(ep.stages, self.config),
            previous_potential=previous_potential, contributions=measured_contributions(ep),
            pruned_contribution=record.pruned_contribution, executed_op=record.op != spaces.Op.WAIT,
            invalid=not record.valid, last_step=ep.done, rollback=rollback, cost=cost, previous_cost=previous_cost,
        )

    def _autoreset(self, records: dict[int, StepRecord]):
        done = np.zeros(self.num_envs, dtype=bool)
        for i, r in records.items():
            done[i] = r.terminated or r.truncated
        info = self._step_info(records)
        obs = self._obs.copy()
        mode = self.metadata["autoreset_mode"]
        if mode == AutoresetMode.NEXT_STEP:
            self._pending_reset |= done
        elif mode == AutoresetMode.DISABLED:
            self._finished |= done
        elif done.any():
            final_obs = np.empty(self.num_envs, dtype=object)  # Gymnasium: an object array of observations
            final_obs[:] = list(obs)
            final_info = only_rows(info, done)
            for i in np.flatnonzero(done):
                self._reset_sub_env(i)
            obs = self._obs.copy()
            # SyncVectorEnv's layout: a finished sub-env's top-level info is its reset info alone
            info = self._step_info({i: r for i, r in records.items() if not done[i]})
            info.update(final_obs=final_obs, _final_obs=done, final_info=final_info, _final_info=done.copy())
        rewards = np.array([records[i].reward if i in records else 0.0 for i in range(self.num_envs)])
        term = np.array([i in records and records[i].terminated for i in range(self.num_envs)])
        trunc = np.array([i in records and records[i].truncated for i in range(self.num_envs)])
        return obs, rewards, term, trunc, info

    # --- helpers ----------------------------------------------------------------------------------------
    def _step_info(self, records: dict[int, StepRecord]) -> dict[str, Any]:
        """The info of a step in which the sub-envs of ``records`` stepped (the others count as just reset)."""
        info = build_step_info(records, self._episodes, self._mask_info(~np.isin(range(self.num_envs), list(records))),
                               [self._seed_params(i) for i in range(self.num_envs)],
                               [t.episode_data.condition.name for t in self._engine.trainers])
        if self._growth:
            info.update(growth_info(self._growth, [self._params(i) for i in range(self.num_envs)]))
        return info

    def _apply_changes(self, i: int, changes: list[ModuleChange]) -> None:
        start, trainer = time.perf_counter(), self._engine.trainers[i]
        for change in changes:
            if change.kind == "plant":
                init_seed = int(self._rngs[i].integers(2**63))
                trainer.plant_seed(change.slot, change.blueprint, change.gated, init_seed)
            elif change.kind == "join":
                trainer.join_seed(change.slot, int(self._rngs[i].integers(2**63)))
            else:
                trainer.remove_seed(change.slot)
        self._sync_plan(i)
        self.timings["changes"] += time.perf_counter() - start

    def _sync_plan(self, i: int) -> None:
        blended = tuple(slot_mode(s) in (ForwardMode.BLEND, ForwardMode.FULL) for s in self._episodes[i].slots)
        self._engine.trainers[i].set_plan(blended)

    def _table(self, i: int) -> np.ndarray:
        if self._growth:
            return self._growth[i].seed_table(self._engine.trainers[i].model, self._episodes[i].slots)
        return self._param_table

    def _seed_params(self, i: int) -> float:
        return seed_params(self._episodes[i].slots, self._table(i))

    def _params(self, i: int) -> float:
        """The family host's network parameters ``P_t`` (``esper_env.growth``)."""
        return self._growth[i].params(self._engine.trainers[i].model, self._episodes[i].slots)

    def _chance(self, i: int) -> float:
        """Chance accuracy of sub-env ``i``'s episode: among its classes in play."""
        return self._engine.trainers[i].episode_data.chance_accuracy

    def _refresh_view(self, i: int) -> None:
        ep, table = self._episodes[i], self._table(i)
        growth = self._growth[i].fractions(self._params(i)) if self._growth else (0.0, 0.0)
        arch = self._engine.trainers[i].model.arch if self._growth else None
        self._obs[i] = observe(ep, self.config, table, self.host_params, growth, arch)
        self._blend_mask[i] = masks.blend_mask(ep.slots, self.config, table)
        if self._growth:  # where each family blueprint may still grow, never with the gated blend
            self._blend_mask[i] &= self._growth[i].blend_mask(self._engine.trainers[i].model)
        self._blueprint_mask[i] = self._blend_mask[i].any(axis=-1)  # masks.blueprint_mask, without recomputing
        self._op_slot[i] = masks.op_slot_mask(ep.slots, self.config, self._blueprint_mask[i])

    def _mask_info(self, reset: np.ndarray) -> dict[str, np.ndarray]:
        """The masks, each slot's ``holding_steps_left`` and ``reset`` (which sub-envs were just reset) as info."""
        left = np.array([[holding_steps_left(s, self.config) for s in ep.slots] for ep in self._episodes])
        return reset_info(self._op_slot, self._blueprint_mask, self._blend_mask, self.action_masks(), left, reset)

    def close_extras(self, **kwargs: Any) -> None:
        engine, self._engine = self._engine, None  # dropped even if closing it raises (a broken CUDA context)
        if engine is not None:
            engine.close()


def cifar10_vector_env(num_envs: int = 1, **kwargs: Any) -> EsperVectorEnv:
    """Vector entry point of the ``Esper-CIFAR10`` ids: refuses ``dataset`` other than ``"cifar10"``."""
    return EsperVectorEnv(num_envs, **id_kwargs("cifar10", kwargs))


def synthetic_vector_env(num_envs: int = 1, **kwargs: Any) -> EsperVectorEnv:
    """Vector entry point of ``Esper-Synthetic-v0``: refuses ``dataset`` other than ``"synthetic"``."""
    return EsperVectorEnv(num_envs, **id_kwargs("synthetic", kwargs))
