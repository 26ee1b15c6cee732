"""Keras 3 internals ("k3" below = keras/src, keras 3.15.1 with the TensorFlow backend).

Keras 3's TensorFlow trainer has no parameter-server path: its ``fit``, ``evaluate`` and
``predict`` (k3/backend/tensorflow/trainer.py, ``TensorFlowTrainer``) pull a batch on the
chief to build the model, iterate the distributed dataset on the chief and never call
``ClusterCoordinator.schedule``. tf-hetero runs those three on the workers instead
(``strategies/runtime/keras3/``); this module is every private Keras 3 name that needs:

- the trainer class whose methods are wrapped (:func:`wrap_trainer`), and the TF backend's
  variable class whose ``assign_add``/``assign_sub`` are made atomic on a PS
  (:func:`wrap_variable`, :func:`inner_variable`, :func:`in_stateless_scope`);
- the trainer's own helpers the PS loop calls so that it behaves as Keras's loop does:
  building the model's, metrics' and optimizer's state from symbolic inputs
  (:func:`symbolic_build`), the "compile first" error, ``BackupAndRestore``'s resume epoch,
  the order of ``evaluate``'s returned list, Keras's log conversion and ``predict``'s
  concatenation (:func:`assert_compiled`, :func:`initial_epoch`, :func:`flatten_metrics`,
  :func:`pythonify_logs`, :func:`concat_predictions`);
- Keras's data adapters, which turn arrays (and a ``tf.data.Dataset`` with ``class_weight``)
  into the ``tf.data.Dataset`` Keras itself would train on (:func:`tf_dataset`,
  :func:`is_array_data`);
- which hooks of a callback are Keras's no-op defaults (:func:`overridden_hooks`).

Every function here is exercised without a cluster by ``tests/tfcompat/test_keras3.py``;
docs/TF_INTERNALS.md maps each to the Keras source it reads and to that test.
"""

from __future__ import annotations

import sys
from typing import Callable

from tf_hetero.patching import wrap_once

__all__ = ["version", "trainer_class", "wrap_trainer", "wrap_model", "write_store_note",
           "read_store_note", "variable_class", "wrap_variable",
           "inner_variable", "tf_variable", "nbytes", "is_optimizer", "optimizer_slots",
           "loss_scale_optimizer_class", "is_loss_scale_optimizer", "loss_scale",
           "in_stateless_scope", "symbolic_build",
           "assert_compiled",
           "initial_epoch", "flatten_metrics", "pythonify_logs", "concat_predictions",
           "tf_dataset", "is_array_data", "overridden_hooks", "tensorboard_profiles",
           "BATCH_HOOKS"]

# pylint: disable=protected-access

#: The batch-level hooks of ``keras.callbacks.Callback`` (k3/callbacks/callback.py), each
#: marked by Keras's ``@utils.default`` until a subclass overrides it.
BATCH_HOOKS = ("on_batch_begin", "on_batch_end", "on_train_batch_begin", "on_train_batch_end",
               "on_test_batch_begin", "on_test_batch_end", "on_predict_batch_begin",
               "on_predict_batch_end")


def version() -> str:
    """The installed Keras version (``keras.__version__``; pinned in pyproject.toml)."""
    import keras

    return keras.__version__


def trainer_class() -> type:
    """``TensorFlowTrainer`` (k3/backend/tensorflow/trainer.py): the class ``keras.Model``
    takes ``fit``, ``evaluate``, ``predict`` and the ``*_on_batch`` methods from under the
    TensorFlow backend."""
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    return TensorFlowTrainer


def wrap_trainer(name: str, make: Callable[[Callable], Callable]) -> bool:
    """Wraps ``TensorFlowTrainer.<name>`` once per process (``fit``, ``evaluate``,
    ``predict``, ``train_on_batch``, ``test_on_batch``, ``predict_on_batch``)."""
    return wrap_once(trainer_class(), name, make)


def wrap_model(name: str, make: Callable[[Callable], Callable]) -> bool:
    """Wraps ``keras.Model.<name>`` once per process (``load_weights``, k3/models/model.py,
    which ``BackupAndRestore`` and user code call)."""
    from keras.src.models.model import Model

    return wrap_once(Model, name, make)


