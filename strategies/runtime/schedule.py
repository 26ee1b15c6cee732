"""A learning-rate schedule advanced in scale-invariant iterations (AdaScale's ``tau``).

A schedule the user wrote for stock PSS counts one-batch steps: its boundaries and decays are
at step counts. Under the adaptive strategy an update is either an asynchronous one-batch
step (one step of the schedule) or a sized round whose step is ``g`` times the one-batch rate
(``g``: the round's gain); AdaScale advances the schedule by ``g`` for such an update, so the
schedule reaches its boundaries after the same progress, whatever the batch. The optimizer's
``iterations`` still counts updates; the schedule is evaluated at ``iterations + extra``, where
``extra`` (a variable beside the optimizer's) is the sum of ``g - 1`` over the rounds applied
so far. A round's apply adds its ``g - 1`` after its update
(:meth:`~tf_hetero.strategies.runtime.accumulate.Accumulators.make_apply_fn`).

>>> import tf_keras as keras
>>> base = keras.optimizers.schedules.PiecewiseConstantDecay([10], [0.1, 0.01])
>>> s = ScaleInvariantSchedule(base)
>>> round(float(s(8)), 3), s.extra.assign(3.0) is not None, round(float(s(8)), 3)  # 11 steps' progress
(0.1, True, 0.01)
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

__all__ = ["ScaleInvariantSchedule", "install"]


class ScaleInvariantSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """``base`` evaluated at ``step + extra`` (module notes)."""

    def __init__(self, base, extra: tf.Variable | None = None):
        super().__init__()
        self.base = base
        self.extra = extra if extra is not None else tf.Variable(
            0.0, trainable=False, dtype=tf.float32, name="tf_hetero_tau_extra")

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + tf.cast(self.extra, tf.float32)
        return self.base(step)

    def get_config(self):
        return {"base": keras.optimizers.schedules.serialize(self.base)}


def install(optimizer, strategy) -> tf.Variable | None:
    """If ``optimizer``'s learning rate is a schedule, makes it scale-invariant (once) and
    returns its ``extra`` variable (on a PS task, created under ``strategy``); ``None`` for a
    constant rate (nothing to advance)."""
    lr = getattr(optimizer, "learning_rate", None)
    current = getattr(optimizer, "_tf_hetero_schedule", None)
    if current is not None:
        return current.extra
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
