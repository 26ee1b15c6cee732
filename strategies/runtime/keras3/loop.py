"""Keras 3's ``fit``, ``evaluate`` and ``predict`` loops on a parameter-server cluster.

The same loops as Keras 3's TensorFlow trainer (k3/backend/tensorflow/trainer.py), with the
driver changed, as tf_keras changes it under ``ParameterServerStrategy``:

- the data is per-worker (:mod:`.data`) and the model is built from its ``element_spec``;
- each execution of ``steps_per_execution`` steps (the last one short, so an epoch runs
  exactly ``steps_per_epoch`` steps) is one closure, ``coordinator.schedule`` d to whichever
  worker is free (:mod:`.functions`); nothing runs a step on the chief;
- an epoch ends with ``coordinator.join()``; its logs are then the model's metrics, read
  from their variables on the parameter servers (every worker's steps counted:
  :mod:`.variables` makes their ``assign_add`` atomic), or, for a custom ``train_step``
  whose logs are not the metrics, the last scheduled step's logs, fetched;
- callbacks get epoch-level hooks only (batch-level ones are refused before the first
  step: :func:`.checks.check_callbacks`); ``verbose="auto"`` is 2, one line per epoch;
- ``predict`` reads its inputs on the chief, in order, hands each execution's batches to a
  worker and concatenates the results in that order.

What cannot run is refused before anything is scheduled (:mod:`.checks`).
"""

from __future__ import annotations

import tensorflow as tf

from tf_hetero import tfcompat
from tf_hetero.strategies.runtime import fitplan, granules
from tf_hetero.strategies.runtime.keras3 import checks, data, functions

__all__ = ["fit", "evaluate", "predict", "predict_on_batch"]


def _coordinator(strategy):
    return tf.distribute.coordinator.ClusterCoordinator(strategy)


def _verbose(verbose):
    return 2 if verbose == "auto" else verbose


def _given(callbacks) -> list:
    """The callbacks a user passed: a list, ``None`` or a ``CallbackList``."""
    return list(getattr(callbacks, "callbacks", callbacks) or [])


def _callback_list(callbacks, model, *, verbose, epochs, steps, history=False):
    import keras

    if isinstance(callbacks, keras.callbacks.CallbackList):
        return callbacks
    return keras.callbacks.CallbackList(callbacks, add_history=history,
                                        add_progbar=verbose != 0, verbose=verbose,
                                        epochs=epochs, steps=steps, model=model)


def _build(model, strategy, element_spec) -> None:
    with strategy.scope():
        tfcompat.keras3.symbolic_build(model, element_spec)
    checks.check_placement(model)


def _run(coordinator, fn, iterator, steps, per_execution, what):
    """Schedules ``steps`` steps as executions and joins; returns the last closure's remote
    value (``None`` if none ran)."""
    last = None
    try:
        for n in checks.executions(steps, per_execution):
            last = coordinator.schedule(fn.function, args=(iterator, tf.constant(n, tf.int32)))
        coordinator.join()
    except tf.errors.OutOfRangeError as e:
        raise checks.data_ran_out(what, e) from e
    return last


def _logs(model, last):
    """The logs after a join: the model's metrics when the step's logs are those metrics
    (Keras's ``_get_metrics_result_or_logs``), else the last scheduled step's logs."""
    metrics = model.get_metrics_result()
    if last is None:
        return metrics
    step_logs = last.fetch()
    if isinstance(step_logs, dict) and set(step_logs) == set(metrics):
        return metrics
    return step_logs


def fit(model, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
        validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
        sample_weight=None, initial_epoch=0, steps_per_epoch=None, validation_steps=None,
        validation_batch_size=None, validation_freq=1):
    """``Model.fit`` on the workers (Keras 3's arguments and return value)."""
    tfcompat.keras3.assert_compiled(model, "fit")
    strategy = model.distribute_strategy
    checks.check_fit_args(steps_per_epoch=steps_per_epoch, verbose=verbose,
                          validation_split=validation_split, validation_data=validation_data,
                          validation_steps=validation_steps)
    checks.check_model(model, "fit")
    verbose = _verbose(verbose)
    checks.check_callbacks(_given(callbacks), "fit", validation_data is not None)
    steps_per_epoch = int(steps_per_epoch)
    coordinator = _coordinator(strategy)
    per_execution = int(model.steps_per_execution)

    train = data.per_worker(coordinator, strategy, x, y, sample_weight, batch_size,
                            class_weight, shuffle, needed=steps_per_epoch * max(epochs, 1),
                            method="fit")
    val = None
    if validation_data is not None:
        val_x, val_y, val_sw = _unpack(validation_data)
        with granules.for_evaluation(strategy):  # a sized strategy's granules: not for it
            val = data.per_worker(coordinator, strategy, val_x, val_y, val_sw,
                                  validation_batch_size or batch_size,
                                  needed=int(validation_steps) * max(epochs, 1), method="fit",
                                  what="validation")
    _build(model, strategy, train.element_spec)

    callbacks = _callback_list(callbacks, model, verbose=verbose, epochs=epochs,
                               steps=steps_per_epoch, history=True)
    model.stop_training = False
    fn = functions.train_function(model)
    callbacks.on_train_begin()
    start = tfcompat.keras3.initial_epoch(model, initial_epoch)  # after BackupAndRestore's
    if fitplan.state_of(strategy) is not None:  # a tf-hetero strategy: its fit-start line
        fitplan.note_fit(strategy, steps_per_epoch, max(epochs - start, 0), per_execution,
                         model=model)
    iterator = train.iterator()
    training_logs = None
    for epoch in range(start, epochs):
        model.reset_metrics()
        callbacks.on_epoch_begin(epoch)
        last = _run(coordinator, fn, iterator, steps_per_epoch, per_execution, "training")
        epoch_logs = dict(_logs(model, last))
        if val is not None and _should_eval(epoch, validation_freq):
            val_logs = _evaluate(model, coordinator, val, int(validation_steps), callbacks)
            epoch_logs.update({f"val_{name}": value for name, value in val_logs.items()})
        callbacks.on_epoch_end(epoch, epoch_logs)
        training_logs = epoch_logs
        if model.stop_training:
            break
    import keras

    if isinstance(model.optimizer, keras.optimizers.Optimizer) and epochs > 0:
        model.optimizer.finalize_variable_values(model.trainable_weights)
    callbacks.on_train_end(logs=training_logs)
    return model.history


