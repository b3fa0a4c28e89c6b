"""How many PPO updates does esper_agent need to read a hidden condition? A toy with Esper's interface, in seconds.

On the head-to-head's pilot no esper_agent policy grew by the condition within the campaign's 50 updates
(docs/experiments/2026-11-29-h2h-v2-pilot.md). This toy asks whether, and how fast, the whole agent
(``esper_agent.trainer.Trainer``) learns a growth decision that depends on a condition it is not told
(``benchmarks.studies.shaped_condition`` gives it the task's twelve conditions):

- an episode is ``horizon`` steps of one slot; its reset seed draws the condition, half "pays", half "costs"
  (``costing`` = ``(share, gain)`` sets another share of "costs", e.g. 1/12 for one condition in the
  head-to-head's twelve, and the gain growth has there, e.g. -0.09 for the 9 points keeping costs on
  ``pool5k-noise40``);
- the reward is the change of an accuracy curve, as on Esper, so the return is the final accuracy minus the
  start: the accuracy rises from the condition's chance level towards its top (0.1 -> 0.6 on "pays",
  0.5 -> 0.9 on "costs", like 10 classes against 2), shifted by a luck term drawn from the reset seed;
- GERMINATE, once, costs ``cost`` at once and moves the final accuracy by ``gain`` (``+0.08`` on "pays",
  ``-0.03`` on "costs") times the share of the episode left, so growing early pays most where it pays;
- the observation is ``[step / horizon, accuracy, grown]``; the accuracy reads -1 (Esper's sentinel) until step
  ``reveal``, so no policy can tell the conditions apart before then;
- ``grow_window`` (first and last step, inclusive) masks GERMINATE outside it: ``[reveal, reveal]`` turns the
  choice of when into a single yes-or-no, which separates learning *whether* from learning *when*;
- ``undo`` = ``(hold_from, max_hold)`` gives the growth Esper's lifecycle in small: a planted seed is live,
  PRUNE may remove it at any step (its cost stays paid, its gain is gone), FOSSILIZE may keep it from
  ``hold_from`` steps after planting, and a seed still live ``max_hold`` steps after that is pruned
  automatically (Esper's holding timeout). Only a fossilized seed's gain counts, still by the share of the
  episode since it was planted. This is the head-to-head's way around the blind decision: plant early, where it
  pays on average, then keep or undo once the condition shows; the observation gains the seed's state (live,
  fossilized, pruned), and ``info["holding_steps_left"]`` counts the steps at which FOSSILIZE may still keep it,
  as on Esper (``AgentConfig.defer_keep`` reads it).

Without ``undo`` the best policy waits until ``reveal`` and grows only where it pays; with it, it plants at once
and from ``reveal`` on keeps where it pays and prunes where it costs. The action space, the masks in ``info`` and
the autoreset are Esper's, so nothing in the agent is special-cased.
A run *reads the condition* at the first check where its argmax policy grows (at any step) in at least ``READ`` of
the held-out "pays" episodes and at most ``1 - READ`` of the "costs" ones (64 episodes on reset seeds 1,000,000
on; training resets come from hashed seeds, so an overlap is possible but was not there for the committed runs).

    python -m benchmarks.studies.hidden_condition --updates 300 --seeds 0-4 \\
        --config b '{"learning_rate": 0.001, "wait_prior": 1.0, "prune_prior": 2.0, "seed_group_size": 4}' \\
        --out benchmarks/results/hidden_condition/runs.jsonl

Each (configuration, seed) appends one JSON line (its checks); the table is rebuilt from every line in the file
(without ``--config`` it only rebuilds the table). ``--paired-against LABEL`` also prints each other label's first
read minus LABEL's, paired by training seed with a Student-t 95% CI, e.g. ``--out
benchmarks/results/hidden_condition/skip-window.jsonl --paired-against e3`` for ``lstm_skip``'s −35 ± 13 updates.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from benchmarks.campaign import parse_seeds
from benchmarks.common import run_stamp
from esper_agent.config import AgentConfig
from esper_agent.envs import VectorEnvDriver
from esper_agent.evaluate import PolicyActor, mean_ci95, run_episodes
from esper_agent.trainer import Trainer
from esper_env import spaces
from esper_env.spaces import SENTINEL, Op

CHANCE, TOP, GAIN = np.array([0.1, 0.5]), np.array([0.6, 0.9]), np.array([0.08, -0.03])  # index 0 pays, 1 costs
CONDITIONS = ("pays", "costs")
READ = 0.9  # the argmax policy grows on >= 90% of "pays" episodes and <= 10% of "costs" ones
EVAL_SEED, EVAL_EPISODES = 1_000_000, 64


class HiddenConditionEnv(VectorEnv):
    """The toy (module docstring): Esper's action space with one slot, NEXT_STEP autoreset, masks in ``info``."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}
    eval_episodes = EVAL_EPISODES  # held-out episodes of each read

    def __init__(self, num_envs: int = 8, horizon: int = 20, reveal: int = 3, cost: float = 0.01,
                 luck_std: float = 0.03, grow_window: tuple[int, int] | None = None,
                 undo: tuple[int, int] | None = None, costing: tuple[float, float] | None = None) -> None:
        if not 1 <= reveal < horizon:  # step 0's observation comes before any accuracy, so it never shows one
            raise ValueError(f"reveal={reveal}: expected a step in [1, horizon={horizon})")
        self.grow_window = (0, horizon - 1) if grow_window is None else tuple(grow_window)
        if not 0 <= self.grow_window[0] <= self.grow_window[1] < horizon:
            raise ValueError(f"grow_window={grow_window}: expected [first, last] steps within [0, {horizon})")
        if costing is not None and not (0.0 < costing[0] < 1.0 and costing[1] < 0.0):
            raise ValueError(f"costing={costing}: expected (a share strictly between 0 and 1, a negative gain)")
        hold_from, max_hold = (0, 1) if undo is None else undo
        if hold_from < 0 or max_hold < 1:
            raise ValueError(f"undo={undo}: expected (hold_from >= 0, max_hold >= 1)")
        self.num_envs, self.max_epochs, self.reveal = num_envs, horizon, reveal
        self.cost, self.luck_std = cost, luck_std
        self.chance, self.top = CHANCE, TOP
        self.pays_by_condition = np.array([True, False])  # per condition: whether kept growth pays there
        self.costs_by_condition = ~self.pays_by_condition  # the conditions a read asks the policy to undo
        self.condition_names = CONDITIONS
        self.undo, self.hold_from, self.max_hold = undo is not None, hold_from, max_hold
        self.costs_share = None if costing is None else costing[0]
        self.gain = GAIN if costing is None else np.array([GAIN[0], costing[1]])
        self.pbrs_weight, self.pbrs_gamma = 0.0, None  # no shaping (esper_agent.contracts reads these)
        self.single_action_space = spaces.action_space(1)
        self._set_observation_width(1)
        self.condition, self.luck = np.zeros(num_envs, np.int64), np.zeros(num_envs)
        self.step_index, self.grown_at = np.zeros(num_envs, np.int64), np.full(num_envs, -1)
        self.fossilized, self.pruned = np.zeros(num_envs, bool), np.zeros(num_envs, bool)
        self.accuracy, self.ended = np.zeros(num_envs), np.zeros(num_envs, bool)
        self._rngs = [np.random.default_rng(i) for i in range(num_envs)]

    def _set_observation_width(self, seen: int) -> None:
        """[progress, ``seen`` columns of the condition, grown] or, with ``undo``, [..., live, fossilized, pruned]."""
        width = 1 + seen + (1 if not self.undo else 3)
        self.single_observation_space = gym.spaces.Box(-1.0, 2.0, (width,), np.float32)  # accuracy + luck may pass 1
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

    def _draw_condition(self, rng: np.random.Generator) -> int:
        # without costing, the fair draw every earlier run made (the same episodes)
        return int(rng.integers(2) if self.costs_share is None else rng.random() < self.costs_share)

    def _start(self, i: int) -> None:
        self.condition[i] = self._draw_condition(self._rngs[i])
        self.luck[i] = self._rngs[i].normal(0.0, self.luck_std)
        self.step_index[i], self.grown_at[i] = 0, -1
        self.fossilized[i], self.pruned[i] = False, False
        self.accuracy[i], self.ended[i] = self.chance[self.condition[i]], False

    def kept(self, index: int | slice = slice(None)) -> np.ndarray:
        """Per sub-env (or sub-env ``index``): whether its growth counts (planted; with ``undo``, fossilized)."""
        return self.fossilized[index].copy() if self.undo else self.grown_at[index] >= 0

    def live(self, index: int | slice = slice(None)) -> np.ndarray:
        """Per sub-env (or sub-env ``index``): whether a planted seed can still be pruned or kept (``undo`` only)."""
        return self.undo & (self.grown_at[index] >= 0) & ~self.fossilized[index] & ~self.pruned[index]

    def _accuracy_after(self, i: int, t: int) -> float:
        c = self.condition[i]
        value = self.chance[c] + (self.top[c] - self.chance[c]) * (1 - 0.5 ** (t + 1)) + self.luck[i]
        if t == self.max_epochs - 1 and self.kept(i):  # growth shows in the final accuracy
            value += self.gain[c] * (self.max_epochs - self.grown_at[i]) / self.max_epochs
        return value

    def _seen(self) -> np.ndarray:
        """What the condition shows, one column per feature: here the accuracy, from ``reveal`` on."""
        return np.where(self.step_index >= self.reveal, self.accuracy, SENTINEL)[:, None]

    def _obs(self) -> np.ndarray:
        seed = [self.live(), self.fossilized, self.pruned] if self.undo else [self.grown_at >= 0]
        columns = [self.step_index / self.max_epochs, *self._seen().T, *seed]
        return np.stack(columns, 1).astype(np.float32)

    def _info(self) -> dict[str, Any]:
        sizes = spaces.head_sizes(1)
        op_slot = np.zeros((self.num_envs, len(Op), 1), bool)
        op_slot[:, Op.WAIT, 0] = True
        first, last = self.grow_window
        op_slot[:, Op.GERMINATE, 0] = (self.grown_at < 0) & (self.step_index >= first) & (self.step_index <= last)
        op_slot[:, Op.PRUNE, 0] = self.live()
        op_slot[:, Op.FOSSILIZE, 0] = self.live() & (self.step_index >= self.grown_at + self.hold_from)
        flat = np.zeros((self.num_envs, sum(sizes)), bool)
        flat[:, : len(Op)] = op_slot[:, :, 0]
        flat[:, np.cumsum((0, *sizes))[1:-1]] = True  # one choice in every other head
        last_keep = self.grown_at + self.hold_from + self.max_hold  # FOSSILIZE acts before the timeout prunes
        left = np.where(op_slot[:, Op.FOSSILIZE, 0], last_keep - self.step_index + 1, 0)
        return {"action_mask": flat, "op_slot_mask": op_slot, "holding_steps_left": left[:, None]}

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"reset(seed=...) got {len(seeds)} seeds; expected one per sub-env ({self.num_envs})")
            self._rngs = [np.random.default_rng(s) for s in seeds]
        for i in range(self.num_envs):
            self._start(i)
        return self._obs(), self._info()

    def _act(self, i: int, op: int, t: int, allowed: np.ndarray) -> float:
        """Sub-env ``i``'s op at step ``t`` (one ``allowed`` refuses runs as WAIT, as on Esper); GERMINATE's cost."""
        if op == Op.GERMINATE and allowed[op]:
            self.grown_at[i] = t
        elif op == Op.PRUNE and allowed[op]:
            self.pruned[i] = True
        elif op == Op.FOSSILIZE and allowed[op]:
            self.fossilized[i] = True
        if self.live(i) and t >= self.grown_at[i] + self.hold_from + self.max_hold:  # the holding timeout
            self.pruned[i] = True
        return -self.cost if op == Op.GERMINATE and allowed[op] else 0.0

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions, reward = np.asarray(actions, np.int64), np.zeros(self.num_envs)
        restarting, allowed = self.ended.copy(), self._info()["op_slot_mask"][:, :, 0]
        for i in range(self.num_envs):
            if restarting[i]:  # NEXT_STEP autoreset: this step only starts the next episode
                self._start(i)
                continue
            t = self.step_index[i]
            reward[i] = self._act(i, int(actions[i, 0]), t, allowed[i])
            after = self._accuracy_after(i, t)
            reward[i] += after - self.accuracy[i]
            self.accuracy[i], self.step_index[i] = after, t + 1
        truncated = ~restarting & (self.step_index >= self.max_epochs)
        self.ended = truncated.copy()
        return self._obs(), reward, np.zeros(self.num_envs, bool), truncated, self._info()


