"""The adapter's reaches into Keras 3's private names (``tf_hetero/tfcompat/keras3.py``) still
work on the installed Keras: each adapter function is run on real Keras 3 objects, without a
cluster, and the Keras pin is the installed version. A Keras upgrade that renames or drops one
fails here first (docs/TF_INTERNALS.md, "The adapter map"). The switch and the refusals:
tests/strategies/runtime/test_keras3.py; the cluster tests:
tests/strategies/test_stock_pss_keras3.py."""

from __future__ import annotations

import inspect
import os
import tomllib

import numpy as np
import pytest

from support import REPO, LazyModule
from support import keras3 as k3

keras = LazyModule("keras")
tf = LazyModule("tensorflow")
K3 = LazyModule("tf_hetero.tfcompat.keras3")
TFVARS = LazyModule("tf_hetero.tfcompat.variables")

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)


# -- the pin -----------------------------------------------------------------------------------

def test_keras_is_pinned_beside_tensorflow_and_is_the_installed_version():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    assert f"keras=={K3.version()}" in deps
    assert K3.version().startswith("3.") and keras.backend.backend() == "tensorflow"


# -- the classes wrapped -----------------------------------------------------------------------

def test_the_trainer_and_variable_classes_are_keras_models_and_variables():
    assert issubclass(keras.Model, K3.trainer_class())
    for name in ("fit", "evaluate", "predict", "train_on_batch", "test_on_batch",
                 "predict_on_batch"):
        assert callable(getattr(K3.trainer_class(), name))
    assert issubclass(keras.Variable, K3.variable_class())
    v = keras.Variable(1.0)
    assert isinstance(K3.inner_variable(v), tf.Variable)
    # assign_add is Keras's read-then-write (what tf-hetero makes atomic on a PS)
    assign_add = K3.variable_class().assign_add
    assert "self.assign(self + value)" in inspect.getsource(
        getattr(assign_add, "__wrapped__", assign_add))


def test_stateless_scope_is_seen():
    assert not K3.in_stateless_scope()
    with keras.StatelessScope():
        assert K3.in_stateless_scope()


# -- the trainer's helpers ---------------------------------------------------------------------

def test_a_model_is_built_from_a_datasets_element_spec_without_a_batch():
    x, y = k3.rows(64)
    spec = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).element_spec
    model = keras.Sequential([keras.layers.Dense(3)])  # no Input: unbuilt
    model.compile(keras.optimizers.Adam(), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    assert not model.built and not model.optimizer.built
    K3.symbolic_build(model, spec)
    assert model.built and model.optimizer.built
    assert [tuple(w.shape) for w in model.weights] == [(k3.FEATURES, 3), (3,)]
    assert all(m.variables for m in model.metrics)  # the loss tracker, the compiled metrics


def test_the_trainer_helpers_the_loop_calls():
    with pytest.raises(ValueError, match="compile"):
        K3.assert_compiled(k3.model(), "fit")
    model = k3.compiled()
    K3.assert_compiled(model, "fit")
    assert K3.initial_epoch(model, 3) == 3
    x, y = k3.rows(64)
    logs = model.evaluate(x, y, verbose=0, return_dict=True)
    assert K3.flatten_metrics(model, logs) == [logs["loss"], logs["accuracy"]]
    assert K3.pythonify_logs({"a": tf.constant(1.5), "b": {"c": np.float32(2)}}) == \
        {"a": 1.5, "c": 2.0}


def test_predictions_are_concatenated_in_order():
    parts = [np.arange(6).reshape(3, 2), np.arange(6, 10).reshape(2, 2)]
    out = K3.concat_predictions(parts)
    np.testing.assert_array_equal(out, np.arange(10).reshape(5, 2))
    out = K3.concat_predictions([{"a": p} for p in parts])
    np.testing.assert_array_equal(out["a"], np.arange(10).reshape(5, 2))
    for one in (parts[0], tf.constant(parts[0])):  # one batch: fetched (NumPy) or a tensor
        out = K3.concat_predictions([one])
        assert isinstance(out, np.ndarray)
        np.testing.assert_array_equal(out, parts[0])


# -- the data adapters and the callbacks' hooks ------------------------------------------------

def test_data_adapters_make_the_dataset_keras_would():
    x, y = k3.rows(10)
    assert K3.is_array_data(x, y) and not K3.is_array_data(iter([x]))
    ds = K3.tf_dataset(x, y, batch_size=4)
    assert [int(b[0].shape[0]) for b in ds] == [4, 4, 2]
    weighted = K3.tf_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(5),
                             class_weight={0: 1.0, 1: 2.0, 2: 3.0})
    _, yb, sw = next(iter(weighted))
    np.testing.assert_allclose(sw.numpy(), yb.numpy() + 1.0)


