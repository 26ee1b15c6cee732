"""The step's edge of stability, measured: a ceiling lowered when a round's gradient explodes.

A step past SGD's stable rate (``2 / lambda`` along the sharpest direction, more with momentum)
makes the iterate bounce across the valley with growing amplitude: the rounds' mean gradient
grows several-fold within a few rounds while the loss climbs. A step inside it moves the
gradient's norm less: as training takes off it grows too, but in single rounds (measured on
``one_slow`` at 8x the one-batch rate, 4 runs: single rounds up to 6.2x the median of the 16
rounds before, never two in a row at 6x; on 16 workers at 32x, 8-9x then 19-49x in
consecutive rounds within the first 10, and the fits that kept that step collapsed;
docs/AUTO.md, section 2). :class:`StepCeiling` watches each sized round's mean-gradient norm
against the median of the rounds before; on two spikes in a row (or one at the factor's
square) it halves the largest step of the last rounds and keeps the step under it for the
rest of the fit. The ceiling never rises again: probing upward re-enters the instability
whose first spike already costs accuracy (a ceiling rising by sqrt(2) after 32 stable rounds
backed off again within 2-11 rounds of a rise in 4 of 6 fits on 8 workers and reached the
target later; docs/decisions/0019).

An instability can also build slowly: on 16 workers at 16x, after 80 stable rounds, the norm
rose over ten rounds (1.6 to 7.7x the median before) while accuracy fell from 0.72 to 0.48,
and the back-off at the eighth came too late. In the norm alone that looks like training
taking off (``one_slow``'s first 20 rounds: 2-5x, sustained); the loss tells them apart, as
it falls at a takeoff. Each round's apply also reports the mean training loss of its batch
(at the weights its tasks read), and two rounds in a row that look unstable by the loss
lower the ceiling too: a round whose norm is ``joint`` (2) times the median before while
its loss is above the median loss of the (up to 16) rounds before (the norm and the loss
growing together), or whose median loss over the last three rounds is above that median by
``rise`` (25%) plus three times the rounds' loss noise (from their successive
differences). Replayed on the six 16-worker runs measured with the loss
(benchmarks/results/2026-12-02-auto-loss/), the joint rule fired 4 rounds before the loss
rule alone in the two instabilities both caught, and caught four it did not (one in the
last 15 rounds of a fit); on three ``one_slow`` runs it fired once, late, at a loss that
had doubled (accuracy 0.91 -> 0.84).

>>> c = StepCeiling(factor=4.0, window=8, min_rounds=4)
>>> [c.observe(n, step=8.0) for n in (1.0, 1.2, 0.9, 1.1, 3.9, 1.0)]
[None, None, None, None, None, None]
>>> c.ceiling
inf
>>> c.observe(5.0, step=8.0) is None      # one round at 5x: not yet
True
>>> print(c.observe(30.0, step=8.0))      # the next one too: the step was unstable
the mean gradient's norm rose to 5x and 29x the median of the 6 rounds before (1.05) in two rounds in a row at a step of 8.00x the one-batch rate: the step is past its edge of stability
>>> c.ceiling
4.0

The loss climbing (a slow instability; the norm unremarkable):

>>> c = StepCeiling(window=8, min_rounds=4)
>>> losses = [1.3, 1.25, 1.32, 1.28, 1.3, 1.27, 1.31, 1.26, 1.29, 1.5, 1.8, 2.1]
>>> [c.observe(1.0, step=16.0, loss=x) for x in losses][-1] is None   # climbing: judged next
True
>>> print(c.observe(1.0, step=16.0, loss=2.4))
the loss rose to 2.10 (median of the last 3 rounds), 1.62x the median of the 8 rounds before (1.29), the second round in a row, at a step of 16.00x the one-batch rate: the step is past its edge of stability

The norm and the loss growing together (a takeoff grows the norm while the loss falls):

>>> c = StepCeiling(window=8, min_rounds=4)
>>> losses = [1.0, 0.95, 0.97, 0.9, 0.92, 0.88, 0.9, 0.87, 0.86, 0.88, 0.95]
>>> [c.observe(1.0, step=16.0, loss=x) for x in losses][-1] is None
True
>>> c.observe(2.5, step=16.0, loss=0.80) is None      # norm 2.5x, loss falling: a takeoff
True
>>> c.observe(2.5, step=16.0, loss=0.95) is None      # both up: judged next round
True
>>> print(c.observe(3.0, step=16.0, loss=1.0))
the mean gradient's norm rose to 3.0x the median of the rounds before while the loss rose to 1.00, 1.12x the median of the 8 rounds before (0.89), the second round in a row, at a step of 16.00x the one-batch rate: the step is past its edge of stability
"""

from __future__ import annotations

import collections
import math
import statistics

#: Rounds whose loss median is the smoothed loss.
_SMOOTH = 3

__all__ = ["StepCeiling"]


