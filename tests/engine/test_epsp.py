"""The engine's EPSP mechanisms, without TensorFlow: pulled tasks, elastic participation,
task transfer (first copy wins), slack close, folding late gradients, fold-only rounds."""

from __future__ import annotations

import pytest

from tf_hetero.engine import LateFolding, RoundEngine, TaskTransfer
from tf_hetero.policies import (AllTasks, BalancedBatches, ElasticParallelism, SlackSync,
                                StalenessWeight, StragglerProjection, TransferAfter)
from tf_hetero.telemetry import Monitor

from support.fakes import FakeClock, FakeDispatcher as Dispatcher


def epsp(n=3, tasks=3, slack=False, late=None, transfer=None, history=None):
    clock = FakeClock()
    d = Dispatcher()
    m = Monitor(n, clock=clock)
    for w, seconds in (history or {}).items():  # past task times: the projection's input
        for _ in range(4):
            m.record_task(w, 0.0, seconds, True, 0)
    assign = ElasticParallelism(tasks, StragglerProjection(window=4), probe_every=100,
                                keep_stragglers=slack)
    components = [TaskTransfer(transfer, extra_lanes=n)] if transfer else []
    components += [LateFolding(late)] if late else []
    e = RoundEngine(n, SlackSync(0.6) if slack else AllTasks(), assign, d, monitor=m,
                    clock=clock, components=components)
    return e, d, m, clock


def _folding(e):
    return next(c for c in e.components if isinstance(c, LateFolding))


def finish(e, clock, task, worker, dt=0.1):
    e.task_started(task, worker)
    clock.advance(dt)
    e.task_finished(task, worker)


def test_pulled_tasks_go_to_free_workers_and_a_fast_one_takes_more():
    e, d, _, clock = epsp(3, tasks=4)
    tasks = [e.submit(i) for i in range(4)]
    assert [w for _, w, _ in d.dispatched] == [0, 1, 2]  # the 4th waits for a free worker
    finish(e, clock, tasks[0], 0)
    assert d.dispatched[-1][1] == 0  # worker 0 was free first: it pulls the 4th task
    assert sorted(t.worker or t.pinned for t in tasks) == [0, 0, 1, 2]


def test_projected_straggler_sits_out_an_enforced_round_and_its_projection_is_logged():
    e, d, _, _ = epsp(3, tasks=3, history={0: 0.1, 1: 0.1, 2: 0.4})
    [e.submit(i) for i in range(3)]
    info = e.rounds[0].info
    assert info["stragglers"] == (2,) and info["participants"] == (0, 1)
    assert info["projection"][2][0] == pytest.approx(0.4)
    assert 2 not in {w for _, w, _ in d.dispatched}


def test_slack_keeps_stragglers_taking_part():
    e, d, _, _ = epsp(3, tasks=3, slack=True, history={0: 0.1, 1: 0.1, 2: 0.4})
    [e.submit(i) for i in range(3)]
    assert e.rounds[0].info["participants"] == (0, 1, 2)


def test_transfer_copies_a_long_task_to_an_idle_pioneer_and_the_first_copy_wins():
    e, d, m, clock = epsp(3, tasks=3, transfer=TransferAfter(1.5),
                          history={0: 0.1, 1: 0.1, 2: 0.1})
    t = [e.submit(i) for i in range(3)]
    for task, w in zip(t, (0, 1, 2)):
        e.task_started(task, w)
    clock.advance(0.1)
    e.task_finished(t[0], 0)
    e.task_finished(t[1], 1)
    assert not e.rounds[0].copies  # 0.1 s is not long yet
    clock.advance(0.1)  # t[2] has run 0.2 s > 1.5 x 0.1 s
    e.tick()
    (copy,) = e.rounds[0].copies
    assert copy.twin is t[2] and copy.lane >= 3 and copy.pinned in (0, 1)
    e.task_started(copy, copy.pinned)
    clock.advance(0.05)
    e.task_finished(copy, copy.pinned)  # the copy wins: the round closes with its lane
    assert e.rounds[0].closed and copy.lane in e.rounds[0].lanes and 2 not in e.rounds[0].lanes
    e.task_finished(t[2], 2)  # the original loses: dropped, never applied
    assert t[2].state == "dropped" and copy.state == "done"
    assert [e for e in m.events if e[1] == "transfer"]


