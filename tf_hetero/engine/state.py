"""What the engine tracks: tasks, rounds, round books, and their states.

A *task* is one training step ``model.fit`` (or a custom loop) scheduled; a *round* is a set
of tasks whose gradients are applied together, by one apply; a *book* is a group of workers
that runs its own rounds, one open and one applying at a time (BSP: one book of all workers;
grouped sync: one book per group, applying to the same model asynchronously to each other).

Task states and their transitions (:class:`TaskState`)::

    PENDING ──> DISPATCHED ──> RUNNING ──> DONE ──> (LATE, if its lane was still written)
       │  ^          ^            │  │        └──> (DROPPED, lost in a dead worker's buffer)
       │  │          │            │  └───> LATE ──> FOLDED | DROPPED
       v  │          │            └──────> DROPPED (stale, lost to its twin, or round abandoned)
      QUEUED ────────┘ (pulled by a free allowed worker; back to PENDING if its round closed)
       │
       └──> ABSORBED (a step its round covers without a closure of its own; see Round.absorbed)

Rounds (:class:`RoundKind`): ``TRAIN`` rounds hold tasks of ``fit``; ``DRAIN`` rounds hold
push-only tasks that empty pipelined buffers (H-PS); ``FOLD`` rounds have no task and apply
only late gradients of earlier rounds (EPSP slack sync). A round opens (``t_open``), closes
(``closed``, ``t_close``: no task of it may write any more) and is applied (``applied >= 0``,
``t_applied``).

>>> TaskState.DONE == "done", str(TaskState.LATE), RoundKind.TRAIN.value
(True, 'late', 'train')
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

__all__ = ["TaskState", "RoundKind", "Task", "Round", "Book", "RunningTasks", "PUSH_OLD",
           "PUSH_ALL"]

#: Local accumulation (H-PS): a task's push flags. ``PUSH_OLD``: before its own gradient is
#: in, push what its worker holds locally (so the push overlaps the task's compute);
#: ``PUSH_ALL``: after its compute, push the local sum plus its own gradient.
PUSH_OLD, PUSH_ALL = 1, 2
#: A write flag beside them: the task's write starts its lane afresh even if the lane holds
#: its own round's tag (a re-run in the lane of a dead worker, whose write may have landed).
OVERWRITE = 4


class TaskState(str, enum.Enum):
    """Where a task is in its life (see the module docstring for the transitions). A ``str``
    enum: ``task.state == "done"`` reads as it always did."""

    PENDING = "pending"  # submitted; in no round yet
    QUEUED = "queued"  # in a round, waiting for a free worker allowed to pull it
    DISPATCHED = "dispatched"  # handed to the dispatcher for one worker
    RUNNING = "running"  # a worker thread started it
    DONE = "done"  # finished in time: its round applies it
    LATE = "late"  # finished after its round closed (or its lane was still being written)
    FOLDED = "folded"  # late, and folded into a later round's apply
    DROPPED = "dropped"  # never applied (also: done, but lost with its worker's buffer)
    ABSORBED = "absorbed"  # covered by its round's other tasks' samples; never runs

    __hash__ = str.__hash__  # equal to its value, so it must hash like it too

    def __str__(self) -> str:
        return self.value


class RoundKind(str, enum.Enum):
    """What a round holds (see the module docstring)."""

    TRAIN = "train"
    DRAIN = "drain"
    FOLD = "fold"

    __hash__ = str.__hash__  # equal to its value, so it must hash like it too

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(eq=False)
class Task:
    """One training step. Identity matters (``eq=False``): a task is one object."""

    id: int
    payload: Any  # what the dispatcher runs (a TF closure)
    round: int | None = None
    pinned: int | None = None  # worker the engine chose (None: any worker)
    worker: int | None = None  # worker that ran it
    state: TaskState = TaskState.PENDING
    t_submit: float = 0.0
    t_start: float = 0.0
    t_call: float = 0.0  # its closure handed to TensorFlow (after t_start's bookkeeping)
    t_end: float = 0.0
    version_at_start: int = 0  # applied updates when it started (staleness)
    lane: int | None = None  # accumulator lane it writes (None: its worker's)
    twin: "Task | None" = None  # the other copy of a transferred task
    duplicate: bool = False  # a copy made by task transfer
    stale: bool = False  # started after its round closed: wrote nothing
    #: Run again after the worker running it died: that first run may have written its lane.
    rerun: bool = False
    push: int = 0  # local accumulation: PUSH_OLD / PUSH_ALL flags (0: keep it local)
    pushed: int = 0  # local accumulation: micro-batches its push carried
    drain: bool = False  # a push-only task (no micro-batch of its own)
    overwrite: bool = False  # its write replaces what its lane holds (see OVERWRITE)
    #: Work units the task processes: granules of samples its step reads and concatenates
    #: into one batch (sized strategies); its gradient weighs ``size`` in the round's mean.
    size: int = 1
    #: What its closure does, fixed when it is submitted: ``"round"`` (it writes a round's
    #: accumulators) or ``"step"`` (it applies its own update, asynchronously). The engine
    #: runs each task the way it was made (an engine whose sync policy switches modes holds
    #: both kinds; see :meth:`~tf_hetero.engine.core.RoundEngine.submit`).
    kind: str = "round"

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start

    @property
    def lane_id(self) -> int | None:
        return self.lane if self.lane is not None else self.worker


@dataclasses.dataclass(eq=False)
class Round:
    """One round of one book. ``info`` is a log of what the policies decided (for people and
    reports); the engine reads its decisions from the :class:`~tf_hetero.engine.api.Plan`."""

    id: int
    tasks: list
    kind: RoundKind = RoundKind.TRAIN
    book: int = 0  # the book (worker group) whose round it is
    slot: int = 0  # accumulator slot it writes: alternates between a book's rounds
    t_open: float = 0.0
    t_close: float = 0.0
    t_applied: float = 0.0
    closed: bool = False
    abandoned: bool = False  # the engine failed while it was open or applying
    lanes: dict = dataclasses.field(default_factory=dict)  # lane -> micro-batches applied
    applied: int = -1  # micro-batches the apply reported (-1: not yet)
    live_workers: int = 0  # live workers of its book when it opened
    pull: list = dataclasses.field(default_factory=list)  # (task, allowed workers) not handed out
    copies: list = dataclasses.field(default_factory=list)  # duplicates made by task transfer
    #: Steps of fit the round covers beyond its tasks (a sized round whose global batch its
    #: participants split when a worker sits out or is dead): consumed without running, so a
    #: fit reads steps x batch samples whatever the parallelism (the sample budget).
    absorbed: list = dataclasses.field(default_factory=list)
    participants: tuple = ()  # workers that may run this round's tasks
    expected_s: float = float("nan")  # projected duration (sync policies may use it)
    task_s: dict = dataclasses.field(default_factory=dict)  # projected task s per worker
    folds: dict = dataclasses.field(default_factory=dict)  # (lane, slot) -> (round, weight)
    #: Factor on the round's mean gradient in its apply (UpdateScale: per-group lr rule,
    #: staleness scaling); 1: the mean as is.
    scale: float = 1.0
    #: Largest norm of the round's mean gradient (before ``scale``) its apply takes: a
    #: larger one is scaled down to it (UpdateScale's optional ``max_norm``); 0: no bound.
    max_norm: float = 0.0
    #: Factor on the optimizer's velocity before the round's update (UpdateScale's
    #: optional ``velocity``: a step backed off acts at once, not as the old velocity
    #: decays); 1: as is.
    velocity: float = 1.0
    info: dict = dataclasses.field(default_factory=dict)  # what the policies decided (a log)
    _in_prefix: int = dataclasses.field(default=0, repr=False)  # tasks known in (all_done)
    _in_count: int = dataclasses.field(default=0, repr=False)  # num_done, kept by the engine

    @property
    def num_done(self) -> int:
        """Tasks in: a transferred task counts once, when its first copy is in. Kept as
        tasks finish (:meth:`task_in`, :meth:`task_out`): sync policies and the ticker ask
        after every event, and counting a round of N tasks each time cost O(N^2) a round
        (benchmarks/results/2026-12-07-engine-python/)."""
        return self._in_count

    def task_in(self, task: Task) -> None:
        """``task``, one of the round's tasks or a transfer copy of one, is now DONE (the
        engine calls this only when its twin is not)."""
        self._in_count += 1

    def task_out(self, task: Task) -> None:
        """``task`` was DONE and is dropped after all (``RoundEngine.lose``): its original is
        no longer in, unless its twin is."""
        if task.twin is None or task.twin.state != TaskState.DONE:
            self._in_count -= 1

    @property
    def all_done(self) -> bool:
        """Every task is in (``num_done == len(tasks)``). Asked at every task's end, so it
        resumes where the last call stopped (while a round is open a task that is in stays
        in): counting them all made a round of N tasks cost N^2 (1000 workers: seconds)."""
        tasks, i = self.tasks, self._in_prefix
        while i < len(tasks) and _is_in(tasks[i]):
            i += 1
        self._in_prefix = i
        return i == len(tasks)


def _is_in(t: Task) -> bool:
    """A round's task is in: it is done, or its transfer twin is."""
    return t.state == TaskState.DONE or (t.twin is not None and t.twin.state == TaskState.DONE)


