"""Specification of the round engine, its policies and the monitor (pure Python, one thread).

A fake dispatcher records what the engine asks of the TF side; the tests play the TF side by
calling ``task_started`` / ``task_finished`` / ``apply_finished`` / ``worker_failed`` in a
chosen order, with a fake clock wherever times matter. No TensorFlow cluster is started.
"""

from __future__ import annotations

import math
import random
import threading

import pytest

from tf_hetero.engine import EngineError, Plan, Round, RoundContext, RoundEngine, Task
from tf_hetero.policies import (AllTasks, Async, FirstK, OnePerIdleWorker, OnePerWorker,
                                StalenessBound, Unbounded)
from tf_hetero.telemetry import Monitor

from fakes import FakeClock, FakeDispatcher, play


# --------------------------------------------------------------------------- helpers
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


# ------------------------------------------------------------------------------ BSP
def test_bsp_round_opens_only_when_it_has_one_task_per_live_worker():
    e, d, _, _ = bsp(3)
    e.submit("a")
    e.submit("b")
    assert d.calls == [] and e.rounds == []
    e.submit("c")
    assert d.calls == [("dispatch", 0, 0, 0), ("dispatch", 1, 1, 0), ("dispatch", 2, 2, 0)]
    assert len(e.rounds) == 1 and len(e.rounds[0].tasks) == 3


def test_bsp_tasks_are_pinned_one_per_worker_and_marked_dispatched():
    e, d, _, _ = bsp(4)
    tasks = [e.submit(i) for i in range(4)]
    assert [t.pinned for t in tasks] == [0, 1, 2, 3]
    assert [t.round for t in tasks] == [0, 0, 0, 0]
    assert {t.state for t in tasks} == {"dispatched"}
    assert d.workers_of_round(0) == [0, 1, 2, 3]


def test_bsp_round_closes_only_when_all_its_tasks_are_done():
    e, d, _, _ = bsp(3)
    tasks = [e.submit(i) for i in range(3)]
    run(e, tasks[0])
    run(e, tasks[2])
    assert not e.rounds[0].closed and d.applies == []
    run(e, tasks[1])
    assert e.rounds[0].closed
    assert d.applies == [(0, {0: 1, 1: 1, 2: 1})]
    assert [t.state for t in tasks] == ["done"] * 3


def test_bsp_applies_once_per_round_with_one_micro_batch_per_worker_lane():
    e, d, _, _ = bsp(2)
    for r in range(3):
        tasks = [e.submit((r, i)) for i in range(2)]
        for t in tasks:
            run(e, t)
        e.apply_finished(r, 2)
    assert d.applies == [(0, {0: 1, 1: 1}), (1, {0: 1, 1: 1}), (2, {0: 1, 1: 1})]
    assert [r.lanes for r in e.rounds] == [{0: 1, 1: 1}] * 3


def test_bsp_next_round_opens_only_after_apply_finished():
    e, d, _, _ = bsp(2)
    first = [e.submit(i) for i in range(2)]
    second = [e.submit(i) for i in range(2, 4)]
    assert [t.state for t in second] == ["pending", "pending"]
    for t in first:
        run(e, t)
    assert d.applies == [(0, {0: 1, 1: 1})]
    assert [t.state for t in second] == ["pending", "pending"]  # round 0 is still applying
    assert len(e.rounds) == 1
    e.apply_finished(0, 2)
    assert [t.state for t in second] == ["dispatched", "dispatched"]
    assert d.calls[-2:] == [("dispatch", 2, 0, 1), ("dispatch", 3, 1, 1)]


def test_bsp_apply_finished_records_applied_micro_batches_and_time():
    clock = FakeClock(10.0)
    e, _, m, _ = bsp(2, clock=clock)
    tasks = [e.submit(i) for i in range(2)]
    clock.advance(1.0)
    for t in tasks:
        run(e, t)
    assert e.rounds[0].applied == -1  # not yet
    clock.advance(0.5)
    e.apply_finished(0, 2)
    rnd = e.rounds[0]
    assert (rnd.applied, rnd.t_open, rnd.t_close, rnd.t_applied) == (2, 10.0, 11.0, 11.5)
    assert len(m.rounds) == 1 and m.rounds[0].applied == 2 and m.rounds[0].lanes == {0: 1, 1: 1}


