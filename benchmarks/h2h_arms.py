"""The head-to-head's fixed arms beside the learners, and the evaluation every ``compare_agents`` arm plays.

Arm spellings that ``benchmarks.compare_agents --arms`` takes besides its own arms:

* ``plan:<name>``: the growth plan ``<name>`` of the screen's family arm set (``benchmarks.screen_arms``,
  e.g. ``plan:grow-x2@0``), played by :class:`benchmarks.screen.PlanActor` from the arm's starting host;
* ``static:<name>``: the family's static size ``static-<name>`` (``seedling``, ``small``, ..., ``largest``):
  WAIT on that starting host, trained from scratch. These are the static frontier;
* ``oracle``: for each evaluation episode, the fixed arm (static size or growth plan) with the best mean return on
  that episode's hidden condition in a screen summary (``--oracle-from``, rows with ``arm``, ``kind``,
  ``condition`` and ``return``; ``"mixture"`` rows left out, as the screen's criterion 3 does). It knows the
  hidden condition, so it is a ceiling, not a rival.

The oracle is not an actor that switches plans on reading the condition: the env reports an episode's condition
in the info of its steps, not of its reset, so an actor would choose its first action blind (and the best plans
act at step 0), and a static size is another starting host, fixed when the env is built. The condition is drawn
from the reset seed alone, before the host, so :func:`drawn_conditions` reads each episode's condition from the
first step's info of a WAIT probe on the same reset seed; each episode is then played by its condition's arm
on that reset seed (paired with every other arm's episode), and :func:`evaluate_oracle` checks that the first
step's info of the played episode reports the same condition. A condition fixed by ``--env-kwargs`` needs no probe.

Every evaluation episode also records (:class:`EpisodeFacts`) the condition its first step reports, the ops it
executed (``[step, op, slot, blueprint]``, WAITs left out) and, on the family host, its final parameters and
training FLOPs: what ``benchmarks.h2h_report`` reads; and what became of its seeds (``seeds``, counted from its
timeline), which ``benchmarks.studies.pilot_paired`` reads.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

import esper_env  # noqa: F401  (registers the ids)
from benchmarks.screen import PlanActor
from benchmarks.screen_arms import Arm, arm_set
from esper_agent.baselines import Actor, StaticActor
from esper_agent.collect import EpisodeRecord
from esper_agent.envs import EnvStep, VectorEnvDriver
from esper_agent.evaluate import StepCallback, TimelineRecorder, run_episodes
from esper_agent.heuristic import env_host
from esper_agent.report import count_seeds
from esper_env.blueprints import catalogue
from esper_env.conditions import MIXTURE, drawable
from esper_env.config import EnvConfig
from esper_env.render import EpisodeRecord as Timeline
from esper_env.spaces import Head, Op

ORACLE = "oracle"
FAMILY_SET = "family"  # the screen's arm set whose plans and sizes the head-to-head plays
FIXED_KINDS = {"plan": "plan", "static": "static"}  # spelling prefix -> the screen arm's kind
# Sub-envs of one evaluation env: on the GPU each holds its own CUDA-graph memory pools (about 0.8 GB on the
# two-block Fast host), and 48 at once in each of four processes ran an H200 out of memory.
EVAL_CHUNK = 16


def is_h2h_arm(name: str) -> bool:
    """Whether ``name`` is spelled as one of this module's arms (``plan:``, ``static:`` or ``oracle``)."""
    return name == ORACLE or (":" in name and name.split(":", 1)[0] in FIXED_KINDS)


def fixed_arm(name: str) -> Arm:
    """The screen arm that ``plan:<name>`` or ``static:<name>`` spells, from the family set."""
    prefix, _, rest = name.partition(":")
    if prefix not in FIXED_KINDS or not rest:
        raise ValueError(f"arm {name!r}: expected 'plan:<name>' or 'static:<name>'")
    kind = FIXED_KINDS[prefix]
    arms = {arm.name: arm for arm in arm_set(FAMILY_SET) if arm.kind == kind}
    wanted = rest if kind == "plan" else f"static-{rest}"
    if wanted not in arms:
        known = sorted(arms) if kind == "plan" else sorted(a.removeprefix("static-") for a in arms)
        raise ValueError(f"arm {name!r}: {rest!r} is no {kind} of the {FAMILY_SET!r} arm set; expected one of {known}")
    return arms[wanted]


