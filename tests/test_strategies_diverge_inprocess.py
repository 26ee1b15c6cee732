"""A diverging fit stops with one clear line, and the weights keep the last good round
(real ``model.fit`` on the shared in-process cluster)."""

from __future__ import annotations

import numpy as np
import pytest

import small

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(inprocess_cluster):
    return inprocess_cluster


def _fit(strategy, lr, steps=60):
    """Linear least squares: past lr ~ 1 / E[x^2] every step multiplies the error."""
    import tf_keras as keras

    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(
            1, input_shape=(small.FEATURES,), kernel_initializer="zeros")])
        model.compile(keras.optimizers.SGD(lr), "mse")
    model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(8)), epochs=1,
              steps_per_epoch=steps, verbose=0)
    return model


@pytest.mark.parametrize("name", ["bsp", "hps"])
def test_a_diverging_fit_stops_with_one_line_saying_what_to_lower(cluster, name):
    import tf_hetero

    make = {"bsp": tf_hetero.BSPStrategy, "hps": tf_hetero.HPSStrategy}[name]
    strategy = make(cluster.resolver)
    with pytest.raises(tf_hetero.DivergenceError,
                       match=r"^tf-hetero: training diverged: .*round \d+.*Fix: lower the "
                             r"learning rate \(learning rate 5\)"):
        _fit(strategy, lr=5.0)
    rounds = [r for r in strategy.engine.rounds if r.applied >= 0]
    assert rounds and "grad_norm" in rounds[-1].info
    # The error reached the user; the same strategy trains again at a sane rate.
    model = _fit(strategy, lr=0.05, steps=6)
    assert all(np.isfinite(w).all() for w in model.get_weights())
