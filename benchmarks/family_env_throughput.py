"""Host-training throughput of the env on the growable family host, against the bare family, in one run.

For each ``num_envs`` N, four env cases (``gym.make_vec(..., host="family", autoreset_mode="SameStep")``):

* ``seedling``: WAIT only, the seedling alone;
* ``largest``: WAIT only, started at the largest architecture (``start_widths``/``start_blocks`` =
  ``max_widths``/``max_blocks``);
* ``random``: uniform over the valid joint actions (``esper_agent.baselines.RandomValidActor``);
* ``grow``: :class:`GrowActor`, which fossilizes whenever it may and else germinates whenever it may, so that
  seeds keep joining the host (new shapes, re-captured graphs, a rebuilt optimizer);

and, on the same device, the bare family of ``benchmarks.family_throughput`` (:func:`train_trajectory`) with
N models side by side at the same batch size and image size: ``plain`` (an eager loop) and, on CUDA, ``graphs``
(one CUDA graph per model on its own stream) at the seedling and the largest architecture; for the growth
cases, the architectures each sub-env trained in each timed step (its host with its live seeds as if joined,
which is what the step computes) replayed by the bare models step for step, growing in place or starting afresh
where they change (``graphs`` on CUDA, ``plain`` elsewhere). The bare replay only trains: no validation, no
lifecycle, no separate seed modules; where the shapes shrink (a reset, a pruned seed) it makes a fresh model,
and each re-capture's three eager warm-up steps count as trained images.

Env rows time whole vector steps (training, validation with its counterfactuals, lifecycle, joins, re-captures,
observation, masks, resets at episode ends) after warm-up steps: ``--steps`` steps for the WAIT cases, one
episode's worth (``--epochs``) for the growth cases. images/s = images trained in the timed steps / their wall
seconds (the policy's choice of actions included: microseconds against the step's seconds); every step ends in
the env's one host sync, and the timed region is CUDA-synchronised at both ends.
Each env row also says where its time went: graph captures (``graph_captures``) and seconds in the step, in
its engine part (training + validation), in capturing graphs and in planting, joining and removing seeds
(``env.timings``). ``ratios`` divide each env rate by its case's bare
rates; the goal for this host: ``random`` at 8 sub-envs at least 0.70 of ``graphs``.

    python -m benchmarks.family_env_throughput --num-envs 1 8 --out family_env_throughput.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import esper_env
from benchmarks.common import device_name, run_stamp, write_atomic, write_json
from benchmarks.family_throughput import POOL, random_data, train_trajectory
from benchmarks.throughput import CIFAR_SHAPED
from esper_agent.baselines import Actor, RandomValidActor, StaticActor
from esper_agent.distributions import ActionMasks
from esper_agent.envs import VectorEnvDriver
from esper_env.architecture import Architecture
from esper_env.config import EnvConfig
from esper_env.lifecycle import TEMPOS
from esper_env.masks import fill_heads
from esper_env.spaces import Head, Op

CASES = ("seedling", "largest", "random", "grow")
GROWTH_CASES = ("random", "grow")
GOAL = 0.70  # the env under random growth at 8 sub-envs: at least this fraction of the bare graphs' rate


class GrowActor:
    """FOSSILIZE whenever a slot may be fossilized, else GERMINATE whenever a slot may take a seed (slot,
    blueprint and blend uniform among the allowed ones, at the fastest tempo), else WAIT: the policy that makes
    seeds join the host as often as the lifecycle's timers allow."""

    def __init__(self, head_sizes: tuple[int, ...], seed: int = 0) -> None:
        self.nvec = np.array(head_sizes)
        self.rng = np.random.default_rng(seed)

    def reset(self, num_envs: int) -> None:
        del num_envs

    def act(self, obs: np.ndarray, masks: ActionMasks, episode_start: np.ndarray) -> np.ndarray:
        actions = np.zeros((obs.shape[0], len(self.nvec)), np.int64)
        for i, op_slot in enumerate(masks.op_slot):
            op = next((op for op in (Op.FOSSILIZE, Op.GERMINATE) if op_slot[op].any()), Op.WAIT)
            if op != Op.WAIT:
                blueprints = None if masks.blueprint is None else masks.blueprint[i]
                blends = None if masks.blend is None else masks.blend[i]
                actions[i] = fill_heads(op, op_slot, self.nvec, self.rng, blueprints, blends)
            if op == Op.GERMINATE:
                actions[i, Head.TEMPO] = int(np.argmin(TEMPOS))  # tempo is never masked
        return actions


