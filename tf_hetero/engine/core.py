"""The round engine core: which worker runs each task, when a round closes, what is applied.

Pure Python and thread-safe (one re-entrant lock guards all engine state; dispatcher calls
are made with it held). TensorFlow stays behind a :class:`~tf_hetero.engine.api.Dispatcher`;
the dispatcher reports back through :meth:`RoundEngine.task_started`, :meth:`task_finished`,
:meth:`task_failed`, :meth:`apply_finished`, :meth:`worker_failed` and
:meth:`worker_recovered`.

The core keeps the queue of pending tasks, worker liveness, the rounds and their dispatch,
over one or more *books* (worker groups with their own rounds;
:class:`~tf_hetero.engine.state.Book`, formed and re-formed by
:class:`~tf_hetero.engine.books.Books`). In a book, a round opens when the previous one has
been applied; its assignment policy names the workers that get its tasks; its sync policy
says when it may close; then one apply runs (how a round is planned, handed out and closed:
:mod:`~tf_hetero.engine.cycle`; which lane each task writes and which lanes an apply reads:
:mod:`~tf_hetero.engine.lanes`; failures, recovery and a stall's description:
:mod:`~tf_hetero.engine.faults`). Mechanisms beyond that (local accumulation, task transfer,
late-gradient folding) are :class:`~tf_hetero.engine.api.Component` objects plugged in at
named hooks.

>>> from tf_hetero.policies import AllTasks, OnePerWorker
>>> class Log:
...     def __init__(self): self.calls = []
...     def dispatch(self, task, worker, round_id): self.calls.append(("task", worker, round_id))
...     def dispatch_apply(self, round_id, lanes, folds):
...         self.calls.append(("apply", round_id, lanes))
...     def cancel(self, task): pass
>>> d = Log(); e = RoundEngine(2, AllTasks(), OnePerWorker(), d)
>>> tasks = [e.submit(i) for i in range(2)]
>>> d.calls
[('task', 0, 0), ('task', 1, 0)]
>>> for w, t in enumerate(tasks): _ = e.task_started(t, w); e.task_finished(t, w)
>>> d.calls[-1]
('apply', 0, {0: 1, 1: 1})
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from typing import Callable, Sequence

from tf_hetero.engine import lanes
from tf_hetero.engine.api import Component
from tf_hetero.engine.books import Books
from tf_hetero.engine.cycle import RoundCycle
from tf_hetero.engine.faults import Faults
from tf_hetero.engine.guard import DivergenceGuard, diverged
from tf_hetero.engine.lock import CountingRLock
from tf_hetero.engine.state import Book, Round, RoundKind, RunningTasks, Task, TaskState

__all__ = ["RoundEngine", "EngineError"]

S = TaskState


class EngineError(RuntimeError):
    """The engine cannot go on (a task failed for a reason other than a lost worker)."""


class RoundEngine(Faults, RoundCycle):
    """Coordinator-side scheduler for one strategy. This class is thread-safe.

    Args:
      num_workers: worker tasks in the cluster.
      sync: sync policy of the single book, or of every group's (required unless ``books``
        is given).
      assign: assignment policy of the single book, or what every group's is made from
        (required in rounds mode; async mode plans no round).
      dispatcher: the TF side (:class:`~tf_hetero.engine.api.Dispatcher`).
      gate: may an idle worker start a task (e.g. :class:`~tf_hetero.policies.StalenessBound`);
        asked per task in async mode, per round over books. ``None``: no gate.
      monitor: optional :class:`tf_hetero.telemetry.Monitor` fed with every event.
      clock: time source (seconds).
      components: mechanisms plugged into the core (:mod:`tf_hetero.engine.local`,
        :mod:`~tf_hetero.engine.transfer`, :mod:`~tf_hetero.engine.folding`).
      books: ``[(workers, sync, assign), ...]``: several worker groups, each with its own
        rounds (default: one book of all workers with ``sync`` and ``assign``).
      guard: a :class:`~tf_hetero.engine.api.RoundGuard` reading each applied round's
        gradient norm (``None``: :class:`~tf_hetero.engine.guard.DivergenceGuard`).
      grouping: a :class:`~tf_hetero.engine.api.GroupingPolicy` forming the books (each
        with ``sync`` and ``assign``) and re-forming them between rounds (grouped sync).
      update_scale: an :class:`~tf_hetero.engine.api.UpdateScale`: how much each round's
        mean gradient counts (``Round.scale``; default 1).
    """

    def __init__(self, num_workers: int, sync=None, assign=None, dispatcher=None, gate=None,
                 monitor=None, clock: Callable[[], float] = time.perf_counter, *,
                 components: Sequence[Component] = (), books=None, guard=None,
                 grouping=None, update_scale=None):
        self.num_workers = num_workers
        self.monitor = monitor
        self.update_scale = update_scale
        #: The books (:class:`~tf_hetero.engine.books.Books`): formed, checked, re-formed.
        self._books = Books(num_workers, sync, assign, books, grouping, monitor)
        self.gate = gate
        self._gate_free = gate is None or bool(getattr(gate, "unbounded", False))
        #: Asynchronous steps a worker holds at once, running and handed (the sync policy's
        #: ``async_depth``, default 1). 2 keeps a worker's next step on its queue, as stock
        #: PSS's shared queue does, so it starts as the last one ends instead of after the
        #: engine's round trip (task ended -> next handed -> launched).
        self._async_depth = max(1, int(getattr(sync, "async_depth", 1)))
        self.dispatcher = dispatcher
        self.clock = clock
        self.components = list(components)
        self.num_lanes = num_workers + sum(c.extra_lanes for c in self.components)
        self._lock = CountingRLock()
        self._changed = threading.Condition(self._lock.inner)
        self._waiting = None  # see RoundCycle._waits_for_more
        self._pending: collections.deque[Task] = collections.deque()
        self._pending_steps = 0  # of them, tasks of kind "step" (the rest are "round")
        self._next_task = 0
        self._next_round = 0
        self.rounds: list[Round] = []
        self._running = RunningTasks(num_workers)
        #: Absorbed steps (``Round.absorbed``) by the task whose end ends them.
        self._echoes: dict[Task, list] = {}
        self.absorbed_steps = 0  # steps ever absorbed (progress counts them as done)
        self._live = set(range(num_workers))
        self.clocks = {w: 0 for w in range(num_workers)}  # finished tasks per worker
        #: Rounds mode with a gate: tasks per worker whose update has been applied (what the
        #: gate counts over books: a task's progress is visible to the others once its round
        #: applied). Not counted without a gate (nothing reads it; applies stay O(1)).
        self.visible = {w: 0 for w in range(num_workers)}
        self.version = 0  # applied updates (rounds, or async tasks)
        self._flushing = False
        self._last_plan = None  # (context key, plan): see _plan
        self._error: BaseException | None = None
        self._restarting = False  # restart_rounds until resume(): not idle
        #: Counts cleared errors: a failure seen by a closure that started before the last
        #: clear belongs to a fit whose error already reached the user (``fail(since=)``).
        self.generation = 0
        #: Reads each applied round's gradient norm (None: no check).
        self.guard = guard if guard is not None else DivergenceGuard()
        #: Optional ``() -> str`` naming the learning rate, for the divergence message.
        self.describe_lr = None
        for c in self.components:
            c.attach(self)

    # ------------------------------------------------------------------ fit side
    @property
    def round_steps(self) -> float | None:
        """Steps of fit one round covers when its assignment policy says (sized rounds:
        the global batch in dataset batches), else ``None`` (one per task). Grouped sync:
        ``None`` (a group's round covers its members' steps: the mean group size)."""
        if self.grouping is not None:
            return None
        return getattr(self.books[0].assign, "round_steps", None)

    @property
    def rounds_mode(self) -> bool:
        return self.books[0].sync.mode == "rounds"

    @property
    def task_kind(self) -> str:
        """The kind of task the sync policy's mode makes now: ``"round"`` or ``"step"``."""
        return "round" if self.rounds_mode else "step"

    @property
    def pending(self) -> int:
        """Tasks submitted and not yet started or planned."""
        with self._lock:
            return len(self._pending)

    @property
    def books(self) -> list[Book]:
        """The current books (one of all workers, or one per group)."""
        return self._books.current

    def book(self, book_id: int) -> Book:
        """Any book ever formed, by id (a round names its book)."""
        return self._books[book_id]

    @property
    def groups(self) -> tuple:
        """The current books' workers, as sorted tuples (grouped sync: the groups)."""
        return self._books.groups

    @property
    def grouping(self):
        """The :class:`~tf_hetero.engine.api.GroupingPolicy` (``None``: fixed books). It may
        be replaced between rounds: the new one is asked after the next applied round."""
        return self._books.grouping

    @grouping.setter
    def grouping(self, policy) -> None:
        self._books.grouping = policy

    def submit(self, payload, kind: str | None = None, size: int = 1) -> Task:
        """Queues one task (one training step scheduled by ``model.fit``). ``kind``: what its
        payload does (``"round"``: writes a round's accumulators; ``"step"``: applies its own
        update); default: what the sync policy's mode makes now (:attr:`task_kind`); ``size``:
        its work units (a round's plan sets those of its tasks). Tasks
        run in submission order, each in the mode of its kind: after a switch of the sync
        policy's mode, the tasks queued before it run as they were made, then the new
        mode's."""
        with self._lock:
            self._raise_if_error()
            kind = self.task_kind if kind is None else kind
            if kind not in ("round", "step"):
                raise ValueError(f"task kind {kind!r}: use 'round' or 'step'.")
            task = Task(self._next_task, payload, t_submit=self.clock(), kind=kind,
                        size=int(size))
            self._next_task += 1
            self._pending.append(task)
            self._pending_steps += kind == "step"
            self._flushing = False
            if not self._waits_for_more():  # O(1): nothing but submits since it waited
                self._pump()
            return task

    def wait_room(self, limit: int, timeout: float) -> bool:
        """Blocks until fewer than ``limit`` tasks are queued (the engine dispatches them as
        workers free up), or ``timeout`` seconds passed (False). Raises the engine's error.
        A strategy whose sync policy switches modes keeps its queue short this way."""
        with self._lock:
            return self._wait_for(lambda: len(self._pending) < limit, timeout)

    def flush(self) -> None:
        """No more tasks are coming for now (``join``, ``fetch``): let a partial round start."""
        with self._lock:
            self._flushing = True
            self._pump()

    def idle(self) -> bool:
        with self._lock:
            return self._quiet() and not any(c.has_work() for c in self.components)

    def _quiet(self) -> bool:
        """No task pending or running, every round applied (lock held); components may
        still hold work for later rounds."""
        return (not self._restarting and not self._pending and not any(b.busy for b in self.books)
                and not any(self._running.values()))

    def wait_idle(self, timeout: float) -> bool:
        """Blocks until every submitted task is finished and every round applied.

        Returns False after ``timeout`` seconds; raises the engine's error if it failed.
        """
        with self._lock:
            self._flushing = True
            self._pump()
            return self._wait_for(self.idle, timeout)

    def _wait_for(self, done: Callable[[], bool], timeout: float) -> bool:
        """Under the lock: waits until ``done()`` (True) or ``timeout`` seconds of real time,
        whatever clock stamps events (False); raises the engine's error."""
        deadline = time.monotonic() + timeout
        while not done():
            self._raise_if_error()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.wait(min(left, 1.0))
        self._raise_if_error()
        return True

    def wait_boundary(self, timeout: float) -> bool:
        """Blocks until a round boundary: every submitted task finished and every round
        applied (True), or the tasks left pending cannot open a round without more tasks
        (False: not a boundary; unlike :meth:`wait_idle`, no partial round is forced).
        What a component holds for a later round (pipelined H-PS's buffers on the workers)
        does not keep it from being a boundary: nothing would push it until ``fit`` submits
        more tasks, which waits for this boundary (measured: live rebalancing under
        pipelined H-PS stalled its fit). Raises the engine's error, and ``TimeoutError``
        after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                self._raise_if_error()
                if self._quiet():
                    return True
                busy = any(b.busy for b in self.books) or any(self._running.values())
                if self._pending and not busy:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"The rounds in flight did not finish in {timeout:.0f} s (live "
                        f"workers: {self.live_workers}). Fix: check that the workers are "
                        "running.")
                self._changed.wait(min(left, 1.0))

    # -------------------------------------------------------------- worker side
    def task_started(self, task: Task, worker: int) -> bool:
        """A worker thread starts ``task``. Returns False if it is stale (its round closed)."""
        with self._lock:
            for previous in {task.pinned, task.worker} - {worker, None}:
                self._running.discard(previous, task)  # moved here after a worker failure
            first_lane = task.lane_id if task.state == S.RUNNING else None
            task.rerun = task.rerun or first_lane is not None
            task.worker, task.t_start, task.state = worker, self.clock(), S.RUNNING
            task.version_at_start = self.version
            self._running.add(worker, task)
            task.stale = task.round is not None and self.rounds[task.round].closed
            lanes.on_start(self, task, worker, first_lane)  # the lane it writes
            if task.round is not None and not task.stale:
                for c in self.components:
                    c.on_task_started(task, worker)
            return not task.stale

    def task_finished(self, task: Task, worker: int) -> None:
        """``task`` finished successfully on ``worker``."""
        with self._lock, self._reporting():
            task.t_end = self.clock()
            self._running.discard(worker, task)
            self._echoes.pop(task, None)  # the dispatcher gave them its result
            self.clocks[worker] += 1
            if task.round is None:  # async: applied by the task itself
                task.state = S.DONE
                staleness = self.version - task.version_at_start
                self.version += 1
                if self.monitor:
                    self.monitor.on_task(task, applied=True, staleness=staleness)
            else:
                rnd = self.rounds[task.round]
                if (task.stale or rnd.abandoned
                        or (task.twin is not None and task.twin.state == S.DONE)):
                    self.drop(task)  # wrote nothing, lost the race to its twin, or its
                    # round was abandoned when the engine failed
                    if rnd.closed and not rnd.abandoned:  # late work it shared a lane with
                        lanes.settle_late(self, rnd, task.lane_id)
                elif rnd.closed:
                    task.state = S.LATE
                    lanes.settle_late(self, rnd, task.lane_id)
                else:  # recorded in the monitor when the round closes
                    task.state = S.DONE
                    rnd.task_in(task)
                    for c in self.components:
                        c.on_task_done(task, worker)
                    if self._books[rnd.book].sync.should_close(rnd, self.clock()):
                        self._close(rnd)
            self._after_event()

    def tick(self) -> None:
        """Time passed: deadlines (slack sync) and task transfer. Called by a timer thread."""
        with self._lock, self._reporting():
            if self._error is not None:
                return
            for book in self.books:
                rnd = book.open
                if rnd is not None and rnd.num_done > 0:
                    if book.sync.should_close(rnd, self.clock()):
                        self._close(rnd)
                        self._pump()
            for book in self.books:
                for c in self.components:
                    c.after_event(book)
            self._changed.notify_all()

    def apply_finished(self, round_id: int, applied: int, grad_norm: float | None = None,
                       gradient=None) -> None:
        """The apply of ``round_id`` ran; ``applied`` micro-batches went into it, and the
        norm of its mean gradient was ``grad_norm`` (checked by :attr:`guard`: divergence
        stops the engine with a :class:`~tf_hetero.engine.guard.DivergenceError`);
        ``gradient``: what it measured of the gradient's noise (a
        :class:`~tf_hetero.policies.noise.GradientSample`, kept in ``info["gradient"]``)."""
        with self._lock, self._reporting():
            rnd = self.rounds[round_id]
            rnd.applied, rnd.t_applied = applied, self.clock()
            if gradient is not None:
                rnd.info["gradient"] = gradient
            if grad_norm is not None:
                rnd.info["grad_norm"] = grad_norm
                why = self.guard.check(round_id, grad_norm) if self.guard else None
                if why is not None:
                    self.fail(diverged(why, self.describe_lr() if self.describe_lr else ""))
                    return
            self.version += 1
            if not self._gate_free:
                for t in rnd.tasks + rnd.copies:
                    if t.state == S.DONE and t.worker is not None:
                        self.visible[t.worker] += 1
            book = self._books[rnd.book]
            if book.applying is rnd:  # applies of a book land in order (one apply thread)
                book.applying, book.queued = book.queued, None
            elif book.queued is rnd:
                book.queued = None
            if self.monitor:
                self.monitor.on_round(rnd)
            self._books.consider(self._live, self.version)  # grouped: re-form the books?
            self._pump()
            self._changed.notify_all()

    @property
    def live_workers(self) -> list[int]:
        with self._lock:
            return sorted(self._live)

    @property
    def num_live(self) -> int:
        """How many workers are live (O(1); :attr:`live_workers` sorts them)."""
        with self._lock:
            return len(self._live)

    def idle_workers(self) -> list[int]:
        """Live workers running nothing (e.g. where a round's apply will not queue)."""
        with self._lock:
            return [w for w in sorted(self._live) if not self.busy(w)]

    # ---------------------------------------------- for components (lock held)
    def busy(self, worker: int) -> bool:
        return bool(self._running[worker])

    def running(self, worker: int) -> set:
        """The tasks ``worker`` runs or has been handed (read-only use)."""
        return self._running[worker]

    def is_live(self, worker: int) -> bool:
        return worker in self._live

    def book_live(self, book: Book) -> list[int]:
        return sorted(self._live & book.workers)

    def new_task(self, payload, **fields) -> Task:
        """A task the engine makes itself (a transfer copy, a drain), not from ``submit``."""
        task = Task(self._next_task, payload, t_submit=self.clock(), **fields)
        self._next_task += 1
        return task

    def open_round(self, book: Book, kind: RoundKind = RoundKind.TRAIN,
                   info: dict | None = None) -> Round:
        """The next round of ``book``, opened now (recorded in ``rounds``; the caller makes
        it ``book.open`` or closes it)."""
        rnd = Round(self._next_round, [], kind=kind, book=book.id, slot=book.opened % 2,
                    t_open=self.clock(), live_workers=len(self.book_live(book)),
                    info=dict(info or {}))
        self._next_round += 1
        book.opened += 1
        self.rounds.append(rnd)
        return rnd

    def dispatch(self, task: Task, worker: int, round_id: int | None) -> None:
        """Hands ``task`` to ``worker`` (counted as running there from now on)."""
        task.pinned, task.state = worker, S.DISPATCHED
        self._running.add(worker, task)
        self.dispatcher.dispatch(task, worker, round_id)

    def close(self, rnd: Round) -> None:
        self._close(rnd)

    def drop(self, task: Task) -> None:
        task.state = S.DROPPED
        if self.monitor:
            self.monitor.on_task(task, applied=False, staleness=0)

    def lose(self, task: Task) -> None:
        """A DONE task whose gradient will reach no apply after all (a component knows: a
        pipelined buffer died with its worker) is DROPPED; the monitor's record of it, if its
        round already closed and counted it applied, is corrected. Called by components under
        the engine's lock."""
        if task.state != S.DONE:
            return
        counted = task.round is not None and self.rounds[task.round].closed
        task.state = S.DROPPED
        if task.round is not None:
            self.rounds[task.round].task_out(task)
        if self.monitor:
            if counted:
                self.monitor.on_lost(task)
            else:  # its round's close records only DONE tasks
                self.monitor.on_task(task, applied=False, staleness=0)

    # ---------------------------------------------------------------- internals
    @contextlib.contextmanager
    def _reporting(self):
        """Around a report from the TF side (a worker thread, the apply thread, the ticker):
        an exception raised by a policy or component stops the engine with it, so ``join``
        raises it, instead of leaving a round half-closed that nothing would finish."""
        try:
            yield
        except Exception as e:  # pylint: disable=broad-except
            error = EngineError(f"tf-hetero: a policy or component raised {type(e).__name__}: "
                                f"{e}. Training stopped (the cause, with its traceback, is "
                                "chained to this error).")
            error.__cause__ = e
            self.fail(error)

    def _after_event(self) -> None:
        self._pump()
        self._feed()
        for book in self.books:
            for c in self.components:
                c.after_event(book)
        self._changed.notify_all()