def test_version_counts_applies_in_rounds_mode():
    e, _, _, _ = bsp(2)
    assert e.version == 0
    for r in range(3):
        tasks = [e.submit(i) for i in range(2)]
        for t in tasks:
            run(e, t)
        assert e.version == r  # finishing tasks does not move the version in rounds mode
        e.apply_finished(r, 2)
        assert e.version == r + 1


def test_bsp_flush_opens_a_partial_round_with_fewer_tasks():
    e, d, _, _ = bsp(4)
    tasks = [e.submit(i) for i in range(2)]
    assert d.calls == []
    e.flush()
    assert d.calls == [("dispatch", 0, 0, 0), ("dispatch", 1, 1, 0)]
    assert len(e.rounds[0].tasks) == 2
    run(e, tasks[0])
    assert d.applies == []
    run(e, tasks[1])
    assert d.applies == [(0, {0: 1, 1: 1})]


def test_submit_after_flush_waits_for_a_full_round_again():
    e, d, _, _ = bsp(2)
    t = e.submit(0)
    e.flush()
    run(e, t)
    e.submit(1)  # flush is over once fit schedules again
    e.apply_finished(0, 1)
    assert len(e.rounds) == 1
    e.submit(2)
    assert len(e.rounds) == 2 and len(e.rounds[1].tasks) == 2


def test_idle_is_true_only_when_nothing_is_pending_running_or_applying():
    e, _, _, _ = bsp(2)
    assert e.idle()
    tasks = [e.submit(i) for i in range(2)]
    assert not e.idle()
    for t in tasks:
        run(e, t)
    assert not e.idle()  # applying
    e.apply_finished(0, 2)
    assert e.idle()


def test_wait_idle_returns_true_when_every_task_is_done_and_applied():
    e = RoundEngine(2, AllTasks(), OnePerWorker(), FakeDispatcher())  # real clock
    tasks = [e.submit(i) for i in range(2)]
    for t in tasks:
        run(e, t)
    e.apply_finished(0, 2)
    assert e.wait_idle(timeout=0.01) is True


def test_wait_idle_returns_false_on_timeout_while_a_task_is_running():
    d = FakeDispatcher()
    e = RoundEngine(2, AllTasks(), OnePerWorker(), d)  # real clock: the timeout must elapse
    tasks = [e.submit(i) for i in range(2)]
    run(e, tasks[0])
    assert e.wait_idle(timeout=0.02) is False


def test_wait_idle_flushes_a_partial_round():
    d = FakeDispatcher()
    e = RoundEngine(3, AllTasks(), OnePerWorker(), d)
    t = e.submit(0)
    assert d.calls == []
    assert e.wait_idle(timeout=0.01) is False
    assert d.calls == [("dispatch", 0, 0, 0)]
    run(e, t)
    e.apply_finished(0, 1)
    assert e.wait_idle(timeout=0.01) is True


def test_wait_idle_times_out_in_real_time_even_with_a_frozen_engine_clock():
    e, _, _, _ = bsp(2)  # FakeClock: never advances by itself
    e.submit(0)
    result = []

    def wait():
        try:
            result.append(e.wait_idle(timeout=0.01))
        except RuntimeError as exc:
            result.append(exc)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    thread.join(timeout=2.0)
    hung = thread.is_alive()
    e.fail(RuntimeError("release the waiter"))  # a hung waiter raises this and ends
    thread.join(timeout=5.0)
    assert not thread.is_alive()
    assert not hung and result == [False]


# ------------------------------------------------------------------- backup workers
def test_backup_round_closes_after_n_minus_b_tasks_are_done():
    e, d, _, _ = backup(4, backups=1)
    tasks = [e.submit(i) for i in range(4)]
    run(e, tasks[2])
    run(e, tasks[0])
    assert d.applies == []
    run(e, tasks[3])
    assert e.rounds[0].closed
    assert d.applies == [(0, {0: 1, 2: 1, 3: 1})]


def test_backup_late_task_is_dropped_when_it_finishes_and_not_in_the_lanes():
    e, d, m, _ = backup(4, backups=1)
    tasks = [e.submit(i) for i in range(4)]
    e.task_started(tasks[1], 1)  # the slow worker
    for i in (0, 2, 3):
        run(e, tasks[i])
    assert tasks[1].state == "running"
    e.task_finished(tasks[1], 1)
    assert tasks[1].state == "dropped"
    assert e.rounds[0].lanes == {0: 1, 2: 1, 3: 1}
    assert d.applies == [(0, {0: 1, 2: 1, 3: 1})]  # no second apply
    assert [r.applied for r in m.tasks] == [True, True, True, False]