def check_arms(arms: Sequence[str], known: Sequence[str], oracle_from: Path | None) -> None:
    """Refuse, before anything runs, an arm that is neither ``known`` nor spelled as one of this module's, and an
    oracle without a summary that gives every condition it covers a playable arm."""
    for name in arms:
        if name not in known and not is_h2h_arm(name):
            raise ValueError(f"arm {name!r}: expected one of {list(known)}, 'plan:<name>', 'static:<name>' or "
                             f"{ORACLE!r}")
        if name != ORACLE and is_h2h_arm(name):
            fixed_arm(name)
    if ORACLE in arms:
        if oracle_from is None:
            raise ValueError("arm 'oracle' needs --oracle-from SUMMARY (a screen's summary.json)")
        oracle_choice(oracle_from)


def oracle_choice(summary: Path) -> dict[str, str]:
    """Per hidden condition, the name of the fixed arm (kind ``static`` or ``plan``) with the best mean return in
    a screen summary; each must be an arm of the family set, which the oracle plays."""
    rows = json.loads(summary.read_text())
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        if "kind" not in row or "return" not in row:
            raise ValueError(f"{summary}: row {row.get('arm')!r} has no 'kind' or 'return'; expected a screen summary")
        if row["condition"] == MIXTURE or row["kind"] not in FIXED_KINDS.values() or row["return"] is None:
            continue
        if row["condition"] not in best or row["return"] > best[row["condition"]]["return"]:
            best[row["condition"]] = row
    if not best:
        raise ValueError(f"{summary}: no static or plan row on any condition but {MIXTURE!r}")
    playable = {arm.name for arm in arm_set(FAMILY_SET) if arm.kind in FIXED_KINDS.values()}
    if unknown := sorted({row["arm"] for row in best.values()} - playable):
        raise ValueError(f"{summary}: the oracle's arms {unknown} are not static or plan arms of the {FAMILY_SET!r} "
                         f"set; expected some of {sorted(playable)}")
    return {condition: best[condition]["arm"] for condition in sorted(best)}


def actor_of(arm: Arm) -> Actor:
    """The fixed policy of a static or plan arm."""
    return StaticActor() if arm.kind == "static" else PlanActor(arm.plan)


def value_at(info: Mapping[str, Any], key: str, i: int) -> Any:
    """Sub-env ``i``'s value of a vector-info key as a Python value, or None where the env does not set it."""
    if key not in info or not np.asarray(info.get(f"_{key}", np.ones(i + 1, bool)))[i]:
        return None
    value = np.asarray(info[key])[i]
    return value.item() if isinstance(value, np.generic) else value


