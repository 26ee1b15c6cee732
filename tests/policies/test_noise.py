"""The gradient-noise estimate a round's apply makes (policies/noise.py) against the truth:
synthetic gradients of known covariance, and the simulator's learner, whose full-data
gradient variance is computed exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tf_hetero.policies.noise import GradientNoise, GradientSample


def _sample(rng, mean, std, sizes) -> GradientSample:
    """One round: lanes of ``sizes`` units, each unit's gradient ``mean + std * N(0, I)``."""
    sums = [sum(mean + std * rng.standard_normal(mean.shape) for _ in range(n)) for n in sizes]
    units = sum(sizes)
    g = sum(sums) / units
    return GradientSample(units, len(sizes), float(g @ g),
                          sum(float(s @ s) / n for s, n in zip(sums, sizes)))


@pytest.mark.parametrize("sizes", [(4, 4, 4, 4), (7, 5, 3, 1), (2, 14)])
def test_one_round_estimate_is_unbiased_for_equal_and_unequal_lanes(sizes):
    rng = np.random.default_rng(0)
    mean, std = rng.standard_normal(50) * 0.3, 0.8  # |G|^2 ~ 4.5, tr(C) = 50 * 0.64 = 32
    estimates = np.array([_sample(rng, mean, std, sizes).estimate() for _ in range(2000)])
    trace, signal = estimates.mean(axis=0)
    assert trace == pytest.approx(50 * std ** 2, rel=0.03)
    assert signal == pytest.approx(float(mean @ mean), rel=0.05)


def test_the_moving_averages_convert_units_to_samples_and_give_gain_and_efficiency():
    rng = np.random.default_rng(1)
    mean, std = np.full(40, 0.5), 1.0  # per unit: tr(C) = 40, |G|^2 = 10
    noise = GradientNoise(beta=0.98)
    for _ in range(3000):
        noise.add(_sample(rng, mean, std, (3, 5, 8)), unit_samples=8)
    assert noise.covariance_trace == pytest.approx(40 * 8, rel=0.05)  # per sample
    assert noise.signal == pytest.approx(10.0, rel=0.05)
    assert noise.noise_scale == pytest.approx(32.0, rel=0.08)
    b = noise.noise_scale
    assert noise.efficiency(64, base=16) == pytest.approx((b + 16) / (b + 64), rel=1e-9)
    assert 1.0 <= noise.gain(64, base=16) <= 4.0
    assert noise.gain(16, base=16) == 1.0


def test_rounds_of_one_lane_or_not_finite_are_ignored_and_nothing_is_known_before():
    noise = GradientNoise()
    assert not noise.known and math.isnan(noise.noise_scale) and noise.gain(8, 1) == 1.0
    noise.add(GradientSample(4, 1, 1.0, 4.0))
    noise.add(GradientSample(4, 2, float("nan"), 4.0))
    assert noise.rounds == 0
    with pytest.raises(ValueError, match=r"GradientNoise\(beta=1\.0\)"):
        GradientNoise(beta=1.0)


def test_the_estimate_matches_the_simulator_learners_exact_full_data_variance():
    """At fixed parameters (a partly trained MLP on digits), rounds of four workers' lanes of
    unequal sizes (H-PS's shares), each lane from its worker's own shard: the mean of the
    rounds' estimates is within 10% of the exact trace of the per-sample covariance and of
    |G|^2 (the moving average is checked on synthetic rounds above)."""
    from tf_hetero.sim.learner import Learner

    m = Learner(num_workers=4, batch_size=32, lr=0.05, seed=0)
    for _ in range(60):  # away from the initial weights, where |G|^2 dominates
        m.apply_async(m.gradient(m.params, worker=0, rows=32))
    exact_trace, exact_signal = m.exact_noise()
    granule, rng, estimates = 8, np.random.default_rng(2), []
    for _ in range(300):
        sizes = rng.integers(1, 9, size=4)
        sums = [m.gradient(m.params, w, rows=granule * int(n)) * n for w, n in enumerate(sizes)]
        units = int(sizes.sum())
        g = sum(sums) / units
        estimates.append(GradientSample(units, 4, float(g @ g), sum(
            float(s @ s) / n for s, n in zip(sums, sizes))).estimate())
    trace, signal = np.mean(estimates, axis=0)
    assert trace * granule == pytest.approx(exact_trace, rel=0.10)  # per unit -> per sample
    assert signal == pytest.approx(exact_signal, rel=0.10)