def test_backup_worker_busy_with_late_task_gets_no_task_in_next_round():
    e, d, _, _ = backup(4, backups=1)
    tasks = [e.submit(i) for i in range(4)]
    e.task_started(tasks[3], 3)
    for i in range(3):
        run(e, tasks[i])
    more = [e.submit(i) for i in range(4, 8)]
    e.apply_finished(0, 3)
    assert d.workers_of_round(1) == [0, 1, 2]  # plan = idle workers
    assert [t.state for t in more] == ["dispatched"] * 3 + ["pending"]
    assert all(t.pinned != 3 for t in e.rounds[1].tasks)


def test_backup_round_with_fewer_tasks_than_n_minus_b_waits_for_all_of_them():
    e, d, _, _ = backup(4, backups=1)
    tasks = [e.submit(i) for i in range(4)]
    e.task_started(tasks[3], 3)
    for i in range(3):
        run(e, tasks[i])
    more = [e.submit(i) for i in range(4, 7)]
    e.apply_finished(0, 3)
    run(e, more[0])
    run(e, more[1])
    assert not e.rounds[1].closed  # 3 tasks, N - b = 3: all needed
    run(e, more[2])
    assert d.applies[-1] == (1, {0: 1, 1: 1, 2: 1})


def test_backup_late_task_finishing_frees_its_worker_for_the_following_round():
    e, d, _, _ = backup(4, backups=1)
    tasks = [e.submit(i) for i in range(4)]
    e.task_started(tasks[3], 3)
    for i in range(3):
        run(e, tasks[i])
    [e.submit(i) for i in range(4, 12)]
    e.apply_finished(0, 3)
    e.task_finished(tasks[3], 3)  # late, during round 1
    for t in e.rounds[1].tasks:
        run(e, t)
    e.apply_finished(1, 3)
    assert d.workers_of_round(2) == [0, 1, 2, 3]


def test_backup_lane_still_written_at_close_is_excluded_even_with_a_done_task_on_it():
    # N = 3, b = 1: two tasks close a round. Worker 2 dies while running its task, which is
    # restarted on worker 0 after worker 0 already finished its own task of the round.
    e, d, _, _ = backup(3, backups=1)
    t0, t1, t2 = [e.submit(i) for i in range(3)]
    run(e, t0)  # done on worker 0
    e.task_started(t2, 2)
    e.worker_failed(2)
    assert e.task_started(t2, 0) is True  # restarted on worker 0, still writing lane 0
    run(e, t1)  # done on worker 1: 2 of 3 in, the round closes
    assert e.rounds[0].closed
    assert e.rounds[0].lanes == {1: 1}
    assert d.applies == [(0, {1: 1})]
    e.task_finished(t2, 0)
    assert t2.state == "dropped"


class _DoubleBookWorker0:
    """Assignment that gives worker 0 two tasks per round (to test lanes with >1 task)."""

    def plan(self, ctx):
        return Plan([0, 0, 1])


def test_round_lane_counts_every_done_task_of_a_worker():
    e, d, _, _ = make(2, AllTasks(), _DoubleBookWorker0())
    tasks = [e.submit(i) for i in range(3)]
    assert [t.pinned for t in tasks] == [0, 0, 1]
    for t in tasks:
        run(e, t)
    assert d.applies == [(0, {0: 2, 1: 1})]


def test_round_with_a_running_late_lane_is_excluded_even_if_that_worker_has_done_tasks():
    e, d, _, _ = make(3, FirstK(1), _DoubleBookWorker0())  # 3 live, needs 2 of 3
    a, b, c = [e.submit(i) for i in range(3)]
    run(e, a)  # done on worker 0
    e.task_started(b, 0)  # worker 0 writes lane 0 again
    run(e, c)  # done on worker 1: closes
    assert e.rounds[0].lanes == {1: 1}
    assert d.applies == [(0, {1: 1})]


