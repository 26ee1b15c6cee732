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


#: Round strategies check each round's mean gradient; ASP (steps that apply on their own)
#: each step's loss. SSP's steps are one-task rounds applied by the chief.
ASYNC = ("asp",)


def _names():
    from tf_hetero.strategies import registry

    return [n for n in registry.names() if n != "pss"]


@pytest.mark.parametrize("name", _names())
def test_a_diverging_fit_stops_with_one_line_saying_what_to_lower(cluster, name):
    import tf_hetero
    from tf_hetero.strategies import registry

    strategy = registry.make(name, cluster.resolver)
    where = r"step \d+" if name in ASYNC else r"round \d+"
    with pytest.raises(tf_hetero.DivergenceError,
                       match=rf"^tf-hetero: training diverged: .*{where}.*Fix: lower the "
                             r"learning rate \(learning rate 5\)"):
        _fit(strategy, lr=5.0)
    if name not in ASYNC:
        rounds = [r for r in strategy.engine.rounds if r.applied >= 0]
        assert rounds and "grad_norm" in rounds[-1].info
    # The error reached the user; the same strategy trains again at a sane rate.
    model = _fit(strategy, lr=0.05, steps=6)
    assert all(np.isfinite(w).all() for w in model.get_weights())


def test_a_sane_asynchronous_fit_is_not_stopped_and_every_step_loss_is_checked(cluster):
    """The loss check reads every step (not only those whose result fit still held), and a
    converging fit passes it."""
    import tf_hetero

    strategy = tf_hetero.ASPStrategy(cluster.resolver)
    _fit(strategy, lr=0.05, steps=40)
    assert strategy._cluster_coordinator.losses.steps == 40