Toy = type[HiddenConditionEnv]  # the toy a study trains on: this module's or a subclass


def greedy_read(trainer: Trainer, env_kwargs: dict[str, Any], toy: Toy) -> dict[str, float]:
    """The trainer's argmax policy on held-out episodes: where growth pays, where the read asks for an undo, and on
    each condition, the share that ended grown (with ``undo``: fossilized); the mean returns."""
    env = toy(num_envs=toy.eval_episodes, **env_kwargs)
    actor = PolicyActor(trainer.policy, trainer.obs_norm, deterministic=True)
    records = run_episodes(VectorEnvDriver(env), actor, toy.eval_episodes, EVAL_SEED)  # one per sub-env, by sub-env
    returns = np.array([r.episode_return for r in records])
    grew = env.kept()  # the episodes just ended; NEXT_STEP autoreset has not restarted them
    read = {"return": float(returns.mean())}
    rows = {"pays": env.pays_by_condition[env.condition], "costs": env.costs_by_condition[env.condition]}
    for name, these in rows.items():
        read[f"grows_{name}"], read[f"return_{name}"] = float(grew[these].mean()), float(returns[these].mean())
    read["grows_by_condition"] = {name: float(grew[env.condition == c].mean())
                                  for c, name in enumerate(env.condition_names) if (env.condition == c).any()}
    return read


