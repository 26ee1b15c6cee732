"""Grouped sync on the round engine (pure Python): one book per group, groups that never wait
for each other, regrouping between rounds with no gradient lost or applied twice, staleness
and the per-group update scale."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from tf_hetero.engine import RoundEngine
from tf_hetero.policies import AllTasks, BalancedBatches, ElasticParallelism, OnePerWorker
from tf_hetero.policies.group import FixedGroups, GroupContext, SpeedGroups, normalize_groups
from tf_hetero.policies.scale import GroupScale
from tf_hetero.telemetry import Monitor

from support.fakes import FakeClock, FakeDispatcher, play


def grouped(num_workers, grouping, scale=None):
    clock = FakeClock()
    d = FakeDispatcher()
    m = Monitor(num_workers, clock=clock)
    e = RoundEngine(num_workers, AllTasks(), OnePerWorker(), d, monitor=m, clock=clock,
                    grouping=grouping, update_scale=scale)
    return e, d, m, clock


def run(e, task, clock=None, dt=0.0):
    e.task_started(task, task.pinned)
    if clock is not None:
        clock.advance(dt)
    e.task_finished(task, task.pinned)


def test_a_straggler_group_holds_up_only_itself():
    e, d, _, _ = grouped(4, FixedGroups([[0, 1, 2], [3]]))
    assert e.groups == ((0, 1, 2), (3,))
    tasks = [e.submit(i) for i in range(12)]
    slow = [t for t in tasks if t.pinned == 3]
    assert len(slow) == 1  # the lone group took one task, the other group three
    for _ in range(3):  # the fast group runs three rounds while the straggler's task runs
        for t in [t for t, w, _ in d.dispatched if w != 3 and t.state == "dispatched"]:
            run(e, t)
        rnd = d.applies[-1][0]
        e.apply_finished(rnd, 3)
    assert [e.rounds[r].book for r, _ in d.applies] == [0, 0, 0]
    assert slow[0].state == "dispatched"  # still running: nobody waited for it
    run(e, slow[0])
    assert d.applies[-1][1] == {3: 1}


def test_staleness_counts_other_groups_updates_and_sets_the_round_scale():
    e, d, m, _ = grouped(4, FixedGroups([[0, 1, 2], [3]]), GroupScale("linear", "inverse"))
    tasks = [e.submit(i) for i in range(8)]
    slow = next(t for t in tasks if t.pinned == 3)
    e.task_started(slow, 3)  # reads the model now
    for _ in range(2):
        for t in [t for t, w, _ in d.dispatched if w != 3 and t.state == "dispatched"]:
            run(e, t)
        rnd = e.rounds[d.applies[-1][0]]
        assert rnd.info["staleness"] == 0 and rnd.scale == pytest.approx(3 / 4)
        e.apply_finished(rnd.id, 3)
    e.task_finished(slow, 3)
    rnd = e.rounds[d.applies[-1][0]]
    assert rnd.info["staleness"] == 2  # the other group applied twice since it started
    assert rnd.scale == pytest.approx(1 / 4 / 3)  # linear rule (1 of 4) x 1 / (1 + 2)
    assert rnd.info["group"] == [3]
    assert max(t.staleness for t in m.tasks) == 2


class RandomGroups:
    """Proposes a random partition after every applied round (seeded): regroups as often as
    the engine lets it."""

    def __init__(self, n, seed):
        self.n, self.rng = n, random.Random(seed)

    def groups(self, ctx):
        workers = list(range(self.n))
        self.rng.shuffle(workers)
        cuts = sorted(self.rng.sample(range(1, self.n), self.rng.randint(0, self.n - 1)))
        return [workers[a:b] for a, b in zip([0] + cuts, cuts + [self.n])]


@pytest.mark.parametrize("seed", range(12))
def test_random_schedules_and_regroups_apply_every_task_exactly_once(seed):
    rng = random.Random(seed)
    n, total = 5, 80
    e, d, m, clock = grouped(n, RandomGroups(n, seed))
    submitted = play(e, d, total, rng, clock=clock)
    regroups = [f for _, name, f in m.events if name == "regroup"]
    assert len(regroups) >= 3  # the feature ran
    tasks = [t for r in e.rounds for t in r.tasks]
    assert len(tasks) == len({id(t) for t in tasks}) == total  # none lost, none twice
    assert all(t.state == "done" for t in submitted)
    assert sum(r.applied for r in e.rounds) == total
    # A round's tasks ran on the workers of its group only.
    for r in e.rounds:
        assert {t.worker for t in r.tasks} <= set(r.info["group"])
    # Regrouping waited for every round to be applied: each round opened and was applied
    # between two regroups (books of one grouping never overlap with the next grouping's).
    times = [t for t, name, _ in m.events if name == "regroup"]
    for r in e.rounds:
        before = [t for t in times if t <= r.t_open]
        after = [t for t in times if t > r.t_open]
        assert not after or r.t_applied <= after[0], (r.id, r.t_open, r.t_applied, after[0])
        assert r.book >= len(before)  # a book formed at or after the last regroup before it


def test_one_group_is_bsp():
    e, d, _, _ = grouped(3, SpeedGroups(1))
    tasks = [e.submit(i) for i in range(3)]
    assert [w for _, w, _ in d.dispatched] == [0, 1, 2]
    for t in tasks:
        run(e, t)
    assert d.applies == [(0, {0: 1, 1: 1, 2: 1})]


def test_grouping_refuses_a_policy_that_sizes_one_global_batch():
    with pytest.raises(ValueError, match="groups need one that plans per group"):
        RoundEngine(2, AllTasks(), ElasticParallelism(2, batches=BalancedBatches(4)),
                    FakeDispatcher(), grouping=FixedGroups([[0], [1]]))


# ------------------------------------------------------ batch sizes inside a group
def sized(num_workers, grouping, step_units=2):
    """Grouped sync with per-member batch sizes: a global batch of one dataset batch
    (``step_units`` units) per worker, each group splitting its members' share."""
    clock = FakeClock()
    d = FakeDispatcher()
    m = Monitor(num_workers, clock=clock)
    e = RoundEngine(num_workers, AllTasks(), BalancedBatches(num_workers * step_units,
                                                             step_units=step_units),
                    d, monitor=m, clock=clock, grouping=grouping)
    return e, d, m, clock


