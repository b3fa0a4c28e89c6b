"""The head-to-head: every policy on the same env config, seeds and budget of host epochs.

Arms: ``esper_agent`` (our factored recurrent PPO), ``maskable_flat`` (sb3-contrib MaskablePPO on the flattened
joint action with exact masks), ``maskable_multidiscrete`` (MaskablePPO on the MultiDiscrete heads with the
marginal masks), ``heuristic``, ``random`` (uniform over valid joint actions) and ``static`` (always WAIT); and,
from :mod:`benchmarks.h2h_arms`, ``plan:<name>`` and ``static:<name>`` (the screen's family plans and static sizes,
each on its own starting host) and ``oracle`` (a ceiling: each episode the best fixed arm for its hidden condition).

Each (arm, seed) is one resumable slice: it trains (learning arms) for ``--budget-epochs`` host epochs (the
expensive unit: one sub-env step = one host epoch), then evaluates ``--eval-episodes`` episodes (one per sub-env of
an evaluation env seeded apart from training, argmax actions, test accuracy measured at the end) and writes
``<out>/<env>/<arm>/seed<k>.json`` (its episodes' timelines in ``seed<k>-records.json.gz``) plus one timeline PNG
per evaluated episode. An esper_agent run with ``select_best_window`` in ``--agent-kwargs`` is evaluated with the
policy its training kept (:mod:`esper_agent.selection`), and its last policy plays the same episodes too
(``last_policy_episodes``, the report's "(last policy)" row). With ``--eval-sampled`` a learning arm also plays the
same episodes sampling its actions (``sampled_episodes``, the "(sampled actions)" row): PPO trains the sampled
policy, and its argmax can differ where it leans on rare actions. Seed ``k``'s evaluation episodes reset from
``EVAL_SEED_OFFSET + k * stride + i`` (``--eval-seed-stride``): every arm plays the same episodes for one seed
(paired), and different seeds play different episodes (stride 1, kept for old campaigns, overlaps them;
``compare_report`` then counts only episodes no other seed of the arm is credited with). Existing slices are
skipped, so a campaign longer than one run on a GPU is split over runs (``benchmarks.campaign`` runs one
process per slice over the GPUs); ``benchmarks/compare_report.py`` rebuilds the table and learning curves.

A learning arm's training can span runs and survive a lost machine: every learning slice saves its training state
beside its folder's slices after each update (``seed<k>.ckpt`` for esper_agent, ``seed<k>.sb3.zip``,
``seed<k>.curve.json`` and, if it normalises, ``seed<k>.vecnorm.pkl`` for MaskablePPO; :func:`saved_state`) and
keeps it until its slice is written, so a run cut short anywhere, evaluation included, continues from its last
update when the same command runs again; ``--keep-policy`` then keeps the trained policy
(:func:`retire_saved_state`). The slice lists every run that trained it (``training_runs``: device, commit, host epochs
from and to, seconds), since its ``device`` and ``git_commit`` name only the run that finished it; that run is listed
too when it only evaluated (no host epochs). With ``--time-limit-s``, a slice stops at the first update boundary after
which another update as long as the last would reach that many seconds of training in this run (without a slice), and
with ``--eval-reserve-s`` too, one that finishes training with less than that left of its limit stops before its
evaluation (the next run, whose limit is longer than the reserve, evaluates first). esper_agent continues exactly where
it stopped (its envs reset from (seed, update) at every rollout: :mod:`esper_agent.trainer`);
MaskablePPO continues its network and optimizer on fresh envs, with its env and action-sampling streams reseeded
from (seed, host epochs so far) (its rollouts are whole episodes here, so no episode is cut). A slice continues
only under the settings it was saved with (env, its kwargs, sub-envs, budget, agent kwargs, MaskablePPO's horizon
and ``--sb3-kwargs``). ``--sb3-kwargs`` sets the MaskablePPO arms' hyperparameters, rollout length and
observation/reward normalisation (:mod:`benchmarks.sb3_train`; default sb3-contrib's, as always); with ``--label``
each configuration gets its own folders. Saving costs little
beside an update (``benchmarks/checkpoint_cost.py``).

    python -m benchmarks.compare_agents --env Esper-CIFAR10-Fast-v0 --arms heuristic random static \\
        --seeds 0 1 2 3 4 --out benchmarks/results/compare
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import esper_env  # noqa: F401
from benchmarks import h2h_arms, sb3_train
from benchmarks.common import env_device, run_stamp, write_atomic, write_json
from benchmarks.sb3_actor import save_maskable  # noqa: F401  (checkpoint_cost saves as the maskable arms do)
from benchmarks.slice_state import Paused, Trained, TrainingClock, check_saved_settings
from esper_agent.baselines import RandomValidActor, StaticActor
from esper_agent.checkpoint import load_checkpoint, save_checkpoint
from esper_agent.config import AgentConfig
from esper_agent.evaluate import PolicyActor
from esper_agent.heuristic import HeuristicActor
from esper_agent.train import resolve_device
from esper_agent.trainer import Trainer
from esper_env.config import EnvConfig
from esper_env.render import EpisodeRecord, write_contact_sheet, write_episode_png
from esper_env.spaces import head_sizes

ARMS = ("esper_agent", "maskable_flat", "maskable_multidiscrete", "heuristic", "random", "static")
LEARNING_ARMS = ("esper_agent", "maskable_flat", "maskable_multidiscrete")
MASKABLE_ARMS = ("maskable_flat", "maskable_multidiscrete")  # trained by benchmarks.sb3_train
EVAL_SEED_OFFSET = 100_000  # evaluation envs never replay a training seed


def slice_settings(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """What shapes a learning slice's training: a paused slice continues only under the same settings."""
    maskable = {"horizon": horizon(arm, args), "sb3_kwargs": args.sb3_kwargs} if arm != "esper_agent" else {}
    return {"arm": arm, "env": args.env, "env_kwargs": args.env_kwargs, "num_envs": args.num_envs,
            "budget_epochs": args.budget_epochs, **maskable,
            "agent_kwargs": json.loads(args.agent_kwargs) if arm == "esper_agent" else {}}


