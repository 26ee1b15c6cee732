"""Worker failure, recovery and ``fail`` on the round engine (pure Python): a failed worker
leaves the rounds, its tasks restart elsewhere, a recovered one returns; the first error
stops the engine and is raised from ``submit`` and ``wait_idle``."""

from __future__ import annotations

import pytest

from tf_hetero.engine import EngineError
from tf_hetero.policies import AllTasks, OnePerIdleWorker

from support.engine import backup, bsp, make, run


# --------------------------------------------------------------------- worker failure
def test_worker_failed_removes_it_from_live_workers_and_next_rounds_plan_without_it():
    e, d, m, _ = bsp(3)
    tasks = [e.submit(i) for i in range(3)]
    for t in tasks:
        run(e, t)
    e.worker_failed(2)
    assert e.live_workers == [0, 1]
    assert m.events[-1][1:] == ("worker_failed", {"worker": 2})
    more = [e.submit(i) for i in range(3, 5)]  # two tasks make a full round now
    e.apply_finished(0, 3)
    assert d.workers_of_round(1) == [0, 1]
    for t in more:
        run(e, t)
    assert d.applies[-1] == (1, {0: 1, 1: 1})


def test_task_restarted_on_another_worker_no_longer_runs_on_the_failed_one():
    e, d, _, _ = make(3, AllTasks(), OnePerIdleWorker())
    t0, t1, t2 = [e.submit(i) for i in range(3)]
    e.task_started(t2, 2)
    e.worker_failed(2)
    run(e, t0)
    run(e, t1)
    assert e.task_started(t2, 1) is True
    e.task_finished(t2, 1)
    assert e.rounds[0].closed and d.applies == [(0, {0: 1, 1: 2})]
    e.apply_finished(0, 3)
    assert e.idle()  # nothing is left "running" on worker 2
    e.worker_recovered(2)
    [e.submit(i) for i in range(3, 6)]
    assert d.workers_of_round(1) == [0, 1, 2]  # worker 2 is idle, not busy


def test_task_never_started_on_the_failed_worker_can_be_restarted_elsewhere():
    e, d, _, _ = bsp(2)
    t0, t1 = [e.submit(i) for i in range(2)]
    e.worker_failed(1)
    run(e, t0)
    run(e, t1, 0)
    assert d.applies == [(0, {0: 2})]
    e.apply_finished(0, 2)
    assert e.idle()


def test_worker_recovered_returns_it_to_the_rounds():
    e, d, m, _ = bsp(2)
    e.worker_failed(1)
    t = e.submit(0)
    assert d.workers_of_round(0) == [0]
    e.worker_recovered(1)
    assert e.live_workers == [0, 1]
    assert m.events[-1][1:] == ("worker_recovered", {"worker": 1})
    run(e, t)
    e.apply_finished(0, 1)
    [e.submit(i) for i in range(1, 3)]
    assert d.workers_of_round(1) == [0, 1]


def test_worker_recovered_opens_a_round_that_waited_for_a_live_worker():
    e, d, _, _ = bsp(1)
    e.worker_failed(0)
    e.submit(0)
    e.flush()
    assert d.calls == []  # no live worker
    e.worker_recovered(0)
    assert d.calls == [("dispatch", 0, 0, 0)]


# ------------------------------------------------------------------------------ fail
def test_fail_cancels_pending_tasks_and_raises_from_submit_and_wait_idle():
    e, d, _, _ = bsp(2)
    running = [e.submit(i) for i in range(2)]
    pending = [e.submit(i) for i in range(2, 5)]
    err = EngineError("boom")
    e.fail(err)
    assert d.cancelled == pending
    assert all(t not in d.cancelled for t in running)
    with pytest.raises(EngineError, match="boom") as info:
        e.submit(9)
    assert info.value is err
    with pytest.raises(EngineError, match="boom"):
        e.wait_idle(timeout=0.01)


def test_fail_keeps_the_first_error():
    e, _, _, _ = bsp(2)
    first = RuntimeError("first")
    e.fail(first)
    e.fail(RuntimeError("second"))
    with pytest.raises(RuntimeError) as info:
        e.submit(0)
    assert info.value is first


def test_a_failure_seen_before_the_error_was_cleared_does_not_fail_the_next_fit():
    """A closure cancelled by fit 1's error reports it after the user got it and the engine was
    cleared: ``since`` (the generation it read when it started) marks it stale; a failure
    of the new fit still stops the engine."""
    e, _, _, _ = bsp(2)
    started = e.generation  # a closure of fit 1 starts
    e.fail(RuntimeError("fit 1"))
    e.clear_error()  # the error reached the user
    e.fail(RuntimeError("fit 1, echoed by a cancelled closure"), since=started)
    e.submit(0)  # fit 2 runs
    e.fail(RuntimeError("fit 2"), since=e.generation)
    with pytest.raises(RuntimeError, match="fit 2"):
        e.submit(1)