def trained_architecture(model: Any) -> Architecture:
    """What a family host trains in one step: its architecture with every live seed as if joined (a widen
    seed's channels added to its stage, a deepen seed as one more block), which has the same shapes and FLOPs."""
    arch = model.arch
    for k, slot in enumerate(model.slots):
        if slot.seed is not None:
            arch = arch.widened(k, arch.widths[k] + slot.seed.conv.out_channels) if slot.widens else arch.deepened(k)
    return arch


def _engine(envs: gym.vector.VectorEnv) -> Any:
    # The env exposes no architecture per sub-env: the benchmark reads its engine's trainers (read only).
    return envs.unwrapped._engine


def record_architectures(envs: gym.vector.VectorEnv) -> list[list[Architecture]]:
    """A list that gets, at every step, the architecture each sub-env trains (:func:`trained_architecture`),
    read after the step's actions and before its epoch (the engine's ``run_epoch`` is wrapped for that)."""
    engine, log = _engine(envs), []
    run_epoch = engine.run_epoch

    def recording(controls: dict, test: Any = ()) -> np.ndarray:
        if len(controls) != len(engine.trainers):
            raise RuntimeError(f"{len(controls)} of {len(engine.trainers)} sub-envs trained in a step; expected "
                               "all of them (autoreset_mode='SameStep')")
        log.append([trained_architecture(t.model) for t in engine.trainers])
        return run_epoch(controls, test)

    engine.run_epoch = recording
    return log


def env_setup(args: argparse.Namespace) -> tuple[str, dict[str, Any], EnvConfig]:
    """The env id, its keyword arguments and its config: CIFAR-shaped synthetic images unless ``--data-dir``
    names real CIFAR-10 (the rate does not depend on what the pixels show), then ``--env-kwargs`` on top."""
    env_id = args.env or ("Esper-CIFAR10-v0" if args.data_dir else "Esper-Synthetic-v0")
    if env_id not in esper_env.ENV_IDS:
        raise ValueError(f"--env {env_id!r}; expected one of {sorted(esper_env.ENV_IDS)}")
    synthetic = esper_env.ENV_IDS[env_id].get("dataset") == "synthetic"
    kwargs: dict[str, Any] = {**(CIFAR_SHAPED if synthetic else {}), "host": "family", "device": args.device}
    for key, value in (("max_epochs", args.epochs), ("train_images_per_epoch", args.train_images),
                       ("data_dir", args.data_dir and str(args.data_dir))):
        if value:
            kwargs[key] = value
    kwargs.update(json.loads(args.env_kwargs))
    return env_id, kwargs, EnvConfig.from_kwargs(**{**esper_env.ENV_IDS[env_id], **kwargs})


def case_kwargs(case: str, kwargs: dict[str, Any], cfg: EnvConfig) -> dict[str, Any]:
    """``kwargs`` for ``case``: the ``largest`` case starts every episode at the largest architecture."""
    if case == "largest":
        return {**kwargs, "start_widths": cfg.max_widths, "start_blocks": cfg.max_blocks}
    return kwargs


def _actor(case: str, head_sizes: tuple[int, ...]) -> Actor:
    if case == "random":
        return RandomValidActor(head_sizes, seed=0)
    return GrowActor(head_sizes, seed=0) if case == "grow" else StaticActor()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()  # sync: timing boundary


