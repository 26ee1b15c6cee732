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
    """Records every call the engine makes to the TF side (all six Dispatcher methods)."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.dispatched: list[tuple[Task, int | None, int | None]] = []
        self.applies: list[tuple[int, dict]] = []
        self.folds: list[tuple[int, dict]] = []
        self.cancelled: list[Task] = []
        self.absorbed: list[tuple[Task, Task]] = []

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

    def absorb(self, task, like):
        self.calls.append(("absorb", task.id, like.id))
        self.absorbed.append((task, like))

    def duplicate(self, task):
        return ("copy-of", task.payload)

    def drain(self, worker):
        return ("drain", worker)

    def tasks_of_round(self, round_id):
        return [t for t, _, r in self.dispatched if r == round_id]

    def workers_of_round(self, round_id):
        return [w for _, w, r in self.dispatched if r == round_id]


def play(engine, dispatcher, total: int, rng, *, clock=None, ordered_applies: bool = False,
         on_start=None, max_steps: int = 100_000) -> list:
    """Plays a cluster against ``engine`` in a seeded random order until it is idle: submits
    ``total`` tasks, runs each worker's dispatched tasks one at a time in order (as TF's
    per-worker queues do), finishes the dispatched applies (in order, as the chief's one
    apply thread does, with ``ordered_applies``), and flushes once everything is submitted.
    ``on_start(task, worker)`` is called before each task starts. Returns the tasks."""
    queues: dict = {w: [] for w in range(engine.num_workers)}
    seen, submitted, applied = 0, [], set()
    for _ in range(max_steps):
        for task, w, _r in dispatcher.dispatched[seen:]:
            queues[w].append(task)
        seen = len(dispatcher.dispatched)
        waiting = [r for r, _ in dispatcher.applies if r not in applied]
        actions = (["submit"] if len(submitted) < total else [])
        actions += [("run", w) for w in queues if queues[w]]
        actions += [("apply", r) for r in (waiting[:1] if ordered_applies else waiting)]
        if not actions:
            if engine.idle():
                return submitted
            engine.flush()
            continue
        action = rng.choice(actions)
        if clock is not None:
            clock.advance(rng.random())
        if action == "submit":
            submitted.append(engine.submit(len(submitted)))
        elif action[0] == "run":
            task = queues[action[1]].pop(0)
            if on_start is not None:
                on_start(task, action[1])
            engine.task_started(task, action[1])
            engine.task_finished(task, action[1])
        else:
            applied.add(action[1])
            engine.apply_finished(action[1], sum(engine.rounds[action[1]].lanes.values()))
    raise AssertionError("the schedule did not end")