def horizon(arm: str, args: argparse.Namespace) -> str | None:
    """A learning arm's reading of the end at ``max_epochs`` (:mod:`esper_env.sb3`, "Horizon"); ``None`` if fixed."""
    if arm in LEARNING_ARMS:  # MaskablePPO reads it as esper_agent does unless --sb3-horizon says otherwise
        agent = "truncated" if _agent_config(args).bootstrap_truncation else "terminal"
        return agent if arm == "esper_agent" else args.sb3_horizon or agent


def saved_state(arm: str, seed: int, folder: Path) -> list[Path]:
    """The files that hold a learning slice's training state between runs (none for the fixed policies)."""
    if arm == "esper_agent":
        return [folder / f"seed{seed}.ckpt"]
    if arm in LEARNING_ARMS:
        return sb3_train.state_paths(seed, folder)
    return []


TRAINED = "-trained"  # seed<k>.ckpt -> seed<k>-trained.ckpt: a finished slice's kept policy (--keep-policy)


def retire_saved_state(arm: str, seed: int, folder: Path, keep: bool) -> list[Path]:
    """After a learning slice is written, delete its training state, or with ``keep`` rename the policy's files
    (esper_agent's checkpoint; MaskablePPO's model and normaliser statistics) to ``seed<k>-trained.*`` so that
    the trained policy can be played again (``python -m esper_agent.evaluate --checkpoint``,
    ``MaskablePPO.load``; one trained with ``"defer_keep": true`` in its ``sb3_kwargs`` through
    ``Sb3Actor(defer_keep=True)``, under the masks it learned with) and a rerun does not take it for a paused
    slice. The curve is in the slice, so its file goes either way. A policy kept by an earlier run of the slice
    goes first: the files beside a slice are its own policy's or none. Returns the kept files."""
    for stale in folder.glob(f"seed{seed}{TRAINED}.*"):
        stale.unlink()
    kept = []
    for state in saved_state(arm, seed, folder):
        if keep and state.exists() and not state.name.endswith(".curve.json"):
            kept.append(state.replace(state.with_name(state.name.replace(f"seed{seed}", f"seed{seed}{TRAINED}", 1))))
        else:
            state.unlink(missing_ok=True)
    return kept