def test_backup_task_starting_after_its_round_closed_is_stale():
    e, d, _, _ = backup(4, backups=1)
    tasks = [e.submit(i) for i in range(4)]
    for i in range(3):
        assert run(e, tasks[i]) is True
    assert e.rounds[0].closed and tasks[3].state == "dispatched"
    assert e.rounds[0].lanes == {0: 1, 1: 1, 2: 1}  # a never-started task leaves no late lane
    assert e.task_started(tasks[3], 3) is False
    e.task_finished(tasks[3], 3)
    assert tasks[3].state == "dropped"


def test_first_k_zero_backups_behaves_like_bsp():
    e, d, _, _ = backup(3, backups=0)
    tasks = [e.submit(i) for i in range(3)]
    run(e, tasks[0])
    run(e, tasks[1])
    assert d.applies == []
    run(e, tasks[2])
    assert d.applies == [(0, {0: 1, 1: 1, 2: 1})]


# ------------------------------------------------------------------ count invariant
def _simulate(seed: int, num_workers: int = 4, backups: int = 1, total: int = 60):
    """Plays a cluster of sequential workers in a seeded random order; returns the engine."""
    rng = random.Random(seed)
    e, d, m, clock = backup(num_workers, backups=backups)
    queues = {w: [] for w in range(num_workers)}  # dispatched, not started (per worker FIFO)
    running: dict[int, Task] = {}
    seen_dispatch = 0
    applied_ids: set[int] = set()
    submitted = []
    for _ in range(100_000):
        for task, w, _r in d.dispatched[seen_dispatch:]:
            queues[w].append(task)
        seen_dispatch = len(d.dispatched)
        actions = []
        if len(submitted) < total:
            actions.append("submit")
        elif not e.idle():
            actions.append("flush")
        actions += [("start", w) for w in queues if queues[w] and w not in running]
        actions += [("finish", w) for w in running]
        actions += [("apply", r) for r, _ in d.applies if r not in applied_ids]
        if not actions or (len(submitted) == total and e.idle()):
            break
        action = rng.choice(actions)
        clock.advance(rng.random())
        if action == "submit":
            submitted.append(e.submit(len(submitted)))
        elif action == "flush":
            e.flush()
        elif action[0] == "start":
            w = action[1]
            task = queues[w].pop(0)
            fresh = e.task_started(task, w)
            assert fresh == (not e.rounds[task.round].closed)
            if fresh:  # two accumulator slots: round r - 2 must have been applied
                assert task.round < 2 or e.rounds[task.round - 2].applied >= 0
            running[w] = task
        elif action[0] == "finish":
            w = action[1]
            e.task_finished(running.pop(w), w)
        else:
            r = action[1]
            applied_ids.add(r)
            e.apply_finished(r, sum(e.rounds[r].lanes.values()))
    else:
        pytest.fail("simulation did not end")
    return e, d, m, submitted


@pytest.mark.parametrize("seed", range(8))
def test_every_task_ends_done_or_dropped_and_lanes_count_the_done_tasks(seed):
    e, d, m, submitted = _simulate(seed)
    assert e.idle() and e.wait_idle(timeout=0.0)
    assert len(submitted) == 60
    assert {t.state for t in submitted} <= {"done", "dropped"}
    done = [t for t in submitted if t.state == "done"]
    assert sum(sum(r.lanes.values()) for r in e.rounds) == len(done)
    ids = [t.id for r in e.rounds for t in r.tasks]
    assert len(ids) == len(set(ids)) == len(submitted)  # no task in two rounds, none lost
    assert all(t.round is not None and t in e.rounds[t.round].tasks for t in submitted)
    assert all(r.closed and r.applied >= 0 for r in e.rounds)
    assert [r for r, _ in d.applies] == [r.id for r in e.rounds if r.lanes]
    assert e.version == len(d.applies)
    s = m.summary()
    assert s["tasks"] == 60 and s["applied_tasks"] == len(done)
    assert s["dropped_tasks"] == 60 - len(done)
    assert s["rounds"] == len(e.rounds)


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


# -------------------------------------------------------- lanes vs. task state (bugs)
def test_done_task_in_an_excluded_lane_is_not_counted_as_applied():
    e, d, m, _ = backup(3, backups=1)
    t0, t1, t2 = [e.submit(i) for i in range(3)]
    run(e, t0)
    e.task_started(t2, 2)
    e.worker_failed(2)
    e.task_started(t2, 0)
    run(e, t1)
    e.task_finished(t2, 0)
    e.apply_finished(0, 1)
    tasks = (t0, t1, t2)
    assert e.rounds[0].lanes == {1: 1}
    assert sum(t.state == "done" for t in tasks) == sum(e.rounds[0].lanes.values())
    assert m.summary()["applied_tasks"] == sum(e.rounds[0].lanes.values())


