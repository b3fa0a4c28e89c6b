"""The acceptance screen's arms as data, and the named arm sets (:data:`ARM_SETS`) a screen command picks from.

An :class:`Arm` is a name, a policy kind, the env kwargs it overrides (a static arm of another size is the WAIT
policy on another starting host, e.g. ``{"host_widths": [16, 32, 64]}``) and, for kind ``plan``, a list of
:class:`PlanStep`: "from this epoch on, do this op in this slot as soon as the masks allow it", which
``benchmarks.screen.PlanActor`` executes. A growth plan may name its ``twin``, the static arm whose architecture
it ends at (the screen's criterion 2). Blueprint names resolve through ``esper_env.blueprints.BLUEPRINTS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from esper_env.blueprints import BLUEPRINTS, FAMILY_BLUEPRINTS
from esper_env.spaces import Op

KINDS = ("static", "random", "heuristic", "plan")
SEEDLING_ARM = "static-seedling"
"""The static seedling's arm name in every set: the screen's baseline (``benchmarks.screen_report``)."""
# The two catalogues' names are distinct: a plan names the blueprints of the host it is written for.
BLUEPRINT_INDEX = {b.name: i for catalogue in (BLUEPRINTS, FAMILY_BLUEPRINTS) for i, b in enumerate(catalogue)}


def blueprint_index(name: str) -> int:
    """The blueprint head's value for a catalogue name (the small host's ``BLUEPRINTS`` or the family host's
    ``FAMILY_BLUEPRINTS``)."""
    if name not in BLUEPRINT_INDEX:
        raise ValueError(f"blueprint {name!r} is not in the catalogue; expected one of {list(BLUEPRINT_INDEX)}")
    return BLUEPRINT_INDEX[name]


class PlanStep(NamedTuple):
    """From step ``epoch`` of the episode on (counted from 0), do ``op`` in ``slot`` as soon as the masks allow
    it; ``blueprint`` names what GERMINATE plants (None for the other ops)."""

    epoch: int
    op: Op
    slot: int
    blueprint: str | None = None


def plan_step(epoch: int, op: Op | str, slot: int, blueprint: str | None = None) -> PlanStep:
    """A checked :class:`PlanStep`; ``op`` may be a name (``"germinate"``)."""
    if isinstance(op, str) and op.upper() not in Op.__members__:
        raise ValueError(f"op {op!r} is unknown; expected one of {[o.name.lower() for o in Op]}")
    op = Op[op.upper()] if isinstance(op, str) else Op(op)
    if op == Op.WAIT or epoch < 0 or slot < 0:
        raise ValueError(f"plan step {op.name} epoch={epoch} slot={slot}; expected an op other than WAIT (a plan "
                         "lists only the ops it takes) and epoch, slot >= 0")
    if (op == Op.GERMINATE) != (blueprint is not None):
        raise ValueError(f"plan step {op.name} at epoch {epoch} slot {slot} has blueprint {blueprint!r}; expected "
                         "a blueprint name for GERMINATE and None for every other op")
    if blueprint is not None:
        blueprint_index(blueprint)
    return PlanStep(int(epoch), op, int(slot), blueprint)


@dataclass(frozen=True)
class Arm:
    """A fixed policy of the screen (see the module docstring)."""

    name: str
    kind: str
    """``static`` (always WAIT), ``random`` (uniform over valid joint actions), ``heuristic`` or ``plan``."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Env kwargs this arm overrides (the starting host of a static arm of another size)."""
    plan: tuple[PlanStep, ...] = ()
    """Kind ``plan``: the steps :class:`PlanActor` executes."""
    twin: str | None = None
    """Kind ``plan``: the static arm whose architecture this growth arm ends at (criterion 2)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"arm {self.name!r}: kind {self.kind!r}; expected one of {KINDS}")
        if (self.kind == "plan") != bool(self.plan):
            raise ValueError(f"arm {self.name!r}: kind {self.kind!r} with {len(self.plan)} plan steps; expected "
                             "steps for kind 'plan' and none for the others")
        if self.twin is not None and self.kind != "plan":
            raise ValueError(f"arm {self.name!r}: twin {self.twin!r} on kind {self.kind!r}; only a plan has a twin")
        object.__setattr__(self, "plan", tuple(plan_step(*step) for step in self.plan))

    def record(self) -> dict[str, Any]:
        """The arm as a slice records it (what the report reads)."""
        plan = [[s.epoch, s.op.name.lower(), s.slot, s.blueprint] for s in self.plan]
        return {"arm": self.name, "kind": self.kind, "twin": self.twin, "plan": plan}



def synthetic_arms() -> tuple[Arm, ...]:
    """A small set that runs on today's ``Esper-Synthetic-v0`` (three blocks, one slot after each): the seedling
    and a wider static host, the heuristic, random, and growth plans with today's depth blueprints."""
    grow = [(0, "germinate", 0, "conv_light"), (0, "fossilize", 0)]
    return (Arm(SEEDLING_ARM, "static"), Arm("static-wide", "static", {"host_widths": [16, 32, 64]}),
            Arm("heuristic", "heuristic"), Arm("random", "random"), Arm("grow-early", "plan", plan=tuple(grow)),
            Arm("grow-staged", "plan", plan=(*grow, (2, "germinate", 2, "conv_heavy"), (2, "fossilize", 2))),
            Arm("grow-late", "plan", plan=tuple((4, *step[1:]) for step in grow)))


