"""Task-time estimation, written once: every policy and the monitor estimate a worker's task
time from its finished tasks through these functions, with one warm-up rule.

Warm-up rule: a worker's first ``WARMUP_TASKS`` tasks also trace and register the step
(~1 s here, against ~0.1 s of work) and are left out of every estimate;
:func:`smoothed_time` alone falls back to them while nothing else is known (a share must be
sized from something), a straggler projection never does.

Seed rule: the smoothed estimate starts from the median of a worker's first ``SEED_TASKS``
warm tasks, not from the first alone. A stall of the whole cluster during one of them (a
late function registration, a collection in the chief) otherwise seeded every worker alike
and, at ``alpha`` 0.3, still weighed ~10% after six more tasks: speeds looked even and shares
and speed groups stayed wrong for a dozen tasks (seen in CI).

Shift rule: a task more than ``SHIFT`` times slower or faster than the estimate is a level
shift only when the next task is too (on the same side); a lone one is left out, a confirmed
shift replaces the estimate at once. One 5x task otherwise raised the estimate 2.2x at
``alpha`` 0.3 and its worker's share stayed too small for several rounds while the others
waited for nothing (the ``transient`` scenario, 10% of tasks 5x slow: H-PS and EPSP fell
below plain BSP). Fast tasks need the confirmation too: taking one at once, a first version
gave a worker shares it could not finish after a task that looked fast per sample (a measured
EPSP slack run dropped 64 of 439 tasks; why that task looked fast, e.g. a partial batch at an
epoch's end, was not established).

>>> warm([1.0, 0.1, 0.2])
[0.1, 0.2]
>>> smoothed_time([1.0, 0.1, 0.1, 0.1, 0.15], alpha=0.5)
0.125
>>> round(smoothed_time([1.0, 0.9, 0.1, 0.1, 0.1]), 6)  # a stall in the first warm task is not kept
0.1
>>> smoothed_time([1.0])    # only the warm-up task is known
1.0
>>> round(smoothed_time([1.0, 0.1, 0.1, 0.1, 0.5, 0.1]), 6)  # one 5x task: left out
0.1
>>> smoothed_time([1.0, 0.1, 0.1, 0.1, 0.5, 0.4])  # two slow tasks: the new level
0.45
>>> smoothed_time([1.0, 0.4, 0.4, 0.4, 0.1]), smoothed_time([1.0, 0.4, 0.4, 0.4, 0.1, 0.1])
(0.4, 0.1)
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["WARMUP_TASKS", "SEED_TASKS", "DEFAULT_ALPHA", "SHIFT", "warm", "smoothed_time",
           "Smoother", "worker_time", "unit_histories", "Projection", "StragglerProjection"]

#: Tasks per worker that include tracing and are left out of estimates.
WARMUP_TASKS = 1
#: Warm tasks whose median seeds the smoothed estimate (one slow one among them is ignored).
SEED_TASKS = 3
#: Weight of the newest task in the smoothed estimate: 0.3 follows a 4x slowdown within one
#: round (colab/hps.ipynb) while jitter between equal workers (10-15% here) moves no share.
DEFAULT_ALPHA = 0.3
#: Ratio of a task's time to the estimate beyond which the task is a level shift (or a lone
#: outlier), not jitter: 2 leaves jitter between equal workers (10-15%) and the fixed
#: per-task costs of a shrinking share (~20% per unit) to the smoothing.
SHIFT = 2.0


def warm(durations: Sequence[float]) -> list[float]:
    """The durations after the warm-up tasks."""
    return list(durations[WARMUP_TASKS:])


def unit_histories(monitor, num_workers: int, warmup: int) -> list[list[float]] | None:
    """Each worker's measured seconds per work unit (``monitor.unit_times``: a sized task's
    duration over its units, an unsized task's duration), or ``None`` while any worker has
    fewer than ``warmup`` of them. Read per unit because inside a balanced sized group every
    member's task takes about as long, whatever its speed: by duration they look alike.

    >>> from types import SimpleNamespace as NS
    >>> m = NS(unit_times=lambda w: [0.1, 0.1] if w == 0 else [0.4])
    >>> unit_histories(m, 2, warmup=1), unit_histories(m, 2, warmup=2)
    ([[0.1, 0.1], [0.4]], None)
    """
    histories = [list(monitor.unit_times(w)) for w in range(num_workers)]
    return None if any(len(h) < warmup for h in histories) else histories


def smoothed_time(durations: Sequence[float], alpha: float = DEFAULT_ALPHA,
                  shift: float | None = SHIFT) -> float:
    """Exponentially smoothed task time of the warm tasks (the newest weighs ``alpha``),
    seeded by the median of the first ``SEED_TASKS`` of them, with the shift rule (module
    docstring; ``shift=None``: plain smoothing); NaN when nothing is known.

    >>> smoothed_time([]) != smoothed_time([])  # NaN: not measured yet
    True
    >>> round(smoothed_time([1.0, 0.1, 0.1, 0.1, 0.5], shift=None), 2)  # plain: 0.3 x 0.5 + 0.7 x 0.1
    0.22
    """
    d = warm(durations) or list(durations)
    if not d:
        return math.nan
    est = _median(d[:SEED_TASKS])
    held = None  # an outlier not yet confirmed by the next task
    for x in d[SEED_TASKS:]:
        side = 0 if shift is None else (x > shift * est) - (x * shift < est)
        if side == 0:
            est, held = alpha * x + (1 - alpha) * est, None
        elif held is not None and held[0] == side:
            est, held = (held[1] + x) / 2, None  # confirmed: the new level
        else:
            held = (side, x)
    return est


class Smoother:
    """:func:`smoothed_time` kept up to date one task at a time: after :meth:`add` of each
    duration in turn, :attr:`value` is ``smoothed_time`` of them all (the same rules, the
    same float), in O(1) per task instead of O(history) per question. A policy asks for
    every worker's estimate at every round: recomputed from the whole history that cost
    O(N x rounds) a round, ~2 ms a round after 4000 rounds at 4 workers, on the round's
    critical path (benchmarks/results/2026-12-07-engine-python/).

    >>> s = Smoother(alpha=0.5)
    >>> for x in (1.0, 0.1, 0.1, 0.1, 0.15): s.add(x)
    >>> s.value == smoothed_time([1.0, 0.1, 0.1, 0.1, 0.15], alpha=0.5), s.seen
    (True, 5)
    """

    __slots__ = ("alpha", "shift", "seen", "_early", "_est", "_held")

    def __init__(self, alpha: float = DEFAULT_ALPHA, shift: float | None = SHIFT):
        self.alpha, self.shift = alpha, shift
        self.seen = 0  # durations added
        self._early: list[float] = []  # the warm-up tasks, then the seed tasks
        self._est = math.nan
        self._held = None  # an outlier not yet confirmed by the next task

    def add(self, x: float) -> None:
        self.seen += 1
        if len(self._early) < WARMUP_TASKS + SEED_TASKS:
            self._early.append(x)
            if len(self._early) > WARMUP_TASKS:
                self._est = _median(self._early[WARMUP_TASKS:])
            return
        est, shift, held = self._est, self.shift, self._held
        side = 0 if shift is None else (x > shift * est) - (x * shift < est)
        if side == 0:
            self._est, self._held = self.alpha * x + (1 - self.alpha) * est, None
        elif held is not None and held[0] == side:
            self._est, self._held = (held[1] + x) / 2, None
        else:
            self._held = (side, x)

    @property
    def value(self) -> float:
        if self.seen > WARMUP_TASKS:
            return self._est
        return smoothed_time(self._early, self.alpha, self.shift)  # only warm-up tasks known


def _median(xs: list[float]) -> float:
    """``float(np.median(xs))`` of a short list, without numpy's per-call cost."""
    s = sorted(xs)
    mid = len(s) // 2
    return float(s[mid]) if len(s) % 2 else float((s[mid - 1] + s[mid]) / 2)


