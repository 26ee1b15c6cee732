"""The engine's written contracts: the dispatcher (TF side), the policy kinds, the value types
passed between them, and the component hooks.

Everything the engine asks of TensorFlow goes through a :class:`Dispatcher`; everything it
decides comes from a policy (one method each) or a :class:`Component` (a mechanism plugged
into the core at named hooks). Policies receive explicit values (:class:`RoundContext`) and
return explicit values (:class:`Plan`); nothing passes through attributes set on the side.

>>> Plan([0, 1, Pulled({0, 1})]).participants
(0, 1)
>>> RoundContext(round_id=3, idle=(0, 2), busy=(1,)).live
(0, 1, 2)
>>> normalize_groups([[3], [2, 0, 1]], 4)
((0, 1, 2), (3,))
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Mapping, Protocol, Sequence, Union, runtime_checkable

__all__ = ["Dispatcher", "SyncPolicy", "AssignmentPolicy", "Gate", "LatePolicy",
           "TransferPolicy", "GroupingPolicy", "UpdateScale", "RoundGuard", "ReportsFigures",
           "Pulled", "PlanEntry", "Plan", "RoundContext", "Groups", "GroupContext",
           "normalize_groups", "Component"]


# ------------------------------------------------------------------------ value types
@dataclasses.dataclass(frozen=True)
class Pulled:
    """A plan entry: the task is pulled by the first of ``workers`` to be free."""

    workers: frozenset

    def __init__(self, workers):
        object.__setattr__(self, "workers", frozenset(workers))


#: One task of a plan: a worker index (pinned) or :class:`Pulled`.
PlanEntry = Union[int, Pulled]


@dataclasses.dataclass
class Plan:
    """An assignment policy's answer: one entry per task of the next round (a worker may
    appear several times), the size of each task in work units (``sizes``, parallel to
    ``entries``; ``None``: one unit each -- a unit is a granule of samples, see
    :class:`~tf_hetero.engine.state.Task`), the projected round time and task time per
    worker (read by sync policies and task transfer), and a log of why (``info``, copied to
    ``Round.info`` for people and reports; the engine never reads it).

    ``steps``: the steps of ``fit`` (queued tasks) the round covers (``None``: one per
    entry). A sized round covers its global batch's worth of steps however many workers
    split it; the steps beyond its entries are absorbed (:meth:`Dispatcher.absorb`)."""

    entries: list
    info: dict = dataclasses.field(default_factory=dict)
    expected_s: float = math.nan
    task_s: dict = dataclasses.field(default_factory=dict)
    sizes: list | None = None
    steps: int | None = None

    def __post_init__(self):
        if self.sizes is not None and (len(self.sizes) != len(self.entries)
                                       or any(int(n) < 1 for n in self.sizes)):
            raise ValueError(f"Plan sizes {self.sizes!r}: need one size >= 1 per entry "
                             f"({len(self.entries)}).")

    @property
    def participants(self) -> tuple:
        """Every worker that may run one of the plan's tasks."""
        workers = set()
        for e in self.entries:
            workers |= e.workers if isinstance(e, Pulled) else {e}
        return tuple(sorted(workers))

    def __len__(self) -> int:
        return len(self.entries)


@dataclasses.dataclass(frozen=True)
class RoundContext:
    """What an assignment policy may know when it plans round ``round_id`` of a book: which
    of the book's live workers are idle or still busy (e.g. with a late task), and the
    monitor (task-time history)."""

    round_id: int
    idle: tuple
    busy: tuple = ()
    monitor: Any = None

    @property
    def live(self) -> tuple:
        return tuple(sorted(self.idle + self.busy))


#: Groups of workers: a tuple of sorted tuples of worker indices, sorted by first worker.
Groups = tuple


@dataclasses.dataclass(frozen=True)
class GroupContext:
    """What a grouping policy may know when the engine asks (at the start, and after each
    applied round): the live workers, the current groups (``None`` at the start), rounds
    applied so far (the engine's update count), and the monitor (task-time history)."""

    live: tuple
    current: Groups | None
    rounds_applied: int = 0
    monitor: Any = None
    num_workers: int = 0


