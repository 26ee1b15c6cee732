"""Virtual time: a discrete-event loop that is also the engine's clock.

Events are ``(time, sequence, fn, args)`` in a heap; the sequence number keeps events of one
instant in the order they were scheduled, so a run is deterministic.

>>> loop = EventLoop()
>>> seen = []
>>> loop.after(0.5, seen.append, "b"); loop.at(0.1, seen.append, "a")
>>> loop.run(lambda: len(seen) == 2)
True
>>> seen, loop()
(['a', 'b'], 0.5)
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable

__all__ = ["EventLoop", "SimulationError"]


class SimulationError(RuntimeError):
    """The simulated cluster cannot go on (e.g. nothing left to happen but work not done)."""


class EventLoop:
    """A heap of timed callbacks; calling the loop returns the virtual time (seconds)."""

    def __init__(self, t0: float = 0.0):
        self.now = float(t0)
        self._heap: list = []
        self._seq = itertools.count()
        self.events = 0  # callbacks run so far

    def __call__(self) -> float:
        return self.now

    def at(self, t: float, fn: Callable, *args) -> None:
        """Runs ``fn(*args)`` at virtual time ``t`` (not before now)."""
        heapq.heappush(self._heap, (max(t, self.now), next(self._seq), fn, args))

    def after(self, dt: float, fn: Callable, *args) -> None:
        self.at(self.now + dt, fn, *args)

    def run(self, done: Callable[[], bool], until: float = float("inf")) -> bool:
        """Runs events in time order until ``done()`` holds (True), nothing is left to run,
        or the next event is after ``until`` (False)."""
        heap, pop = self._heap, heapq.heappop
        while not done():
            if not heap or heap[0][0] > until:
                return False
            t, _, fn, args = pop(heap)
            if t > self.now:  # an event left from before advance_to() runs late, not back
                self.now = t
            self.events += 1
            fn(*args)
        return True

    def advance_to(self, t: float) -> None:
        """Moves the clock to ``t`` (never back): nothing was due in between."""
        self.now = max(self.now, float(t))

    def __len__(self) -> int:
        return len(self._heap)