class EpisodeFacts:
    """A ``run_episodes`` step callback that keeps, per episode of every sub-env, what the runner's record lacks:
    the hidden condition its first step reports, the ops it executed (``[step, op, slot, blueprint]``, WAITs left
    out, the planted blueprint by name) and its final ``params`` and ``train_flops`` (None off the family host)."""

    def __init__(self, driver: VectorEnvDriver) -> None:
        self.names = tuple(b.name for b in catalogue(env_host(driver.envs)))
        self.same_step = driver.mode == AutoresetMode.SAME_STEP
        self.current = [self._fresh() for _ in range(driver.num_envs)]
        self.finished: list[list[dict[str, Any]]] = [[] for _ in range(driver.num_envs)]

    @staticmethod
    def _fresh() -> dict[str, Any]:
        return {"condition": None, "ops": [], "params": None, "train_flops": None, "steps": 0}

    def __call__(self, step: EnvStep, info: Mapping[str, Any]) -> None:
        done = step.terminated | step.truncated
        for i in np.flatnonzero(step.active):  # an inactive sub-env was reset by this step: no transition
            # SAME_STEP: ``info`` already describes the next episode; the step that ended this one is final_info.
            source = info.get("final_info", {}) if self.same_step and done[i] else info
            self._add(self.current[i], source, int(i))
            if done[i]:
                self.finished[i].append(self.current[i])
                self.current[i] = self._fresh()

    def _add(self, facts: dict[str, Any], info: Mapping[str, Any], i: int) -> None:
        if facts["steps"] == 0:
            condition = value_at(info, "condition", i)
            facts["condition"] = None if condition is None else str(condition)
        op = value_at(info, "executed_op", i)
        if op is not None and op != Op.WAIT:
            slot = value_at(info, "executed_slot", i)
            planted = self.names[int(np.asarray(info["blueprint"])[i][slot])] if op == Op.GERMINATE else None
            facts["ops"].append([facts["steps"], Op(op).name.lower(), slot, planted])
        facts["params"], facts["train_flops"] = value_at(info, "params", i), value_at(info, "train_flops", i)
        facts["steps"] += 1

    def facts_of(self, records: Sequence[EpisodeRecord]) -> list[dict[str, Any]]:
        """The facts of each of ``records``, the first episodes each sub-env finished (as ``run_episodes``
        returns them), without the step count."""
        taken = [0] * len(self.finished)
        out = []
        for record in records:
            facts = self.finished[record.env][taken[record.env]]
            taken[record.env] += 1
            out.append({k: v for k, v in facts.items() if k != "steps"})
        return out


def chained(*callbacks: StepCallback) -> StepCallback:
    """One ``run_episodes`` step callback that calls each of ``callbacks`` in turn."""
    def on_step(step: EnvStep, info: Mapping[str, Any]) -> None:
        for callback in callbacks:
            callback(step, info)

    return on_step


def seed_runs(seeds: Sequence[int], most: int) -> list[list[int]]:
    """``seeds`` cut into runs of consecutive integers of at most ``most`` each, in order: a vector env reset with
    seed ``s`` resets sub-env ``i`` from ``s + i``."""
    runs: list[list[int]] = []
    for seed in seeds:
        if runs and seed == runs[-1][-1] + 1 and len(runs[-1]) < most:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return runs


def play_seeds(actor: Actor, env_id: str, env_kwargs: Mapping[str, Any],
               seeds: Sequence[int]) -> tuple[list[dict], list[Timeline]]:
    """One episode per reset seed, each the first episode of a sub-env of a fresh evaluation env (runs of
    consecutive seeds, at most ``EVAL_CHUNK`` sub-envs at a time); test accuracy measured at each episode's end.
    Per episode, its summary (with :class:`EpisodeFacts`, and ``seeds``: its seeds' fates from the timeline,
    :func:`esper_agent.report.count_seeds`, holding timeouts and rollbacks apart) and its timeline, in the order of
    ``seeds``."""
    # the evaluation's own settings win over the given kwargs (which may name them too, e.g. report_test_accuracy)
    kwargs = dict(env_kwargs) | {"autoreset_mode": "SameStep", "report_test_accuracy": True}
    episodes, timelines = [], []
    for chunk in seed_runs(seeds, EVAL_CHUNK):
        envs = gym.make_vec(env_id, num_envs=len(chunk), **kwargs)
        driver = VectorEnvDriver(envs)
        recorder, facts = TimelineRecorder(driver, envs.unwrapped.config.max_epochs), EpisodeFacts(driver)
        # sub-env i plays reset seed chunk[0] + i
        records = run_episodes(driver, actor, len(chunk), chunk[0], on_step=chained(recorder, facts))
        envs.close()
        timelines += recorder.timelines_of(records)
        episodes += [{"env_seed": env_seed, "return": r.episode_return, "val_accuracy": r.final_accuracy,
                      "test_accuracy": r.test_accuracy, "seed_params": r.seed_params, "rollback": r.rollback,
                      "length": r.length, "invalid_rate": float(np.mean(t.invalid_action)),
                      "seeds": asdict(count_seeds([t]).total), **f}
                     for env_seed, r, t, f in zip(chunk, records, timelines[-len(chunk):], facts.facts_of(records),
                                                  strict=True)]
    return episodes, timelines


