"""Specification of the cluster performance arithmetic (pure Python)."""

from __future__ import annotations


import pytest

from tf_hetero.telemetry.perf import bsp_efficiency_bound, capacities, efficiency, ideal_samples_per_sec


def test_capacity_is_batch_size_over_task_seconds():
    assert capacities(32, 100.0, [1, 2, 4]) == pytest.approx([320.0, 160.0, 80.0])


def test_capacities_reject_a_cluster_without_workers():
    with pytest.raises(ValueError, match=r"^slowdowns must be a non-empty list.*received \[\]\.$"):
        capacities(32, 100.0, [])


def test_ideal_throughput_is_the_sum_of_capacities():
    assert ideal_samples_per_sec(32, 100.0, [1, 1, 1, 4]) == pytest.approx(1040.0)


def test_ideal_throughput_of_a_uniform_cluster_is_n_times_one_worker():
    assert ideal_samples_per_sec(64, 50.0, [1.0] * 8) == pytest.approx(8 * 64 / 0.05)


def test_ideal_throughput_is_a_float():
    assert isinstance(ideal_samples_per_sec(32, 100.0, [1]), float)


@pytest.mark.parametrize("batch_size, base_ms", [(0, 100.0), (-1, 100.0), (32, 0.0), (32, -5.0)])
def test_capacities_reject_non_positive_batch_size_or_base_ms(batch_size, base_ms):
    with pytest.raises(ValueError, match=r"^need batch_size > 0 and base_ms > 0; received "):
        capacities(batch_size, base_ms, [1.0])


def test_ideal_throughput_rejects_non_positive_batch_size():
    with pytest.raises(ValueError, match=r"^need batch_size > 0 and base_ms > 0; received 0, 100\.0\.$"):
        ideal_samples_per_sec(0, 100.0, [1.0])


def test_efficiency_is_measured_over_ideal():
    assert efficiency(520.0, 1040.0) == 0.5
    assert efficiency(1040.0, 1040.0) == 1.0


@pytest.mark.parametrize("ideal", [0.0, -1.0])
def test_efficiency_rejects_non_positive_ideal(ideal):
    with pytest.raises(ValueError, match=rf"^ideal throughput must be > 0; received {ideal!r}\.$"):
        efficiency(10.0, ideal)


def test_bsp_bound_with_one_4x_worker_of_four():
    assert bsp_efficiency_bound([1, 1, 1, 4]) == pytest.approx(4 / 13)
    assert round(bsp_efficiency_bound([1, 1, 1, 4]), 4) == 0.3077


@pytest.mark.parametrize("n", [1, 2, 8])
def test_bsp_bound_of_a_uniform_cluster_is_1(n):
    assert bsp_efficiency_bound([1.0] * n) == pytest.approx(1.0)
    assert bsp_efficiency_bound([3.0] * n) == pytest.approx(1.0)


def test_bsp_bound_does_not_depend_on_worker_order():
    assert bsp_efficiency_bound([4, 1, 2, 1]) == pytest.approx(bsp_efficiency_bound([1, 1, 2, 4]))


def test_bsp_bound_equals_throughput_of_slowest_paced_rounds_over_ideal():
    slowdowns = [1, 2, 4]
    bsp = len(slowdowns) * 32 / (0.1 * max(slowdowns))  # every worker waits for the slowest
    assert bsp_efficiency_bound(slowdowns) == pytest.approx(
        efficiency(bsp, ideal_samples_per_sec(32, 100.0, slowdowns)))


def test_bsp_bound_rejects_no_workers():
    with pytest.raises(ValueError):
        bsp_efficiency_bound([])


@pytest.mark.parametrize("slowdowns", [[1, 0], [1, -2]])
def test_bsp_bound_rejects_non_positive_slowdowns(slowdowns):
    with pytest.raises(ValueError):
        bsp_efficiency_bound(slowdowns)


@pytest.mark.parametrize("slowdowns", [[1, 0], [1, -2]])
def test_capacities_reject_non_positive_slowdowns(slowdowns):
    with pytest.raises(ValueError):
        capacities(32, 100.0, slowdowns)


def test_ideal_over_tasks_integrates_a_mid_run_slowdown():
    from tf_hetero.emulation.profile import Profile
    from tf_hetero.telemetry.perf import ideal_over_tasks

    p = Profile.parse("change=1@10:4")  # worker 1: 1x for 10 tasks, then 4x
    before = ideal_over_tasks(32, 100.0, p, {0: 10, 1: 10}, 2)
    after = ideal_over_tasks(32, 100.0, p, {0: 40, 1: 40}, 2)
    assert before == pytest.approx(640.0)  # both at 1x
    assert after == pytest.approx(320.0 + 32 * 40 / (0.1 * (10 + 4 * 30)))
    assert after < before  # the task-0 ideal (640) would flatter every row after the change
    assert ideal_samples_per_sec(32, 100.0, p.expected_slowdowns(2)) == before


