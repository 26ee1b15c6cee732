"""Bounded waits and the engine ticker.

Every wait on the engine (``join``, a step's ``fetch``) goes through :func:`wait_bounded`:
it ends when the wait is over, when a worker raised (``join`` then raises it), or with an
:class:`~tf_hetero.engine.EngineError` when no task or round finished for
``stall_timeout_s``. The ticker lets time-based decisions (slack deadlines, task transfer)
happen while no task event arrives; it runs only while the engine has work.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref

from tf_hetero import tfcompat
from tf_hetero.engine import EngineError
from tf_hetero.strategies.runtime.errors import fail_fit, translate

__all__ = ["wait_bounded", "ensure_ticker", "TICKER_IDLE_EXIT_S"]


def wait_bounded(coordinator, wait_step) -> None:
    """Calls ``wait_step()`` (blocks at most ~1 s, True when the wait is over) until it is
    over, a worker raised, or nothing finished in the config's ``stall_timeout_s``."""
    queue = tfcompat.coordinator.queue_of(coordinator)
    engine, monitor = coordinator.engine, coordinator.monitor
    stall = coordinator.config.stall_timeout_s
    last_progress, last_count = time.monotonic(), -1
    while True:
        if queue.error is not None:
            return  # the caller's TF join() raises it
        try:
            if wait_step():
                return
        except Exception as e:  # pylint: disable=broad-except
            if queue.error is not None:
                return
            raise translate(e) from e
        count = len(monitor.tasks) + len(monitor.rounds)
        if count != last_count:
            last_progress, last_count = time.monotonic(), count
        elif time.monotonic() - last_progress > stall:
            live = (f" (live workers: {engine.live_workers}; waiting on: "
                    f"{engine.waiting_on()})" if engine is not None else
                    f" (waiting on: {queue.raw.inflight_closure_count} step(s) in flight)")
            err = EngineError(
                f"No task or round finished in {stall:.0f} s{live}. Fix: check that the "
                "workers are running; raise stall_timeout_s for very long tasks.")
            fail_fit(coordinator, err)
            raise err


#: Seconds the ticker goes on after the engine fell idle before its thread ends (a custom
#: loop's next schedule usually comes sooner; ``ensure_ticker`` starts a new one otherwise).
TICKER_IDLE_EXIT_S = 1.0


def ensure_ticker(coordinator, period_s: float) -> None:
    """Starts the engine ticker of ``coordinator`` unless one runs. Call it *after* a task was
    submitted: a ticker ending because the engine was idle decides under the same lock, so
    it either sees the new task and goes on, or has ended and a new one starts here."""
    with coordinator.ticker_lock:
        if coordinator.ticker is None and not coordinator.stopped:
            coordinator.ticker = threading.Thread(
                target=_tick_loop, args=(weakref.ref(coordinator), period_s), daemon=True,
                name="tf-hetero-engine-tick")
            coordinator.ticker.start()


def _tick_loop(ref, period_s):
    """Ticks the engine every ``period_s`` while it has work; ends when the coordinator is
    gone or stopped (a weak reference: the thread must not keep a finished strategy alive),
    or the engine stayed idle ``TICKER_IDLE_EXIT_S``: nothing of a fit runs after it."""
    idle_since = None
    while True:
        time.sleep(period_s)
        coordinator = ref()
        if coordinator is None:
            return
        with coordinator.ticker_lock:
            idle = coordinator.engine.idle()
            now = time.monotonic()
            idle_since = (idle_since or now) if idle else None
            if coordinator.stopped or (idle and now - idle_since >= TICKER_IDLE_EXIT_S):
                coordinator.ticker = None
                return
        try:
            if not idle:
                coordinator.engine.tick()
        except Exception:  # pylint: disable=broad-except
            logging.getLogger("tf_hetero").exception("engine tick failed")
        del coordinator
