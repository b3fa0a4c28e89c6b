"""Field types of a config dataclass: numpy scalars made plain, and values checked against the annotations.

Shared by the env's :class:`~esper_env.config.EnvConfig` and the agent's config; the annotations are read as
strings (``from __future__ import annotations``), so only the forms those configs use are understood.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def plain_numbers(cfg: Any) -> None:
    """Numpy scalars of a field's kind become Python values: sweeps built with numpy pass ``np.int64`` and
    ``np.float32``, and the config (and ``env.spec.to_json()``) should hold plain JSON types. An integer field
    takes numpy integers, a float field numpy integers and floats; bools stay strict (``np.bool_`` is refused)."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        plain = plain_value(value, _expected_type(f).removesuffix("|None"))
        if plain is not value:
            object.__setattr__(cfg, f.name, plain)


def plain_value(value: Any, base: str) -> Any:
    """``value`` as a plain Python value when it is a numpy scalar of the kind annotation ``base`` names
    (``"int"``, ``"float"``, ``"str"``, ``"tuple[int,...]"``...); anything else unchanged, for the type check to
    judge. Shared by the env's and the agent's configs."""
    if base in ("int", "float") and isinstance(value, np.integer):
        return int(value)
    if base == "float" and isinstance(value, np.floating):
        return float(value)
    if base == "str" and isinstance(value, np.str_):
        return str(value)
    if base.startswith("tuple[") and isinstance(value, tuple):
        item = base[len("tuple[") : -len(",...]")]
        return tuple(plain_value(v, item) for v in value)
    return value


def check_types(cfg: Any) -> None:
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        expected = _expected_type(f)
        if not matches(value, expected):
            kind = type(value)
            name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
            raise TypeError(f"{f.name}={value!r} has type {name}; expected {f.type}")


def _expected_type(f: dataclasses.Field) -> str:
    return str(f.type).replace(" ", "")


def matches(value: Any, annotation: str) -> bool:
    """Whether ``value`` has the type the annotation string names (``"int"``, ``"float|None"``,
    ``"tuple[int,...]"``...); an annotation of another form is a programming error."""
    if value is None:
        return annotation.endswith("|None")
    base = annotation.removesuffix("|None")
    if base == "bool":
        return isinstance(value, bool)
    if base == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if base == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if base == "str":
        return isinstance(value, str)
    if base.startswith("tuple["):
        item = base[len("tuple[") : -len(",...]")]
        return isinstance(value, tuple) and all(matches(v, item) for v in value)
    raise AssertionError(f"unhandled annotation {annotation}")
