"""H-PS's speed-proportional shares (pure Python): each worker's share of a round follows its
speed so all finish together, within min/budget bounds; the smoothed task-time estimate that
feeds it follows a slowdown and ignores one slow task."""

from __future__ import annotations

import random

import pytest

from tf_hetero.policies import SpeedProportional, smoothed_time


# ------------------------------------------------------------------ SpeedProportional
def test_shares_follow_speed_so_all_workers_finish_together():
    p = SpeedProportional(13)
    assert p.shares({0: 0.1, 1: 0.1, 2: 0.1, 3: 0.4}) == {0: 4, 1: 4, 2: 4, 3: 1}
    assert p.shares({0: 0.1, 1: 0.2}) == {0: 9, 1: 4}


def test_shares_minimise_the_makespan_of_the_round():
    times = {0: 0.1, 1: 0.13, 2: 0.25, 3: 0.4}
    rng = random.Random(0)
    for n in range(4, 30):
        best = SpeedProportional(n).shares(times)
        makespan = max(best[w] * times[w] for w in times)
        for _ in range(50):  # no random split of n tasks (each worker >= 1) does better
            k = {w: 1 for w in times}
            for _ in range(n - 4):
                k[rng.choice(list(times))] += 1
            assert makespan <= max(k[w] * times[w] for w in times) + 1e-12
        assert sum(best.values()) == n


def test_every_worker_keeps_min_tasks_and_budgets_cap_the_round():
    times = {0: 0.1, 1: 0.1, 2: 0.1, 3: 1.0}
    assert SpeedProportional(12).shares(times)[3] == 1
    assert SpeedProportional(12, min_tasks=0).shares(times)[3] == 0
    capped = SpeedProportional(12, memory_budget=[2, 3, 3, 3])
    assert capped.shares(times) == {0: 2, 1: 3, 2: 3, 3: 3}
    assert SpeedProportional(20, memory_budget=2).shares(times) == {0: 2, 1: 2, 2: 2, 3: 2}


def test_plan_order_puts_the_tasks_that_end_first_first():
    times = {0: 0.1, 1: 0.1, 2: 0.1, 3: 0.4}
    order = SpeedProportional(16).order(times)
    assert sorted(order) == [0] * 5 + [1] * 5 + [2] * 5 + [3]
    assert 3 not in order[:9]  # a partial round of 9 tasks is not held up by the slow worker
    ends = sorted((j + 1) * times[w] for w in times for j in range(order.count(w)))
    finish, seen = [], {w: 0 for w in times}
    for w in order:
        seen[w] += 1
        finish.append(seen[w] * times[w])
    assert finish == ends


def test_more_workers_than_tasks_leaves_the_slowest_out():
    assert SpeedProportional(2).shares({0: 0.1, 1: 0.4, 2: 0.2}) == {0: 1, 1: 0, 2: 1}


def test_unmeasured_workers_count_as_typical():
    assert SpeedProportional(8).shares({0: 0.1, 1: float("nan")}) == {0: 4, 1: 4}


@pytest.mark.parametrize("bad", [dict(round_tasks=0), dict(round_tasks=4, min_tasks=-1),
                                 dict(round_tasks=4, memory_budget=0),
                                 dict(round_tasks=4, memory_budget=[1, 0]),
                                 dict(round_tasks=4, alpha=0)])
def test_speed_proportional_rejects_impossible_settings(bad):
    with pytest.raises(ValueError, match=r"need|every budget must be"):
        SpeedProportional(**bad)


def test_smoothed_time_at_the_shipped_alpha_follows_a_slowdown_and_ignores_one_slow_task():
    from tf_hetero.policies.estimate import DEFAULT_ALPHA, SHIFT

    assert SpeedProportional(4).alpha == DEFAULT_ALPHA  # what H-PS ships
    slow = [1.0] + [0.1] * 10 + [0.4] * 2
    assert smoothed_time(slow) == pytest.approx(0.4)  # two 4x tasks: the new level at once
    assert smoothed_time(slow[:-1]) == pytest.approx(0.1)  # one: not yet
    jitter = [1.0] + [0.1] * 10 + [0.15]  # one task 50% slow (jitter) moves it by 15% only
    assert smoothed_time(jitter) == pytest.approx(0.115)
    assert SHIFT > 1.5


def test_one_transient_slow_or_fast_task_leaves_the_estimate_and_two_in_a_row_move_it():
    # The transient scenario (10% of tasks 5x slow): plain smoothing raised the estimate
    # 2.2x on one slow task and shrank that worker's share for rounds.
    spike = [1.0] + [0.1] * 10 + [0.5] + [0.1] * 2
    assert smoothed_time(spike) == pytest.approx(0.1)
    assert smoothed_time(spike, shift=None) > 0.15  # what the rule removes
    partial = [1.0] + [0.4] * 6 + [0.1] + [0.4]  # e.g. an epoch's last task, half empty
    assert smoothed_time(partial) == pytest.approx(0.4)
    assert smoothed_time(partial, shift=None) < 0.35
    recovered = [1.0] + [0.4] * 6 + [0.1] * 2
    assert smoothed_time(recovered) == pytest.approx(0.1)
    assert smoothed_time(recovered, shift=None) > 0.2
    mixed = [1.0] + [0.1] * 4 + [0.5, 0.02, 0.1]  # a slow then a fast outlier: neither kept
    assert smoothed_time(mixed) == pytest.approx(0.1)


def test_a_stall_of_the_whole_cluster_in_the_first_warm_tasks_does_not_even_out_speeds():
    # One stalled task at the start of every worker's history (a late registration, a
    # collection on the chief): with the estimate seeded by the first warm task alone, a
    # 4x speed difference read as 1.4x after four more tasks, and shares stayed even.
    stall = 2.0
    fast = [1.0, stall] + [0.1] * 4
    slow = [1.0, stall] + [0.4] * 4
    assert smoothed_time(slow) / smoothed_time(fast) == pytest.approx(4.0)


@pytest.mark.parametrize("alpha, shift", [(0.3, 2.0), (0.5, 2.0), (0.3, None), (1.0, 1.5)])
def test_the_incremental_estimate_is_smoothed_time_after_every_task(alpha, shift):
    # Levels, lone outliers both ways, confirmed shifts and a stalled start, 40 histories.
    from tf_hetero.policies.estimate import Smoother

    rng = random.Random(7)
    for _ in range(40):
        level, history, s = rng.choice([0.05, 0.1, 0.4]), [], Smoother(alpha, shift)
        for i in range(rng.randint(0, 60)):
            if rng.random() < 0.05:
                level *= rng.choice([0.25, 4.0])
            x = level * rng.uniform(0.8, 1.2) * (rng.choice([0.2, 5.0]) if rng.random() < 0.1 else 1)
            history.append(x if i else 3.0)  # the first task traces
            s.add(history[-1])
            want = smoothed_time(history, alpha, shift)
            assert s.value == want or (want != want and s.value != s.value), (history, s.value)


def test_the_monitor_keeps_each_workers_estimate_as_tasks_are_recorded():
    from tf_hetero.telemetry.monitor import Monitor

    m = Monitor(2)
    for i, d in enumerate([1.0, 0.1, 0.12, 0.1, 0.5, 0.45, 0.5]):
        m.record_task(0, 0.0, d, applied=True, staleness=0, size=2)
        assert m.smoothed(0, 0.3) == smoothed_time(m.durations(0), 0.3)
        assert m.smoothed(0, 0.5, units=True) == smoothed_time(m.unit_times(0), 0.5)
    assert m.smoothed(1, 0.3) != m.smoothed(1, 0.3)  # NaN: nothing measured
