"""The options of live rebalancing, checked once (:class:`RebalanceConfig`, pure).

A :class:`~tf_hetero.policies.rebalance.RebalanceController` reads them; the strategy's
``rebalance=`` takes ``True`` (the defaults with ``first_window=3``), a config or a
controller (:func:`tf_hetero.policies.rebalance.make`). Each field is checked when the config
is made; the error names the value and the fix.

>>> config = RebalanceConfig(window=4, first_window=2)
>>> config.first_rounds, config.window_cap            # two short windows; quiet ones grow
(2, 64)
>>> RebalanceConfig(window=1000).window_cap           # the cap is never below the window
1000
>>> RebalanceConfig(window=0)
Traceback (most recent call last):
...
ValueError: RebalanceConfig(window=0): need window >= 1 (rounds between two decisions). Fix: window=8 (the default) or another whole number >= 1.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

__all__ = ["RebalanceConfig", "DEFAULT_FIRST_WINDOW"]

#: ``first_window`` of ``rebalance=True`` (measured: docs/PSLD.md section 4).
DEFAULT_FIRST_WINDOW = 3


def _need(ok: bool, given: str, need: str, fix: str) -> None:
    if not ok:
        raise ValueError(f"RebalanceConfig({given}): need {need}. Fix: {fix}.")


@dataclasses.dataclass(frozen=True)
class RebalanceConfig:
    """How the controller measures and decides (the loop: :mod:`tf_hetero.policies.rebalance`).

    Args:
      window: rounds per measurement window (a decision after each).
      first_window: rounds in each of the first two windows (the baseline, then the trial of
        the first moves, whose changed loads also let the PS rates be fitted), so that a
        placement that is plainly wrong is fixed after ``2 x first_window`` rounds instead
        of ``2 x window``; ``None``: ``window`` (``rebalance=True`` uses
        :data:`DEFAULT_FIRST_WINDOW` with window 8). Later windows judge smaller gains.
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
      payback_rounds: a greedy proposal is made only if its estimated saving per round times
        this pays back the measured pause of a move; ``None``: always propose.
      explore_budget: most share of the measured training time spent on explorations'
        pauses (two per exploration: the move and its likely undo); 1.0: no limit.
      max_window: after each decision that moved nothing the next window is twice as long,
        up to this many rounds (never below ``window``; back to ``window`` after moves).
        Each decision waits for the rounds in flight (measured ~0.1 s of a fit per decision
        on ``slow_ps``, 51 decisions in a 400-round fit). ``None``: every window is
        ``window`` rounds.
      probe: before the first round, let the strategy time each PS's service and make
        decision 0 on it; ``False``: the first decision comes after the first window, on
        ``rates``.
    """

    window: int = 8
    first_window: int | None = None
    min_gain: float = 0.05
    explore: float = 0.1
    rates: Sequence[float] | None = None
    retry_after: int = 10
    max_moves: int = 4
    skip_first: int = 1
    seed: int = 0
    payback_rounds: int | None = 50
    explore_budget: float = 0.05
    max_window: int | None = 64
    probe: bool = True

    def __post_init__(self):
        _need(self.window >= 1, f"window={self.window}", "window >= 1 (rounds between two "
              "decisions)", "window=8 (the default) or another whole number >= 1")
        _need(0 <= self.skip_first < self.window,
              f"window={self.window}, skip_first={self.skip_first}",
              "0 <= skip_first < window (a window's mean leaves its first skip_first rounds "
              "out)", f"skip_first=1 (the default) or 0, with window > {self.skip_first}")
        _need(self.first_window is None or self.skip_first < self.first_window <= self.window,
              f"first_window={self.first_window}, window={self.window}, "
              f"skip_first={self.skip_first}", "skip_first < first_window <= window",
              f"first_window=None (every window {self.window} rounds) or a value in "
              f"{self.skip_first + 1}..{self.window}")
        _need(0 <= self.explore <= 1, f"explore={self.explore}", "0 <= explore <= 1 (a "
              "probability)", "explore=0.1 (the default), or 0 for greedy moves only")
        _need(0 <= self.min_gain < 1, f"min_gain={self.min_gain}", "0 <= min_gain < 1 (a "
              "relative gain)", "min_gain=0.05 (5%, the default)")
        _need(self.retry_after >= 0, f"retry_after={self.retry_after}", "retry_after >= 0 "
              "(decisions)", "retry_after=10 (the default)")
        _need(self.max_moves >= 1, f"max_moves={self.max_moves}", "max_moves >= 1",
              "max_moves=4 (the default), or 1 to judge each move alone")
        _need(self.payback_rounds is None or self.payback_rounds >= 1,
              f"payback_rounds={self.payback_rounds}", "payback_rounds >= 1",
              "payback_rounds=50 (the default), or None to propose without the pause check")
        _need(0 <= self.explore_budget <= 1, f"explore_budget={self.explore_budget}",
              "0 <= explore_budget <= 1 (a share of the training time)",
              "explore_budget=0.05 (the default), or 1.0 for no limit")
        _need(self.max_window is None or self.max_window >= 1,
              f"max_window={self.max_window}", "max_window >= 1 (rounds)",
              "max_window=64 (the default), or None to keep every window the same")
        if self.rates is not None:
            rates = tuple(float(r) for r in self.rates)
            _need(all(r > 0 for r in rates), f"rates={self.rates!r}", "one rate > 0 per PS "
                  "task", "rates=None (equal rates) or e.g. (1.0, 0.5)")
            object.__setattr__(self, "rates", rates or None)  # (): equal rates, as None

    @property
    def first_rounds(self) -> int:
        """Rounds in each of the first two windows (``first_window``, else ``window``)."""
        return self.window if self.first_window is None else self.first_window

    @property
    def window_cap(self) -> int:
        """The longest window quiet decisions grow to (``max_window``, never below
        ``window``)."""
        return self.window if self.max_window is None else max(self.max_window, self.window)