def test_round_closed_with_no_lanes_is_counted_by_summary_since():
    clock = FakeClock(50.0)
    e, d, m, _ = make(2, FirstK(1), _DoubleBookWorker0(), clock=clock)
    a, b, c = [e.submit(i) for i in range(3)]  # 2 live, needs 1
    e.task_started(b, 0)  # lane 0 still written...
    e.task_started(a, 0)
    clock.advance(1.0)
    e.task_finished(a, 0)  # ...when a closes the round
    assert e.rounds[0].closed and e.rounds[0].lanes == {} and d.applies == []
    assert e.rounds[0].applied == 0
    assert m.summary()["rounds"] == 1
    assert m.summary(since=50.0)["rounds"] == 1


# -------------------------------------------------------------------------- policies
@pytest.mark.parametrize("bad", [-1, 1.5, "1", None])
def test_first_k_rejects_backups_that_are_not_integers_from_zero(bad):
    with pytest.raises(ValueError, match=r"^backups=.*: need an integer >= 0\.$"):
        FirstK(bad)


@pytest.mark.parametrize("bad", [-1, 2.0, "3", None])
def test_staleness_bound_rejects_staleness_that_is_not_an_integer_from_zero(bad):
    with pytest.raises(ValueError, match=r"^staleness=.*: need an integer >= 0\.$"):
        StalenessBound(bad)


def _round(num_tasks, num_done, live_workers=0):
    r = Round(0, [Task(i, None, round=0) for i in range(num_tasks)], live_workers=live_workers)
    for t in r.tasks[:num_done]:
        t.state = "done"
    return r


def test_all_tasks_closes_only_when_every_task_is_done():
    assert not AllTasks().should_close(_round(3, 2), 0.0)
    assert AllTasks().should_close(_round(3, 3), 0.0)


def test_first_k_closes_after_live_workers_minus_backups_tasks():
    assert not FirstK(1).should_close(_round(4, 2, live_workers=4), 0.0)
    assert FirstK(1).should_close(_round(4, 3, live_workers=4), 0.0)
    assert FirstK(2).should_close(_round(4, 2, live_workers=4), 0.0)


def test_first_k_round_smaller_than_needed_waits_for_all_its_tasks():
    # 4 live workers, 1 backup: 3 needed, but the round has only 2 tasks.
    assert not FirstK(1).should_close(_round(2, 1, live_workers=4), 0.0)
    assert FirstK(1).should_close(_round(2, 2, live_workers=4), 0.0)
    # No more tasks than backups, and N - b covers them: all are needed.
    assert not FirstK(2).should_close(_round(2, 1, live_workers=4), 0.0)


def test_first_k_needs_at_least_one_task_when_backups_cover_all_live_workers():
    assert not FirstK(3).should_close(_round(2, 0, live_workers=2), 0.0)
    assert FirstK(3).should_close(_round(2, 1, live_workers=2), 0.0)


def test_first_k_without_live_worker_count_uses_the_round_size():
    assert not FirstK(1).should_close(_round(4, 2), 0.0)
    assert FirstK(1).should_close(_round(4, 3), 0.0)


def test_assignment_policies_plan_one_task_per_worker():
    assert OnePerWorker().plan(RoundContext(0, (3, 0), (2,))).entries == [0, 2, 3]
    assert OnePerIdleWorker().plan(RoundContext(0, (3, 0), (2,))).entries == [0, 3]


def test_staleness_bound_allows_exactly_s_ahead_of_the_slowest():
    gate = StalenessBound(2)
    assert gate.may_start(0, {0: 5, 1: 3, 2: 4})
    assert not gate.may_start(0, {0: 6, 1: 3, 2: 4})
    assert StalenessBound(0).may_start(1, {0: 3, 1: 3})
    assert not StalenessBound(0).may_start(1, {0: 3, 1: 4})
    assert Unbounded().may_start(0, {0: 1000, 1: 0})


def test_policy_modes():
    assert Async.mode == "async"
    assert AllTasks.mode == FirstK.mode == "rounds"


