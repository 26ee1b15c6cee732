"""What the engine did: per-worker task times, rounds, staleness, bytes pushed.

The :class:`Monitor` is fed by the round engine through its hooks ``on_task``, ``on_round``
and ``on_event`` (and, for the async ``ASP`` preset, by the coordinator's worker threads
through ``record_task``); policies read it (``durations``, ``ewma_s``), the Keras callback
:class:`tf_hetero.callbacks.MonitorLogs` copies an epoch summary into the epoch's logs (so
``TensorBoard`` placed after it plots them), and the benchmark reads :meth:`Monitor.summary`.
Policies with figures of their own add them with :meth:`Monitor.add_summary`.

>>> m = Monitor(2, bytes_per_push=1000)
>>> m.record_task(worker=0, start=0.0, end=0.1, applied=True, staleness=0)
>>> m.record_task(worker=1, start=0.0, end=0.4, applied=False, staleness=0)
>>> s = m.summary()
>>> s["tasks"], s["applied_tasks"], s["dropped_tasks"], s["bytes_pushed"]
(2, 1, 1, 2000)
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time

import numpy as np

from tf_hetero.policies.estimate import DEFAULT_ALPHA, Smoother
from tf_hetero.policies.noise import GradientNoise
from tf_hetero.telemetry import psload
from tf_hetero.telemetry.records import RoundRecord, TaskRecord

__all__ = ["Monitor", "RoundRecord", "TaskRecord"]


class Monitor:
    """Thread-safe record of tasks, rounds and events. ``ewma_alpha`` weights the newest task
    in :meth:`ewma_s` (the estimator of :mod:`tf_hetero.policies.estimate`)."""

    def __init__(self, num_workers: int, *, ewma_alpha: float = DEFAULT_ALPHA,
                 bytes_per_push: int = 0,
                 clock=time.perf_counter):
        if not 0 < ewma_alpha <= 1:
            raise ValueError(f"ewma_alpha={ewma_alpha!r}: need 0 < alpha <= 1.")
        self.num_workers = num_workers
        self.ewma_alpha = ewma_alpha
        self.bytes_per_push = bytes_per_push
        self.clock = clock
        self._lock = threading.Lock()
        self.tasks: list[TaskRecord] = []
        self.rounds: list[RoundRecord] = []
        self.events: list[tuple] = []
        self._durations: list[list[float]] = [[] for _ in range(num_workers)]  # per worker
        self._unit_times: list[list[float]] = [[] for _ in range(num_workers)]  # s per unit
        self._smoothers: dict = {}  # (units, alpha, worker) -> Smoother (see smoothed)
        self._summaries: list = []
        self.t0 = clock()
        # Local accumulation (H-PS) pushes once per worker per round, not once per task:
        # then bytes are counted per push (times of the pushes).
        self.push_times: list[float] | None = None
        #: Where the variables are (a tf_hetero.policies.placement.Placement; set by the strategy):
        #: its per-PS loads are the bytes one step moves through each PS.
        self.placement = None
        #: The emulated PS tasks (tf_hetero.emulation.ps.EmulatedServers), if the profile
        #: emulates them (ps_mbps); MonitorLogs and the bench read their counters.
        self.ps_servers = None
        #: The gradient noise the rounds' applies measured (policies/noise.py), per sample.
        self.noise = GradientNoise()
        #: Samples per work unit of the rounds' lanes (a granule under sized strategies, a
        #: dataset batch otherwise; set by the strategy once it knows its data).
        self.unit_samples = 1.0

    # ---------------------------------------------------------------- recording
    def record_task(self, worker: int, start: float, end: float, applied: bool,
                    staleness: int, round: int | None = None, size: int = 1) -> None:
        with self._lock:
            self.tasks.append(TaskRecord(worker, start, end, applied, staleness, round, size))
            self._durations[worker].append(end - start)
            self._unit_times[worker].append((end - start) / max(size, 1))

    def on_task(self, task, applied: bool, staleness: int) -> None:
        """Engine hook: a :class:`~tf_hetero.engine.Task` finished (applied or dropped)."""
        self.record_task(task.worker, task.t_start, task.t_end, applied, staleness, task.round,
                         getattr(task, "size", 1))

    def on_lost(self, task) -> None:
        """Engine hook: ``task``, recorded applied, was not (its gradient died in a dead
        worker's pipelined buffer before a push carried it): its record says so now."""
        key = (task.worker, task.t_start, task.t_end, task.round)
        with self._lock:
            for i in range(len(self.tasks) - 1, -1, -1):  # it is among the newest
                r = self.tasks[i]
                if r.applied and (r.worker, r.start, r.end, r.round) == key:
                    self.tasks[i] = dataclasses.replace(r, applied=False)
                    return

    def on_round(self, rnd) -> None:
        """Engine hook: a :class:`~tf_hetero.engine.Round` was applied (or closed empty)."""
        with self._lock:
            sample = rnd.info.get("gradient")
            if sample is not None and str(rnd.kind) == "train":
                self.noise.add(sample, self.unit_samples)
            self.rounds.append(RoundRecord(
                rnd.id, rnd.t_open, rnd.t_close, rnd.t_applied, len(rnd.tasks), dict(rnd.lanes),
                rnd.applied, dict(rnd.info), {k: w for k, (_, w) in rnd.folds.items()},
                str(rnd.kind), rnd.book,
                dict(collections.Counter(w for w in (getattr(t, "worker", None) for t in rnd.tasks)
                                         if w is not None)),
                len(rnd.copies)))

    def record_push(self, t: float | None = None) -> None:
        """One push of ``bytes_per_push`` bytes (local accumulation) finished."""
        with self._lock:
            if self.push_times is None:
                self.push_times = []
            self.push_times.append(self.clock() if t is None else t)

    def add_summary(self, fn) -> None:
        """Adds ``fn(rounds, num_workers) -> dict`` to :meth:`summary` (a policy's figures)."""
        self._summaries.append(fn)

    def attach_ps(self, servers) -> None:
        """The emulated PS tasks whose counters :meth:`ps_totals` reads."""
        self.ps_servers = servers

    def ps_totals(self) -> dict | None:
        """The emulated PS tasks' counters since the start (``None`` if not emulated)."""
        return None if self.ps_servers is None else self.ps_servers.totals()

    def ps_step_bytes(self) -> list | None:
        """Bytes one training step moves through each PS, or ``None``: what the emulated PS
        tasks serve per step (the model's reads and pushes) once a step was traced, else the
        placement's loads (every variable placed, read + push of trainable ones)."""
        servers = self.ps_servers
        if servers is not None and any(servers.read_bytes):
            return [r + w for r, w in zip(servers.read_bytes, servers.push_bytes)]
        if self.placement is not None and any(self.placement.loads):
            return list(self.placement.loads)
        return None

    def ps_load_per_round(self) -> list[tuple[int, list[int]]]:
        """``(round id, bytes per PS)`` of each recorded round (empty without a placement)."""
        step = self.ps_step_bytes()
        return [] if step is None else psload.per_round(self.snapshot()[1], step)

    def on_event(self, name: str, **fields) -> None:
        """Engine hook: something else happened (a transfer, a worker failed or came back)."""
        with self._lock:
            self.events.append((self.clock(), name, fields))

    # ------------------------------------------------------------------ queries
    def ewma_s(self, worker: int) -> float:
        """Smoothed task time of ``worker`` in seconds (NaN before its first task)."""
        return self.smoothed(worker, self.ewma_alpha)

    def smoothed(self, worker: int, alpha: float, units: bool = False) -> float:
        """:func:`~tf_hetero.policies.estimate.smoothed_time` of ``worker``'s task durations
        (``units``: its seconds per work unit), kept up to date as tasks are recorded
        (:class:`~tf_hetero.policies.estimate.Smoother`: O(new tasks) per question)."""
        with self._lock:
            times = (self._unit_times if units else self._durations)[worker]
            smoother = self._smoothers.get((units, alpha, worker))
            if smoother is None:
                smoother = self._smoothers[units, alpha, worker] = Smoother(alpha)
            for x in times[smoother.seen:]:
                smoother.add(x)
            return smoother.value

    def durations(self, worker: int) -> list[float]:
        """Durations of ``worker``'s finished tasks, oldest first."""
        with self._lock:
            return list(self._durations[worker])

    def unit_times(self, worker: int, last: int | None = None) -> list[float]:
        """Seconds per work unit (task duration / task size) of ``worker``'s finished tasks,
        oldest first: what sized strategies estimate speed from (the ``last`` ones only if
        given: a controller asking after every event need not copy the whole history)."""
        with self._lock:
            times = self._unit_times[worker]
            return list(times if last is None else times[-last:])

    def snapshot(self) -> tuple[list[TaskRecord], list[RoundRecord]]:
        with self._lock:
            return list(self.tasks), list(self.rounds)

    def summary(self, since: float | None = None) -> dict:
        """Aggregate figures, over everything or over records that ended after ``since``."""
        tasks, rounds = self.snapshot()
        pushes = None if self.push_times is None else list(self.push_times)
        if since is not None:
            pushes = None if pushes is None else [t for t in pushes if t >= since]
            tasks = [t for t in tasks if t.end >= since]
            rounds = [r for r in rounds if r.t_applied >= since]
        per_worker = [[t.duration for t in tasks if t.worker == w] for w in range(self.num_workers)]
        stale = [t.staleness for t in tasks if t.applied]
        # Rounds of training tasks (not the push-only or fold-only rounds that end an epoch).
        round_s = [r.t_applied - r.t_open for r in rounds if r.applied > 0 and r.training]
        out = {
            "tasks": len(tasks),
            "applied_tasks": sum(t.applied for t in tasks),
            "dropped_tasks": sum(not t.applied for t in tasks),
            "rounds": len(rounds),
            "mean_round_ms": 1e3 * float(np.mean(round_s)) if round_s else float("nan"),
            "mean_staleness": float(np.mean(stale)) if stale else 0.0,
            "max_staleness": int(max(stale)) if stale else 0,
        }
        # Every task pushes once, except with local accumulation (counted per push).
        out["pushes"] = len(tasks) if pushes is None else len(pushes)
        out["bytes_pushed"] = out["pushes"] * self.bytes_per_push
        out["folded_lanes"] = sum(len(r.folds) for r in rounds)
        for w, d in enumerate(per_worker):
            out[f"worker{w}_tasks"] = len(d)
            out[f"worker{w}_median_ms"] = 1e3 * float(np.median(d)) if d else float("nan")
        step = self.ps_step_bytes()
        if step is not None:  # every task moved its step's bytes through the PS tasks
            servers = self.ps_servers
            out.update(psload.step_figures(
                step, len(tasks), servers.us_per_byte if servers is not None else None))
        out.update(self.noise.summary())
        for fn in self._summaries:
            out.update(fn(rounds, self.num_workers))
        return out
