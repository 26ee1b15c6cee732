"""Assignment policies: which workers get the next round's tasks
(:class:`~tf_hetero.engine.api.AssignmentPolicy`: ``plan(RoundContext) -> Plan``).

>>> from tf_hetero.engine import RoundContext
>>> OnePerWorker().plan(RoundContext(0, idle=(3, 0), busy=(2,))).entries
[0, 2, 3]
>>> OnePerIdleWorker().plan(RoundContext(0, idle=(3, 0), busy=(2,))).entries
[0, 3]
"""

from __future__ import annotations

import heapq
import math
from typing import Mapping, Sequence

import numpy as np

from tf_hetero.engine.api import Plan, Pulled, RoundContext
from tf_hetero.policies.estimate import DEFAULT_ALPHA, StragglerProjection, worker_time

__all__ = ["OnePerWorker", "OnePerIdleWorker", "ElasticParallelism", "SpeedProportional",
           "BalancedBatches", "GroupBatches"]


class OnePerWorker:
    """One task per live worker per round, busy or not (BSP)."""

    def plan(self, ctx: RoundContext) -> Plan:
        return Plan(list(ctx.live))

    def __repr__(self):
        return "OnePerWorker()"


class OnePerIdleWorker:
    """One task per idle live worker; a worker still busy with a late task sits the round out."""

    def plan(self, ctx: RoundContext) -> Plan:
        return Plan(sorted(ctx.idle))

    def __repr__(self):
        return "OnePerIdleWorker()"