@pytest.mark.parametrize("policy, text", [
    (Async(), "Async()"), (AllTasks(), "AllTasks()"), (FirstK(2), "FirstK(backups=2)"),
    (OnePerWorker(), "OnePerWorker()"), (OnePerIdleWorker(), "OnePerIdleWorker()"),
    (Unbounded(), "Unbounded()"), (StalenessBound(3), "StalenessBound(3)"),
])
def test_policy_repr(policy, text):
    assert repr(policy) == text


class _FakeResolver:
    def __init__(self, num_workers):
        self.num_workers = num_workers

    def cluster_spec(self):
        spec = {"worker": [f"w{i}" for i in range(self.num_workers)], "ps": ["p0"]}

        class Spec:
            def as_dict(self):
                return spec

        return Spec()


@pytest.mark.parametrize("bad", [-1, 3, 4, 1.5, "1", None])
def test_backup_worker_strategy_rejects_backups_outside_zero_to_n_minus_one(bad):
    pytest.importorskip("tensorflow")
    import tf_hetero.strategies as strategies  # imports TensorFlow; starts no cluster

    with pytest.raises(ValueError, match=(r"^BackupWorkerStrategy\(backups=.*\) with 3 workers: "
                                          r"need an integer from 0 to 2\.$")):
        strategies.BackupWorkerStrategy(_FakeResolver(3), backups=bad)


@pytest.mark.parametrize("bad", [-1, 1.5, None])
def test_ssp_strategy_rejects_negative_or_non_integer_staleness(bad):
    pytest.importorskip("tensorflow")
    import tf_hetero.strategies as strategies

    with pytest.raises(ValueError, match=r"^SSPStrategy\(staleness=.*\): need an integer >= 0\.$"):
        strategies.SSPStrategy(_FakeResolver(3), staleness=bad)


# --------------------------------------------------------------------------- monitor
def test_monitor_summary_fields():
    m = Monitor(3, bytes_per_push=100, clock=FakeClock(0.0))
    m.record_task(0, 0.0, 0.1, applied=True, staleness=0, round=0)
    m.record_task(0, 0.1, 0.4, applied=True, staleness=2, round=1)
    m.record_task(1, 0.0, 0.2, applied=True, staleness=1, round=0)
    m.record_task(1, 0.2, 0.6, applied=False, staleness=7, round=1)
    m.on_round(Round(0, [None] * 2, t_open=0.0, t_close=0.2, t_applied=0.25, lanes={0: 1, 1: 1},
                  applied=2))
    m.on_round(Round(1, [None] * 2, t_open=0.25, t_close=0.4, t_applied=0.4, lanes={0: 1},
                  applied=1))
    s = m.summary()
    assert s["tasks"] == 4 and s["applied_tasks"] == 3 and s["dropped_tasks"] == 1
    assert s["rounds"] == 2
    assert s["mean_round_ms"] == pytest.approx(1e3 * (0.25 + 0.15) / 2)
    assert s["mean_staleness"] == pytest.approx(1.0)  # dropped tasks do not count
    assert s["max_staleness"] == 2
    assert s["bytes_pushed"] == 400
    assert s["worker0_tasks"] == 2 and s["worker0_median_ms"] == pytest.approx(200.0)
    assert s["worker1_tasks"] == 2 and s["worker1_median_ms"] == pytest.approx(300.0)
    assert s["worker2_tasks"] == 0 and math.isnan(s["worker2_median_ms"])
    assert isinstance(s["max_staleness"], int)


def test_monitor_summary_of_nothing():
    s = Monitor(1).summary()
    assert (s["tasks"], s["applied_tasks"], s["dropped_tasks"], s["rounds"]) == (0, 0, 0, 0)
    assert math.isnan(s["mean_round_ms"])
    assert (s["mean_staleness"], s["max_staleness"], s["bytes_pushed"]) == (0.0, 0, 0)


def test_monitor_mean_round_ignores_rounds_that_applied_nothing():
    m = Monitor(1)
    m.on_round(Round(0, [], t_open=0.0, t_close=1.0, t_applied=9.0, applied=0))
    assert math.isnan(m.summary()["mean_round_ms"]) and m.summary()["rounds"] == 1
    m.on_round(Round(1, [], t_open=10.0, t_close=10.5, t_applied=11.0, applied=4))
    assert m.summary()["mean_round_ms"] == pytest.approx(1000.0)