def drive(engine, dispatcher, clock, unit_s, max_waves=50):
    """Runs every dispatched task (``unit_s[w]`` seconds per unit on worker ``w``) and
    every apply, wave after wave, until nothing is dispatched."""
    for _ in range(max_waves):
        live = [(t, w) for t, w, _ in dispatcher.dispatched if t.state == "dispatched"]
        if not live:
            return
        for t, w in live:
            engine.task_started(t, w)
            clock.advance(unit_s[w] * t.size)
            engine.task_finished(t, w)
        for r in engine.rounds:
            if r.closed and r.applied < 0:
                engine.apply_finished(r.id, sum(r.lanes.values()))
    raise AssertionError("tasks still dispatched after max_waves")


def test_a_group_splits_its_members_batches_by_speed_and_covers_their_steps():
    # Worker 1 is 2x slower than worker 0, in one group; worker 2 alone. The pair's round
    # reads the pair's 2 dataset batches (4 units) as 3 + 1 once speeds are measured (even
    # before), so both finish together; it covers 2 of fit's steps in 2 tasks.
    e, d, m, clock = sized(3, FixedGroups([[0, 1], [2]]))
    unit_s = {0: 0.01, 1: 0.03, 2: 0.01}
    tasks = [e.submit(i) for i in range(12)]
    drive(e, d, clock, unit_s)
    assert all(t.state == "done" for t in tasks)
    pair = [r for r in e.rounds if r.info["group"] == [0, 1]]
    assert [sum(t.size for t in r.tasks) for r in pair] == [4] * len(pair)
    assert pair[0].info["sizes"] == {0: 2, 1: 2}  # nothing measured yet: even
    assert pair[-1].info["sizes"] == {0: 3, 1: 1}  # then by speed
    assert all(r.applied == 4 for r in pair)
    lone = [r for r in e.rounds if r.info["group"] == [2]]
    assert all(r.info["sizes"] == {2: 2} and r.applied == 2 for r in lone)
    assert 2 * len(pair) + len(lone) == 12  # every step in one round, none absorbed