def test_slack_round_closes_at_its_quorum_and_folds_the_late_gradient_later():
    e, d, m, clock = epsp(3, tasks=3, slack=True, late=StalenessWeight(max_staleness=4))
    t = [e.submit(i) for i in range(6)]
    for task, w in zip(t[:3], (0, 1, 2)):
        e.task_started(task, w)
    clock.advance(0.1)
    e.task_finished(t[0], 0)
    e.task_finished(t[1], 1)  # 2 of 3 >= quorum 0.6: closes without worker 2
    assert e.rounds[0].closed and e.rounds[0].lanes == {0: 1, 1: 1}
    e.apply_finished(0, 2)
    e.task_finished(t[2], 2)  # late: held for a fold; worker 2 gets no task of slot 0 now
    assert t[2].state == "late" and (2, 0) in _folding(e).waiting
    r1 = e.rounds[1]
    for task in r1.tasks:
        finish(e, clock, task, task.pinned)
    assert d.folds[-1] == (1, {(2, 0): (0, 0.5)})  # staleness 1: weight 1/2
    assert t[2].state == "folded"
    folded = [r for r in m.tasks if r.staleness == 1]
    assert folded and folded[0].worker == 2


def test_late_gradients_are_dropped_without_a_late_policy():
    e, d, m, clock = epsp(3, tasks=3, slack=True, late=None)
    t = [e.submit(i) for i in range(3)]
    for task, w in zip(t, (0, 1, 2)):
        e.task_started(task, w)
    e.task_finished(t[0], 0)
    e.task_finished(t[1], 1)
    e.task_finished(t[2], 2)
    assert t[2].state == "dropped" and not any(isinstance(c, LateFolding) and c.waiting for c in e.components)


def test_a_fold_waiting_at_the_end_gets_a_fold_only_round():
    e, d, m, clock = epsp(3, tasks=3, slack=True, late=StalenessWeight())
    t = [e.submit(i) for i in range(3)]
    for task, w in zip(t, (0, 1, 2)):
        e.task_started(task, w)
    e.task_finished(t[0], 0)
    e.task_finished(t[1], 1)
    e.apply_finished(0, 2)
    e.task_finished(t[2], 2)
    assert not e.idle()  # a late gradient still waits
    e.flush()
    assert e.rounds[-1].info == {"fold_only": True} and d.folds[-1][1] == {(2, 0): (0, 0.5)}
    e.apply_finished(e.rounds[-1].id, 1)
    assert e.idle() and t[2].state == "folded"


def test_epsp_policies_reject_impossible_settings():
    with pytest.raises(ValueError, match=r"round_tasks=0"):
        ElasticParallelism(0)
    with pytest.raises(ValueError, match=r"quorum=1.5"):
        SlackSync(1.5)
    with pytest.raises(ValueError, match=r"factor=1"):
        TransferAfter(1)
    with pytest.raises(ValueError, match=r"max_staleness=0"):
        StalenessWeight(0)
    assert StalenessWeight(2).weight(3) == 0.0 and StalenessWeight(2).weight(1) == 0.5


def sized_slack(n=3):
    """Slack EPSP with sized rounds (one pinned task per participant, as shipped)."""
    clock = FakeClock()
    d = Dispatcher()
    m = Monitor(n, clock=clock)
    assign = ElasticParallelism(n, StragglerProjection(window=4), probe_every=100,
                                keep_stragglers=True, batches=BalancedBatches(units=n))
    e = RoundEngine(n, SlackSync(0.6), assign, d, monitor=m, clock=clock,
                    components=[LateFolding(StalenessWeight(max_staleness=4))])
    return e, d, clock


def test_a_late_task_still_running_keeps_its_lane_out_of_the_next_round_of_its_slot():
    """Round 0 (slot 0) closes without worker 2; round 1 (slot 1) closes without it too, and
    round 2 writes slot 0 again while worker 2 still computes round 0's gradient there. A
    task of round 2 on worker 2 would overwrite that late gradient before round 2's apply
    folds it (seen in chaos runs: the fold then applied nothing), so round 2 leaves it out."""
    e, d, clock = sized_slack(3)
    for i in range(9):
        e.submit(i)
    r0 = e.rounds[0]
    late = next(x for x in r0.tasks if x.pinned == 2)
    for x in r0.tasks:
        e.task_started(x, x.pinned)
    clock.advance(0.1)
    for x in r0.tasks:
        if x is not late:
            e.task_finished(x, x.pinned)
    assert r0.closed and r0.slot == 0 and set(r0.lanes) == {0, 1}
    e.apply_finished(0, 2)
    r1 = e.rounds[1]
    assert r1.slot == 1
    for x in [x for x in r1.tasks if x.pinned != 2]:
        finish(e, clock, x, x.pinned)
    assert r1.closed
    e.apply_finished(1, 2)
    r2 = e.rounds[2]
    assert r2.slot == 0 and late.state == "running"
    assert {x.pinned for x in r2.tasks} == {0, 1}  # worker 2's slot-0 lane is still busy
    e.task_finished(late, 2)  # round 0's gradient, late: waits in lane (2, 0)
    assert late.state == "late"
    for x in r2.tasks:
        finish(e, clock, x, x.pinned)
    assert d.folds[-1] == (2, {(2, 0): (0, pytest.approx(1 / 3))})  # staleness 2
    assert late.state == "folded"