def test_monitor_summary_since_keeps_records_that_ended_after_it():
    m = Monitor(2)
    m.record_task(0, 0.0, 1.0, applied=True, staleness=5)
    m.record_task(1, 1.0, 2.0, applied=True, staleness=1)
    m.record_task(0, 1.5, 3.0, applied=False, staleness=0)
    m.on_round(Round(0, [], t_open=0.0, t_close=1.0, t_applied=1.2, applied=1))
    m.on_round(Round(1, [], t_open=1.2, t_close=2.5, t_applied=3.0, applied=2))
    s = m.summary(since=2.0)
    assert (s["tasks"], s["applied_tasks"], s["dropped_tasks"], s["rounds"]) == (2, 1, 1, 1)
    assert s["max_staleness"] == 1
    assert s["mean_round_ms"] == pytest.approx(1800.0)
    assert s["worker0_tasks"] == 1 and s["worker1_tasks"] == 1
    assert m.summary()["tasks"] == 3 and m.summary(since=10.0)["tasks"] == 0


def test_monitor_ewma_leaves_out_the_warm_up_task_seeds_with_a_median_then_weights_by_alpha():
    m = Monitor(2, ewma_alpha=0.3)
    assert math.isnan(m.ewma_s(0))
    m.record_task(0, 0.0, 1.0, applied=True, staleness=0)
    assert m.ewma_s(0) == 1.0  # only the warm-up (tracing) task is known
    m.record_task(0, 1.0, 3.0, applied=True, staleness=0)
    assert m.ewma_s(0) == 2.0  # the warm-up task is left out once another is known
    m.record_task(0, 3.0, 11.0, applied=True, staleness=0)  # 8 s
    m.record_task(0, 11.0, 14.0, applied=True, staleness=0)  # 3 s
    assert m.ewma_s(0) == 3.0  # the median of the first three warm tasks: 8 s is ignored
    m.record_task(0, 14.0, 18.0, applied=True, staleness=0)
    assert m.ewma_s(0) == pytest.approx(0.3 * 4.0 + 0.7 * 3.0)  # then the newest weighs alpha
    assert math.isnan(m.ewma_s(1))
    assert m.durations(0) == [1.0, 2.0, 8.0, 3.0, 4.0] and m.durations(1) == []


def test_monitor_ewma_alpha_one_keeps_only_the_newest_task_after_the_seed():
    m = Monitor(1, ewma_alpha=1)
    for start, end in [(0.0, 1.0), (1.0, 1.25), (1.25, 1.75), (1.75, 2.0), (2.0, 2.5)]:
        m.record_task(0, start, end, applied=True, staleness=0)
    assert m.ewma_s(0) == 0.5


@pytest.mark.parametrize("alpha", [0, -0.5, 1.01, 2])
def test_monitor_rejects_ewma_alpha_outside_zero_to_one(alpha):
    with pytest.raises(ValueError, match=r"^ewma_alpha=.*: need 0 < alpha <= 1\.$"):
        Monitor(1, ewma_alpha=alpha)


def test_monitor_is_fed_by_the_engine():
    clock = FakeClock(0.0)
    e, _, m, _ = bsp(2, clock=clock)
    tasks = [e.submit(i) for i in range(2)]
    e.task_started(tasks[0], 0)
    e.task_started(tasks[1], 1)
    clock.advance(0.25)
    e.task_finished(tasks[0], 0)
    clock.advance(0.25)
    e.task_finished(tasks[1], 1)
    clock.advance(0.5)
    e.apply_finished(0, 2)
    assert [(t.worker, t.duration, t.round, t.applied) for t in m.tasks] == [
        (0, 0.25, 0, True), (1, 0.5, 0, True)]
    (r,) = m.rounds
    assert (r.id, r.t_open, r.t_close, r.t_applied, r.tasks, r.lanes, r.applied) == (
        0, 0.0, 0.5, 1.0, 2, {0: 1, 1: 1}, 2)
    assert m.summary()["mean_round_ms"] == pytest.approx(1000.0)


def test_monitor_events_use_its_clock():
    m = Monitor(1, clock=FakeClock(7.0))
    m.on_event("something", worker=0)
    assert m.events == [(7.0, "something", {"worker": 0})]


