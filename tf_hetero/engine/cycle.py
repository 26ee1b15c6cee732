"""The round cycle of :class:`~tf_hetero.engine.core.RoundEngine`: how each book's next
round is planned, opened and handed out, and what happens when a round closes.

- **Pump** (after every event): in rounds mode, each book whose next round may open asks
  its assignment policy for a plan (once per context: :meth:`RoundCycle._plan`), takes that
  many queued tasks, pins them or leaves them to be pulled by the first allowed worker to be
  free (:meth:`RoundCycle._feed`), and lets the round absorb the steps its global batch
  covers beyond its tasks; a worker whose lane is held, or whom the gate holds back, sits
  the round out. In async mode, each free live worker takes the next task if the gate lets
  it.
- **Close**: the round's lanes are counted (:mod:`tf_hetero.engine.lanes`), tasks never
  handed out go back to the queue, the applied tasks are recorded with their staleness,
  late gradients are settled, components add folds, the update scale is set, and the apply
  is dispatched.

These are methods of the engine (a base class of ``RoundEngine``): they read and write its
state, declared below, under its lock. They hold no state of their own.

>>> from tf_hetero.engine import RoundEngine
>>> from tf_hetero.policies import AllTasks, OnePerWorker
>>> class Log:
...     def dispatch(self, task, worker, round_id): print("task", task.id, "on", worker)
...     def dispatch_apply(self, round_id, lanes, folds): print("apply", round_id, lanes)
>>> e = RoundEngine(2, AllTasks(), OnePerWorker(), Log())
>>> a = e.submit("step 0")          # the pump waits: the plan has 2 tasks, 1 is queued
>>> b = e.submit("step 1")
task 0 on 0
task 1 on 1
>>> for w, t in enumerate((a, b)): _ = e.task_started(t, w); e.task_finished(t, w)
apply 0 {0: 1, 1: 1}
"""

from __future__ import annotations

import collections
import math
from typing import Any, Callable

from tf_hetero.engine import lanes
from tf_hetero.engine.api import Pulled, RoundContext
from tf_hetero.engine.books import Books
from tf_hetero.engine.state import Book, Round, RoundKind, RunningTasks, TaskState

__all__ = ["RoundCycle"]

S = TaskState


