"""The engine's lock: re-entrant, and counting how often it was taken."""

from __future__ import annotations

import threading

__all__ = ["CountingRLock"]


class CountingRLock:
    """The engine's one lock: a re-entrant lock that counts how often it was taken
    (``taken``), so the engine knows in O(1) that no event came since it last looked
    (:meth:`RoundCycle._waits_for_more`). Its ``threading.Condition`` is made on
    ``inner``; a wait's re-acquisition is not counted (no engine state changes after one).

    >>> lock = CountingRLock()
    >>> with lock:
    ...     with lock:
    ...         pass
    >>> lock.taken
    2
    """

    __slots__ = ("inner", "taken")

    def __init__(self):
        self.inner = threading.RLock()
        self.taken = 0

    def __enter__(self):
        self.inner.acquire()
        self.taken += 1
        return self

    def __exit__(self, *exc) -> None:
        self.inner.release()
