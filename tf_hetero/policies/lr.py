"""Learning-rate rules: what rate an update that averages several micro-batches gets, and
how it warms up to it. One place for the benchmark (:mod:`tf_hetero.tools.benchrow`), the
simulator (:mod:`tf_hetero.sim.run`) and the strategies' fit-start line
(:mod:`tf_hetero.strategies.runtime.fitplan`). Pure Python: no TensorFlow.

The rule here is the **linear rule** (Goyal et al., "Accurate, Large Minibatch SGD"): an
update that averages ``k`` micro-batches takes ``k`` x the one-micro-batch rate
(:func:`linear_rate`; ``k`` is N for BSP, N-b for backup workers, 1 for the asynchronous
strategies), reached after a linear warm-up (:func:`warmup_updates`, :func:`warmup_schedule`).
Other rules sit beside it under their own names.

>>> peak = linear_rate(0.02, 4)
>>> peak
0.08
>>> rate = warmup_schedule(peak, warmup_updates(None, 4))
>>> [round(rate(step), 3) for step in (0, 1, 3, 10)]
[0.02, 0.04, 0.08, 0.08]
>>> linear_advice(20)
'scale a one-batch rate by 20 (linear rule), or warm up to it'
"""

from __future__ import annotations

from typing import Callable, Union

__all__ = ["linear_rate", "linear_advice", "warmup_updates", "warmup_schedule", "Rate"]

#: A learning rate: a constant, or ``update number (from 0) -> rate``.
Rate = Union[float, Callable[[int], float]]


def linear_rate(base_lr: float, per_update: int, factor: float = 1.0) -> float:
    """The linear rule: ``base_lr x micro-batches per update x factor`` (``factor``: a
    point of a learning-rate grid around the rule).

    >>> linear_rate(0.02, 1), linear_rate(0.02, 3, factor=0.5)
    (0.02, 0.03)
    """
    return base_lr * per_update * factor


def linear_advice(batches: float) -> str:
    """What the linear rule tells a user whose update averages ``batches`` dataset batches
    (the fit-start line's learning-rate clause).

    >>> linear_advice(1), linear_advice(2.5)
    ('the one-batch rate', 'scale a one-batch rate by 2.5 (linear rule), or warm up to it')
    """
    if batches == 1:
        return "the one-batch rate"
    return f"scale a one-batch rate by {batches:g} (linear rule), or warm up to it"


def warmup_updates(requested: int | None, per_update: int) -> int:
    """Updates over which a rate ramps up: none when an update is one micro-batch;
    ``requested`` if given; by default (``None``) as many as one update averages
    micro-batches, so k x the one-batch rate is reached after k updates (Goyal et al. warm
    up over 5 epochs; an epoch is arbitrary here, the update's size is not). Measured at 16
    workers: 6 of 6 H-PS/EPSP runs reached the target with it, 4 of 6 without
    (benchmarks/results/2026-11-27-warmup/).

    >>> warmup_updates(None, 16), warmup_updates(None, 1), warmup_updates(0, 16), warmup_updates(5, 4)
    (16, 0, 0, 5)
    """
    if per_update <= 1:
        return 0
    return per_update if requested is None else requested


def warmup_schedule(peak: float, warmup: int) -> Rate:
    """``peak`` itself when ``warmup`` is at most one update; else ``step -> rate`` rising
    linearly from ``peak / warmup`` at update 0 to ``peak`` at update ``warmup - 1``, then
    constant. (The bench's Keras schedule computes the same in TensorFlow ops.)

    >>> warmup_schedule(0.1, 1)
    0.1
    >>> [warmup_schedule(0.1, 2)(step) for step in (0, 1, 5)]
    [0.05, 0.1, 0.1]
    """
    if warmup <= 1:
        return peak
    return lambda step: peak * min(1.0, (step + 1) / warmup)