class ElasticParallelism:
    """EPSP's parallelism controller: a round has ``round_tasks`` tasks, pulled by the workers
    taking part; a projected straggler sits the round out (enforced sync) so it does not set
    the round's critical path, except every ``probe_every``-th round, when it takes part again
    so its projection can improve (task transfer bounds what a probe costs).

    With ``keep_stragglers=True`` (slack sync) stragglers always take part: their late
    gradients are folded into a later round instead of blocking this one.

    With ``batches`` (a :class:`BalancedBatches`), a round is one sized task per participant
    instead of ``round_tasks`` pulled ones: the participants split the round's global batch
    in proportion to their speed, so pioneers take a straggler's share as extra samples in
    their one task (one closure each), and projections are per work unit.

    Its plan logs what it decided (participants, stragglers, projection, probe) in ``info``
    and passes the projected task times to sync policies and task transfer.
    """

    def __init__(self, round_tasks: int, projection: StragglerProjection | None = None,
                 probe_every: int = 8, keep_stragglers: bool = False,
                 batches: "BalancedBatches | None" = None):
        if not isinstance(round_tasks, int) or round_tasks < 1:
            raise ValueError(f"round_tasks={round_tasks!r}: need an integer >= 1.")
        if not isinstance(probe_every, int) or probe_every < 1:
            raise ValueError(f"probe_every={probe_every!r}: need an integer >= 1.")
        self.round_tasks = round_tasks
        self.projection = projection or StragglerProjection()
        self.probe_every = probe_every
        self.keep_stragglers = keep_stragglers
        self.batches = batches

    def set_units(self, units: int, step_units: int | None = None) -> None:
        """Sized rounds: the global batch in work units (see :class:`BalancedBatches`)."""
        if self.batches is None:
            raise ValueError("ElasticParallelism without batches does not size tasks.")
        self.batches.set_units(units, step_units)

    @property
    def round_steps(self) -> float | None:
        """Steps of fit a sized round covers (see :class:`BalancedBatches`)."""
        return self.batches.round_steps if self.batches is not None else None

    def min_steps(self, round_id: int) -> int | None:
        """The steps of fit sized round ``round_id`` takes (``AssignmentPolicy.min_steps``)."""
        return self.batches.steps(round_id) if self.batches is not None else None

    def plan(self, ctx: RoundContext) -> Plan:
        live = list(ctx.live)
        proj = self.projection.project(ctx.monitor, live, per_unit=self.batches is not None)
        probing = ctx.round_id % self.probe_every == self.probe_every - 1
        fast = [w for w in live if not proj[w].straggler]
        participants = live if (self.keep_stragglers or probing or not fast) else fast
        rates = [1.0 / proj[w].expected_s for w in participants if proj[w].expected_s > 0]
        expected = self.round_tasks / sum(rates) if rates else math.nan
        info = {"participants": tuple(participants), "probe": probing,
                "stragglers": tuple(w for w in live if proj[w].straggler),
                "projection": {w: (p.expected_s, p.spread_s) for w, p in proj.items()},
                "expected_s": expected}
        if self.batches is not None:  # one sized task per participant
            busy = tuple(w for w in participants if w in ctx.busy)
            if busy and not self.keep_stragglers and len(busy) < len(participants):
                # A worker still busy when an enforced round opens is running a task that a
                # transferred copy already won; a share sized for it would start only when
                # that task ends and hold this round too (seen in the transient scenario: a
                # 5x task then cost two rounds). It sits the round out; the others split
                # the global batch.
                info["busy"] = busy
                participants = [w for w in participants if w not in busy]
                info["participants"] = tuple(participants)
            chosen = set(participants)
            sized = self.batches.plan(RoundContext(
                ctx.round_id, tuple(w for w in ctx.idle if w in chosen),
                tuple(w for w in ctx.busy if w in chosen), ctx.monitor))
            info.update(sized.info)
            return Plan(sized.entries, info, sized.expected_s, sized.task_s, sizes=sized.sizes,
                        steps=sized.steps)
        return Plan([Pulled(participants)] * self.round_tasks, info, expected,
                    {w: p.expected_s for w, p in proj.items()})

    @staticmethod
    def summary(rounds, num_workers: int) -> dict:
        """Per-worker EPSP figures over ``rounds`` (round records): why a worker sat out."""
        projected = [r.info["projection"] for r in rounds if "projection" in r.info]
        out = {}
        if not projected:
            return out
        for w in range(num_workers):
            out[f"worker{w}_projected_ms"] = 1e3 * projected[-1].get(w, (math.nan,))[0]
            out[f"worker{w}_straggler_rounds"] = sum(w in r.info.get("stragglers", ())
                                                    for r in rounds)
            out[f"worker{w}_rounds_taking_part"] = sum(
                w in r.info.get("participants", ()) for r in rounds)
        return out

    def __repr__(self):
        return (f"ElasticParallelism(round_tasks={self.round_tasks}, {self.projection!r}, "
                f"probe_every={self.probe_every}, keep_stragglers={self.keep_stragglers})")


