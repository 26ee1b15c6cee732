"""Shared fakes for the engine tests: a clock that moves only when told and a dispatcher
implementing :class:`tf_hetero.engine.api.Dispatcher` that records every call (the tests
play the TF side by calling the engine's reporting methods in a chosen order)."""

from __future__ import annotations

from tf_hetero.engine import Task


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


class FakeDispatcher:
    """Records every call the engine makes to the TF side (all five Dispatcher methods)."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.dispatched: list[tuple[Task, int | None, int | None]] = []
        self.applies: list[tuple[int, dict]] = []
        self.folds: list[tuple[int, dict]] = []
        self.cancelled: list[Task] = []

    def dispatch(self, task, worker, round_id):
        self.calls.append(("dispatch", task.id, worker, round_id))
        self.dispatched.append((task, worker, round_id))

    def dispatch_apply(self, round_id, lanes, folds):
        self.calls.append(("apply", round_id, dict(lanes)))
        self.applies.append((round_id, dict(lanes)))
        self.folds.append((round_id, dict(folds)))

    def cancel(self, task):
        self.calls.append(("cancel", task.id))
        self.cancelled.append(task)

    def duplicate(self, task):
        return ("copy-of", task.payload)

    def drain(self, worker):
        return ("drain", worker)

    def tasks_of_round(self, round_id):
        return [t for t, _, r in self.dispatched if r == round_id]

    def workers_of_round(self, round_id):
        return [w for _, w, r in self.dispatched if r == round_id]
