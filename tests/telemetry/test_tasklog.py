"""Specification of per-worker task timing (the pure parts, and attach on a fake coordinator)."""

from __future__ import annotations

import math
import threading
import types

import pytest

from tf_hetero.telemetry import TaskLog, TaskRecord, WorkerStats, measured_ratios

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)


def log_of(*records):
    """A TaskLog holding (worker, start, end) records."""
    log = TaskLog()
    for worker, start, end in records:
        log.record(worker=worker, start=start, end=end)
    return log


# --------------------------------------------------------------------------- records


def test_new_log_is_empty():
    log = TaskLog()
    assert len(log) == 0 and log.records == []


def test_record_appends_a_task_record_in_order():
    log = log_of((1, 0.0, 0.5), (0, 0.2, 0.3))
    assert log.records == [TaskRecord(1, 0.0, 0.5), TaskRecord(0, 0.2, 0.3)]
    assert len(log) == 2


def test_task_record_duration_is_end_minus_start():
    assert TaskRecord(0, 1.5, 2.0).duration == pytest.approx(0.5)


def test_records_returns_a_copy():
    log = log_of((0, 0.0, 1.0))
    log.records.clear()
    assert len(log) == 1


def test_record_is_thread_safe():
    log = TaskLog()

    def record_many(worker):
        for i in range(1000):
            log.record(worker, float(i), float(i) + 0.001)

    threads = [threading.Thread(target=record_many, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(log) == 8000
    assert log.counts(8) == [1000] * 8


# --------------------------------------------------------------------------- counts and stats


def test_counts_per_worker_include_workers_without_tasks():
    log = log_of((0, 0, 1), (2, 0, 1), (2, 1, 2))
    assert log.counts(4) == [1, 0, 2, 0]


def test_stats_give_count_mean_median_p90_and_busy_time():
    log = log_of(*[(0, 0.0, d) for d in (0.1, 0.2, 0.3, 0.4, 1.0)])
    (s,) = log.stats(1)
    assert s.worker == 0 and s.count == 5
    assert s.mean_s == pytest.approx(0.4)
    assert s.median_s == pytest.approx(0.3)
    assert s.p90_s == pytest.approx(0.76)  # numpy's linear interpolation
    assert s.busy_s == pytest.approx(2.0)


def test_stats_of_a_worker_without_tasks_are_nan_with_count_0():
    s = log_of((0, 0.0, 0.1)).stats(2)[1]
    assert (s.worker, s.count, s.busy_s) == (1, 0, 0.0)
    assert math.isnan(s.mean_s) and math.isnan(s.median_s) and math.isnan(s.p90_s)


def test_stats_skip_first_drops_each_workers_first_tasks_from_the_times():
    log = log_of((0, 0.0, 5.0), (1, 0.0, 9.0), (0, 5.0, 5.1), (1, 9.0, 9.4), (0, 5.1, 5.2))
    s0, s1 = log.stats(2, skip_first=1)
    assert s0.mean_s == pytest.approx(0.1) and s0.median_s == pytest.approx(0.1)
    assert s1.mean_s == pytest.approx(0.4)


def test_stats_skip_first_keeps_skipped_tasks_in_count_and_busy_time():
    log = log_of((0, 0.0, 5.0), (0, 5.0, 5.1))
    (s,) = log.stats(1, skip_first=1)
    assert s.count == 2
    assert s.busy_s == pytest.approx(5.1)


def test_stats_skip_first_of_all_tasks_gives_nan_times():
    (s,) = log_of((0, 0.0, 1.0)).stats(1, skip_first=1)
    assert s.count == 1 and math.isnan(s.median_s)


def test_span_runs_from_first_start_to_last_end():
    log = log_of((0, 2.0, 3.0), (1, 1.0, 1.5), (1, 2.5, 4.0))
    assert log.span() == pytest.approx(3.0)


def test_span_of_an_empty_log_is_0():
    assert TaskLog().span() == 0.0


# --------------------------------------------------------------------------- measured_ratios


def test_measured_ratios_are_medians_over_the_fastest_median():
    log = log_of(*[(w, 0.0, 0.1 * f) for w, f in enumerate((1, 1, 1, 4)) for _ in range(3)])
    assert measured_ratios(log.stats(4)) == pytest.approx([1.0, 1.0, 1.0, 4.0])


def test_measured_ratios_ignore_workers_without_tasks_when_finding_the_fastest():
    ratios = measured_ratios(log_of((1, 0.0, 0.2), (2, 0.0, 0.4)).stats(3))
    assert math.isnan(ratios[0]) and ratios[1:] == pytest.approx([1.0, 2.0])


def test_measured_ratios_with_skip_first_leave_out_the_first_task():
    log = log_of((0, 0.0, 3.0), (0, 0.0, 0.1), (0, 0.0, 0.1), (1, 0.0, 0.2), (1, 0.0, 0.2))
    assert measured_ratios(log.stats(2, skip_first=1)) == pytest.approx([1.0, 2.0])


def test_measured_ratios_ignore_a_worker_whose_tasks_were_all_skipped():
    log = log_of((0, 0.0, 1.0), (1, 0.0, 0.1), (1, 0.0, 0.1), (2, 0.0, 0.2), (2, 0.0, 0.2))
    ratios = measured_ratios(log.stats(3, skip_first=1))
    assert ratios[1:] == pytest.approx([1.0, 2.0])


def test_measured_ratios_of_given_stats():
    stats = [WorkerStats(0, 2, 0.2, 0.2, 0.2, 0.4), WorkerStats(1, 2, 0.1, 0.1, 0.1, 0.2)]
    assert measured_ratios(stats) == pytest.approx([2.0, 1.0])


# --------------------------------------------------------------------------- attach / detach


class FakeWorker:
    """Shaped like a ClusterCoordinator worker thread: an index and ``_process_closure``."""

    def __init__(self, worker_index):
        self.worker_index = worker_index
        self.processed = []

    def _process_closure(self, closure):
        self.processed.append(closure)
        if closure == "fail":
            raise RuntimeError("closure failed")
        return f"done {closure}"


def fake_coordinator(num_workers):
    return types.SimpleNamespace(
        _cluster=types.SimpleNamespace(workers=[FakeWorker(i) for i in range(num_workers)]))


def test_attach_returns_the_log():
    log = TaskLog()
    assert log.attach(fake_coordinator(2)) is log


def test_attach_records_each_closure_under_its_worker():
    coordinator = fake_coordinator(3)
    log = TaskLog().attach(coordinator)
    w0, _, w2 = coordinator._cluster.workers
    assert w2._process_closure("a") == "done a"
    w2._process_closure("b")
    w0._process_closure("c")
    assert log.counts(3) == [1, 0, 2]
    assert w2.processed == ["a", "b"]
    assert all(r.end >= r.start >= log.t0 for r in log.records)


def test_attach_records_a_closure_that_raises():
    coordinator = fake_coordinator(1)
    log = TaskLog().attach(coordinator)
    with pytest.raises(RuntimeError, match=r"^closure failed$"):
        coordinator._cluster.workers[0]._process_closure("fail")
    assert log.counts(1) == [1]


def test_attach_skips_what_the_coordinator_calls_internal():
    coordinator = fake_coordinator(1)
    coordinator.is_internal = lambda closure: closure == "drain"
    log = TaskLog().attach(coordinator)
    for closure in ("drain", "step"):
        coordinator._cluster.workers[0]._process_closure(closure)
    assert log.counts(1) == [1]  # only the training step


def test_a_strategys_drains_are_internal_and_its_steps_are_not():
    from tf_hetero.strategies.runtime.coordinator import HeteroCoordinator
    from tf_hetero.strategies.runtime.tags import ClosureKind, ClosureTag, set_tag

    drain, step, untagged = (types.SimpleNamespace() for _ in range(3))
    set_tag(drain, ClosureTag(ClosureKind.TASK, task=types.SimpleNamespace(drain=True)))
    set_tag(step, ClosureTag(ClosureKind.TASK, task=types.SimpleNamespace(drain=False)))
    assert [HeteroCoordinator.is_internal(None, c) for c in (drain, step, untagged)] == [
        True, False, False]


def test_attach_does_not_record_earlier_closures():
    coordinator = fake_coordinator(1)
    coordinator._cluster.workers[0]._process_closure("before")
    log = TaskLog().attach(coordinator)
    assert len(log) == 0


def test_two_logs_wrap_each_worker_once_and_both_record():
    coordinator = fake_coordinator(2)
    first = TaskLog().attach(coordinator)
    wrapped = [w._process_closure for w in coordinator._cluster.workers]
    second = TaskLog().attach(coordinator)
    assert [w._process_closure for w in coordinator._cluster.workers] == wrapped
    coordinator._cluster.workers[1]._process_closure("x")
    assert first.counts(2) == second.counts(2) == [0, 1]
    assert coordinator._cluster.workers[1].processed == ["x"]


def test_attaching_the_same_log_twice_records_once():
    coordinator = fake_coordinator(1)
    log = TaskLog().attach(coordinator)
    log.attach(coordinator)
    coordinator._cluster.workers[0]._process_closure("x")
    assert len(log) == 1


def test_detach_stops_recording():
    coordinator = fake_coordinator(2)
    log = TaskLog().attach(coordinator)
    coordinator._cluster.workers[0]._process_closure("x")
    log.detach()
    coordinator._cluster.workers[0]._process_closure("y")
    assert log.counts(2) == [1, 0]
    assert coordinator._cluster.workers[0].processed == ["x", "y"]


def test_detach_leaves_other_logs_recording():
    coordinator = fake_coordinator(1)
    first, second = TaskLog().attach(coordinator), TaskLog().attach(coordinator)
    first.detach()
    coordinator._cluster.workers[0]._process_closure("x")
    assert (len(first), len(second)) == (0, 1)


def test_detach_without_attach_and_twice_is_harmless():
    log = TaskLog()
    log.detach()
    log.attach(fake_coordinator(1)).detach()
    log.detach()


def test_reattach_after_detach_records_again():
    coordinator = fake_coordinator(1)
    log = TaskLog().attach(coordinator)
    log.detach()
    log.attach(coordinator)
    coordinator._cluster.workers[0]._process_closure("x")
    assert len(log) == 1
