"""Overlapped rounds (``AllTasks(overlap=True)``): the next round opens when a round closes,
while its apply runs; never two rounds ahead of the last applied one (two slots)."""

from __future__ import annotations

import random

import pytest

from tf_hetero.engine import RoundEngine
from tf_hetero.policies import AllTasks, OnePerWorker
from tf_hetero.telemetry import Monitor

from support.fakes import FakeClock, FakeDispatcher, play


def make(n, overlap=True):
    clock = FakeClock()
    d = FakeDispatcher()
    m = Monitor(n, clock=clock)
    return RoundEngine(n, AllTasks(overlap=overlap), OnePerWorker(), d, monitor=m,
                       clock=clock), d, m


def finish_round(e, d, r):
    for t in d.tasks_of_round(r):
        e.task_started(t, t.pinned)
        e.task_finished(t, t.pinned)


def test_next_round_opens_when_a_round_closes_not_when_it_is_applied():
    e, d, m = make(2)
    for i in range(6):
        e.submit(i)
    finish_round(e, d, 0)
    assert [r for r, _ in d.applies] == [0]
    assert d.tasks_of_round(1), "round 1 waits for round 0's apply"
    finish_round(e, d, 1)  # its tasks read the model before round 0's update landed
    assert [r for r, _ in d.applies] == [0, 1]
    assert not d.tasks_of_round(2)  # round 2 would write round 0's slot: it waits
    e.apply_finished(0, 2)
    assert d.tasks_of_round(2)
    stale = {t.round: t.staleness for t in m.tasks}
    assert stale == {0: 0, 1: 1}  # round 1's tasks read the model before update 0
    for t in d.tasks_of_round(2):  # start before update 1 lands, finish after
        e.task_started(t, t.pinned)
    e.apply_finished(1, 2)
    for t in d.tasks_of_round(2):
        e.task_finished(t, t.pinned)
    assert {t.staleness for t in m.tasks if t.round == 2} == {1}



def test_without_overlap_the_next_round_waits_for_the_apply():
    e, d, _ = make(2, overlap=False)
    for i in range(4):
        e.submit(i)
    finish_round(e, d, 0)
    assert not d.tasks_of_round(1)
    e.apply_finished(0, 2)
    assert d.tasks_of_round(1)


@pytest.mark.parametrize("seed", range(10))
def test_random_schedules_apply_every_task_once_and_respect_the_two_slots(seed):
    rng = random.Random(seed)
    n, total = 3, 60
    e, d, m = make(n)

    def slot_free(task, worker):  # two slots: round r - 2 applied before round r runs
        assert task.round < 2 or e.rounds[task.round - 2].applied >= 0

    submitted = play(e, d, total, rng, ordered_applies=True, on_start=slot_free)
    applied = [r for r, _ in d.applies]
    assert applied == sorted(applied) and sum(r.applied for r in e.rounds) == total
    assert all(t.state == "done" for t in submitted)
    assert max(t.staleness for t in m.tasks) <= 1
    assert any(t.staleness == 1 for t in m.tasks)  # some rounds did overlap