def write_store_note(store, key: str, text: str) -> bool:
    """Writes ``text`` as attribute ``key`` of the group a Keras 3 saving store entry writes
    an object's variables to (``H5IOStore._h5_entry_group``, k3/saving/saving_lib.py: an
    ``h5py`` group, made by ``make`` when the object has a name; ``.weights.h5`` files and
    the weights inside ``.keras`` archives). An attribute is not a key: Keras's own loader
    (which checks an optimizer's key count) reads the entry as if it were not there.
    Returns whether it was written (``False``: another kind of store, e.g. ``.npz``)."""
    group = getattr(store, "_h5_entry_group", None)
    if not hasattr(group, "attrs"):
        return False
    group.attrs[key] = text
    return True


def read_store_note(store, key: str) -> str | None:
    """The attribute :func:`write_store_note` wrote, or ``None``."""
    group = getattr(store, "_h5_entry_group", None)
    value = group.attrs.get(key) if hasattr(group, "attrs") else None
    return value.decode() if isinstance(value, bytes) else value


def variable_class() -> type:
    """The TensorFlow backend's ``Variable`` (k3/backend/tensorflow/core.py, which
    ``keras.Variable`` is): a ``KerasVariable`` holding a ``tf.Variable``. Its
    ``assign_add``/``assign_sub`` come from k3/backend/common/variables.py and are
    ``self.assign(self + value)``: a read, then a write."""
    from keras.src.backend.tensorflow.core import Variable

    return Variable


def wrap_variable(name: str, make: Callable[[Callable], Callable]) -> bool:
    """Wraps ``Variable.<name>`` of the TensorFlow backend once per process."""
    return wrap_once(variable_class(), name, make)


def inner_variable(variable):
    """The ``tf.Variable`` a Keras 3 variable holds (``_value``; ``None`` before a deferred
    initialization). Under ``ParameterServerStrategy`` it is the strategy's variable (a
    ``CachingVariable`` on a PS task)."""
    return variable._value


def tf_variable(variable):
    """The ``tf.Variable`` behind ``variable``: :func:`inner_variable` of a Keras 3 variable,
    ``variable`` itself otherwise (a tf_keras model's variables are ``tf.Variable`` s). What
    code sized or placed by TensorFlow's variables (``shape.num_elements()``, ``dtype.size``,
    ``device``) reads for either Keras."""
    if "keras" in sys.modules and isinstance(variable, variable_class()):
        return inner_variable(variable)
    return variable


def nbytes(variables) -> int:
    """Bytes of ``variables`` (tf_keras or Keras 3 ones; :func:`tf_variable`)."""
    return int(sum(v.shape.num_elements() * v.dtype.size
                   for v in map(tf_variable, variables)))


def is_optimizer(optimizer) -> bool:
    """Is ``optimizer`` a Keras 3 one (``BaseOptimizer``)?"""
    base = loaded_optimizer_class()
    return base is not None and isinstance(optimizer, base)


def optimizer_slots(optimizer, variable) -> list:
    """The ``tf.Variable`` s of the slots a Keras 3 optimizer keeps for ``variable`` (a Keras
    variable or the ``tf.Variable`` it holds); ``[]`` if it has none for it. A built
    optimizer keeps each kind of slot in a list aligned with ``_trainable_variables``
    (``momentums`` of SGD, ``_momentums`` and ``_velocities`` of Adam; ``None`` where a
    variable needs none, ``overwrite_with_gradient``), found by ``_get_variable_index``
    (k3/optimizers/base_optimizer.py; keyed by the ``tf.Variable`` 's ``_unique_id``,
    k3/backend/tensorflow/optimizer.py ``_var_key``, which a PS variable's wrapper keeps
    across a move). A ``LossScaleOptimizer``'s slots are its inner optimizer's."""
    if is_loss_scale_optimizer(optimizer):
        optimizer = optimizer.inner_optimizer
    trained = getattr(optimizer, "_trainable_variables", None)
    if not trained or optimizer._var_key(variable) not in optimizer._trainable_variables_indices:
        return []
    i = optimizer._get_variable_index(variable)
    keras_variable = variable_class()
    out = []
    for value in vars(optimizer).values():
        if (isinstance(value, list) and value is not trained and len(value) == len(trained)
                and all(s is None or isinstance(s, keras_variable) for s in value)
                and value[i] is not None):
            out.append(inner_variable(value[i]))
    return out