@dataclasses.dataclass(eq=False)
class Book:
    """A group of workers with its own rounds: at most one open round and two closed rounds
    not yet applied, and never round ``r + 2`` open before round ``r`` is applied (what the
    two accumulator slots need). The next round opens once the open one has been applied, or,
    when the sync policy overlaps rounds (``overlap = True``), once it has closed: its tasks
    then read the model before the previous apply lands (staleness 1)."""

    id: int
    workers: frozenset
    sync: Any  # SyncPolicy
    assign: Any  # AssignmentPolicy
    open: Round | None = None
    applying: Round | None = None  # the oldest closed round not applied yet
    queued: Round | None = None  # overlap: a closed round whose apply follows ``applying``'s
    opened: int = 0  # rounds opened so far (the next one's slot is opened % 2)

    @property
    def busy(self) -> bool:
        return self.open is not None or self.applying is not None or self.queued is not None

    @property
    def may_open(self) -> bool:
        """May the next round open now?"""
        if self.open is not None or self.queued is not None:
            return False
        return self.applying is None or bool(getattr(self.sync, "overlap", False))


class RunningTasks:
    """The tasks each worker runs or has been handed, and the workers with none (``free``),
    kept as tasks come and go: the asynchronous pump serves the free workers without looking
    at every one (sorting all 1000 workers at every task cost ~0.2 ms of the chief's Python
    a task; benchmarks/results/2026-12-07-engine-python-2/).

    >>> r = RunningTasks(3)
    >>> r.add(1, "t"); sorted(r.free), r[1]
    ([0, 2], {'t'})
    >>> r.discard(1, "t"); r.add(2, "u"); r.clear(); sorted(r.free), any(r.values())
    ([0, 1, 2], False)
    """

    def __init__(self, num_workers: int):
        self._by = {w: set() for w in range(num_workers)}
        self.free = set(range(num_workers))

    def __getitem__(self, worker: int) -> set:
        return self._by[worker]  # read-only use: change it through add and discard

    def add(self, worker: int, task) -> None:
        self._by[worker].add(task)
        self.free.discard(worker)

    def discard(self, worker: int, task) -> None:
        tasks = self._by[worker]
        tasks.discard(task)
        if not tasks:
            self.free.add(worker)

    def clear(self) -> None:
        for tasks in self._by.values():
            tasks.clear()
        self.free = set(self._by)

    def values(self):
        return self._by.values()

    def items(self):
        return self._by.items()
