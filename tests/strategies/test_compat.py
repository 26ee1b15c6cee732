"""Drop-in compatibility matrix (issue 15): what stock ``ParameterServerStrategy`` supports in
tf_keras's parameter-server ``model.fit`` tests and the TF parameter-server tutorial, run under
every registered strategy (stock PSS included, as the reference) on the shared in-process
cluster.

A cell passes when the case trains (and does what the case checks), or when the strategy
refuses it *before training* with the one-line refusal listed in :data:`REFUSALS` (the
unsupported use and the alternative). Anything else fails the test.

Cases (each bundles several uses, to keep the matrix quick):

- ``tutorial``: ``DatasetCreator`` whose ``dataset_fn`` maps string features through a
  ``StringLookup`` made under the strategy's scope, an ``Embedding`` model, ``validation_data``
  (a ``DatasetCreator``), standard callbacks (ModelCheckpoint, EarlyStopping, CSVLogger,
  TensorBoard, LearningRateScheduler, BackupAndRestore), then ``evaluate`` and ``predict``;
- ``tensors``: numpy input to ``fit`` and ``evaluate``, a ``Normalization`` layer adapted before
  ``fit``, and a ``tf.data.Dataset`` to ``fit``;
- ``steps_per_execution``: ``compile(steps_per_execution=2)``;
- ``partitioned``: ``variable_partitioner`` (sharded variables) with an ``Embedding`` and a
  model whose custom ``train_step`` calls ``optimizer.apply_gradients``;
- ``failures``: a ``fit`` that raises, then a fit that trains (its tasks apply), then a second
  model trained after it on the same strategy (the first left untouched by the second's
  rounds: momentum would move it);
- ``keras3``: the ``tutorial`` case with a Keras 3 model (issue 50), through
  ``tf_hetero.keras3.enable()``.
"""

from __future__ import annotations

import numpy as np
import pytest

from tf_hetero.data import without_autotune  # test data: nothing to tune, quick to delete
from tf_hetero.strategies import registry

from support import small

# Its own xdist group (tests/conftest.py): the matrix is half of the in-process tests' time
# (986 of ~2,070 s in a fresh-clone run), which all ran on one worker, the suite's critical
# path; the other worker runs it on an in-process cluster of its own after its pure modules.
pytestmark = [pytest.mark.cluster, pytest.mark.inprocess("compat")]

N, B = 3, 8
VOCAB = ["a", "b", "c", "d", "e", "f"]

#: (case, strategy) -> the refusal's message (a regex): refused before training, clearly.
#: H-PS with local accumulation (buffered pushes: pipelined, quantized) sizes a worker's
#: share itself and refuses several micro-batches per task.
REFUSALS = {
    ("steps_per_execution", name): r"^\w+Strategy: the training step runs several micro-batches "
                                   r"per task.*Fix: compile with steps_per_execution=1"
    for name in ("hpsfp", "hpsint", "hpspipe")
}


def _strings_fn(batch):
    """Rows of (string feature, label): the tutorial's shape of problem."""
    rng = np.random.default_rng(0)
    words = rng.choice(VOCAB, 256)
    labels = (np.searchsorted(VOCAB, words) % small.CLASSES).astype("int64")
    return words, labels


def case_tutorial(strategy, tmp_path):
    _tutorial(strategy, tmp_path, keras3=False)


def _tutorial(strategy, tmp_path, keras3: bool):
    """The tutorial case, with a tf_keras model or a Keras 3 one (``tf_hetero.keras3``; the
    dataset function itself, as Keras 3 has no ``DatasetCreator``; its ``.weights.h5``
    checkpoint; no TensorBoard, whose Keras 3 defaults write per batch)."""
    import tensorflow as tf

    import tf_hetero

    keras = tf_hetero.models.keras_module(keras3)
    if keras3:
        tf_hetero.keras3.enable()
    words, labels = _strings_fn(B)
    with strategy.scope():
        lookup = keras.layers.StringLookup(vocabulary=VOCAB, mask_token=None)
        embedding = (keras.layers.Embedding(len(VOCAB) + 1, 4) if keras3
                     else keras.layers.Embedding(len(VOCAB) + 1, 4, input_length=1))
        model = keras.Sequential([embedding, keras.layers.Flatten(),
                                  keras.layers.Dense(small.CLASSES)])
        model.compile(keras.optimizers.SGD(0.1),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])

    def dataset_fn(ctx=None):
        ds = tf.data.Dataset.from_tensor_slices((words, labels)).repeat().batch(B)
        return without_autotune(ds.map(lambda x, y: (tf.expand_dims(lookup(x), -1), y)))

    data = dataset_fn if keras3 else keras.utils.experimental.DatasetCreator(dataset_fn)
    checkpoint = tmp_path / ("ckpt.weights.h5" if keras3 else "ckpt")
    callbacks = [
        keras.callbacks.ModelCheckpoint(str(checkpoint), save_weights_only=True),
        keras.callbacks.EarlyStopping(monitor="loss", patience=5),
        keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
        keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr),
        keras.callbacks.BackupAndRestore(str(tmp_path / "backup")),
    ] + ([] if keras3 else [keras.callbacks.TensorBoard(str(tmp_path / "tb"))])
    history = model.fit(data, epochs=2, steps_per_epoch=2 * N, validation_data=data,
                        validation_steps=2, callbacks=callbacks, verbose=0)
    assert len(history.history["loss"]) == 2 and "val_loss" in history.history
    assert (tmp_path / "log.csv").exists()
    result = model.evaluate(data, steps=2, return_dict=True, verbose=0)
    assert np.isfinite(result["loss"])
    out = model.predict(np.array([[1], [2]]), verbose=0)
    assert out.shape == (2, small.CLASSES)