def test_ideal_over_tasks_counts_the_transient_draws_that_happened():
    from tf_hetero.emulation.profile import Profile
    from tf_hetero.telemetry.perf import ideal_over_tasks

    p = Profile.parse("straggle=0.5x3;seed=1")
    drawn = sum(p.slowdown(0, t, 1) for t in range(20))
    assert ideal_over_tasks(32, 100.0, p, {0: 20}, 1) == pytest.approx(32 * 20 / (0.1 * drawn))


def test_run_figures_use_one_clock_from_fit_to_the_last_apply_so_efficiency_stays_below_one():
    from tf_hetero.telemetry import TaskRecord
    from tf_hetero.telemetry.perf import run_figures

    # Two workers, each running 4 tasks of exactly their emulated 0.1 s, back to back,
    # after 0.5 s of setup; the last round is applied 0.05 s after the last task.
    records = [TaskRecord(w, 0.5 + 0.1 * i, 0.6 + 0.1 * i) for w in range(2) for i in range(4)]
    f = run_figures(records, fit_start=0.0, last_apply=0.95, samples_per_unit=32)
    assert f.span_s == pytest.approx(0.95) and f.setup_s == pytest.approx(0.5)
    assert f.samples_per_sec == pytest.approx(8 * 32 / 0.95)
    assert efficiency(f.samples_per_sec, ideal_samples_per_sec(32, 100.0, [1, 1])) <= 1.0
    dropped = [TaskRecord(0, 0.5, 0.6, applied=False)] + records[1:]
    assert run_figures(dropped, 0.0, 0.95, 32).applied_samples == 7 * 32


def test_time_to_target_is_the_first_sample_at_or_above_the_target():
    from tf_hetero.telemetry.perf import time_to_target

    curve = [(0.5, 0.2), (1.0, 0.85), (1.5, 0.9), (2.0, 0.8), (2.5, 0.95)]
    assert time_to_target(curve, 0.9) == 1.5
    assert time_to_target(curve, 0.96) is None


def test_round_breakdown_counts_only_the_part_of_an_overlapped_apply_a_round_waited_for():
    from types import SimpleNamespace as NS

    from tf_hetero.telemetry.perf import round_breakdown

    t = lambda s, e: NS(t_start=s, t_end=e, drain=False, state="done")  # noqa: E731
    # Round 1 opens 10 ms after round 0 closed, while round 0's 50 ms apply still runs.
    r0 = NS(kind="train", applied=2, book=0, t_open=0.0, t_close=0.3, t_applied=0.35,
            tasks=[t(0.0, 0.3)])
    r1 = NS(kind="train", applied=2, book=0, t_open=0.31, t_close=0.61, t_applied=0.66,
            tasks=[t(0.31, 0.61)])
    r2 = NS(kind="train", applied=2, book=0, t_open=0.62, t_close=0.92, t_applied=0.97,
            tasks=[t(0.62, 0.92)])
    b = round_breakdown([r0, r1, r2])
    assert round(b["apply"]) == round((10 + 10 + 50) / 3)  # the last one has no next round
    assert round(b["gap"]) == 0
    assert round(b["dispatch"] + b["task"] + b["barrier"] + 10) == 310  # open to next open


def test_pair_bytes_counts_every_worker_and_the_chief_apart():
    """Two workers and the chief on one PS: each worker's connection counts for that worker
    (a reused loop variable once counted only the first one), the chief's only as chief."""
    from tf_hetero.telemetry.traffic import pair_bytes

    sockets = {("a:1", "p:1"): (11, 100, 10), ("b:1", "p:2"): (12, 200, 20),
               ("c:1", "p:3"): (13, 300, 30), ("p:1", "a:1"): (22, 10, 100),
               ("p:2", "b:1"): (22, 20, 200), ("p:3", "c:1"): (22, 30, 300)}
    roles = {11: ("worker", 0), 12: ("worker", 1), 13: ("chief", 0), 22: ("ps", 0)}
    assert pair_bytes(sockets, roles) == {(0, 0): (100, 10), (1, 0): (200, 20)}
    assert pair_bytes(sockets, roles, "chief") == {(0, 0): (300, 30)}
