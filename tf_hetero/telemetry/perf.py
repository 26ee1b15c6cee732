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
           "ideal_over_tasks", "time_to_target", "RunFigures", "run_figures", "steady_samples_per_sec",
           "aggregate", "round_breakdown"]


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
    counts at its expected speed at task 0. ``steps[w]`` is a number of steps of
    ``batch_size`` samples, or the samples of each of its steps (sized tasks: a step of ``r``
    samples takes ``base_ms x r / batch_size``).

    >>> from tf_hetero.emulation.profile import Profile
    >>> p = Profile.parse("change=1@2:4")   # worker 1 becomes 4x slower from its 3rd task
    >>> ideal_over_tasks(32, 100.0, p, {0: 4, 1: 4}, 2)   # 320 + 4*32 / (0.1 * (1+1+4+4))
    448.0
    >>> ideal_over_tasks(32, 100.0, p, {0: [64, 16], 1: [32] * 4}, 2)   # sizes do not matter
    448.0
    """
    if batch_size <= 0 or base_ms <= 0:
        raise ValueError(f"need batch_size > 0 and base_ms > 0; received {batch_size!r}, {base_ms!r}.")
    total = 0.0
    for w in range(num_workers):
        rows = steps.get(w, 0)
        rows = [batch_size] * rows if isinstance(rows, int) else list(rows)
        if not rows:
            total += batch_size / (base_ms / 1000.0 * profile.expected_slowdowns(num_workers)[w])
            continue
        seconds = base_ms / 1000.0 * sum(profile.slowdown(w, t, num_workers) * r / batch_size
                                         for t, r in enumerate(rows))
        total += sum(rows) / seconds
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


def run_figures(records, fit_start: float, last_apply: float, samples_per_unit: int) -> RunFigures:
    """Throughput of a run from its task records (:class:`~tf_hetero.telemetry.TaskRecord`):
    applied samples (``size x samples_per_unit`` per record) over the span from ``fit_start``
    to the later of ``last_apply`` and the last task's end (async strategies apply inside the
    task).

    >>> from tf_hetero.telemetry.records import TaskRecord
    >>> recs = [TaskRecord(0, 1.0, 2.0), TaskRecord(1, 1.0, 3.0, applied=False)]
    >>> run_figures(recs, fit_start=0.0, last_apply=4.0, samples_per_unit=32)
    RunFigures(samples_per_sec=8.0, span_s=4.0, setup_s=1.0, applied_samples=32)
    >>> run_figures([TaskRecord(0, 1.0, 2.0, size=5)], 0.0, 4.0, samples_per_unit=8).applied_samples
    40
    """
    if not records:
        raise ValueError("run_figures: no task records; the run trained nothing.")
    end = max(last_apply, max(r.end for r in records))
    span = end - fit_start
    if span <= 0:
        raise ValueError(f"run_figures: the run ends at {end} before fit started at {fit_start}.")
    applied = sum(r.size for r in records if r.applied) * samples_per_unit
    return RunFigures(applied / span, span, min(r.start for r in records) - fit_start, applied)


def steady_samples_per_sec(records, end: float, samples_per_unit: int,
                           skip: float = 0.1) -> float:
    """Throughput once a run is under way: the applied samples of the tasks that started
    after the first ``skip`` of them (by start time) over the time from that start to
    ``end``. The set-up, the workers' first steps (tracing) and the first apply fall outside
    it, which a short run's :func:`run_figures` counts in full; a task under way at the
    window's start is left out but its time counted (at most one round's worth, so a little
    low).

    >>> from tf_hetero.telemetry.records import TaskRecord
    >>> recs = [TaskRecord(0, 5.0, 6.0)] + [TaskRecord(0, 6.0 + i, 7.0 + i) for i in range(9)]
    >>> steady_samples_per_sec(recs, end=15.0, samples_per_unit=32)   # 9 tasks of 32 in 9 s
    32.0
    """
    if not records or not 0 <= skip < 1:
        raise ValueError(f"steady_samples_per_sec: need task records and 0 <= skip < 1; "
                         f"received {len(records)} records, skip={skip!r}.")
    starts = sorted(r.start for r in records)
    t0 = starts[int(skip * len(starts))]
    if end <= t0:
        raise ValueError(f"steady_samples_per_sec: the run ends at {end} before {t0}.")
    applied = sum(r.size for r in records if r.applied and r.start >= t0)
    return applied * samples_per_unit / (end - t0)


def aggregate(values: Sequence[float | None], missing_is_worst: bool = False) -> dict:
    """Median and range of a figure over repeats; ``None`` values (e.g. a target never
    reached) count as missing, and the median is ``None`` when half or more are missing.
    ``missing_is_worst``: a missing value ranks above every value (a target not reached is
    later than any reached), so the median of one missing in three is the larger of the
    other two, not their mean.

    >>> aggregate([3.0, 1.0, 2.0])
    {'median': 2.0, 'min': 1.0, 'max': 3.0, 'missing': 0}
    >>> aggregate([1.0, None, None])["median"] is None
    True
    >>> aggregate([1.0, 2.0, None])["median"], aggregate([1.0, 2.0, None], True)["median"]
    (1.5, 2.0)
    """
    present = sorted(v for v in values if v is not None)
    missing = len(values) - len(present)
    median = statistics.median(present) if present and missing < len(values) / 2 else None
    if missing_is_worst and median is not None:
        median = statistics.median(present + [math.inf] * missing)
    return {"median": median, "min": present[0] if present else None,
            "max": present[-1] if present else None, "missing": missing}


def round_breakdown(rounds) -> dict:
    """Where a training round's time goes, mean milliseconds per round over ``rounds``
    (engine :class:`~tf_hetero.engine.Round` objects with their tasks):

    - ``dispatch``: round opened -> a task's worker thread picked it up (queueing);
    - ``task``: a task's closure on its worker thread (RPC, reads, compute, push);
    - ``barrier``: a task's end -> the round closed (waiting for the round's last task);
    - ``apply``: round closed -> its update applied, or -> the book's next round opened if
      that came first (an overlapped apply, ``AllTasks(overlap=True)``, is hidden: only the
      part the next round waited for counts);
    - ``gap``: the rest of closed -> the book's next round opened (engine and fit's
      scheduling).

    ``dispatch + task + barrier`` is the open->close time seen by a mean task, so
    ``dispatch + task + barrier + apply + gap`` is the mean round-to-round time.

    >>> from types import SimpleNamespace as NS
    >>> t = lambda s, e: NS(t_start=s, t_end=e, drain=False, state="done")
    >>> r0 = NS(kind="train", applied=2, book=0, t_open=0.0, t_close=0.3, t_applied=0.35,
    ...         tasks=[t(0.02, 0.3), t(0.02, 0.2)])
    >>> r1 = NS(kind="train", applied=2, book=0, t_open=0.4, t_close=0.7, t_applied=0.75,
    ...         tasks=[t(0.42, 0.7), t(0.42, 0.6)])
    >>> {k: round(v) for k, v in round_breakdown([r0, r1]).items()}
    {'dispatch': 20, 'task': 230, 'barrier': 50, 'apply': 50, 'gap': 50, 'rounds': 2}
    """
    train = [r for r in rounds if str(r.kind) == "train" and r.applied > 0]
    if not train:
        return {}
    dispatch, task, barrier, apply, gap = [], [], [], [], []
    for r in train:
        done = [t for t in r.tasks if str(t.state) == "done" and not t.drain and t.t_end]
        if not done:
            continue
        dispatch.append(statistics.mean(t.t_start - r.t_open for t in done))
        task.append(statistics.mean(t.t_end - t.t_start for t in done))
        barrier.append(statistics.mean(max(r.t_close - t.t_end, 0.0) for t in done))
    opens = {}
    for r in rounds:
        opens.setdefault(r.book, []).append(r.t_open)
    for r in train:
        later = [t for t in opens[r.book] if t > r.t_open]
        nxt = min(later) if later else math.inf
        exposed = max(min(r.t_applied, nxt) - r.t_close, 0.0)
        apply.append(exposed)
        if later:
            gap.append(max(nxt - r.t_close - exposed, 0.0))
    mean = lambda xs: 1e3 * statistics.mean(xs) if xs else math.nan  # noqa: E731
    return {"dispatch": mean(dispatch), "task": mean(task), "barrier": mean(barrier),
            "apply": mean(apply), "gap": mean(gap), "rounds": len(train)}
