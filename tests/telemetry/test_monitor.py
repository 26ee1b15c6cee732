"""The monitor (pure Python): its summary fields, EWMA task-time estimates, its clock, its
thread safety, and the engine feeding it."""

from __future__ import annotations

import math
import threading

import pytest

from tf_hetero.engine import Round
from tf_hetero.telemetry import Monitor

from support.engine import bsp
from support.fakes import FakeClock


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
