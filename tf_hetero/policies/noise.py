"""The gradient noise of a training run, estimated online from what a round's apply already
holds, and what it implies: the learning-rate gain of a larger batch (AdaScale) and the
statistical efficiency of a batch (Pollux). Pure Python.

**What a round measures.** A round's accumulators hold one sum per lane: lane ``l`` holds
``s_l``, the sum of the per-unit gradients of the ``n_l`` work units (micro-batches or
granules) its tasks read. The apply computes the mean ``g = sum(s_l) / N`` (``N = sum n_l``)
anyway; one more scalar per variable, ``q = sum_l |s_l|^2 / n_l``, computed on the PS beside
the mean, gives the round's :class:`GradientSample`. If the units' gradients are independent
with mean ``G`` and covariance ``C`` (per unit), then ``E|s_l/n_l|^2 = |G|^2 + tr(C)/n_l``,
so with ``k`` lanes::

    E[q]       = N |G|^2 + k tr(C)
    E[N |g|^2] = N |G|^2 +   tr(C)
    =>  tr(C) ~ (q - N |g|^2) / (k - 1),    |G|^2 ~ |g|^2 - tr(C) / N

(McCandlish et al. 2018, App. A, with one batch size per lane: unequal shares are the
"several batch sizes" the estimator needs; equal shares work too). One round's estimate is
noisy, and ``|G|^2`` alone can come out negative: :class:`GradientNoise` keeps exponential
moving averages of both (bias-corrected, as AdaScale does) and derives the rest from them.

**What it implies** (per sample: a unit of ``b_u`` samples has ``tr(C) = tr(S) / b_u``):

- the noise scale ``B = tr(S) / |G|^2`` (samples): the batch at which noise and signal
  weigh alike (McCandlish's ``B_simple``);
- the gain of a batch ``M`` over the base batch ``b0`` the learning rate was set for, with
  ``s = M / b0``: ``r = (tr(S)/b0 + |G|^2) / (tr(S)/(s b0) + |G|^2)``, between 1 (no noise:
  a larger batch is no better a step) and ``s`` (all noise: the linear rule) (AdaScale SGD,
  Johnson et al. 2020);
- the statistical efficiency of ``M``: ``r / s = (B + b0) / (B + M)``, the progress per
  sample against the base batch's (Pollux, Qiao et al. 2021).

>>> noise = GradientNoise(beta=0.0)          # no smoothing: the last round's estimate
>>> noise.add(GradientSample(units=8, lanes=2, mean_sq=1.5, lane_sq=16.0), unit_samples=4)
>>> noise.covariance_trace, noise.signal                  # per sample
(16.0, 1.0)
>>> noise.noise_scale, noise.gain(16, base=4), noise.efficiency(16, base=4)
(16.0, 2.5, 0.625)
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["GradientSample", "GradientNoise", "DEFAULT_BETA"]

#: Weight of the previous average per round (AdaScale uses 1 - 1/scale; a fixed 0.9 keeps
#: ~10 rounds of memory whatever the batch, which is what the global-batch choice needs).
DEFAULT_BETA = 0.9


@dataclasses.dataclass(frozen=True)
class GradientSample:
    """What one round's apply measured: ``units`` work units in ``lanes`` non-empty lanes,
    the squared norm of their mean gradient (``mean_sq``, before any update scale),
    ``lane_sq = sum_l |s_l|^2 / n_l`` and the mean training ``loss`` of those units at the
    weights their tasks read (NaN where the step gave none: a custom step that calls
    ``apply_gradients`` itself, or a locally accumulated push). Only rounds with two or
    more lanes estimate noise."""

    units: float
    lanes: int
    mean_sq: float
    lane_sq: float
    loss: float = math.nan

    @property
    def usable(self) -> bool:
        return (self.lanes >= 2 and self.units > 0 and math.isfinite(self.mean_sq)
                and math.isfinite(self.lane_sq))

    def estimate(self) -> tuple[float, float]:
        """``(tr(C), |G|^2)`` per unit from this round alone (unbiased, noisy).

        >>> GradientSample(units=8, lanes=2, mean_sq=1.25, lane_sq=14.0).estimate()
        (4.0, 0.75)
        """
        trace = (self.lane_sq - self.units * self.mean_sq) / (self.lanes - 1)
        return trace, self.mean_sq - trace / self.units


class GradientNoise:
    """Moving averages of the per-sample covariance trace and the squared gradient norm over
    the rounds that measured them (:class:`GradientSample`), and what they imply."""

    def __init__(self, beta: float = DEFAULT_BETA):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"GradientNoise(beta={beta!r}): need 0 <= beta < 1 (the weight "
                             "of the previous average per round).")
        self.beta = beta
        self._trace = self._signal = 0.0  # biased averages (per sample)
        self._weight = 0.0  # 1 - beta^rounds: their bias correction
        self.rounds = 0

    def add(self, sample: GradientSample, unit_samples: float = 1.0) -> None:
        """One round's measurement; ``unit_samples``: samples per work unit."""
        if not sample.usable:
            return
        trace, signal = sample.estimate()
        b = self.beta
        self._trace = b * self._trace + (1 - b) * trace * unit_samples
        self._signal = b * self._signal + (1 - b) * signal
        self._weight = b * self._weight + (1 - b)
        self.rounds += 1

    @property
    def known(self) -> bool:
        """At least one round measured, with a positive signal and noise."""
        return self.rounds > 0 and self.signal > 0 and self.covariance_trace > 0

    @property
    def covariance_trace(self) -> float:
        """``tr(S)``: the trace of one sample's gradient covariance (its variance)."""
        return self._trace / self._weight if self._weight else math.nan

    @property
    def signal(self) -> float:
        """``|G|^2``: the squared norm of the full-data gradient."""
        return self._signal / self._weight if self._weight else math.nan

    @property
    def noise_scale(self) -> float:
        """``B = tr(S) / |G|^2`` in samples (``nan`` until :attr:`known`)."""
        return self.covariance_trace / self.signal if self.known else math.nan

    def gain(self, batch: float, base: float) -> float:
        """AdaScale's gain of a step on ``batch`` samples over one on ``base`` samples:
        between 1 and ``batch / base`` (the linear rule's); 1 until :attr:`known`."""
        scale = batch / base
        if not self.known or scale <= 1:
            return 1.0
        var = self.covariance_trace / base
        return min(scale, max(1.0, (var + self.signal) / (var / scale + self.signal)))

    def efficiency(self, batch: float, base: float) -> float:
        """Progress per sample of ``batch`` against ``base``: ``gain / scale`` (1 until
        :attr:`known`)."""
        return self.gain(batch, base) * base / batch

    def summary(self) -> dict:
        return {"noise_scale": self.noise_scale, "grad_variance": self.covariance_trace,
                "grad_sq": self.signal, "noise_rounds": self.rounds}

    def __repr__(self):
        return f"GradientNoise(beta={self.beta}, rounds={self.rounds})"
