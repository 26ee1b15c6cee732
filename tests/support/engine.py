"""Helpers of the round-engine tests: an engine on a fake dispatcher and clock, with the
baseline policies (BSP, backup workers, SSP) or H-PS's (speed-proportional shares, local
accumulation), and ways to run one task or a whole round."""

from __future__ import annotations

from tf_hetero.engine import LocalAccumulation, RoundEngine
from tf_hetero.policies import (AllTasks, Async, FirstK, OnePerIdleWorker, OnePerWorker,
                                SpeedProportional, StalenessBound)
from tf_hetero.telemetry import Monitor

from support.fakes import FakeClock, FakeDispatcher


def make(num_workers, sync=None, assign=None, gate=None, *, clock=None, monitor=True):
    clock = clock or FakeClock()
    d = FakeDispatcher()
    m = Monitor(num_workers, clock=clock) if monitor else None
    e = RoundEngine(num_workers, sync, assign, d, gate=gate, monitor=m, clock=clock)
    return e, d, m, clock


def run(e, task, worker=None):
    """Starts and finishes ``task`` on ``worker`` (default: the worker it is pinned to)."""
    worker = task.pinned if worker is None else worker
    started = e.task_started(task, worker)
    e.task_finished(task, worker)
    return started


def bsp(num_workers, **kw):
    return make(num_workers, AllTasks(), OnePerWorker(), **kw)


def backup(num_workers, backups=1, **kw):
    return make(num_workers, FirstK(backups), OnePerIdleWorker(), **kw)


def ssp(num_workers, staleness, **kw):
    return make(num_workers, Async(), OnePerWorker(), StalenessBound(staleness), **kw)


def make_hps(num_workers, round_tasks, local="strict", times=None, **kw):
    clock = FakeClock()
    d = FakeDispatcher()
    m = Monitor(num_workers, clock=clock)
    for w, t in (times or {}).items():  # two measured tasks: the first one is left out
        m.record_task(w, 0.0, 1.0, True, 0)
        m.record_task(w, 0.0, t, True, 0)
    e = RoundEngine(num_workers, AllTasks(), SpeedProportional(round_tasks, **kw), d,
                    monitor=m, clock=clock, components=[LocalAccumulation(local)])
    e.held = e.components[0].held  # the component's count of buffered micro-batches
    return e, d, m, clock


def finish_round(e, d, round_id, order=None):
    tasks = d.tasks_of_round(round_id)
    for t in (order or tasks):
        run(e, t)
    return tasks