def env_run(env_id: str, kwargs: dict[str, Any], num_envs: int, case: str, steps: int, warmup: int) -> dict:
    """One env case (``kwargs``: :func:`case_kwargs`): images/s over ``steps`` vector steps after ``warmup``,
    where the time went, and the architectures each sub-env trained in the timed steps (``trajectory``, for the
    bare replay)."""
    envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                        autoreset_mode="SameStep", **kwargs)
    env, driver = envs.unwrapped, VectorEnvDriver(envs)
    trajectory = record_architectures(envs)
    actor = _actor(case, driver.head_sizes)
    actor.reset(num_envs)
    obs, masks = driver.reset(seed=0)
    starts, images, ops = np.ones(num_envs, bool), 0, Counter()
    for phase, count in (("warmup", warmup), ("timed", steps)):
        _sync(kwargs["device"])
        env.timings.clear()
        del trajectory[:]
        captures, start = env.graph_captures, time.perf_counter()
        for _ in range(count):
            actions = actor.act(obs, masks, starts)
            step = driver.step(actions)
            obs, masks, starts = step.obs, step.masks, step.episode_start
            if phase == "timed":
                trained, present = step.info["images_trained"]
                images += int(trained[present].sum())
                ops.update(Op(op).name.lower() for op in actions[:, Head.OP] if op != Op.WAIT)
        _sync(kwargs["device"])
        seconds = time.perf_counter() - start
    shape = _engine(envs).trainers[0]
    row = {"runner": "env", "num_envs": num_envs, "case": case, "steps": steps, "warmup_steps": warmup,
           "images": images, "seconds": seconds, "images_per_s": images / seconds,
           "graph_captures": env.graph_captures - captures, "step_s": env.timings["step"],
           "engine_s": env.timings["engine"], "outside_engine_s": env.timings["step"] - env.timings["engine"],
           "capture_s": env.timings["capture"], "changes_s": env.timings["changes"],
           "ops": dict(ops), "architectures": len({a for archs in trajectory for a in archs}),
           "batch": shape.batch_size, "batches_per_step": shape.batches_per_epoch,
           "image_size": env.dataset_spec.image_size, "trajectory": [list(archs) for archs in trajectory]}
    envs.close()
    return row


def bare_rows(env_rows: dict[str, dict], args: argparse.Namespace, device: torch.device) -> list[dict]:
    """The bare family on the env rows' shapes: plain (and graphs on CUDA) at the WAIT cases' constant
    architecture for ``--baseline-batches`` batches per model; each growth case's trajectory replayed."""
    first = env_rows["seedling"]
    data = random_data(POOL * first["batch"], first["image_size"], device)
    runners = ("plain", "graphs") if device.type == "cuda" else ("plain",)
    rows = []
    for case, env_row in env_rows.items():
        if case in GROWTH_CASES:
            plans = [(runners[-1], env_row["trajectory"], env_row["batches_per_step"])]
        else:
            plans = [(runner, env_row["trajectory"][:1], args.baseline_batches) for runner in runners]
        for runner, trajectory, batches in plans:
            result = train_trajectory(trajectory, runner == "graphs", batches, data, first["batch"])
            rows.append({"runner": runner, "num_envs": env_row["num_envs"], "case": case, **result})
            print(json.dumps(_printable(rows[-1])), flush=True)
    return rows


def _public(row: dict) -> dict:
    """A row without its trajectory (architectures are no JSON; the row counts them instead)."""
    return {k: v for k, v in row.items() if k != "trajectory"}


def _printable(row: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in _public(row).items()}


def ratios(rows: list[dict]) -> list[dict]:
    """Each env row's rate over the bare rates of its case and sub-env count (None where a runner did not run)."""
    bare = {(r["runner"], r["num_envs"], r["case"]): r["images_per_s"] for r in rows if r["runner"] != "env"}
    out = []
    for r in rows:
        if r["runner"] == "env":
            of = {runner: bare.get((runner, r["num_envs"], r["case"])) for runner in ("plain", "graphs")}
            out.append({"num_envs": r["num_envs"], "case": r["case"],
                        **{f"env_over_{k}": r["images_per_s"] / v if v else None for k, v in of.items()}})
    return out


