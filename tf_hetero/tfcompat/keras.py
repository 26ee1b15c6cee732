"""tf_keras internals ("tk" below = tf_keras/src): the data handler ``fit``/``evaluate``
build (tk/engine/data_adapter.py), the callback list (tk/callbacks.py), the optimizer base
classes (tk/optimizers/), and the frame of a running ``fit`` (tk/engine/training.py).

tf-hetero changes what tf_keras does only by wrapping these (each wrap once per process,
:func:`tf_hetero.patching.wrap_once`); the wrappers themselves live where their reason is
(``strategies/runtime/fitplan.py``, ``granules.py``, ``callbacks.py``).
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
from typing import Callable

import numpy as np

from tf_hetero.patching import wrap_once

__all__ = ["wrap_data_handler", "handler_plan", "cache_steps_per_execution", "wrap_train_begin",
           "optimizer_classes", "build_optimizer", "lr_schedule", "calling_fit", "fit_running"]

# pylint: disable=protected-access


def wrap_data_handler(make: Callable[[Callable], Callable]) -> bool:
    """Wraps ``data_adapter.get_data_handler`` (tk/engine/data_adapter.py), which ``fit``,
    ``evaluate`` and ``predict`` call (keyword arguments; ``fit`` alone passes ``shuffle=``)
    and which builds the per-worker dataset under a PS strategy."""
    from tf_keras.src.engine import data_adapter

    return wrap_once(data_adapter, "get_data_handler", make)


def handler_plan(handler) -> tuple[int, int, int] | None:
    """``(steps per epoch, epochs to run, steps per execution)`` of a data handler
    (``_inferred_steps``, ``_epochs - _initial_epoch``, ``_steps_per_execution``), or
    ``None`` when the epoch length is unknown (a dataset without ``steps_per_epoch``)."""
    try:
        per_epoch = int(handler._inferred_steps)
        epochs = int(handler._epochs) - int(handler._initial_epoch)
        per_execution = int(handler._steps_per_execution.numpy())
    except (AttributeError, TypeError, ValueError):
        return None
    return per_epoch, epochs, per_execution


class _CachedCounter:
    """A data handler's ``steps_per_execution`` variable, its value read once and kept in
    step with what the handler assigns through it (the last partial execution of an epoch,
    then back). Everything else goes to the variable."""

    def __init__(self, variable):
        self._variable = variable
        self._value = variable.numpy()

    def numpy(self):
        return self._value

    def assign(self, value, *args, **kwargs):
        result = self._variable.assign(value, *args, **kwargs)
        self._value = np.asarray(value, dtype=self._value.dtype)
        return result

    def __getattr__(self, name):
        return getattr(self._variable, name)


def cache_steps_per_execution(handler) -> bool:
    """Makes a data handler read its ``_steps_per_execution`` once instead of at every step
    (``DataHandler.steps`` calls ``.numpy()`` on it before each step it yields): under a PS
    strategy that variable lives on a PS task, so each read was a round trip from ``fit``'s
    thread, and after a PS death the first thing to meet it (the clear error before the
    failover could take a step's failure). Returns whether it did."""
    variable = getattr(handler, "_steps_per_execution", None)
    if variable is None or isinstance(variable, _CachedCounter):
        return False
    handler._steps_per_execution = _CachedCounter(variable)
    return True


def wrap_train_begin(make: Callable[[Callable], Callable]) -> bool:
    """Wraps ``CallbackList.on_train_begin`` (tk/callbacks.py), called once per ``fit``
    before its first step."""
    from tf_keras.src.callbacks import CallbackList

    return wrap_once(CallbackList, "on_train_begin", make)


def optimizer_classes() -> list[type]:
    """The tf_keras optimizer base classes whose ``apply_gradients`` a training step may
    call: the optimizer (tk/optimizers/optimizer.py) and the legacy ``OptimizerV2``
    (tk/optimizers/legacy/optimizer_v2.py)."""
    from tf_keras.src.optimizers import optimizer as new_opt
    from tf_keras.src.optimizers.legacy import optimizer_v2

    return [new_opt.Optimizer, optimizer_v2.OptimizerV2]


def build_optimizer(optimizer, variables) -> bool:
    """Creates a tf_keras optimizer's variables for ``variables`` (its slots: momentum and
    the like) now, as its ``apply_gradients`` does on its first call: under the optimizer's
    name scope, lifted out of any graph (tk/optimizers/optimizer.py ~713; ``build`` does
    nothing once built). Call it under the strategy's scope, where the apply runs.

    Why: a ``tf.function`` whose first trace creates variables is traced a second time
    before it can run (the trace that must not create any), so a step or an apply traced
    with an unbuilt optimizer is traced twice (docs/TF_INTERNALS.md, "Where a fit's first
    second goes"). Returns ``False`` for the optimizers it leaves to build themselves,
    inside the trace, as before: all but the new one (tk/optimizers/optimizer.py), i.e. a
    legacy ``OptimizerV2`` (its ``_create_all_weights`` is private) and a
    ``LossScaleOptimizer`` (a wrapper whose inner optimizer builds in its own
    ``apply_gradients``).
    """
    import tensorflow as tf
    from tf_keras.src.mixed_precision.loss_scale_optimizer import BaseLossScaleOptimizer
    from tf_keras.src.optimizers import optimizer as new_opt

    if (not isinstance(optimizer, new_opt.Optimizer)
            or isinstance(optimizer, BaseLossScaleOptimizer)):
        return False
    with tf.name_scope(optimizer.name or "optimizer"):
        with tf.init_scope():
            optimizer.build(list(variables))
    return True


def lr_schedule(optimizer):
    """The ``LearningRateSchedule`` a tf_keras optimizer was made with, or ``None`` (a
    constant rate). The new optimizers keep it in ``_learning_rate`` (their
    ``learning_rate`` property returns its current value once built:
    tk/optimizers/optimizer.py ~335); the legacy ones in ``_hyper["learning_rate"]``
    (tk/optimizers/legacy/optimizer_v2.py)."""
    from tf_keras.optimizers.schedules import LearningRateSchedule

    lr = getattr(optimizer, "_learning_rate", None)
    if lr is None:
        lr = getattr(optimizer, "_hyper", {}).get("learning_rate")
    return lr if isinstance(lr, LearningRateSchedule) else None


def calling_fit():
    """``(thread id, frame)`` of the ``fit`` call on this thread's stack: tf_keras's
    (``Model.fit`` in tk/engine/training.py) or, for a Keras 3 model on a PS cluster,
    tf-hetero's Keras 3 loop (``strategies/runtime/keras3/loop.py``); ``None`` (e.g. a
    callback driven by hand)."""
    frame = inspect.currentframe().f_back
    while frame is not None:
        code = frame.f_code
        if code.co_name == "fit" and ("tf_keras" in code.co_filename
                                      or code.co_filename.endswith(_KERAS3_LOOP)):
            return threading.get_ident(), frame
        frame = frame.f_back
    return None


_KERAS3_LOOP = os.path.join("runtime", "keras3", "loop.py")


def fit_running(fit) -> bool:
    """True while ``fit`` (from :func:`calling_fit`) is still on its thread's stack (a fit
    that raises calls no ``on_train_end``). ``sys._current_frames`` is CPython's documented
    way to see another thread's stack."""
    if fit is None:
        return True
    ident, target = fit
    frame = sys._current_frames().get(ident)
    while frame is not None:
        if frame is target:
            return True
        frame = frame.f_back
    return False
