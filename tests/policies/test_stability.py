"""The step's measured edge of stability (policies/stability.py): a ceiling lowered only when
the rounds' mean gradient explodes, not when it grows as training takes off."""

from __future__ import annotations

import math
import random

import pytest

from tf_hetero.policies.stability import StepCeiling


def _feed(ceiling, norms, step=8.0):
    return [ceiling.observe(n, step) for n in norms]


def test_a_gradient_growing_as_training_takes_off_keeps_the_step():
    """The first 40 rounds' norms measured on one_slow at a stable step (8x the one-batch
    rate, benchmarks/results/2026-12-02-auto-ceiling): the norm grows 30x as training takes
    off, then wanders with single-round blips of up to 3.6x the median before."""
    rng = random.Random(0)
    norms = [0.42, 1.75, 2.09, 1.89, 1.76, 1.94, 1.93, 2.36, 2.82, 2.51, 3.14, 3.91, 4.87, 5.59,
             7.42, 6.09, 7.54, 7.59, 6.99, 12.67, 8.1, 13.24, 9.3, 10.25, 8.57, 6.76, 5.74,
             11.73, 16.05, 4.41, 12.03, 5.03, 11.77, 7.09, 7.41, 4.52, 6.14, 5.1, 11.94, 11.15]
    norms += [8 * math.exp(rng.gauss(0, 0.35)) for _ in range(400)]
    norms[100] = norms[300] = 3.6 * 8
    c = StepCeiling()
    assert _feed(c, norms) == [None] * len(norms)
    assert c.ceiling == math.inf and not c.backoffs


def test_two_spikes_in_a_row_halve_the_largest_recent_step():
    c = StepCeiling(factor=4.0)
    assert _feed(c, [1.0] * 10, step=20.0) == [None] * 10
    assert c.observe(6.0, step=32.0) is None  # one spike: judged next round
    why = c.observe(40.0, step=25.0)
    assert "6x and 40x the median of the 10 rounds before (1.00)" in why
    assert "32.00x the one-batch rate" in why
    assert c.ceiling == 16.0 and c.backoffs == [(40.0, 32.0, 16.0)]


def test_one_round_at_the_factors_square_backs_off_at_once():
    c = StepCeiling(factor=4.0)
    _feed(c, [2.0] * 8, step=10.0)
    assert "34x the median" in c.observe(68.0, step=10.0)
    assert c.ceiling == 5.0


def test_a_single_spike_followed_by_a_normal_round_is_noise():
    c = StepCeiling(factor=4.0)
    _feed(c, [1.0] * 8)
    assert _feed(c, [5.0, 1.0, 5.0, 1.2, 15.0, 0.9]) == [None] * 6
    assert c.ceiling == math.inf


def test_the_rounds_ringing_after_a_backoff_are_no_reference_and_the_ceiling_never_rises():
    c = StepCeiling(factor=4.0, min_rounds=4)
    _feed(c, [1.0] * 8, step=32.0)
    assert _feed(c, [10.0, 30.0], step=32.0)[1] is not None  # ceiling 16
    # momentum carries the spike for a few rounds: they rebuild the reference, no back-off
    assert _feed(c, [30.0, 20.0, 10.0, 5.0], step=16.0) == [None] * 4
    assert c.ceiling == 16.0
    # a new instability at the lower step halves it again; it is never raised
    assert _feed(c, [5.0] * 6, step=16.0) == [None] * 6
    assert _feed(c, [50.0, 60.0], step=16.0)[1] is not None
    assert c.ceiling == 8.0
    _feed(c, [1.0] * 50, step=8.0)
    assert c.ceiling == 8.0


def test_non_finite_rounds_are_left_to_the_divergence_guard_and_bad_settings_refused():
    c = StepCeiling()
    _feed(c, [1.0] * 8)
    assert _feed(c, [float("nan"), float("inf"), float("nan")]) == [None] * 3
    assert c.ceiling == math.inf
    with pytest.raises(ValueError, match=r"StepCeiling\(factor=1\)"):
        StepCeiling(factor=1)
    with pytest.raises(ValueError, match=r"StepCeiling\(backoff=1\.5\)"):
        StepCeiling(backoff=1.5)


def test_a_spike_is_clipped_to_the_factor_times_the_reference_which_outlives_a_backoff():
    c = StepCeiling(factor=4.0, min_rounds=4)
    assert c.max_norm == 0.0  # nothing measured: no bound
    _feed(c, [1.0, 2.0, 1.0])
    assert c.max_norm == 0.0
    _feed(c, [2.0])
    assert c.max_norm == pytest.approx(4 * 1.5)  # 4 x the median
    _feed(c, [10.0, 30.0])  # a back-off: the rounds after it ring, the old reference holds
    assert c.ceiling < math.inf and c.max_norm == pytest.approx(4 * 1.5)
    _feed(c, [3.0, 3.0, 3.0, 3.0])
    assert c.max_norm == pytest.approx(12.0)