def reads_condition(check: dict[str, float]) -> bool:
    return check["grows_pays"] >= READ and check["grows_costs"] <= 1 - READ


def train_and_check(label: str, overrides: dict[str, Any], seed: int, updates: int, check_every: int,
                    env_kwargs: dict[str, Any], num_envs: int = 8, toy: Toy = HiddenConditionEnv) -> dict[str, Any]:
    """Train one configuration on ``toy``; read its argmax policy every ``check_every`` updates."""
    env = toy(num_envs=num_envs, **env_kwargs)
    config = AgentConfig(**{"rollout_steps": env.max_epochs, **overrides})
    trainer, checks = Trainer(env, config, seed=seed, total_updates=updates), []
    for metrics in trainer.train():
        update = int(metrics["update"])
        if update % check_every == 0 or update == updates:
            checks.append({"update": update, "entropy_op": float(metrics["entropy/op"]),
                           **greedy_read(trainer, env_kwargs, toy)})
    first = next((c["update"] for c in checks if reads_condition(c)), None)
    return {"label": label, "agent_kwargs": overrides, "seed": seed, "updates": updates, "num_envs": num_envs,
            "toy": toy.__name__, "env_kwargs": env_kwargs, "first_read": first,
            "reads_at_end": reads_condition(checks[-1]), "checks": checks, **run_stamp()}