def test_one_sized_group_plans_as_h_ps():
    # One group of all workers with sized rounds is H-PS's BalancedBatches, round for round.
    e, d, m, clock = sized(3, SpeedGroups(1))
    h_clock, h_d = FakeClock(), FakeDispatcher()
    h_m = Monitor(3, clock=h_clock)
    h = RoundEngine(3, AllTasks(), BalancedBatches(6, step_units=2), h_d, monitor=h_m,
                    clock=h_clock)
    unit_s = {0: 0.01, 1: 0.02, 2: 0.04}
    for engine, dispatcher, c in ((e, d, clock), (h, h_d, h_clock)):
        for i in range(30):
            engine.submit(i)
        drive(engine, dispatcher, c, unit_s)
    assert len(e.rounds) == len(h.rounds) == 10
    assert [r.info["sizes"] for r in e.rounds] == [r.info["sizes"] for r in h.rounds]
    assert e.rounds[-1].info["sizes"] != {0: 2, 1: 2, 2: 2}  # the speeds moved the split


@pytest.mark.parametrize("seed", range(8))
def test_sized_groups_read_every_step_once_across_random_regroups(seed):
    """Random schedules and a random regroup after every round: every step of fit is run or
    absorbed exactly once, every round's units are applied once, and a group's round reads
    its members' batches (group size x step units) except at the flush that ends the fit."""
    rng = random.Random(seed)
    n, total, step = 5, 80, 2
    e, d, m, clock = sized(n, RandomGroups(n, seed), step_units=step)
    submitted = play(e, d, total, rng, clock=clock)
    assert len([f for _, name, f in m.events if name == "regroup"]) >= 3
    ran = [t for r in e.rounds for t in r.tasks]
    absorbed = [t for r in e.rounds for t in r.absorbed]
    assert len(ran) + len(absorbed) == len({id(t) for t in ran + absorbed}) == total
    assert all(t.state in ("done", "absorbed") for t in submitted)
    for r in e.rounds:
        group = r.info["group"]
        assert {t.worker for t in r.tasks} <= set(group)
        assert r.applied == sum(t.size for t in r.tasks)  # every unit read is applied once
        if len(r.tasks) + len(r.absorbed) == len(group):  # a full round (not the tail)
            assert sum(t.size for t in r.tasks) == len(group) * step


# ------------------------------------------------------------------- the policies
def test_speed_groups_split_stragglers_from_fast_workers():
    g = SpeedGroups(2)
    assert g.split({0: 0.1, 1: 0.4, 2: 0.1, 3: 0.1}) == ((0, 2, 3), (1,))
    assert SpeedGroups(3).split({0: 0.1, 1: 0.2, 2: 0.4, 3: 0.41}) == ((0,), (1,), (2, 3))
    assert SpeedGroups(2).by_index(5) == ((0, 1), (2, 3, 4))


def _split_by_enumeration(times, k):
    """Every split of the sorted workers into ``k`` contiguous groups, scored as
    :meth:`SpeedGroups.split` scores them (squared error of the log times, each group from
    its own mean): the lowest, and among those within 1e-12 of it the earliest cuts."""
    order = sorted(times, key=lambda w: (times[w], w))
    x = [math.log(times[w]) for w in order]
    n, k = len(x), min(k, len(x))

    def sse(seg):
        m = sum(seg) / len(seg)
        return sum((v - m) ** 2 for v in seg)

    scored = []
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = (0, *cuts, n)
        scored.append((sum(sse(x[a:b]) for a, b in zip(bounds, bounds[1:])), bounds))
    low = min(c for c, _ in scored)
    # The earliest cut first, from the last group back (the dynamic programme's rule).
    ties = [b for c, b in scored if c <= low + 1e-12]
    bounds = max(ties, key=lambda b: tuple(-v for v in reversed(b)))
    return normalize_groups([order[a:b] for a, b in zip(bounds, bounds[1:])])


