"""Each PS task's service rate, estimated from what it served (pure).

The rebalancing controller weighs a PS's load by its rate: a PS twice as slow should hold
half the bytes. Three sources, best first:

- :class:`RateEstimator` over measured windows (emulated PS tasks report busy seconds, bytes
  and requests per PS): :func:`fit_rates` separates a per-request cost shared by every PS
  from each PS's seconds per byte; without request counts, bytes per busy second;
- :func:`probed_rates`: decision 0's probe (seconds per byte of each PS, timed before the
  first round);
- the configured rates (``RebalanceConfig.rates``, equal by default).

Rates are relative to the fastest PS (1.0).

>>> est = RateEstimator(2)
>>> est.measure(busy_s=[1.0, 3.0], served_bytes=[1000, 1000])   # PS 1 3x slower
(1.0, 0.3333333333333333)
>>> est.measure(busy_s=[1.0], served_bytes=[1000]) is None       # not every PS measured
True
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["fit_rates", "probed_rates", "RateEstimator", "FIT_WINDOWS"]

#: Measured windows a fit uses (the last ones).
FIT_WINDOWS = 4


def fit_rates(windows: Sequence[tuple], num_ps: int) -> tuple[float, ...] | None:
    """PS service rates relative to the fastest, from measured windows, or ``None``.

    Each window is ``(requests, bytes, busy_s)`` per PS. A PS's busy time is modelled as
    ``requests x c + bytes x u_p``: ``c`` a cost per request shared by every PS, ``u_p``
    PS ``p``'s seconds per byte; both are fitted by least squares. ``bytes / busy`` alone
    makes a PS that serves few bytes look slow (measured: ~9 ms per request beside 0.4 ms
    of bytes for a PS holding only biases). It needs as many independent equations as
    unknowns (two windows with different loads on each PS): ``None`` before.

    >>> w1 = ([64, 64], [50_000, 4_300_000], [64 * 0.009 + 50_000 * 0.25e-6,
    ...                                       64 * 0.009 + 4_300_000 * 0.75e-6])
    >>> fit_rates([w1], 2) is None                # one window: c and the rates not separable
    True
    >>> w2 = ([64, 64], [2_150_000, 2_200_000], [64 * 0.009 + 2_150_000 * 0.25e-6,
    ...                                         64 * 0.009 + 2_200_000 * 0.75e-6])
    >>> [round(r, 3) for r in fit_rates([w1, w2], 2)]   # PS 1 is 3x slower
    [1.0, 0.333]
    """
    import numpy as np

    rows, busy = [], []
    for requests, nbytes, seconds in windows:
        for p in range(num_ps):
            if requests[p] > 0:
                row = [0.0] * (num_ps + 1)
                row[0], row[1 + p] = float(requests[p]), float(nbytes[p])
                rows.append(row)
                busy.append(float(seconds[p]))
    if len(rows) < num_ps + 1:
        return None
    a = np.asarray(rows)
    norms = np.linalg.norm(a, axis=0)
    if not np.all(norms > 0):
        return None
    a = a / norms  # requests (~1e2) and bytes (~1e6) on one scale
    if np.linalg.matrix_rank(a, tol=1e-6) < num_ps + 1:
        return None
    x = np.linalg.lstsq(a, np.asarray(busy), rcond=None)[0] / norms
    seconds_per_byte = x[1:]
    if not np.all(seconds_per_byte > 0):
        return None  # noise larger than the signal: do not trust the fit
    rates = 1.0 / seconds_per_byte
    return tuple(float(r) for r in rates / rates.max())


def probed_rates(probed: Sequence, num_ps: int) -> tuple[float, ...] | None:
    """Rates from a probe (per PS: ``(seconds per byte, seconds per request)``, or ``None``
    where a PS was not timed); ``None`` when the probe is unusable (a PS not emulated, or
    noise above the signal: a non-positive time per byte).

    >>> probed_rates([(0.25e-6, 1e-3), (0.75e-6, 1e-3)], 2)
    (1.0, 0.3333333333333333)
    >>> probed_rates([None, (0.75e-6, 1e-3)], 2) is None
    True
    """
    if len(probed) != num_ps or any(p is None or not p[0] > 0 for p in probed):
        return None
    per_byte = [float(p[0]) for p in probed]
    fastest = min(per_byte)
    return tuple(fastest / u for u in per_byte)


class RateEstimator:
    """Estimates the rates of ``num_ps`` PS tasks window by window (see module notes)."""

    def __init__(self, num_ps: int = 0):
        self.num_ps = num_ps
        #: Measured windows ``(requests, bytes, busy_s)`` per PS, the last :data:`FIT_WINDOWS`.
        self.windows: list[tuple] = []
        self.fitted: tuple[float, ...] | None = None  # the last rates fit_rates gave

    def measure(self, busy_s: Sequence[float] | None, served_bytes: Sequence[float] | None,
                requests: Sequence[int] | None = None) -> tuple[float, ...] | None:
        """The rates after one more window, or ``None`` if not measured (yet) on every PS.
        With request counts: :func:`fit_rates` over the last windows; without: bytes per
        busy second.

        Windows on an unchanged placement cannot separate the per-request cost from the
        rates: the last fit is kept then (measured: falling back to equal rates there sent a
        kernel back to the slow PS, a trial undone at once, twice per run)."""
        if busy_s is None or served_bytes is None or len(busy_s) != self.num_ps:
            return None
        if requests is not None:
            self.windows.append((list(requests), list(served_bytes), list(busy_s)))
            del self.windows[:-FIT_WINDOWS]
            self.fitted = fit_rates(self.windows, self.num_ps) or self.fitted
            return self.fitted
        rates = [b / s if s > 0 and b > 0 else None for b, s in zip(served_bytes, busy_s)]
        if any(r is None for r in rates):
            return None
        top = max(rates)
        return tuple(r / top for r in rates)