def test_the_batch_hooks_a_callback_overrides_are_found(tmp_path):
    assert K3.overridden_hooks(keras.callbacks.History()) == []
    assert K3.overridden_hooks(keras.callbacks.EarlyStopping()) == []
    assert "on_train_batch_end" in K3.overridden_hooks(
        keras.callbacks.ModelCheckpoint(str(tmp_path / "x.keras")))
    assert K3.overridden_hooks(keras.callbacks.LambdaCallback(on_epoch_end=print)) == []
    assert K3.overridden_hooks(
        keras.callbacks.LambdaCallback(on_train_batch_end=print)) == ["on_train_batch_end"]


def test_tensorboard_profiling_is_seen(tmp_path):
    assert not K3.tensorboard_profiles(keras.callbacks.TensorBoard(str(tmp_path), profile_batch=0))
    assert K3.tensorboard_profiles(keras.callbacks.TensorBoard(str(tmp_path), profile_batch=2))
    assert K3.tensorboard_profiles(keras.callbacks.TensorBoard(str(tmp_path),
                                                               profile_batch=(2, 4)))


def test_a_note_beside_an_objects_variables_in_a_weights_file_is_read_back(tmp_path):
    """``write_store_note`` / ``read_store_note`` (the saved placement of a rebalanced Keras 3
    model): an attribute of the H5 group an object's variables go to, which Keras's loader
    does not count as a variable; ``load_weights`` (wrapped by ``wrap_model``) is what
    ``BackupAndRestore`` restores through."""
    import inspect as _inspect

    import keras
    from keras.src.models.model import Model
    from keras.src.saving.saving_lib import H5IOStore

    path = str(tmp_path / "x.weights.h5")
    store = H5IOStore(path, mode="w")
    entry = store.make("optimizer", metadata={"name": "sgd"})
    entry["0"] = np.zeros(2, "float32")
    assert K3.write_store_note(entry, "note", '{"ps": [1, 0]}')
    store.close()
    store = H5IOStore(path, mode="r")
    entry = store.get("optimizer")
    assert list(entry.keys()) == ["0"]
    assert K3.read_store_note(entry, "note") == '{"ps": [1, 0]}'
    assert K3.read_store_note(entry, "other") is None
    assert K3.read_store_note(store.get("absent"), "note") is None
    store.close()
    assert "load_weights" in vars(Model)
    assert "self.model.load_weights(" in _inspect.getsource(keras.callbacks.BackupAndRestore)