class StepCeiling:
    """The largest step (in multiples of the one-batch rate) rounds may take.

    Args:
      factor: a round's mean-gradient norm over the median of the previous rounds' at which
        it counts as a spike; two spikes in a row, or one of ``factor ** 2``, lower the
        ceiling.
      window: rounds whose median norm is the reference.
      min_rounds: rounds measured (since the start or the last back-off) before a spike
        is judged: the rounds right after a spike ring with it (momentum) and are no
        reference.
      backoff: the new ceiling, as a fraction of the largest step of the last rounds.
      rise: the smoothed loss's rise over the median of the rounds before (a fraction of
        it, on top of three times the rounds' loss noise) that counts as climbing; two
        rounds in a row (of this or ``joint``) lower the ceiling.
      joint: a round's norm over the median of the rounds before that, with its loss above
        theirs, counts as unstable.
    """

    def __init__(self, factor: float = 6.0, window: int = 16, min_rounds: int = 4,
                 backoff: float = 0.5, rise: float = 0.25, joint: float = 2.0):
        if not factor > 1:
            raise ValueError(f"StepCeiling(factor={factor!r}): need a number > 1.")
        if not 0 < backoff < 1:
            raise ValueError(f"StepCeiling(backoff={backoff!r}): need 0 < backoff < 1.")
        if not rise > 0:
            raise ValueError(f"StepCeiling(rise={rise!r}): need a number > 0.")
        if not joint > 1:
            raise ValueError(f"StepCeiling(joint={joint!r}): need a number > 1.")
        self.factor, self.backoff, self.min_rounds = factor, backoff, min_rounds
        self.rise, self.joint = rise, joint
        self.norms: collections.deque = collections.deque(maxlen=window)
        self.losses: collections.deque = collections.deque(maxlen=window + _SMOOTH)
        self.climbing = False  # the previous round looked unstable by a loss rule
        self.steps: collections.deque = collections.deque(maxlen=3)
        self.pending: float | None = None  # the previous round's ratio, if it was a spike
        #: The largest step allowed (``inf`` until the first back-off).
        self.ceiling = math.inf
        #: ``(ratio, step, new ceiling)`` per back-off.
        self.backoffs: list[tuple] = []
        self._last_reference: float | None = None  # the reference when the rounds ring

    @property
    def reference(self) -> float | None:
        """The median norm of the rounds before (the one before the last back-off while
        the rounds after it are too few); ``None`` until ``min_rounds`` were measured."""
        if len(self.norms) >= self.min_rounds:
            return statistics.median(self.norms)
        return self._last_reference

    @property
    def max_norm(self) -> float:
        """The largest norm a round's update is given: ``factor`` times :attr:`reference`
        (a spike is clipped to the size at which it counts as one); 0 until measured."""
        ref = self.reference
        return 0.0 if ref is None else self.factor * ref

    def observe(self, norm: float, step: float, loss: float = math.nan) -> str | None:
        """One sized round applied: its mean gradient's ``norm``, the ``step`` it took and
        its batch's mean ``loss`` (NaN: not known). Returns why the ceiling was lowered, or
        ``None``."""
        if not (math.isfinite(norm) and norm >= 0 and math.isfinite(step)):
            return None  # a NaN/Inf round is the divergence guard's (engine/guard.py)
        self.steps.append(step)
        reference = statistics.median(self.norms) if len(self.norms) >= self.min_rounds else None
        ratio = None if reference is None else (norm / reference if reference > 0 else math.inf)
        climb = self._climb(loss, ratio)
        if climb is not None:
            return climb
        if reference is None:
            self.norms.append(norm)
            return None
        if ratio < self.factor:
            self.pending = None
            self.norms.append(norm)
            return None
        earlier, self.pending = self.pending, ratio
        if earlier is None and ratio < self.factor ** 2:
            return None  # one spike: noise, or the start of an instability (judged next round)
        n = len(self.norms)
        largest = self._back_off(ratio)
        self._last_reference = reference
        rise = (f"{earlier:.0f}x and {ratio:.0f}x" if earlier is not None else f"{ratio:.0f}x")
        when = "in two rounds in a row" if earlier is not None else "in one round"
        return (f"the mean gradient's norm rose to {rise} the median of the {n} rounds "
                f"before ({reference:.2f}) {when} at a step of {largest:.2f}x the one-batch "
                f"rate: the step is past its edge of stability")

    def _climb(self, loss: float, ratio: float | None) -> str | None:
        """The loss rules (``ratio``: this round's norm over the median of the rounds
        before, ``None`` until known): why the ceiling was lowered, or ``None``."""
        if not math.isfinite(loss):
            self.climbing = False
            return None
        self.losses.append(loss)
        recent = list(self.losses)
        before = recent[:-_SMOOTH]
        if len(before) < max(self.min_rounds, _SMOOTH):
            return None
        smoothed = statistics.median(recent[-_SMOOTH:])
        # The reference: the median loss of the rounds before (as the norm's; while
        # training goes on it lies above the last rounds'). Their noise from successive
        # differences (robust: a median; a difference of two independent draws has sqrt(2)
        # times their spread).
        reference = statistics.median(before)
        diffs = [abs(b - a) for a, b in zip(before, before[1:])]
        noise = 1.4826 * statistics.median(diffs) / math.sqrt(2)
        if smoothed > reference * (1 + self.rise) + 3 * noise:
            why = (f"the loss rose to {smoothed:.2f} (median of the last {_SMOOTH} rounds), "
                   f"{smoothed / reference:.2f}x")
        elif ratio is not None and ratio >= self.joint and loss > reference:
            # The norm growing while the loss does too: an instability (a takeoff grows the
            # norm while the loss falls).
            why = (f"the mean gradient's norm rose to {ratio:.1f}x the median of the rounds "
                   f"before while the loss rose to {loss:.2f}, {loss / reference:.2f}x")
        else:
            self.climbing = False
            return None
        if not self.climbing:
            self.climbing = True
            return None  # judged next round
        largest = self._back_off(smoothed / reference)
        return (f"{why} the median of the {len(before)} rounds before ({reference:.2f}), the "
                f"second round in a row, at a step of {largest:.2f}x the one-batch rate: the "
                "step is past its edge of stability")

    def _back_off(self, ratio: float) -> float:
        """Lowers the ceiling to ``backoff`` times the largest recent step (returned); the
        rounds after it ring and are no reference: both rules start over."""
        largest = max(self.steps)
        self.ceiling = min(self.ceiling, self.backoff * largest)
        self.backoffs.append((ratio, largest, self.ceiling))
        self.norms.clear()
        self.pending = None
        self.losses.clear()
        self.climbing = False
        return largest