class SpeedProportional:
    """H-PS / LB-BSP assignment: a round is ``round_tasks`` micro-batch tasks, each pinned
    to a worker, and each worker's share follows its measured speed so that all finish the
    round together (the global batch per round stays ``round_tasks`` micro-batches).

    Speeds are re-estimated before every round from each worker's smoothed task time
    (:func:`~tf_hetero.policies.estimate.smoothed_time`, newest task weighing ``alpha``). The integer shares minimise the
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
    partial round at the end of an epoch keeps a prefix: the tasks that end first) and logs
    the shares, estimated task times and projected round time in the plan's ``info``.

    >>> p = SpeedProportional(16)
    >>> p.shares({0: 0.1, 1: 0.1, 2: 0.1, 3: 0.4})
    {0: 5, 1: 5, 2: 5, 3: 1}
    >>> SpeedProportional(8, memory_budget=2).shares({0: 0.1, 1: 0.1, 2: 0.1, 3: 0.4})
    {0: 2, 1: 2, 2: 2, 3: 2}
    """

    def __init__(self, round_tasks: int, min_tasks: int = 1,
                 memory_budget: int | Mapping[int, int] | Sequence[int] | None = None,
                 alpha: float = DEFAULT_ALPHA):
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

    def budget(self, worker: int) -> int:
        return _budget(self.memory_budget, worker, self.round_tasks)

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

    def plan(self, ctx: RoundContext) -> Plan:
        live = list(ctx.live)
        times = {w: worker_time(ctx.monitor, w, self.alpha) if ctx.monitor is not None
                 else math.nan for w in live}
        if self.memory_budget is None and any(math.isnan(t) for t in times.values()):
            # Before every worker has a measured task, the round's tasks are pulled by free
            # workers (fast ones take more), not split evenly: an even split would make the
            # first round as slow as the slowest worker's share.
            return Plan([Pulled(live)] * self.round_tasks,
                        {"pulled": True, "expected_s": math.nan})
        order = self.order(times)
        shares = {w: order.count(w) for w in live}
        known = {w: x for w, x in times.items() if not math.isnan(x)}
        expected = max((shares[w] * known[w] for w in known), default=math.nan)
        info = {"shares": shares, "task_ms": {w: 1e3 * x for w, x in known.items()},
                "expected_s": expected, "capped": len(order) < self.round_tasks}
        return Plan(order, info, expected, known)

    def __repr__(self):
        return (f"SpeedProportional(round_tasks={self.round_tasks}, min_tasks={self.min_tasks}, "
                f"memory_budget={self.memory_budget!r}, alpha={self.alpha})")


