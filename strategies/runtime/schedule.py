"""A learning-rate schedule advanced in scale-invariant iterations (AdaScale's ``tau``).

A schedule the user wrote for stock PSS counts one-batch steps: its boundaries and decays are
at step counts. Under the adaptive strategy an update is either an asynchronous one-batch
step (one step of the schedule) or a sized round whose step is ``g`` times the one-batch rate
(``g``: the round's gain); AdaScale advances the schedule by ``g`` for such an update, so the
schedule reaches its boundaries after the same progress, whatever the batch. The optimizer's
``iterations`` still counts updates; the schedule is evaluated at ``iterations + extra``, where
``extra`` (a variable beside the optimizer's) is the sum of ``g - 1`` over the rounds applied
so far. A round's apply adds its ``g - 1`` after its update
(:func:`~tf_hetero.strategies.runtime.round_apply.make_apply_fn`).

>>> import tf_keras as keras
>>> base = keras.optimizers.schedules.PiecewiseConstantDecay([10], [0.1, 0.01])
>>> s = ScaleInvariantSchedule(base)
>>> round(float(s(8)), 3), s.extra.assign(3.0) is not None, round(float(s(8)), 3)  # 11 steps' progress
(0.1, True, 0.01)
"""

from __future__ import annotations

import functools

import tensorflow as tf
import tf_keras as keras

__all__ = ["ScaleInvariantSchedule", "keras3_schedule_class", "install"]


class _Shifted:
    """``base`` evaluated at ``step + extra`` (module notes); mixed into each Keras's
    ``LearningRateSchedule``."""

    def __init__(self, base, extra: tf.Variable | None = None):
        super().__init__()
        self.base = base
        self.extra = extra if extra is not None else tf.Variable(
            0.0, trainable=False, dtype=tf.float32, name="tf_hetero_tau_extra")

    def __call__(self, step):
        return self.base(tf.cast(step, tf.float32) + tf.cast(self.extra, tf.float32))


class ScaleInvariantSchedule(_Shifted, keras.optimizers.schedules.LearningRateSchedule):
    """``base`` evaluated at ``step + extra`` (module notes)."""

    def get_config(self):
        return {"base": keras.optimizers.schedules.serialize(self.base)}


@functools.lru_cache(maxsize=1)
def keras3_schedule_class() -> type:
    """:class:`ScaleInvariantSchedule` for a Keras 3 optimizer (a Keras 3
    ``LearningRateSchedule``, which its ``learning_rate`` setter takes; registered, so that a
    ``.keras`` file saved with it loads where tf_hetero is imported). Made on first use:
    Keras 3 is imported only for Keras 3 models."""
    import keras as keras3

    @keras3.saving.register_keras_serializable(package="tf_hetero")
    class ScaleInvariantSchedule3(_Shifted, keras3.optimizers.schedules.LearningRateSchedule):
        """``base`` evaluated at ``step + extra`` (module notes)."""

        def get_config(self):
            return {"base": keras3.optimizers.schedules.serialize(self.base)}

        @classmethod
        def from_config(cls, config):
            return cls(keras3.optimizers.schedules.deserialize(config["base"]))

    return ScaleInvariantSchedule3


def install(optimizer, strategy) -> tf.Variable | None:
    """If ``optimizer``'s learning rate is a schedule, makes it scale-invariant (once) and
    returns its ``extra`` variable (on a PS task, created under ``strategy``); ``None`` for a
    constant rate (nothing to advance). A Keras 3 optimizer's schedule (a
    ``LossScaleOptimizer``'s inner one's) is wrapped by :func:`keras3_schedule_class`."""
    from tf_hetero import tfcompat

    current = getattr(optimizer, "_tf_hetero_schedule", None)
    if current is not None:
        return current.extra
    if tfcompat.keras3.is_optimizer(optimizer):
        schedule = tfcompat.keras3.lr_schedule(optimizer)
        if schedule is None:
            return None
        with strategy.scope():
            wrapped = keras3_schedule_class()(schedule)
        optimizer.learning_rate = wrapped  # a LossScaleOptimizer sets its inner one's
        # our own mark, read by the round's apply (not a Keras attribute: no tracking)
        object.__setattr__(optimizer, "_tf_hetero_schedule", wrapped)
        return wrapped.extra
    lr = getattr(optimizer, "learning_rate", None)
    schedule = lr if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule) else None
    if schedule is None:
        schedule = _schedule_of(optimizer)
    if schedule is None:
        return None
    with strategy.scope():
        wrapped = ScaleInvariantSchedule(schedule)
    optimizer.learning_rate = wrapped
    optimizer._tf_hetero_schedule = wrapped  # our own mark, read by the round's apply
    return wrapped.extra


def _schedule_of(optimizer):
    """The schedule a tf_keras optimizer was built with, if its ``learning_rate`` property
    returns the current value instead (the new optimizers do, once built)."""
    from tf_hetero import tfcompat

    return tfcompat.keras.lr_schedule(optimizer)
