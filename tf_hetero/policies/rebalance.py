"""Live rebalancing of variables across PS tasks (PSLD's exploitation-exploration, pure).

At round boundaries (every ``window`` rounds) the strategy hands the controller what it
measured since the last decision: the round times of the window, and per-PS load (bytes each
PS served per step, from the placement, and -- with emulated PS tasks -- the seconds each PS
was busy, from :mod:`tf_hetero.telemetry.psload`). The controller answers with the moves to
make now, each ``(unit, from PS, to PS)``; the TF glue (``strategies/runtime/rebalance.py``)
moves the variable, its optimizer slots and its accumulators, and training continues.

The loop (after PSLD, Chen et al., SoCC 2020):

1. **measure**: the first window's mean round time is the *baseline*.
2. **explore / exploit**: propose one move. Exploit (default): from the PS with the highest
   load per service rate to the one with the lowest, the unit whose move minimizes the
   largest estimated load per rate afterwards (and only if that estimate improves).
   Explore (probability ``explore``, seeded): a random unit to a random other PS.
   Service rates are measured (bytes served / busy seconds per PS) when busy times are
   given, else ``rates`` (equal by default).
3. **trial**: the next window runs with the move. Its mean round time ``t`` is compared with
   the baseline: ``t <= baseline x (1 - min_gain)`` keeps the move (``t`` is the new
   baseline); otherwise the move is undone (moved back at once) and the ``(unit, to PS)``
   pair is not proposed again for ``retry_after`` decisions. A next move may be proposed in
   the same decision.

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
"""

from __future__ import annotations

import dataclasses
import random
from typing import Mapping, Sequence

