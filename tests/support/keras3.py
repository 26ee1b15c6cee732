"""Keras 3 (``import keras``) beside tf_keras: the small problem of :mod:`support.small` with a
Keras 3 model, its data for a parameter-server ``fit``, and the check every Keras 3 fit on a
cluster makes (its steps ran on the workers, none on the chief). Keras and TensorFlow are
imported when a helper is called."""

from __future__ import annotations

import numpy as np

from tf_hetero.data import without_autotune  # test data: nothing to tune, quick to delete

from support.small import CLASSES, FEATURES

#: Rows of one batch.
B = 8


def model(seed: int = 1, cls=None):
    """Input(FEATURES) -> Dense(4, tanh) -> Dense(CLASSES) logits, Glorot-initialised from
    ``seed`` (built: it has an ``Input``); ``cls``: a ``keras.Sequential`` subclass to make
    (e.g. one with its own ``train_step``)."""
    import keras

    init = keras.initializers.GlorotUniform
    return (cls or keras.Sequential)([
        keras.Input((FEATURES,)),
        keras.layers.Dense(4, activation="tanh", kernel_initializer=init(seed)),
        keras.layers.Dense(CLASSES, kernel_initializer=init(seed + 1))])


def loss():
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def compiled(learning_rate: float = 0.1, seed: int = 1, **compile_kwargs):
    """:func:`model` compiled with SGD, :func:`loss` and ``compile_kwargs`` (``metrics`` is
    ``["accuracy"]`` unless given). Call it under the strategy's scope."""
    import keras

    m = model(seed)
    compile_kwargs.setdefault("metrics", ["accuracy"])
    m.compile(keras.optimizers.SGD(learning_rate), loss(), **compile_kwargs)
    return m


def rows(n: int, seed: int = 0):
    """``n`` random rows of FEATURES float32 features and their labels (seeded)."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, FEATURES)).astype("float32"), rng.integers(0, CLASSES, n)


def rows_fn(x, y, batch: int = B):
    """A dataset function: ``(x, y)`` repeated, in batches of ``batch``."""
    def fn(ctx=None):
        import tensorflow as tf

        return without_autotune(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch))
    return fn


def one_batch_fn(x, y):
    """A dataset function whose every batch is ``(x, y)``: whichever worker reads whichever
    batch, a metric over the steps equals the metric over ``(x, y)``."""
    def fn(ctx=None):
        import tensorflow as tf

        return without_autotune(tf.data.Dataset.from_tensors((x, y)).repeat())
    return fn


def assert_trained_on_workers(log, model, closures: int, steps: int, workers: int = 3) -> None:
    """The fit's steps ran on the workers, none on the chief: the workers ran ``closures``
    closures (``log``: the strategy's ``tf_hetero.TaskLog``) and the optimizer counted
    ``steps`` steps (each closure's steps, no other). A step Keras 3 ran on the chief shows
    as a missing closure or an extra iteration."""
    assert len(log) == closures, f"{len(log)} closures ran on the workers, {closures} expected"
    assert {r.worker for r in log.records} <= set(range(workers))
    assert int(model.optimizer.iterations.numpy()) == steps
