"""Cluster performance arithmetic (docs/MEASUREMENT.md). Pure Python.

- *Capacity* of worker i = micro-batch / emulated time of one task on i.
- *Ideal cluster throughput* = sum of capacities.
- *Cluster efficiency* = measured samples/s / ideal.
- BSP with one task per worker per round is bound by its slowest worker:
  efficiency <= N / (s_max * sum_i 1/s_i).

>>> round(bsp_efficiency_bound([1, 1, 1, 4]), 4)
0.3077
>>> ideal_samples_per_sec(32, 100.0, [1, 1, 1, 4])   # 3 * 320 + 80
1040.0
>>> efficiency(520.0, 1040.0)
0.5
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Mapping, Sequence

__all__ = ["capacities", "ideal_samples_per_sec", "efficiency", "bsp_efficiency_bound",
           "ideal_over_tasks", "time_to_target", "RunFigures", "run_figures", "aggregate"]


def _check_slowdowns(slowdowns: Sequence[float]) -> None:
    if len(slowdowns) == 0 or not all(math.isfinite(s) and s > 0 for s in slowdowns):
        raise ValueError(f"slowdowns must be a non-empty list of finite numbers > 0; "
                         f"received {list(slowdowns)!r}.")


def capacities(batch_size: int, base_ms: float, slowdowns: Sequence[float]) -> list[float]:
    """Samples/s each worker can process: ``batch_size / (base_ms * s_i / 1000)``."""
    if batch_size <= 0 or base_ms <= 0:
        raise ValueError(f"need batch_size > 0 and base_ms > 0; received {batch_size!r}, {base_ms!r}.")
    _check_slowdowns(slowdowns)
    return [batch_size / (base_ms * s / 1000.0) for s in slowdowns]


def ideal_samples_per_sec(batch_size: int, base_ms: float, slowdowns: Sequence[float]) -> float:
    """Sum of the workers' capacities."""
    return float(sum(capacities(batch_size, base_ms, slowdowns)))


def efficiency(samples_per_sec: float, ideal: float) -> float:
    """Measured throughput as a fraction of the ideal."""
    if ideal <= 0:
        raise ValueError(f"ideal throughput must be > 0; received {ideal!r}.")
    return samples_per_sec / ideal


def bsp_efficiency_bound(slowdowns: Sequence[float]) -> float:
    """Best efficiency of BSP (one task per worker per round): ``N / (s_max * sum 1/s_i)``."""
    _check_slowdowns(slowdowns)
    return len(slowdowns) / (max(slowdowns) * sum(1.0 / s for s in slowdowns))


def ideal_over_tasks(batch_size: int, base_ms: float, profile, steps: Mapping[int, int],
                     num_workers: int) -> float:
    """The ideal over the run actually made: each worker's capacity is the samples of the
    ``steps[w]`` steps it ran over their emulated time, integrated over the profile (a
    ``change=`` or transient draws count where they happened); a worker that ran nothing
    counts at its expected speed at task 0.

    >>> from tf_hetero.emulation.profile import Profile
    >>> p = Profile.parse("change=1@2:4")   # worker 1 becomes 4x slower from its 3rd task
    >>> ideal_over_tasks(32, 100.0, p, {0: 4, 1: 4}, 2)   # 320 + 4*32 / (0.1 * (1+1+4+4))
    448.0
    """
    if batch_size <= 0 or base_ms <= 0:
        raise ValueError(f"need batch_size > 0 and base_ms > 0; received {batch_size!r}, {base_ms!r}.")
    total = 0.0
    for w in range(num_workers):
        n = steps.get(w, 0)
        if n <= 0:
            total += batch_size / (base_ms / 1000.0 * profile.expected_slowdowns(num_workers)[w])
            continue
        seconds = base_ms / 1000.0 * sum(profile.slowdown(w, t, num_workers) for t in range(n))
        total += batch_size * n / seconds
    return float(total)


def time_to_target(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    """First time of ``curve`` (``(seconds, accuracy)`` pairs, in time order) at which the
    accuracy reaches ``target``; ``None`` if it never does.

    >>> time_to_target([(0.5, 0.3), (1.0, 0.92), (1.5, 0.89), (2.0, 0.95)], 0.9)
    1.0
    >>> time_to_target([(0.5, 0.3)], 0.9) is None
    True
    """
    return next((t for t, a in curve if a >= target), None)


@dataclasses.dataclass(frozen=True)
class RunFigures:
    """One run's throughput figures on one clock: from ``fit()`` being called to the last
    update applied (``span_s``); ``setup_s`` is the part before the first task started."""

    samples_per_sec: float
    span_s: float
    setup_s: float
    applied_samples: int


def run_figures(records, fit_start: float, last_apply: float, samples_per_task: int) -> RunFigures:
    """Throughput of a run from its task records (:class:`~tf_hetero.telemetry.TaskRecord`):
    applied samples over the span from ``fit_start`` to the later of ``last_apply`` and the
    last task's end (async strategies apply inside the task).

    >>> from tf_hetero.telemetry.records import TaskRecord
    >>> recs = [TaskRecord(0, 1.0, 2.0), TaskRecord(1, 1.0, 3.0, applied=False)]
    >>> run_figures(recs, fit_start=0.0, last_apply=4.0, samples_per_task=32)
    RunFigures(samples_per_sec=8.0, span_s=4.0, setup_s=1.0, applied_samples=32)
    """
    if not records:
        raise ValueError("run_figures: no task records; the run trained nothing.")
    end = max(last_apply, max(r.end for r in records))
    span = end - fit_start
    if span <= 0:
        raise ValueError(f"run_figures: the run ends at {end} before fit started at {fit_start}.")
    applied = sum(r.applied for r in records) * samples_per_task
    return RunFigures(applied / span, span, min(r.start for r in records) - fit_start, applied)


def aggregate(values: Sequence[float | None]) -> dict:
    """Median and range of a figure over repeats; ``None`` values (e.g. a target never
    reached) count as missing, and the median is ``None`` when half or more are missing.

    >>> aggregate([3.0, 1.0, 2.0])
    {'median': 2.0, 'min': 1.0, 'max': 3.0, 'missing': 0}
    >>> aggregate([1.0, None, None])["median"] is None
    True
    """
    present = sorted(v for v in values if v is not None)
    missing = len(values) - len(present)
    median = statistics.median(present) if present and missing < len(values) / 2 else None
    return {"median": median, "min": present[0] if present else None,
            "max": present[-1] if present else None, "missing": missing}
