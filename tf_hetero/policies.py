"""Policies of the round engine: small objects, one method each, pure Python.

- **Sync policy** -- ``should_close(round) -> bool``: may the open round close now? Its
  ``mode`` says whether tasks form rounds at all (``"rounds"``) or apply at once (``"async"``).
- **Assignment policy** -- ``plan(idle, busy, monitor) -> list[int]``: the workers that get a
  task in the next round, one entry per task (a worker may appear several times).
- **Gate** (async mode) -- ``may_start(worker, clocks) -> bool``: may this idle worker start
  another task now? ``clocks[w]`` counts the tasks worker ``w`` has finished.

>>> from tf_hetero.engine import Round, Task
>>> r = Round(0, [Task(i, None, round=0) for i in range(4)], live_workers=4)
>>> for t in r.tasks[:3]: t.state = "done"
>>> AllTasks().should_close(r), FirstK(backups=1).should_close(r)
(False, True)
>>> StalenessBound(2).may_start(0, {0: 5, 1: 3}), StalenessBound(2).may_start(0, {0: 6, 1: 3})
(True, False)
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Protocol, Sequence

import numpy as np

__all__ = ["SyncPolicy", "AssignmentPolicy", "Gate", "Async", "AllTasks", "FirstK",
           "OnePerWorker", "OnePerIdleWorker", "Unbounded", "StalenessBound", "Projection",
           "StragglerProjection", "ElasticParallelism", "SlackSync", "StalenessWeight",
           "TransferAfter", "SpeedProportional", "smoothed_time"]


class SyncPolicy(Protocol):
    mode: str  # "rounds" or "async"

    def should_close(self, round) -> bool: ...


class AssignmentPolicy(Protocol):
    def plan(self, idle: Sequence[int], busy: Sequence[int], monitor) -> list[int]: ...


class Gate(Protocol):
    def may_start(self, worker: int, clocks: Mapping[int, int]) -> bool: ...


class Async:
    """Every task's gradient is applied as soon as it is computed (no rounds)."""

    mode = "async"

    def should_close(self, round) -> bool:  # never called in async mode
        return True

    def __repr__(self):
        return "Async()"


class AllTasks:
    """Enforced sync: a round closes when every one of its tasks is in (BSP)."""

    mode = "rounds"

    def should_close(self, round) -> bool:
        return round.num_done == len(round.tasks)

    def __repr__(self):
        return "AllTasks()"


class FirstK:
    """Backup workers (Chen et al. 2016): of N live workers, a round applies the first
    N - ``backups`` tasks in; the round's other tasks are dropped when they finish.

    A round that has fewer tasks (a worker still busy with a late task sits it out) waits for
    at most all of its tasks.
    """

    mode = "rounds"

    def __init__(self, backups: int):
        if not isinstance(backups, int) or isinstance(backups, bool) or backups < 0:
            raise ValueError(f"backups={backups!r}: need an integer >= 0.")
        self.backups = backups

    def should_close(self, round) -> bool:
        live = round.live_workers or len(round.tasks)
        needed = min(len(round.tasks), max(1, live - self.backups))
        return round.num_done >= needed

    def __repr__(self):
        return f"FirstK(backups={self.backups})"


class OnePerWorker:
    """One task per live worker per round, busy or not (BSP)."""

    def plan(self, idle, busy, monitor) -> list[int]:
        return sorted(list(idle) + list(busy))

    def __repr__(self):
        return "OnePerWorker()"


class OnePerIdleWorker:
    """One task per idle live worker; a worker still busy with a late task sits the round out."""

    def plan(self, idle, busy, monitor) -> list[int]:
        return sorted(idle)

    def __repr__(self):
        return "OnePerIdleWorker()"


class Unbounded:
    """No staleness bound (plain asynchronous training)."""

    def may_start(self, worker, clocks) -> bool:
        return True

    def __repr__(self):
        return "Unbounded()"


class StalenessBound:
    """SSP: a worker may not get more than ``staleness`` tasks ahead of the slowest live worker."""

    def __init__(self, staleness: int):
        if not isinstance(staleness, int) or isinstance(staleness, bool) or staleness < 0:
            raise ValueError(f"staleness={staleness!r}: need an integer >= 0.")
        self.staleness = staleness

    def may_start(self, worker, clocks) -> bool:
        return clocks[worker] - min(clocks.values()) <= self.staleness

    def __repr__(self):
        return f"StalenessBound({self.staleness})"


