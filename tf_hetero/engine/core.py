"""The round engine core: which worker runs each task, when a round closes, what is applied.

Pure Python and thread-safe (one re-entrant lock guards all engine state; dispatcher calls
are made with it held). TensorFlow stays behind a :class:`~tf_hetero.engine.api.Dispatcher`;
the dispatcher reports back through :meth:`RoundEngine.task_started`, :meth:`task_finished`,
:meth:`apply_finished`, :meth:`worker_failed` and :meth:`worker_recovered`.

The core keeps the queue of pending tasks, worker liveness, and one or more *books* (worker
groups with their own rounds; :class:`~tf_hetero.engine.state.Book`). In a book, a round opens
when the previous one has been applied; its assignment policy names the workers that get its
tasks; its sync policy says when it may close; then one apply runs. Mechanisms beyond that
(local accumulation, task transfer, late-gradient folding) are
:class:`~tf_hetero.engine.api.Component` objects plugged in at named hooks.

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
import math
import threading
import time
from typing import Callable, Sequence

from tf_hetero.engine.api import Component, GroupContext, Pulled, RoundContext, normalize_groups
from tf_hetero.engine.guard import DivergenceError, DivergenceGuard
from tf_hetero.engine.state import Book, Round, RoundKind, Task, TaskState

__all__ = ["RoundEngine", "EngineError"]

S = TaskState


class EngineError(RuntimeError):
    """The engine cannot go on (a task failed for a reason other than a lost worker)."""


class RoundEngine:
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
        if sync is None and books is None:
            raise ValueError("RoundEngine: give a sync policy (e.g. AllTasks()), or books.")
        self.num_workers = num_workers
        self.monitor = monitor
        self.grouping, self.update_scale = grouping, update_scale
        self._assign = assign  # grouped: what every book's assignment policy is made from
        if grouping is not None:
            if books is not None:
                raise ValueError("give books or a grouping policy, not both.")
            if hasattr(assign, "set_units") and not hasattr(assign, "for_group"):
                raise ValueError(f"grouping: the assignment policy {assign!r} sizes a global "
                                 "batch across all workers; groups need one that plans per "
                                 "group (e.g. OnePerWorker, or BalancedBatches: a share of "
                                 "the global batch per group).")
            groups = normalize_groups(grouping.groups(GroupContext(
                tuple(range(num_workers)), None, 0, monitor, num_workers)), num_workers)
            books = [(g, sync, self._group_assign(g)) for g in groups]
        if books is None:
            books = [(range(num_workers), sync, assign)]
        self.books = [Book(i, frozenset(w), s, a) for i, (w, s, a) in enumerate(books)]
        self._check_books()
        #: Every book ever formed, by id (rounds name theirs; regrouping forms new ones).
        self._books = {b.id: b for b in self.books}
        self._regroup_to = None  # groups to form once no round is open or applying
        self.gate = gate
        self._gate_free = gate is None or bool(getattr(gate, "unbounded", False))
        self.dispatcher = dispatcher
        self.clock = clock
        self.components = list(components)
        self.num_lanes = num_workers + sum(c.extra_lanes for c in self.components)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._pending: collections.deque[Task] = collections.deque()
        self._next_task = 0
        self._next_round = 0
        self.rounds: list[Round] = []
        self._running: dict[int, set] = {w: set() for w in range(num_workers)}
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
        #: Counts cleared errors: a failure seen by a closure that started before the last
        #: clear belongs to a fit whose error already reached the user (``fail(since=)``).
        self.generation = 0
        #: Reads each applied round's gradient norm (None: no check).
        self.guard = guard if guard is not None else DivergenceGuard()
        #: Optional ``() -> str`` naming the learning rate, for the divergence message.
        self.describe_lr = None
        for c in self.components:
            c.attach(self)

    def _check_books(self) -> None:
        seen = set()
        for b in self.books:
            if not b.workers or not b.workers <= set(range(self.num_workers)):
                raise ValueError(f"book {b.id} has workers {sorted(b.workers)}: need a "
                                 f"non-empty subset of 0..{self.num_workers - 1}.")
            if b.workers & seen:
                raise ValueError(f"worker(s) {sorted(b.workers & seen)} in two books: each "
                                 "worker belongs to one book.")
            seen |= b.workers
        if seen != set(range(self.num_workers)):
            raise ValueError(f"workers {sorted(set(range(self.num_workers)) - seen)} are in no "
                             "book: every worker belongs to one.")
        modes = {b.sync.mode for b in self.books}
        if modes - {"rounds", "async"} or len(modes) > 1:
            raise ValueError(f"sync policies have modes {sorted(modes)}: every book must use "
                             "'rounds', or the single book 'async'.")
        if modes == {"rounds"} and any(b.assign is None for b in self.books):
            raise ValueError("RoundEngine: rounds need an assignment policy (e.g. "
                             "OnePerWorker()).")

    # ------------------------------------------------------------------ fit side
    def _group_assign(self, workers) -> object:
        """A group's assignment policy: its own share of the global batch when the policy
        sizes one (``for_group``: a group's round is its members' batches, split by speed),
        else the policy every book shares (one task per member)."""
        if hasattr(self._assign, "for_group"):
            return self._assign.for_group(len(workers), self.num_workers)
        return self._assign

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

    def submit(self, payload) -> Task:
        """Queues one task (one training step scheduled by ``model.fit``)."""
        with self._lock:
            self._raise_if_error()
            task = Task(self._next_task, payload, t_submit=self.clock())
            self._next_task += 1
            self._pending.append(task)
            self._flushing = False
            self._pump()
            return task

    def flush(self) -> None:
        """No more tasks are coming for now (``join``, ``fetch``): let a partial round start."""
        with self._lock:
            self._flushing = True
            self._pump()

    def idle(self) -> bool:
        with self._lock:
            return (not self._pending and not any(b.busy for b in self.books)
                    and not any(self._running.values())
                    and not any(c.has_work() for c in self.components))

    def wait_idle(self, timeout: float) -> bool:
        """Blocks until every submitted task is finished and every round applied.

        Returns False after ``timeout`` seconds; raises the engine's error if it failed.
        """
        deadline = time.monotonic() + timeout  # real time, whatever clock stamps events
        with self._lock:
            self._flushing = True
            self._pump()
            while not self.idle():
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
        Raises the engine's error, and ``TimeoutError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                self._raise_if_error()
                if self.idle():
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
                self._running[previous].discard(task)  # moved here after a worker failure
            first_lane = task.lane_id if task.state == S.RUNNING else None
            task.rerun = task.rerun or first_lane is not None
            task.worker, task.t_start, task.state = worker, self.clock(), S.RUNNING
            task.version_at_start = self.version
            self._running[worker].add(task)
            task.stale = task.round is not None and self.rounds[task.round].closed
            if task.stale and first_lane is not None:
                # Its first run died writing ``first_lane`` of a closed round, maybe after
                # its write landed: this run writes nothing, and what waits in that lane
                # (a late gradient of the same round) can no longer be folded cleanly. It
                # keeps that lane, so the lane is settled (dropped) now and not left late.
                task.lane = first_lane
                rnd = self.rounds[task.round]
                if not rnd.abandoned:
                    self._settle_late(rnd, first_lane)
            if task.round is not None and not task.stale and task.lane is None and \
                    worker not in self._books[self.rounds[task.round].book].workers:
                self._foreign_lane(task, worker)
            if task.round is not None and not task.stale:
                for c in self.components:
                    c.on_task_started(task, worker)
            return not task.stale

    def task_finished(self, task: Task, worker: int) -> None:
        """``task`` finished successfully on ``worker``."""
        with self._lock, self._reporting():
            task.t_end = self.clock()
            self._running[worker].discard(task)
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
                        self._settle_late(rnd, task.lane_id)
                elif rnd.closed:
                    task.state = S.LATE
                    self._settle_late(rnd, task.lane_id)
                else:  # recorded in the monitor when the round closes
                    task.state = S.DONE
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

    def apply_finished(self, round_id: int, applied: int, grad_norm: float | None = None) -> None:
        """The apply of ``round_id`` ran; ``applied`` micro-batches went into it, and the
        norm of its mean gradient was ``grad_norm`` (checked by :attr:`guard`: divergence
        stops the engine with a :class:`~tf_hetero.engine.guard.DivergenceError`)."""
        with self._lock, self._reporting():
            rnd = self.rounds[round_id]
            rnd.applied, rnd.t_applied = applied, self.clock()
            if grad_norm is not None:
                rnd.info["grad_norm"] = grad_norm
                why = self.guard.check(round_id, grad_norm) if self.guard else None
                if why is not None:
                    hint = self.describe_lr() if self.describe_lr else ""
                    self.fail(DivergenceError(
                        f"tf-hetero: training diverged: {why}. Fix: lower the learning rate"
                        f"{' (' + hint + ')' if hint else ''}, or warm it up over the first "
                        "rounds; a round averages several micro-batches, so the linear rule's "
                        "rate is larger than a single-worker one."))
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
            self._consider_regroup()
            self._pump()
            self._changed.notify_all()

    def worker_failed(self, worker: int) -> None:
        """``worker`` is unreachable: give it no more tasks until it recovers."""
        with self._lock:
            self._live.discard(worker)
            if self.monitor:
                self.monitor.on_event("worker_failed", worker=worker)
            for c in self.components:
                c.on_worker_failed(worker)
            self._pump()  # e.g. lifts an SSP bound the dead worker was holding down
            self._changed.notify_all()

    def worker_recovered(self, worker: int) -> None:
        with self._lock:
            if self._live:  # it rejoins at the slowest live worker's count: a gate (SSP)
                # must not hold the others until it has redone the tasks it missed
                for counts in (self.clocks, self.visible):
                    counts[worker] = max(counts[worker], min(counts[v] for v in self._live))
            self._live.add(worker)
            if self.monitor:
                self.monitor.on_event("worker_recovered", worker=worker)
            self._pump()
            self._changed.notify_all()

    def fail(self, error: BaseException, since: int | None = None) -> None:
        """Stops the engine: pending tasks are cancelled, waiters get ``error``. The rounds
        in progress are abandoned: a task of theirs that still starts writes nothing, and
        one that still finishes applies nothing. ``since``: the :attr:`generation` the caller
        read before the work that failed; if an error has been cleared since, this one is
        that fit's echo (e.g. a worker's closure cancelled by it) and is ignored."""
        with self._lock:
            if since is not None and since != self.generation:
                return
            if self._error is None:
                self._error = error
            while self._pending:
                self.dispatcher.cancel(self._pending.popleft())
            for echoes in self._echoes.values():  # steps that would end with a task that won't
                for task in echoes:
                    self.dispatcher.cancel(task)
            self._echoes.clear()
            for book in self.books:
                for rnd in (book.open, book.applying, book.queued):
                    if rnd is not None and not rnd.closed:
                        rnd.closed, rnd.t_close, rnd.abandoned = True, self.clock(), True
                        rnd.pull = []
                book.open = book.applying = book.queued = None
            for c in self.components:
                c.on_fail()
            for tasks in self._running.values():
                tasks.clear()
            self._changed.notify_all()

    def raise_if_error(self) -> None:
        """Raises the error the engine failed with, if any (it stays until cleared)."""
        with self._lock:
            self._raise_if_error()

    def clear_error(self) -> None:
        """The failure has reached the user: accept new tasks again (the next ``fit``)."""
        with self._lock:
            self._error = None
            self.generation += 1
            self._flushing = False
            if self.guard is not None:
                self.guard.reset()  # e.g. the user lowered the learning rate
            self._changed.notify_all()

    @property
    def error(self) -> BaseException | None:
        """The error the engine failed with (``None``: none); it stays until
        :meth:`clear_error`."""
        return self._error

    @property
    def live_workers(self) -> list[int]:
        with self._lock:
            return sorted(self._live)

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
        self._running[worker].add(task)
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

    def _raise_if_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _after_event(self) -> None:
        self._pump()
        self._feed()
        for book in self.books:
            for c in self.components:
                c.after_event(book)
        self._changed.notify_all()

    def _pump(self) -> None:
        if self._error is not None:
            return
        if self.rounds_mode:
            if self._regroup_to is not None and not self._regroup():
                return  # no new round until every book's rounds are applied
            gated = self._gated()  # once per pump: O(N) with a gate, whatever the books
            for book in self.books:
                self._pump_book(book, gated)
        else:
            self._pump_async()

    def _fraction(self, rnd: Round) -> float:
        """Work units ``rnd``'s apply averages (its lanes, and late gradients folded in, by
        their weight) over the units its tasks were planned with."""
        planned = sum(t.size for t in rnd.tasks)
        units = float(sum(rnd.lanes.values()))
        for (lane, _), (late, weight) in rnd.folds.items():
            old = self.rounds[late]
            units += weight * sum(t.size for t in old.tasks + old.copies
                                  if t.lane_id == lane and t.state == S.FOLDED)
        return units / planned if planned else 1.0

    def _consider_regroup(self) -> None:
        """Asks the grouping policy (after each applied round) whether to re-form the books."""
        if self.grouping is None or self._regroup_to is not None:
            return
        current = self.groups
        proposal = self.grouping.groups(GroupContext(
            tuple(sorted(self._live)), current, self.version, self.monitor, self.num_workers))
        if proposal is not None:
            proposal = normalize_groups(proposal, self.num_workers)
            if proposal != current:
                self._regroup_to = proposal

    def _regroup(self) -> bool:
        """Forms the requested books once no round of any book is open or applying (so no
        gradient is lost or applied twice; a worker's late task still finishes before its
        next one on that worker). Returns True when the books are the new ones."""
        if any(b.busy for b in self.books):
            return False
        groups, self._regroup_to = self._regroup_to, None
        base = max(self._books) + 1
        sync = self.books[0].sync
        self.books = [Book(base + i, frozenset(g), sync, self._group_assign(g))
                      for i, g in enumerate(groups)]
        self._books.update({b.id: b for b in self.books})
        if self.monitor:
            self.monitor.on_event("regroup", groups=[list(g) for g in groups])
        return True

    @property
    def groups(self) -> tuple:
        """The current books' workers, as sorted tuples (grouped sync: the groups)."""
        return normalize_groups([b.workers for b in self.books])

    def _pump_async(self) -> None:
        for w in sorted(self._live, key=lambda w: self.clocks[w]):
            if not self._pending:
                return
            if self.busy(w):
                continue
            if not self._gate_free and not self.gate.may_start(
                    w, {v: self.clocks[v] for v in self._live}):
                continue
            self.dispatch(self._pending.popleft(), w, None)

    def _gated(self) -> set:
        """Live workers the gate keeps from starting a task now (a gate over books: SSP with
        the chief's apply, one book per worker). Empty without a gate, computed in O(1).

        The gate counts applied tasks (:attr:`visible`), not finished ones: a worker the
        slowest one's finish releases would otherwise read the model before that task's
        update landed, one update staler than SSP allows (measured in the simulator: mean
        staleness 2.25 instead of 1.44 at ``staleness=3``, and twice the time to target)."""
        if self._gate_free:
            return set()
        live_clocks = {v: self.visible[v] for v in self._live}
        return {w for w in self._live if not self.gate.may_start(w, live_clocks)}

    def _pump_book(self, book: Book, gated: set) -> None:
        if not book.may_open:
            return
        if self._flushing and not self._pending and not book.busy:
            for c in self.components:  # end of an epoch: rounds that close it
                if c.end_of_epoch(book):
                    return
        if not self._pending:
            return
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
                        return
            return
        ctx = RoundContext(book.opened, tuple(w for w in live if not self.busy(w)),
                           tuple(w for w in live if self.busy(w)), self.monitor)
        plan = self._plan(book, ctx)
        if not plan.entries:
            return  # every live worker is still busy with late work; wait for one
        steps = max(len(plan.entries), plan.steps or 0)
        if len(self._pending) < steps and not self._flushing:
            return  # fit is still scheduling this round's tasks
        entries = plan.entries[:len(self._pending)]
        rnd = self.open_round(book, RoundKind.TRAIN, plan.info)
        rnd.participants = plan.participants
        rnd.expected_s = plan.expected_s
        rnd.task_s = dict(plan.task_s)
        book.open = rnd
        sizes = plan.sizes or [1] * len(entries)
        for entry, size in zip(entries, sizes):
            task = self._pending.popleft()
            task.round, task.size = rnd.id, int(size)
            rnd.tasks.append(task)
            if isinstance(entry, Pulled):  # pulled by the first allowed worker to be free
                task.state = S.QUEUED
                rnd.pull.append((task, entry.workers))
            else:
                task.pinned = entry
        self._absorb(rnd, min(steps - len(entries), len(self._pending)))
        for c in self.components:
            c.on_round_planned(rnd, entries)
        for task in rnd.tasks:
            if task.state != S.QUEUED:
                self.dispatch(task, task.pinned, rnd.id)
        self._feed()

    def _absorb(self, rnd: Round, count: int) -> None:
        """The next ``count`` queued steps are covered by ``rnd`` without running: the
        round's tasks read its whole global batch (a worker sat out, or is dead). Each ends
        with the result of the task projected to finish first."""
        if count <= 0 or not rnd.tasks:
            return
        like = min(rnd.tasks, key=lambda t: (rnd.task_s.get(t.pinned, math.inf), t.id))
        for _ in range(count):
            task = self._pending.popleft()
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

    def _foreign_lane(self, task: Task, worker: int) -> None:
        """``task`` (of an open round) starts on ``worker``, outside its round's book: TF
        re-runs the closure of a dead worker on any live worker. Written to ``worker``'s own
        lane, its gradient would meet the rounds of ``worker``'s book, which write that lane
        with their own slots: one of the two applies then found the other's round tag there
        and applied nothing (grouped sync, DynSGD and CASP under worker kills). It writes
        the lane of the worker it was planned for instead (of its own book and round, as
        that worker would have), whoever runs it; a book whose workers are all dead keeps
        training on the others' workers, as stock PSS does."""
        book = self._books[self.rounds[task.round].book]
        task.lane = task.pinned if task.pinned in book.workers else min(book.workers)
        # That worker died running it, maybe after its write reached the PS: the run
        # replaces what the lane holds instead of adding to it (the round has one task per
        # worker: nothing else of this round is in that lane).
        task.overwrite = True
        if self.monitor:
            self.monitor.on_event("foreign_run", round=task.round, task=task.id,
                                  ran_on=worker, lane=task.lane)

    def _settle_late(self, rnd: Round, lane: int) -> None:
        """Once every copy of ``rnd`` on ``lane`` has finished: drop, or a component keeps
        the late gradients (folding)."""
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
        if clean and lane < self.num_workers and any(
                c.on_late(rnd, lane, late) for c in self.components):
            return
        for t in late:
            self.drop(t)

    def _close(self, rnd: Round) -> None:
        if self._error is not None:
            return
        rnd.closed, rnd.t_close = True, self.clock()
        book = self._books[rnd.book]
        # Tasks not started yet will find their round closed and write nothing; running ones
        # are still writing their lane.
        copies = rnd.tasks + rnd.copies
        late_lanes = {t.lane_id for t in copies if t.state == S.RUNNING}
        lanes = next((got for got in (c.round_lanes(rnd, copies) for c in self.components)
                      if got is not None), None)
        if lanes is None:
            lanes = collections.Counter()
            for t in copies:
                if t.state == S.DONE:
                    lanes[t.lane_id] += t.size
        # A lane still writing this round cannot be read consistently: leave it out.
        rnd.lanes = {w: n for w, n in sorted(lanes.items()) if w not in late_lanes}
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
            self._settle_late(rnd, lane)
        folds = {}
        for c in self.components:
            folds.update(c.folds_for(rnd))
        rnd.folds = folds
        if self.update_scale is not None:
            rnd.scale = self.update_scale.scale(len(book.workers), self.num_workers, staleness,
                                                self._fraction(rnd))
            rnd.info.update(staleness=staleness, scale=rnd.scale)
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