def train_esper_agent(args: argparse.Namespace, seed: int, folder: Path) -> Trained:
    envs = gym.make_vec(args.env, num_envs=args.num_envs, **args.env_kwargs)
    config = _agent_config(args)
    updates = max(1, math.ceil(args.budget_epochs / (config.rollout_steps * args.num_envs)))  # host epochs/update
    trainer = Trainer(envs, config, device=resolve_device(args.agent_device), seed=seed, total_updates=updates)
    [saved], settings = saved_state("esper_agent", seed, folder), slice_settings("esper_agent", args)
    curve: list[dict] = []
    clock = TrainingClock(args.time_limit_s, eval_reserve_s=args.eval_reserve_s, device=env_device(args.env_kwargs))
    if saved.exists():
        state = load_checkpoint(saved)
        check_saved_settings(saved, state.pop("settings"), settings)
        curve, seconds, runs = state.pop("curve"), state.pop("train_seconds"), state.pop("runs", [])
        trainer.load_state_dict(state)
        clock.resume(seconds, runs, trainer.env_steps)
        print(f"esper_agent seed {seed}: continues from update {trainer.update_index}/{updates}", flush=True)
    for metrics in trainer.train():
        update = trainer.update_index
        curve.append({"host_epochs": trainer.env_steps, "final_accuracy": metrics.get("episode/final_accuracy"),
                      "return": metrics.get("episode/return_mean"),  # and the whole telemetry of the update:
                      "telemetry": {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}})
        if update % 10 == 0 or update == updates:  # progress for whoever polls a long GPU campaign's logs
            print(f"esper_agent seed {seed}: update {update}/{updates}, {trainer.env_steps} host epochs, "
                  f"return {curve[-1]['return']}", flush=True)
        save_checkpoint(saved, trainer.state_dict() | {"curve": curve, "settings": settings}
                        | clock.saved(trainer.env_steps))
        clock.step_done()
        if update < updates and clock.no_time_for_another_step():
            envs.close()
            raise Paused(f"esper_agent seed {seed}: paused after update {update}/{updates} (it took "
                         f"{clock.last_step_s:.0f} s); state in {saved}")
    envs.close()
    clock.pause_unless_evaluation_fits(f"esper_agent seed {seed}", saved)
    last = PolicyActor(trainer.policy.eval(), trainer.obs_norm, deterministic=True, seed=seed)
    handed_out = trainer.selected_policy()  # the kept policy, else the last
    sampled = PolicyActor(*handed_out, deterministic=False, seed=seed)
    runs = clock.runs(trainer.env_steps)
    if trainer.selection is None or trainer.selection.best is None:
        return Trained(last, curve, clock.total_s(), sampled_actor=sampled, training_runs=runs)
    kept = PolicyActor(*handed_out, deterministic=True, seed=seed)
    selection = {"window": trainer.selection.window, "update": trainer.selection.update,
                 "window_return_mean": trainer.selection.score}
    return Trained(kept, curve, clock.total_s(), last_actor=last, selection=selection, sampled_actor=sampled,
                   training_runs=runs)


def _agent_config(args: argparse.Namespace) -> AgentConfig:
    """The whole agent config of the esper_agent arm (recorded in its slices: defaults change between versions)."""
    return AgentConfig(**({"rollout_steps": _env_config(args).max_epochs} | json.loads(args.agent_kwargs)))