# ----------------------------------------------------------------------------- EPSP
class Projection(NamedTuple):
    """One worker's projected next task time (seconds), its spread, and whether it is a
    straggler."""

    expected_s: float
    spread_s: float
    straggler: bool


class StragglerProjection:
    """Straggler projection (Falcon): predicts each worker's next task time from its recent
    ones (median and standard deviation of the last ``window``), and flags a worker whose
    projection is more than ``factor`` times the median projection of the workers. The median
    keeps a transient straggler (one slow task) from being taken for a persistent one: that
    case is task transfer's job.

    >>> class M:
    ...     def durations(self, w): return [[1.0] + [0.1] * 5, [0.11] * 5, [0.4] * 5][w]
    >>> p = StragglerProjection(window=4, factor=1.5, min_samples=3).project(M(), [0, 1, 2])
    >>> [x.straggler for x in p.values()], round(p[2].expected_s, 2)
    ([False, False, True], 0.4)
    """

    def __init__(self, window: int = 8, factor: float = 1.5, min_samples: int = 3):
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window={window!r}: need an integer >= 1.")
        if not factor > 1:
            raise ValueError(f"factor={factor!r}: need a number > 1.")
        if not isinstance(min_samples, int) or not 1 <= min_samples <= window:
            raise ValueError(f"min_samples={min_samples!r}: need an integer from 1 to window.")
        self.window, self.factor, self.min_samples = window, factor, min_samples

    def project(self, monitor, workers) -> dict:
        stats = {}
        for w in workers:
            # A worker's first task also traces and registers the step (~1 s): leave it out.
            d = monitor.durations(w)[1:][-self.window:] if monitor is not None else []
            stats[w] = (float(np.median(d)), float(np.std(d))) if d else (float("nan"), 0.0)
        known = [m for m, _ in stats.values() if not math.isnan(m)]
        typical = float(np.median(known)) if known else float("nan")
        # Too few tasks (e.g. two, one of them a transient straggler) flag no one.
        enough = {w for w in workers if monitor is not None and
                  len(monitor.durations(w)) - 1 >= self.min_samples}
        return {w: Projection(m, s, w in enough and m > self.factor * typical)
                for w, (m, s) in stats.items()}

    def __repr__(self):
        return f"StragglerProjection(window={self.window}, factor={self.factor})"


class ElasticParallelism:
    """EPSP's parallelism controller: a round has ``round_tasks`` tasks, pulled by the workers
    taking part; a projected straggler sits the round out (enforced sync) so it does not set
    the round's critical path, except every ``probe_every``-th round, when it takes part again
    so its projection can improve (task transfer bounds what a probe costs).

    With ``keep_stragglers=True`` (slack sync) stragglers always take part: their late
    gradients are folded into a later round instead of blocking this one.

    Its :meth:`plan` leaves what it decided in ``last`` (participants, projection, expected
    round seconds) for the round's log.
    """

    def __init__(self, round_tasks: int, projection: StragglerProjection | None = None,
                 probe_every: int = 8, keep_stragglers: bool = False):
        if not isinstance(round_tasks, int) or round_tasks < 1:
            raise ValueError(f"round_tasks={round_tasks!r}: need an integer >= 1.")
        if not isinstance(probe_every, int) or probe_every < 1:
            raise ValueError(f"probe_every={probe_every!r}: need an integer >= 1.")
        self.round_tasks = round_tasks
        self.projection = projection or StragglerProjection()
        self.probe_every = probe_every
        self.keep_stragglers = keep_stragglers
        self.next_round = 0  # set by the engine before each plan()
        self.last: dict = {}

    def plan(self, idle, busy, monitor) -> list:
        live = sorted(list(idle) + list(busy))
        proj = self.projection.project(monitor, live)
        probing = self.next_round % self.probe_every == self.probe_every - 1
        fast = [w for w in live if not proj[w].straggler]
        participants = live if (self.keep_stragglers or probing or not fast) else fast
        rates = [1.0 / proj[w].expected_s for w in participants if proj[w].expected_s > 0]
        expected = self.round_tasks / sum(rates) if rates else float("nan")
        self.last = {"participants": tuple(participants), "probe": probing,
                     "stragglers": tuple(w for w in live if proj[w].straggler),
                     "projection": {w: (p.expected_s, p.spread_s) for w, p in proj.items()},
                     "expected_s": expected}
        return [frozenset(participants)] * self.round_tasks

    def __repr__(self):
        return (f"ElasticParallelism(round_tasks={self.round_tasks}, {self.projection!r}, "
                f"probe_every={self.probe_every}, keep_stragglers={self.keep_stragglers})")