def _unpack(data_):
    import keras

    if isinstance(data_, (tuple, list)):
        return keras.utils.unpack_x_y_sample_weight(tuple(data_))
    return data_, None, None


def _should_eval(epoch: int, validation_freq) -> bool:
    """Keras's rule (``Trainer._should_eval``): an int is every n-th epoch, a list the
    one-based epochs it names."""
    if isinstance(validation_freq, int):
        return (epoch + 1) % validation_freq == 0
    return (epoch + 1) in validation_freq


def _evaluate(model, coordinator, worker_data, steps, callbacks):
    fn = functions.test_function(model)
    callbacks.on_test_begin()
    model.reset_metrics()
    last = _run(coordinator, fn, worker_data.iterator(), steps, int(model.steps_per_execution),
                "evaluation")
    logs = tfcompat.keras3.pythonify_logs(_logs(model, last))
    callbacks.on_test_end(logs)
    return logs


def _prepare(model, method: str, steps, verbose, callbacks):
    """``evaluate``'s and ``predict``'s checks before anything runs; returns the strategy,
    the verbosity and the coordinator."""
    checks.check_steps(steps, method, verbose)
    checks.check_model(model, method)
    checks.check_callbacks(_given(callbacks), method)
    strategy = model.distribute_strategy
    return strategy, _verbose(verbose), _coordinator(strategy)


def evaluate(model, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
             steps=None, callbacks=None, return_dict=False, **kwargs):
    """``Model.evaluate`` on the workers (``steps`` required)."""
    tfcompat.keras3.assert_compiled(model, "evaluate")
    kwargs.pop("_use_cached_eval_dataset", None)
    if kwargs:
        raise ValueError(f"Arguments not recognized: {kwargs}")
    strategy, verbose, coordinator = _prepare(model, "evaluate", steps, verbose, callbacks)
    with granules.for_evaluation(strategy):
        worker_data = data.per_worker(coordinator, strategy, x, y, sample_weight, batch_size,
                                      needed=int(steps), method="evaluate", what="evaluation")
    _build(model, strategy, worker_data.element_spec)
    callbacks = _callback_list(callbacks, model, verbose=verbose, epochs=1, steps=int(steps))
    logs = _evaluate(model, coordinator, worker_data, int(steps), callbacks)
    if return_dict:
        return logs
    return tfcompat.keras3.flatten_metrics(model, logs)


def predict(model, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
    """``Model.predict`` with every batch computed on a worker, results in input order."""
    strategy, verbose, coordinator = _prepare(model, "predict", steps, verbose, callbacks)
    batches = data.chief_batches(x, batch_size, steps)
    if not model.built:
        with strategy.scope():
            tfcompat.keras3.symbolic_build(model, batches.element_spec)
    checks.check_placement(model)
    callbacks = _callback_list(callbacks, model, verbose=verbose, epochs=1,
                               steps=None if steps is None else int(steps))
    fn = functions.predict_function(model)
    callbacks.on_predict_begin()
    remote, group = [], []
    per_execution = int(model.steps_per_execution)
    for batch in batches:
        group.append(batch)
        if len(group) == per_execution:
            remote.append(coordinator.schedule(fn.function, args=(tuple(group),)))
            group = []
    if group:
        remote.append(coordinator.schedule(fn.function, args=(tuple(group),)))
    coordinator.join()
    outputs = [out for r in remote for out in r.fetch()]
    callbacks.on_predict_end()
    if not outputs:
        raise ValueError("Unexpected result of `predict_function` (Empty batch_outputs). "
                         "Please use `Model.compile(..., run_eagerly=True)`, or "
                         "`tf.config.run_functions_eagerly(True)` for more information "
                         "of where went wrong, or file a issue/bug to `keras`.")
    return tfcompat.keras3.concat_predictions(outputs)


def predict_on_batch(model, x):
    """``Model.predict_on_batch`` on a worker."""
    import numpy as np

    n = len(tf.nest.flatten(x)[0])
    return predict(model, x, batch_size=max(int(n), 1), verbose=0) if n else np.zeros((0,))