def test_a_keras3_variable_is_sized_and_its_slots_found_by_the_tf_variable_it_holds():
    """``tf_variable``/``nbytes`` read the ``tf.Variable`` a Keras variable holds (a tf
    variable is its own); ``optimizer_slots`` finds a built optimizer's slots of a variable,
    given the Keras variable or its ``tf.Variable``, in the lists aligned with
    ``_trainable_variables`` (SGD's ``momentums``, Adam's two)."""
    model = k3.model()
    kernel = model.trainable_variables[0]
    inner = K3.tf_variable(kernel)
    assert isinstance(inner, tf.Variable) and inner is K3.inner_variable(kernel)
    assert K3.tf_variable(inner) is inner
    assert K3.nbytes(model.trainable_variables) == sum(w.size * 4 for w in model.get_weights())
    assert K3.nbytes([inner]) == K3.nbytes([kernel]) == kernel.numpy().size * 4
    for opt, kinds in ((keras.optimizers.SGD(0.1, momentum=0.9), ["momentums"]),
                       (keras.optimizers.Adam(), ["_momentums", "_velocities"]),
                       (keras.optimizers.SGD(0.1), [])):
        assert K3.is_optimizer(opt)
        opt.build(model.trainable_variables)
        want = [K3.tf_variable(getattr(opt, kind)[0]) for kind in kinds]
        assert K3.optimizer_slots(opt, kernel) == K3.optimizer_slots(opt, inner) == want
        assert all(w.shape == inner.shape for w in want)
        # the velocity a back-off scales: SGD's momentum only (Adam's are in gradient units)
        velocity = want if isinstance(opt, keras.optimizers.SGD) else []
        assert TFVARS.velocity_slots(opt, kernel) == velocity
    other = tf.Variable(1.0)
    assert K3.optimizer_slots(opt, other) == [] and not K3.is_optimizer(object())


def test_the_optimizer_update_every_keras3_step_goes_through_and_its_variables():
    """``apply`` of ``BaseOptimizer`` is what ``apply_gradients`` (which the TensorFlow
    trainer's ``train_step`` calls) and custom steps call (the step tracer replaces it while
    tracing a round's step);
    ``tracked_variables`` are what ``apply(grads)`` without variables updates."""
    import inspect as _inspect

    import tensorflow as tf
    import tf_keras
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    base = K3.loaded_optimizer_class()  # this module imported Keras 3
    assert base is not None and "apply" in vars(base)
    assert isinstance(keras.optimizers.SGD(0.1), base) and isinstance(keras.optimizers.Adam(), base)
    assert "self.apply(" in _inspect.getsource(base.apply_gradients)
    assert "optimizer.apply_gradients(" in _inspect.getsource(TensorFlowTrainer.train_step)
    model = k3.model()
    opt = keras.optimizers.SGD(0.1)
    opt.build(model.trainable_variables)
    assert [v.path for v in K3.tracked_variables(opt)] == [
        v.path for v in model.trainable_variables]
    assert K3.is_loss_scale_optimizer(keras.optimizers.LossScaleOptimizer(opt))
    assert not K3.is_loss_scale_optimizer(opt)
    # the LossScaleOptimizer's own `apply` (which the rounds intercept) and what it divides by
    scaler = K3.loss_scale_optimizer_class()
    assert "apply" in vars(scaler) and "_tf_apply" in vars(scaler)
    assert "self.inner_optimizer.apply(" in _inspect.getsource(scaler)
    assert K3.loss_scale(opt) is None and K3.loss_scale(tf_keras.optimizers.SGD(0.1)) is None
    assert K3.loss_scale(keras.optimizers.SGD(0.1, loss_scale_factor=8.0)) == 8.0
    lso = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9),
                                              initial_scale=64.0)
    lso.build(model.trainable_variables)
    scale = K3.loss_scale(lso)
    assert isinstance(scale, tf.Variable) and float(scale.numpy()) == 64.0
    kernel = model.trainable_variables[0]
    assert [s.shape for s in K3.optimizer_slots(lso, kernel)] == [kernel.shape]  # the inner's
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    assert K3.lr_schedule(keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(schedule))) is schedule
    trainer = K3.loss_owner_class()
    assert "_compute_loss" in vars(trainer) and isinstance(model, trainer)
    assert "self._compute_loss(" in _inspect.getsource(TensorFlowTrainer.train_step)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    assert K3.lr_schedule(keras.optimizers.SGD(schedule)) is schedule
    assert K3.lr_schedule(opt) is None
