"""Keras 3 on parameter-server clusters (``strategies/runtime/keras3/``), without a cluster: the
switch (``tf_hetero.keras3.enable()``) leaves models without a parameter-server strategy and
local variables to Keras; the refusals' rules (one line: the setting, why, the fix); a
scheduled function refuses to run on the chief. The adapter's reaches:
tests/tfcompat/test_keras3.py; ``fit`` on the cluster: tests/strategies/test_stock_pss_keras3.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import tf_hetero
from tf_hetero import tfcompat
from tf_hetero.strategies.runtime.keras3 import checks

from support import LazyModule
from support import keras3 as k3

keras = LazyModule("keras")
functions = LazyModule("tf_hetero.strategies.runtime.keras3.functions")

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)


def _one_line_with_fix(error, fix):
    text = str(error)
    assert "\n" not in text and text.startswith(checks.PREFIX), text
    assert " Fix: " in text and fix in text.split(" Fix: ")[1], text


# -- the switch --------------------------------------------------------------------------------

def test_enable_wraps_once_and_leaves_models_without_a_ps_strategy_to_keras():
    tf_hetero.keras3.enable()
    wrapped = tfcompat.keras3.trainer_class().fit
    tf_hetero.keras3.enable()
    assert tf_hetero.keras3.enabled()
    assert tfcompat.keras3.trainer_class().fit is wrapped  # the second enable changed nothing
    assert wrapped.__wrapped__.__code__ is not wrapped.__code__  # Keras's fit inside, once
    x, y = k3.rows(64)
    model = k3.compiled()
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    assert int(model.optimizer.iterations.numpy()) == 8  # Keras's own loop: 4 steps an epoch
    assert model.predict(x[:5], verbose=0).shape == (5, k3.CLASSES)
    assert np.isfinite(model.evaluate(x, y, verbose=0)[0])


def test_local_variables_keep_keras_assign_add():
    tf_hetero.keras3.enable()
    v = keras.Variable(np.zeros(3, "float32"))
    v.assign_add(np.ones(3, "float32"))
    v.assign_sub(np.full(3, 0.5, "float32"))
    np.testing.assert_allclose(v.numpy(), [0.5, 0.5, 0.5])
    with keras.StatelessScope() as scope:
        v.assign_add(np.ones(3, "float32"))
        recorded = scope.get_current_value(v)
    np.testing.assert_allclose(v.numpy(), [0.5, 0.5, 0.5])  # the scope kept the update
    np.testing.assert_allclose(np.asarray(recorded), [1.5, 1.5, 1.5])


# -- the refusals' rules -----------------------------------------------------------------------

def test_fit_arguments_a_cluster_cannot_honour_are_refused_in_one_line():
    cases = [
        (dict(steps_per_epoch=None, verbose="auto"), "steps_per_epoch=N"),
        (dict(steps_per_epoch=0, verbose="auto"), "N >= 1"),
        (dict(steps_per_epoch=5, verbose=1), "verbose=2"),
        (dict(steps_per_epoch=5, verbose=2, validation_split=0.2), "validation_data="),
        (dict(steps_per_epoch=5, verbose=2, validation_data=(1, 2)), "validation_steps=N"),
    ]
    for kwargs, fix in cases:
        with pytest.raises(checks.Keras3PSError) as info:
            checks.check_fit_args(**kwargs)
        _one_line_with_fix(info.value, fix)
    checks.check_fit_args(steps_per_epoch=5, verbose=2, validation_data=(1, 2),
                          validation_steps=2)
    with pytest.raises(checks.Keras3PSError) as info:
        checks.check_steps(None, "evaluate", "auto")
    _one_line_with_fix(info.value, "steps=N")
    checks.check_steps(None, "predict", "auto")


def test_callbacks_with_batch_hooks_are_refused_by_name(tmp_path):
    class PerBatch(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    allowed = [keras.callbacks.History(), keras.callbacks.EarlyStopping(),
               keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
               keras.callbacks.ProgbarLogger(),
               keras.callbacks.ModelCheckpoint(str(tmp_path / "w.weights.h5"),
                                               save_weights_only=True),
               keras.callbacks.BackupAndRestore(str(tmp_path / "backup")),
               keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr)]
    checks.check_callbacks(allowed, "fit", validation=True)
    for callback, name, fix in [
            (PerBatch(), "PerBatch", "remove PerBatch"),
            (keras.callbacks.TerminateOnNaN(), "TerminateOnNaN", "remove TerminateOnNaN"),
            (keras.callbacks.ModelCheckpoint(str(tmp_path / "x.keras"), save_freq=10),
             "ModelCheckpoint", "save_freq='epoch'")]:
        with pytest.raises(checks.Keras3PSError) as info:
            checks.check_callbacks([callback], "fit")
        assert name in str(info.value)
        _one_line_with_fix(info.value, fix)
    checks.check_callbacks([PerBatch()], "evaluate")  # evaluate calls no train batch hook


def test_compile_settings_the_workers_cannot_run_are_refused():
    model = k3.compiled()
    checks.check_model(model, "fit")
    model.compile(keras.optimizers.SGD(0.1), "mse", run_eagerly=True)
    with pytest.raises(checks.Keras3PSError, match="run_eagerly=False"):
        checks.check_model(model, "fit")
    model.compile(keras.optimizers.SGD(0.1, gradient_accumulation_steps=2), "mse")
    with pytest.raises(checks.Keras3PSError, match="gradient_accumulation_steps"):
        checks.check_model(model, "fit")
    checks.check_model(model, "evaluate")
    model.compile(keras.optimizers.SGD(0.1), "mse")
    model.jit_compile = True
    with pytest.raises(checks.Keras3PSError, match="jit_compile=False"):
        checks.check_model(model, "fit")


def test_a_finite_dataset_a_worker_could_run_through_is_refused():
    checks.check_cardinality(-2, 10, "training")  # unknown: told at the join if it runs out
    with pytest.raises(checks.Keras3PSError, match=r"\.repeat\(\)"):
        checks.check_cardinality(9, 10, "training")


# -- the scheduled functions -------------------------------------------------------------------

def test_a_scheduled_function_refuses_to_run_on_the_chief():
    model = k3.compiled()
    fn = functions.train_function(model)
    assert model.train_function is fn and functions.train_function(model) is fn
    with pytest.raises(RuntimeError, match="workers only"):
        model.train_function(None)
    model.compile(keras.optimizers.SGD(0.1), "mse")  # compile drops it: traced again
    assert functions.train_function(model) is not fn
