"""Task transfer (EPSP): when a round has no task left to hand out, an idle worker of the
round gets a copy of a task that has run long on another worker; the first copy to finish
wins and the other's gradient is never applied. Copies write lanes beyond the workers'
(``extra_lanes``), so a losing copy never mixes with its worker's other gradients.

>>> from tf_hetero.policies import TransferAfter
>>> TaskTransfer(TransferAfter(1.5), extra_lanes=4)    # up to 4 copies in flight at once
TaskTransfer(TransferAfter(factor=1.5), extra_lanes=4)
"""

from __future__ import annotations

import math
import statistics

from tf_hetero.engine.api import Component, TransferPolicy
from tf_hetero.engine.state import TaskState

__all__ = ["TaskTransfer"]


class TaskTransfer(Component):
    """Copies long-running tasks to idle participants when ``policy`` says so.

    The typical task time is the median, over the round's participants, of the round's
    projected task times (``Round.task_s``, from the plan), else of the monitor's smoothed
    times.
    """

    def __init__(self, policy: TransferPolicy, extra_lanes: int):
        if not isinstance(extra_lanes, int) or extra_lanes < 1:
            raise ValueError(f"extra_lanes={extra_lanes!r}: need an integer >= 1 (one lane "
                             "per copy that may run at once).")
        self.policy = policy
        self.extra_lanes = extra_lanes
        self._typical_of = None  # (round, its typical task time), see _typical
        self._quiet = None  # (round, typical, first start): nothing due before it is

    def after_event(self, book) -> None:
        engine = self.engine
        rnd = book.open
        if rnd is None or rnd.pull or engine.error is not None:
            return
        # Called after every event: the cheap reasons to do nothing come first (a 1000-worker
        # round has 1000 events; each full pass here made it cost seconds).
        now = engine.clock()
        typical = self._typical(rnd)
        quiet = self._quiet
        if (quiet is not None and quiet[0] is rnd and quiet[1] == typical
                and not self.policy.should_transfer(now - quiet[2], typical)):
            return  # not even the task started first at the last look is due yet
        running = [t for t in rnd.tasks if t.state == TaskState.RUNNING and t.twin is None]
        if not running:
            return
        if not any(self.policy.should_transfer(now - t.t_start, typical) for t in running):
            # Due is monotone in the time run: no task is due before the one that started
            # first (a task that starts later is due later), so the next events need not
            # look through the round until it is (O(N^2) a round before: ~0.5 ms of the
            # chief's Python per task at 1000 workers).
            self._quiet = (rnd, typical, min(t.t_start for t in running))
            return
        for pioneer in [w for w in rnd.participants if engine.is_live(w) and not engine.busy(w)]:
            # A pioneer is idle: none of the running tasks is its own.
            running = [t for t in running if t.twin is None]
            slow = [t for t in running if self.policy.should_transfer(now - t.t_start, typical)]
            lane = self._free_lane(rnd) if slow else None
            if not slow or lane is None:
                return
            original = max(slow, key=lambda t: now - t.t_start)
            copy = engine.new_task(engine.dispatcher.duplicate(original), round=rnd.id,
                                   lane=lane, twin=original, duplicate=True,
                                   size=original.size)
            original.twin = copy
            rnd.copies.append(copy)
            if engine.monitor:
                engine.monitor.on_event("transfer", round=rnd.id, task=original.id,
                                        straggler=original.worker, pioneer=pioneer)
            engine.dispatch(copy, pioneer, rnd.id)

    def _typical(self, rnd) -> float:
        """The median projected task time of ``rnd``'s participants (NaN: none known); fixed
        for the round when its plan projected every participant, so computed once then."""
        if self._typical_of is not None and self._typical_of[0] is rnd:
            return self._typical_of[1]
        engine = self.engine
        known = [rnd.task_s[w] if w in rnd.task_s else
                 (engine.monitor.ewma_s(w) if engine.monitor else math.nan)
                 for w in rnd.participants]
        known = [m for m in known if not math.isnan(m)]
        typical = statistics.median(known) if known else math.nan
        if all(w in rnd.task_s for w in rnd.participants):
            self._typical_of = (rnd, typical)
        return typical

    def _free_lane(self, rnd) -> int | None:
        engine = self.engine
        used = {t.lane for w in range(engine.num_workers) for t in engine.running(w)
                if t.lane is not None}
        used |= {t.lane for t in rnd.copies}  # a copy already in this round keeps its lane
        for lane in range(engine.num_workers, engine.num_lanes):
            if lane not in used:
                return lane
        return None

    def __repr__(self):
        return f"TaskTransfer({self.policy!r}, extra_lanes={self.extra_lanes})"
