"""The round engine's BSP rounds (pure Python, one thread): a round opens with one task per
live worker, closes when all are done, applies once; flush, idle and ``wait_idle``.

A fake dispatcher records what the engine asks of the TF side; the tests play the TF side by
calling ``task_started`` / ``task_finished`` / ``apply_finished`` in a chosen order, with a
fake clock wherever times matter. No TensorFlow cluster is started.
"""

from __future__ import annotations

import threading

from tf_hetero.engine import RoundEngine
from tf_hetero.policies import AllTasks, OnePerWorker

from support.engine import bsp, run
from support.fakes import FakeClock, FakeDispatcher


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