@pytest.mark.parametrize("seed", range(3))
def test_speed_groups_split_is_the_best_split_with_ties_to_the_earliest_cut(seed):
    """The split computed from prefix sums equals the best of every contiguous split, scored
    group by group: on random speeds, on a few speeds with jitter, and on exact ties (equal
    workers: which of equal-cost splits is picked decides the groups)."""
    rng = random.Random(seed)
    for trial in range(150):
        n, k = rng.randint(1, 9), rng.randint(1, 4)
        kind = trial % 3
        if kind == 0:
            times = {w: rng.choice([0.1, 0.2, 0.4]) for w in range(n)}
        elif kind == 1:
            times = {w: rng.choice([0.1, 0.4]) * rng.uniform(0.95, 1.05) for w in range(n)}
        else:
            times = {w: rng.lognormvariate(-2, 0.7) for w in range(n)}
        assert SpeedGroups(k).split(times) == _split_by_enumeration(times, k), times


def test_idle_fraction_takes_each_groups_slowest_member():
    times = {0: 1.0, 1: 2.0, 2: 4.0, 3: 4.0}
    # (0, 1): 0.5 idle for worker 0; (2, 3): none.
    assert SpeedGroups.idle_fraction(times, ((0, 1), (2, 3))) == pytest.approx(0.5 / 4)


class _Times:
    def __init__(self, times):
        self.times = times

    def unit_times(self, w):
        return [self.times[w]] * 5


def test_speed_groups_regroup_when_speeds_change_but_not_every_round():
    g = SpeedGroups(2, every=3, min_gain=0.1)
    start = g.groups(GroupContext((0, 1, 2, 3), None, 0, None, 4))
    assert start == ((0, 1), (2, 3))
    monitor = _Times({0: 0.1, 1: 0.4, 2: 0.1, 3: 0.1})
    assert g.groups(GroupContext((0, 1, 2, 3), start, 5, monitor, 4)) == ((0, 2, 3), (1,))
    # Asked again one round later: too soon.
    assert g.groups(GroupContext((0, 1, 2, 3), start, 6, monitor, 4)) is None
    # The same split as now: nothing to do.
    now = ((0, 2, 3), (1,))
    assert g.groups(GroupContext((0, 1, 2, 3), now, 9, monitor, 4)) is None
    # A split barely better than the current one is not worth a regroup.
    close = _Times({0: 0.1, 1: 0.11, 2: 0.1, 3: 0.105})
    assert g.groups(GroupContext((0, 1, 2, 3), ((0, 1), (2, 3)), 20, close, 4)) is None


def test_group_settings_are_checked():
    with pytest.raises(ValueError, match="in two groups"):
        normalize_groups([[0, 1], [1]], 2)
    with pytest.raises(ValueError, match=r"missing \[2\]"):
        normalize_groups([[0, 1]], 3)
    with pytest.raises(ValueError, match="groups=0"):
        SpeedGroups(0)
    with pytest.raises(ValueError, match="lr_rule='sqrt'"):
        GroupScale("sqrt")
    with pytest.raises(ValueError, match="groups=5 with 4 workers"):
        SpeedGroups(5).groups(GroupContext((0, 1, 2, 3), None, 0, None, 4))


def test_a_round_closed_at_a_quorum_takes_a_step_in_proportion_to_its_samples():
    """EPSP slack: the lr is set for the whole round; a round that closes with 3 of its 4
    tasks in averages 3/4 of the samples, so it is scaled by 3/4 (SampledScale)."""
    from tf_hetero.policies import SampledScale, SlackSync

    clock = FakeClock()
    d = FakeDispatcher()
    e = RoundEngine(4, SlackSync(quorum=0.75), OnePerWorker(), d, clock=clock,
                    update_scale=SampledScale())
    tasks = [e.submit(i) for i in range(4)]
    for t in tasks[:3]:
        run(e, t)
    rnd = e.rounds[0]
    assert rnd.closed and rnd.scale == pytest.approx(0.75)


def test_a_policy_that_raises_stops_the_engine_with_its_error_instead_of_hanging():
    class Broken:
        def scale(self, group_size, num_workers, staleness):  # the pre-``fraction`` contract
            return 0.5

    e, d, _, _ = grouped(2, FixedGroups([[0, 1]]), Broken())
    tasks = [e.submit(i) for i in range(2)]
    for t in tasks:
        run(e, t)  # the close calls Broken.scale, which raises a TypeError
    with pytest.raises(Exception, match="a policy or component raised TypeError"):
        e.wait_idle(timeout=1.0)


