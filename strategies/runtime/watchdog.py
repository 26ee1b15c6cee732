"""Bounded waits and the engine ticker.

Every wait on the engine (``join``, a step's ``fetch``) goes through :func:`wait_bounded`:
it ends when the wait is over, when a worker raised (``join`` then raises it), or with an
:class:`~tf_hetero.engine.EngineError` when no task or round finished for
``stall_timeout_s``. The ticker lets time-based decisions (slack deadlines, task transfer)
happen while no task event arrives.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref

from tf_hetero.engine import EngineError
from tf_hetero.strategies.runtime.errors import translate

__all__ = ["wait_bounded", "start_ticker"]


def wait_bounded(coordinator, wait_step) -> None:
    """Calls ``wait_step()`` (blocks at most ~1 s, True when the wait is over) until it is
    over, a worker raised, or nothing finished in the config's ``stall_timeout_s``."""
    queue = coordinator._cluster.closure_queue  # pylint: disable=protected-access
    engine, monitor = coordinator.engine, coordinator.monitor
    stall = coordinator.config.stall_timeout_s
    last_progress, last_count = time.monotonic(), -1
    while True:
        if queue._error is not None:  # pylint: disable=protected-access
            return  # the caller's TF join() raises it
        try:
            if wait_step():
                return
        except Exception as e:  # pylint: disable=broad-except
            if queue._error is not None:  # pylint: disable=protected-access
                return
            raise translate(e) from e
        count = len(monitor.tasks) + len(monitor.rounds)
        if count != last_count:
            last_progress, last_count = time.monotonic(), count
        elif time.monotonic() - last_progress > stall:
            err = EngineError(
                f"No task or round finished in {stall:.0f} s (live workers: "
                f"{engine.live_workers}). Fix: check that the workers are running; "
                "raise stall_timeout_s for very long tasks.")
            engine.fail(err)
            raise err


def start_ticker(coordinator, period_s: float) -> threading.Thread:
    """Ticks ``coordinator.engine`` every ``period_s`` while the coordinator exists and is not
    stopped (a weak reference: the thread must not keep a finished strategy alive)."""
    thread = threading.Thread(target=_tick_loop, args=(weakref.ref(coordinator), period_s),
                              daemon=True, name="tf-hetero-engine-tick")
    thread.start()
    return thread


def _tick_loop(ref, period_s):
    while True:
        time.sleep(period_s)
        coordinator = ref()
        if coordinator is None or coordinator.stopped:
            return
        try:
            if not coordinator.engine.idle():
                coordinator.engine.tick()
        except Exception:  # pylint: disable=broad-except
            logging.getLogger("tf_hetero").exception("engine tick failed")
        del coordinator
