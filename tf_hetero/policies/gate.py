"""Gates: may an idle worker start another task? (:class:`~tf_hetero.engine.api.Gate`; asked per
task in async mode, and before a book plans a round: SSP over one book per worker)

>>> StalenessBound(2).may_start(0, {0: 5, 1: 3}), StalenessBound(2).may_start(0, {0: 6, 1: 3})
(True, False)
"""

from __future__ import annotations

__all__ = ["Unbounded", "StalenessBound"]


class Unbounded:
    """No staleness bound (plain asynchronous training): the engine asks it nothing, as with
    no gate (``unbounded``, :class:`~tf_hetero.engine.api.Gate`)."""

    unbounded = True

    def may_start(self, worker, clocks) -> bool:
        return True

    def __repr__(self):
        return "Unbounded()"


class StalenessBound:
    """SSP: a worker may not get more than ``staleness`` tasks ahead of the slowest live worker."""

    def __init__(self, staleness: int):
        if not isinstance(staleness, int) or isinstance(staleness, bool) or staleness < 0:
            raise ValueError(f"staleness={staleness!r}: need an integer >= 0.")
        self.staleness = staleness

    def may_start(self, worker, clocks) -> bool:
        return clocks[worker] - min(clocks.values()) <= self.staleness

    def refused(self, clocks) -> set:
        """Every worker :meth:`may_start` refuses, the slowest found once (the engine asks
        this over all live workers: per worker, O(N^2)).

        >>> sorted(StalenessBound(1).refused({0: 5, 1: 3, 2: 4}))
        [0]
        """
        if not clocks:
            return set()
        bound = min(clocks.values()) + self.staleness
        return {w for w, c in clocks.items() if c > bound}

    def __repr__(self):
        return f"StalenessBound({self.staleness})"
