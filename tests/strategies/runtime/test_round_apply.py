"""The round's apply (strategies/runtime/round_apply.py): the mean loss of the round's batch
that it reports, read by the loss check and the step's ceiling."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)


def _losses(own, n_own):
    import tensorflow as tf

    from tf_hetero.strategies.runtime import round_apply

    class Accumulators:  # the losses' lanes: [lane, slot] = (summed loss, ...)
        losses = tf.Variable([[2.0, 9.0], [4.0, 9.0], [8.0, 9.0]], dtype=tf.float64)

    own = tf.constant(own, tf.float32)
    return float(round_apply._round_loss(Accumulators, own, tf.constant(n_own, tf.float32)))


def test_the_round_loss_is_the_mean_over_its_own_lanes_and_unknown_when_it_has_none():
    # lanes 0 and 1 of slot 0, 2 micro-batches: (2 + 4) / 2; lane 2 and slot 1 left out
    assert _losses([[1, 0], [1, 0], [0, 0]], 2.0) == 3.0
    # a round that only folds late shares in has no lane of its own: no loss (not 0,
    # which the collapse check would take for the fit's lowest loss)
    assert math.isnan(_losses([[0, 0], [0, 0], [0, 0]], 0.0))