def test_a_task_rerun_outside_its_group_writes_its_own_groups_lane():
    """DynSGD (one group per worker) under a worker kill: TF re-runs the dead worker's
    closure on any live worker. Written to that worker's lane, its gradient met the rounds
    of the worker's own group, which write that lane with their own slots, and one of the
    two applies found the other's round tag and applied nothing (seen in chaos runs). It
    writes the lane of the worker it was planned for: each round applies its own lane."""
    e, d, m, _ = grouped(3, FixedGroups([[0], [1], [2]]))
    tasks = [e.submit(i) for i in range(3)]
    mine = next(t for t in tasks if t.pinned == 0)
    other = next(t for t in tasks if t.pinned == 1)
    e.worker_failed(0)
    e.task_started(other, 1)
    assert e.task_started(mine, 1) is True and mine.lane_id == 0 and mine.overwrite
    e.task_finished(other, 1)
    e.task_finished(mine, 1)
    assert sorted(d.applies) == sorted([(other.round, {1: 1}), (mine.round, {0: 1})])
    assert [f for _, name, f in m.events if name == "foreign_run"] == [
        {"round": mine.round, "task": mine.id, "ran_on": 1, "lane": 0}]


def test_a_task_rerun_inside_its_group_adds_to_the_runners_lane():
    e, d, _, _ = grouped(3, FixedGroups([[0, 1], [2]]))
    tasks = [e.submit(i) for i in range(3)]
    mine = next(t for t in tasks if t.pinned == 0)
    e.worker_failed(0)
    for t in [t for t in tasks if t.pinned == 1] + [mine]:
        e.task_started(t, 1)
        e.task_finished(t, 1)
    assert d.applies[0] == (mine.round, {1: 2})  # same round, same slot: the lane adds up


# ------------------------------------------------------------- SSP over one book per worker
def ssp_engine(num_workers, staleness):
    """The engine as :class:`~tf_hetero.strategies.presets.SSPStrategy` builds it."""
    from tf_hetero.strategies import config as configs

    c = configs.ssp(num_workers, staleness=staleness)
    clock, d = FakeClock(), FakeDispatcher()
    e = RoundEngine(num_workers, c.sync, c.assign, d, gate=c.gate,
                    monitor=Monitor(num_workers, clock=clock), clock=clock,
                    components=c.components, grouping=c.grouping, update_scale=c.update_scale)
    return e, d


def test_ssp_a_worker_more_than_s_tasks_ahead_opens_no_round_until_the_slowest_catches_up():
    e, d = ssp_engine(2, staleness=1)
    tasks = [e.submit(i) for i in range(8)]
    slow = next(t for t in tasks if t.pinned == 1)
    e.task_started(slow, 1)
    for expected in (1, 2):
        fast = [t for t, w, _ in d.dispatched if w == 0][-1]
        run(e, fast)
        e.apply_finished(fast.round, 1)
        assert e.visible[0] == expected
    n = len(d.dispatched)
    assert e.visible == {0: 2, 1: 0} and len(d.dispatched) == n  # 2 > 0 + 1: worker 0 waits
    e.task_finished(slow, 1)  # the slowest finished, but its update has not landed yet
    assert len(d.dispatched) == n
    e.apply_finished(slow.round, 1)  # now it has: both may start again
    assert sorted(w for _, w, _ in d.dispatched[n:]) == [0, 1]


@pytest.mark.parametrize("seed", range(5))
def test_ssp_random_schedules_keep_the_bound_and_apply_every_task_once(seed):
    e, d = ssp_engine(3, staleness=1)
    ahead = []

    def check(task, worker):  # a task starts: how far its worker is ahead of the slowest
        ahead.append(e.visible[worker] - min(e.visible.values()))

    tasks = play(e, d, 60, random.Random(seed), on_start=check)
    assert max(ahead) <= 1
    assert sum(n for _, lanes in d.applies for n in lanes.values()) == len(tasks) == 60
    assert all(len(lanes) == 1 for _, lanes in d.applies)  # one task per update, unscaled
    assert {r.scale for r in e.rounds} == {1.0}