class SlackSync:
    """EPSP slack sync: a round closes when all its tasks are in, when ``quorum`` of them are,
    or when ``deadline_factor`` x its projected duration has passed (with at least one in)."""

    mode = "rounds"

    def __init__(self, quorum: float = 0.75, deadline_factor: float = 2.0):
        if not 0 < quorum <= 1:
            raise ValueError(f"quorum={quorum!r}: need 0 < quorum <= 1.")
        if not deadline_factor > 0:
            raise ValueError(f"deadline_factor={deadline_factor!r}: need > 0.")
        self.quorum, self.deadline_factor = quorum, deadline_factor

    def should_close(self, round) -> bool:
        total, done = len(round.tasks), round.num_done
        if done >= total or done >= math.ceil(self.quorum * total):
            return True
        deadline = round.t_open + self.deadline_factor * round.expected_s
        return done >= 1 and not math.isnan(deadline) and round.now >= deadline

    def __repr__(self):
        return f"SlackSync(quorum={self.quorum}, deadline_factor={self.deadline_factor})"


class StalenessWeight:
    """Late gradients folded into a later round, weighted ``1 / (1 + staleness) ** power``;
    later than ``max_staleness`` rounds they are dropped (weight 0)."""

    def __init__(self, max_staleness: int = 8, power: float = 1.0):
        if not isinstance(max_staleness, int) or max_staleness < 1:
            raise ValueError(f"max_staleness={max_staleness!r}: need an integer >= 1.")
        self.max_staleness, self.power = max_staleness, power

    def weight(self, staleness: int) -> float:
        return 0.0 if staleness > self.max_staleness else 1.0 / (1.0 + staleness) ** self.power

    def __repr__(self):
        return f"StalenessWeight(max_staleness={self.max_staleness}, power={self.power})"


class TransferAfter:
    """Task transfer: re-issue a task once it has run ``factor`` x the typical (median)
    projected task time of the round's workers."""

    def __init__(self, factor: float = 1.5):
        if not factor > 1:
            raise ValueError(f"factor={factor!r}: need a number > 1.")
        self.factor = factor

    def should_transfer(self, elapsed_s: float, typical_s: float) -> bool:
        return not math.isnan(typical_s) and elapsed_s > self.factor * typical_s

    def __repr__(self):
        return f"TransferAfter(factor={self.factor})"


def smoothed_time(durations: Sequence[float], alpha: float = 0.5) -> float:
    """Exponentially smoothed task time: the newest task weighs ``alpha``, older ones decay.

    A worker's first task also traces and registers the step (~1 s): it is left out unless
    it is the only one.

    >>> smoothed_time([1.0, 0.1, 0.1, 0.4], alpha=0.5)
    0.25
    >>> smoothed_time([]) != smoothed_time([])  # NaN: not measured yet
    True
    """
    d = list(durations[1:] if len(durations) > 1 else durations)
    if not d:
        return float("nan")
    est = d[0]
    for x in d[1:]:
        est = alpha * x + (1 - alpha) * est
    return est


