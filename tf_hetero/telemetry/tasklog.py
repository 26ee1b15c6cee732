"""Per-worker task timing, measured on the coordinator.

Each task ``model.fit`` schedules is a closure that one worker thread of the
``ClusterCoordinator`` runs synchronously: it sends the function to its worker, waits for it to
finish and fetches the result (the worker executor is synchronous). :class:`TaskLog` wraps each
worker thread's ``_process_closure`` to record which worker ran a task, and when it started and
ended. That works for the stock ``ParameterServerStrategy`` as well as for tf-hetero's own.

>>> log = TaskLog()
>>> log.record(worker=0, start=0.0, end=0.1); log.record(worker=1, start=0.0, end=0.4)
>>> [s.count for s in log.stats(2)]
[1, 1]
>>> round(log.stats(2)[1].mean_s / log.stats(2)[0].mean_s, 6)
4.0
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import Sequence

import numpy as np

from tf_hetero.telemetry.records import TaskRecord

__all__ = ["TaskLog", "TaskRecord", "WorkerStats", "measured_ratios"]


@dataclasses.dataclass(frozen=True)
class WorkerStats:
    worker: int
    count: int
    mean_s: float
    median_s: float
    p90_s: float
    busy_s: float


class TaskLog:
    """Thread-safe record of finished tasks. Attach it to a coordinator to fill it."""

    _MARK = "_tf_hetero_task_logs"

    def __init__(self):
        self._lock = threading.Lock()
        self._records: list[TaskRecord] = []
        self.t0 = time.perf_counter()
        self._recorders: list[list] = []  # the worker threads' recorder lists it is in
        self._record_fn = None

    @classmethod
    def from_records(cls, records) -> "TaskLog":
        """A log holding ``records`` (e.g. a monitor's :class:`TaskRecord` list)."""
        log = cls()
        log._records = list(records)
        return log

    def record(self, worker: int, start: float, end: float) -> None:
        with self._lock:
            self._records.append(TaskRecord(worker, start, end))

    @property
    def records(self) -> list[TaskRecord]:
        with self._lock:
            return list(self._records)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def attach(self, coordinator) -> "TaskLog":
        """Records every closure each worker thread of ``coordinator`` processes from now on.

        Several logs may be attached to one coordinator; each worker is wrapped once. A
        closure the coordinator calls internal (``coordinator.is_internal(closure)``, e.g.
        a tf-hetero drain) is not a task and is not recorded.
        """
        from tf_hetero import tfcompat  # TF glue, only ever called with a TF coordinator

        self.detach()
        internal = getattr(coordinator, "is_internal", lambda closure: False)

        def record(worker, start, end, closure):
            if not internal(closure):
                self.record(worker, start, end)

        self._recorders = tfcompat.coordinator.time_closures(coordinator, self._MARK, record)
        self._record_fn = record
        return self

    def detach(self) -> None:
        for recorders in self._recorders:
            if self._record_fn in recorders:
                recorders.remove(self._record_fn)
        self._recorders, self._record_fn = [], None

    @classmethod
    def for_strategy(cls, strategy) -> "TaskLog":
        """A log attached to the (cached) coordinator of a PS ``strategy``."""
        import tensorflow as tf

        return cls().attach(tf.distribute.coordinator.ClusterCoordinator(strategy))

    def counts(self, num_workers: int) -> list[int]:
        out = [0] * num_workers
        for r in self.records:
            out[r.worker] += 1
        return out

    def stats(self, num_workers: int, skip_first: int = 0) -> list[WorkerStats]:
        """Per-worker statistics; ``skip_first`` drops each worker's first tasks (tracing)."""
        per: list[list[float]] = [[] for _ in range(num_workers)]
        for r in self.records:
            per[r.worker].append(r.duration)
        out = []
        for w, d in enumerate(per):
            busy = float(np.sum(d))
            d = np.asarray(d[skip_first:], dtype=np.float64)
            if d.size:
                out.append(WorkerStats(w, len(per[w]), float(d.mean()), float(np.median(d)),
                                       float(np.percentile(d, 90)), busy))
            else:
                out.append(WorkerStats(w, len(per[w]), float("nan"), float("nan"),
                                       float("nan"), busy))
        return out

    def span(self) -> float:
        """Seconds from the first task's start to the last task's end."""
        recs = self.records
        if not recs:
            return 0.0
        return max(r.end for r in recs) - min(r.start for r in recs)


def measured_ratios(stats: Sequence[WorkerStats]) -> list[float]:
    """Each worker's median task time over the fastest worker's median (NaN: no timed task)."""
    medians = [s.median_s for s in stats if not math.isnan(s.median_s)]
    if not medians:
        raise ValueError("measured_ratios: no worker has a timed task; run more tasks, or "
                         "lower skip_first.")
    fastest = min(medians)
    return [s.median_s / fastest for s in stats]
