"""Live rebalancing of variables across PS tasks: the controller's decisions (pure).

At round boundaries (every window of rounds) the strategy hands the controller what it
measured since the last decision: the round times of the window, and per-PS load (bytes each
PS served per step, from the placement, and -- with emulated PS tasks -- the seconds each PS
was busy, from :mod:`tf_hetero.telemetry.psload`). The controller answers with the moves to
make now, each ``(unit, from PS, to PS)``; the TF glue (``strategies/runtime/rebalance.py``)
moves the variable, its optimizer slots and its accumulators, and training continues. Its
options: :class:`~tf_hetero.policies.rebalance_config.RebalanceConfig`; the PS rates it
weighs loads by: :mod:`tf_hetero.policies.ps_rates`.

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
3. **trial**: the next window runs with the moves. Its mean round time ``t`` is compared
   with the baseline: greedy moves are kept unless ``t`` is above the baseline (they were
   predicted to pay back their pause, and undoing them is another pause); an exploration
   is kept only if ``t <= baseline x (1 - min_gain)``. A kept trial's ``t`` is the new
   baseline; otherwise the moves are undone (moved back at once, last first) and each
   ``(unit, to PS)`` pair is :class:`Tabu` for ``retry_after`` decisions, twice as long
   each time the same pair is undone again (a trial and its undo cost two pauses: one that
   keeps failing must not be paid every ``retry_after`` decisions). Next moves may be
   proposed in the same decision.
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

Elastic PS scaling (:meth:`RebalanceController.scale`): the active set of PS tasks changes;
every unit on a PS leaving it moves to one that stays, load moves onto a PS joining it.

Nothing here times anything: the decisions below run on synthetic round times.

>>> def controller(**options):
...     c = RebalanceController(RebalanceConfig(**options)); c.bind(2); return c
>>> units = {"kernel0": (0, 32768 * 2), "kernel1": (0, 32768 * 2), "bias": (1, 512 * 2)}
>>> c = controller(window=2, min_gain=0.05, explore=0.0)
>>> c.decide(units, [0.50, 0.50])          # baseline measured; move the heavy PS's kernel
[Move(unit='kernel0', src=0, dst=1)]
>>> units["kernel0"] = (1, 32768 * 2)
>>> c.decide(units, [0.30, 0.30])          # rounds got faster: kept, nothing better to try
[]
>>> c.kept, c.undone, c.baseline
(1, 0, 0.3)

A move that makes rounds slower is undone:

>>> c = controller(window=2, explore=0.0)
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

>>> c = controller(window=2, explore=0.0, retry_after=2)
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

>>> c = controller(window=2, explore=0.0, rates=(1.0, 1 / 3))
>>> c.decide({"k0": (1, 64000), "k1": (1, 64000), "b": (0, 800)}, [0.5, 0.5])
[Move(unit='k0', src=1, dst=0), Move(unit='k1', src=1, dst=0), Move(unit='b', src=0, dst=1)]

A move whose estimated saving does not pay its pause back is not tried
(``tests/policies/test_rebalance.py``: a loaded PS busy 10 ms of each 200 ms round keeps its kernels
when a move's pause is 1.2 s; busy most of each round, it moves one).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Sequence

from tf_hetero.policies.placement import parse_active  # the one check of an active set
from tf_hetero.policies.ps_load import (Move, Tabu, Units, best_move, candidates, evacuate,
                                        gap, probed_service, saving)
from tf_hetero.policies.ps_rates import RateEstimator, fit_rates, probed_rates
from tf_hetero.policies.rebalance_config import DEFAULT_FIRST_WINDOW, RebalanceConfig

__all__ = ["Move", "RebalanceConfig", "RebalanceController", "Tabu", "make", "fit_rates"]


class RebalanceController:
    """Decides moves from measured round times and per-PS load (see module notes).

    ``config``: a :class:`RebalanceConfig` (``None``: the defaults). The strategy calls
    :meth:`bind` once the cluster is known, :meth:`initial` before the first round (decision
    0), :meth:`decide` after each window and :meth:`scale` when the active PS set changes.
    """

    def __init__(self, config: RebalanceConfig | None = None):
        if config is None:
            config = RebalanceConfig()
        if not isinstance(config, RebalanceConfig):
            raise TypeError(f"RebalanceController({config!r}): takes a RebalanceConfig. Fix: "
                            "RebalanceController(RebalanceConfig(window=..., ...)).")
        self.config = config
        self._rng = random.Random(config.seed)
        self._estimator = RateEstimator(0)
        self._tabu = Tabu(config.retry_after)
        self.num_ps = 0
        #: The PS tasks variables may be on (elastic scaling: the others stand by).
        self.active: tuple[int, ...] = ()
        self.rates: tuple[float, ...] = ()
        self.baseline: float | None = None
        self.trial: list[Move] = []  # the moves being measured
        self.decisions = self.kept = self.undone = 0
        #: Decisions whose greedy proposal was withheld: its saving did not pay the pause.
        self.withheld = 0
        #: The last measured pause of a move, seconds (``None``: not measured yet).
        self.pause_s: float | None = None
        self._elapsed = 0.0  # seconds of the rounds measured so far
        self._explore_spent = 0.0  # pause seconds charged to explorations
        self._moved = False  # the last decision made moves (the next window pays them)
        self._quiet = 0  # decisions in a row that made no moves (the window doubles each)
        self._explored = False  # the last proposal was an exploration
        self._trial_explored = False  # the trial being measured is an exploration
        #: One dict per decision: window mean, baseline, decision, moves (undo moves first,
        #: then ``trial``: the moves the next window judges), the pause measured, the
        #: proposal's estimated saving per round, ``withheld`` (a log for people).
        self.history: list[dict] = []
        #: One dict per :meth:`scale`: the decisions made before it, the active PS, moves.
        self.scalings: list[dict] = []
        #: Decision 0 (:meth:`initial`): the probed service, the moves, saving and pause;
        #: ``None`` until it ran (no probe: no emulated PS tasks, or ``probe=False``).
        self.initial_decision: dict | None = None

    def bind(self, num_ps: int) -> None:
        """Called once the cluster is known."""
        self.num_ps = num_ps
        self.active = tuple(range(num_ps))
        self._estimator = RateEstimator(num_ps)
        rates = self.config.rates or (1.0,) * num_ps
        if len(rates) != num_ps:
            raise ValueError(f"RebalanceConfig(rates={rates!r}): need {num_ps} rates > 0, one "
                             "per PS task of this cluster. Fix: rates=None (equal) or "
                             f"{num_ps} rates.")
        self.rates = tuple(float(r) for r in rates)

    # ------------------------------------------------------------------ pace
    def next_window(self) -> int:
        """Rounds until the next decision: ``first_window`` for the first two windows, then
        ``window``, doubled after each decision in a row that moved nothing, up to
        ``max_window``.

        >>> c = RebalanceController(RebalanceConfig(window=8, first_window=4, max_window=32))
        >>> c.next_window(), c.decide({}, [0.1] * 4), c.next_window()
        (4, [], 4)
        >>> windows = []
        >>> for _ in range(4):
        ...     _ = c.decide({}, [0.1] * 8); windows.append(c.next_window())
        >>> windows                              # nothing to move: decisions grow rarer
        [32, 32, 32, 32]
        >>> c = RebalanceController(RebalanceConfig(window=8, max_window=32)); c.bind(2)
        >>> units = {"a": (0, 300), "b": (0, 100), "c": (1, 100)}
        >>> c.decide(units, [0.2] * 8), c.next_window()   # a move: its trial is judged soon
        ([Move(unit='b', src=0, dst=1)], 8)
        """
        if self.decisions < 2:
            return self.config.first_rounds
        return min(self.config.window_cap, self.config.window * 2 ** min(self._quiet, 16))

    def window_mean(self, round_times: Sequence[float]) -> float | None:
        """Mean round time of a window, its first ``skip_first`` rounds left out.

        >>> c = RebalanceController(RebalanceConfig(window=4, skip_first=1))
        >>> c.window_mean([9.0, 1.0, 2.0, 3.0])
        2.0
        """
        kept = list(round_times)[self.config.skip_first:] or list(round_times)
        return sum(kept) / len(kept) if kept else None

    # ----------------------------------------------------------- decision 0
    def initial(self, units: Units, probed: Sequence, steps_per_round: int = 1,
                pause_s: float | None = None) -> list[Move]:
        """Decision 0, before the first round: the moves that the PS service measured by a
        probe calls for (``EmulatedServers.probe``: per PS, seconds per byte and seconds
        per request, or ``None``).

        Without it the first decision comes after a window on the creation placement and
        assumes equal rates (one window cannot tell a PS's per-request cost from its
        per-byte rate, :func:`fit_rates`): measured on the default problem with the
        kernels' PS 3x slow, that decision moved half the load, a second one the rest, each
        a pause of ~1.7-2.2 s. Here the workers have not instantiated the step yet, so
        moving costs only the re-trace (``pause_s``: the first trace's seconds).

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

        Nothing to move: the loaded PS is the fast one.

        >>> c = RebalanceController(); c.bind(2)
        >>> c.initial({"k0": (0, 64000), "b": (1, 800)}, probed, steps_per_round=4, pause_s=0.5)
        []
        """
        entry = {"probed": [list(p) if p is not None else None for p in probed],
                 "moves": [], "saving_s": 0.0, "pause_s": pause_s, "withheld": False}
        self.initial_decision = entry
        rates = probed_rates(probed, self.num_ps)
        if rates is None:
            entry["unusable"] = True  # a PS not emulated, or noise above the signal
            return []
        self.rates = rates
        entry["rates"] = list(self.rates)
        units, placed = dict(units), dict(units)
        before = probed_service(units, probed)
        moves = self._greedy(units, self.rates)
        saved = max(0.0, before - probed_service(units, probed)) * steps_per_round
        entry["saving_s"] = saved
        withheld = bool(moves) and not self._pays_back(saved, pause_s)
        # How even the placement the fit starts with is (coarse units: a partitioner helps).
        entry["gap"], entry["largest"] = gap(placed if withheld else units, self.rates,
                                             self.active)
        if withheld:
            entry["withheld"] = True
            return []
        entry["moves"] = [dataclasses.astuple(m) for m in moves]
        return moves

    # ------------------------------------------------------------ decisions
    def decide(self, units: Units, round_times: Sequence[float],
               busy_s: Sequence[float] | None = None,
               served_bytes: Sequence[float] | None = None,
               requests: Sequence[int] | None = None,
               retrace_s: float | None = None) -> list[Move]:
        """The moves to make now: undoes of a failed trial first, then the next trial.

        Args:
          units: name -> ``(PS, load)``: where each movable unit is and the bytes it moves
            per step (bytes x accesses).
          round_times: seconds of the window's rounds (in order).
          busy_s, served_bytes: measured per PS over the window (emulated PS tasks); give both
            to estimate the service rates, else ``rates`` is used.
          requests: requests served per PS over the window; with them the rates are fitted
            with a per-request cost (:func:`fit_rates`, over the last windows) instead of
            ``served_bytes / busy_s``.
          retrace_s: seconds the strategy spent tracing the step again after the last
            decision's moves (part of their pause; the rest is in this window's first round).
        """
        self.decisions += 1
        t = self.window_mean(round_times)
        entry = {"decision": "measure", "mean_s": t, "baseline_s": self.baseline}
        if t is None:
            entry["decision"] = "no rounds"
            self.history.append(entry)
            return []
        self._observe_pause(round_times, t, retrace_s)
        entry["pause_s"] = self.pause_s
        self._elapsed += sum(round_times)
        units = dict(units)
        moves = self._judge_trial(t, units, entry)
        rates = self._estimator.measure(busy_s, served_bytes, requests) or self.rates
        proposed = self._trial(units, rates, t, busy_s, len(round_times), entry)
        self.trial = proposed
        self._trial_explored = self._explored and bool(proposed)
        moves += proposed
        self._moved = bool(moves)
        self._quiet = 0 if moves else self._quiet + 1
        entry["moves"] = [dataclasses.astuple(m) for m in moves]
        entry["trial"] = [dataclasses.astuple(m) for m in proposed]  # the rest undo a trial
        self.history.append(entry)
        return moves

    def _judge_trial(self, t: float, units: dict, entry: dict) -> list[Move]:
        """Keeps or undoes the trial the window ``t`` ran on; returns the undo moves
        (``units`` follows them). Without a trial ``t`` is the new baseline.

        An exploration must bring ``min_gain``. A greedy trial was predicted to pay back its
        pause; it is undone only if its window was slower than the baseline: an undo is a
        second pause, and short windows are noisy (measured: a trial 4% faster than a
        2-round baseline was undone, and the fit spent the next 90 rounds ~30% slower than
        the runs that kept it; docs/PSLD.md section 4)."""
        if not self.trial:
            self.baseline = t  # the current placement, as measured now
            return []
        needed = None if self.baseline is None else (
            self.baseline * (1 - self.config.min_gain) if self._trial_explored
            else self.baseline)
        undo: list[Move] = []
        if needed is not None and t <= needed:
            entry["decision"] = "keep"
            self.kept += 1
            self.baseline = t
        else:
            entry["decision"] = "undo"
            self.undone += 1
            for move in reversed(self.trial):
                undo.append(move.reverse())
                self._tabu.ban((move.unit, move.dst), self.decisions)
                units[move.unit] = (move.src, units[move.unit][1])
        self.trial = []
        return undo

    def _trial(self, units: dict, rates: Sequence[float], mean_s: float,
               busy_s: Sequence[float] | None, rounds: int, entry: dict) -> list[Move]:
        """The next trial: greedy moves (up to ``max_moves``) or one exploration; greedy
        moves only if their saving pays back the pause. ``units`` follows them."""
        before = dict(units)
        proposed: list[Move] = []
        for _ in range(self.config.max_moves):
            proposal = self.propose(units, rates)
            if proposal is None:
                break
            proposed.append(proposal)
            units[proposal.unit] = (proposal.dst, units[proposal.unit][1])
            if self._explored:
                break  # an exploration is one random move, judged alone
        if proposed and not self._explored:
            saved = saving(before, units, rates, mean_s, busy_s, rounds)
            entry["saving_s"] = saved
            if not self._pays_back(saved, self.pause_s):
                proposed = []  # not worth a pause: the placement stays
                self.withheld += 1
                entry["withheld"] = True
        return proposed

    def _pays_back(self, saving: float, pause_s: float | None) -> bool:
        """``saving`` seconds per round repay ``pause_s`` within ``payback_rounds`` rounds
        (always, without the check or a measured pause)."""
        payback = self.config.payback_rounds
        return payback is None or pause_s is None or saving * payback >= pause_s

    def _observe_pause(self, round_times, mean: float, retrace_s: float | None) -> None:
        """Measures a move's pause: after moves (or the fit's first window, whose first round
        instantiated the step too), the first round's excess over the window's mean, plus
        the retrace the strategy reports."""
        skip = self.config.skip_first
        if not (self._moved or self.decisions == 1) or len(round_times) <= skip:
            return
        if skip == 0:
            return  # no round left out: the window's first round is not told apart
        excess = max(0.0, float(round_times[0]) - mean)
        self.pause_s = excess + float(retrace_s or 0.0)

    def propose(self, units: Units, rates: Sequence[float],
                greedy: bool = False) -> Move | None:
        """One move, or ``None`` (nothing improves the estimate and no exploration);
        ``greedy``: never an exploration.

        >>> c = RebalanceController(RebalanceConfig(explore=0.0)); c.bind(2)
        >>> c.propose({"a": (0, 300), "b": (0, 100), "c": (1, 100)}, (1.0, 1.0))
        Move(unit='b', src=0, dst=1)
        >>> c.propose({"a": (0, 300), "b": (1, 100)}, (1.0, 1.0)) is None   # already best
        True
        >>> c.propose({"a": (0, 300), "b": (0, 100)}, (1.0, 1 / 3))         # PS 1 3x slower
        Move(unit='b', src=0, dst=1)
        """
        allowed = candidates(units, self.active, self._tabu.barred(self.decisions))
        if not allowed:
            return None
        self._explored = False
        explore = 0.0 if greedy else self.config.explore
        if (explore and not self.trial and self._rng.random() < explore
                and self._may_explore()):
            self._explored = True
            self._explore_spent += 2 * (self.pause_s or 0.0)
            name, ps, _, dst = self._rng.choice(allowed)
            return Move(name, ps, dst)
        return best_move(units, rates, allowed)

    def _greedy(self, units: dict, rates: Sequence[float]) -> list[Move]:
        """Greedy moves (never random) while the estimate improves; ``units`` follows them."""
        moves = []
        for _ in range(len(units)):
            proposal = self.propose(units, rates, greedy=True)
            if proposal is None:
                break
            moves.append(proposal)
            units[proposal.unit] = (proposal.dst, units[proposal.unit][1])
        return moves

    def _may_explore(self) -> bool:
        """An exploration's pauses (its move and a likely undo) fit ``explore_budget`` of the
        training time measured so far."""
        cost = 2 * (self.pause_s or 0.0)
        return (self._explore_spent + cost <= self.config.explore_budget * self._elapsed
                or cost == 0)

    # -------------------------------------------------------- elastic scaling
    def scale(self, units: Units, active: Sequence[int],
              busy_s: Sequence[float] | None = None,
              served_bytes: Sequence[float] | None = None,
              requests: Sequence[int] | None = None) -> list[Move]:
        """Elastic PS scaling: from now on only the PS tasks in ``active`` hold variables.
        Returns the moves that get there (made at once, not judged): every unit on a PS
        leaving the set goes, largest first, to the active PS with the least load per rate
        after taking it; then greedy moves while the estimate improves. Any trial in progress
        is dropped and the next window measures a new baseline.

        >>> c = RebalanceController(RebalanceConfig(explore=0.0)); c.bind(2)
        >>> _ = c.scale({}, [0])
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
        rates = self._estimator.measure(busy_s, served_bytes, requests) or self.rates
        self.active, self.trial, self.baseline = active, [], None
        self._quiet = 0  # the new set is measured at the usual pace
        units = dict(units)
        moves = evacuate(units, active, rates)
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
        return f"RebalanceController({self.config!r})"


def make(rebalance) -> RebalanceController | None:
    """A controller from the strategy's ``rebalance=``: ``False``/``None``: off; ``True``: the
    defaults with ``first_window=3`` (measured: docs/PSLD.md section 4); a
    :class:`RebalanceConfig`; or a :class:`RebalanceController` (used as it is).

    >>> make(True).config.first_window, make(RebalanceConfig(window=4)).config.window
    (3, 4)
    >>> make(False) is None
    True
    >>> make("yes")
    Traceback (most recent call last):
    ...
    ValueError: rebalance='yes' is not a rebalancing option. Fix: use True, False, a tf_hetero.policies.rebalance.RebalanceConfig or a RebalanceController.
    """
    if rebalance is None or rebalance is False:
        return None
    if rebalance is True:
        return RebalanceController(RebalanceConfig(first_window=DEFAULT_FIRST_WINDOW))
    if isinstance(rebalance, RebalanceConfig):
        return RebalanceController(rebalance)
    if isinstance(rebalance, RebalanceController):
        return rebalance
    raise ValueError(f"rebalance={rebalance!r} is not a rebalancing option. Fix: use True, "
                     "False, a tf_hetero.policies.rebalance.RebalanceConfig or a "
                     "RebalanceController.")
