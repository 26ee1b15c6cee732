"""The functions a Keras 3 ``fit``/``evaluate``/``predict`` schedules on the workers.

Keras 3's own ``train_function`` (k3/backend/tensorflow/trainer.py ``_make_function``) is a
Python function that type-checks its iterator and calls a ``tf.function`` on the chief; it
cannot be scheduled. These are ``tf.function`` s of the model's public step methods, one
closure = one execution:

- train / test: ``fn(iterator, steps)`` runs ``model.train_step`` (``test_step``) on
  ``steps`` consecutive batches of the worker's iterator through ``strategy.run`` and
  returns the last step's logs (``steps`` is a scalar tensor, so a short last execution
  needs no new trace; with ``steps_per_execution == 1`` there is no loop);
- predict: ``fn(batches)`` runs ``model.predict_step`` on each batch the chief hands it and
  returns their outputs, in order.

The step methods run without AutoGraph, as Keras runs them. The model keeps them in
``train_function``/``test_function``/``predict_function`` as a :class:`ScheduledFunction`:
``compile`` resets those attributes (so a recompiled model is traced again), Keras's
SavedModel tracking does not list a plain object's function, and calling one on the chief
raises instead of training there.
"""

from __future__ import annotations

import weakref

import tensorflow as tf

__all__ = ["ScheduledFunction", "train_function", "test_function", "predict_function"]


class ScheduledFunction:
    """A step function that runs only on a worker (``coordinator.schedule(f.function,
    ...)``); ``kind`` is ``"train"``, ``"test"`` or ``"predict"``."""

    def __init__(self, kind: str, function, model):
        self.kind = kind
        self.function = function
        self._model = weakref.ref(model)
        self.steps_per_execution = int(model.steps_per_execution)

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            f"tf-hetero: this model's {self.kind} function runs on the parameter-server "
            "cluster's workers only (model.fit/evaluate/predict schedule it); calling it on "
            "the chief would train there.")


def _current(model, attribute: str, kind: str):
    fn = getattr(model, attribute, None)
    if (isinstance(fn, ScheduledFunction) and fn.kind == kind
            and fn.steps_per_execution == int(model.steps_per_execution)):
        return fn
    return None


def _stepping(model, step):
    strategy = model.distribute_strategy
    step = tf.autograph.experimental.do_not_convert(step)

    def one(iterator):
        return strategy.run(step, args=(next(iterator),))

    if int(model.steps_per_execution) == 1:
        def execution(iterator, steps):  # pylint: disable=unused-argument
            return one(iterator)
    else:
        def execution(iterator, steps):
            logs = one(iterator)
            _, logs = tf.while_loop(lambda i, _: i < steps,
                                    lambda i, _: (i + 1, one(iterator)),
                                    (tf.constant(1), logs))
            return logs
    return tf.function(execution, autograph=False)


def _scheduled(model, kind: str, make) -> ScheduledFunction:
    """The model's current ``kind`` function, or a new one from ``make()`` (once per compile)."""
    attribute = f"{kind}_function"
    fn = _current(model, attribute, kind)
    if fn is None:
        fn = ScheduledFunction(kind, make(), model)
        setattr(model, attribute, fn)
    return fn


def _predicting(model):
    strategy = model.distribute_strategy
    step = tf.autograph.experimental.do_not_convert(model.predict_step)

    def predict(batches):
        return tuple(strategy.run(step, args=(batch,)) for batch in batches)

    return tf.function(predict, autograph=False, reduce_retracing=True)


def train_function(model) -> ScheduledFunction:
    """The model's scheduled training execution (made once per compile)."""
    return _scheduled(model, "train", lambda: _stepping(model, model.train_step))


def test_function(model) -> ScheduledFunction:
    """The model's scheduled evaluation execution (made once per compile)."""
    return _scheduled(model, "test", lambda: _stepping(model, model.test_step))


def predict_function(model) -> ScheduledFunction:
    """The model's scheduled prediction of a tuple of batches (made once per compile)."""
    return _scheduled(model, "predict", lambda: _predicting(model))