def test_ssp_over_many_books_asks_the_gate_once_per_pump_and_forms_the_groups_once(monkeypatch):
    """SSP is one book per worker: every pump asks the gate about every live worker, and every
    applied round (a task) asked for the books' groups. The bound's ``refused`` answers for all
    workers at once (``may_start`` per worker found the slowest worker each time: O(N^2) per
    pump, 3 ms of the chief's Python per task at 256 simulated workers), and the groups are
    kept until the books are re-formed (one O(N log N) pass per task before). Both asked per
    worker or per round again, this fails."""
    import tf_hetero.engine.books as books

    e, d = ssp_engine(6, staleness=1)
    asked, formed = [], []
    monkeypatch.setattr(type(e.gate), "may_start",
                        lambda self, w, clocks: asked.append(w) or True)
    normalize = books.normalize_groups
    monkeypatch.setattr(books, "normalize_groups",
                        lambda groups, *a: formed.append(1) or normalize(groups, *a))
    tasks = play(e, d, 60, random.Random(0))
    assert sum(n for _, lanes in d.applies for n in lanes.values()) == len(tasks) == 60
    assert asked == []  # every answer from refused()
    assert len(formed) <= 1  # SSP's books are fixed: their groups formed once


def test_ssp_task_rerun_after_its_worker_died_overwrites_its_lane_instead_of_applying_twice():
    """Stock PSS and the old worker-side SSP apply a closure's update where it runs, so a
    closure TF re-runs after its worker died once its update landed applies it twice (chaos
    runs: 392 updates for 390 tasks). Through its book's lane, the re-run overwrites."""
    e, d = ssp_engine(3, staleness=3)
    tasks = [e.submit(i) for i in range(3)]
    mine = next(t for t in tasks if t.pinned == 0)
    e.task_started(mine, 0)  # its gradient reaches lane 0, then worker 0 dies
    e.worker_failed(0)
    assert e.task_started(mine, 1) is True and mine.lane_id == 0 and mine.overwrite
    e.task_finished(mine, 1)
    assert [lanes for r, lanes in d.applies if r == mine.round] == [{0: 1}]


def test_ssp_a_restarted_worker_rejoins_at_the_slowest_count_and_holds_no_one_back():
    e, d = ssp_engine(3, staleness=1)
    e.worker_failed(2)
    tasks = [e.submit(i) for i in range(40)]
    for _ in range(10):  # workers 0 and 1 train on while worker 2 is down
        for w in (0, 1):
            t = next(t for t, on, _ in d.dispatched if on == w and t.state == "dispatched")
            run(e, t)
            e.apply_finished(t.round, 1)
    assert e.visible == {0: 10, 1: 10, 2: 0}
    n = len(d.dispatched)
    e.worker_recovered(2)
    assert e.visible[2] == 10
    assert sorted(w for _, w, _ in d.dispatched[n:]) == [2]  # 0 and 1 already hold a task
    for w in (0, 1):  # and they go on: nobody waits for worker 2 to redo 10 tasks
        t = next(t for t, on, _ in d.dispatched if on == w and t.state == "dispatched")
        run(e, t)
        e.apply_finished(t.round, 1)
    assert sorted(w for _, w, _ in d.dispatched[n:]) == [0, 1, 2]
    assert len(tasks) == 40


def test_groupings_read_speed_per_unit_so_balanced_sized_tasks_still_show_a_straggler():
    # Inside a sized group every task takes ~0.2 s: worker 3 reads 1 unit in that time, the
    # others 4. Read by task duration the four look alike and nothing would be split; per
    # unit, worker 3 is 4x slower.
    m = Monitor(4, clock=FakeClock())
    for r in range(6):
        for w in range(4):
            m.record_task(w, r, r + 0.2, True, 0, r, size=1 if w == 3 else 4)
    current = ((0, 1, 2, 3),)
    assert SpeedGroups(2, every=1).groups(GroupContext((0, 1, 2, 3), current, 5, m, 4)) == (
        (0, 1, 2), (3,))
