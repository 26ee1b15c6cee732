"""Backup workers on the round engine (pure Python): a round closes after N - b tasks, late
tasks are dropped and their lanes left out, and over random schedules every task ends done or
dropped with the lanes counting exactly the done ones."""

from __future__ import annotations

import random

import pytest

from tf_hetero.engine import Plan, Task
from tf_hetero.policies import AllTasks, FirstK

from support.engine import backup, make, run
from support.fakes import FakeClock


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
