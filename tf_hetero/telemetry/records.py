"""The one task record and the one round record: what the monitor, the task log, Progress,
the demo, the benchmark and the notebooks read.

>>> TaskRecord(worker=1, start=2.0, end=2.5).duration
0.5
"""

from __future__ import annotations

import dataclasses

__all__ = ["TaskRecord", "RoundRecord"]


@dataclasses.dataclass(frozen=True)
class TaskRecord:
    """One finished task (closure) on one worker. Times are ``time.perf_counter()`` seconds.

    ``applied``: its gradient reached the variables (False: dropped); ``staleness``: updates
    applied between its start and its own; ``round``: its round (``None``: async, or a task
    log that does not know); ``size``: work units it processed (granules of samples for a
    sized strategy's task, else 1)."""

    worker: int
    start: float
    end: float
    applied: bool = True
    staleness: int = 0
    round: int | None = None
    size: int = 1

    @property
    def unit_time(self) -> float:
        """Seconds per work unit."""
        return self.duration / max(self.size, 1)

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclasses.dataclass(frozen=True)
class RoundRecord:
    """One round, once applied (or closed with nothing to apply).

    ``kind``: ``"train"``, ``"drain"`` (push-only, H-PS) or ``"fold"`` (late gradients only,
    EPSP slack); ``book``: the worker group whose round it is; ``lanes``: micro-batches per
    accumulator lane; ``applied``: micro-batches the apply reported; ``info``: what the
    policies decided (a log); ``folds``: late lanes folded in, with their weight;
    ``workers``: the round's tasks per worker that ran them; ``copies``: task-transfer
    copies made in it."""

    id: int
    t_open: float
    t_close: float
    t_applied: float
    tasks: int
    lanes: dict
    applied: int
    info: dict = dataclasses.field(default_factory=dict)
    folds: dict = dataclasses.field(default_factory=dict)
    kind: str = "train"
    book: int = 0
    workers: dict = dataclasses.field(default_factory=dict)
    copies: int = 0

    @property
    def training(self) -> bool:
        """A round of ``fit``'s tasks (not a push-only or fold-only round)."""
        return self.kind == "train"