__all__ = ["Move", "RebalanceController", "make"]


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
      min_gain: relative round-time improvement a move must bring to be kept (0.05: 5%).
      explore: probability of a random move instead of the greedy one.
      rates: relative PS service rates used when no busy times are measured (default equal).
      retry_after: decisions before an undone ``(unit, to PS)`` may be proposed again.
      skip_first: rounds at the start of each window left out of its mean (the first round
        after a move also runs the newly traced functions on the workers once).
      seed: of the exploration draws (reproducible).
    """

    def __init__(self, window: int = 8, min_gain: float = 0.05, explore: float = 0.1,
                 rates: Sequence[float] | None = None, retry_after: int = 10,
                 skip_first: int = 1, seed: int = 0):
        if window < 1 or not 0 <= skip_first < window:
            raise ValueError(f"RebalanceController(window={window}, skip_first={skip_first}): "
                             "need window >= 1 and 0 <= skip_first < window.")
        if not 0 <= explore <= 1 or not 0 <= min_gain < 1:
            raise ValueError(f"RebalanceController(explore={explore}, min_gain={min_gain}): "
                             "need 0 <= explore <= 1 and 0 <= min_gain < 1.")
        self.window, self.min_gain, self.explore = window, min_gain, explore
        self.retry_after, self.skip_first = retry_after, skip_first
        self._rates = tuple(rates) if rates is not None else None
        self._rng = random.Random(seed)
        self.num_ps = 0
        self.rates: tuple[float, ...] = ()
        self.baseline: float | None = None
        self.trial: Move | None = None  # the move being measured
        self._tabu: dict[tuple[str, int], int] = {}  # (unit, dst) -> decision it expires
        self.decisions = 0
        self.kept = 0
        self.undone = 0
        #: One dict per decision: window mean, baseline, decision, moves (a log for people).
        self.history: list[dict] = []

    def bind(self, num_ps: int) -> None:
        """Called once the cluster is known."""
        self.num_ps = num_ps
        rates = self._rates or (1.0,) * num_ps
        if len(rates) != num_ps or any(not r > 0 for r in rates):
            raise ValueError(f"RebalanceController(rates={rates!r}): need {num_ps} rates > 0.")
        self.rates = tuple(float(r) for r in rates)

    def window_mean(self, round_times: Sequence[float]) -> float | None:
        """Mean round time of a window, its first ``skip_first`` rounds left out.

        >>> RebalanceController(window=4, skip_first=1).window_mean([9.0, 1.0, 2.0, 3.0])
        2.0
        """
        kept = list(round_times)[self.skip_first:] or list(round_times)
        return sum(kept) / len(kept) if kept else None

    def decide(self, units: Mapping[str, tuple[int, float]], round_times: Sequence[float],
               busy_s: Sequence[float] | None = None,
               served_bytes: Sequence[float] | None = None) -> list[Move]:
        """The moves to make now.

        Args:
          units: name -> ``(PS, load)``: where each movable unit is and the bytes it moves
            per step (bytes x accesses).
          round_times: seconds of the window's rounds (in order).
          busy_s, served_bytes: measured per PS over the window (emulated PS tasks); give both
            to estimate the service rates, else ``rates`` is used.
        """
        self.decisions += 1
        t = self.window_mean(round_times)
        moves: list[Move] = []
        entry = {"decision": "measure", "mean_s": t, "baseline_s": self.baseline}
        if t is None:
            entry["decision"] = "no rounds"
            self.history.append(entry)
            return moves
        if self.trial is not None:
            if self.baseline is not None and t <= self.baseline * (1 - self.min_gain):
                entry["decision"] = "keep"
                self.kept += 1
                self.baseline = t
            else:
                entry["decision"] = "undo"
                self.undone += 1
                moves.append(self.trial.reverse())
                self._tabu[(self.trial.unit, self.trial.dst)] = self.decisions + self.retry_after
                units = dict(units)
                ps, load = units[self.trial.unit]
                units[self.trial.unit] = (self.trial.src, load)
            self.trial = None
        else:
            self.baseline = t  # the current placement, as measured now
        rates = self._measured_rates(busy_s, served_bytes) or self.rates
        proposal = self.propose(units, rates)
        if proposal is not None:
            moves.append(proposal)
            self.trial = proposal
        entry["moves"] = [dataclasses.astuple(m) for m in moves]
        self.history.append(entry)
        return moves

    def _measured_rates(self, busy_s, served_bytes) -> tuple[float, ...] | None:
        """Service rate of each PS as measured (bytes per busy second), relative to the
        fastest; ``None`` if not measured on every PS."""
        if busy_s is None or served_bytes is None or len(busy_s) != self.num_ps:
            return None
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
        loads = [0.0] * self.num_ps
        for ps, load in units.values():
            loads[ps] += load
        candidates = [(name, ps, load, dst) for name, (ps, load) in sorted(units.items())
                      for dst in range(self.num_ps)
                      if dst != ps and load > 0 and (name, dst) not in tabu]
        if not candidates:
            return None
        if self.explore and self._rng.random() < self.explore:
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

    def summary(self) -> dict:
        """Figures for logs: decisions, moves kept and undone, the current baseline."""
        return {"rebalance_decisions": self.decisions, "rebalance_kept": self.kept,
                "rebalance_undone": self.undone, "rebalance_baseline_s": self.baseline}

    def __repr__(self):
        return (f"RebalanceController(window={self.window}, min_gain={self.min_gain}, "
                f"explore={self.explore})")


def make(rebalance) -> RebalanceController | None:
    """A controller from ``rebalance=`` (``False``/``None``: off; ``True``: defaults; or a
    :class:`RebalanceController`).

    >>> make(True), make(False)
    (RebalanceController(window=8, min_gain=0.05, explore=0.1), None)
    >>> make("yes")
    Traceback (most recent call last):
    ...
    ValueError: rebalance='yes' is not a rebalancing option. Fix: use True, False or a tf_hetero.policies.rebalance.RebalanceController.
    """
    if rebalance is None or rebalance is False:
        return None
    if rebalance is True:
        return RebalanceController()
    if isinstance(rebalance, RebalanceController):
        return rebalance
    raise ValueError(f"rebalance={rebalance!r} is not a rebalancing option. Fix: use True, "
                     "False or a tf_hetero.policies.rebalance.RebalanceController.")