class BalancedBatches:
    """Per-worker batch *sizes* at the balance point (LB-BSP, H-PS): one task per live worker
    per round, and the round's global batch of ``units`` work units (granules of samples) is
    split across the workers in proportion to their measured speed, so that all finish
    together; each worker runs its share as one task (one closure, one push). The round's
    update is the size-weighted mean of the workers' gradients: one step on the whole
    global batch.

    Speed: each worker's smoothed seconds per unit (task time / task size, newest task
    weighing ``alpha``). Fixed costs per task (dispatch, reads, the push) make a small task
    look slower per unit; the split still converges to equal task times, the fixed point of
    "share proportional to units per second". Integer shares minimise the projected makespan
    (:meth:`SpeedProportional.shares`), with at least ``min_units`` and at most
    ``memory_budget[w]`` units per worker. Before every live worker has a measured task the
    split is even.

    ``units`` may be left ``None`` until the data set is known (:meth:`set_units`: the
    strategy calls it with the global batch in granules when it builds the workers' data).
    With ``step_units`` (a step's dataset batch in units), a round covers ``units /
    step_units`` of ``fit``'s steps (:attr:`Plan.steps`, fractions carried from round to
    round) however many workers split it, so a fit of S steps reads S dataset batches.

    >>> from tf_hetero.engine import RoundContext
    >>> class M:
    ...     def unit_times(self, w): return [[1.0, 0.02, 0.02], [0.02] * 3, [0.08] * 3][w]
    >>> p = BalancedBatches(16).plan(RoundContext(5, idle=(0, 1, 2), monitor=M()))
    >>> p.entries, p.sizes
    ([0, 1, 2], [7, 7, 2])
    >>> BalancedBatches(16).plan(RoundContext(0, idle=(0, 1, 2, 3))).sizes
    [4, 4, 4, 4]
    >>> half = BalancedBatches(12, step_units=8)   # 1.5 steps' batches per round
    >>> [half.plan(RoundContext(r, idle=(0, 1))).steps for r in range(4)]
    [1, 2, 1, 2]
    """

    def __init__(self, units: int | None = None, min_units: int = 1,
                 memory_budget: int | Mapping[int, int] | Sequence[int] | None = None,
                 alpha: float = DEFAULT_ALPHA, step_units: int | None = None):
        if not isinstance(min_units, int) or min_units < 1:
            raise ValueError(f"min_units={min_units!r}: need an integer >= 1 (every worker "
                             "keeps a measured speed).")
        if isinstance(memory_budget, Sequence):
            memory_budget = dict(enumerate(memory_budget))
        self.min_units, self.alpha, self.memory_budget = min_units, alpha, memory_budget
        self.units = self.step_units = None
        if units is not None:
            self.set_units(units, step_units)

    def set_units(self, units: int, step_units: int | None = None) -> None:
        """The global batch of a round, in work units, and a step's (``None``: a round
        covers one step per task)."""
        for name, value in (("units", units), ("step_units", step_units)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}={value!r}: need an integer >= 1.")
        self.units, self.step_units = units, step_units

    @property
    def round_steps(self) -> float | None:
        """Steps of fit a round covers on average (``None`` without ``step_units``)."""
        return None if self.step_units is None else self.units / self.step_units

    def min_steps(self, round_id: int) -> int | None:
        """The steps of fit round ``round_id`` takes (``AssignmentPolicy.min_steps``): its
        plan's, known before the plan."""
        return self.steps(round_id)

    def steps(self, round_id: int, units: int | None = None) -> int | None:
        """Steps of fit round ``round_id`` covers: its share of the cumulative global
        batches (of ``units``, default :attr:`units`), so fractions of a step add up over
        rounds (``None`` without ``step_units``)."""
        if self.step_units is None:
            return None
        units = self.units if units is None else units
        return ((round_id + 1) * units // self.step_units
                - round_id * units // self.step_units)

    def budget(self, worker: int, units: int | None = None) -> int:
        return _budget(self.memory_budget, worker, self.units if units is None else units)

    def for_group(self, size: int, num_workers: int) -> "GroupBatches":
        """The policy of one group of ``size`` of the ``num_workers`` workers, with rounds of
        its own (grouped sync, CASP): see :class:`GroupBatches`."""
        return GroupBatches(self, size, num_workers)

    def shares(self, times: Mapping[int, float], units: int | None = None) -> dict[int, int]:
        """Units per worker: proportional to speed (``1 / times[w]``), rounded so that the
        projected makespan ``max k_w t_w`` is smallest (ties: the larger remainder), within
        ``[min_units, budget]``; ``units`` (default :attr:`units`) in all.

        >>> BalancedBatches(16).shares({0: 0.02, 1: 0.02, 2: 0.08})
        {0: 7, 1: 7, 2: 2}
        """
        units = self.units if units is None else units
        # A task measured as taking no time (a coarse clock) is very fast, not a crash.
        speed = {w: 1.0 / max(t, 1e-9) for w, t in times.items()}
        total = sum(speed.values())
        ideal = {w: units * v / total for w, v in speed.items()}
        k = {w: min(max(int(ideal[w]), self.min_units), self.budget(w, units)) for w in times}
        while sum(k.values()) > units:  # the floors ask too much: the slowest give
            w = max((w for w in k if k[w] > self.min_units), key=lambda w: (k[w] * times[w], w),
                    default=None)
            if w is None:
                break
            k[w] -= 1
        # Each unit left goes to the open worker that would finish it first; only that
        # worker's key changes, so a heap keeps the choice O(log N) (a scan of every worker
        # per unit cost seconds per round at 1000 workers).
        left = units - sum(k.values())
        key = lambda w: ((k[w] + 1) * times[w], k[w] - ideal[w], w)  # noqa: E731
        heap = [key(w) for w in k if k[w] < self.budget(w, units)]
        heapq.heapify(heap)
        while left > 0 and heap:  # an empty heap: the budgets cap the round
            w = heapq.heappop(heap)[2]
            k[w] += 1
            left -= 1
            if k[w] < self.budget(w, units):
                heapq.heappush(heap, key(w))
        return dict(sorted(k.items()))

    def plan(self, ctx: RoundContext, units: int | None = None) -> Plan:
        """The round's sized tasks: ``units`` (default :attr:`units`) split across the live
        workers of ``ctx``."""
        if self.units is None:
            raise ValueError(
                "the global batch of a round is not known: the workers' data set was not made "
                "by this strategy. Fix: create per-worker data with "
                "strategy.distribute_datasets_from_function (model.fit with a DatasetCreator "
                "does), or pass the strategy's global_batch.")
        units = self.units if units is None else units
        live = list(ctx.live)
        times = {w: worker_time(ctx.monitor, w, self.alpha, units=True)
                 if ctx.monitor is not None else math.nan for w in live}
        if any(math.isnan(t) for t in times.values()):
            times = {w: 1.0 for w in live}  # nothing measured yet: an even split
        shares = self.shares(times, units)
        workers = [w for w in live if shares.get(w, 0) > 0]
        known = {w: t for w, t in times.items()}
        expected = max(shares[w] * known[w] for w in workers) if workers else math.nan
        info = {"sizes": {w: shares[w] for w in workers},
                "unit_ms": {w: 1e3 * t for w, t in known.items()}, "expected_s": expected,
                "capped": sum(shares.values()) < units}
        return Plan(workers, info, expected, {w: shares[w] * known[w] for w in workers},
                    sizes=[shares[w] for w in workers], steps=self.steps(ctx.round_id, units))

    def __repr__(self):
        return (f"BalancedBatches(units={self.units}, step_units={self.step_units}, "
                f"min_units={self.min_units}, "
                f"memory_budget={self.memory_budget!r}, alpha={self.alpha})")


class GroupBatches:
    """:class:`BalancedBatches` for one group of workers with rounds of its own (grouped
    sync, CASP): a group of ``size`` of the ``num_workers`` workers splits its share of the
    global batch, ``units x size / num_workers`` (the group's own dataset batches: BSP within
    the group), across its live members in proportion to their speed, so a 2x member of a
    community no longer sets the community's round. Its rounds cover ``size`` of fit's
    steps when the global batch is one dataset batch per worker (the default).

    It reads ``batches``' units when it plans, not when it is made: the strategy knows the
    global batch only once it builds the workers' data, after the first groups are formed.
    The engine makes one per book (:meth:`BalancedBatches.for_group`), again at every regroup.

    >>> from tf_hetero.engine import RoundContext
    >>> class M:
    ...     def unit_times(self, w): return [[0.02] * 3, [0.04] * 3, [0.02] * 3][w]
    >>> group = BalancedBatches(24, step_units=8).for_group(2, num_workers=3)
    >>> p = group.plan(RoundContext(5, idle=(0, 1), monitor=M()))
    >>> group.units, p.entries, p.sizes, p.steps
    (16, [0, 1], [11, 5], 2)
    """

    def __init__(self, batches: BalancedBatches, size: int, num_workers: int):
        if not 1 <= size <= num_workers:
            raise ValueError(f"a group of {size} of {num_workers} workers: need 1 to "
                             f"{num_workers}.")
        self.batches, self.size, self.num_workers = batches, size, num_workers

    @property
    def units(self) -> int | None:
        """The group's share of the global batch, in work units (``None`` until it is set)."""
        if self.batches.units is None:
            return None
        units, rest = divmod(self.batches.units * self.size, self.num_workers)
        if rest or units < self.size * self.batches.min_units:
            raise ValueError(
                f"a group of {self.size} of {self.num_workers} workers cannot take an equal "
                f"share of a global batch of {self.batches.units} units "
                f"(min {self.batches.min_units} per worker). Fix: give a global batch that is a "
                "multiple of the workers (the default: one dataset batch per worker).")
        return units

    def plan(self, ctx: RoundContext) -> Plan:
        return self.batches.plan(ctx, self.units)

    def __repr__(self):
        return f"GroupBatches({self.size} of {self.num_workers}, {self.batches!r})"


def _budget(memory_budget, worker: int, default: int) -> int:
    """A worker's ceiling: one integer for all, ``{worker: n}``, or ``default`` (none)."""
    if memory_budget is None:
        return default
    return memory_budget if isinstance(memory_budget, int) else memory_budget.get(worker, default)