def normalize_groups(groups: Sequence[Sequence[int]], num_workers: int | None = None) -> Groups:
    """Groups as sorted tuples, checked: each worker in exactly one non-empty group (and, with
    ``num_workers``, every worker in one). The engine's rule for the groups a
    :class:`GroupingPolicy` returns.

    >>> normalize_groups([[0, 1], [1, 2]], 3)
    Traceback (most recent call last):
    ...
    ValueError: groups [[0, 1], [1, 2]]: worker(s) [1] in two groups. Fix: put each worker in exactly one group.
    """
    try:
        out = tuple(sorted((tuple(sorted(int(w) for w in g)) for g in groups),
                           key=lambda g: g[:1]))
    except (TypeError, ValueError):
        raise ValueError(f"groups {groups!r}: need a list of lists of worker indices, e.g. "
                         "[[0, 1, 2], [3]].") from None
    seen: list[int] = [w for g in out for w in g]
    if any(not g for g in out):
        raise ValueError(f"groups {groups!r}: a group is empty. Fix: drop it.")
    counts = collections.Counter(seen)  # asked after every applied round: O(N), not O(N^2)
    twice = sorted(w for w, c in counts.items() if c > 1)
    if twice:
        raise ValueError(f"groups {groups!r}: worker(s) {twice} in two groups. Fix: put each "
                         "worker in exactly one group.")
    if num_workers is not None and sorted(seen) != list(range(num_workers)):
        raise ValueError(f"groups {groups!r}: with {num_workers} workers every worker "
                         f"0..{num_workers - 1} must be in one group (missing "
                         f"{sorted(set(range(num_workers)) - set(seen))}, unknown "
                         f"{sorted(set(seen) - set(range(num_workers)))}).")
    return out


# ------------------------------------------------------------------------- protocols
@runtime_checkable
class Dispatcher(Protocol):
    """The TF side of the engine (:mod:`tf_hetero.strategies.runtime.coordinator`).

    The engine calls these with its lock held; they must not call back into the engine
    synchronously except through the reporting methods on another thread.
    """

    def dispatch(self, task, worker: int | None, round_id: int | None) -> None:
        """Run ``task`` on ``worker`` (``None``: any); ``round_id`` is the round whose
        accumulators it feeds, ``None`` for an async task applied at once."""

    def dispatch_apply(self, round_id: int, lanes: Mapping[int, int],
                       folds: Mapping[tuple, tuple]) -> None:
        """Apply round ``round_id``'s gradients from ``lanes`` (``{lane: micro-batches}``)
        with the user's optimizer, plus late gradients ``folds``
        (``{(lane, slot): (round, weight)}``)."""

    def cancel(self, task) -> None:
        """``task`` will never run (the engine failed)."""

    def absorb(self, task, like) -> None:
        """``task`` (a step of fit) is covered by ``like``'s round without running: it ends
        when ``like`` ends, with ``like``'s result (its samples are in the round's tasks).
        Called before ``like`` is dispatched."""

    def duplicate(self, task) -> Any:
        """A second payload running ``task``'s step (task transfer)."""

    def drain(self, worker: int) -> Any:
        """The payload of a push-only task emptying ``worker``'s local buffer."""


class SyncPolicy(Protocol):
    """When a round may close. ``mode`` is ``"rounds"`` (tasks form rounds) or ``"async"``
    (each task's gradient is applied at once; ``should_close`` is never asked). An optional
    ``overlap`` attribute (default False) lets a book's next round open when this one closes,
    before its apply has landed (:class:`~tf_hetero.engine.state.Book`)."""

    mode: str

    def should_close(self, rnd, now: float) -> bool: ...


class AssignmentPolicy(Protocol):
    """Which workers get the next round's tasks.

    An optional ``min_steps(round_id) -> int | None`` says, without a context, at least how
    many queued tasks round ``round_id``'s plan will take (a sized round: its steps of
    ``fit``): while fewer are queued the engine does not plan (each plan's context is an
    O(N) pass over the workers, and ``fit`` submits a round's tasks one by one)."""

    def plan(self, ctx: RoundContext) -> Plan: ...


class Gate(Protocol):
    """May idle ``worker`` start another task now? Asked for each task in async mode, where
    ``clocks[w]`` counts the tasks live worker ``w`` has finished, and, over books, before a
    book plans a round, where it counts the tasks whose update has been applied (a worker
    the gate refuses sits the round out: SSP over one book per worker).

    An optional ``unbounded`` attribute (default False) says the gate never refuses: the
    engine then does not ask it (nor count applied tasks for it), as with no gate at all. An
    optional ``refused(clocks) -> set`` answers for every worker of ``clocks`` at once (the
    workers ``may_start`` would refuse): the engine asks over all live workers, and a gate that
    compares each worker with the others answers that in O(N) instead of O(N^2)."""

    def may_start(self, worker: int, clocks: Mapping[int, int]) -> bool: ...


class LatePolicy(Protocol):
    """Weight of a late gradient folded ``staleness`` rounds after its own (0: drop it)."""

    def weight(self, staleness: int) -> float: ...


class TransferPolicy(Protocol):
    """Should a task that has run ``elapsed_s`` be copied to an idle worker, given the
    typical task time ``typical_s`` (NaN when unknown)? Monotone in ``elapsed_s``: a task
    that is due stays due as it runs on (the engine does not ask again about tasks that
    started after one that is not due yet)."""

    def should_transfer(self, elapsed_s: float, typical_s: float) -> bool: ...