def fixed_returns(env_kwargs: dict[str, Any], toy: Toy = HiddenConditionEnv) -> dict[str, float]:
    """Mean return on the held-out episodes of always-WAIT, of growing at the first step GERMINATE is allowed
    (``blind_step``) whatever the condition (``blind``; with ``undo``, fossilized as soon as allowed), and of the
    oracle: without ``undo`` it grows at the first allowed step from ``reveal`` on where it pays and never where it
    costs; with it, it plants at the first allowed step and, from ``reveal`` on, fossilizes where it pays and
    prunes where it costs."""
    probe = toy(num_envs=1, **env_kwargs)
    first, last = probe.grow_window
    informed = max(first, probe.reveal) if max(first, probe.reveal) <= last else None

    def blind(t: int, c: int, allowed: np.ndarray) -> int:
        return next((op for op in (Op.GERMINATE, Op.FOSSILIZE) if allowed[op]), Op.WAIT)

    def oracle(t: int, c: int, allowed: np.ndarray) -> int:
        if not probe.undo:
            return Op.GERMINATE if probe.pays_by_condition[c] and t == informed else Op.WAIT
        if allowed[Op.GERMINATE] or t < probe.reveal:
            return Op.GERMINATE if allowed[Op.GERMINATE] else Op.WAIT
        if not probe.pays_by_condition[c] and allowed[Op.PRUNE]:
            return Op.PRUNE
        return Op.FOSSILIZE if allowed[Op.FOSSILIZE] else Op.WAIT

    plays = {"wait": lambda t, c, allowed: Op.WAIT, "blind": blind, "oracle": oracle}
    out = {"blind_step": first}
    for name, choose in plays.items():
        env = toy(num_envs=toy.eval_episodes, **env_kwargs)
        _, info = env.reset(seed=EVAL_SEED)
        total = np.zeros(env.num_envs)
        for t in range(env.max_epochs):
            actions = np.zeros((env.num_envs, len(spaces.head_sizes(1))), np.int64)
            allowed = info["op_slot_mask"][:, :, 0]
            actions[:, 0] = [choose(t, c, allowed[i]) for i, c in enumerate(env.condition)]
            _, reward, _, _, info = env.step(actions)
            total += reward
        out[name] = float(total.mean())
    return out