def test_a_waiting_late_gradient_keeps_its_worker_out_of_rounds_writing_its_lane():
    e, d, clock = sized_slack(3)
    [e.submit(i) for i in range(9)]
    r0 = e.rounds[0]
    late = next(x for x in r0.tasks if x.pinned == 2)
    e.task_started(late, 2)
    for x in r0.tasks:
        if x is not late:
            finish(e, clock, x, x.pinned)
    e.apply_finished(0, 2)
    r1 = e.rounds[1]
    for x in [x for x in r1.tasks if x.pinned != 2]:
        finish(e, clock, x, x.pinned)
    e.task_finished(late, 2)  # after round 1 closed: folded by the next round, round 2
    e.apply_finished(1, 2)
    r2 = e.rounds[2]
    assert r2.slot == 0 and 2 not in {x.pinned for x in r2.tasks}


def test_a_fold_only_round_steps_a_late_share_as_much_as_a_full_round_would():
    """The late share (1 unit of its round's 3, weight 1/2 at staleness 1) takes 1/6 of the
    round's step, as it would folded into a full round; not the whole step on its own mean."""
    from tf_hetero.policies.scale import SampledScale

    clock, d = FakeClock(), Dispatcher()
    e = RoundEngine(3, SlackSync(0.6), ElasticParallelism(3, StragglerProjection(window=4),
                                                          probe_every=100, keep_stragglers=True),
                    d, monitor=Monitor(3, clock=clock), clock=clock,
                    components=[LateFolding(StalenessWeight())], update_scale=SampledScale())
    t = [e.submit(i) for i in range(3)]
    for task, w in zip(t, (0, 1, 2)):
        e.task_started(task, w)
    e.task_finished(t[0], 0)
    e.task_finished(t[1], 1)  # the quorum: round 0 closes on 2 of its 3 units
    assert e.rounds[0].scale == pytest.approx(2 / 3)
    e.apply_finished(0, 2)
    e.task_finished(t[2], 2)
    e.flush()
    fold = e.rounds[-1]
    assert fold.info["fold_only"] and fold.scale == pytest.approx(0.5 * 1 / 3)


def test_when_every_live_worker_holds_a_late_gradient_a_fold_only_round_applies_them():
    """Worker 1's late gradient waits in slot 0 and worker 0 is dead: the next round (slot 0)
    has no worker it may give a task to, so it folds what waits instead of waiting for
    worker 0 to come back."""
    clock = FakeClock()
    d = Dispatcher()
    assign = ElasticParallelism(2, StragglerProjection(window=4), probe_every=100,
                                keep_stragglers=True, batches=BalancedBatches(units=2))
    e = RoundEngine(2, SlackSync(0.5), assign, d, monitor=Monitor(2, clock=clock), clock=clock,
                    components=[LateFolding(StalenessWeight(max_staleness=4))])
    [e.submit(i) for i in range(8)]
    r0 = e.rounds[0]
    late = next(x for x in r0.tasks if x.pinned == 1)
    e.task_started(late, 1)
    finish(e, clock, next(x for x in r0.tasks if x.pinned == 0), 0)  # 1 of 2: closes
    e.apply_finished(0, 1)
    finish(e, clock, next(x for x in e.rounds[1].tasks if x.pinned == 0), 0)
    e.task_finished(late, 1)  # round 1 closed already: waits in lane (1, 0)
    e.worker_failed(0)
    e.apply_finished(1, 1)
    fold = e.rounds[2]
    assert fold.kind == "fold" and not fold.tasks
    assert d.folds[-1][1] == {(1, 0): (0, pytest.approx(1 / 3))}  # staleness 2
    e.apply_finished(2, 1)
    assert [x.pinned for x in e.rounds[3].tasks] == [1] and e.rounds[3].slot == 1


def test_a_late_lane_whose_writer_died_is_settled_when_tf_runs_the_writer_again_elsewhere():
    """Worker 0 finished one task of round 0 and still writes a second one into lane 0 when
    the round closes: the first is late. Worker 0 dies and TF runs the second task again on
    worker 1, after the close: that run writes nothing, and lane 0 may hold part of the dead
    run's write, so the late gradient cannot be folded. It is dropped, not left late for
    ever (seen in a CI chaos run of epspslack: a task still "late" after fit)."""
    e, d, m, clock = epsp(3, tasks=4, slack=True, late=StalenessWeight(max_staleness=4))
    t = [e.submit(i) for i in range(4)]
    finish(e, clock, t[0], 0)
    assert t[3].pinned == 0  # worker 0 was free first: it pulls the fourth task
    e.task_started(t[3], 0)
    finish(e, clock, t[1], 1)
    finish(e, clock, t[2], 2)  # 3 of 4 done: the round closes while lane 0 is written
    assert e.rounds[0].closed and e.rounds[0].lanes == {1: 1, 2: 1} and t[0].state == "late"
    e.worker_failed(0)
    assert e.task_started(t[3], 1) is False  # TF's re-run, after the close: stale
    e.task_finished(t[3], 1)
    assert [str(x.state) for x in t] == ["dropped", "done", "done", "dropped"]
    assert not _folding(e).waiting
    e.apply_finished(0, 2)
    assert e.idle()


