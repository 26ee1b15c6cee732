"""The chief's apply thread (strategies/runtime/applier.py) books an update that landed even
when the PS copy due after it meets a dead PS: the failover that then rolls the model back
counts that update among those it undoes, and the engine's records must count it too."""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from tf_hetero.strategies.runtime.applier import ChiefApplier


class _Result:
    def numpy(self):  # applied, norm, units, lanes, mean_sq, lane_sq, loss, skipped
        return np.array([3.0, 0.5, 3.0, 3.0, 0.25, 0.25, 1.0, 0.0])


class _Round:
    abandoned = False
    tasks = ["a", "b", "c"]


class _Engine:
    def __init__(self):
        self.rounds = {7: _Round()}
        self.log, self.failed = [], []

    def apply_finished(self, round_id, applied, **_):
        self.log.append(("booked", round_id, applied))

    def fail(self, error):
        self.failed.append(error)


class _Failover:
    """Its copy after every apply raises, as reading a dead PS does."""

    def __init__(self, engine, done):
        self.engine, self.done, self.applied = engine, done, 0

    def after_apply(self, round_id):
        self.applied += 1
        raise RuntimeError("the copy read a dead PS")

    def take(self, error):
        self.engine.log.append(("failover", str(error)))
        self.done.set()
        return True


class _Losses:
    def __init__(self, engine):
        self.engine = engine

    def round_applied(self, round_id, loss, steps):  # the loss check of the round's tasks
        self.engine.log.append(("loss", round_id, loss, steps))


class _Strategy:
    def scope(self):
        return contextlib.nullcontext()


class _Coordinator:
    stopped = False

    def __init__(self, done):
        self.engine = _Engine()
        self.failover = _Failover(self.engine, done)
        self.losses = _Losses(self.engine)
        self.strategy = _Strategy()


def test_an_update_whose_copy_met_a_dead_ps_is_booked_before_the_failover_takes_over():
    done = threading.Event()
    coordinator = _Coordinator(done)
    applier = ChiefApplier(coordinator)
    applier.submit(7, _Result, ())
    assert done.wait(10), "the failover was never handed the copy's error"
    applier.stop()
    engine = coordinator.engine
    assert engine.log == [("booked", 7, 3), ("loss", 7, 1.0, 3),
                          ("failover", "the copy read a dead PS")]
    assert coordinator.failover.applied == 1 and not engine.failed
