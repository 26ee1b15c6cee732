"""H-PS pieces without a cluster: speed-proportional shares, local accumulation and pushes in
the round engine, and the gradient codecs (TensorFlow ops, eager, no cluster)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tf_hetero.engine import PUSH_ALL, PUSH_OLD, LocalAccumulation, RoundContext, RoundEngine
from tf_hetero.policies import AllTasks, SpeedProportional, smoothed_time
from tf_hetero.telemetry import Monitor

from fakes import FakeClock, FakeDispatcher
from test_engine import run


def make_hps(num_workers, round_tasks, local="strict", times=None, **kw):
    clock = FakeClock()
    d = FakeDispatcher()
    m = Monitor(num_workers, clock=clock)
    for w, t in (times or {}).items():  # two measured tasks: the first one is left out
        m.record_task(w, 0.0, 1.0, True, 0)
        m.record_task(w, 0.0, t, True, 0)
    e = RoundEngine(num_workers, AllTasks(), SpeedProportional(round_tasks, **kw), d,
                    monitor=m, clock=clock, components=[LocalAccumulation(local)])
    e.held = e.components[0].held  # the component's count of buffered micro-batches
    return e, d, m, clock


def finish_round(e, d, round_id, order=None):
    tasks = d.tasks_of_round(round_id)
    for t in (order or tasks):
        run(e, t)
    return tasks


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


def test_engine_rejects_an_unknown_local_mode():
    with pytest.raises(ValueError, match="local='fast'"):
        LocalAccumulation("fast")


# ---------------------------------------------------------------------------- codecs
tf = pytest.importorskip("tensorflow")
from tf_hetero.strategies.runtime import quantize  # noqa: E402


@pytest.mark.parametrize("name, ratio", [("fp32", 1.0), ("fp16", 2.0), ("int8", 3.99),
                                         ("int4", 7.99)])
def test_payload_bytes_shrink_with_the_codec(name, ratio):
    codec = quantize.get(name)
    n = 17_000
    payload = codec.encode(tf.random.normal([n]))
    wire = sum(int(np.prod(p.shape)) * p.dtype.size for p in payload)
    assert wire == codec.payload_bytes(n)
    assert 4 * n / wire >= ratio


@pytest.mark.parametrize("name", ["int8", "int4"])
def test_stochastic_rounding_is_unbiased(name):
    codec = quantize.get(name)
    x = tf.constant(np.linspace(-1, 1, 101), tf.float32)
    mean = tf.add_n([codec.decode(codec.encode(x), x.shape) for _ in range(400)]) / 400
    step = 1.0 / codec.levels
    assert float(tf.reduce_max(tf.abs(mean - x))) < 0.2 * step


@pytest.mark.parametrize("name", ["fp16", "int8", "int4"])
def test_decode_round_trips_shape_and_error_bound(name):
    codec = quantize.get(name)
    x = tf.random.normal([3, 5, 7])
    y = codec.decode(codec.encode(x), x.shape)
    assert y.shape == x.shape
    bound = float(tf.reduce_max(tf.abs(x))) / getattr(codec, "levels", 1000)
    assert float(tf.reduce_max(tf.abs(y - x))) <= bound + 1e-3


def test_error_feedback_keeps_the_sum_of_pushes_on_the_sum_of_gradients():
    codec = quantize.get("int4")
    residual = tf.zeros([64])
    total = sent = tf.zeros([64])
    for i in range(30):
        g = tf.random.stateless_normal([64], seed=[i, 0]) * 0.01
        payload, residual = quantize.compress(codec, g, residual)
        total, sent = total + g, sent + codec.decode(payload, [64])
    drift = float(tf.reduce_max(tf.abs(total - sent)))
    assert drift == pytest.approx(float(tf.reduce_max(tf.abs(residual))), abs=1e-5)
    assert drift < 0.05


def test_unknown_codec_names_the_choices():
    with pytest.raises(ValueError, match="quantize='int3'.*int8"):
        quantize.get("int3")


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