@runtime_checkable
class GroupingPolicy(Protocol):
    """Which workers train synchronously together, one book per group
    (:mod:`tf_hetero.policies.group`): asked with ``ctx.current=None`` for the first groups,
    then after every applied round; returns new groups, or ``None`` to keep the current
    ones (checked by :func:`normalize_groups`; the engine regroups once no round is open or
    applying: :mod:`tf_hetero.engine.books`)."""

    def groups(self, ctx: GroupContext) -> Groups | None: ...


@runtime_checkable
class UpdateScale(Protocol):
    """How much a round's mean gradient counts in its apply (:mod:`tf_hetero.policies.scale`:
    per-group lr rule, DynSGD's staleness scaling, a round closed at a quorum): asked at the
    close with its book's size, the workers, its staleness and ``fraction``, the share of
    its planned work units it applies. Optional: ``max_norm()``, the largest norm of a
    round's mean gradient (before the scale) its apply takes (0: no bound;
    :class:`~tf_hetero.policies.auto.AutoController`: a spike is clipped); ``velocity()``,
    asked once per round that has an apply, at its close, the factor on the optimizer's
    velocity before its update (1: as is; the controller's back-off: 0, the momentum
    restarted, or with ``restart=False`` the new step over the old)."""

    def scale(self, group_size: int, num_workers: int, staleness: float,
              fraction: float = 1.0) -> float: ...


@runtime_checkable
class RoundGuard(Protocol):
    """Reads each applied round's mean-gradient norm: why training diverged, or ``None``
    (:class:`~tf_hetero.engine.guard.DivergenceGuard`, the engine's default); ``reset`` when
    the next ``fit`` starts after a failure."""

    def check(self, round_id: int, norm: float) -> str | None: ...

    def reset(self) -> None: ...


@runtime_checkable
class ReportsFigures(Protocol):
    """A policy with monitor figures of its own (EPSP: rounds each worker sat out)."""

    def summary(self, rounds: Sequence, num_workers: int) -> dict: ...


# ------------------------------------------------------------------------ components
class Component:
    """A mechanism plugged into the engine core at named hooks; each hook's default does
    nothing, so a component overrides only what it changes. Hooks run with the engine's
    lock held, in the order the components were given.

    Components: :class:`~tf_hetero.engine.local.LocalAccumulation` (H-PS buffers and
    pushes), :class:`~tf_hetero.engine.transfer.TaskTransfer` (EPSP copies),
    :class:`~tf_hetero.engine.folding.LateFolding` (EPSP slack late gradients).
    """

    #: Accumulator lanes this component needs beyond one per worker.
    extra_lanes: int = 0

    def attach(self, engine) -> None:
        """Called once by the engine that owns the component."""
        self.engine = engine

    def on_round_planned(self, rnd, entries: Sequence) -> None:
        """``rnd``'s tasks exist (``rnd.tasks[i]`` from ``entries[i]``), none dispatched."""

    def on_task_started(self, task, worker: int) -> None:
        """``task`` (of a round, not stale) starts on ``worker``."""

    def on_task_done(self, task, worker: int) -> None:
        """``task`` finished in time for its open round."""

    def round_lanes(self, rnd, copies: Sequence):
        """Micro-batches per lane ``rnd``'s apply carries, or ``None`` to let the core count
        one per task done in its lane."""
        return None

    def staleness(self, task) -> int:
        """Staleness recorded for a task its own round applies."""
        return 0

    def blocks(self, worker: int, slot: int) -> bool:
        """Must ``worker`` get no task writing ``slot`` now?"""
        return False

    def on_late(self, rnd, lane: int, late: list) -> bool:
        """Every copy on ``lane`` of closed ``rnd`` has finished and ``late`` finished after
        the close: return True to keep them (the component applies or drops them later)."""
        return False

    def folds_for(self, rnd) -> dict:
        """Late gradients of earlier rounds folded into ``rnd``'s apply:
        ``{(lane, slot): (round, weight)}``."""
        return {}

    def after_event(self, book) -> None:
        """After any task event or tick (e.g. start a task transfer)."""

    def end_of_epoch(self, book) -> bool:
        """``fit`` joins, nothing is pending and ``book`` is idle: open a closing round of
        its own and return True, or return False."""
        return False

    def has_work(self) -> bool:
        """Does the component still hold work that keeps the engine from being idle?"""
        return False

    def on_worker_failed(self, worker: int) -> None:
        """``worker`` is unreachable."""

    def on_fail(self) -> None:
        """The engine failed: forget work in progress."""
