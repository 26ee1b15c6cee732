"""H-PS's local accumulation in the round engine (pure Python): micro-batches buffered on
workers and pushed exactly once (strict and pipelined rounds), also when tasks move or a
worker dies."""

from __future__ import annotations

import random

import pytest

from tf_hetero.engine import PUSH_ALL, PUSH_OLD, LocalAccumulation, RoundContext
from tf_hetero.policies import SpeedProportional

from support.engine import finish_round, make_hps, run


# ---------------------------------------------------------------- local accumulation
def test_strict_round_pins_shares_and_only_each_workers_last_task_pushes():
    e, d, m, _ = make_hps(4, 13, times={0: 0.1, 1: 0.1, 2: 0.1, 3: 0.4})
    tasks = [e.submit(i) for i in range(13)]
    assert sorted(d.workers_of_round(0)) == [0] * 4 + [1] * 4 + [2] * 4 + [3]
    for w in range(4):
        mine = [t for t in tasks if t.pinned == w]
        assert [t.push for t in mine] == [0] * (len(mine) - 1) + [PUSH_ALL]
    finish_round(e, d, 0)
    assert d.applies == [(0, {0: 4, 1: 4, 2: 4, 3: 1})]
    assert [t.pushed for t in tasks if t.push] == [4, 4, 4, 1] or sorted(
        t.pushed for t in tasks if t.push) == [1, 4, 4, 4]
    assert e.rounds[0].info["shares"] == {0: 4, 1: 4, 2: 4, 3: 1}


def test_pipelined_round_pushes_the_previous_rounds_buffer_and_drains_at_join():
    e, d, m, _ = make_hps(2, 4, local="pipelined", times={0: 0.1, 1: 0.1})
    for i in range(8):
        e.submit(i)
    r0 = d.tasks_of_round(0)
    assert [t.push for t in r0 if t.pinned == 0] == [PUSH_OLD, 0]
    finish_round(e, d, 0)
    assert e.rounds[0].lanes == {} and d.applies == []  # nothing pushed yet: no apply
    assert e.held == {0: 2, 1: 2}
    finish_round(e, d, 1)  # round 1's first tasks pushed round 0's buffers
    assert d.applies == [(1, {0: 2, 1: 2})]
    e.apply_finished(1, 4)
    assert not e.idle()  # round 1's gradients are still buffered on the workers
    e.flush()
    drain = d.tasks_of_round(2)
    assert [(t.drain, t.push, t.payload) for t in drain] == [
        (True, PUSH_ALL, ("drain", 0)), (True, PUSH_ALL, ("drain", 1))]
    finish_round(e, d, 2)
    assert d.applies[-1] == (2, {0: 2, 1: 2})
    e.apply_finished(2, 4)
    assert e.idle() and e.held == {0: 0, 1: 0}


def test_task_moved_to_another_worker_pushes_what_it_adds():
    e, d, m, _ = make_hps(2, 4, times={0: 0.1, 1: 0.1})
    tasks = [e.submit(i) for i in range(4)]
    moved = next(t for t in tasks if t.pinned == 0 and not t.push)
    e.worker_failed(0)
    run(e, moved, worker=1)
    assert moved.push == PUSH_ALL and moved.pushed == 1
    for t in tasks:
        if t.pinned == 1:
            run(e, t)
    assert e.held[1] == 0


def test_every_micro_batch_is_pushed_exactly_once_in_random_orders():
    for seed in range(20):
        rng = random.Random(seed)
        local = rng.choice(["strict", "pipelined"])
        e, d, m, _ = make_hps(3, 7, local=local, times={0: 0.1, 1: 0.2, 2: 0.4})
        total = 7 * rng.randint(2, 4) + rng.randint(0, 6)
        for i in range(total):
            e.submit(i)
        e.flush()
        applied, r = 0, 0
        while not e.idle():
            tasks = d.tasks_of_round(r)
            by_worker = {}
            for t in tasks:  # each worker runs its own tasks in order; workers interleave
                by_worker.setdefault(t.pinned, []).append(t)
            while any(by_worker.values()):
                w = rng.choice([w for w in by_worker if by_worker[w]])
                run(e, by_worker[w].pop(0))
            if d.applies and d.applies[-1][0] == r:
                n = sum(d.applies[-1][1].values())
                applied += n
                e.apply_finished(r, n)
            r += 1
        assert applied == total, (seed, local)


def _units_applied(d):
    return sum(sum(lanes.values()) for _, lanes in d.applies)


def _units_done(e):
    return sum(t.size for r in e.rounds for t in r.tasks
               if t.state in ("done", "folded") and not t.drain)


