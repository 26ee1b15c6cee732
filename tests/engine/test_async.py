"""Asynchronous modes of the round engine (pure Python): SSP's staleness bound and ASP's
unbounded updates, with the monitor's staleness records."""

from __future__ import annotations

from tf_hetero.policies import Async

from support.engine import make, run, ssp


# ------------------------------------------------------------------------------ SSP
def test_ssp_dispatches_pinned_to_idle_workers_with_no_round():
    e, d, _, _ = ssp(3, staleness=1)
    tasks = [e.submit(i) for i in range(5)]
    assert d.calls == [("dispatch", 0, 0, None), ("dispatch", 1, 1, None),
                       ("dispatch", 2, 2, None)]
    assert [t.pinned for t in tasks[:3]] == [0, 1, 2]
    assert [t.round for t in tasks] == [None] * 5
    assert [t.state for t in tasks[3:]] == ["pending", "pending"]
    assert e.rounds == []


def test_ssp_worker_more_than_s_ahead_of_the_slowest_waits_for_it():
    e, d, _, _ = ssp(2, staleness=1)
    tasks = [e.submit(i) for i in range(10)]
    slow = tasks[1]
    assert slow.pinned == 1
    e.task_started(slow, 1)
    fast = tasks[0]
    for expected_clock in (1, 2):
        run(e, fast, 0)
        assert e.clocks[0] == expected_clock
        fast = d.dispatched[-1][0]
        assert d.dispatched[-1][1] == 0  # still within the bound: next task to worker 0
    run(e, fast, 0)  # worker 0 at clock 3, worker 1 at 0: 3 > 0 + 1
    n = len(d.dispatched)
    assert e.clocks == {0: 3, 1: 0}
    assert not e.idle() and len(d.dispatched) == n  # worker 0 idle but gated
    e.task_finished(slow, 1)  # the slow worker catches up by one
    assert e.clocks == {0: 3, 1: 1}
    assert [w for _, w, _ in d.dispatched[n:]] == [1]  # 3 - 1 = 2 > 1: worker 0 still waits
    run(e, d.dispatched[-1][0], 1)
    assert sorted(w for _, w, _ in d.dispatched[n + 1:]) == [0, 1]


def test_ssp_staleness_zero_keeps_workers_in_lockstep():
    e, d, _, _ = ssp(2, staleness=0)
    a, b = [e.submit(i) for i in range(2)]
    c = e.submit(2)
    run(e, a, 0)
    assert c.state == "pending"  # worker 0 is 1 ahead of worker 1
    run(e, b, 1)
    assert c.state == "dispatched"


def test_async_version_increments_per_finished_task_and_monitor_records_staleness():
    e, _, m, _ = ssp(2, staleness=5)
    a, b = [e.submit(i) for i in range(2)]
    e.task_started(a, 0)
    e.task_started(b, 1)
    e.task_finished(a, 0)
    assert e.version == 1
    e.task_finished(b, 1)  # started at version 0, applied after one other update
    assert e.version == 2
    assert [(t.worker, t.staleness, t.applied, t.round) for t in m.tasks] == [
        (0, 0, True, None), (1, 1, True, None)]
    s = m.summary()
    assert s["mean_staleness"] == 0.5 and s["max_staleness"] == 1
    assert [t.state for t in (a, b)] == ["done", "done"]


def test_async_without_a_gate_is_unbounded():
    e, d, _, _ = make(2, Async(), None)
    assert e.gate is None and not e.rounds_mode
    tasks = [e.submit(i) for i in range(20)]
    e.task_started(tasks[1], 1)
    t = tasks[0]
    for _ in range(10):
        run(e, t, 0)
        t = d.dispatched[-1][0]
    assert e.clocks[0] == 10 and d.dispatched[-1][1] == 0


def test_async_gate_ignores_failed_workers():
    e, d, _, _ = ssp(3, staleness=0)
    tasks = [e.submit(i) for i in range(6)]
    e.task_started(tasks[2], 2)
    run(e, tasks[0], 0)
    run(e, tasks[1], 1)
    assert [t.state for t in tasks[3:]] == ["pending"] * 3  # all wait for worker 2
    e.worker_failed(2)
    assert len(d.dispatched) == 5  # the dead worker no longer holds the others back
    assert e.task_started(tasks[2], 0) is True  # its task is restarted on worker 0
    e.task_finished(tasks[2], 0)
    assert 2 not in [w for _, w, _ in d.dispatched[3:]]
    assert e.clocks == {0: 2, 1: 1, 2: 0}
    assert sorted(w for _, w, _ in d.dispatched[3:5]) == [0, 1]


def test_a_depth_of_two_keeps_each_workers_next_step_handed_before_its_last_one_ends():
    """With the sync policy's async_depth 2 (AutoStrategy's) every worker holds its next step
    while it runs one, as stock PSS's queue does; depth 1 (default) hands it over only after."""

    class Deep(Async):
        async_depth = 2

    for policy, held in ((Async(), 1), (Deep(), 2)):
        e, d, _, _ = make(2, policy, None)
        tasks = [e.submit(i) for i in range(10)]
        assert [len(e.running(w)) for w in (0, 1)] == [held, held]
        assert sorted(w for _, w, _ in d.dispatched) == sorted([0, 1] * held)
        run(e, tasks[0], 0)
        assert len(e.running(0)) == held  # one ended, the next was handed at once
        assert e.version == 1 and [t.round for t in tasks] == [None] * 10
