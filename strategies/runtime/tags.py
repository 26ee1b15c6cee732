"""The one attribute tf-hetero sets on TensorFlow closures: a :class:`ClosureTag` saying what
the closure is to the engine. Pure Python.

>>> from types import SimpleNamespace
>>> c = SimpleNamespace()
>>> tag_of(c) is None
True
>>> set_tag(c, ClosureTag(ClosureKind.ASYNC)).internal
False
>>> tag_of(c).kind
<ClosureKind.ASYNC: 'async'>
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

__all__ = ["ClosureKind", "ClosureTag", "tag_of", "set_tag"]

_ATTR = "_tf_hetero_tag"


class ClosureKind(str, enum.Enum):
    TASK = "task"  # a training step the engine schedules (``task`` is its engine Task)
    ASYNC = "async"  # a training step of the ASP preset (no engine; timed for the monitor)


@dataclasses.dataclass
class ClosureTag:
    """What a closure is. ``source`` is ``(fn, args, kwargs)`` of a task (to copy it for
    task transfer and to know which accumulators it writes). ``output``: an asynchronous
    step's result, held until a worker ran the step: TF copies a result to the chief only
    while someone holds it, and the loss check reads it there
    (:mod:`~tf_hetero.strategies.runtime.divergence`)."""

    kind: ClosureKind
    task: Any = None
    source: tuple | None = None
    output: Any = None
    #: Errors that had reached the user when the closure was made
    #: (:attr:`~tf_hetero.strategies.runtime.coordinator.HeteroCoordinator.errors_reached_user`):
    #: the fit it belongs to. A closure of a failed fit may start only after its error reached
    #: the user (a worker's own queue keeps it until it runs, cancelled); its failure is then
    #: that fit's echo, not the next fit's error.
    fit: int | None = None
    #: Closures of steps absorbed into this task's round (``Round.absorbed``): they end with
    #: this closure's result (workers.py hands it on).
    echoes: list = dataclasses.field(default_factory=list)

    @property
    def internal(self) -> bool:
        """An engine closure that is no training step of the user's: a drain (pipelined
        H-PS). Rounds' applies never reach a worker's queue (they run on the chief)."""
        return bool(getattr(self.task, "drain", False))


def tag_of(closure) -> ClosureTag | None:
    return getattr(closure, _ATTR, None)


def set_tag(closure, tag: ClosureTag) -> ClosureTag:
    setattr(closure, _ATTR, tag)
    return tag
