"""Live rebalancing of variables across PS tasks (PSLD's exploitation-exploration, pure).

At round boundaries (every ``window`` rounds) the strategy hands the controller what it
measured since the last decision: the round times of the window, and per-PS load (bytes each
PS served per step, from the placement, and -- with emulated PS tasks -- the seconds each PS
was busy, from :mod:`tf_hetero.telemetry.psload`). The controller answers with the moves to
make now, each ``(unit, from PS, to PS)``; the TF glue (``strategies/runtime/rebalance.py``)
moves the variable, its optimizer slots and its accumulators, and training continues.

The loop (after PSLD, Chen et al., SoCC 2020):

0. **probe** (emulated PS tasks; ``probe=True``): before the first round the strategy times
   each PS serving two request sizes, and :meth:`RebalanceController.initial` moves what
   those rates call for at once, while a move costs only a re-trace (no worker has built
   the step yet). The probed rates are the controller's ``rates`` from then on.
1. **measure**: the first window's mean round time is the *baseline*.
2. **explore / exploit**: propose moves. Exploit (default): from the PS with the highest
   load per service rate, the unit whose move minimizes the largest estimated load per rate
   afterwards (and only if that estimate improves), repeated on the updated estimate while
   it improves, up to ``max_moves`` moves judged together (two heavy kernels on a slow PS
   move in one decision, not in two windows). Explore (probability ``explore``, seeded):
   one random unit to a random other PS, judged alone.
   Service rates are measured when busy times are given: fitted with a per-request cost
   over the last windows when request counts come too (:func:`fit_rates`), else bytes
   served / busy seconds; until then ``rates`` (equal by default).
3. **trial**: the next window runs with the moves. Its mean round time ``t`` is compared
   with the baseline: greedy moves are kept unless ``t`` is above the baseline (they were
   predicted to pay back their pause, and undoing them is another pause); an exploration
   is kept only if ``t <= baseline x (1 - min_gain)``. A kept trial's ``t`` is the new
   baseline; otherwise the moves are undone (moved back at once, last first) and each
   ``(unit, to PS)`` pair is not proposed again for ``retry_after`` decisions, twice as
   long each time the same pair is undone again (a trial and its undo cost two pauses:
   one that keeps failing must not be paid every ``retry_after`` decisions). Next moves
   may be proposed in the same decision.
4. **worth it?** Every move costs a pause: the step is traced again and the workers
   instantiate it (measured: ~0.8-1.8 s on a 2-core machine, docs/PSLD.md section 4). A
   greedy proposal is made only if its estimated saving pays that pause back within
   ``payback_rounds`` rounds: the saving per round is the bottleneck PS's measured busy
   seconds per round times the relative drop of the largest load per rate (the whole round
   when no busy times are measured); the pause is measured (the retrace the strategy
   reports plus the excess of the first round after a move over its window, the fit's
   first round before any move). Explorations spend at most ``explore_budget`` of the
   training time measured so far on their pauses (a move and its likely undo). Measured
   without these rules: a slow PS holding only biases drew 12-40 moves per fit, each
   undone trial two pauses, and rebalancing cost 4-20% of the time to target.

5. **pace**: a decision waits for every round in flight (moves need the engine idle), so the
   workers' queue runs dry at each one: measured ~0.1 s per decision on ``slow_ps``. After
   each decision in a row that moved nothing the next window is twice as long, up to
   ``max_window`` rounds; moves bring it back to ``window``.

Nothing here times anything: the decisions below run on synthetic round times.

>>> units = {"kernel0": (0, 32768 * 2), "kernel1": (0, 32768 * 2), "bias": (1, 512 * 2)}
>>> c = RebalanceController(window=2, min_gain=0.05, explore=0.0)
>>> c.bind(2)
>>> c.decide(units, [0.50, 0.50])          # baseline measured; move the heavy PS's kernel
[Move(unit='kernel0', src=0, dst=1)]
>>> units["kernel0"] = (1, 32768 * 2)
>>> c.decide(units, [0.30, 0.30])          # rounds got faster: kept, nothing better to try
[]
>>> c.kept, c.undone, c.baseline
(1, 0, 0.3)

A move that makes rounds slower is undone:

>>> c = RebalanceController(window=2, explore=0.0); c.bind(2)
>>> units = {"a": (0, 300), "b": (0, 100), "c": (1, 100)}
>>> c.decide(units, [0.2, 0.2])
[Move(unit='b', src=0, dst=1)]
>>> units["b"] = (1, 100)
>>> c.decide(units, [0.25, 0.25])          # slower: move b back (and b -> 1 is tabu now)
[Move(unit='b', src=1, dst=0)]
>>> c.kept, c.undone, c.history[-1]["decision"]
(0, 1, 'undo')

An undone pair waits ``retry_after`` decisions before it is tried again, twice as long after
each further undo (measured: retried every 10 decisions, one failing move paid a move and an
undo four times in a fit, docs/PSLD.md section 4):

>>> c = RebalanceController(window=2, explore=0.0, retry_after=2); c.bind(2)
>>> units = {"a": (0, 300), "b": (0, 100), "c": (1, 100)}
>>> tried = []
>>> for k in range(12):
...     trial = bool(c.trial)                     # this window ran on a trial placement
...     moves = c.decide(units, [0.25, 0.25] if trial else [0.2, 0.2])  # always slower
...     for m in moves:
...         units[m.unit] = (m.dst, units[m.unit][1])
...     if any(m.src == 0 for m in moves):
...         tried.append(c.decisions)
>>> tried                                      # b -> 1 after 2, then 4 decisions of tabu
[1, 4, 9]

Two kernels on a PS 3x slower than the other move in one decision (and the small bias
makes room for them on the fast PS):

>>> c = RebalanceController(window=2, explore=0.0, rates=(1.0, 1 / 3)); c.bind(2)
>>> c.decide({"k0": (1, 64000), "k1": (1, 64000), "b": (0, 800)}, [0.5, 0.5])
[Move(unit='k0', src=1, dst=0), Move(unit='k1', src=1, dst=0), Move(unit='b', src=0, dst=1)]

A move whose estimated saving does not pay its pause back is not tried: here the fit's
first round took 1.2 s more than the others (the pause a move would cost) and the loaded
PS is busy 10 ms of each 200 ms round, so balancing it saves at most ~5 ms a round:

>>> c = RebalanceController(window=3, explore=0.0); c.bind(2)
>>> units = {"k0": (0, 64000), "k1": (0, 64000), "b": (1, 800)}
>>> c.decide(units, [1.4, 0.2, 0.2], busy_s=[0.03, 0.001])
[]
>>> h = c.history[-1]; h["withheld"], round(h["pause_s"], 2), round(h["saving_s"], 3)
(True, 1.2, 0.005)

The same placement with the PS busy most of each round is worth a move:

>>> c = RebalanceController(window=3, explore=0.0); c.bind(2)
>>> c.decide(units, [1.4, 0.2, 0.2], busy_s=[0.5, 0.001])
[Move(unit='k0', src=0, dst=1)]
"""

