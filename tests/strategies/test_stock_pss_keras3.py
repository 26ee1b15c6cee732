"""Keras 3 ``model.fit``/``evaluate``/``predict`` under the stock ``ParameterServerStrategy``
(asynchronous) on the shared in-process cluster (3 workers, 2 PS), switched on by
``tf_hetero.keras3.enable()`` (docs/KERAS3.md).

Every training test checks that the steps ran on the workers and none on the chief
(``support.keras3.assert_trained_on_workers``): the coordinator's worker threads ran exactly
the closures the fit scheduled (one per execution) and ``optimizer.iterations`` counts exactly
the steps those closures ran, so a step run on the chief (Keras 3's own loop; a silent
fallback) would leave the closures missing or the count high.
``test_the_worker_check_fails_on_keras3s_own_loop`` shows the check failing on Keras 3's own
``fit``. The rules without a cluster: tests/strategies/runtime/test_keras3.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from tf_hetero.data import without_autotune  # test data: nothing to tune, quick to delete

from support import keras3 as k3
from support.keras3 import B, CLASSES

pytestmark = pytest.mark.cluster

VOCAB = ["a", "b", "c", "d", "e", "f"]
PREFIX = "tf-hetero (Keras 3 on ParameterServerStrategy): "


@pytest.fixture(scope="module", autouse=True)
def _keras3_on_ps():
    import tf_hetero

    tf_hetero.keras3.enable()


def _strategy(cluster):
    import tensorflow as tf

    return tf.distribute.ParameterServerStrategy(cluster.resolver)


def _log(strategy):
    import tf_hetero

    return tf_hetero.TaskLog.for_strategy(strategy)


# -- the TF parameter-server tutorial's model, through plain model.fit --------------------------

def test_the_tutorial_model_trains_evaluates_and_predicts_on_the_workers(cluster, tmp_path):
    """String features through a ``StringLookup`` made under the scope, inside the dataset
    function the workers run; an ``Embedding`` model left unbuilt (built from the dataset's
    ``element_spec``: Keras 3's own fit would pull a batch on the chief); validation data;
    epoch-level callbacks; then ``evaluate(steps=)`` and ``predict``."""
    import keras
    import tensorflow as tf

    strategy = _strategy(cluster)
    rng = np.random.default_rng(0)
    words = rng.choice(VOCAB, 256)
    labels = (np.searchsorted(VOCAB, words) % CLASSES).astype("int64")
    with strategy.scope():
        lookup = keras.layers.StringLookup(vocabulary=VOCAB, mask_token=None)
        model = keras.Sequential([keras.layers.Embedding(len(VOCAB) + 1, 4),
                                  keras.layers.Flatten(), keras.layers.Dense(CLASSES)])
        model.compile(keras.optimizers.SGD(0.1), k3.loss(), metrics=["accuracy"])
    assert not model.built

    def dataset_fn(input_context):
        ds = tf.data.Dataset.from_tensor_slices((words, labels)).repeat().batch(B)
        return without_autotune(ds.map(lambda x, y: (tf.expand_dims(lookup(x), -1), y)))

    log = _log(strategy)
    epochs, steps, val_steps = 2, 12, 2
    history = model.fit(
        dataset_fn, epochs=epochs, steps_per_epoch=steps, validation_data=dataset_fn,
        validation_steps=val_steps, verbose=0,
        callbacks=[keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
                   keras.callbacks.EarlyStopping(monitor="loss", patience=5),
                   keras.callbacks.ModelCheckpoint(str(tmp_path / "w.weights.h5"),
                                                   save_weights_only=True),
                   keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr)])
    k3.assert_trained_on_workers(log, model, closures=epochs * (steps + val_steps),
                                 steps=epochs * steps)
    assert len({r.worker for r in log.records}) >= 2
    # learning_rate: LearningRateScheduler adds it to the epoch's logs (Keras's own fit too)
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy",
                                    "learning_rate"}
    assert all(len(v) == epochs and np.all(np.isfinite(v)) for v in history.history.values())
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert (tmp_path / "log.csv").read_text().count("\n") == epochs + 1
    assert (tmp_path / "w.weights.h5").exists()

    result = model.evaluate(dataset_fn, steps=3, return_dict=True, verbose=0)
    assert set(result) == {"loss", "accuracy"} and np.isfinite(result["loss"])
    assert len(log) == epochs * (steps + val_steps) + 3

    ids = lookup(tf.constant(VOCAB)).numpy().reshape(-1, 1)
    out = model.predict(ids, verbose=0)
    assert out.shape == (len(VOCAB), CLASSES)
    assert len(log) == epochs * (steps + val_steps) + 3 + 1  # one batch, on a worker
    np.testing.assert_allclose(out, model(ids).numpy(), atol=1e-5)


# -- metrics and predictions against a single-process Keras 3 model -------------------------------

def test_metrics_and_predictions_equal_a_single_process_keras3_model(cluster):
    """Where the result does not depend on the workers' interleaving, it equals Keras 3 in one
    process: training metrics with the weights held still (learning rate 0) and every batch the
    same; ``evaluate`` of the trained model; ``predict``, in order. Every step's ``assign_add``
    to the metrics landed: the loss's sample count is exactly steps x batch."""
    import keras

    strategy = _strategy(cluster)
    x, y = k3.rows(B, seed=3)
    with strategy.scope():
        model = k3.model()
        model.compile(keras.optimizers.SGD(0.0), k3.loss(), metrics=["accuracy"])
    reference = k3.model()
    reference.compile(keras.optimizers.SGD(0.0), k3.loss(), metrics=["accuracy"])
    reference.set_weights(model.get_weights())
    expected = reference.evaluate(x, y, batch_size=B, return_dict=True, verbose=0)

    log = _log(strategy)
    steps = 15
    history = model.fit(k3.one_batch_fn(x, y), epochs=1, steps_per_epoch=steps, verbose=0)
    k3.assert_trained_on_workers(log, model, closures=steps, steps=steps)
    np.testing.assert_allclose(history.history["loss"][0], expected["loss"], rtol=1e-5)
    np.testing.assert_allclose(history.history["accuracy"][0], expected["accuracy"], rtol=1e-6)
    loss_tracker = model.metrics[0]
    assert [float(v.numpy()) for v in loss_tracker.variables][1] == steps * B

    # train for real (asynchronous), then evaluate the trained weights on both sides
    model.optimizer.learning_rate = 0.1
    model.fit(k3.rows_fn(*k3.rows(512)), epochs=1, steps_per_epoch=30, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == steps + 30
    reference.set_weights(model.get_weights())
    got = model.evaluate(k3.one_batch_fn(x, y), steps=6, return_dict=True, verbose=0)
    expected = reference.evaluate(x, y, batch_size=B, return_dict=True, verbose=0)
    assert set(got) == set(expected)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6)
    assert [float(v.numpy()) for v in model.metrics[0].variables][1] == 6 * B

    many, _ = k3.rows(70, seed=4)
    before = len(log)
    out = model.predict(many, batch_size=32, verbose=0)  # 32 + 32 + 6: three closures
    assert len(log) - before == 3
    np.testing.assert_allclose(out, reference.predict(many, batch_size=32, verbose=0),
                               rtol=1e-5, atol=1e-6)


# -- steps_per_execution ---------------------------------------------------------------------------

def test_steps_per_execution_runs_exactly_the_epochs_steps_with_a_short_last_execution(
        cluster):
    import keras

    strategy = _strategy(cluster)
    with strategy.scope():
        model = k3.model()
        model.compile(keras.optimizers.SGD(0.05), k3.loss(), metrics=["accuracy"],
                      steps_per_execution=4)
    log = _log(strategy)
    history = model.fit(k3.rows_fn(*k3.rows(512)), epochs=2, steps_per_epoch=10, verbose=0)
    # 10 steps an epoch: executions of 4, 4 and 2
    k3.assert_trained_on_workers(log, model, closures=2 * 3, steps=2 * 10)
    assert [float(v.numpy()) for v in model.metrics[0].variables][1] == 10 * B
    assert len(history.history["loss"]) == 2
    model.evaluate(k3.rows_fn(*k3.rows(64)), steps=5, verbose=0)  # 4 + 1
    assert len(log) == 6 + 2
    assert [float(v.numpy()) for v in model.metrics[0].variables][1] == 5 * B


# -- atomic assign_add -----------------------------------------------------------------------------

def test_concurrent_assign_add_on_a_parameter_server_loses_no_increment(cluster):
    """Many closures on three workers add to one Keras 3 variable on a PS at once: every
    increment lands (Keras's own read-then-assign loses some under this load; its count is
    reported, not asserted)."""
    import keras
    import tensorflow as tf

    from tf_hetero import tfcompat

    strategy = _strategy(cluster)
    with strategy.scope():
        atomic = keras.Variable(0, dtype="int64", trainable=False)
        racy = keras.Variable(0, dtype="int64", trainable=False)
    keras_assign_add = tfcompat.keras3.variable_class().assign_add.__wrapped__

    @tf.function
    def bump():
        for _ in tf.range(40):
            atomic.assign_add(1)
            keras_assign_add(racy, 1)

    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    for _ in range(24):
        coordinator.schedule(bump)
    coordinator.join()
    assert int(atomic.numpy()) == 24 * 40
    print(f"Keras's own assign_add kept {int(racy.numpy())} of {24 * 40} increments")


# -- refused before training -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def refusing(cluster):
    """One strategy and compiled model for the refusal cases (its coordinator made here, so
    it lives for the module)."""
    import keras
    import tensorflow as tf

    strategy = _strategy(cluster)
    tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = k3.model()
        model.compile(keras.optimizers.SGD(0.1), k3.loss())
    return strategy, model


def _refusal_cases():
    def fit(**kwargs):
        def run(strategy, model, keras):
            args = dict(x=k3.rows_fn(*k3.rows(64)), epochs=1, steps_per_epoch=4, verbose=0)
            args.update(kwargs)
            model.fit(**args)
        return run

    def with_model(make):
        def run(strategy, model, keras):
            other = make(strategy, keras)
            with strategy.scope():
                other.fit(k3.rows_fn(*k3.rows(64)), epochs=1, steps_per_epoch=4, verbose=0)
        return run

    def tensorboard(**kwargs):
        def run(strategy, model, keras):
            import tempfile

            with tempfile.TemporaryDirectory() as log_dir:
                fit(callbacks=[keras.callbacks.TensorBoard(log_dir, **kwargs)])(
                    strategy, model, keras)
        return run

    def batch_callback(strategy, model, keras):
        class Printer(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                print(logs)
        fit(callbacks=[Printer()])(strategy, model, keras)

    def eager(strategy, keras):
        with strategy.scope():
            m = k3.model()
            m.compile(keras.optimizers.SGD(0.1), k3.loss(), run_eagerly=True)
        return m

    def accumulating(strategy, keras):
        with strategy.scope():
            m = k3.model()
            m.compile(keras.optimizers.SGD(0.1, gradient_accumulation_steps=2), k3.loss())
        return m

    def outside_scope(strategy, keras):
        m = k3.model()
        m.compile(keras.optimizers.SGD(0.1), k3.loss())
        return m

    def optimizer_outside_scope(strategy, keras):
        optimizer = keras.optimizers.SGD(0.1)
        with strategy.scope():
            m = k3.model()
            m.compile(optimizer, k3.loss())
        return m

    def generator(strategy, model, keras):
        x, y = k3.rows(64)
        model.fit(((x[i:i + B], y[i:i + B]) for i in range(0, 64, B)), epochs=1,
                  steps_per_epoch=4, verbose=0)

    def finite(strategy, model, keras):
        import tensorflow as tf

        x, y = k3.rows(24)
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(B), epochs=1,
                  steps_per_epoch=4, verbose=0)

    def on_batch(strategy, model, keras):
        model.train_on_batch(*k3.rows(B))

    def evaluate_without_steps(strategy, model, keras):
        model.evaluate(k3.rows_fn(*k3.rows(64)), verbose=0)

    def predict_per_worker(strategy, model, keras):
        model.predict(k3.rows_fn(*k3.rows(64)), verbose=0)

    return {
        "steps_per_epoch=None": (fit(steps_per_epoch=None), "steps_per_epoch=N"),
        "verbose=1": (fit(verbose=1), "verbose=2"),
        "batch callback": (batch_callback, "remove Printer"),
        "TensorBoard's defaults": (tensorboard(), "write_graph=False"),
        "TensorBoard per batch": (tensorboard(write_graph=False, update_freq="batch"),
                                  "TensorBoard(log_dir, update_freq='epoch')"),
        "validation without steps": (fit(validation_data=k3.rows_fn(*k3.rows(16))),
                                     "validation_steps=N"),
        "validation_split": (fit(x=k3.rows(64)[0], y=k3.rows(64)[1], validation_split=0.25),
                             "validation_data="),
        "run_eagerly": (with_model(eager), "run_eagerly=False"),
        "gradient accumulation": (with_model(accumulating), "drop gradient_accumulation_steps"),
        "model outside scope": (with_model(outside_scope), "inside `with strategy.scope():`"),
        "optimizer outside scope": (with_model(optimizer_outside_scope),
                                    "inside `with strategy.scope():`"),
        "python generator": (generator, "tf.data.Dataset"),
        "finite dataset": (finite, ".repeat()"),
        "train_on_batch": (on_batch, "model.fit("),
        "evaluate steps=None": (evaluate_without_steps, "steps=N"),
        "predict on per-worker data": (predict_per_worker, "NumPy arrays"),
    }


CASES = _refusal_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_cannot_run_on_the_workers_is_refused_before_a_step_in_one_line(refusing, case):
    import keras

    from tf_hetero.strategies.runtime.keras3.checks import Keras3PSError

    strategy, model = refusing
    run, fix = CASES[case]
    log = _log(strategy)
    with pytest.raises(Keras3PSError) as info:
        run(strategy, model, keras)
    text = str(info.value)
    assert text.startswith(PREFIX) and "\n" not in text, text
    assert fix in text.split(" Fix: ")[1], text
    assert len(log) == 0
    assert int(model.optimizer.iterations.numpy()) == 0


def test_a_worker_whose_data_runs_out_fails_the_fit_with_the_fix(cluster):
    """A dataset of unknown length (a filter) cannot be refused before; the worker that reads
    past its end fails the fit at the epoch's join with the fix, never a hang."""
    import keras
    import tensorflow as tf

    from tf_hetero.strategies.runtime.keras3.checks import Keras3PSError

    strategy = _strategy(cluster)
    with strategy.scope():
        model = k3.model()
        model.compile(keras.optimizers.SGD(0.1), k3.loss())
    x, y = k3.rows(16)

    def short(ctx=None):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(B)
        return without_autotune(ds)

    with pytest.raises(Keras3PSError, match=r"ran out .*Fix: end the dataset with "
                                            r"\.repeat\(\)"):
        model.fit(short, epochs=1, steps_per_epoch=20, verbose=0)
    model.fit(k3.rows_fn(x, y), epochs=1, steps_per_epoch=3, verbose=0)  # the next fit trains


# -- what the worker check catches ---------------------------------------------------------------

def test_the_worker_check_fails_on_steps_keras3_runs_on_the_chief(cluster):
    """What :func:`support.keras3.assert_trained_on_workers` guards against. Keras 3's own
    ``fit`` (the method tf-hetero wraps) under ``ParameterServerStrategy`` refuses arrays at
    its first batch, pulled on the chief (TF 2.21, Keras 3.15.1); should an upgrade let it
    run, it runs on the chief, and the check must fail on it. Keras 3's own
    ``train_on_batch`` does run its step on the chief: the check fails on it (the optimizer
    counted a step no worker ran)."""
    import keras

    from tf_hetero import tfcompat

    strategy = _strategy(cluster)
    with strategy.scope():
        model = k3.model()
        model.compile(keras.optimizers.SGD(0.1), k3.loss())
    log = _log(strategy)
    trainer = tfcompat.keras3.trainer_class()
    x, y = k3.rows(64)
    try:
        trainer.fit.__wrapped__(model, x, y, batch_size=B, epochs=1, steps_per_epoch=4,
                                verbose=0)
    except ValueError as e:
        assert "create_per_worker_dataset" in str(e), e
        assert int(model.optimizer.iterations.numpy()) == 0
    else:
        with pytest.raises(AssertionError, match="closures ran on the workers"):
            k3.assert_trained_on_workers(log, model, closures=4, steps=4)
    before = int(model.optimizer.iterations.numpy())
    trainer.train_on_batch.__wrapped__(model, x[:B], y[:B])
    assert int(model.optimizer.iterations.numpy()) == before + 1 and len(log) == 0
    with pytest.raises(AssertionError, match="closures ran on the workers"):
        k3.assert_trained_on_workers(log, model, closures=1, steps=before + 1)