def test_a_pipelined_buffer_that_dies_with_its_worker_is_counted_lost_not_applied():
    e, d, m, _ = make_hps(2, 4, local="pipelined", times={0: 0.1, 1: 0.1})
    for i in range(8):
        e.submit(i)
    finish_round(e, d, 0)  # each worker holds its 2 micro-batches in its buffer
    in_buffer = [t for t in d.tasks_of_round(0) if t.pinned == 0]
    applied_before = m.summary()["applied_tasks"]
    e.worker_failed(0)
    assert [str(t.state) for t in in_buffer] == ["dropped", "dropped"] and e.held[0] == 0
    assert m.summary()["applied_tasks"] == applied_before - 2
    for t in d.tasks_of_round(1):  # worker 0's share runs on worker 1, pushing what it adds
        run(e, t, worker=1)
    e.apply_finished(1, sum(d.applies[-1][1].values()))
    e.flush()
    finish_round(e, d, 2)  # the drain
    e.apply_finished(2, sum(d.applies[-1][1].values()))
    assert e.idle()
    # Every micro-batch counted applied is in an apply, and only those.
    assert _units_applied(d) == _units_done(e) == 6
    assert m.summary()["applied_tasks"] == 6 + 4  # 4: the speeds make_hps records first


def test_a_push_that_must_run_again_after_its_worker_died_loses_what_it_carried():
    e, d, m, _ = make_hps(2, 4, local="pipelined", times={0: 0.1, 1: 0.1})
    for i in range(8):
        e.submit(i)
    finish_round(e, d, 0)
    carried = [t for t in d.tasks_of_round(0) if t.pinned == 0]
    pusher = next(t for t in d.tasks_of_round(1) if t.pinned == 0 and t.push == PUSH_OLD)
    e.task_started(pusher, 0)  # starts pushing worker 0's buffer, then worker 0 dies
    assert pusher.pushed == 2 and all(str(t.state) == "done" for t in carried)
    e.worker_failed(0)
    run(e, pusher, worker=1)  # TF runs the closure again elsewhere
    assert [str(t.state) for t in carried] == ["dropped", "dropped"]
    for t in d.tasks_of_round(1):
        if str(t.state) != "done":
            run(e, t, worker=1)
    e.apply_finished(1, sum(d.applies[-1][1].values()))
    e.flush()
    finish_round(e, d, 2)
    e.apply_finished(2, sum(d.applies[-1][1].values()))
    assert e.idle() and _units_applied(d) == _units_done(e) == 6


def test_a_ps_failover_restart_drops_what_the_buffers_held():
    """A PS failover rolls the model back and abandons the rounds in progress
    (``restart_rounds``): the buffered gradients were taken on weights the rollback undid,
    so no later push carries them into an apply (on a cluster, pipelined H-PS applied them
    in the first round after the failover)."""
    e, d, m, _ = make_hps(2, 4, local="pipelined", times={0: 0.1, 1: 0.1})
    for i in range(8):
        e.submit(i)
    finish_round(e, d, 0)  # round 0's gradients wait in the buffers; round 1 is open
    buffered = d.tasks_of_round(0)
    _, orphans = e.restart_rounds()
    assert [str(t.state) for t in buffered] == ["dropped"] * 4 and e.held == {0: 0, 1: 0}
    assert sorted(orphans) == [4, 5, 6, 7]  # round 1's steps, made again
    for payload in orphans:
        e.submit(payload)
    e.resume()
    again = e.rounds[-1]
    assert again.id == 2 and sorted(t.payload for t in again.tasks) == [4, 5, 6, 7]
    finish_round(e, d, again.id)
    assert d.applies == []  # its first pushes carried nothing


def test_a_round_boundary_is_found_while_pipelined_buffers_hold_gradients():
    """Live rebalancing moves variables at a round boundary, found before ``fit`` submits
    more tasks: the buffers that only the next round's pushes empty must not hide it (its
    fit stalled, measured)."""
    e, d, m, _ = make_hps(2, 4, local="pipelined", times={0: 0.1, 1: 0.1})
    for i in range(4):
        e.submit(i)
    finish_round(e, d, 0)
    assert e.held == {0: 2, 1: 2} and not e.idle()
    assert e.wait_boundary(timeout=0.5)


def test_engine_rejects_an_unknown_local_mode():
    with pytest.raises(ValueError, match="local='fast'"):
        LocalAccumulation("fast")


@pytest.mark.parametrize("local", ["strict", "pipelined"])
def test_first_round_without_measurements_is_pulled_and_every_task_pushes(local):
    e, d, m, _ = make_hps(2, 4, local=local)  # no task measured yet
    tasks = [e.submit(i) for i in range(4)]
    assert e.rounds[0].info["pulled"] and all(t.push == PUSH_ALL for t in tasks)
    assert [w for _, w, _ in d.dispatched] == [0, 1]  # one per idle worker, the rest queued
    for t in list(tasks):
        if t.state == "dispatched":
            run(e, t)
    for t in tasks:
        if t.state == "dispatched":
            run(e, t)
    assert d.applies == [(0, {0: 2, 1: 2})] and e.held == {0: 0, 1: 0}
    assert SpeedProportional(4, memory_budget=1).plan(RoundContext(0, (0, 1, 2, 3))).entries == [
        0, 1, 2, 3]
