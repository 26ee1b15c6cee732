"""The baseline policies (pure Python): close rules (``AllTasks``, ``FirstK``), assignments
(one task per worker), the staleness gate; their argument checks, modes and reprs."""

from __future__ import annotations

import pytest

from tf_hetero.engine import Round, RoundContext, Task
from tf_hetero.policies import (AllTasks, Async, FirstK, OnePerIdleWorker, OnePerWorker,
                                StalenessBound, Unbounded)



# -------------------------------------------------------------------------- policies
@pytest.mark.parametrize("bad", [-1, 1.5, "1", None])
def test_first_k_rejects_backups_that_are_not_integers_from_zero(bad):
    with pytest.raises(ValueError, match=r"^backups=.*: need an integer >= 0\.$"):
        FirstK(bad)


@pytest.mark.parametrize("bad", [-1, 2.0, "3", None])
def test_staleness_bound_rejects_staleness_that_is_not_an_integer_from_zero(bad):
    with pytest.raises(ValueError, match=r"^staleness=.*: need an integer >= 0\.$"):
        StalenessBound(bad)


def _round(num_tasks, num_done, live_workers=0):
    r = Round(0, [Task(i, None, round=0) for i in range(num_tasks)], live_workers=live_workers)
    for t in r.tasks[:num_done]:
        t.state = "done"
        r.task_in(t)  # as the engine tells the round when one of its tasks is done
    return r


def test_all_tasks_closes_only_when_every_task_is_done():
    assert not AllTasks().should_close(_round(3, 2), 0.0)
    assert AllTasks().should_close(_round(3, 3), 0.0)


def test_first_k_closes_after_live_workers_minus_backups_tasks():
    assert not FirstK(1).should_close(_round(4, 2, live_workers=4), 0.0)
    assert FirstK(1).should_close(_round(4, 3, live_workers=4), 0.0)
    assert FirstK(2).should_close(_round(4, 2, live_workers=4), 0.0)


def test_first_k_round_smaller_than_needed_waits_for_all_its_tasks():
    # 4 live workers, 1 backup: 3 needed, but the round has only 2 tasks.
    assert not FirstK(1).should_close(_round(2, 1, live_workers=4), 0.0)
    assert FirstK(1).should_close(_round(2, 2, live_workers=4), 0.0)
    # No more tasks than backups, and N - b covers them: all are needed.
    assert not FirstK(2).should_close(_round(2, 1, live_workers=4), 0.0)


def test_first_k_needs_at_least_one_task_when_backups_cover_all_live_workers():
    assert not FirstK(3).should_close(_round(2, 0, live_workers=2), 0.0)
    assert FirstK(3).should_close(_round(2, 1, live_workers=2), 0.0)


def test_first_k_without_live_worker_count_uses_the_round_size():
    assert not FirstK(1).should_close(_round(4, 2), 0.0)
    assert FirstK(1).should_close(_round(4, 3), 0.0)


def test_assignment_policies_plan_one_task_per_worker():
    assert OnePerWorker().plan(RoundContext(0, (3, 0), (2,))).entries == [0, 2, 3]
    assert OnePerIdleWorker().plan(RoundContext(0, (3, 0), (2,))).entries == [0, 3]


def test_staleness_bound_allows_exactly_s_ahead_of_the_slowest():
    gate = StalenessBound(2)
    assert gate.may_start(0, {0: 5, 1: 3, 2: 4})
    assert not gate.may_start(0, {0: 6, 1: 3, 2: 4})
    assert StalenessBound(0).may_start(1, {0: 3, 1: 3})
    assert not StalenessBound(0).may_start(1, {0: 3, 1: 4})
    assert Unbounded().may_start(0, {0: 1000, 1: 0})


def test_staleness_bound_refuses_at_once_what_it_refuses_worker_by_worker():
    import random

    rng = random.Random(0)
    for s in (0, 1, 3):
        gate = StalenessBound(s)
        for _ in range(50):
            clocks = {w: rng.randint(0, 6) for w in range(rng.randint(1, 8))}
            assert gate.refused(clocks) == {w for w in clocks if not gate.may_start(w, clocks)}


def test_policy_modes():
    assert Async.mode == "async"
    assert AllTasks.mode == FirstK.mode == "rounds"


@pytest.mark.parametrize("policy, text", [
    (Async(), "Async()"), (AllTasks(), "AllTasks()"), (FirstK(2), "FirstK(backups=2)"),
    (OnePerWorker(), "OnePerWorker()"), (OnePerIdleWorker(), "OnePerIdleWorker()"),
    (Unbounded(), "Unbounded()"), (StalenessBound(3), "StalenessBound(3)"),
])
def test_policy_repr(policy, text):
    assert repr(policy) == text
