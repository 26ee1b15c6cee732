"""Sync policies: when may a round close? (:class:`~tf_hetero.engine.api.SyncPolicy`)

>>> from tf_hetero.engine import Round, Task
>>> r = Round(0, [Task(i, None, round=0) for i in range(4)], live_workers=4)
>>> for t in r.tasks[:3]: t.state = "done"; r.task_in(t)   # what the engine does
>>> AllTasks().should_close(r, 0.0), FirstK(backups=1).should_close(r, 0.0)
(False, True)
"""

from __future__ import annotations

import math

__all__ = ["Async", "AllTasks", "FirstK", "SlackSync"]


class Async:
    """Every task's gradient is applied as soon as it is computed (no rounds)."""

    mode = "async"

    def should_close(self, rnd, now) -> bool:  # never called in async mode
        return True

    def __repr__(self):
        return "Async()"


class AllTasks:
    """Enforced sync: a round closes when every one of its tasks is in (BSP).

    ``overlap=True``: the next round opens as soon as this one closes, while its apply runs
    (on the chief), so the workers never wait for an apply; the next round's tasks read the
    model before that apply lands, so every update uses gradients one round old
    (staleness 1, as pipelined SGD). Default: the next round reads this round's update.
    """

    mode = "rounds"

    def __init__(self, overlap: bool = False):
        if not isinstance(overlap, bool):
            raise ValueError(f"overlap={overlap!r}: need True or False.")
        self.overlap = overlap

    def should_close(self, rnd, now) -> bool:
        return rnd.all_done

    def __repr__(self):
        return f"AllTasks({'overlap=True' if self.overlap else ''})"


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

    def should_close(self, rnd, now) -> bool:
        live = rnd.live_workers or len(rnd.tasks)
        needed = min(len(rnd.tasks), max(1, live - self.backups))
        return rnd.num_done >= needed

    def __repr__(self):
        return f"FirstK(backups={self.backups})"


class SlackSync:
    """EPSP slack sync: a round closes when all its tasks are in, when ``quorum`` of them are,
    or when ``deadline_factor`` x its projected duration has passed (with at least one in)."""

    mode = "rounds"

    def __init__(self, quorum: float = 0.75, deadline_factor: float = 2.0):
        if not 0 < quorum <= 1:
            raise ValueError(f"quorum={quorum!r}: need 0 < quorum <= 1.")
        if not deadline_factor > 0:
            raise ValueError(f"deadline_factor={deadline_factor!r}: need > 0.")
        self.quorum, self.deadline_factor = quorum, deadline_factor

    def should_close(self, rnd, now) -> bool:
        total, done = len(rnd.tasks), rnd.num_done
        if done >= total or done >= math.ceil(self.quorum * total):
            return True
        deadline = rnd.t_open + self.deadline_factor * rnd.expected_s
        return done >= 1 and not math.isnan(deadline) and now >= deadline

    def __repr__(self):
        return f"SlackSync(quorum={self.quorum}, deadline_factor={self.deadline_factor})"