def test_a_closure_of_a_failed_fit_that_starts_late_does_not_keep_its_worker_busy():
    """A closure of fit 1 still queued for its worker starts after fit 1's ``fail`` emptied
    the running tasks, and ends with fit 1's error after the user got it (TF cancels it when
    the error is cleared). Its worker must be free for fit 2: a grouped fit's rounds waited
    600 s for it (CI, failures-grouped)."""
    e, d, _, _ = bsp(2)
    t0, t1 = [e.submit(i) for i in range(2)]
    e.task_started(t0, 0)
    e.fail(RuntimeError("fit 1"), since=e.generation)  # t0 fails; t1 is still queued
    started = e.generation
    e.task_started(t1, 1)  # t1's closure starts anyway: queued for worker 1
    e.clear_error()  # the error reached the user
    e.task_failed(t1, 1, RuntimeError("cancelled"), since=started)  # an echo: ignored
    assert not e.busy(1)
    assert e.wait_idle(timeout=0.01)
    fresh = [e.submit(i) for i in range(2, 4)]  # fit 2 uses both workers
    assert {t.pinned for t in fresh} == {0, 1}
    for t in fresh:
        run(e, t)
    e.apply_finished(fresh[0].round, 2)
    assert e.wait_idle(timeout=0.01)


def test_a_failed_task_of_the_running_fit_stops_the_engine():
    e, _, _, _ = bsp(2)
    t0, _ = [e.submit(i) for i in range(2)]
    e.task_started(t0, 0)
    e.task_failed(t0, 0, RuntimeError("fit 1"), since=e.generation)
    assert not e.busy(0)
    with pytest.raises(RuntimeError, match="fit 1"):
        e.submit(2)


def test_fail_stops_dispatching_new_rounds():
    e, d, _, _ = bsp(2)
    tasks = [e.submit(i) for i in range(2)]
    for t in tasks:
        run(e, t)
    e.fail(RuntimeError("x"))
    n = len(d.calls)
    e.apply_finished(0, 2)
    assert len(d.calls) == n


def test_fail_stops_rounds_from_closing_and_dispatching_an_apply():
    e, d, _, _ = backup(2, backups=1)
    t0, t1 = [e.submit(i) for i in range(2)]
    e.task_started(t0, 0)
    e.task_started(t1, 1)
    e.fail(EngineError("stall"))
    e.task_finished(t0, 0)  # a closure that was already running finishes
    assert d.applies == []
    assert e.idle()


# --------------------------------------------------------------------- restart (PS failover)
def test_restart_rounds_abandons_a_round_whose_apply_has_not_run():
    """A round closed, its apply dispatched but not run (``applied`` -1) when a PS dies:
    the failover restores the model, so that apply must be skipped (the apply thread skips
    an abandoned round). Left in, it ran after the restore on the old placement and counted
    an update the line did not (SSP chaos runs)."""
    e, d, _, _ = bsp(2)
    for t in [e.submit(i) for i in range(2)]:
        run(e, t)
    assert d.applies and e.rounds[0].closed and e.rounds[0].applied == -1
    e.restart_rounds()
    assert e.rounds[0].abandoned


def test_restart_rounds_abandons_the_rounds_without_an_error_and_returns_the_unfinished_steps():
    """A PS failover: the round in progress (one task done, one running) and the pending
    tasks are given back to be made again, the done one is not (its step ended); the engine
    takes new tasks and runs a new round with them; a failure of an abandoned task's closure
    is an echo of the old generation and fails nothing."""
    e, d, _, _ = bsp(2)
    t0, t1 = [e.submit(i) for i in range(2)]
    pending = [e.submit(i) for i in range(2, 4)]
    e.task_started(t0, 0)
    e.task_started(t1, 1)
    e.task_finished(t0, 0)
    before = e.generation
    rounds, orphans = e.restart_rounds()
    assert rounds == 1 and e.generation == before + 1
    assert orphans == [t.payload for t in pending] + [t1.payload]
    assert e.error is None and e.rounds[0].abandoned
    e.task_failed(t1, 1, RuntimeError("the dead PS, met by an abandoned closure"), since=before)
    assert e.error is None
    new = [e.submit(i) for i in (10, 11)]  # the steps made again
    for w, t in enumerate(new):
        run(e, t, w)
    assert d.applies and d.applies[-1][0] == new[0].round
