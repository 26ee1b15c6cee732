"""Divergence of asynchronous steps, and collapse: when training has diverged (pure Python).

A round strategy's apply reports its mean gradient's norm, which the engine checks
(:class:`~tf_hetero.engine.guard.DivergenceGuard`, re-exported here with
:class:`~tf_hetero.engine.guard.DivergenceError`). Asynchronous strategies (ASP, SSP) apply
each step on its worker, as stock TF does, so no round mean exists: :class:`LossGuard` reads
the loss each step returns (``model.fit``'s logs) the same way. It reads the loss of every
round strategy's tasks too, for what a gradient norm cannot show: a fit that **collapsed**,
whose loss fell to under half of where it started and then stays back above its start (dead
ReLUs, a model predicting one class: the loss and the gradients are finite, not large, and
accuracy sits at chance).
"""

from __future__ import annotations

import math
import statistics

from tf_hetero.engine.guard import DivergenceError, DivergenceGuard

__all__ = ["DivergenceGuard", "LossGuard", "DivergenceError"]


class LossGuard(DivergenceGuard):
    """Flags divergence from the loss each step returns: a NaN/Inf loss, a loss more than
    ``factor`` times the median of the first ``reference_rounds`` steps', or a collapse: the
    loss fell below ``1 - drop`` of that median and later stayed at or above it for
    ``patience`` steps in a row. Keras' logged loss is the epoch's running mean, so a loss
    that explodes moves it less than the step's own loss: the factor is lower than the
    gradient guard's, and a collapse shows at the latest once the next epoch starts.

    >>> g = LossGuard()
    >>> [g.check(s, x) for s, x in enumerate([2.3, 2.2, 2.1, 1.9])]
    [None, None, None, None]
    >>> g.check(4, 5e3)
    'the loss of step 4 is 5e+03, 2326x its median over the first steps (2.15): the loss is exploding'
    >>> g.check(5, float("inf"))
    'the loss of step 5 is not finite (NaN/Inf): the weights may hold NaN/Inf now (each step is applied on its worker, as under stock ParameterServerStrategy)'

    A collapse (the reference is the first ``reference_rounds`` steps):

    >>> g = LossGuard(reference_rounds=2, patience=3)
    >>> [g.check(s, x) for s, x in enumerate([2.3, 2.3, 1.0, 0.6, 2.4, 0.7])]
    [None, None, None, None, None, None]
    >>> [g.check(s, 2.35) for s in (6, 7)]
    [None, None]
    >>> g.check(8, 2.35)
    'the loss of step 8 is 2.35, back above where it started (2.3) for 3 steps after falling to 0.6: training collapsed'

    A round's mean loss (a round strategy's apply reports it) counts its steps:

    >>> g = LossGuard(reference_rounds=2, patience=8, applied_on_worker=False)
    >>> [g.check(r, x, unit="round", steps=4) for r, x in enumerate([2.3, 2.3, 0.6, 2.4])]
    [None, None, None, None]
    >>> g.check(4, 2.4, unit="round", steps=4)
    'the loss of round 4 is 2.4, back above where it started (2.3) for 8 steps after falling to 0.6: training collapsed'
    """

    unit = "step"

    def __init__(self, factor: float = 1e3, reference_rounds: int = 10, *,
                 drop: float = 0.5, patience: int = 50, applied_on_worker: bool = True):
        super().__init__(factor, reference_rounds)
        #: Steps update the variables themselves (ASP). False: a round applies them, and
        #: its apply checks NaN/Inf and exploding gradients (DivergenceGuard), so this guard
        #: only looks for a collapse.
        self.applied_on_worker = applied_on_worker
        if not 0 < drop < 1:
            raise ValueError(f"LossGuard(drop={drop!r}): need 0 < drop < 1.")
        if not isinstance(patience, int) or patience < 1:
            raise ValueError(f"LossGuard(patience={patience!r}): need an integer >= 1.")
        self.drop, self.patience = drop, patience
        self.low, self.above = math.inf, 0

    def check(self, round_id: int, norm: float, unit: str = "step", steps: int = 1
              ) -> str | None:
        """Why the loss ``norm`` of step ``round_id`` shows divergence or a collapse, or
        ``None``. ``unit="round"``: the mean loss of a round of ``steps`` steps (counted
        as that many towards ``patience``); steps and rounds may be mixed (a strategy that
        switches modes), both being a mean loss per sample."""
        self.unit = unit
        if self.applied_on_worker:
            why = super().check(round_id, norm)
            if why is not None:
                return why
        elif not math.isfinite(norm):
            return None  # a round's apply reports it (the engine's DivergenceGuard)
        elif len(self.reference) < self.reference_rounds:
            self.reference.append(norm)
        if len(self.reference) < self.reference_rounds:
            return None
        start = statistics.median(self.reference)
        self.low = min(self.low, norm)
        # Once the loss has really come down, a run of steps back at the start is a collapse;
        # a loss that never came down is the learning rate's business (too low, or a problem
        # the model cannot learn), not a divergence.
        if self.low < (1 - self.drop) * start and norm >= start:
            self.above += steps
        else:
            self.above = 0
        if self.above >= self.patience:
            return (f"{self._quantity(round_id)} is {norm:.3g}, back above where it started "
                    f"({start:.3g}) for {self.above} steps after falling to {self.low:.3g}: "
                    "training collapsed")
        return None

    def reset(self) -> None:
        super().reset()
        self.low, self.above = math.inf, 0

    def _quantity(self, index: int) -> str:
        return f"the loss of {self.unit} {index}"

    def _not_finite(self, index: int) -> str:
        return (f"the loss of {self.unit} {index} is not finite (NaN/Inf): the weights may hold "
                "NaN/Inf now (each step is applied on its worker, as under stock "
                "ParameterServerStrategy)")