HEADER = ("| configuration | seeds | sub-envs | updates | read by the end | first read (median update, seeds that "
          "never read last) | final return | final grows on pays / costs | agent kwargs |\n"
          "|---|---:|---:|---:|---:|---:|---:|---|---|")


def _row(label: str, mine: list[dict[str, Any]]) -> str:
    # A seed that never read the condition counts as reading after every other (the declared read's rule).
    firsts = [math.inf if r["first_read"] is None else r["first_read"] for r in mine]
    median, readers = statistics.median(firsts), sum(f < math.inf for f in firsts)
    ends = [r["checks"][-1] for r in mine]
    first = f"{'never' if median == math.inf else f'{median:g}'} ({readers} read)"
    grows = " / ".join(f"{statistics.mean(e[f'grows_{c}'] for e in ends):.2f}" for c in CONDITIONS)
    cells = [label, len(mine), mine[0]["num_envs"], mine[0]["updates"], sum(r["reads_at_end"] for r in mine), first,
             f"{100 * statistics.mean(e['return'] for e in ends):.2f}", grows,
             f"`{json.dumps(mine[0]['agent_kwargs'], sort_keys=True)}`"]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def report(runs: list[dict[str, Any]], toy: Toy = HiddenConditionEnv) -> str:
    """One row per configuration label: how many seeds read the condition, when, and the final argmax return.
    Every run must be of ``toy`` (runs from before the key was written are of this module's)."""
    env_kwargs = {json.dumps(r["env_kwargs"], sort_keys=True) for r in runs}
    if len(env_kwargs) != 1:
        raise ValueError(f"runs of different toys in one table: {sorted(env_kwargs)}")
    other = {r.get("toy", HiddenConditionEnv.__name__) for r in runs} - {toy.__name__}
    if other:
        raise ValueError(f"runs of {sorted(other)} in a table of {toy.__name__}: read them with their own module")
    fixed = fixed_returns(runs[0]["env_kwargs"], toy)
    name = "" if toy is HiddenConditionEnv else f"{toy.__name__} "
    lines = [f"Toy {name}{next(iter(env_kwargs))}; held-out argmax return (points): always-WAIT "
             f"{100 * fixed['wait']:.2f}, grow at step {fixed['blind_step']} whatever the condition "
             f"{100 * fixed['blind']:.2f}, oracle {100 * fixed['oracle']:.2f}.", "", HEADER]
    for label in dict.fromkeys(r["label"] for r in runs):
        mine = [r for r in runs if r["label"] == label]
        if len({json.dumps([r["agent_kwargs"], r["updates"], r["num_envs"]], sort_keys=True) for r in mine}) > 1:
            raise ValueError(f"label {label!r} names runs of different configurations, updates or sub-envs")
        lines.append(_row(label, mine))
    return "\n".join(lines)