from __future__ import annotations

import dataclasses
import random
from typing import Mapping, Sequence

from tf_hetero.policies.placement import parse_active  # the one check of an active set

__all__ = ["Move", "RebalanceController", "make", "fit_rates"]


def fit_rates(windows: Sequence[tuple], num_ps: int) -> tuple[float, ...] | None:
    """PS service rates relative to the fastest, from measured windows, or ``None``.

    Each window is ``(requests, bytes, busy_s)`` per PS. A PS's busy time is modelled as
    ``requests x c + bytes x u_p``: ``c`` a cost per request shared by every PS, ``u_p``
    PS ``p``'s seconds per byte; both are fitted by least squares. ``bytes / busy`` alone
    makes a PS that serves few bytes look slow (measured here: ~9 ms per request beside
    0.4 ms of bytes for a PS holding only biases). It needs as many independent equations
    as unknowns (two windows with different loads on each PS): ``None`` before.

    >>> w1 = ([64, 64], [50_000, 4_300_000], [64 * 0.009 + 50_000 * 0.25e-6,
    ...                                       64 * 0.009 + 4_300_000 * 0.75e-6])
    >>> fit_rates([w1], 2) is None                # one window: c and the rates not separable
    True
    >>> w2 = ([64, 64], [2_150_000, 2_200_000], [64 * 0.009 + 2_150_000 * 0.25e-6,
    ...                                         64 * 0.009 + 2_200_000 * 0.75e-6])
    >>> [round(r, 3) for r in fit_rates([w1, w2], 2)]   # PS 1 is 3x slower
    [1.0, 0.333]
    """
    import numpy as np

    rows, busy = [], []
    for requests, nbytes, seconds in windows:
        for p in range(num_ps):
            if requests[p] > 0:
                row = [0.0] * (num_ps + 1)
                row[0], row[1 + p] = float(requests[p]), float(nbytes[p])
                rows.append(row)
                busy.append(float(seconds[p]))
    if len(rows) < num_ps + 1:
        return None
    a = np.asarray(rows)
    norms = np.linalg.norm(a, axis=0)
    if not np.all(norms > 0):
        return None
    a = a / norms  # requests (~1e2) and bytes (~1e6) on one scale
    if np.linalg.matrix_rank(a, tol=1e-6) < num_ps + 1:
        return None
    x = np.linalg.lstsq(a, np.asarray(busy), rcond=None)[0] / norms
    seconds_per_byte = x[1:]
    if not np.all(seconds_per_byte > 0):
        return None  # noise larger than the signal: do not trust the fit
    rates = 1.0 / seconds_per_byte
    return tuple(float(r) for r in rates / rates.max())