def _env_config(args: argparse.Namespace) -> EnvConfig:
    """The config the env id and ``--env-kwargs`` resolve to (registered defaults, then the overrides)."""
    return EnvConfig.from_kwargs(**{**gym.spec(args.env).kwargs, **args.env_kwargs})


def make_actor(arm: str, args: argparse.Namespace, seed: int, folder: Path) -> Trained:
    """The arm's actor for seed ``seed``, trained if it learns (no curve and 0 seconds for the fixed policies)."""
    config = _env_config(args)
    if h2h_arms.is_h2h_arm(arm):  # played by h2h_arms.evaluate_arm, each episode on its arm's starting host
        return Trained(None)
    if arm == "static":
        return Trained(StaticActor())
    if arm == "random":
        return Trained(RandomValidActor(head_sizes(config.num_slots), seed=seed))
    if arm == "heuristic":
        return Trained(HeuristicActor(config.num_slots, host=config.host))
    if arm == "esper_agent":
        return train_esper_agent(args, seed, folder)
    return sb3_train.train_maskable(args, seed, folder, slice_settings(arm, args), config)


def eval_env_seeds(seed: int, episodes: int, stride: int) -> list[int]:
    """The reset seed of each evaluation episode of training seed ``seed`` (one episode per sub-env)."""
    base = EVAL_SEED_OFFSET + seed * stride
    return list(range(base, base + episodes))


def evaluate(actor: Any, args: argparse.Namespace, seed: int) -> tuple[list[dict], list[EpisodeRecord]]:
    """One episode per reset seed of :func:`eval_env_seeds`, each the first episode of a sub-env of a fresh
    evaluation env (:func:`benchmarks.h2h_arms.play_seeds`); test accuracy measured at each episode's end."""
    seeds = eval_env_seeds(seed, args.eval_episodes, args.eval_seed_stride)
    return h2h_arms.play_seeds(actor, args.env, args.env_kwargs, seeds)


def run_slice(arm: str, seed: int, args: argparse.Namespace, folder: Path) -> dict:
    trained = make_actor(arm, args, seed, folder)
    start = time.perf_counter()
    extra: dict[str, Any] = {}
    if h2h_arms.is_h2h_arm(arm):
        seeds = eval_env_seeds(seed, args.eval_episodes, args.eval_seed_stride)
        episodes, records, extra = h2h_arms.evaluate_arm(arm, args, seeds)
    else:
        episodes, records = evaluate(trained.actor, args, seed)
    finished = time.perf_counter()
    if trained.last_actor is not None:
        extra = {"selection": trained.selection, "last_policy_episodes": evaluate(trained.last_actor, args, seed)[0],
                 "last_policy_eval_seconds": time.perf_counter() - finished}
    if args.eval_sampled and trained.sampled_actor is not None:
        started = time.perf_counter()
        extra |= {"sampled_episodes": evaluate(trained.sampled_actor, args, seed)[0],
                  "sampled_eval_seconds": time.perf_counter() - started}
    for k, record in enumerate(records):
        write_episode_png(record, folder / f"seed{seed}-episode{k}.png", title=f"{arm}, seed {seed}, episode {k}")
    write_contact_sheet(records, folder / f"seed{seed}-sheet.png", title=f"{arm} on {args.env}, seed {seed}")
    return {"arm": arm, "seed": seed, "env": args.env, "env_kwargs": args.env_kwargs, "num_envs": args.num_envs,
            "eval_seed_stride": args.eval_seed_stride,
            "budget_host_epochs": args.budget_epochs if arm in LEARNING_ARMS else 0, "horizon": horizon(arm, args),
            "agent_kwargs": json.loads(args.agent_kwargs) if arm == "esper_agent" else {},
            "agent_config": _agent_config(args).to_dict() if arm == "esper_agent" else None,
            **(_sb3_record(args) if arm in MASKABLE_ARMS else {}),
            "device": env_device(args.env_kwargs), **run_stamp(), "train_seconds": trained.train_seconds,
            "training_runs": trained.training_runs,
            "eval_seconds": finished - start, "curve": trained.curve, "episodes": episodes,
            "episode_records": [json.loads(r.to_json()) for r in records]} | extra