def sized_enforced(n=3, keep_stragglers=False):
    """Enforced EPSP with sized rounds and task transfer (as shipped)."""
    clock = FakeClock()
    d = Dispatcher()
    m = Monitor(n, clock=clock)
    for w in range(n):  # warm histories: every worker equally fast
        for _ in range(4):
            m.record_task(w, 0.0, 0.1, True, 0)
    assign = ElasticParallelism(n, StragglerProjection(window=4), probe_every=100,
                                keep_stragglers=keep_stragglers,
                                batches=BalancedBatches(units=2 * n))
    e = RoundEngine(n, AllTasks(), assign, d, monitor=m, clock=clock,
                    components=[TaskTransfer(TransferAfter(1.5), extra_lanes=n)])
    return e, d, clock


@pytest.mark.parametrize("keep", [False, True])
def test_a_worker_still_running_a_task_its_copy_beat_sits_the_next_enforced_round_out(keep):
    # Transient scenario: worker 2's task runs 5x long, a copy on worker 0 wins, and worker 2
    # keeps computing the lost task. A share of the next round sized for worker 2 would start
    # only when that task ends and hold the whole round (+1 round per transient straggler in
    # the simulator); enforced rounds leave it out and the others split the global batch.
    e, d, clock = sized_enforced(3, keep_stragglers=keep)
    [e.submit(i) for i in range(9)]
    r0 = e.rounds[0]
    for x in r0.tasks:
        e.task_started(x, x.pinned)
    clock.advance(0.1)
    slow = next(x for x in r0.tasks if x.pinned == 2)
    for x in r0.tasks:
        if x is not slow:
            e.task_finished(x, x.pinned)
    clock.advance(0.3)  # 0.4 s > 1.5 x the projected 0.2 s (2 units of 0.1 s)
    e.tick()
    (copy,) = r0.copies
    e.task_started(copy, copy.pinned)
    clock.advance(0.1)
    e.task_finished(copy, copy.pinned)
    assert r0.closed and slow.state == "running"
    e.apply_finished(0, 6)
    r1 = e.rounds[1]
    if keep:  # the rule is enforced sync's: with keep_stragglers every live worker takes part
        assert {x.pinned for x in r1.tasks} == {0, 1, 2}
        return
    assert {x.pinned for x in r1.tasks} == {0, 1}
    assert sum(x.size for x in r1.tasks) == 6  # the global batch, split by the two others
    assert r1.info["busy"] == (2,) and r1.info["participants"] == (0, 1)


@pytest.mark.parametrize("step_units", [2, None])
def test_a_round_a_straggler_sits_out_still_covers_its_global_batch_of_steps(step_units):
    # 3 workers, a global batch of 3 steps (2 units each): with worker 2 sitting out, the two
    # pioneers read all 6 units, so the round covers 3 of fit's steps; the third is absorbed
    # (ends with the pioneer's result) instead of opening a second round that reads 6 more.
    # Without step_units (a round then covers one step per task) 9 steps make 5 rounds, not 3.
    e, d, m, clock = epsp(3, history={0: 0.1, 1: 0.1, 2: 0.4})
    e.books[0].assign = ElasticParallelism(3, StragglerProjection(window=4), probe_every=100,
                                           batches=BalancedBatches(6, step_units=step_units))
    tasks = [e.submit(i) for i in range(9)]
    e.flush()
    for _ in range(9):
        for task, w, _ in list(d.dispatched):
            if task.state == "dispatched":
                finish(e, clock, task, w)
        for r in e.rounds:
            if r.closed and r.applied < 0:
                e.apply_finished(r.id, sum(r.lanes.values()))
    assert e.idle()
    sizes = [sum(t.size for t in r.tasks) for r in e.rounds]
    if step_units is None:
        assert len(e.rounds) == 5 and sum(sizes) > 18  # over budget: the defect
        return
    assert len(e.rounds) == 3 and sizes == [6, 6, 6]  # 9 steps x 2 units, no more
    absorbed = [t for t in tasks if t.state == "absorbed"]
    assert len(absorbed) == 3 and all(r.info["absorbed"] == 1 for r in e.rounds)
    for task, like in d.absorbed:  # each ends with a task of its own round
        assert like in e.rounds[task.round].tasks