@dataclasses.dataclass(frozen=True)
class Move:
    """Move ``unit`` (a variable or shard, by name) from PS ``src`` to PS ``dst``."""

    unit: str
    src: int
    dst: int

    def reverse(self) -> "Move":
        return Move(self.unit, self.dst, self.src)


class RebalanceController:
    """Decides moves from measured round times and per-PS load (see module notes).

    Args:
      window: rounds per measurement window (a decision after each).
      first_window: rounds in each of the first two windows (the baseline, then the trial of
        the first moves, whose changed loads also let the PS rates be fitted), so that a
        placement that is plainly wrong is fixed after ``2 x first_window`` rounds instead
        of ``2 x window``; ``None``: ``window`` (``rebalance=True`` uses 3 with window 8;
        docs/PSLD.md section 4). Later windows judge smaller gains and keep ``window``.
      min_gain: relative round-time improvement an exploration must bring to be kept (0.05:
        5%); a greedy trial is kept unless its window is slower than the baseline.
      explore: probability of a random move instead of the greedy one.
      rates: relative PS service rates used when no busy times are measured (default equal).
      retry_after: decisions before an undone ``(unit, to PS)`` may be proposed again
        (doubled for each earlier undo of the same pair).
      max_moves: most greedy moves proposed (and judged) together in one decision.
      skip_first: rounds at the start of each window left out of its mean (the first round
        after a move also runs the newly traced functions on the workers once).
      seed: of the exploration draws (reproducible).
      payback_rounds: a greedy proposal is made only if its estimated saving per round
        times this pays back the measured pause of a move (module notes, step 4); ``None``:
        always propose (the controller of 2026-11-28 and before).
      explore_budget: most share of the measured training time spent on explorations'
        pauses (two per exploration: the move and its likely undo); 1.0: no limit.
      max_window: after each decision that moved nothing the next window is twice as long,
        up to this many rounds (never below ``window``; back to ``window`` after moves).
        Each decision waits for the rounds in flight (the strategy's tasks stop running
        ahead): measured ~0.1 s of a fit per decision on ``slow_ps``, 51 decisions in a
        400-round fit. ``None``: every window is ``window`` rounds.
      probe: before the first round, let the strategy time each PS's service and make
        decision 0 on it (:meth:`initial`); ``False``: the first decision comes after the
        first window, on ``rates``.
    """

    def __init__(self, window: int = 8, min_gain: float = 0.05, explore: float = 0.1,
                 rates: Sequence[float] | None = None, retry_after: int = 10,
                 skip_first: int = 1, seed: int = 0, max_moves: int = 4,
                 first_window: int | None = None, payback_rounds: int | None = 50,
                 explore_budget: float = 0.05, probe: bool = True,
                 max_window: int | None = 64):
        if max_moves < 1:
            raise ValueError(f"RebalanceController(max_moves={max_moves}): need >= 1.")
        if window < 1 or not 0 <= skip_first < window:
            raise ValueError(f"RebalanceController(window={window}, skip_first={skip_first}): "
                             "need window >= 1 and 0 <= skip_first < window.")
        if first_window is not None and not skip_first < first_window <= window:
            raise ValueError(f"RebalanceController(first_window={first_window}, window={window}, "
                             f"skip_first={skip_first}): need skip_first < first_window <= "
                             "window (a window's mean leaves its first skip_first rounds out), "
                             "or first_window=None.")
        first_window = window if first_window is None else first_window
        self.max_window = window if max_window is None else max(max_window, window)
        if not 0 <= explore <= 1 or not 0 <= min_gain < 1:
            raise ValueError(f"RebalanceController(explore={explore}, min_gain={min_gain}): "
                             "need 0 <= explore <= 1 and 0 <= min_gain < 1.")
        if payback_rounds is not None and payback_rounds < 1 or not 0 <= explore_budget <= 1:
            raise ValueError(f"RebalanceController(payback_rounds={payback_rounds}, "
                             f"explore_budget={explore_budget}): need payback_rounds >= 1 "
                             "(or None: no pause check) and 0 <= explore_budget <= 1.")
        self.payback_rounds, self.explore_budget = payback_rounds, explore_budget
        self.probe = bool(probe)
        self.window, self.min_gain, self.explore = window, min_gain, explore
        self.first_window = first_window
        self.retry_after, self.skip_first, self.max_moves = retry_after, skip_first, max_moves
        self._rates = tuple(rates) if rates is not None else None
        self._rng = random.Random(seed)
        self.num_ps = 0
        #: The PS tasks variables may be on (elastic scaling: the others stand by).
        self.active: tuple[int, ...] = ()
        self.rates: tuple[float, ...] = ()
        self.baseline: float | None = None
        self.trial: list[Move] = []  # the moves being measured
        self._tabu: dict[tuple[str, int], int] = {}  # (unit, dst) -> decision it expires
        self._undos: dict[tuple[str, int], int] = {}  # (unit, dst) -> times undone
        self.decisions = 0
        self.kept = 0
        self.undone = 0
        #: Decisions whose greedy proposal was withheld: its saving did not pay the pause.
        self.withheld = 0
        #: The last measured pause of a move, seconds (``None``: not measured yet).
        self.pause_s: float | None = None
        self._elapsed = 0.0  # seconds of the rounds measured so far
        self._explore_spent = 0.0  # pause seconds charged to explorations
        self._moved = False  # the last decision made moves (the next window pays them)
        self._quiet = 0  # decisions in a row that made no moves (the window doubles each)
        #: One dict per decision: window mean, baseline, decision, moves (undo moves first,
        #: then ``trial``: the moves the next window judges), the pause measured, the
        #: proposal's estimated saving per round, ``withheld`` (a log for people).
        self.history: list[dict] = []
        self._explored = False  # the last proposal was an exploration
        self._trial_explored = False  # the trial being measured is an exploration
        #: Measured windows ``(requests, bytes, busy_s)`` per PS, the last ``fit_windows``.
        self._windows: list[tuple] = []
        self.fit_windows = 4
        self._fitted: tuple[float, ...] | None = None  # the last rates fit_rates gave
        #: One dict per :meth:`scale`: the decisions made before it, the active PS, moves.
        self.scalings: list[dict] = []
        #: Decision 0 (:meth:`initial`): the probed service, the moves, saving and pause;
        #: ``None`` until it ran (no probe: no emulated PS tasks, or ``probe=False``).
        self.initial_decision: dict | None = None

    def bind(self, num_ps: int) -> None:
        """Called once the cluster is known."""
        self.num_ps = num_ps
        self.active = tuple(range(num_ps))
        rates = self._rates or (1.0,) * num_ps
        if len(rates) != num_ps or any(not r > 0 for r in rates):
            raise ValueError(f"RebalanceController(rates={rates!r}): need {num_ps} rates > 0.")
        self.rates = tuple(float(r) for r in rates)

    def next_window(self) -> int:
        """Rounds until the next decision: ``first_window`` for the first two windows, then
        ``window``, doubled after each decision in a row that moved nothing, up to
        ``max_window``.

        >>> c = RebalanceController(window=8, first_window=4, max_window=32)
        >>> c.next_window(), c.decide({}, [0.1] * 4), c.next_window()
        (4, [], 4)
        >>> windows = []
        >>> for _ in range(4):
        ...     _ = c.decide({}, [0.1] * 8); windows.append(c.next_window())
        >>> windows                              # nothing to move: decisions grow rarer
        [32, 32, 32, 32]
        >>> c = RebalanceController(window=8, max_window=32); c.bind(2)
        >>> units = {"a": (0, 300), "b": (0, 100), "c": (1, 100)}
        >>> c.decide(units, [0.2] * 8), c.next_window()   # a move: its trial is judged soon
        ([Move(unit='b', src=0, dst=1)], 8)
        """
        if self.decisions < 2:
            return self.first_window
        return min(self.max_window, self.window * 2 ** min(self._quiet, 16))

    def window_mean(self, round_times: Sequence[float]) -> float | None:
        """Mean round time of a window, its first ``skip_first`` rounds left out.

        >>> RebalanceController(window=4, skip_first=1).window_mean([9.0, 1.0, 2.0, 3.0])
        2.0
        """
        kept = list(round_times)[self.skip_first:] or list(round_times)
        return sum(kept) / len(kept) if kept else None

    def initial(self, units: Mapping[str, tuple[int, float]], probed: Sequence,
                steps_per_round: int = 1, pause_s: float | None = None) -> list[Move]:
        """Decision 0, before the first round: the moves that the PS service measured by a
        probe calls for (``EmulatedServers.probe``: per PS, seconds per byte and seconds
        per request, or ``None``).

        Without it the first decision comes after a window on the creation placement and
        assumes equal rates (one window cannot tell a PS's per-request cost from its
        per-byte rate, :func:`fit_rates`): measured on the default problem with the
        kernels' PS 3x slow, that decision moved half the load, a second one the rest, each
        a pause of ~1.7-2.2 s (the step re-traced and instantiated again). Here the workers
        have not instantiated the step yet, so moving costs only the re-trace (``pause_s``:
        the first trace's seconds).

        The probed rates become ``rates`` (used until windows with different loads let
        :func:`fit_rates` measure them under load). Greedy moves are made while the largest
        load per rate drops, all at once and not judged (the first window measures the
        baseline of the new placement), if their saving pays ``pause_s`` back within
        ``payback_rounds`` rounds: saving per round = ``steps_per_round`` x the drop of the
        largest probed service time of one step on a PS (bytes x seconds per byte, plus two
        requests if the PS holds anything).

        >>> c = RebalanceController(); c.bind(2)
        >>> units = {"k0": (1, 64000), "k1": (1, 64000), "b": (0, 800)}
        >>> probed = [(0.25e-6, 1e-3), (0.75e-6, 1e-3)]         # PS 1 3x slower
        >>> c.initial(units, probed, steps_per_round=4, pause_s=0.5)
        [Move(unit='k0', src=1, dst=0), Move(unit='k1', src=1, dst=0), Move(unit='b', src=0, dst=1)]
        >>> [round(r, 3) for r in c.rates], round(c.initial_decision["saving_s"], 3)
        ([1.0, 0.333], 0.256)

        Nothing to move: the loaded PS is the fast one (a move worth too little for the
        re-trace is withheld: ``tests/test_rebalance.py``).

        >>> c = RebalanceController(); c.bind(2)
        >>> c.initial({"k0": (0, 64000), "b": (1, 800)}, probed, steps_per_round=4, pause_s=0.5)
        []
        """
        entry = {"probed": [list(p) if p is not None else None for p in probed],
                 "moves": [], "saving_s": 0.0, "pause_s": pause_s, "withheld": False}
        self.initial_decision = entry
        if (len(probed) != self.num_ps
                or any(p is None or not p[0] > 0 for p in probed)):
            entry["unusable"] = True  # a PS not emulated, or noise above the signal
            return []
        per_byte = [float(p[0]) for p in probed]
        fastest = min(per_byte)
        self.rates = tuple(fastest / u for u in per_byte)
        entry["rates"] = list(self.rates)
        units = dict(units)

        def service(placement):  # the bottleneck PS's probed seconds per step
            return max(load * u + (2 * p[1] if load > 0 else 0.0)
                       for load, u, p in zip(self._loads(placement), per_byte, probed))

        before, placed = service(units), dict(units)
        moves = self._greedy(units, self.rates)
        saving = max(0.0, before - service(units)) * steps_per_round
        entry["saving_s"] = saving
        withheld = bool(moves and self.payback_rounds is not None and pause_s is not None
                        and saving * self.payback_rounds < pause_s)
        # How even the placement the fit starts with is (coarse units: a partitioner helps).
        entry["gap"], entry["largest"] = self.gap(placed if withheld else units, self.rates)
        if withheld:
            entry["withheld"] = True
            return []
        entry["moves"] = [dataclasses.astuple(m) for m in moves]
        return moves

    def gap(self, units: Mapping[str, tuple[int, float]],
            rates: Sequence[float]) -> tuple[float | None, str | None]:
        """How far ``units`` (placed as given) are from an even spread of their load over
        the active PS tasks at ``rates``: the largest load per rate over the total load per
        total rate (1.0: even; ``None``: no load), and the largest unit's name. Whole
        variables can be placed no closer than their sizes allow; a ratio well above 1
        after the greedy moves says the units are too coarse (give the strategy a
        ``variable_partitioner``: shards are placed and moved one by one).

        >>> c = RebalanceController(); c.bind(2)
        >>> units = {"k0": (0, 64000), "k1": (1, 64000), "b": (1, 800)}
        >>> gap, largest = c.gap(units, (1.0, 1.0))     # two equal kernels: even
        >>> round(gap, 3), largest
        (1.006, 'k0')
        >>> units = {"k0": (0, 128000), "b": (1, 800)}
        >>> round(c.gap(units, (1.0, 1 / 3))[0], 3)     # one kernel, PS 1 3x slower
        1.325
        """
        active = self.active
        loads = self._loads(units)
        total = sum(loads[p] for p in active)
        if not units or total <= 0:
            return None, None
        even = total / sum(rates[p] for p in active)
        worst = max(loads[p] / rates[p] for p in active)
        largest = max(units, key=lambda name: units[name][1])  # the first of equals
        return worst / even, largest

    def _greedy(self, units: dict, rates: Sequence[float]) -> list[Move]:
        """Greedy moves (never random) while the estimate improves; ``units`` follows them."""
        explore, self.explore = self.explore, 0.0
        moves = []
        try:
            for _ in range(len(units)):
                proposal = self.propose(units, rates)
                if proposal is None:
                    break
                moves.append(proposal)
                units[proposal.unit] = (proposal.dst, units[proposal.unit][1])
        finally:
            self.explore = explore
        return moves

    def decide(self, units: Mapping[str, tuple[int, float]], round_times: Sequence[float],
               busy_s: Sequence[float] | None = None,
               served_bytes: Sequence[float] | None = None,
               requests: Sequence[int] | None = None,
               retrace_s: float | None = None) -> list[Move]:
        """The moves to make now.

        Args:
          units: name -> ``(PS, load)``: where each movable unit is and the bytes it moves
            per step (bytes x accesses).
          round_times: seconds of the window's rounds (in order).
          busy_s, served_bytes: measured per PS over the window (emulated PS tasks); give both
            to estimate the service rates, else ``rates`` is used.
          requests: requests served per PS over the window; with them the rates are fitted
            with a per-request cost (:func:`fit_rates`, over the last ``fit_windows``
            windows) instead of ``served_bytes / busy_s``.
          retrace_s: seconds the strategy spent tracing the step again after the last
            decision's moves (part of their pause; the rest is in this window's first round).
        """
        self.decisions += 1
        t = self.window_mean(round_times)
        moves: list[Move] = []
        entry = {"decision": "measure", "mean_s": t, "baseline_s": self.baseline}
        if t is None:
            entry["decision"] = "no rounds"
            self.history.append(entry)
            return moves
        self._observe_pause(round_times, t, retrace_s)
        entry["pause_s"] = self.pause_s
        self._elapsed += sum(round_times)
        units = dict(units)
        if self.trial:
            # An exploration must bring min_gain. A greedy trial was predicted to pay back its
            # pause; it is undone only if its window was slower than the baseline: an undo is
            # a second pause, and short windows are noisy (measured: a trial 4% faster than a
            # 2-round baseline was undone, and the fit spent the next 90 rounds ~30% slower
            # than the runs that kept it; docs/PSLD.md section 4).
            needed = None if self.baseline is None else (
                self.baseline * (1 - self.min_gain) if self._trial_explored else self.baseline)
            if needed is not None and t <= needed:
                entry["decision"] = "keep"
                self.kept += 1
                self.baseline = t
            else:
                entry["decision"] = "undo"
                self.undone += 1
                for move in reversed(self.trial):
                    moves.append(move.reverse())
                    pair = (move.unit, move.dst)
                    self._undos[pair] = self._undos.get(pair, 0) + 1
                    self._tabu[pair] = (self.decisions
                                        + self.retry_after * 2 ** (self._undos[pair] - 1))
                    units[move.unit] = (move.src, units[move.unit][1])
            self.trial = []
        else:
            self.baseline = t  # the current placement, as measured now
        rates = self._measured_rates(busy_s, served_bytes, requests) or self.rates
        before = dict(units)
        proposed: list[Move] = []
        for _ in range(self.max_moves):
            proposal = self.propose(units, rates)
            if proposal is None:
                break
            proposed.append(proposal)
            units[proposal.unit] = (proposal.dst, units[proposal.unit][1])
            if self._explored:
                break  # an exploration is one random move, judged alone
        if proposed and not self._explored:
            saving = self.saving(before, units, rates, t, busy_s, len(round_times))
            entry["saving_s"] = saving
            if (self.payback_rounds is not None and self.pause_s is not None
                    and saving * self.payback_rounds < self.pause_s):
                proposed = []  # not worth a pause: the placement stays
                self.withheld += 1
                entry["withheld"] = True
        self.trial = proposed
        self._trial_explored = self._explored and bool(proposed)
        moves += proposed
        self._moved = bool(moves)
        self._quiet = 0 if moves else self._quiet + 1
        entry["moves"] = [dataclasses.astuple(m) for m in moves]
        entry["trial"] = [dataclasses.astuple(m) for m in proposed]  # the rest undo a trial
        self.history.append(entry)
        return moves

    def _observe_pause(self, round_times, mean: float, retrace_s: float | None) -> None:
        """Measures a move's pause: after moves (or the fit's first window, whose first round
        instantiated the step too), the first round's excess over the window's mean, plus
        the retrace the strategy reports."""
        if not (self._moved or self.decisions == 1) or len(round_times) <= self.skip_first:
            return
        if self.skip_first == 0:
            return  # no round left out: the window's first round is not told apart
        excess = max(0.0, float(round_times[0]) - mean)
        self.pause_s = excess + float(retrace_s or 0.0)

    def saving(self, before: Mapping[str, tuple[int, float]],
               after: Mapping[str, tuple[int, float]], rates: Sequence[float],
               mean_s: float, busy_s: Sequence[float] | None, rounds: int) -> float:
        """Estimated seconds per round the placement ``after`` saves over ``before``: the
        bottleneck PS's busy seconds per round (measured; the whole round ``mean_s`` when
        not) times the relative drop of the largest load per rate.

        >>> c = RebalanceController(); c.bind(2)
        >>> c.saving({"a": (0, 300), "b": (0, 100)}, {"a": (0, 300), "b": (1, 100)},
        ...          (1.0, 1.0), 0.5, busy_s=[0.8, 0.0], rounds=4)    # 0.2 s a round x 1/4
        0.05
        """
        def worst(placement):
            per_rate = [a / r for a, r in zip(self._loads(placement), rates)]
            top = max(range(self.num_ps), key=lambda p: per_rate[p])
            return per_rate[top], top

        now, top = worst(before)
        later, _ = worst(after)
        if now <= 0:
            return 0.0
        busy = (busy_s[top] / rounds if busy_s is not None and len(busy_s) == self.num_ps
                and rounds else mean_s)
        return max(0.0, busy * (1 - later / now))

    def _measured_rates(self, busy_s, served_bytes, requests=None):
        """Service rate of each PS as measured, relative to the fastest; ``None`` if not
        measured (yet) on every PS. With request counts: :func:`fit_rates` over the last
        ``fit_windows`` windows; without: bytes per busy second."""
        if busy_s is None or served_bytes is None or len(busy_s) != self.num_ps:
            return None
        if requests is not None:
            self._windows.append((list(requests), list(served_bytes), list(busy_s)))
            del self._windows[:-self.fit_windows]
            fitted = fit_rates(self._windows, self.num_ps)
            # Windows on an unchanged placement cannot separate the per-request cost from
            # the rates: keep the last fit (measured: falling back to equal rates there sent
            # a kernel back to the slow PS, a trial undone at once, twice per run).
            self._fitted = fitted or self._fitted
            return self._fitted
        rates = [b / s if s > 0 and b > 0 else None for b, s in zip(served_bytes, busy_s)]
        if any(r is None for r in rates):
            return None
        top = max(rates)
        return tuple(r / top for r in rates)

    def propose(self, units: Mapping[str, tuple[int, float]],
                rates: Sequence[float]) -> Move | None:
        """One move, or ``None`` (nothing improves the estimate and no exploration).

        >>> c = RebalanceController(explore=0.0); c.bind(2)
        >>> c.propose({"a": (0, 300), "b": (0, 100), "c": (1, 100)}, (1.0, 1.0))
        Move(unit='b', src=0, dst=1)
        >>> c.propose({"a": (0, 300), "b": (1, 100)}, (1.0, 1.0)) is None   # already best
        True
        >>> c.propose({"a": (0, 300), "b": (0, 100)}, (1.0, 1 / 3))         # PS 1 3x slower
        Move(unit='b', src=0, dst=1)
        """
        tabu = {k for k, until in self._tabu.items() if until > self.decisions}
        loads = self._loads(units)
        candidates = [(name, ps, load, dst) for name, (ps, load) in sorted(units.items())
                      for dst in self.active
                      if dst != ps and load > 0 and (name, dst) not in tabu]
        if not candidates:
            return None
        self._explored = False
        if (self.explore and not self.trial and self._rng.random() < self.explore
                and self._may_explore()):
            self._explored = True
            self._explore_spent += 2 * (self.pause_s or 0.0)
            name, ps, _, dst = self._rng.choice(candidates)
            return Move(name, ps, dst)

        def worst_after(c):
            name, ps, load, dst = c
            after = list(loads)
            after[ps] -= load
            after[dst] += load
            return max(a / r for a, r in zip(after, rates))

        now = max(a / r for a, r in zip(loads, rates))
        best = min(candidates, key=lambda c: (worst_after(c), c[0], c[3]))
        if worst_after(best) >= now * (1 - 1e-9):
            return None
        return Move(best[0], best[1], best[3])

    def _loads(self, units: Mapping[str, tuple[int, float]]) -> list[float]:
        """Load on each PS: the sum of its units' loads."""
        loads = [0.0] * self.num_ps
        for ps, load in units.values():
            loads[ps] += load
        return loads

    def _may_explore(self) -> bool:
        """An exploration's pauses (its move and a likely undo) fit ``explore_budget`` of the
        training time measured so far."""
        cost = 2 * (self.pause_s or 0.0)
        return self._explore_spent + cost <= self.explore_budget * self._elapsed or cost == 0

    def scale(self, units: Mapping[str, tuple[int, float]], active: Sequence[int],
              busy_s: Sequence[float] | None = None,
              served_bytes: Sequence[float] | None = None,
              requests: Sequence[int] | None = None) -> list[Move]:
        """Elastic PS scaling: from now on only the PS tasks in ``active`` hold variables.
        Returns the moves that get there (made at once, not judged): every unit on a PS
        leaving the set goes, largest first, to the active PS with the least load per rate
        after taking it; then greedy moves while the estimate improves. Any trial in progress
        is dropped and the next window measures a new baseline.

        >>> c = RebalanceController(explore=0.0); c.bind(2); _ = c.scale({}, [0])
        >>> units = {"k0": (0, 6000), "k1": (0, 6000), "b": (0, 100)}
        >>> c.scale(units, [0, 1])                      # scale out: PS 1 takes half
        [Move(unit='k0', src=0, dst=1)]
        >>> c.scale({"k0": (1, 6000), "k1": (0, 6000), "b": (0, 100)}, [0])   # drain PS 1
        [Move(unit='k0', src=1, dst=0)]
        >>> c.scale(units, [2])
        Traceback (most recent call last):
        ...
        ValueError: scale_ps([2]): this cluster lists 2 PS tasks (TF_CONFIG "ps"), and TensorFlow cannot add a task to a running cluster. Fix: list every PS task you may scale to in TF_CONFIG, start with scale_ps(k) for k of them and scale up to 2 (docs/PSLD.md section 5).
        """

        active = parse_active(list(active), self.num_ps)
        rates = self._measured_rates(busy_s, served_bytes, requests) or self.rates
        self.active, self.trial, self.baseline = active, [], None
        self._quiet = 0  # the new set is measured at the usual pace
        units = dict(units)
        loads = self._loads(units)
        moves = []
        leaving = [(name, ps, load) for name, (ps, load) in units.items() if ps not in active]
        for name, ps, load in sorted(leaving, key=lambda u: (-u[2], u[0])):
            dst = min(active, key=lambda p: ((loads[p] + load) / rates[p], p))
            loads[ps] -= load
            loads[dst] += load
            units[name] = (dst, load)
            moves.append(Move(name, ps, dst))
        moves += self._greedy(units, rates)  # scaling moves are greedy, never random
        # Kept apart from ``history`` (one entry per decision: decision k is history[k-1]).
        self.scalings.append({"after_decision": self.decisions, "active": list(active),
                              "moves": [dataclasses.astuple(m) for m in moves]})
        return moves

    def summary(self) -> dict:
        """Figures for logs: decisions, moves kept and undone, the current baseline."""
        return {"rebalance_decisions": self.decisions, "rebalance_kept": self.kept,
                "rebalance_undone": self.undone, "rebalance_withheld": self.withheld,
                "rebalance_baseline_s": self.baseline, "rebalance_pause_s": self.pause_s,
                "rebalance_initial_moves": len((self.initial_decision or {}).get("moves", ()))}

    def __repr__(self):
        return (f"RebalanceController(window={self.window}, first_window={self.first_window}, "
                f"min_gain={self.min_gain}, "
                f"explore={self.explore}, max_moves={self.max_moves}, "
                f"payback_rounds={self.payback_rounds}, max_window={self.max_window})")


#: ``first_window`` of ``rebalance=True`` (measured: docs/PSLD.md section 4).
DEFAULT_FIRST_WINDOW = 3


def make(rebalance) -> RebalanceController | None:
    """A controller from ``rebalance=`` (``False``/``None``: off; ``True``: defaults; or a
    :class:`RebalanceController`).

    >>> make(True), make(False)
    (RebalanceController(window=8, first_window=3, min_gain=0.05, explore=0.1, max_moves=4, payback_rounds=50, max_window=64), None)
    >>> make("yes")
    Traceback (most recent call last):
    ...
    ValueError: rebalance='yes' is not a rebalancing option. Fix: use True, False or a tf_hetero.policies.rebalance.RebalanceController.
    """
    if rebalance is None or rebalance is False:
        return None
    if rebalance is True:
        return RebalanceController(first_window=DEFAULT_FIRST_WINDOW)
    if isinstance(rebalance, RebalanceController):
        return rebalance
    raise ValueError(f"rebalance={rebalance!r} is not a rebalancing option. Fix: use True, "
                     "False or a tf_hetero.policies.rebalance.RebalanceController.")
