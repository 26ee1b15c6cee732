"""A small classification problem for strategy tests on the in-process cluster: random
5-feature rows, 3 classes, and a tiny model (seeded)."""

from __future__ import annotations

import numpy as np

from tf_hetero.data import without_autotune  # test data: nothing to tune, quick to delete

#: Features per row and classes of the problem.
FEATURES, CLASSES = 5, 3


def dataset_fn(batch: int, labels: int = CLASSES, seed: int = 0, rows: int = 512):
    """A ``DatasetCreator`` function: the same repeated stream of ``rows`` random rows on
    every worker; labels are drawn from ``range(labels)`` (``labels > CLASSES`` makes labels
    the loss rejects: the step raises InvalidArgumentError)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, FEATURES)).astype("float32")
    y = rng.integers(0, labels, rows)

    def fn(ctx=None):
        import tensorflow as tf

        return without_autotune(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch))
    return fn


def model(seed: int = 1, hidden: int = 4):
    """Dense(hidden, tanh) -> Dense(CLASSES) logits, Glorot-initialised from ``seed``."""
    import tf_keras as keras

    return keras.Sequential([
        keras.layers.Dense(hidden, activation="tanh", input_shape=(FEATURES,),
                           kernel_initializer=keras.initializers.GlorotUniform(seed)),
        keras.layers.Dense(CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed + 1))])


def loss():
    import tf_keras as keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)