def drawn_conditions(env_id: str, env_kwargs: Mapping[str, Any], seeds: Sequence[int]) -> list[str]:
    """The hidden condition of the episode each reset seed starts: the one ``env_kwargs`` fix, else (the mixture)
    what the first step of a WAIT probe on that seed reports in ``info["condition"]`` (the env reports it after a
    step, not at reset)."""
    condition = EnvConfig.from_kwargs(**{**gym.spec(env_id).kwargs, **env_kwargs}).condition
    if len(drawable(condition)) == 1:
        return [condition] * len(seeds)
    drawn: list[str] = []
    for chunk in seed_runs(seeds, EVAL_CHUNK):
        envs = gym.make_vec(env_id, num_envs=len(chunk), **env_kwargs)
        envs.reset(seed=chunk[0])
        info = envs.step(np.zeros((len(chunk), len(Head)), np.int64))[4]  # every head 0: WAIT
        envs.close()
        drawn += [str(value_at(info, "condition", i)) for i in range(len(chunk))]
    return drawn


def evaluate_oracle(args: argparse.Namespace, seeds: Sequence[int]) -> tuple[list[dict], list[Timeline], dict]:
    """Each episode played by the arm :func:`oracle_choice` picks for its hidden condition, on its own reset seed
    and that arm's starting host; the episodes (each naming its ``played_arm``), their timelines, and the slice's
    record of the oracle."""
    choice = oracle_choice(args.oracle_from)
    conditions = drawn_conditions(args.env, args.env_kwargs, seeds)
    if missing := sorted(set(conditions) - set(choice)):
        raise ValueError(f"{args.oracle_from} has no static or plan row for condition(s) {missing}, which "
                         f"evaluation episodes drew; it covers {sorted(choice)}")
    arms = {arm.name: arm for arm in arm_set(FAMILY_SET)}
    played: dict[int, tuple[dict, Timeline]] = {}
    for name in dict.fromkeys(choice[c] for c in conditions):
        mine = [s for s, c in zip(seeds, conditions, strict=True) if choice[c] == name]
        arm = arms[name]
        episodes, timelines = play_seeds(actor_of(arm), args.env, {**args.env_kwargs, **arm.env_kwargs}, mine)
        played |= {s: (e | {"played_arm": name}, t) for s, e, t in zip(mine, episodes, timelines, strict=True)}
    for seed, condition in zip(seeds, conditions, strict=True):
        if played[seed][0]["condition"] != condition:
            raise RuntimeError(f"reset seed {seed}: the probe drew condition {condition!r} but the episode "
                               f"{played[seed][0]['played_arm']} played reports {played[seed][0]['condition']!r}; "
                               "expected the condition to depend on the reset seed alone")
    record = {"summary": str(args.oracle_from), "choice": choice, "knows_condition": True}
    return [played[s][0] for s in seeds], [played[s][1] for s in seeds], {"oracle": record}


def evaluate_arm(name: str, args: argparse.Namespace, seeds: Sequence[int]) -> tuple[list[dict], list[Timeline],
                                                                                       dict]:
    """The episodes and timelines of one of this module's arms on ``seeds``, and what its slice records beside
    them (the screen arm it plays, or the oracle's choice)."""
    if name == ORACLE:
        return evaluate_oracle(args, seeds)
    arm = fixed_arm(name)
    episodes, timelines = play_seeds(actor_of(arm), args.env, {**args.env_kwargs, **arm.env_kwargs}, seeds)
    return episodes, timelines, {"fixed_arm": arm.record() | {"env_kwargs": dict(arm.env_kwargs)}}


def folder_name(arm: str) -> str:
    """An arm's results folder name in letters, digits, '.', '_' and '-' only (some file transfers refuse others):
    ``plan:grow-x2@0`` is ``plan_grow-x2_at0``."""
    return arm.replace(":", "_").replace("@", "_at")