FAMILY_SIZES = {"seedling": ((16, 32, 32), (0, 0, 0)), "small": ((32, 64, 64), (0, 0, 0)),
                "medium": ((32, 64, 64), (0, 1, 1)), "wide": ((64, 128, 128), (0, 0, 0)),
                "final": ((64, 128, 128), (0, 1, 1)), "largest": ((64, 256, 256), (0, 1, 1))}
"""The static frontier of the family task: (widths, blocks) per name; the seedling is the task's own."""


def _grow(epoch: int, *rounds: tuple[str, tuple[int, ...]]) -> tuple[tuple, ...]:
    """Plan steps from ``epoch`` on: each round plants its blueprint in its slots and fossilizes it (a slot's
    later round waits for its earlier one, ``PlanActor``'s rule)."""
    return tuple(step for blueprint, slots in rounds for slot in slots
                 for step in ((epoch, "germinate", slot, blueprint), (epoch, "fossilize", slot)))


def family_arms() -> tuple[Arm, ...]:
    """The acceptance screen of the task's version 2 (``esper_env.FAMILY_TASK``, 20 epochs): the static frontier,
    growth plans (early, staged, late; width-first, depth-first), the heuristic and random. ``grow-x4@E`` plants
    ``widen_l`` in every stage from epoch E (0, 2, 5, 10: 0, 10, 25, 50% of the episode), reaching 64/128/128,
    ``grow-x2@E`` plants ``widen_s`` (to 32/64/64, the other final size the growth probes measured);
    ``grow-x2-deep@0`` grows to the medium net, ``grow-x2-x2@10`` doubles every stage at once and again at half
    time."""
    statics = tuple(Arm(f"static-{name}" if name != "seedling" else SEEDLING_ARM, "static",
                        {} if name == "seedling" else {"start_widths": list(w), "start_blocks": list(b)})
                    for name, (w, b) in FAMILY_SIZES.items())
    every, deep = (0, 1, 2), (1, 2)
    plans = (
        *(Arm(f"grow-x2@{e}", "plan", plan=_grow(e, ("widen_s", every)), twin="static-small") for e in (0, 2, 5, 10)),
        *(Arm(f"grow-x4@{e}", "plan", plan=_grow(e, ("widen_l", every)), twin="static-wide") for e in (0, 2, 5, 10)),
        Arm("grow-x4-deep@0", "plan", plan=_grow(0, ("widen_l", every), ("deepen", deep)), twin="static-final"),
        Arm("grow-deep-x4@0", "plan", plan=_grow(0, ("deepen", deep), ("widen_l", every)), twin="static-final"),
        Arm("grow-largest@0", "plan", plan=_grow(0, ("widen_l", every), ("widen_s", deep), ("deepen", deep)),
            twin="static-largest"),
        Arm("grow-x2-deep@0", "plan", plan=_grow(0, ("widen_s", every), ("deepen", deep)), twin="static-medium"),
        Arm("grow-x2-x2@10", "plan", plan=_grow(0, ("widen_s", every)) + _grow(10, ("widen_s", every)),
            twin="static-wide"),
    )
    return (*statics, *plans, Arm("heuristic", "heuristic"), Arm("random", "random"))


def undo_arms() -> tuple[Arm, ...]:
    """Can growth be undone once the condition shows? The head-to-head's esper_agent planted ``deepen`` in slots 2
    and 1 and ``widen_s`` in slot 0 after one epoch on every condition and fossilized them, below the seedling
    where capacity costs (``pool5k-noise40``). The same planting from epoch 1, then: fossilized as soon as
    allowed (the agent's plan), fossilized at epoch 6, or pruned at epoch 6, after the conditions' curves part
    (epoch 4); against the seedling."""
    plant = ((1, "germinate", 2, "deepen"), (1, "germinate", 1, "deepen"), (1, "germinate", 0, "widen_s"))

    def then(epoch: int, op: str) -> tuple[tuple, ...]:
        return (*plant, *((epoch, op, slot) for slot in (2, 1, 0)))

    return (Arm(SEEDLING_ARM, "static"), Arm("agent-plan@1", "plan", plan=then(1, "fossilize")),
            Arm("agent-plan@1-fossilize@6", "plan", plan=then(6, "fossilize")),
            Arm("agent-plan@1-prune@6", "plan", plan=then(6, "prune")))


ARM_SETS: dict[str, Callable[[], tuple[Arm, ...]]] = {"synthetic": synthetic_arms, "family": family_arms,
                                                       "undo": undo_arms}
"""Named arm sets; ``--set`` picks one."""


def arm_set(name: str) -> tuple[Arm, ...]:
    """The arms of a set, checked: unique names, and every twin a static arm of the set."""
    if name not in ARM_SETS:
        raise ValueError(f"arm set {name!r} is unknown; expected one of {sorted(ARM_SETS)}")
    arms = ARM_SETS[name]()
    kinds = {arm.name: arm.kind for arm in arms}
    if len(kinds) != len(arms):
        raise ValueError(f"arm set {name!r} repeats an arm name: {[arm.name for arm in arms]}")
    for arm in arms:
        if arm.twin is not None and kinds.get(arm.twin) != "static":
            raise ValueError(f"arm {arm.name!r}: twin {arm.twin!r} is not a static arm of set {name!r}")
    return arms

