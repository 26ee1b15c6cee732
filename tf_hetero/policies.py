"""Policies of the round engine: small objects, one method each, pure Python.

- **Sync policy** -- ``should_close(round) -> bool``: may the open round close now? Its
  ``mode`` says whether tasks form rounds at all (``"rounds"``) or apply at once (``"async"``).
- **Assignment policy** -- ``plan(idle, busy, monitor) -> list[int]``: the workers that get a
  task in the next round, one entry per task (a worker may appear several times).
- **Gate** (async mode) -- ``may_start(worker, clocks) -> bool``: may this idle worker start
  another task now? ``clocks[w]`` counts the tasks worker ``w`` has finished.

>>> from tf_hetero.engine import Round, Task
>>> r = Round(0, [Task(i, None, round=0) for i in range(4)], live_workers=4)
>>> for t in r.tasks[:3]: t.state = "done"
>>> AllTasks().should_close(r), FirstK(backups=1).should_close(r)
(False, True)
>>> StalenessBound(2).may_start(0, {0: 5, 1: 3}), StalenessBound(2).may_start(0, {0: 6, 1: 3})
(True, False)
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

__all__ = ["SyncPolicy", "AssignmentPolicy", "Gate", "Async", "AllTasks", "FirstK",
           "OnePerWorker", "OnePerIdleWorker", "Unbounded", "StalenessBound"]


class SyncPolicy(Protocol):
    mode: str  # "rounds" or "async"

    def should_close(self, round) -> bool: ...


class AssignmentPolicy(Protocol):
    def plan(self, idle: Sequence[int], busy: Sequence[int], monitor) -> list[int]: ...


class Gate(Protocol):
    def may_start(self, worker: int, clocks: Mapping[int, int]) -> bool: ...


class Async:
    """Every task's gradient is applied as soon as it is computed (no rounds)."""

    mode = "async"

    def should_close(self, round) -> bool:  # never called in async mode
        return True

    def __repr__(self):
        return "Async()"


class AllTasks:
    """Enforced sync: a round closes when every one of its tasks is in (BSP)."""

    mode = "rounds"

    def should_close(self, round) -> bool:
        return round.num_done == len(round.tasks)

    def __repr__(self):
        return "AllTasks()"


class FirstK:
    """Backup workers (Chen et al. 2016): of N live workers, a round applies the first
    N - ``backups`` tasks in; the round's other tasks are dropped when they finish.

    A round that has fewer tasks (a worker still busy with a late task sits it out) waits for
    at most all of its tasks.
    """

    mode = "rounds"

    def __init__(self, backups: int):
        if not isinstance(backups, int) or isinstance(backups, bool) or backups < 0:
            raise ValueError(f"backups={backups!r}: need an integer >= 0.")
        self.backups = backups

    def should_close(self, round) -> bool:
        live = round.live_workers or len(round.tasks)
        needed = min(len(round.tasks), max(1, live - self.backups))
        return round.num_done >= needed

    def __repr__(self):
        return f"FirstK(backups={self.backups})"


class OnePerWorker:
    """One task per live worker per round, busy or not (BSP)."""

    def plan(self, idle, busy, monitor) -> list[int]:
        return sorted(list(idle) + list(busy))

    def __repr__(self):
        return "OnePerWorker()"


class OnePerIdleWorker:
    """One task per idle live worker; a worker still busy with a late task sits the round out."""

    def plan(self, idle, busy, monitor) -> list[int]:
        return sorted(idle)

    def __repr__(self):
        return "OnePerIdleWorker()"


class Unbounded:
    """No staleness bound (plain asynchronous training)."""

    def may_start(self, worker, clocks) -> bool:
        return True

    def __repr__(self):
        return "Unbounded()"


class StalenessBound:
    """SSP: a worker may not get more than ``staleness`` tasks ahead of the slowest live worker."""

    def __init__(self, staleness: int):
        if not isinstance(staleness, int) or isinstance(staleness, bool) or staleness < 0:
            raise ValueError(f"staleness={staleness!r}: need an integer >= 0.")
        self.staleness = staleness

    def may_start(self, worker, clocks) -> bool:
        return clocks[worker] - min(clocks.values()) <= self.staleness

    def __repr__(self):
        return f"StalenessBound({self.staleness})"