def case_tensors(strategy, tmp_path):
    import tensorflow as tf
    import tf_keras as keras

    rng = np.random.default_rng(1)
    x = rng.normal(3.0, 2.0, size=(16 * B, small.FEATURES)).astype("float32")
    y = rng.integers(0, small.CLASSES, len(x))
    with strategy.scope():
        norm = keras.layers.Normalization()
        norm.adapt(x)
        model = keras.Sequential([keras.Input((small.FEATURES,)), norm,
                                  keras.layers.Dense(small.CLASSES)])
        model.compile(keras.optimizers.SGD(0.1), small.loss())
    # Batches of two granules (a sized strategy's granularity is 8): each worker's data is
    # re-batched, which a Dataset given whole goes through TF's auto-shard with (granules.py).
    model.fit(x, y, batch_size=2 * B, epochs=1, steps_per_epoch=2 * N, verbose=0)
    ds = without_autotune(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(2 * B))
    model.fit(ds, epochs=1, steps_per_epoch=2 * N, verbose=0)
    assert np.isfinite(model.evaluate(x, y, batch_size=B, steps=2, verbose=0))
    assert int(model.optimizer.iterations.numpy()) >= 2


def case_steps_per_execution(strategy, tmp_path):
    import tf_keras as keras

    with strategy.scope():
        model = small.model(1)
        model.compile(keras.optimizers.SGD(0.1), small.loss(), steps_per_execution=2)
    model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(B)), epochs=1,
              steps_per_epoch=4 * N, verbose=0)
    assert int(model.optimizer.iterations.numpy()) >= 2


class _CustomStep:
    """A tf_keras Model subclass whose train_step is written by the user."""

    @staticmethod
    def build():
        import tensorflow as tf
        import tf_keras as keras

        class Model(keras.Model):
            def __init__(self):
                super().__init__()
                self.embed = keras.layers.Embedding(64, 8)
                self.dense = keras.layers.Dense(small.CLASSES)
                self.tracker = keras.metrics.Mean(name="loss")

            def call(self, x):
                ids = tf.cast(tf.abs(x[:, :1]) * 10, tf.int32) % 64
                return self.dense(tf.concat([tf.reshape(self.embed(ids), [-1, 8]), x], 1))

            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = self.compiled_loss(y, self(x, training=True))
                grads = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                self.tracker.update_state(loss)
                return {"loss": self.tracker.result()}

        return Model()


def case_partitioned(_strategy, tmp_path, name=None, resolver=None):
    import tensorflow as tf
    import tf_keras as keras

    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=256, max_shards=2)
    strategy = registry.make(name, resolver, variable_partitioner=partitioner)
    with strategy.scope():
        model = _CustomStep.build()
        model.compile(keras.optimizers.SGD(0.1), small.loss())
        model.build((None, small.FEATURES))
    from tensorflow.python.distribute.sharded_variable import ShardedVariable

    assert isinstance(model.embed.embeddings, ShardedVariable)  # the partitioner took effect
    before = model.get_weights()
    model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(B)), epochs=1,
              steps_per_epoch=2 * N, verbose=0)
    assert any(np.abs(a - b).sum() > 0 for a, b in zip(model.get_weights(), before))


def case_failures(strategy, tmp_path):
    import tensorflow as tf
    import tf_keras as keras

    def fit(seed, labels=small.CLASSES):
        with strategy.scope():
            model = small.model(seed)
            model.compile(keras.optimizers.SGD(0.1, momentum=0.9), small.loss())
        model.fit(keras.utils.experimental.DatasetCreator(small.dataset_fn(B, labels)),
                  epochs=1, steps_per_epoch=2 * N, verbose=0)
        return model

    with pytest.raises(tf.errors.InvalidArgumentError, match="label value"):
        fit(1, labels=50)
    monitor = getattr(strategy, "monitor", None)  # stock PSS has none
    failed = len(monitor.tasks) if monitor is not None else 0
    first = fit(2)  # the fit after a failed one trains: it updates and its tasks apply
    weights, iterations = first.get_weights(), int(first.optimizer.iterations.numpy())
    assert iterations >= 1
    if monitor is not None:
        assert sum(t.applied for t in monitor.tasks[failed:]) >= 1
    second = fit(3)
    assert int(second.optimizer.iterations.numpy()) >= 1
    assert int(first.optimizer.iterations.numpy()) == iterations
    for got, want in zip(first.get_weights(), weights):
        np.testing.assert_array_equal(got, want)


def case_keras3(strategy, tmp_path):
    _tutorial(strategy, tmp_path, keras3=True)


CASES = {"tutorial": case_tutorial, "tensors": case_tensors,
         "steps_per_execution": case_steps_per_execution, "partitioned": case_partitioned,
         "failures": case_failures, "keras3": case_keras3}


@pytest.mark.parametrize("name", registry.names())
@pytest.mark.parametrize("case", list(CASES))
def test_compatibility(inprocess_cluster, tmp_path, case, name, record_property):
    resolver = inprocess_cluster.resolver
    refusal = REFUSALS.get((case, name))
    strategy = None if case == "partitioned" else registry.make(name, resolver)
    run = CASES[case]
    kwargs = {"name": name, "resolver": resolver} if case == "partitioned" else {}
    if refusal is None:
        run(strategy, tmp_path, **kwargs)
        record_property("cell", "pass")
        return
    with pytest.raises(Exception, match=refusal) as e:
        run(strategy, tmp_path, **kwargs)
    assert len(str(e.value).strip().splitlines()) == 1, str(e.value)[:2000]  # one line
    record_property("cell", "refused")