def _sb3_record(args: argparse.Namespace) -> dict[str, Any]:
    """What a maskable slice records of its configuration: ``--sb3-kwargs`` as given and every hyperparameter
    they resolve to (:func:`benchmarks.sb3_train.resolved_config`)."""
    config = sb3_train.resolved_config(args.sb3_kwargs, _env_config(args).max_epochs, args.num_envs)
    return {"sb3_kwargs": args.sb3_kwargs, "sb3_config": config}


def records_path(slice_path: Path) -> Path:
    """Where a slice's episode timelines are kept: gzipped beside it, as they are most of its bytes (the results
    folder travels to the GPU machine with every call)."""
    return slice_path.with_name(f"{slice_path.stem}-records.json.gz")


def write_slice(path: Path, result: dict) -> None:
    """The slice's timelines, then the slice itself (its existence marks the slice done), each written atomically."""
    write_atomic(records_path(path), gzip.compress(json.dumps(result["episode_records"]).encode(), mtime=0))
    write_json(path, {k: v for k, v in result.items() if k != "episode_records"})  # NaN (not measured): null


def slice_folder(out: Path, env: str, arm: str, label: str = "") -> Path:
    """Where an arm's slices of one env go: ``<out>/<env>/<arm>``, or ``<arm>-<label>`` for a labelled run."""
    return out / env / h2h_arms.folder_name(f"{arm}-{label}" if label else arm)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare_agents",
                                     description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--env", default="Esper-CIFAR10-Fast-v0")
    parser.add_argument("--env-kwargs", type=json.loads, default={}, help="JSON dict of env arguments")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), help=f"of {', '.join(ARMS)}; also 'plan:<name>', "
                        "'static:<name>' and 'oracle' (benchmarks.h2h_arms)")
    parser.add_argument("--oracle-from", type=Path, help="the screen summary.json the oracle arm picks from")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--num-envs", type=int, default=8, help="training sub-envs of the learning arms")
    parser.add_argument("--budget-epochs", type=int, default=8000, help="training budget (host epochs, summed "
                        "over sub-envs) of every learning arm")
    parser.add_argument("--eval-episodes", type=int, default=8, help="evaluation episodes per seed")
    parser.add_argument("--eval-seed-stride", type=int, default=1000, help="seed k evaluates on reset seeds "
                        "EVAL_SEED_OFFSET + k * stride + i; 1 only to extend an old campaign whose seeds overlap "
                        "(the report then counts only the episodes no two seeds share)")
    parser.add_argument("--time-limit-s", type=float, default=None, help="a learning slice stops at the first "
                        "update (or rollout) after which another as long as the last would reach this many seconds of "
                        "training in this run (its state is saved after every one); rerunning continues it "
                        "(default: none)")
    parser.add_argument("--eval-reserve-s", type=float, default=0.0, help="with --time-limit-s: a learning slice "
                        "that finishes training with less than this left of its limit pauses before evaluating, and "
                        "its next run evaluates first (seconds, less than the limit: its whole evaluation, argmax, "
                        "sampled and last policy; default 0: it always evaluates)")
    parser.add_argument("--eval-sampled", action="store_true", help="learning arms also play the evaluation "
                        "episodes with actions sampled from their policy, not its argmax (sampled_episodes)")
    parser.add_argument("--agent-kwargs", default="{}", help="JSON AgentConfig overrides for esper_agent")
    parser.add_argument("--agent-device", default="auto", help="cpu, cuda or auto (cuda when there is a GPU)")
    parser.add_argument("--sb3-horizon", choices=("terminal", "truncated"), help="MaskablePPO's reading of the end at "
                        "max_epochs: 'terminal' ends the return at the last reward (esper_agent's bootstrap_truncation "
                        "false), 'truncated' adds gamma * V(final observation) to it (true); default: esper_agent's")
    parser.add_argument("--sb3-kwargs", type=json.loads, default={}, help="JSON object of the MaskablePPO arms' "
                        f"hyperparameters, keys among {', '.join(sb3_train.SB3_KWARGS)} (benchmarks.sb3_train); "
                        "default: sb3-contrib's, one episode per rollout, no normalisation")
    parser.add_argument("--keep-policy", action="store_true", help="keep each finished learning slice's trained "
                        "policy beside it as seed<k>-trained.ckpt (esper_agent) or seed<k>-trained.sb3.zip (and "
                        ".vecnorm.pkl; MaskablePPO), a few MB each; default: delete the training state")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/compare"))
    parser.add_argument("--label", default="", help="suffix of each arm's results folder (<arm>-<label>), so that "
                        "one arm can be run with several configs side by side")
    return parser


