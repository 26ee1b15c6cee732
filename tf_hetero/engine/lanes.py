"""Lanes: which accumulator lane a task writes, and which lanes a closed round's apply reads.

A lane ``(worker, slot)`` of the PS accumulators holds one round's gradients at a time
(docs/ARCHITECTURE.md, "Lanes under failures and late gradients"). The rules that keep it so
when workers die or a task is late, used by the engine core under its lock:

- **A task writes its own book's lane** (:func:`on_start`): a closure TF re-runs on a
  worker outside its round's book writes the lane of the worker it was planned for, and
  replaces what that lane holds instead of adding to it.
- **A lane still being written is not read** (:func:`count`): the round's apply leaves it
  out; the tasks that finished in it are late, and once every copy writing it has ended
  they are dropped, or a component keeps them to fold later (:func:`settle_late`).
- **A late lane whose writer died is dropped** (:func:`on_start`, :func:`settle_late`):
  the dead run may have written part of it.

>>> from tf_hetero.engine.state import Round, Task
>>> rnd = Round(0, [Task(0, None, round=0, worker=0, state="done", size=2),
...                 Task(1, None, round=0, worker=1, state="running")])
>>> count(rnd, rnd.tasks, components=()), rnd.lanes      # lane 1 is still being written
({1}, {0: 2})
"""

from __future__ import annotations

import collections
from typing import Sequence

from tf_hetero.engine.state import Round, Task, TaskState

__all__ = ["on_start", "count", "settle_late", "applied_fraction"]

S = TaskState


def on_start(engine, task: Task, worker: int, first_lane: int | None) -> None:
    """``task`` of a round starts on ``worker``; ``first_lane``: the lane of its run that
    died on the way (``None``: its first run). Sets the lane it writes."""
    if task.stale and first_lane is not None:
        # Its first run died writing ``first_lane`` of a closed round, maybe after its
        # write landed: this run writes nothing, and what waits in that lane (a late
        # gradient of the same round) can no longer be folded cleanly. It keeps that lane,
        # so the lane is settled (dropped) now and not left late.
        task.lane = first_lane
        rnd = engine.rounds[task.round]
        if not rnd.abandoned:
            settle_late(engine, rnd, first_lane)
    if task.round is not None and not task.stale and task.lane is None and \
            worker not in engine.book(engine.rounds[task.round].book).workers:
        _foreign(engine, task, worker)


def _foreign(engine, task: Task, worker: int) -> None:
    """``task`` (of an open round) starts on ``worker``, outside its round's book: TF
    re-runs the closure of a dead worker on any live worker. Written to ``worker``'s own
    lane, its gradient would meet the rounds of ``worker``'s book, which write that lane
    with their own slots: one of the two applies then found the other's round tag there
    and applied nothing (grouped sync, DynSGD and CASP under worker kills). It writes
    the lane of the worker it was planned for instead (of its own book and round, as
    that worker would have), whoever runs it; a book whose workers are all dead keeps
    training on the others' workers, as stock PSS does."""
    book = engine.book(engine.rounds[task.round].book)
    task.lane = task.pinned if task.pinned in book.workers else min(book.workers)
    # That worker died running it, maybe after its write reached the PS: the run
    # replaces what the lane holds instead of adding to it (the round has one task per
    # worker: nothing else of this round is in that lane).
    task.overwrite = True
    if engine.monitor:
        engine.monitor.on_event("foreign_run", round=task.round, task=task.id,
                                ran_on=worker, lane=task.lane)


def count(rnd: Round, copies: Sequence[Task], components: Sequence) -> set:
    """At ``rnd``'s close: sets ``rnd.lanes`` (work units per lane its apply reads; a
    component may count them, e.g. what H-PS pushes carried) and returns the lanes still
    being written, which the apply leaves out (they cannot be read consistently)."""
    late_lanes = {t.lane_id for t in copies if t.state == S.RUNNING}
    lanes = next((got for got in (c.round_lanes(rnd, copies) for c in components)
                  if got is not None), None)
    if lanes is None:
        lanes = collections.Counter()
        for t in copies:
            if t.state == S.DONE:
                lanes[t.lane_id] += t.size
    rnd.lanes = {w: n for w, n in sorted(lanes.items()) if w not in late_lanes}
    return late_lanes


def settle_late(engine, rnd: Round, lane: int) -> None:
    """Once every copy of closed ``rnd`` on ``lane`` has finished: drop its late tasks, or a
    component keeps them (folding)."""
    copies = [t for t in rnd.tasks + rnd.copies if t.lane_id == lane]
    if any(t.state == S.RUNNING and not t.stale for t in copies):
        return  # still being written (a stale run writes nothing)
    late = [t for t in copies if t.state == S.LATE]
    if not late:
        return
    # A lane also written by a losing copy, or by a run that died (maybe after its write
    # landed), or a duplicate's extra lane, is never kept.
    clean = not any((t.state == S.DROPPED and not t.stale) or (t.stale and t.rerun)
                    for t in copies)
    if clean and lane < engine.num_workers and any(
            c.on_late(rnd, lane, late) for c in engine.components):
        return
    for t in late:
        engine.drop(t)


def applied_fraction(rnd: Round, rounds: Sequence[Round]) -> float:
    """Work units ``rnd``'s apply averages (its lanes, and late gradients folded in, by
    their weight) over the units its tasks were planned with (``rounds``: every round, by
    id, for the folded ones)."""
    planned = sum(t.size for t in rnd.tasks)
    units = float(sum(rnd.lanes.values()))
    for (lane, _), (late, weight) in rnd.folds.items():
        old = rounds[late]
        units += weight * sum(t.size for t in old.tasks + old.copies
                              if t.lane_id == lane and t.state == S.FOLDED)
    if not rnd.tasks and rnd.folds:
        # A fold-only round plans no task: over the units the late gradients' own rounds
        # planned, a late share steps as much as it would have inside a full round (over
        # 1.0, the mean of a late share took the whole round's step: at AutoStrategy's 8x
        # the one-batch rate, enough to start a collapse, docs/AUTO.md section 5).
        planned = max(sum(t.size for t in rounds[late].tasks) for late, _ in rnd.folds.values())
    return units / planned if planned else 1.0
