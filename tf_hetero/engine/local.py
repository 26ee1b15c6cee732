"""Local accumulation (H-PS): tasks add their gradient to a buffer on their own worker and
only some of them *push* it to the round's PS lane.

- ``"strict"``: each worker's last task of a round pushes (after its compute) the buffer
  plus its own gradient: one push per worker per round, exactly one large-batch step.
- ``"pipelined"``: each worker's first task of a round pushes what it held from the previous
  round while it computes (updates are one round stale), and when ``fit`` joins a push-only
  *drain* round empties the buffers.

A task that runs on another worker than planned (after a failure), or a pulled task (nobody
knows which task is a worker's last), pushes everything it adds, so no gradient waits in a
buffer nobody will push. The TF side is :mod:`tf_hetero.strategies.runtime.local_push`.

A buffer lives in its worker's memory and dies with it: the tasks whose gradients it held
(done, not yet pushed), or that a push was carrying when its task had to run again, are
DROPPED (``RoundEngine.lose``), so the counts say what the applies really hold.

>>> LocalAccumulation("strict").push_flags([0, 0, 1])
[0, 2, 2]
>>> LocalAccumulation("pipelined").push_flags([0, 0, 1])
[1, 0, 1]
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

from tf_hetero.engine.api import Component, Pulled
from tf_hetero.engine.state import PUSH_ALL, PUSH_OLD, RoundKind

__all__ = ["LocalAccumulation"]

MODES = ("strict", "pipelined")


class LocalAccumulation(Component):
    """Buffers on the workers, push flags per task, drain rounds (see the module docstring).

    ``buffered[w]`` are the tasks whose gradients worker ``w`` holds in its buffer, not yet
    pushed; ``held[w]`` counts their work units (micro-batches, or granules of a sized task).
    """

    def __init__(self, mode: str = "strict"):
        if mode not in MODES:
            raise ValueError(f"local={mode!r}: use 'strict' or 'pipelined'.")
        self.mode = mode
        self.buffered: dict[int, list] = {}
        self.held = _Units(self.buffered)
        #: A PUSH_OLD task that started: id -> the buffered tasks its push carries.
        self._carrying: dict[int, list] = {}

    def attach(self, engine) -> None:
        super().attach(engine)
        self.buffered = {w: [] for w in range(engine.num_workers)}
        self.held = _Units(self.buffered)
        self._carrying = {}

    def push_flags(self, entries) -> list[int]:
        """Which of each worker's tasks in a plan push (``PUSH_ALL``/``PUSH_OLD``/0)."""
        first, last = {}, {}
        for i, w in enumerate(entries):
            first.setdefault(w, i)
            last[w] = i
        if self.mode == "strict":
            return [PUSH_ALL if isinstance(w, Pulled) or last[w] == i else 0
                    for i, w in enumerate(entries)]
        return [PUSH_ALL if isinstance(w, Pulled) else PUSH_OLD if first[w] == i else 0
                for i, w in enumerate(entries)]

    # ------------------------------------------------------------------ hooks
    def on_round_planned(self, rnd, entries) -> None:
        for task, push in zip(rnd.tasks, self.push_flags(entries)):
            task.push = push

    def on_task_started(self, task, worker) -> None:
        # Started before and running again (its worker died): whatever its first push
        # carried left with that worker's buffer (or is in a lane no apply will read).
        for lost in self._carrying.pop(task.id, ()):
            self.engine.lose(lost)
        if task.pinned != worker:
            task.push = PUSH_ALL  # moved off its planned worker: push all it adds
        if task.push == PUSH_OLD:  # pushes the buffer as it stands now
            task.pushed = self.held[worker]
            self._carrying[task.id], self.buffered[worker] = self.buffered[worker], []

    def on_task_done(self, task, worker) -> None:
        """Its gradient is in the buffer, or pushed."""
        self._carrying.pop(task.id, None)  # its push landed
        if task.push & PUSH_ALL:
            task.pushed = self.held[worker] + (0 if task.drain else task.size)
            self.buffered[worker] = []
        elif not task.drain:
            self.buffered[worker].append(task)

    def round_lanes(self, rnd, copies):
        """Lanes carry what the round's pushes carried, not its own tasks."""
        lanes = collections.Counter()
        for t in copies:
            if t.state == "done" and t.pushed:
                lanes[t.lane_id] += t.pushed
        return lanes

    def staleness(self, task) -> int:
        """Pipelined: a buffered gradient is applied one round after its own; a task that
        pushed everything it added (a pulled round's, or one moved off its planned worker)
        was applied in its own round. (A buffered task before such a push on the same worker
        in the same round also was; it is counted 1.)"""
        return int(self.mode == "pipelined" and not task.push & PUSH_ALL)

    def end_of_epoch(self, book) -> bool:
        workers = self._to_drain(book)
        if not workers:
            return False
        engine = self.engine
        rnd = engine.open_round(book, RoundKind.DRAIN, {"drain": True})
        book.open = rnd
        for w in workers:
            rnd.tasks.append(engine.new_task(engine.dispatcher.drain(w), round=rnd.id,
                                             push=PUSH_ALL, drain=True))
        rnd.participants = tuple(workers)
        for task, w in zip(rnd.tasks, workers):
            engine.dispatch(task, w, rnd.id)
        return True

    def has_work(self) -> bool:
        return any(self._to_drain(b) for b in self.engine.books)

    def on_worker_failed(self, worker) -> None:
        units, lost = self.held[worker], self.buffered[worker]
        self.buffered[worker] = []
        if units and self.engine.monitor:  # its local buffer died with it
            self.engine.monitor.on_event("lost_local", worker=worker, micro_batches=units,
                                         tasks=[t.id for t in lost])
        for task in lost:
            self.engine.lose(task)

    def on_fail(self) -> None:
        """The rounds in progress were abandoned (a failed fit, or a PS failover that rolled
        the model back): what the buffers hold, and what a push was carrying, reaches no
        apply (a failover empties the buffers on the workers too)."""
        for worker, lost in self.buffered.items():
            self.buffered[worker] = []
            for task in lost:
                self.engine.lose(task)
        for lost in self._carrying.values():
            for task in lost:
                self.engine.lose(task)
        self._carrying = {}

    def _to_drain(self, book) -> list[int]:
        """Live workers of ``book`` whose pipelined buffer holds gradients no task will push."""
        if self.mode != "pipelined":
            return []
        engine = self.engine
        return [w for w in engine.book_live(book) if self.held[w] and not engine.busy(w)]

    def __repr__(self):
        return f"LocalAccumulation({self.mode!r})"


class _Units(Mapping):
    """``held``: worker -> work units in its buffer, read from the buffered tasks themselves
    (so the two cannot disagree)."""

    def __init__(self, buffered: dict):
        self._buffered = buffered

    def __getitem__(self, worker: int) -> int:
        return sum(t.size for t in self._buffered[worker])

    def __iter__(self):
        return iter(self._buffered)

    def __len__(self) -> int:
        return len(self._buffered)

    def __repr__(self):
        return repr(dict(self))