def worker_time(monitor, worker: int, alpha: float = DEFAULT_ALPHA, units: bool = False) -> float:
    """``worker``'s smoothed task time (``units``: per work unit) from ``monitor``: its
    incremental estimate when it keeps them (:meth:`~tf_hetero.telemetry.monitor.Monitor.smoothed`),
    else :func:`smoothed_time` of its history (the same value)."""
    smoothed = getattr(monitor, "smoothed", None)
    if smoothed is not None:
        return smoothed(worker, alpha, units=units)
    return smoothed_time(monitor.unit_times(worker) if units else monitor.durations(worker),
                         alpha)


class Projection(NamedTuple):
    """One worker's projected next task time (seconds), its spread, and whether it is a
    straggler."""

    expected_s: float
    spread_s: float
    straggler: bool


class StragglerProjection:
    """Straggler projection (Falcon): predicts each worker's next task time from its recent
    warm tasks (median and standard deviation of the last ``window``), and flags a worker
    whose projection is more than ``factor`` times the median projection of the workers. The
    median keeps a transient straggler (one slow task) from being taken for a persistent one:
    that case is task transfer's job.

    >>> class M:
    ...     def durations(self, w): return [[1.0] + [0.1] * 5, [0.11] * 5, [0.4] * 5][w]
    >>> p = StragglerProjection(window=4, factor=1.5, min_samples=3).project(M(), [0, 1, 2])
    >>> [x.straggler for x in p.values()], round(p[2].expected_s, 2)
    ([False, False, True], 0.4)
    """

    def __init__(self, window: int = 8, factor: float = 1.5, min_samples: int = 3):
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window={window!r}: need an integer >= 1.")
        if not factor > 1:
            raise ValueError(f"factor={factor!r}: need a number > 1.")
        if not isinstance(min_samples, int) or not 1 <= min_samples <= window:
            raise ValueError(f"min_samples={min_samples!r}: need an integer from 1 to window.")
        self.window, self.factor, self.min_samples = window, factor, min_samples

    def project(self, monitor, workers, per_unit: bool = False) -> dict:
        """Projections of ``workers``' next task time (``per_unit``: of their time per work
        unit, for sized tasks whose durations follow their sizes)."""
        series = (lambda w: monitor.unit_times(w)) if per_unit else (lambda w: monitor.durations(w))
        history = {w: warm(series(w)) if monitor is not None else [] for w in workers}
        stats = {}
        for w, d in history.items():
            d = d[-self.window:]
            stats[w] = (float(np.median(d)), float(np.std(d))) if d else (math.nan, 0.0)
        known = [m for m, _ in stats.values() if not math.isnan(m)]
        typical = float(np.median(known)) if known else math.nan
        # Too few tasks (e.g. two, one of them a transient straggler) flag no one.
        enough = {w for w, d in history.items() if len(d) >= self.min_samples}
        return {w: Projection(m, s, w in enough and m > self.factor * typical)
                for w, (m, s) in stats.items()}

    def __repr__(self):
        return f"StragglerProjection(window={self.window}, factor={self.factor})"
