"""The adaptive strategy's settings (:class:`AutoConfig`) and its goodput-optimal batch
(:func:`optimal_batch`); the controller that reads them is :mod:`tf_hetero.policies.auto`,
the measurements behind each default are in docs/AUTO.md.

>>> AutoConfig().cutoff, AutoConfig(cutoff=0).cutoff
(1.5, 0)
>>> AutoConfig(max_batches=0)
Traceback (most recent call last):
ValueError: AutoConfig(max_batches=0): need an integer >= 1.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["AutoConfig", "optimal_batch"]


@dataclasses.dataclass(frozen=True)
class AutoConfig:
    """The adaptive strategy's settings (every one has a default that needs no tuning).

    Args:
      window: tasks per worker whose lower quartile of time per unit is its speed.
      sized_above: the slowest worker's quartile over the fastest's from which rounds are
        sized by speed.
      async_below: the ratio under which sized rounds go back to asynchronous steps; 1
        (the default): never, as sized rounds with a cut-off reached the target sooner
        than asynchronous steps on equal and on transiently slow workers (docs/AUTO.md,
        section 4); e.g. 1.25 to let equal workers run asynchronously.
      decide_every: sized rounds between two choices of the global batch.
      max_batches: the largest global batch, in dataset batches per worker (the memory
        bound: a worker's share of a round is at most this many of its dataset batches).
      min_gain: relative goodput gain a new global batch must promise to be taken.
      gain: ``"adascale"`` (the step follows the measured noise) or ``"linear"`` (the
        linear rule: a round of ``k`` batches steps ``k`` times the one-batch rate).
      async_tuned: the one-batch rate was chosen for asynchronous steps (stock PSS), whose
        staleness acts as momentum: a sized round's step is its gain times a correction
        from ``tau``, the mean staleness of asynchronous steps (measured before; ``N - 1``
        when none ran): ``"linear"``: ``1 + tau``; ``"sqrt"``: its square root; ``"none"``
        (or ``False``): the gain alone (:mod:`tf_hetero.policies.auto`'s notes).
      max_step: the largest step of a sized round, in multiples of the linear rule's (a
        round of ``k`` dataset batches: ``k`` times the one-batch rate). 2: where every
        synchronous row was best on the learning-rate grid.
      ramp: the correction comes in over ``ramp x (1 + tau)`` sized rounds.
      unstable: a sized round's mean-gradient norm over the median of the rounds before it
        at which the step counts as past its edge of stability (two rounds in a row, or one
        at its square; or two rounds in a row whose norm and loss both grow, or whose loss
        climbs): the step's ceiling becomes half the step taken, for the rest of the fit
        (:class:`~tf_hetero.policies.stability.StepCeiling`). ``0``: never.
      restart: a back-off of the step also restarts the optimizer's momentum (SGD's
        velocity set to 0 before the next round's update); ``False``: the velocity is
        scaled with the step instead (:meth:`~tf_hetero.policies.auto.AutoController.velocity`).
      start: the mode a fit starts in (``"async"``: measure stock-PSS-like steps first;
        ``"rounds"``: sized rounds; on 16 workers their step needs its measured ceiling,
        docs/AUTO.md section 5).
      cutoff: a sized round closes without its last tasks once half its units are in and
        each task still out has run ``cutoff`` times its projected time (its share at its
        worker's measured speed) since it started; a late share is folded into a later
        round, weighted ``1 / (1 + staleness)``, and its worker sits out the rounds that
        open while it finishes (its share goes to the free workers). ``0``: every round
        waits for all its tasks (H-PS's rounds). Why 1.5: docs/AUTO.md, section 4.
    """

    window: int = 12
    sized_above: float = 1.5
    async_below: float = 1.0
    decide_every: int = 8
    max_batches: int = 8
    min_gain: float = 0.05
    gain: str = "adascale"
    async_tuned: str = "linear"
    max_step: float = 2.0
    ramp: float = 1.0
    unstable: float = 6.0
    restart: bool = True
    start: str = "rounds"
    cutoff: float = 1.5

    def __post_init__(self):
        for name in ("window", "decide_every", "max_batches"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"AutoConfig({name}={v!r}): need an integer >= 1.")
        if not self.sized_above >= self.async_below >= 1.0:
            raise ValueError(
                f"AutoConfig(sized_above={self.sized_above!r}, async_below="
                f"{self.async_below!r}): need sized_above >= async_below >= 1 (the speed "
                "ratios at which rounds become sized and go back to asynchronous steps).")
        if not self.min_gain >= 0:
            raise ValueError(f"AutoConfig(min_gain={self.min_gain!r}): need a number >= 0.")
        if self.gain not in ("adascale", "linear"):
            raise ValueError(f"AutoConfig(gain={self.gain!r}): use 'adascale' or 'linear'.")
        if self.async_tuned is False:
            object.__setattr__(self, "async_tuned", "none")
        if self.async_tuned not in ("linear", "sqrt", "none"):
            raise ValueError(f"AutoConfig(async_tuned={self.async_tuned!r}): use 'linear', "
                             "'sqrt' or 'none'.")
        if not self.max_step > 0:
            raise ValueError(f"AutoConfig(max_step={self.max_step!r}): need a number > 0 "
                             "(the largest step in multiples of the linear rule's; 2 by default).")
        if not (isinstance(self.ramp, (int, float)) and self.ramp >= 0):
            raise ValueError(f"AutoConfig(ramp={self.ramp!r}): need a number >= 0 (the "
                             "correction's ramp in multiples of 1 + tau rounds; 0: at once).")
        if not (isinstance(self.unstable, (int, float)) and not isinstance(self.unstable, bool)
                and (self.unstable == 0 or self.unstable > 1)):
            raise ValueError(f"AutoConfig(unstable={self.unstable!r}): need 0 (never back "
                             "off) or a ratio > 1 (6 by default).")
        if not (isinstance(self.cutoff, (int, float)) and not isinstance(self.cutoff, bool)
                and (self.cutoff == 0 or self.cutoff >= 1)):
            raise ValueError(f"AutoConfig(cutoff={self.cutoff!r}): need 0 (rounds wait for "
                             "every task) or a number >= 1 (times a task's projected "
                             "time; 1.5 by default).")
        if not isinstance(self.restart, bool):
            raise ValueError(f"AutoConfig(restart={self.restart!r}): use True (a back-off "
                             "restarts the momentum) or False (scales it with the step).")
        if self.start not in ("async", "rounds"):
            raise ValueError(f"AutoConfig(start={self.start!r}): use 'async' or 'rounds'.")


def optimal_batch(capacity: float, overhead_s: float, noise_scale: float) -> float:
    """The global batch (samples) of largest goodput: ``sqrt(C x T_o x B)``
    (:mod:`tf_hetero.policies.auto`'s notes).

    >>> optimal_batch(capacity=1000.0, overhead_s=0.08, noise_scale=500.0)
    200.0
    """
    return math.sqrt(max(capacity, 0.0) * max(overhead_s, 0.0) * max(noise_scale, 0.0))
