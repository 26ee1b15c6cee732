"""Rounds' applies run from the coordinator (chief) process, in order, on one thread.

A round's apply reads the accumulators on the PS tasks and runs the user's optimizer there.
As a closure on a worker's queue (the 0.3 path) it waited behind whatever that worker was
running and held the worker up for the apply's duration (~15 ms of a ~180 ms round here,
docs/MEASUREMENT.md). Run from the chief instead, it waits for nothing on a worker and
delays no task: workers only compute, and a book whose sync lets the next round open before
the apply has finished (``overlap``) hides the apply entirely.

The apply function is traced and called on the chief like any function of the coordinator
(TF places its reads and its optimizer's updates on the variables' PS tasks, and its
arithmetic on the chief). One thread runs them in submission order, so the applies of one
book land in round order and the two accumulator slots stay consistent.
"""

from __future__ import annotations

import collections
import contextlib
import queue as queue_lib
import threading
import time
import weakref

from tf_hetero.policies.noise import GradientSample
from tf_hetero.strategies.runtime.errors import translate

__all__ = ["ChiefApplier"]

#: Seconds the idle apply thread waits for work before checking whether its coordinator is
#: gone or stopped (it holds the coordinator weakly).
POLL_S = 1.0


class ChiefApplier:
    """Runs ``(round_id, fn, args)`` applies in order on a daemon thread of the chief and
    reports each to the engine (``apply_finished``) or fails the engine with its error.

    ``timings``: ``(round_id, submitted, called, returned)`` of the latest applies
    (``perf_counter`` seconds: handed to this thread, the apply function called, its result
    fetched): the parts of close -> applied in a round profile
    (:mod:`tf_hetero.telemetry.roundprofile`)."""

    #: Applies whose timings are kept (a long fit's rounds beyond it drop the oldest).
    KEEP = 100_000

    def __init__(self, coordinator):
        self._coordinator = weakref.ref(coordinator)
        self._queue: queue_lib.Queue = queue_lib.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: Held while an apply runs; a failover holds it while it restores the variables.
        self.running = threading.Lock()
        self.timings: collections.deque = collections.deque(maxlen=self.KEEP)

    @contextlib.contextmanager
    def held(self, timeout: float):
        """No apply runs inside (the one running, if any, ends first; at most ``timeout``
        seconds, then ``TimeoutError``)."""
        if not self.running.acquire(timeout=timeout):
            raise TimeoutError(f"the round apply running did not end within {timeout:.0f} s")
        try:
            yield
        finally:
            self.running.release()

    def submit(self, round_id: int, fn, args: tuple) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=_loop, args=(self._coordinator, self._queue, self.timings,
                                        self.running),
                    daemon=True, name="tf-hetero-apply")
                self._thread.start()
        self._queue.put((round_id, fn, args, time.perf_counter()))

    def stop(self) -> None:
        """Lets the thread end once the applies already submitted are done."""
        self._queue.put(None)


def _loop(ref, work, timings, running) -> None:
    while True:
        try:
            item = work.get(timeout=POLL_S)
        except queue_lib.Empty:
            coordinator = ref()
            if coordinator is None or coordinator.stopped:
                return
            del coordinator
            continue
        if item is None:
            return
        coordinator = ref()
        if coordinator is None:
            return
        round_id, fn, args, submitted = item
        engine, failover = coordinator.engine, coordinator.failover
        with running:
            if engine.rounds[round_id].abandoned:  # a failover rolled the model back
                del coordinator, engine, failover
                continue
            try:
                with coordinator.strategy.scope():
                    called = time.perf_counter()
                    applied, norm, *stats, skipped = (float(v) for v in fn(*args).numpy())
                    timings.append((round_id, submitted, called, time.perf_counter()))
            except Exception as e:  # pylint: disable=broad-except
                if failover is None or not failover.take(e):
                    engine.fail(translate(e))  # e.g. a PS went away: the clear error
                del coordinator, engine, failover
                continue
            copy_error = None
            if failover is not None and not skipped:
                try:
                    failover.after_apply(round_id)  # nothing writes the variables here
                except Exception as e:  # pylint: disable=broad-except
                    # The copy due after this apply met a dead PS. The update landed:
                    # it is booked below before the failover rolls it back, or the
                    # rollback would count one update more than the engine's records
                    # (chaos: DynSGD and SSP, a PS killed as a copy was due).
                    copy_error = e
        try:
            if skipped:  # a LossScaleOptimizer skipped it: no update, no finding
                engine.apply_finished(round_id, 0)
                if engine.monitor:
                    engine.monitor.on_event("round_skipped", round=round_id,
                                            why="loss scale: non-finite gradient")
            else:
                sample = GradientSample(*stats)
                engine.apply_finished(round_id, int(round(applied)), grad_norm=norm,
                                      gradient=sample)
                coordinator.losses.round_applied(  # its tasks' loss check
                    round_id, sample.loss, max(1, len(engine.rounds[round_id].tasks)))
        except Exception as e:  # pylint: disable=broad-except
            # A fault of ours past the apply must still end the fit: a dead apply
            # thread would leave every later round waiting for its apply.
            engine.fail(e)
        if copy_error is not None and not failover.take(copy_error):
            engine.fail(translate(copy_error))
        del coordinator, engine, failover