def paired_first_reads(runs: list[dict[str, Any]], label: str, reference: str) -> dict[str, Any]:
    """``label``'s first read minus ``reference``'s (updates), paired by training seed over the seeds where both
    read: the mean and its Student-t 95% CI half-width (NaN under 2 seeds), the seeds paired, and the seeds both
    ran where either never read (left out: a never has no update to subtract)."""
    def firsts(name: str) -> dict[int, int | None]:
        return {r["seed"]: r["first_read"] for r in runs if r["label"] == name}
    mine, theirs = firsts(label), firsts(reference)
    shared = sorted(mine.keys() & theirs.keys())
    both = [s for s in shared if mine[s] is not None and theirs[s] is not None]
    mean, half = mean_ci95([mine[s] - theirs[s] for s in both])
    return {"mean": mean, "ci95": half, "seeds": len(both), "unpaired": len(shared) - len(both)}


def paired_lines(runs: list[dict[str, Any]], reference: str) -> list[str]:
    """One line per other label: its first read paired against ``reference``'s (:func:`paired_first_reads`)."""
    labels = list(dict.fromkeys(r["label"] for r in runs))
    if reference not in labels:
        raise ValueError(f"--paired-against {reference!r}: no runs of it; the labels are {labels}")
    lines = []
    for label in labels:
        if label != reference:
            d = paired_first_reads(runs, label, reference)
            lines.append(f"{label} − {reference}, first read paired by seed: {d['mean']:+.0f} ± {d['ci95']:.0f} "
                         f"updates (Student-t 95%, {d['seeds']} seeds where both read; {d['unpaired']} where "
                         "either never read)")
    return lines


def read_runs(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None, toy: Toy = HiddenConditionEnv, prog: str = "hidden_condition",
         description: str | None = None) -> None:
    """The command line of this toy or of a subclass ``toy``, whose module passes its ``prog`` and ``description``."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.studies.{prog}",
                                     description=description or __doc__.split("\n\n")[0])
    parser.add_argument("--config", nargs=2, action="append", default=[], metavar=("LABEL", "AGENT_KWARGS"),
                        help="a configuration to train: a label and a JSON object of AgentConfig overrides")
    parser.add_argument("--seeds", nargs="+", default=["0-4"], help="training seeds and ranges, e.g. 0-4")
    parser.add_argument("--updates", type=int, default=300, help="PPO updates per run")
    parser.add_argument("--check-every", type=int, default=10, help="updates between reads of the argmax policy")
    parser.add_argument("--num-envs", type=int, default=8, help="training sub-envs (each update's episodes)")
    parser.add_argument("--env-kwargs", type=json.loads, default={}, help="JSON kwargs of HiddenConditionEnv")
    parser.add_argument("--out", type=Path, required=True, help="JSON-lines file the runs are appended to")
    parser.add_argument("--paired-against", metavar="LABEL",
                        help="also print every other label's first read minus this one's, paired by seed")
    args = parser.parse_args(argv)
    earlier = read_runs(args.out) if args.out.exists() else []
    if args.config and earlier and earlier[0]["env_kwargs"] != args.env_kwargs:
        parser.error(f"--env-kwargs {json.dumps(args.env_kwargs)}: {args.out} holds runs of the toy "
                     f"{json.dumps(earlier[0]['env_kwargs'])}; one file per toy")
    torch.set_num_threads(1)
    for label, kwargs in args.config:
        for seed in parse_seeds(args.seeds):
            run = train_and_check(label, json.loads(kwargs), seed, args.updates, args.check_every, args.env_kwargs,
                                  args.num_envs, toy)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("a") as f:
                f.write(json.dumps(run) + "\n")
            print(f"{label} seed {seed}: first read at update {run['first_read']}, reads at the end "
                  f"{run['reads_at_end']}", flush=True)
    table = report(read_runs(args.out), toy)
    args.out.with_suffix(".md").write_text(table + "\n")
    print(table)
    if args.paired_against:
        print("\n".join(["", *paired_lines(read_runs(args.out), args.paired_against)]))


if __name__ == "__main__":
    main()
