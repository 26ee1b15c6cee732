"""tf_keras's own pipelines (numpy / tensor input) under a tf-hetero strategy are distributed
without tf.data autotuning; a user's Dataset keeps its options (strategies/runtime/arrays.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tf_hetero.data import without_autotune
from tf_hetero.strategies import registry

from support import small

pytestmark = pytest.mark.cluster


def _distributed_autotuning(monkeypatch, strategy, fit) -> list:
    """``autotune.enabled`` of each dataset ``strategy`` distributes during ``fit()``: the
    dataset functions handed to stock PSS's ``distribute_datasets_from_function`` are
    called once more on the chief, to read the options they give."""
    import tensorflow as tf

    seen = []
    parent = tf.distribute.ParameterServerStrategy.distribute_datasets_from_function

    def spy(self, dataset_fn, options=None):
        if self is strategy:
            context = tf.distribute.InputContext(num_input_pipelines=1)
            seen.append(dataset_fn(context).options().autotune.enabled)
        return parent(self, dataset_fn, options)

    monkeypatch.setattr(tf.distribute.ParameterServerStrategy,
                        "distribute_datasets_from_function", spy)
    fit()
    return seen


@pytest.mark.parametrize("name", ["bsp", "hps"])
def test_numpy_input_is_distributed_without_autotuning_a_dataset_keeps_its_options(
        inprocess_cluster, monkeypatch, name):
    import tensorflow as tf
    import tf_keras as keras

    strategy = registry.make(name, inprocess_cluster.resolver)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, small.FEATURES)).astype("float32")
    y = rng.integers(0, small.CLASSES, len(x))
    with strategy.scope():
        model = small.model(1)
        model.compile(keras.optimizers.SGD(0.1), small.loss())

    arrays = _distributed_autotuning(monkeypatch, strategy, lambda: model.fit(
        x, y, batch_size=16, epochs=1, steps_per_epoch=6, verbose=0))
    assert arrays == [False]  # tf_keras's own pipeline: autotuning off
    evaluated = _distributed_autotuning(monkeypatch, strategy, lambda: model.evaluate(
        x, y, batch_size=16, steps=2, verbose=0))
    assert evaluated == [False]

    def ds(ctx=None):  # made where it is called (on each worker), as a dataset_fn must be
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)

    users = _distributed_autotuning(monkeypatch, strategy, lambda: model.fit(
        keras.utils.experimental.DatasetCreator(ds), epochs=1, steps_per_epoch=6, verbose=0))
    assert users == [None]  # the user's pipeline: its own options, untouched
    untuned = _distributed_autotuning(monkeypatch, strategy, lambda: model.fit(
        keras.utils.experimental.DatasetCreator(lambda ctx=None: without_autotune(ds())),
        epochs=1, steps_per_epoch=6, verbose=0))
    assert untuned == [False]
