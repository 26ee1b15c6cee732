"""What the engine does when something fails: a task's closure, a worker, the fit (a
divergence, a policy's exception), a PS (the failover restarts the rounds in flight); and
what it waits on, in words, when nothing moves (the stall bound's error says it).

These are methods of :class:`~tf_hetero.engine.core.RoundEngine` (a base class of it, as
:class:`~tf_hetero.engine.cycle.RoundCycle` is): they read and write its state under its
lock and hold none of their own.

>>> from tf_hetero.engine import RoundEngine
>>> from tf_hetero.policies import AllTasks, OnePerWorker
>>> class Quiet:
...     def dispatch(self, task, worker, round_id): pass
...     def cancel(self, task): print("cancelled", task.payload)
>>> e = RoundEngine(2, AllTasks(), OnePerWorker(), Quiet())
>>> _ = e.submit("step 0")           # the round waits for a second task
>>> e.fail(RuntimeError("worker 1 is gone"))
cancelled step 0
>>> e.raise_if_error()
Traceback (most recent call last):
RuntimeError: worker 1 is gone
>>> e.clear_error(); e.error is None
True
"""

from __future__ import annotations

import collections

from tf_hetero.engine.state import Task, TaskState as S

__all__ = ["Faults"]


class Faults:
    """Failure, recovery and the restart of rounds (module notes); a base class of
    :class:`~tf_hetero.engine.core.RoundEngine`."""

    def task_failed(self, task: Task, worker: int, error: BaseException,
                    since: int | None = None) -> None:
        """``task``'s closure ended with ``error`` on ``worker``: the worker runs it no longer,
        and the engine fails (:meth:`fail`, ``since`` as there: an echo of a fit whose error
        already reached the user fails nothing). A closure still queued for its worker when
        its fit failed starts after :meth:`fail` emptied the running tasks; were it left
        running, its worker would stay busy and the next fit never idle (CI: a grouped fit
        after a failed one stalled 600 s)."""
        with self._lock:
            self._running.discard(worker, task)
            self.fail(error, since=since)
            if self._error is None:  # an echo: the worker is free for the current fit
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
            self._abandon()

    def restart_rounds(self) -> tuple[int, list]:
        """Abandons the rounds in progress, as :meth:`fail` does, but without an error: the
        fit goes on (a PS failover: the work in flight read variables that are gone). The
        :attr:`generation` moves on, so what the abandoned tasks' closures still raise is
        their echo and fails nothing. Returns the rounds abandoned and the payloads of the
        steps that will now never end (pending, queued or running in an abandoned round,
        or absorbed into a task that will not finish; not those whose task finished): the
        caller submits them again, made anew."""
        with self._lock:
            self.generation += 1
            self._restarting = True  # not idle until resume(): the steps come back
            orphans = [t.payload for t in self._pending]
            orphans += [t.payload for echoes in self._echoes.values() for t in echoes]
            rounds = 0
            for book in self.books:
                for rnd in (book.open, book.applying, book.queued):
                    if rnd is None or rnd.abandoned:
                        continue
                    rounds += 1
                    orphans += [t.payload for t in rnd.tasks
                                if t.state in (S.QUEUED, S.DISPATCHED, S.RUNNING)]
                    if rnd.closed and rnd.applied < 0:  # its apply is skipped (-1: not yet)
                        rnd.abandoned = True
            self._abandon()
            self._flushing = False
            self._pump()
            return rounds, list({id(p): p for p in orphans}.values())

    def resume(self) -> None:
        """After :meth:`restart_rounds`, once its steps were submitted again (or the
        engine failed): ``join`` may find the engine idle again."""
        with self._lock:
            self._restarting = False
            self._changed.notify_all()

    def _abandon(self) -> None:
        """Cancels what is pending and abandons every round in progress (lock held): a task
        of theirs that still starts writes nothing, one that still finishes applies
        nothing."""
        while self._pending:
            self.dispatcher.cancel(self._pending.popleft())
        self._pending_steps = 0
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
        self._running.clear()
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

    def waiting_on(self) -> str:
        """What the engine waits for, in words (a stall's error says it): steps pending,
        each book's rounds in progress by their tasks' states, what each worker runs.

        >>> from tf_hetero.policies import AllTasks, OnePerWorker
        >>> from tf_hetero.engine import RoundEngine
        >>> engine = RoundEngine(2, AllTasks(), OnePerWorker())
        >>> engine.waiting_on()
        'no step pending; no round in progress; no worker running a task'
        """
        with self._lock:
            parts = [f"{len(self._pending)} step(s) pending" if self._pending
                     else "no step pending"]
            if self._restarting:
                parts.append("restarting rounds after a PS failover")
            rounds = []
            for book in self.books:
                for name, rnd in (("open", book.open), ("applying", book.applying),
                                  ("apply queued", book.queued)):
                    if rnd is not None:
                        states = collections.Counter(t.state.name for t in rnd.tasks)
                        rounds.append(f"book {book.id} round {rnd.id} {name}"
                                      f"{' (abandoned)' if rnd.abandoned else ''}: "
                                      + ", ".join(f"{n} {k}" for k, n in sorted(states.items())))
            parts.append("; ".join(rounds) if rounds else "no round in progress")
            running = {w: len(t) for w, t in sorted(self._running.items()) if t}
            parts.append(f"tasks running per worker {running}" if running
                         else "no worker running a task")
            gated = self._gated()
            if gated:
                parts.append(f"workers held by the staleness gate {sorted(gated)}")
            return "; ".join(parts)

    def _raise_if_error(self) -> None:
        if self._error is not None:
            raise self._error
