"""The hidden-condition toy with the task's twelve conditions: can esper_agent learn to undo growth on the one
condition where keeping it costs, when no single feature singles that condition out?

``benchmarks.studies.hidden_condition``'s toy shows its condition as one accuracy whose level tells "pays" from
"costs" at a glance. On ``Esper-CIFAR10-v0`` it is not so: after epoch 5 of the head-to-head agent's planting,
``pool5k-noise40`` sits between other conditions on validation accuracy and between them again on the training −
validation gap; only the pair sets it apart (``benchmarks/results/screen_undo_all/Esper-CIFAR10-v0/undo_read.md``).
This toy keeps the other's lifecycle (``undo``: plant, keep or prune, the holding timeout) and takes the rest from
that measurement, per condition, drawn alike:

- the return without growth is the seedling's return there, and a kept seed adds what keeping rather than
  pruning at epoch 6 is worth there (``keep − prune``, the screen's return; negative on ``pool5k-noise40``, −9.14
  points, and on ``classes2``, −2.55, where the compute is not repaid);
- from ``reveal`` on, the observation shows the planted network's validation and training accuracy after step 5,
  each drawn per episode around the condition's mean with the spread its five measured episodes had (their range
  over 2.33, about a standard deviation for five draws); before, both read -1 (Esper's sentinel).

The observation is ``[step / horizon, validation, training, live, fossilized, pruned]``; the reward, the luck term
and the planting's cost are the other toy's. A run reads the condition when its argmax policy keeps on at least 90%
of the held-out episodes of the ten conditions where keeping pays and on at most 10% of ``pool5k-noise40``'s, the
one where keeping costs test accuracy (``classes2``'s loss is compute alone, and counts on neither side), over 240
held-out episodes (about 20 of each condition). A policy that reads it must combine two features seen at once,
from about one episode in twelve. These are
fixed measurements, not tuned: the toy is as hard as the task's one decision, and no harder or easier on purpose.

    python -m benchmarks.studies.shaped_condition --updates 100 --seeds 0-9 \\
        --config e3 '{"learning_rate": 0.001, "wait_prior": 1.0, "prune_prior": 2.0, "seed_group_size": 4}' \\
        --out benchmarks/results/hidden_condition/shaped.jsonl

The command line and the table are ``hidden_condition``'s (its ``main``), trained and read on this toy.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from benchmarks.studies import hidden_condition
from benchmarks.studies.hidden_condition import HiddenConditionEnv
from esper_env.spaces import SENTINEL


class Measured(NamedTuple):
    """One condition of ``screen_undo_all/Esper-CIFAR10-v0/undo_read.md`` (code e3c7833, 5 reset seeds), points."""
    name: str
    seedling_return: float
    keep_minus_prune: float  # return; the table's "prune − keep" negated
    validation: tuple[float, float, float]  # after step 5: mean, lowest, highest
    training: tuple[float, float, float]


TASK = (
    Measured("full", 68.20, 4.48, (79.6, 79.2, 80.1), (78.1, 77.9, 78.5)),
    Measured("classes2", 48.23, -2.55, (97.9, 95.9, 99.0), (98.9, 97.6, 99.7)),
    Measured("classes5", 68.78, 0.14, (88.9, 85.6, 92.8), (88.8, 85.6, 92.5)),
    Measured("noise40", 60.48, 6.42, (67.8, 67.7, 68.1), (41.6, 41.3, 41.8)),
    Measured("noise60", 52.07, 8.97, (55.6, 54.5, 57.1), (24.8, 24.2, 25.2)),
    Measured("pool15k", 66.78, 3.04, (78.3, 77.0, 78.9), (80.3, 79.8, 80.7)),
    Measured("pool15k-noise20", 62.05, 2.30, (74.0, 73.5, 74.9), (61.1, 60.8, 61.4)),
    Measured("pool2k", 48.95, 3.18, (65.1, 63.6, 65.9), (99.5, 99.5, 99.6)),
    Measured("pool5k", 60.68, 1.53, (74.9, 73.9, 75.5), (89.8, 88.4, 90.4)),
    Measured("pool5k-noise40", 38.28, -9.14, (57.3, 55.4, 58.9), (52.1, 51.3, 52.7)),
    Measured("res16", 61.99, 5.79, (72.8, 72.4, 73.1), (71.5, 71.2, 71.9)),
    Measured("res8", 52.42, 6.13, (62.4, 62.0, 62.8), (61.0, 60.7, 61.2)),
)
RANGE_TO_STD = 2.33  # the expected range of five normal draws, in standard deviations
READ_UNDO = "pool5k-noise40"  # the condition a read asks the policy to undo: keeping costs test accuracy only there


class ShapedConditionEnv(HiddenConditionEnv):
    """The hidden-condition toy on the task's twelve conditions (module docstring); ``seen_noise`` scales the
    measured spread of the two features (1: as measured, 0: each condition's mean exactly)."""

    eval_episodes = 240  # about 20 of each condition, so that a read sees more than a few pool5k-noise40 episodes

    def __init__(self, num_envs: int = 8, horizon: int = 20, reveal: int = 5, cost: float = 0.01,
                 luck_std: float = 0.03, undo: tuple[int, int] = (3, 5), seen_noise: float = 1.0) -> None:
        if seen_noise < 0:
            raise ValueError(f"seen_noise={seen_noise}: expected >= 0 (a scale of the measured spread)")
        super().__init__(num_envs=num_envs, horizon=horizon, reveal=reveal, cost=cost, luck_std=luck_std, undo=undo)
        self.condition_names = tuple(m.name for m in TASK)
        self.chance = np.zeros(len(TASK))
        self.top = np.array([m.seedling_return for m in TASK]) / 100
        self.gain = np.array([m.keep_minus_prune for m in TASK]) / 100
        self.pays_by_condition = self.gain > 0
        self.costs_by_condition = np.array([name == READ_UNDO for name in self.condition_names])
        self.seen_mean = np.array([(m.validation[0], m.training[0]) for m in TASK]) / 100
        spread = [(m.validation[2] - m.validation[1], m.training[2] - m.training[1]) for m in TASK]
        self.seen_std = seen_noise * np.array(spread) / 100 / RANGE_TO_STD
        self.seen = np.zeros((num_envs, 2))
        self._set_observation_width(2)

    def _draw_condition(self, rng: np.random.Generator) -> int:
        return int(rng.integers(len(TASK)))

    def _start(self, i: int) -> None:
        super()._start(i)
        c = self.condition[i]
        self.seen[i] = self._rngs[i].normal(self.seen_mean[c], self.seen_std[c])

    def _seen(self) -> np.ndarray:
        return np.where((self.step_index >= self.reveal)[:, None], self.seen, SENTINEL)


def main(argv: list[str] | None = None) -> None:
    hidden_condition.main(argv, toy=ShapedConditionEnv, prog="shaped_condition", description=__doc__.split("\n\n")[0])


if __name__ == "__main__":
    main()