def tensorboard_profiles(callback) -> bool:
    """Does a Keras 3 ``TensorBoard`` profile some batches (``profile_batch``: its
    ``_should_trace``, k3/callbacks/tensorboard.py ``_init_profile_batch``)?"""
    return bool(getattr(callback, "_should_trace", False))


def loaded_optimizer_class() -> type | None:
    """``BaseOptimizer`` (k3/optimizers/base_optimizer.py), whose ``apply(grads,
    trainable_variables=None)`` every Keras 3 optimizer's update goes through (its
    ``apply_gradients``, which the TensorFlow trainer's ``train_step`` calls, calls it), or
    ``None`` when this process has not imported Keras 3 (then no step can call it). The
    installed TensorFlow imports Keras 3 with itself, so under tf_keras too this is the class:
    replacing its ``apply`` during a trace leaves tf_keras's steps alone."""
    if "keras" not in sys.modules:
        return None
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    return BaseOptimizer


def loss_owner_class() -> type:
    """``Trainer`` (k3/trainers/trainer.py), whose ``_compute_loss`` the TensorFlow trainer's
    ``train_step`` calls for the step's loss (before ``optimizer.scale_loss``), as tf_keras's
    ``train_step`` hands its loss to ``minimize``."""
    from keras.src.trainers.trainer import Trainer

    return Trainer


def tracked_variables(optimizer) -> list:
    """The variables a built Keras 3 optimizer updates when ``apply`` is given gradients
    only (``BaseOptimizer._trainable_variables``)."""
    return list(optimizer._trainable_variables)


def lr_schedule(optimizer):
    """The ``keras.optimizers.schedules.LearningRateSchedule`` a Keras 3 optimizer was made
    with (``BaseOptimizer._learning_rate``; its ``learning_rate`` property returns the current
    value), or ``None``: a constant rate, or not a Keras 3 optimizer."""
    if "keras" not in sys.modules:
        return None
    from keras.optimizers.schedules import LearningRateSchedule

    if is_loss_scale_optimizer(optimizer):  # its `learning_rate` is its inner optimizer's
        optimizer = optimizer.inner_optimizer
    lr = getattr(optimizer, "_learning_rate", None)
    return lr if isinstance(lr, LearningRateSchedule) else None


def loss_scale_optimizer_class() -> type | None:
    """Keras 3's ``LossScaleOptimizer`` (k3/optimizers/loss_scale_optimizer.py), which
    overrides ``apply``: it checks the gradients, and inside an ``ops.cond`` unscales them and
    calls its inner optimizer's ``apply``, or skips the step and halves its scale. ``None``
    when this process has not imported Keras 3."""
    if "keras" not in sys.modules:
        return None
    from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer

    return LossScaleOptimizer


def is_loss_scale_optimizer(optimizer) -> bool:
    """Is ``optimizer`` Keras 3's ``LossScaleOptimizer`` (:func:`loss_scale_optimizer_class`)?"""
    cls = loss_scale_optimizer_class()
    return cls is not None and isinstance(optimizer, cls)


def loss_scale(optimizer):
    """What a Keras 3 optimizer's ``apply`` divides the gradients by, because the step
    multiplied the loss by it (``scale_loss``): a ``LossScaleOptimizer``'s ``dynamic_scale``
    (the ``tf.Variable``, which its ``apply`` changes), another optimizer's
    ``loss_scale_factor`` (a float), or ``None`` (no scaling, or not a Keras 3 optimizer)."""
    if not is_optimizer(optimizer):
        return None
    if is_loss_scale_optimizer(optimizer):
        return inner_variable(optimizer.dynamic_scale)
    return optimizer.loss_scale_factor


def in_stateless_scope() -> bool:
    """Is a ``keras.StatelessScope`` active (k3/backend/common/stateless_scope.py)? Inside
    one a variable's writes are recorded by the scope, not made: Keras's own ``assign``
    must handle them."""
    from keras.src.backend.common.stateless_scope import in_stateless_scope as inside

    return inside()


