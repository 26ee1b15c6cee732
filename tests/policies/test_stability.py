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


# Rounds 20-99 of a 16-worker run at 16x the one-batch rate (benchmarks/results/
# 2026-12-02-auto-loss, w16 repeat 1): each round's norm (divided by its step) and loss. The
# instability that follows a stable stretch: at rounds 97-99 the norm rose to 2.7-3.3x the
# median before while the loss rose from 0.65 to 1.02 (accuracy then fell from 0.75 to 0.46).
_W16_NORMS = [
    1.01, 0.76, 1.36, 0.62, 0.94, 0.68, 0.91, 1.2, 0.65, 0.84, 0.69, 0.98, 0.74, 1.12, 0.76, 0.7,
    0.86, 0.51, 1.01, 0.43, 1.47, 0.71, 1.14, 0.74, 0.75, 0.49, 0.8, 0.54, 0.58, 0.57, 0.58,
    0.55, 0.45, 0.62, 0.64, 0.4, 0.85, 0.55, 0.85, 0.87, 0.54, 0.39, 0.56, 0.63, 0.97, 0.87,
    0.64, 0.61, 0.55, 1.36, 1.4, 0.46, 1.3, 1.01, 0.73, 1.25, 0.65, 1.06, 0.69, 1.13, 1.25,
    0.56, 0.83, 0.58, 1.01, 0.79, 0.65, 0.84, 0.75, 1.12, 0.57, 1.22, 1.05, 0.8, 1.33, 0.91,
    1.45, 2.27, 2.9, 2.93]
_W16_LOSSES = [
    1.97, 1.88, 1.94, 1.85, 1.81, 1.69, 1.71, 1.68, 1.62, 1.63, 1.6, 1.61, 1.54, 1.44, 1.5,
    1.52, 1.51, 1.44, 1.44, 1.37, 1.44, 1.36, 1.42, 1.31, 1.29, 1.28, 1.27, 1.26, 1.31, 1.16,
    1.14, 1.1, 1.21, 1.13, 1.22, 1.07, 1.2, 1.11, 1.13, 1.1, 1.06, 1.01, 1.05, 1.0, 1.05, 1.0,
    1.03, 0.97, 1.0, 1.03, 1.0, 0.92, 1.07, 0.96, 0.9, 1.02, 0.88, 0.94, 0.95, 0.9, 0.94, 0.79,
    0.88, 0.78, 0.78, 0.7, 0.74, 0.72, 0.65, 0.78, 0.71, 0.69, 0.72, 0.65, 0.66, 0.62, 0.65,
    0.77, 1.02, 0.87]


def test_the_norm_and_the_loss_growing_together_back_off_where_the_norm_alone_did_not():
    c = StepCeiling()
    got = [c.observe(n, 16.0, loss) for n, loss in zip(_W16_NORMS, _W16_LOSSES)]
    fired = [i for i, why in enumerate(got) if why is not None]
    assert fired == [78]  # round 98: two rounds in a row with both up
    assert "while the loss rose to 1.02" in got[78] and c.ceiling == 8.0
    # the norm alone (no loss) keeps the step through it
    c = StepCeiling()
    assert [c.observe(n, 16.0) for n in _W16_NORMS] == [None] * len(_W16_NORMS)


def test_a_takeoff_and_a_noisy_plateau_keep_the_step():
    """The norm growing 30x as training takes off (one_slow's first 40 rounds, above) while
    the loss falls, then 400 rounds of a plateau with 10% loss noise and the norm's
    measured spread: no back-off."""
    rng = random.Random(1)
    norms = [0.42, 1.75, 2.09, 1.89, 1.76, 1.94, 1.93, 2.36, 2.82, 2.51, 3.14, 3.91, 4.87, 5.59,
             7.42, 6.09, 7.54, 7.59, 6.99, 12.67, 8.1, 13.24, 9.3, 10.25, 8.57, 6.76, 5.74,
             11.73, 16.05, 4.41, 12.03, 5.03, 11.77, 7.09, 7.41, 4.52, 6.14, 5.1, 11.94, 11.15]
    losses = [2.3 * math.exp(-i / 15) + 0.5 for i in range(len(norms))]
    norms += [8 * math.exp(rng.gauss(0, 0.35)) for _ in range(400)]
    losses += [0.5 * math.exp(rng.gauss(0, 0.1)) for _ in range(400)]
    c = StepCeiling()
    assert [c.observe(n, 8.0, x) for n, x in zip(norms, losses)] == [None] * len(norms)
    assert c.ceiling == math.inf


def test_a_loss_that_climbs_backs_off_and_an_unknown_loss_is_no_evidence():
    c = StepCeiling()
    losses = [1.0 - 0.01 * i for i in range(20)] + [1.0, 1.2, 1.4, 1.6]
    got = [c.observe(1.0, 8.0, x) for x in losses]
    assert got[:23] == [None] * 23 and "the loss rose to 1.40 (median of the last 3" in got[23]
    assert c.ceiling == 4.0
    c = StepCeiling()
    assert [c.observe(1.0, 8.0, math.nan) for _ in range(30)] == [None] * 30
    with pytest.raises(ValueError, match=r"StepCeiling\(joint=1\)"):
        StepCeiling(joint=1)
