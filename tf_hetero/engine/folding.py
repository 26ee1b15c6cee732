"""Late-gradient folding (EPSP slack sync): a gradient that finished after its round closed
stays in its accumulator lane and is folded into a later round's apply with a weight from a
:class:`~tf_hetero.engine.api.LatePolicy` (e.g. ``1 / (1 + staleness)``); weight 0 drops it.

While a late gradient waits in lane ``w`` of slot ``s``, or a task of a closed round is still
writing it there, worker ``w`` gets no task of a round writing slot ``s`` (it would overwrite
the late gradient before the apply that folds it reads it: seen under chaos kills and with a
straggler more than two rounds slow); when ``fit`` joins with gradients still waiting, a
*fold-only* round (no task of its own) applies them.

>>> from tf_hetero.engine import RoundEngine
>>> from tf_hetero.policies import AllTasks, OnePerWorker, StalenessWeight
>>> folding = LateFolding(StalenessWeight(max_staleness=4))
>>> engine = RoundEngine(3, AllTasks(), OnePerWorker(), components=[folding])
>>> folding.waiting[(2, 1)] = (7, [])      # lane 2, slot 1 holds round 7's late gradient
>>> folding.blocks(2, 1), folding.blocks(2, 0), folding.has_work()
(True, False, True)
"""

from __future__ import annotations

from tf_hetero.engine.api import Component, LatePolicy
from tf_hetero.engine.state import RoundKind, TaskState

__all__ = ["LateFolding"]


class LateFolding(Component):
    """Keeps late gradients and folds them into the next round of their book."""

    def __init__(self, policy: LatePolicy):
        self.policy = policy
        #: ``(lane, slot) -> (round, late tasks)``: late gradients waiting to be folded.
        self.waiting: dict[tuple[int, int], tuple[int, list]] = {}

    def blocks(self, worker, slot) -> bool:
        if (worker, slot) in self.waiting:
            return True
        rounds = self.engine.rounds
        # A running task of a closed round writes lane ``worker`` (its runner's, whichever
        # worker it was planned for) and will be late: the lane is as good as held.
        return any(t.state == TaskState.RUNNING and t.round is not None and not t.stale
                   and t.lane_id == worker and rounds[t.round].closed
                   and rounds[t.round].slot == slot for t in self.engine.running(worker))

    def on_late(self, rnd, lane, late) -> bool:
        self.waiting[(lane, rnd.slot)] = (rnd.id, late)
        return True

    def folds_for(self, rnd) -> dict:
        engine = self.engine
        folds = {}
        for (lane, slot), (late_round, tasks) in list(self.waiting.items()):
            if late_round >= rnd.id or engine.rounds[late_round].book != rnd.book:
                continue
            del self.waiting[(lane, slot)]
            staleness = rnd.id - late_round
            weight = float(self.policy.weight(staleness))
            for t in tasks:
                if weight > 0:
                    t.state = TaskState.FOLDED
                    if engine.monitor:
                        engine.monitor.on_task(t, applied=True, staleness=staleness)
                else:
                    engine.drop(t)
            if weight > 0:
                folds[(lane, slot)] = (late_round, weight)
        return folds

    def end_of_epoch(self, book) -> bool:
        if not any(self.engine.rounds[r].book == book.id for r, _ in self.waiting.values()):
            return False
        self.engine.close(self.engine.open_round(book, RoundKind.FOLD, {"fold_only": True}))
        return True

    def has_work(self) -> bool:
        return bool(self.waiting)

    def on_fail(self) -> None:
        self.waiting.clear()

    def __repr__(self):
        return f"LateFolding({self.policy!r})"