def symbolic_build(model, data_batch) -> None:
    """Builds an unbuilt model's layers, compiled metrics and loss, and its optimizer, from
    ``data_batch``: a structure of anything with ``.shape`` and ``.dtype`` (a dataset's
    ``element_spec`` of ``tf.TensorSpec``) taken as one batch of ``(x, y, sample_weight)``
    (``Trainer._symbolic_build``, k3/trainers/trainer.py; Keras's ``fit`` pulls a real batch
    for it on the chief). The caller enters the strategy's scope."""
    model._symbolic_build(data_batch=data_batch)


def assert_compiled(model, method: str) -> None:
    """Raises Keras's own ``ValueError`` if ``model`` was not compiled
    (``Trainer._assert_compile_called``)."""
    model._assert_compile_called(method)


def initial_epoch(model, default: int) -> int:
    """The epoch ``fit`` starts at: the one ``keras.callbacks.BackupAndRestore`` restored
    (``Trainer._initial_epoch``, set in its ``on_train_begin``), else ``default``. Call it
    after ``on_train_begin``, as Keras's ``fit`` reads it."""
    return model._initial_epoch or default


def flatten_metrics(model, logs: dict):
    """``evaluate``'s return value when ``return_dict=False``: the logs in the order of the
    model's metrics (``Trainer._flatten_metrics_in_order``)."""
    return model._flatten_metrics_in_order(logs)


def pythonify_logs(logs) -> dict:
    """Keras's conversion of logs to Python floats, nested dicts flattened
    (k3/utils/python_utils.py ``pythonify_logs``)."""
    from keras.src.utils.python_utils import pythonify_logs as convert

    return convert(logs)


def concat_predictions(batches: list):
    """``predict``'s result from its batches' outputs, in order, as Keras concatenates them
    (k3/backend/tensorflow/trainer.py ``potentially_ragged_concat`` and
    ``convert_to_np_if_not_ragged``: NumPy arrays, ragged where the batches disagree).
    The outputs may be NumPy arrays (what a fetched ``RemoteValue`` holds): one batch's
    comes back as it is, where Keras's conversion expects a tensor."""
    import numpy as np
    from keras.src import tree
    from keras.src.backend.tensorflow import trainer

    def to_numpy(x):
        return x if isinstance(x, np.ndarray) else trainer.convert_to_np_if_not_ragged(x)

    outputs = tree.map_structure_up_to(batches[0], lambda *parts: list(parts), *batches)
    outputs = tree.map_structure_up_to(batches[0], trainer.potentially_ragged_concat, outputs)
    return tree.map_structure(to_numpy, outputs)


def is_array_data(x, y=None, sample_weight=None) -> bool:
    """Can Keras's ``ArrayDataAdapter`` take the data (NumPy, tensors, pandas; k3/trainers/
    data_adapters/array_data_adapter.py ``can_convert_arrays``)?"""
    from keras.src.trainers.data_adapters import array_data_adapter

    return bool(array_data_adapter.can_convert_arrays((x, y, sample_weight)))


def tf_dataset(x, y=None, sample_weight=None, batch_size=None, shuffle=False,
               class_weight=None):
    """The ``tf.data.Dataset`` Keras's data adapter makes of arrays or of a
    ``tf.data.Dataset`` (k3/trainers/data_adapters/__init__.py ``get_data_adapter(...)``
    ``.get_tf_dataset()``): batches of ``batch_size`` (default 32), shuffled by index if
    asked, ``class_weight`` turned into sample weights. One pass over the data; no
    ``steps`` is given (it would change the batch size)."""
    from keras.src.trainers.data_adapters import get_data_adapter

    return get_data_adapter(x, y=y, sample_weight=sample_weight, batch_size=batch_size,
                            shuffle=shuffle, class_weight=class_weight).get_tf_dataset()


def overridden_hooks(callback, hooks=BATCH_HOOKS) -> list[str]:
    """The ``hooks`` of ``callback`` that are not Keras's no-op defaults (a hook is marked
    ``_is_default`` by ``keras.src.utils.python_utils.default`` until it is overridden; an
    instance attribute, as ``LambdaCallback`` sets, is an override too)."""
    return [name for name in hooks
            if not getattr(getattr(callback, name, None), "_is_default", False)]
