"""ASP's part of PS failover (strategies/runtime/failover.py): no engine, no round, no apply
on the chief; every step writes its own update on the PS tasks, and TF's closure queue holds
the steps scheduled.

- **The copy** (:meth:`AsyncSteps.step_ends`): on the worker thread whose step just
  returned, before it takes its next, every ``every`` x workers applied steps (a round's
  worth), while the other workers' steps run. Each variable is read whole; the variables of
  one copy are from within one step's time of each other, as what an ASP step itself reads
  is. With one worker the copy falls between two steps: exact. Its applied count is the
  optimizer's step counter read in the same copy (:meth:`AsyncSteps.counter_in`), and the
  applied count restarts from that counter as a fit starts, so ``optimizer.iterations`` =
  steps applied - steps rolled back, whatever the copy's fuzz.
- **The recovery** (:meth:`AsyncSteps.recover`), with ``schedule`` held off: every queued
  step is taken out of TF's queue; once no step runs (each one that met the death has
  failed and been kept by then; a dead worker's, which TF put back, is taken out after the
  wait), the model is restored and rolled back (:meth:`Failover.roll_back`), and the
  failed and queued steps are queued again, made anew, in order, from a trace-free copy of
  the step function (:meth:`HeteroCoordinator.current_function`: the old trace keeps ops
  placed on the dead task). The ``RemoteValue`` ``fit`` holds for each ends with its remade
  step's result (``dispatcher.hand_on``).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from tf_hetero import tfcompat
from tf_hetero.strategies.runtime.errors import translate
from tf_hetero.strategies.runtime.tags import ClosureKind, ClosureTag, set_tag, tag_of
from tf_hetero.tfcompat import variables as tfvars

__all__ = ["AsyncSteps"]


class AsyncSteps:
    """The asynchronous steps one :class:`~tf_hetero.strategies.runtime.failover.Failover`
    watches (ASP). ``run``: steps that returned since failover was set (never rolled back).
    """

    def __init__(self, failover):
        self.failover = failover
        self.run = 0
        self._steps = threading.Condition()  # guards _running
        self._running = 0  # steps between a worker thread's start and end of one
        self._failed: list = []  # steps that failed on the dead task: made again
        self._copying = threading.Lock()  # one copy at a time, none during a restore
        self._since_copy = 0
        self._iterations = None  # the optimizer's step counter (the applied count)

    # ------------------------------------------------------------------ the copy
    def fit_starts(self, optimizer) -> None:
        """As a fit schedules its first step (no step runs): the applied count restarts
        from ``optimizer``'s step counter, read once, which every copy also holds."""
        iterations = getattr(optimizer, "iterations", None)
        if iterations is None:
            return
        self._iterations = iterations
        self.failover.applied = int(np.asarray(_backing(iterations).read_value()))

    def counter_in(self, inner: list, values: list) -> int | None:
        """The optimizer's step counter in a copy of the variables ``inner`` (``values``),
        or None without one."""
        if self._iterations is None:
            return None
        counter = _backing(self._iterations)
        at = [i for i, v in enumerate(inner) if v is counter]
        return int(values[at[0]]) if at else None

    def step_begins(self) -> None:
        """A worker thread starts an asynchronous step (:meth:`_wait_no_step`)."""
        with self._steps:
            self._running += 1

    def step_ends(self, closure, error: BaseException | None, current: bool = True,
                  ran: bool = True) -> bool:
        """A worker thread's step ended (``ran`` False: TF put it back to run again),
        ``error`` None if it returned. A returned step counts as applied and may take the
        copy (on this thread, before the worker takes its next step); a failed one of the
        ``current`` fit is handed to :meth:`Failover.take` and, taken, kept to be made
        again. Returns whether the failover took ``error``."""
        failover = self.failover
        taken = False
        try:
            if ran and error is None:
                with self._steps:
                    failover.applied += 1
                    self.run += 1
                    self._since_copy += 1
                    workers = len(tfcompat.coordinator.workers_of(failover.coordinator))
                    due = (failover.copy is None
                           or self._since_copy >= failover.config.every * max(1, workers))
                if due:
                    self._copy()
            elif ran and current and failover.take(error):
                with self._steps:
                    self._failed.append(closure)
                taken = True
        finally:
            with self._steps:
                self._running -= 1
                self._steps.notify_all()
        return taken

    def _copy(self) -> None:
        """The copy, on the worker thread whose step just returned; skipped while another
        copy or a recovery runs. A death the copy meets is failed over from the last one."""
        failover = self.failover
        if not self._copying.acquire(blocking=False):
            return
        try:
            if not failover.ready():
                return
            try:
                failover.take_copy(None)
            except Exception as e:  # pylint: disable=broad-except
                if not failover.take(e):  # the fit raises it, translated as every path is
                    tfcompat.coordinator.queue_of(failover.coordinator).fail(translate(e))
                return
            with self._steps:
                self._since_copy = 0
        finally:
            self._copying.release()

    # ------------------------------------------------------------------ recovery
    def recover(self, dead: int, copy) -> tuple:
        """The recovery, with ``schedule`` held off (module docstring). Returns the
        variables created again, their PS, 0 rounds, the steps made again and the applied
        count before the rollback."""
        failover = self.failover
        coordinator = failover.coordinator
        queue = tfcompat.coordinator.queue_of(coordinator)
        queued = queue.take_queued()
        self._wait_no_step()
        queued += queue.take_queued()  # those TF put back meanwhile (a dead worker's)
        with self._copying:  # no copy reads the variables while they are set back
            applied_before = failover.applied
            moved, dst = failover.roll_back(dead, copy)
            self._since_copy = 0
        coordinator.forget_traces()
        with self._steps:
            orphans, self._failed = self._failed + queued, []
        for old in orphans:
            self._remake(old)
        return moved, dst, 0, len(orphans), applied_before

    def _wait_no_step(self) -> None:
        """Waits (bounded) until no asynchronous step runs on any worker thread and TF
        counts none in flight: each one that met the dead task has failed and been kept."""
        failover = self.failover
        queue = tfcompat.coordinator.queue_of(failover.coordinator)
        deadline = time.monotonic() + failover.config.detect_s
        with self._steps:
            while self._running or queue.raw.inflight_closure_count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self._running} step(s) still ran "
                                       f"{failover.config.detect_s} s after the PS died")
                self._steps.wait(min(left, 0.05))

    def _remake(self, old) -> None:
        """Queues ``old``'s step again, made now (the queue's new cancellation manager, a
        trace on the new placement); its result ends ``old``'s ``RemoteValue`` too (the one
        ``fit`` holds), and those ``old`` was to end (made again by an earlier failover)."""
        coordinator = self.failover.coordinator
        tag = tag_of(old)
        fn, args, kwargs = tag.source
        new = coordinator.closure(coordinator.current_function(fn), args, kwargs)
        set_tag(new, ClosureTag(ClosureKind.ASYNC, source=tag.source, fit=tag.fit))
        coordinator.losses.keep(new, new.build_output_remote_value())
        coordinator.losses.forget(old)
        carried, tag.echoes = tag.echoes, []
        tag_of(new).echoes.extend(carried + [old])
        tfcompat.coordinator.queue_of(coordinator).raw.put(new)


def _backing(variable):
    """The inner ``ResourceVariable`` of a PS variable (Keras 3: of its backing
    ``tf.Variable``, ``.value``)."""
    for v in (variable, getattr(variable, "value", None)):
        try:
            return tfvars.inner_variable(v)
        except TypeError:
            continue
    raise TypeError(f"{getattr(variable, 'name', variable)!r} is no PS variable")
