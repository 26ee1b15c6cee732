"""Round books on the engine (pure Python): two groups of workers with rounds of their own,
closing and applying independently, every task applied exactly once in any interleaving."""

from __future__ import annotations

import random

import pytest

from tf_hetero.engine import RoundEngine
from tf_hetero.policies import AllTasks, OnePerWorker
from tf_hetero.telemetry import Monitor

from support.engine import run
from support.fakes import FakeClock, FakeDispatcher, play


# ------------------------------------------------------------------------ round books
def two_books(**kw):
    """Workers {0, 1} and {2, 3}: two groups, each with BSP rounds of its own."""
    clock = FakeClock()
    d = FakeDispatcher()
    e = RoundEngine(4, dispatcher=d, clock=clock, monitor=Monitor(4, clock=clock),
                    books=[((0, 1), AllTasks(), OnePerWorker()),
                           ((2, 3), AllTasks(), OnePerWorker())], **kw)
    return e, d


def test_books_close_and_apply_their_rounds_independently():
    e, d = two_books()
    tasks = [e.submit(i) for i in range(4)]
    assert [(r.book, sorted(t.pinned for t in r.tasks)) for r in e.rounds] == [(0, [0, 1]),
                                                                            (1, [2, 3])]
    run(e, tasks[0]), run(e, tasks[1])  # book 0's round closes; book 1's stays open
    assert d.applies == [(0, {0: 1, 1: 1})] and not e.rounds[1].closed
    more = [e.submit(i) for i in range(2)]  # book 0 waits for its apply, book 1 is busy
    assert len(e.rounds) == 2
    run(e, tasks[2]), run(e, tasks[3])  # both books now have a round applying at once
    assert d.applies[-1] == (1, {2: 1, 3: 1})
    e.apply_finished(1, 2)  # book 1's apply finishes first: its next round takes the tasks
    assert [(r.book, r.slot) for r in e.rounds] == [(0, 0), (1, 0), (1, 1)]
    assert sorted(t.pinned for t in more) == [2, 3]
    e.apply_finished(0, 2)
    for t in more:
        run(e, t)
    e.apply_finished(2, 2)
    assert e.idle() and e.version == 3


def test_books_must_partition_the_workers():
    with pytest.raises(ValueError, match=r"worker\(s\) \[1\] in two books"):
        RoundEngine(3, dispatcher=FakeDispatcher(),
                    books=[((0, 1), AllTasks(), OnePerWorker()),
                           ((1, 2), AllTasks(), OnePerWorker())])
    with pytest.raises(ValueError, match=r"workers \[2\] are in no book"):
        RoundEngine(3, dispatcher=FakeDispatcher(),
                    books=[((0, 1), AllTasks(), OnePerWorker())])


def test_random_interleavings_of_two_books_apply_every_task_exactly_once():
    for seed in range(20):
        rng = random.Random(seed)
        e, d = two_books()
        play(e, d, 40, rng)
        assert e.idle()
        tasks = [t for r in e.rounds for t in r.tasks]
        assert len(tasks) == len({id(t) for t in tasks}) == 40
        assert all(t.state == "done" for t in tasks)
        for b in (0, 1):  # a book's rounds alternate slots, whatever the other book does
            slots = [r.slot for r in e.rounds if r.book == b]
            assert slots == [i % 2 for i in range(len(slots))]
        assert sum(r.applied for r in e.rounds) == 40