class RoundCycle:
    """The round cycle's methods of :class:`~tf_hetero.engine.core.RoundEngine` (module
    docstring). They use the engine's state below, its properties ``books``,
    ``rounds_mode`` and ``grouping``, and its methods ``busy``, ``book_live``,
    ``open_round`` and ``dispatch``."""

    num_workers: int
    monitor: Any
    dispatcher: Any
    components: list
    clock: Callable[[], float]
    rounds: list
    version: int
    update_scale: Any
    gate: Any
    clocks: dict
    visible: dict
    absorbed_steps: int
    _books: Books
    _pending: collections.deque
    _flushing: bool
    _echoes: dict
    _live: set
    _running: RunningTasks
    _gate_free: bool
    _async_depth: int
    _last_plan: Any
    _error: BaseException | None
    _lock: Any
    #: (the lock's acquisitions, round tasks queued to wait for) of the last pump that opened
    #: nothing, or None: see _waits_for_more.
    _waiting: tuple | None

    @property
    def asks_velocity(self) -> bool:
        """The update scale has the optional ``velocity()`` (UpdateScale): each round with an
        apply asks it at its close, and the round's apply scales the optimizer's velocity
        (its dispatcher traces the multiply only then)."""
        return callable(getattr(self.update_scale, "velocity", None))

    def _pump(self) -> None:
        self._waiting = None
        if self._error is not None:
            return
        head = self._pending[0].kind if self._pending else None
        if head == "round" or (head is None and self.rounds_mode):
            if self._books.requested and not self._books.regroup():
                return  # no new round until every book's rounds are applied
            gated = self._gated()  # once per pump: O(N) with a gate, whatever the books
            need = min((self._pump_book(book, gated) for book in self.books),
                       default=math.inf)
        else:  # the queue's head applies its own update: asynchronous steps
            need = self._pump_async()
        if need > 0 and not self._flushing:
            self._waiting = (self._lock.taken, need)

    def _waits_for_more(self) -> bool:
        """Whether a pump now would do nothing, known in O(1): the last pump found every
        book (or, for asynchronous steps, every worker) waiting for an event or for more
        queued tasks than there are, only one kind of task is queued, and nothing but
        submits took the engine's lock since (any event, or any other call, takes it).
        ``fit`` submits a round's tasks one by one, and each pump checks every worker: while
        a book waits for tasks (an epoch's start) that was O(N^2) per round, at 1000 workers
        ~110 ms of the fit thread's Python a round in a fit of short epochs
        (benchmarks/results/2026-12-07-engine-python/)."""
        waiting = self._waiting
        if (waiting is None or waiting[0] + 1 != self._lock.taken
                or len(self._pending) >= waiting[1]
                or self._pending_steps not in (0, len(self._pending))):  # one kind queued
            return False
        self._waiting = (self._lock.taken, waiting[1])
        return True

    def _rounds_pending(self) -> tuple[int, bool]:
        """Queued tasks a round may take (the leading ones of kind ``"round"``), and whether
        tasks of the other kind follow them (a mode switch: the round takes what there is, as
        when ``fit`` flushes). O(1) unless both kinds are queued."""
        if not self._pending_steps:
            return len(self._pending), False
        n = 0
        for task in self._pending:
            if task.kind != "round":
                return n, True
            n += 1
        return n, False

    def _take_pending(self):
        task = self._pending.popleft()
        self._pending_steps -= task.kind == "step"
        return task

    def _pump_async(self) -> float:
        """Hands queued steps to live workers with room; returns how many queued steps it
        waits for (1: it ran out of them; ``math.inf``: every worker is full or gated, so
        only an event frees one; 0: a round task is next, a switch)."""
        # The clocks count finished tasks, and no task finishes inside a pump (a dispatch
        # calls no engine method): the gate's answer holds for the whole pump.
        refused = self._refused(self.clocks)
        # Up to the depth, one task per worker per pass: the least advanced workers first
        # (ties: the lowest index). At depth 1 only a free worker has room, and the free
        # ones are kept as tasks come and go: a pump looks at them, not at every worker.
        depth = self._async_depth
        for _ in range(depth):
            room = self._running.free & self._live if depth == 1 else self._live
            for w in sorted(room, key=lambda w: (self.clocks[w], w)):
                if not self._pending or self._pending[0].kind != "step":
                    return 0 if self._pending else 1
                if len(self.running(w)) >= depth or w in refused:
                    continue
                self.dispatch(self._take_pending(), w, None)
        return math.inf if self._pending else 1

    def _gated(self) -> set:
        """Live workers the gate keeps from starting a task now (a gate over books: SSP with
        the chief's apply, one book per worker). Empty without a gate, computed in O(1).

        The gate counts applied tasks (:attr:`visible`), not finished ones: a worker the
        slowest one's finish releases would otherwise read the model before that task's
        update landed, one update staler than SSP allows (measured in the simulator: mean
        staleness 2.25 instead of 1.44 at ``staleness=3``, and twice the time to target)."""
        return self._refused(self.visible)

    def _refused(self, counts) -> set:
        """Live workers the gate refuses, given each worker's count in ``counts``: empty
        without a gate (O(1)); one call of the gate's optional ``refused(clocks)`` when it has
        one (SSP's bound finds the slowest worker once: O(N)); else ``may_start`` per worker."""
        if self._gate_free:
            return set()
        clocks = {v: counts[v] for v in self._live}
        batch = getattr(self.gate, "refused", None)
        if batch is not None:
            return set(batch(clocks))
        return {w for w in self._live if not self.gate.may_start(w, clocks)}

    def _pump_book(self, book: Book, gated: set) -> float:
        """Opens ``book``'s next round if it may; returns how many queued round tasks it
        waits for (``math.inf``: an event, not tasks; 0: it opened a round, or may with
        what a component does)."""
        if not book.may_open:
            return math.inf
        if self._flushing and not self._pending and not book.busy:
            for c in self.components:  # end of an epoch: rounds that close it
                if c.end_of_epoch(book):
                    return 0
        available, switch = self._rounds_pending()
        if not available:
            return 1
        floor = self._min_steps(book)
        if (floor and available < floor and not (self._flushing or switch)
                and not any(c.has_work() for c in self.components)):
            return floor  # fit is still scheduling this round's tasks: known without a plan
        # A worker whose lane in the next round's slot holds a late gradient still to fold
        # (or a late task still writing it) sits the round out: its task would overwrite it.
        slot = book.opened % 2
        held, live = [], []
        for w in self.book_live(book):
            if w not in gated:  # too far ahead of the slowest (SSP): no task until it catches up
                (held if self._lane_held(w, slot) else live).append(w)
        if not live:
            if self._pending and not book.busy:
                # Every live worker's lane is held (e.g. the others are dead): apply what is
                # held now, in a round of its own, instead of waiting for a worker that may
                # never come back.
                for c in self.components:
                    if any(c.blocks(w, slot) for w in held) and c.end_of_epoch(book):
                        return 0
            return math.inf
        ctx = RoundContext(book.opened, tuple(w for w in live if not self.busy(w)),
                           tuple(w for w in live if self.busy(w)), self.monitor)
        plan = self._plan(book, ctx)
        if not plan.entries:
            return math.inf  # every live worker is still busy with late work; wait for one
        steps = max(len(plan.entries), plan.steps or 0)
        if available < steps and not (self._flushing or switch):
            return steps  # fit is still scheduling this round's tasks
        entries = plan.entries[:available]
        rnd = self.open_round(book, RoundKind.TRAIN, plan.info)
        rnd.participants = plan.participants
        rnd.expected_s = plan.expected_s
        rnd.task_s = dict(plan.task_s)
        book.open = rnd
        sizes = plan.sizes or [1] * len(entries)
        for entry, size in zip(entries, sizes):
            task = self._take_pending()
            task.round, task.size = rnd.id, int(size)
            rnd.tasks.append(task)
            if isinstance(entry, Pulled):  # pulled by the first allowed worker to be free
                task.state = S.QUEUED
                rnd.pull.append((task, entry.workers))
            else:
                task.pinned = entry
        self._absorb(rnd, min(steps - len(entries), available - len(entries)))
        for c in self.components:
            c.on_round_planned(rnd, entries)
        for task in rnd.tasks:
            if task.state != S.QUEUED:
                self.dispatch(task, task.pinned, rnd.id)
        self._feed()
        return 0

    @staticmethod
    def _min_steps(book: Book) -> int | None:
        """At least how many queued tasks ``book``'s next round takes, if its assignment
        policy knows without a plan (``AssignmentPolicy.min_steps``). AutoStrategy keeps
        ``fit``'s queue short, so its rounds wait for tasks with events in between: each
        pump then went through every worker to find out (~0.2 ms a task at 1000 workers,
        benchmarks/results/2026-12-07-engine-python/)."""
        min_steps = getattr(book.assign, "min_steps", None)
        return min_steps(book.opened) if min_steps is not None else None

    def _absorb(self, rnd: Round, count: int) -> None:
        """The next ``count`` queued steps are covered by ``rnd`` without running: the
        round's tasks read its whole global batch (a worker sat out, or is dead). Each ends
        with the result of the task projected to finish first."""
        if count <= 0 or not rnd.tasks:
            return
        like = min(rnd.tasks, key=lambda t: (rnd.task_s.get(t.pinned, math.inf), t.id))
        for _ in range(count):
            task = self._take_pending()
            task.round, task.state = rnd.id, S.ABSORBED
            rnd.absorbed.append(task)
            self._echoes.setdefault(like, []).append(task)
            self.dispatcher.absorb(task, like)
        rnd.info["absorbed"] = len(rnd.absorbed)
        self.absorbed_steps += count

    def _plan(self, book: Book, ctx: RoundContext):
        """``book``'s plan for ``ctx``, asked once while nothing it reads changes: fit
        schedules a round's tasks one by one and each submit pumps, with the same context
        and monitor; planning at every submit cost O(N^2) per round at 1000 workers."""
        key = (book.id, ctx.round_id, ctx.idle, ctx.busy,
               len(self.monitor.tasks) if self.monitor is not None else None)
        if self._last_plan is None or self._last_plan[0] != key:
            self._last_plan = (key, book.assign.plan(ctx))
        return self._last_plan[1]

    def _feed(self) -> None:
        """Hands the open rounds' pulled tasks to idle workers allowed to take them."""
        if self._error is not None:
            return
        for book in self.books:
            rnd = book.open
            if rnd is None or not rnd.pull:
                continue
            for w in self.book_live(book):
                if not rnd.pull:
                    break
                if self.busy(w) or self._lane_held(w, rnd.slot):
                    continue  # busy, or its lane in this slot holds work to keep
                for i, (task, allowed) in enumerate(rnd.pull):
                    if w in allowed:
                        del rnd.pull[i]
                        self.dispatch(task, w, rnd.id)
                        break

    def _lane_held(self, worker: int, slot: int) -> bool:
        """A component keeps ``worker``'s lane in ``slot`` (e.g. a late gradient to fold)."""
        return any(c.blocks(worker, slot) for c in self.components)

    def _close(self, rnd: Round) -> None:
        if self._error is not None:
            return
        rnd.closed, rnd.t_close = True, self.clock()
        book = self._books[rnd.book]
        # Tasks not started yet will find their round closed and write nothing; running ones
        # are still writing their lane, which the apply leaves out.
        copies = rnd.tasks + rnd.copies
        late_lanes = lanes.count(rnd, copies, self.components)
        # Tasks never handed out go back to the front of the queue for the next round.
        for task, _ in reversed(rnd.pull):
            rnd.tasks.remove(task)
            task.round, task.state = None, S.PENDING
            self._pending.appendleft(task)
        rnd.pull = []
        staleness = 0
        # Updates that land before this round's apply and that its tasks did not read: those
        # applied since each started, plus its book's previous round if it is still being
        # applied (overlap). Other books' applies still to come are not known yet.
        version = self.version + (book.applying is not None)
        for t in copies:
            if t.state == S.DONE and t.lane_id in late_lanes:
                t.state = S.LATE  # its lane was still being written: not in this apply
            elif t.state == S.DONE and not t.drain:  # a drain has no data
                # Updates applied since the task started (other books' rounds: grouped
                # sync), or what a component knows (pipelined pushes are a round old).
                s = max([c.staleness(t) for c in self.components]
                        + [version - t.version_at_start])
                staleness = max(staleness, s)
                if self.monitor:
                    self.monitor.on_task(t, applied=True, staleness=s)
        if self.grouping is not None:
            rnd.info["group"] = sorted(book.workers)
        for lane in sorted(late_lanes):
            lanes.settle_late(self, rnd, lane)
        folds = {}
        for c in self.components:
            folds.update(c.folds_for(rnd))
        rnd.folds = folds
        if self.update_scale is not None:
            rnd.scale = self.update_scale.scale(len(book.workers), self.num_workers, staleness,
                                                lanes.applied_fraction(rnd, self.rounds))
            rnd.info.update(staleness=staleness, scale=rnd.scale)
            max_norm = getattr(self.update_scale, "max_norm", None)
            if max_norm is not None:
                rnd.max_norm = float(max_norm() or 0.0)
                if rnd.max_norm:
                    rnd.info["max_norm"] = rnd.max_norm
            if self.asks_velocity and (rnd.lanes or folds):  # asked only for an apply
                rnd.velocity = float(self.update_scale.velocity())
                if rnd.velocity != 1.0:
                    rnd.info["velocity"] = rnd.velocity
        book.open = None
        if rnd.lanes or folds:
            if book.applying is None:
                book.applying = rnd
            else:  # overlap: the previous round is still being applied
                book.queued = rnd
            self.dispatcher.dispatch_apply(rnd.id, dict(rnd.lanes), folds)
        else:
            rnd.applied, rnd.t_applied = 0, rnd.t_close
            if self.monitor:
                self.monitor.on_round(rnd)
