"""The engine's divergence check: when an applied round shows that training has diverged.

A round strategy's apply reports the global norm of the round's mean gradient (a gradient
that is not finite goes in as zeros, so the weights stay finite;
:meth:`~tf_hetero.engine.core.RoundEngine.apply_finished`). :class:`DivergenceGuard` reads
those norms: a NaN/Inf gradient, or a norm more than ``factor`` times the median of the
first ``reference_rounds`` rounds' (from the fourth round on; the loss exploding), stops
``fit`` with a :class:`DivergenceError` that says what to lower. It is the engine's default
:class:`~tf_hetero.engine.api.RoundGuard`; the steps' loss is read by
:class:`~tf_hetero.policies.diverge.LossGuard`, built on it.

>>> g = DivergenceGuard(factor=100, reference_rounds=3)
>>> [g.check(r, n) for r, n in enumerate([1.0, 2.0, 1.5, 40.0])]
[None, None, None, None]
>>> g.check(4, 250.0)
'the mean gradient norm of round 4 is 250, 167x its median over the first rounds (1.5): the loss is exploding'
>>> DivergenceGuard().check(0, float("nan"))
'the mean gradient of round 0 is not finite (NaN/Inf); it was applied as zeros'
"""

from __future__ import annotations

import math
import statistics

__all__ = ["DivergenceGuard", "DivergenceError", "diverged"]


class DivergenceError(RuntimeError):
    """Training diverged; ``fit`` stops instead of finishing with a broken model."""


def diverged(why: str, lr: str = "") -> DivergenceError:
    """The error that stops ``fit``: ``why`` (a guard's finding) and what to lower (``lr``:
    the learning rates in use, if known).

    >>> print(diverged("the loss is exploding", "0.08"))
    tf-hetero: training diverged: the loss is exploding. Fix: lower the learning rate (0.08), or warm it up over the first rounds; a round averages several micro-batches, so the linear rule's rate is larger than a single-worker one.
    """
    return DivergenceError(
        f"tf-hetero: training diverged: {why}. Fix: lower the learning rate"
        f"{' (' + lr + ')' if lr else ''}, or warm it up over the first "
        "rounds; a round averages several micro-batches, so the linear rule's "
        "rate is larger than a single-worker one.")


class DivergenceGuard:
    """Flags divergence from each applied round's mean-gradient norm (see the module)."""

    def __init__(self, factor: float = 1e4, reference_rounds: int = 10):
        if not factor > 1:
            raise ValueError(f"DivergenceGuard(factor={factor!r}): need a number > 1.")
        if not isinstance(reference_rounds, int) or reference_rounds < 1:
            raise ValueError(f"DivergenceGuard(reference_rounds={reference_rounds!r}): need an "
                             "integer >= 1.")
        self.factor, self.reference_rounds = factor, reference_rounds
        self.reference: list[float] = []

    def check(self, round_id: int, norm: float) -> str | None:
        """Why round ``round_id`` (gradient norm ``norm``) shows divergence, or ``None``."""
        if not math.isfinite(norm):
            return self._not_finite(round_id)
        # Compared with the first rounds' median from the third round on, so a loss that
        # explodes from the start is caught early.
        typical = statistics.median(self.reference) if len(self.reference) >= 3 else None
        if len(self.reference) < self.reference_rounds:
            self.reference.append(norm)
        if typical is not None and typical > 0 and norm > self.factor * typical:
            return (f"{self._quantity(round_id)} is {norm:.3g}, "
                    f"{norm / typical:.0f}x its median over the first {self.unit}s "
                    f"({typical:.3g}): the loss is exploding")
        return None

    unit = "round"

    def _quantity(self, index: int) -> str:
        return f"the mean gradient norm of round {index}"

    def _not_finite(self, index: int) -> str:
        return (f"the mean gradient of round {index} is not finite (NaN/Inf); it was applied "
                "as zeros")

    def reset(self) -> None:
        """A new fit (e.g. after the user lowered the learning rate)."""
        self.reference = []

    def __repr__(self):
        return (f"{type(self).__name__}(factor={self.factor:g}, "
                f"reference_rounds={self.reference_rounds})")
