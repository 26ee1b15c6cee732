"""The books of one engine: which workers run rounds together, formed and re-formed.

A *book* (:class:`~tf_hetero.engine.state.Book`) is a group of workers with its own rounds.
Most strategies have one book of all workers. Given explicit ``books``, the engine runs
those; given a :class:`~tf_hetero.engine.api.GroupingPolicy` (grouped sync, DynSGD, CASP), the
policy forms the first books and is asked again after every applied round
(:meth:`Books.consider`). A new grouping waits until no book has a round open or applying
(:meth:`Books.regroup`), so no gradient is lost or applied twice; the new books get new ids
(old rounds keep theirs).

Every book shares the engine's assignment policy, except one that sizes a global batch
(``for_group``): each group then gets its own share of it, made again at every regroup
(:meth:`Books.assign_for`).

>>> from tf_hetero.policies import AllTasks, FixedGroups, OnePerWorker
>>> books = Books(4, AllTasks(), OnePerWorker(), grouping=FixedGroups([[0, 1, 2], [3]]))
>>> [(b.id, sorted(b.workers)) for b in books], books.groups
([(0, [0, 1, 2]), (1, [3])], ((0, 1, 2), (3,)))
>>> Books(3, AllTasks(), OnePerWorker(), books=[((0, 1), AllTasks(), OnePerWorker())])
Traceback (most recent call last):
...
ValueError: workers [2] are in no book: every worker belongs to one.
"""

from __future__ import annotations

from typing import Iterator

from tf_hetero.engine.api import GroupContext, Groups, normalize_groups
from tf_hetero.engine.state import Book

__all__ = ["Books"]


class Books:
    """The current books, every book ever formed (by id: rounds name theirs), and the
    grouping policy that re-forms them. Not thread-safe: the engine calls it under its lock.

    Args:
      num_workers: worker tasks in the cluster.
      sync: every book's sync policy (ignored when ``books`` is given).
      assign: the single book's assignment policy, or what every group's is made from.
      books: ``[(workers, sync, assign), ...]``, fixed (default: one book of all workers).
      grouping: a :class:`~tf_hetero.engine.api.GroupingPolicy` (not with ``books``).
      monitor: passed to the grouping policy; told of every regroup.
    """

    def __init__(self, num_workers: int, sync, assign, books=None, grouping=None,
                 monitor=None):
        if sync is None and books is None:
            raise ValueError("RoundEngine: give a sync policy (e.g. AllTasks()), or books.")
        self.num_workers, self.monitor = num_workers, monitor
        self._sync = sync  # every book's, unless the grouping policy gives a group its own
        #: The grouping policy (``None``: the books are fixed). It may be replaced between
        #: rounds; the new one is asked after the next applied round.
        self.grouping = grouping
        self._assign = assign  # grouped: what every book's assignment policy is made from
        if grouping is not None:
            if books is not None:
                raise ValueError("give books or a grouping policy, not both.")
            if hasattr(assign, "set_units") and not hasattr(assign, "for_group"):
                raise ValueError(f"grouping: the assignment policy {assign!r} sizes a global "
                                 "batch across all workers; groups need one that plans per "
                                 "group (e.g. OnePerWorker, or BalancedBatches: a share of "
                                 "the global batch per group).")
            groups = normalize_groups(grouping.groups(GroupContext(
                tuple(range(num_workers)), None, 0, monitor, num_workers)), num_workers)
            books = [(g, self.sync_for(g), self.assign_for(g)) for g in groups]
        if books is None:
            books = [(range(num_workers), sync, assign)]
        #: The current books, in id order.
        self.current = [Book(i, frozenset(w), s, a) for i, (w, s, a) in enumerate(books)]
        self._check()
        self._by_id = {b.id: b for b in self.current}
        self._requested: Groups | None = None  # to form once no round is open or applying
        self._groups: tuple | None = None  # (the books they are of, their groups)

    def __iter__(self) -> Iterator[Book]:
        return iter(self.current)

    def __getitem__(self, book_id: int) -> Book:
        """Any book ever formed, by id."""
        return self._by_id[book_id]

    @property
    def groups(self) -> Groups:
        """The current books' workers, as sorted tuples (grouped sync: the groups). Kept
        until the books are re-formed (:meth:`consider` asks after every applied round, and
        with one book per worker a round is a task)."""
        kept = self._groups
        if kept is None or kept[0] is not self.current:
            kept = self._groups = (self.current,
                                   normalize_groups([b.workers for b in self.current]))
        return kept[1]

    @property
    def requested(self) -> bool:
        """Are new books waiting to be formed (:meth:`regroup`)?"""
        return self._requested is not None

    def sync_for(self, workers) -> object:
        """A group's sync policy: the grouping policy's own for it (``sync_for(size,
        num_workers)``, e.g. an adaptive strategy's one-task books overlapping their rounds),
        else the sync policy every book shares."""
        own = getattr(self.grouping, "sync_for", None)
        return own(len(workers), self.num_workers) if own is not None else self._sync

    def assign_for(self, workers) -> object:
        """A group's assignment policy: its own share of the global batch when the policy
        sizes one (``for_group``: a group's round is its members' batches, split by speed),
        else the policy every book shares (one task per member)."""
        if hasattr(self._assign, "for_group"):
            return self._assign.for_group(len(workers), self.num_workers)
        return self._assign

    def consider(self, live, rounds_applied: int) -> None:
        """Asks the grouping policy (after each applied round) whether to re-form the books;
        ``live``: the live workers, ``rounds_applied``: the engine's update count."""
        if self.grouping is None or self._requested is not None:
            return
        current = self.groups
        proposal = self.grouping.groups(GroupContext(
            tuple(sorted(live)), current, rounds_applied, self.monitor, self.num_workers))
        if proposal is not None:
            proposal = normalize_groups(proposal, self.num_workers)
            if proposal != current:
                self._requested = proposal

    def regroup(self) -> bool:
        """Forms the requested books once no round of any book is open or applying (so no
        gradient is lost or applied twice; a worker's late task still finishes before its
        next one on that worker). Returns True when the books are the new ones."""
        if any(b.busy for b in self.current):
            return False
        groups, self._requested = self._requested, None
        base = max(self._by_id) + 1
        self.current = [Book(base + i, frozenset(g), self.sync_for(g), self.assign_for(g))
                        for i, g in enumerate(groups)]
        self._by_id.update({b.id: b for b in self.current})
        if self.monitor:
            self.monitor.on_event("regroup", groups=[list(g) for g in groups])
        return True

    def _check(self) -> None:
        seen = set()
        for b in self.current:
            if not b.workers or not b.workers <= set(range(self.num_workers)):
                raise ValueError(f"book {b.id} has workers {sorted(b.workers)}: need a "
                                 f"non-empty subset of 0..{self.num_workers - 1}.")
            if b.workers & seen:
                raise ValueError(f"worker(s) {sorted(b.workers & seen)} in two books: each "
                                 "worker belongs to one book.")
            seen |= b.workers
        if seen != set(range(self.num_workers)):
            raise ValueError(f"workers {sorted(set(range(self.num_workers)) - seen)} are in no "
                             "book: every worker belongs to one.")
        modes = {b.sync.mode for b in self.current}
        if modes - {"rounds", "async"} or len(modes) > 1:
            raise ValueError(f"sync policies have modes {sorted(modes)}: every book must use "
                             "'rounds', or the single book 'async'.")
        if modes == {"rounds"} and any(b.assign is None for b in self.current):
            raise ValueError("RoundEngine: rounds need an assignment policy (e.g. "
                             "OnePerWorker()).")