def measure(args: argparse.Namespace) -> dict:
    """Every case at every sub-env count: the env first, then the bare family on its shapes (an env's graphs
    and the bare ones never coexist: closing the last env frees cuBLAS's workspaces, see ``Engine.close``)."""
    env_id, kwargs, cfg = env_setup(args)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as the env's engine: fixed shapes, each conv autotuned once
    rows = []
    for n in args.num_envs:
        env_rows = {}
        for case in CASES:
            steps = cfg.max_epochs if case in GROWTH_CASES else args.steps
            env_rows[case] = env_run(env_id, case_kwargs(case, kwargs, cfg), n, case, steps, args.warmup)
            print(json.dumps(_printable(env_rows[case])), flush=True)
        rows += [*env_rows.values(), *bare_rows(env_rows, args, device)]
    return {**run_stamp(), "device": device_name(args.device), "env": env_id, "env_kwargs": kwargs,
            "episode_epochs": cfg.max_epochs,
            "rows": [_public(r) for r in rows], "ratios": ratios(rows)}


def markdown(result: dict) -> str:
    """The table: per sub-env count and case, the env's rate, the bare rates, their ratios and where the env's
    time went; then the goal's line where it was measured."""
    rows, first = result["rows"], result["rows"][0]
    bare = {(r["runner"], r["num_envs"], r["case"]): r["images_per_s"] for r in rows if r["runner"] != "env"}
    of = {(r["num_envs"], r["case"]): r for r in result["ratios"]}
    lines = [f"Device: {result['device']}, torch {result['torch']}. `{result['env']}` with `host=\"family\"`, "
             f"{first['batch'] * first['batches_per_step']:,} training images per sub-env step (batch "
             f"{first['batch']}, {first['image_size']} px), episodes of {result['episode_epochs']} epochs. "
             "Bare rows train the same architectures (growth cases: replayed step for step).", "",
             "| sub-envs | case | env images/s | plain images/s | graphs images/s | env / plain | env / graphs "
             "| joins | captures | capturing | seed changes | outside engine |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in (r for r in rows if r["runner"] == "env"):
        key, ratio = (r["num_envs"], r["case"]), of[(r["num_envs"], r["case"])]
        cells = [_num(bare.get(("plain", *key))), _num(bare.get(("graphs", *key))),
                 _ratio(ratio["env_over_plain"]), _ratio(ratio["env_over_graphs"])]
        lines.append(f"| {r['num_envs']} | {r['case']} | {_num(r['images_per_s'])} | {' | '.join(cells)} | "
                     f"{r['ops'].get('fossilize', 0)} | {r['graph_captures']} | "
                     f"{_share(r.get('capture_s'), r['step_s'])} | {_share(r.get('changes_s'), r['step_s'])} | "
                     f"{_share(r['outside_engine_s'], r['step_s'])} |")
    goal = of.get((8, "random"), {}).get("env_over_graphs")
    if goal is not None:
        lines += ["", f"Goal (random growth, 8 sub-envs, env / graphs >= {GOAL:.2f}): {goal:.2f}, "
                  f"{'met' if goal >= GOAL else 'not met'}."]
    return "\n".join(lines) + "\n"


def _share(seconds: float | None, of: float) -> str:
    """``seconds`` as a percentage of ``of`` ("-" where not measured: rows from before the column existed)."""
    return "-" if seconds is None else f"{100 * seconds / of:.1f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.family_env_throughput",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 8], help="sub-envs (count), one run each")
    parser.add_argument("--steps", type=int, default=5, help="timed vector steps of the WAIT cases (count)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="episode length (epochs; default the env's); the growth cases time this many steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed vector steps before each env case (count)")
    parser.add_argument("--baseline-batches", type=int, default=120,
                        help="timed batches per bare model at the WAIT cases' architectures (count)")
    parser.add_argument("--train-images", type=int, default=None,
                        help="training images per sub-env epoch (default the env's: all 45k)")
    parser.add_argument("--env", default=None, help="env id (default Esper-CIFAR10-v0 with --data-dir, else "
                        "Esper-Synthetic-v0 with CIFAR-shaped images)")
    parser.add_argument("--data-dir", type=Path, default=None, help="real CIFAR-10 (the env's data_dir)")
    parser.add_argument("--env-kwargs", default="{}", help="JSON of further env kwargs, applied last")
    parser.add_argument("--out", type=Path, required=True, help="the JSON file; the table goes beside it (.md)")
    args = parser.parse_args(argv)
    result = measure(args)
    write_json(args.out, result)
    table = markdown(result)
    write_atomic(args.out.with_suffix(".md"), table)
    print(table)


if __name__ == "__main__":
    main()
