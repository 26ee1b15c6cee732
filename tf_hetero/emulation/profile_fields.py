"""The parts of a heterogeneity profile (:class:`~tf_hetero.emulation.profile.Profile`): its
field types (a hardware class, a change of speed, a PS's interference), its error, and the
parsers of its fields' values, each raising a :class:`ProfileError` that names the field and
the value.

>>> factors("3:4,2:2", "slow worker", "slow factor")
((3, 4.0), (2, 2.0))
>>> positive("base_ms", "-1")
Traceback (most recent call last):
tf_hetero.emulation.profile_fields.ProfileError: Profile field 'base_ms' must be a finite number > 0; received '-1'.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

__all__ = ["ProfileError", "HardwareClass", "Change", "Interference", "factors", "positive",
           "num", "index", "interference", "CLASS_NAME"]


class ProfileError(ValueError):
    """A heterogeneity profile that cannot be used; the message names the value and the fix."""


@dataclasses.dataclass(frozen=True)
class HardwareClass:
    name: str
    count: int
    slowdown: float


@dataclasses.dataclass(frozen=True)
class Change:
    """From its task ``at_task`` on, ``worker`` runs ``slowdown`` times slower than base."""

    worker: int
    at_task: int
    slowdown: float


@dataclasses.dataclass(frozen=True)
class Interference:
    """PS ``ps`` serves ``factor`` times slower during ``on_s`` seconds of every ``period_s``
    (wall clock, phase 0 at the Unix epoch): a noisy neighbour on the server's machine."""

    ps: int
    factor: float
    on_s: float
    period_s: float


def factors(value: str, index_what: str, factor_what: str) -> tuple:
    """``"3:4,2:2"`` as ``((3, 4.0), (2, 2.0))``: task indices and their slowdown factors."""
    pairs = [p.split(":") for p in value.split(",")]
    return tuple((index(index_what, i), positive(factor_what, f)) for i, f in pairs)


def positive(name: str, value: Any, *, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ProfileError(f"Profile field {name!r} must be a number; received {value!r}.") from None
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ProfileError(f"Profile field {name!r} must be a finite number {bound}; received {value!r}.")
    return v


def num(x: float) -> str:
    """Shortest text that parses back to the same float (``4`` rather than ``4.0``)."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


CLASS_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def index(name: str, value: Any) -> int:
    try:
        i = int(str(value))
    except ValueError:
        raise ProfileError(
            f"Profile field {name!r} must be a non-negative integer; received {value!r}.") from None
    if i < 0:
        raise ProfileError(f"Profile field {name!r} must be a non-negative integer; received {value!r}.")
    return i


def interference(part: str) -> Interference:
    """``PS:FACTOR@ON/PERIOD``, e.g. ``0:4@1/5``."""
    ps, rest = part.split(":")
    factor, window = rest.split("@")
    on, period = window.split("/")
    return Interference(index("ps_interfere PS", ps), positive("ps_interfere factor", factor),
                        positive("ps_interfere on_s", on), positive("ps_interfere period_s", period))
