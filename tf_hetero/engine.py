"""The round engine: which worker runs each task, when a round closes, what is applied.

Pure Python and thread-safe; TensorFlow stays behind a *dispatcher* (see
:class:`tf_hetero.strategies.coordinator.HeteroCoordinator`) with three methods:

- ``dispatch(task, worker, round_id)``: run ``task`` on ``worker`` (``None``: any worker);
  ``round_id`` is the round whose accumulators it feeds, or ``None`` for an async task whose
  gradient is applied at once;
- ``dispatch_apply(round_id, lanes, folds)``: apply round ``round_id``'s accumulated
  gradients from the given lanes (``{lane: micro-batches}``) with the user's optimizer, plus
  late gradients of earlier rounds (``folds``: ``{(lane, slot): (round, weight)}``, usually
  empty);
- ``cancel(task)``: the task will never run (the engine failed);
- ``drain(worker)`` (pipelined local accumulation only): the payload of a push-only task
  that pushes ``worker``'s buffered gradients.

The dispatcher reports back through :meth:`RoundEngine.task_started`, :meth:`task_finished`,
:meth:`apply_finished`, :meth:`worker_failed` and :meth:`worker_recovered`.

Life of a task: ``pending`` (submitted by ``model.fit``) -> ``dispatched`` -> ``running`` ->
``done`` (its gradient is, or will be, applied) or ``dropped`` (its round had closed).

Rounds (sync mode): a round opens when the previous one has been applied; the assignment
policy names the workers that get its tasks; the sync policy says when it may close; then one
apply runs. A worker never runs a task of round ``r + 2`` before round ``r`` is applied,
which is what the two accumulator slots of :mod:`tf_hetero.strategies.accumulate` need.

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
import dataclasses
import math
import statistics
import threading
import time
from typing import Any, Callable

from tf_hetero.policies import Async, OnePerWorker, Unbounded

__all__ = ["RoundEngine", "Task", "Round", "EngineError", "PUSH_OLD", "PUSH_ALL"]

#: Local accumulation (H-PS): a task's push flags. ``PUSH_OLD``: before its own gradient is
#: in, push what its worker holds locally (so the push overlaps the task's compute);
#: ``PUSH_ALL``: after its compute, push the local sum plus its own gradient.
PUSH_OLD, PUSH_ALL = 1, 2


class EngineError(RuntimeError):
    """The engine cannot go on (a task failed for a reason other than a lost worker)."""


@dataclasses.dataclass(eq=False)
class Task:
    id: int
    payload: Any
    round: int | None = None
    pinned: int | None = None  # worker the engine chose (None: any worker)
    worker: int | None = None  # worker that ran it
    state: str = "pending"
    t_submit: float = 0.0
    t_start: float = 0.0
    t_end: float = 0.0
    version_at_start: int = 0  # applied updates when it started (staleness)
    lane: int | None = None  # accumulator lane it writes (None: its worker's)
    twin: "Task | None" = None  # the other copy of a transferred task
    duplicate: bool = False  # a copy made by task transfer
    stale: bool = False  # started after its round closed: wrote nothing
    push: int = 0  # local accumulation: PUSH_OLD / PUSH_ALL flags (0: keep it local)
    pushed: int = 0  # local accumulation: micro-batches its push carried
    drain: bool = False  # a push-only task (no micro-batch of its own)

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start

    @property
    def lane_id(self) -> int | None:
        return self.lane if self.lane is not None else self.worker


@dataclasses.dataclass(eq=False)
class Round:
    id: int
    tasks: list
    t_open: float = 0.0
    t_close: float = 0.0
    t_applied: float = 0.0
    closed: bool = False
    lanes: dict = dataclasses.field(default_factory=dict)  # worker -> micro-batches applied
    applied: int = -1  # micro-batches the apply reported (-1: not yet)
    live_workers: int = 0  # live workers when the round opened
    pull: list = dataclasses.field(default_factory=list)  # (task, allowed workers) not handed out
    copies: list = dataclasses.field(default_factory=list)  # duplicates made by task transfer
    participants: tuple = ()  # workers allowed to pull this round's tasks
    expected_s: float = float("nan")  # projected duration (sync policies may use it)
    now: float = 0.0  # engine time when should_close is asked
    folds: dict = dataclasses.field(default_factory=dict)  # (lane, slot) -> (round, weight)
    info: dict = dataclasses.field(default_factory=dict)  # what the policies decided (logs)

    @property
    def num_done(self) -> int:
        """Tasks in: a transferred task counts once, when its first copy is in."""
        return sum(t.state == "done" or (t.twin is not None and t.twin.state == "done")
                   for t in self.tasks)


class RoundEngine:
    """Coordinator-side scheduler for one strategy. This class is thread-safe.

    With ``local="strict"`` or ``"pipelined"`` (H-PS), tasks add their gradient to a
    buffer on their worker and only some of them *push* it to the round's PS lane: in strict
    mode each worker's last task of a round (after its compute); pipelined, each worker's
    first task of a round pushes what it held from the previous round while it computes
    (updates are then one round stale) and a push-only *drain* round empties the buffers
    when ``fit`` joins. A task that runs on another worker than planned (after a failure)
    pushes everything it adds, so no gradient waits in a buffer nobody will push.

    Args:
      num_workers: worker tasks in the cluster.
      sync: sync policy (:mod:`tf_hetero.policies`).
      assign: assignment policy (rounds mode).
      dispatcher: the TF side (see module docstring).
      gate: async-mode gate (e.g. :class:`~tf_hetero.policies.StalenessBound`).
      monitor: optional :class:`tf_hetero.monitor.Monitor` fed with every event.
      clock: time source (seconds).
    """

    def __init__(self, num_workers: int, sync=None, assign=None, dispatcher=None, gate=None,
                 monitor=None, clock: Callable[[], float] = time.perf_counter, *,
                 late=None, transfer=None, extra_lanes: int = 0, local: str | None = None):
        if local not in (None, "strict", "pipelined"):
            raise ValueError(f"local={local!r}: use None, 'strict' or 'pipelined'.")
        self.num_workers = num_workers
        self.local = local
        self.held = {w: 0 for w in range(num_workers)}  # micro-batches buffered, not pushed
        self.late = late  # late-gradient policy: weight(staleness) -> float (None: drop)
        self.transfer = transfer  # task-transfer policy (None: no transfer)
        self.num_lanes = num_workers + extra_lanes
        self.sync = sync or Async()
        self.assign = assign or OnePerWorker()
        self.gate = gate or Unbounded()
        self.dispatcher = dispatcher
        self.monitor = monitor
        self.clock = clock
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._pending: collections.deque[Task] = collections.deque()
        self._next_task = 0
        self._next_round = 0
        self._open: Round | None = None
        self._applying: Round | None = None
        self.rounds: list[Round] = []
        self._running: dict[int, set] = {w: set() for w in range(num_workers)}
        self._live = set(range(num_workers))
        self.clocks = {w: 0 for w in range(num_workers)}  # finished tasks per worker
        self.version = 0  # applied updates (rounds, or async tasks)
        self._flushing = False
        self._error: BaseException | None = None
        # Late gradients waiting to be folded into the next apply: (lane, slot) -> (round,
        # tasks). While one waits, its worker gets no task of a round with that slot parity.
        self._folds: dict[tuple[int, int], tuple[int, list]] = {}

    # ------------------------------------------------------------------ fit side
    @property
    def rounds_mode(self) -> bool:
        return self.sync.mode == "rounds"

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
        """No more tasks are coming for now (``join``): let a partial round start."""
        with self._lock:
            self._flushing = True
            self._pump()

    def idle(self) -> bool:
        with self._lock:
            return (not self._pending and self._open is None and self._applying is None
                    and not self._folds and not any(self._running.values())
                    and not self._to_drain())

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

    # -------------------------------------------------------------- worker side
    def task_started(self, task: Task, worker: int) -> bool:
        """A worker thread starts ``task``. Returns False if it is stale (its round closed)."""
        with self._lock:
            for previous in {task.pinned, task.worker} - {worker, None}:
                self._running[previous].discard(task)  # moved here after a worker failure
            task.worker, task.t_start, task.state = worker, self.clock(), "running"
            task.version_at_start = self.version
            self._running[worker].add(task)
            task.stale = task.round is not None and self.rounds[task.round].closed
            if self.local and task.round is not None and not task.stale:
                if task.pinned != worker:
                    task.push = PUSH_ALL  # moved off its planned worker: push all it adds
                if task.push == PUSH_OLD:  # pushes the buffer as it stands now
                    task.pushed, self.held[worker] = self.held[worker], 0
            return not task.stale

    def task_finished(self, task: Task, worker: int) -> None:
        """``task`` finished successfully on ``worker``."""
        with self._lock:
            task.t_end = self.clock()
            self._running[worker].discard(task)
            self.clocks[worker] += 1
            if task.round is None:  # async: applied by the task itself
                task.state = "done"
                staleness = self.version - task.version_at_start
                self.version += 1
                if self.monitor:
                    self.monitor.task(task, applied=True, staleness=staleness)
            else:
                rnd = self.rounds[task.round]
                if (task.stale or rnd.info.get("abandoned")
                        or (task.twin is not None and task.twin.state == "done")):
                    self._drop(task)  # wrote nothing, lost the race to its twin, or its
                    # round was abandoned when the engine failed
                elif rnd.closed:
                    task.state = "late"
                    self._settle_late(rnd, task.lane_id)
                else:  # recorded in the monitor when the round closes
                    task.state = "done"
                    if self.local:
                        self._buffer(task, worker)
                    rnd.now = self.clock()
                    if self.sync.should_close(rnd):
                        self._close(rnd)
            self._pump()
            self._feed()
            self._maybe_transfer()
            self._changed.notify_all()

    def tick(self) -> None:
        """Time passed: deadlines (slack sync) and task transfer. Called by a timer thread."""
        with self._lock:
            if self._error is not None:
                return
            rnd = self._open
            if rnd is not None and rnd.num_done > 0:
                rnd.now = self.clock()
                if self.sync.should_close(rnd):
                    self._close(rnd)
                    self._pump()
            self._maybe_transfer()
            self._changed.notify_all()

    def apply_finished(self, round_id: int, applied: int) -> None:
        """The apply of ``round_id`` ran; ``applied`` micro-batches went into it."""
        with self._lock:
            rnd = self.rounds[round_id]
            rnd.applied, rnd.t_applied = applied, self.clock()
            self.version += 1
            if self._applying is rnd:
                self._applying = None
            if self.monitor:
                self.monitor.round(rnd)
            self._pump()
            self._changed.notify_all()

    def worker_failed(self, worker: int) -> None:
        """``worker`` is unreachable: give it no more tasks until it recovers."""
        with self._lock:
            self._live.discard(worker)
            if self.monitor:
                self.monitor.event("worker_failed", worker=worker)
                if self.held[worker]:  # its local buffer died with it
                    self.monitor.event("lost_local", worker=worker, micro_batches=self.held[worker])
            self.held[worker] = 0
            self._pump()  # e.g. lifts an SSP bound the dead worker was holding down
            self._changed.notify_all()

    def worker_recovered(self, worker: int) -> None:
        with self._lock:
            self._live.add(worker)
            if self.monitor:
                self.monitor.event("worker_recovered", worker=worker)
            self._pump()
            self._changed.notify_all()

    def fail(self, error: BaseException) -> None:
        """Stops the engine: pending tasks are cancelled, waiters get ``error``. The rounds
        in progress are abandoned: a task of theirs that still starts writes nothing, and
        one that still finishes applies nothing."""
        with self._lock:
            if self._error is None:
                self._error = error
            while self._pending:
                self.dispatcher.cancel(self._pending.popleft())
            for rnd in (self._open, self._applying):
                if rnd is not None and not rnd.closed:
                    rnd.closed, rnd.t_close = True, self.clock()
                    rnd.info["abandoned"] = True
                    rnd.pull = []
            self._open = self._applying = None
            self._folds.clear()
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
            self._flushing = False
            self._changed.notify_all()

    @property
    def live_workers(self) -> list[int]:
        with self._lock:
            return sorted(self._live)

    def idle_workers(self) -> list[int]:
        """Live workers running nothing (e.g. where a round's apply will not queue)."""
        with self._lock:
            return [w for w in sorted(self._live) if not self._busy(w)]

    # ---------------------------------------------------------------- internals
    def _raise_if_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _busy(self, worker: int) -> bool:
        return bool(self._running[worker])

    def _pump(self) -> None:
        if self._error is not None:
            return
        if self.rounds_mode:
            self._pump_rounds()
        else:
            self._pump_async()

    def _pump_async(self) -> None:
        for w in sorted(self._live, key=lambda w: self.clocks[w]):
            if not self._pending:
                return
            if self._busy(w):
                continue
            live_clocks = {v: self.clocks[v] for v in self._live}
            if not self.gate.may_start(w, live_clocks):
                continue
            task = self._pending.popleft()
            task.pinned, task.state = w, "dispatched"
            self._running[w].add(task)
            self.dispatcher.dispatch(task, w, None)

    def _pump_rounds(self) -> None:
        if (self._flushing and self._folds and not self._pending and self._open is None
                and self._applying is None):
            self._fold_round()  # end of an epoch: late gradients still waiting get applied
            return
        if (self._flushing and not self._pending and self._open is None
                and self._applying is None and self._to_drain()):
            self._drain_round()  # end of an epoch: pipelined buffers still hold gradients
            return
        if self._open is not None or self._applying is not None or not self._pending:
            return
        live = sorted(self._live)
        if not live:
            return
        idle = [w for w in live if not self._busy(w)]
        busy = [w for w in live if self._busy(w)]
        if hasattr(self.assign, "next_round"):  # policies that schedule by round number
            self.assign.next_round = self._next_round
        plan = self.assign.plan(idle, busy, self.monitor)
        if not plan:
            return  # every live worker is still busy with late work; wait for one
        if len(self._pending) < len(plan) and not self._flushing:
            return  # fit is still scheduling this round's tasks
        plan = plan[:len(self._pending)]
        rnd = self._new_round(dict(getattr(self.assign, "last", None) or {}))
        rnd.participants = tuple(sorted(set().union(*[
            e if isinstance(e, frozenset) else {e} for e in plan])))
        rnd.expected_s = rnd.info.get("expected_s", float("nan"))
        self._open = rnd
        pinned = []
        flags = self._push_flags(plan) if self.local else [0] * len(plan)
        for entry, push in zip(plan, flags):
            task = self._pending.popleft()
            task.round, task.state, task.push = rnd.id, "dispatched", push
            rnd.tasks.append(task)
            if isinstance(entry, frozenset):  # pulled by the first allowed worker to be free
                task.state = "queued"
                rnd.pull.append((task, entry))
            else:
                task.pinned = entry
                self._running[entry].add(task)
                pinned.append(task)
        for task in pinned:
            self.dispatcher.dispatch(task, task.pinned, rnd.id)
        self._feed()

    def _feed(self) -> None:
        """Hands the open round's pulled tasks to idle workers allowed to take them."""
        rnd = self._open
        if rnd is None or not rnd.pull or self._error is not None:
            return
        for w in sorted(self._live):
            if not rnd.pull:
                return
            if self._busy(w) or (w, rnd.id % 2) in self._folds:
                continue  # busy, or its lane in this slot holds a late gradient to fold
            for i, (task, allowed) in enumerate(rnd.pull):
                if w in allowed:
                    del rnd.pull[i]
                    task.pinned, task.state = w, "dispatched"
                    self._running[w].add(task)
                    self.dispatcher.dispatch(task, w, rnd.id)
                    break

    def _maybe_transfer(self) -> None:
        """Task transfer: re-issues a task running long on a straggler to an idle pioneer."""
        rnd = self._open
        if self.transfer is None or rnd is None or rnd.pull or self._error is not None:
            return
        now = self.clock()
        # Typical task time: the round's projection (medians, robust to the very stragglers
        # transfer is for), else the monitor's smoothed times.
        projection = rnd.info.get("projection", {})
        known = [projection[w][0] if w in projection else
                 (self.monitor.ewma_s(w) if self.monitor else float("nan"))
                 for w in rnd.participants]
        known = [m for m in known if not math.isnan(m)]
        typical = statistics.median(known) if known else float("nan")
        for pioneer in [w for w in rnd.participants if w in self._live and not self._busy(w)]:
            running = [t for t in rnd.tasks if t.state == "running" and t.twin is None
                       and t.worker != pioneer]
            slow = [t for t in running if self.transfer.should_transfer(now - t.t_start, typical)]
            lane = self._free_extra_lane()
            if not slow or lane is None:
                return
            original = max(slow, key=lambda t: now - t.t_start)
            copy = Task(self._next_task, self.dispatcher.duplicate(original), round=rnd.id,
                        pinned=pioneer, state="dispatched", t_submit=now, lane=lane,
                        twin=original, duplicate=True)
            self._next_task += 1
            original.twin = copy
            rnd.copies.append(copy)
            self._running[pioneer].add(copy)
            if self.monitor:
                self.monitor.event("transfer", round=rnd.id, task=original.id,
                                   straggler=original.worker, pioneer=pioneer)
            self.dispatcher.dispatch(copy, pioneer, rnd.id)

    def _free_extra_lane(self) -> int | None:
        used = {t.lane for tasks in self._running.values() for t in tasks if t.lane is not None}
        if self._open is not None:  # a copy already in this round keeps its lane
            used |= {t.lane for t in self._open.copies}
        for lane in range(self.num_workers, self.num_lanes):
            if lane not in used:
                return lane
        return None

    def _drop(self, task: Task) -> None:
        task.state = "dropped"
        if self.monitor:
            self.monitor.task(task, applied=False, staleness=0)

    def _settle_late(self, rnd: Round, lane: int) -> None:
        """Once every copy of ``rnd`` on ``lane`` has finished: drop, or hold for a fold."""
        copies = [t for t in rnd.tasks + rnd.copies if t.lane_id == lane]
        if any(t.state == "running" for t in copies):
            return
        late = [t for t in copies if t.state == "late"]
        if not late:
            return
        # A lane also written by a losing copy, or a duplicate's extra lane, is never folded.
        clean = not any(t.state == "dropped" and not t.stale for t in copies)
        if self.late is None or not clean or lane >= self.num_workers:
            for t in late:
                self._drop(t)
            return
        self._folds[(lane, rnd.id % 2)] = (rnd.id, late)

    def _push_flags(self, plan: list) -> list[int]:
        """Local accumulation: which of each worker's tasks in a plan push. A pulled task
        (no planned worker: nobody knows which task is a worker's last) pushes all it adds."""
        first, last = {}, {}
        for i, w in enumerate(plan):
            first.setdefault(w, i)
            last[w] = i
        if self.local == "strict":
            return [PUSH_ALL if isinstance(w, frozenset) or last[w] == i else 0
                    for i, w in enumerate(plan)]
        return [PUSH_ALL if isinstance(w, frozenset) else PUSH_OLD if first[w] == i else 0
                for i, w in enumerate(plan)]

    def _buffer(self, task: Task, worker: int) -> None:
        """A local-accumulation task is done: its gradient is in the buffer or pushed."""
        if task.push & PUSH_ALL:
            task.pushed, self.held[worker] = self.held[worker] + (0 if task.drain else 1), 0
        elif not task.drain:
            self.held[worker] += 1

    def _to_drain(self) -> list[int]:
        """Live workers whose pipelined buffer holds gradients no task will push."""
        if self.local != "pipelined":
            return []
        return [w for w in sorted(self._live) if self.held[w] and not self._busy(w)]

    def _drain_round(self) -> None:
        """A round of push-only tasks, one per worker holding buffered gradients."""
        rnd = self._new_round({"drain": True})
        self._open = rnd
        for w in self._to_drain():
            task = Task(self._next_task, self.dispatcher.drain(w), round=rnd.id, pinned=w,
                        state="dispatched", t_submit=rnd.t_open, push=PUSH_ALL, drain=True)
            self._next_task += 1
            rnd.tasks.append(task)
            self._running[w].add(task)
        rnd.participants = tuple(t.pinned for t in rnd.tasks)
        for task in rnd.tasks:
            self.dispatcher.dispatch(task, task.pinned, rnd.id)

    def _fold_round(self) -> None:
        """A round with no task of its own, applying only the late gradients waiting."""
        self._close(self._new_round({"fold_only": True}))

    def _new_round(self, info: dict) -> Round:
        """The next round, opened now (recorded in ``rounds``; not yet the open one)."""
        rnd = Round(self._next_round, [], t_open=self.clock(), live_workers=len(self._live),
                    info=info)
        self._next_round += 1
        self.rounds.append(rnd)
        return rnd

    def _take_folds(self, rnd: Round) -> dict:
        """Late gradients folded into ``rnd``'s apply: ``{(lane, slot): (round, weight)}``."""
        folds = {}
        for (lane, slot), (late_round, tasks) in list(self._folds.items()):
            if late_round >= rnd.id:
                continue
            del self._folds[(lane, slot)]
            staleness = rnd.id - late_round
            weight = float(self.late.weight(staleness))
            for t in tasks:
                if weight > 0:
                    t.state = "folded"
                    if self.monitor:
                        self.monitor.task(t, applied=True, staleness=staleness)
                else:
                    self._drop(t)
            if weight > 0:
                folds[(lane, slot)] = (late_round, weight)
        rnd.folds = folds
        return folds

    def _close(self, rnd: Round) -> None:
        if self._error is not None:
            return
        rnd.closed, rnd.t_close = True, self.clock()
        # Tasks not started yet will find their round closed and write nothing; running ones
        # are still writing their lane.
        copies = rnd.tasks + rnd.copies
        late_lanes = {t.lane_id for t in copies if t.state == "running"}
        lanes: dict[int, int] = collections.Counter(
            t.lane_id for t in copies if t.state == "done")
        if self.local:  # lanes carry what the round's pushes carried, not its own tasks
            lanes = collections.Counter()
            for t in copies:
                if t.state == "done" and t.pushed:
                    lanes[t.lane_id] += t.pushed
        # A lane still writing this round cannot be read consistently: leave it out.
        rnd.lanes = {w: n for w, n in sorted(lanes.items()) if w not in late_lanes}
        # Tasks never handed out go back to the front of the queue for the next round.
        for task, _ in reversed(rnd.pull):
            rnd.tasks.remove(task)
            task.round, task.state = None, "pending"
            self._pending.appendleft(task)
        rnd.pull = []
        for t in copies:
            if t.state == "done" and t.lane_id in late_lanes:
                t.state = "late"  # its lane was still being written: not in this apply
            elif t.state == "done" and self.monitor and not t.drain:  # a drain has no data
                self.monitor.task(t, applied=True, staleness=int(self.local == "pipelined"))
        for lane in sorted(late_lanes):
            self._settle_late(rnd, lane)
        folds = self._take_folds(rnd)
        self._open = None
        if rnd.lanes or folds:
            self._applying = rnd
            self.dispatcher.dispatch_apply(rnd.id, dict(rnd.lanes), folds)
        else:
            rnd.applied, rnd.t_applied = 0, rnd.t_close
            if self.monitor:
                self.monitor.round(rnd)