def check_finished(path: Path, arm: str, args: argparse.Namespace) -> None:
    """Refuse to count a finished MaskablePPO slice as done under other ``--sb3-kwargs`` than it ran with: a
    sweep's configurations need a ``--label`` each, or the second would be skipped as the first's."""
    if arm not in MASKABLE_ARMS:
        return
    ran = json.loads(path.read_text()).get("sb3_kwargs", {})
    if ran != args.sb3_kwargs:
        raise SystemExit(f"{path} ran with --sb3-kwargs {json.dumps(ran)}, not {json.dumps(args.sb3_kwargs)}; "
                         "expected a --label for each configuration (or the same kwargs)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked: the flags' values together, not only one by one."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.eval_seed_stride != 1 and args.eval_seed_stride < args.eval_episodes:
        parser.error(f"--eval-seed-stride {args.eval_seed_stride}: expected 1 (the old overlapping seeds) or at "
                     f"least --eval-episodes ({args.eval_episodes}), so that no two seeds share an episode")
    if args.time_limit_s is not None and not args.time_limit_s >= 0:
        parser.error(f"--time-limit-s {args.time_limit_s}: expected a number of seconds >= 0")
    if not args.eval_reserve_s >= 0:
        parser.error(f"--eval-reserve-s {args.eval_reserve_s}: expected a number of seconds >= 0")
    if args.eval_reserve_s and args.time_limit_s is not None and args.eval_reserve_s >= args.time_limit_s:
        parser.error(f"--eval-reserve-s {args.eval_reserve_s} with --time-limit-s {args.time_limit_s}: expected "
                     "less than the limit, or a trained slice would pause before its evaluation on every run")
    try:
        args.sb3_kwargs = sb3_train.check_sb3_kwargs(args.sb3_kwargs)
    except ValueError as error:
        parser.error(f"--sb3-kwargs {json.dumps(args.sb3_kwargs)}: {error}")
    try:
        h2h_arms.check_arms(args.arms, ARMS, args.oracle_from)
    except (ValueError, OSError) as error:
        parser.error(f"--arms {' '.join(args.arms)}: {error}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    for arm in args.arms:
        folder = slice_folder(args.out, args.env, arm, args.label)
        folder.mkdir(parents=True, exist_ok=True)
        for seed in args.seeds:
            path = folder / f"seed{seed}.json"
            if path.exists():
                check_finished(path, arm, args)
                print(f"{path} exists: skipped", flush=True)
                continue
            try:
                result = run_slice(arm, seed, args, folder)
            except Paused as paused:
                print(paused, flush=True)
                continue
            write_slice(path, result)
            retire_saved_state(arm, seed, folder, args.keep_policy)  # kept until now: a cut run evaluates again
            test = [e["test_accuracy"] for e in result["episodes"]]
            print(f"{arm} seed {seed}: test accuracy {np.nanmean(test):.4f}, seed params "
                  f"{np.mean([e['seed_params'] for e in result['episodes']]):.0f}, "
                  f"{result['train_seconds'] + result['eval_seconds']:.0f}s", flush=True)


if __name__ == "__main__":
    main()