class SpeedProportional:
    """H-PS / LB-BSP assignment: a round is ``round_tasks`` micro-batch tasks, each pinned
    to a worker, and each worker's share follows its measured speed so that all finish the
    round together (the global batch per round stays ``round_tasks`` micro-batches).

    Speeds are re-estimated before every round from each worker's smoothed task time
    (:func:`smoothed_time`, newest task weighing ``alpha``). The integer shares minimise the
    round's projected makespan ``max_i k_i * t_i`` (each task goes to the worker that would
    finish it first: optimal for identical tasks, and proportional to speed as
    ``round_tasks`` grows). Every live worker gets at least ``min_tasks`` (so its speed
    stays measured and it can win its share back) and at most ``memory_budget[w]``
    micro-batches (its status: how much it may hold per round, as H-PS sizes batches by
    available memory). When the budgets of the live workers add up to fewer than
    ``round_tasks``, the round has as many tasks as they allow (``info["capped"]``).

    Until every live worker has a measured task (the first round), the round's tasks are
    pulled by whichever worker is free (``info["pulled"]``), so the unmeasured round is not
    set by a slow worker's even share (with memory budgets it is split evenly within them).

    :meth:`plan` returns the workers in the order of their tasks' projected finish times (a
    partial round at the end of an epoch keeps a prefix: the tasks that end first) and leaves
    the shares, estimated task times and projected round time in ``last`` for the round's log.

    >>> p = SpeedProportional(16)
    >>> p.shares({0: 0.1, 1: 0.1, 2: 0.1, 3: 0.4})
    {0: 5, 1: 5, 2: 5, 3: 1}
    >>> SpeedProportional(8, memory_budget=2).shares({0: 0.1, 1: 0.1, 2: 0.1, 3: 0.4})
    {0: 2, 1: 2, 2: 2, 3: 2}
    """

    def __init__(self, round_tasks: int, min_tasks: int = 1,
                 memory_budget: int | Mapping[int, int] | Sequence[int] | None = None,
                 alpha: float = 0.3):
        if not isinstance(round_tasks, int) or round_tasks < 1:
            raise ValueError(f"round_tasks={round_tasks!r}: need an integer >= 1.")
        if not isinstance(min_tasks, int) or min_tasks < 0:
            raise ValueError(f"min_tasks={min_tasks!r}: need an integer >= 0.")
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha={alpha!r}: need 0 < alpha <= 1.")
        if isinstance(memory_budget, Sequence):
            memory_budget = dict(enumerate(memory_budget))
        budgets = ([memory_budget] if isinstance(memory_budget, int) else
                   list((memory_budget or {}).values()))
        for b in budgets:
            if not isinstance(b, int) or b < max(1, min_tasks):
                raise ValueError(f"memory_budget={memory_budget!r}: every budget must be an "
                                 f"integer >= max(1, min_tasks={min_tasks}) micro-batches.")
        self.round_tasks, self.min_tasks, self.alpha = round_tasks, min_tasks, alpha
        self.memory_budget = memory_budget
        self.last: dict = {}

    def budget(self, worker: int) -> int:
        b = self.memory_budget
        if b is None:
            return self.round_tasks
        return b if isinstance(b, int) else b.get(worker, self.round_tasks)

    def shares(self, times: Mapping[int, float]) -> dict[int, int]:
        """Micro-batches per worker for one round, given each worker's task time."""
        t = self._times(times)
        k = {w: min(self.min_tasks, self.budget(w)) for w in t}
        while sum(k.values()) > self.round_tasks:  # more workers than tasks: slowest lose
            k[max((w for w in t if k[w]), key=lambda w: (t[w], w))] -= 1
        while sum(k.values()) < self.round_tasks:
            open_ = [w for w in t if k[w] < self.budget(w)]
            if not open_:
                break  # the budgets cap the round
            w = min(open_, key=lambda w: ((k[w] + 1) * t[w], w))  # finishes it first
            k[w] += 1
        return {w: k[w] for w in sorted(t)}

    def order(self, times: Mapping[int, float]) -> list[int]:
        """The workers, one entry per task, by projected finish time of each task: a partial
        round at the end of an epoch (a prefix) leaves out the tasks that would end last,
        such as a slow worker's only one."""
        t = self._times(times)
        slots = [((j + 1) * t[w], w) for w, n in self.shares(times).items() for j in range(n)]
        return [w for _, w in sorted(slots)]

    @staticmethod
    def _times(times: Mapping[int, float]) -> dict[int, float]:
        known = [t for t in times.values() if t > 0 and not math.isnan(t)]
        default = float(np.median(known)) if known else 1.0
        return {w: (x if x > 0 and not math.isnan(x) else default) for w, x in times.items()}

    def plan(self, idle, busy, monitor) -> list:
        live = sorted(list(idle) + list(busy))
        times = {w: smoothed_time(monitor.durations(w), self.alpha) if monitor is not None
                 else float("nan") for w in live}
        if self.memory_budget is None and any(math.isnan(t) for t in times.values()):
            # Before every worker has a measured task, the round's tasks are pulled by free
            # workers (fast ones take more), not split evenly: an even split would make the
            # first round as slow as the slowest worker's share.
            self.last = {"pulled": True, "expected_s": float("nan")}
            return [frozenset(live)] * self.round_tasks
        order = self.order(times)
        shares = {w: order.count(w) for w in live}
        known = {w: x for w, x in times.items() if not math.isnan(x)}
        self.last = {"shares": shares, "task_ms": {w: 1e3 * x for w, x in known.items()},
                     "expected_s": max((shares[w] * known[w] for w in known), default=float("nan")),
                     "capped": len(order) < self.round_tasks}
        return order

    def __repr__(self):
        return (f"SpeedProportional(round_tasks={self.round_tasks}, min_tasks={self.min_tasks}, "
                f"memory_budget={self.memory_budget!r}, alpha={self.alpha})")