def test_monitor_is_thread_safe():
    m = Monitor(4, bytes_per_push=1)
    errors = []

    def record(w):
        try:
            for i in range(500):
                m.record_task(w, float(i), i + 0.5, applied=bool(i % 2), staleness=i % 3)
                if i % 50 == 0:
                    m.summary()
                    m.ewma_s(w)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def rounds():
        for i in range(200):
            m.on_round(Round(i, [], t_open=0.0, t_close=0.1, t_applied=0.2, applied=1))

    threads = [threading.Thread(target=record, args=(w,)) for w in range(4)]
    threads.append(threading.Thread(target=rounds))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    s = m.summary()
    assert s["tasks"] == 2000 and s["applied_tasks"] == 1000 and s["rounds"] == 200
    assert all(s[f"worker{w}_tasks"] == 500 for w in range(4))
    assert all(m.ewma_s(w) == pytest.approx(0.5) for w in range(4))


# ------------------------------------------------------------------------ round books
def two_books(**kw):
    """Workers {0, 1} and {2, 3}: two groups, each with BSP rounds of its own."""
    clock = FakeClock()
    d = FakeDispatcher()
    e = RoundEngine(4, dispatcher=d, clock=clock, monitor=Monitor(4, clock=clock),
                    books=[((0, 1), AllTasks(), OnePerWorker()),
                           ((2, 3), AllTasks(), OnePerWorker())], **kw)
    return e, d


def test_books_close_and_apply_their_rounds_independently():
    e, d = two_books()
    tasks = [e.submit(i) for i in range(4)]
    assert [(r.book, sorted(t.pinned for t in r.tasks)) for r in e.rounds] == [(0, [0, 1]),
                                                                            (1, [2, 3])]
    run(e, tasks[0]), run(e, tasks[1])  # book 0's round closes; book 1's stays open
    assert d.applies == [(0, {0: 1, 1: 1})] and not e.rounds[1].closed
    more = [e.submit(i) for i in range(2)]  # book 0 waits for its apply, book 1 is busy
    assert len(e.rounds) == 2
    run(e, tasks[2]), run(e, tasks[3])  # both books now have a round applying at once
    assert d.applies[-1] == (1, {2: 1, 3: 1})
    e.apply_finished(1, 2)  # book 1's apply finishes first: its next round takes the tasks
    assert [(r.book, r.slot) for r in e.rounds] == [(0, 0), (1, 0), (1, 1)]
    assert sorted(t.pinned for t in more) == [2, 3]
    e.apply_finished(0, 2)
    for t in more:
        run(e, t)
    e.apply_finished(2, 2)
    assert e.idle() and e.version == 3


def test_books_must_partition_the_workers():
    with pytest.raises(ValueError, match=r"worker\(s\) \[1\] in two books"):
        RoundEngine(3, dispatcher=FakeDispatcher(),
                    books=[((0, 1), AllTasks(), OnePerWorker()),
                           ((1, 2), AllTasks(), OnePerWorker())])
    with pytest.raises(ValueError, match=r"workers \[2\] are in no book"):
        RoundEngine(3, dispatcher=FakeDispatcher(),
                    books=[((0, 1), AllTasks(), OnePerWorker())])


def test_random_interleavings_of_two_books_apply_every_task_exactly_once():
    for seed in range(20):
        rng = random.Random(seed)
        e, d = two_books()
        play(e, d, 40, rng)
        assert e.idle()
        tasks = [t for r in e.rounds for t in r.tasks]
        assert len(tasks) == len({id(t) for t in tasks}) == 40
        assert all(t.state == "done" for t in tasks)
        for b in (0, 1):  # a book's rounds alternate slots, whatever the other book does
            slots = [r.slot for r in e.rounds if r.book == b]
            assert slots == [i % 2 for i in range(len(slots))]
        assert sum(r.applied for r in e.rounds) == 40


def test_strategy_arguments_are_checked_before_connecting():
    pytest.importorskip("tensorflow")
    import tf_hetero.strategies as strategies  # imports TensorFlow; starts no cluster

    with pytest.raises(ValueError, match=r"^quorum=1\.5: need 0 < quorum <= 1\.$"):
        strategies.EPSPStrategy(_FakeResolver(3), quorum=1.5)  # enforced sync too
    with pytest.raises(TypeError, match=r"^BSPStrategy: cluster_resolver is None, not a "
                                        r"cluster resolver\. Fix: pass"):
        strategies.BSPStrategy(None)
